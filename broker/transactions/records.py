"""`__transaction_state` records in Kafka's format (transaction-coordinator's TransactionLogKey and
TransactionLogValue): the key is an int16 version (0) and the transactional id; the value an
int16 version, written as 0 (the non-flexible version Kafka writes for transaction version 1
clients), read as 0 or 1. A null value is a tombstone (the id expired)."""

from __future__ import annotations

from dataclasses import dataclass

from sharebroker.protocol.primitives import Reader, Writer

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int  # TxnState value
    partitions: frozenset[TopicPartition]
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1  # tagged in v1 only


def encode_key(transactional_id: str) -> bytes:
    w = Writer()
    w.i16(0)
    w.string(transactional_id)
    return bytes(w.out)


def encode_value(v: TxnLogValue) -> bytes:
    w = Writer()
    w.i16(0)
    w.i64(v.producer_id)
    w.i16(v.producer_epoch)
    w.i32(v.timeout_ms)
    w.i8(v.status)
    by_topic: dict[str, list[int]] = {}
    for topic, partition in v.partitions:
        by_topic.setdefault(topic, []).append(partition)
    w.i32(len(by_topic))
    for topic in sorted(by_topic):
        w.string(topic)
        parts = sorted(by_topic[topic])
        w.i32(len(parts))
        for p in parts:
            w.i32(p)
    w.i64(v.last_update_ms)
    w.i64(v.start_ms)
    return bytes(w.out)


def decode_key(key: bytes) -> str:
    r = Reader(key)
    version = r.i16()
    if version != 0:
        raise ValueError(f"unknown TransactionLogKey version {version}")
    txn_id = r.string()
    if txn_id is None:
        raise ValueError("TransactionLogKey without a transactional id")
    return txn_id


def decode_value(value: bytes) -> TxnLogValue:
    r = Reader(value)
    version = r.i16()
    if version not in (0, 1):
        raise ValueError(f"unknown TransactionLogValue version {version}")
    flexible = version >= 1
    pid = r.i64()
    epoch = r.i16()
    timeout = r.i32()
    status = r.i8()
    partitions: set[TopicPartition] = set()
    count = r.array_len(flexible)
    for _ in range(max(count, 0)):
        topic = r.string(flexible) or ""
        for _ in range(r.array_len(flexible)):
            partitions.add((topic, r.i32()))
        if flexible:
            r.skip_tags()
    last_update = r.i64()
    start = r.i64()
    previous = -1
    if flexible:
        for tag, data in r.tags():
            if tag == 0 and len(data) == 8:
                previous = int.from_bytes(data, "big", signed=True)
    return TxnLogValue(pid, epoch, timeout, status, frozenset(partitions), last_update, start, previous)
