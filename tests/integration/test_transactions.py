"""Transactions (transaction version 1): the PyPI clients' transactional producers and
read_committed consumers, the last stable offset, zombie fencing, timeouts, a producer killed in a
transaction, and the coordinator's error answers over raw frames, each against Kafka's codes."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import os
import select
import signal
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import crc32c
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from sharebroker.testing import wait_for
from tests.brokers import module_broker
from tests.integration import rawkafka as rk
from tests.integration.clients import consumer_conf, create_topic, produce_sync, producer_conf

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
TOPIC_AUTHORIZATION_FAILED = 29
INVALID_REQUEST = 42
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
OPERATION_NOT_ATTEMPTED = 55
PRODUCER_FENCED = 90
TRANSACTIONAL_ID_NOT_FOUND = 105
TRANSACTION_ABORTABLE = 120

COMMIT_MARKER, ABORT_MARKER = 1, 0
TRANSACTIONAL_BIT, CONTROL_BIT = 0x10, 0x20
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
SCRIPT = Path(__file__).with_name("txn_producer_script.py")


def txn_id(prefix: str = "txn") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# --------------------------------------------------------------------------------------------
# Raw requests (shared with test_transaction_admin.py and the recovery tests)


def init_pid(raw: rk.RawClient, transactional_id: str | None, timeout_ms: int = 60000, version: int = 4,
             producer_id: int = -1, producer_epoch: int = -1) -> Any:
    cls = rk.req_cls(22, version)
    return raw.request(cls(**rk._fit(cls, {"transactional_id": transactional_id,
                                            "transaction_timeout": datetime.timedelta(milliseconds=timeout_ms),
                                            "producer_id": producer_id, "producer_epoch": producer_epoch})))


def init_ok(raw: rk.RawClient, transactional_id: str, timeout_ms: int = 60000) -> tuple[int, int]:
    """InitProducerId retried while the coordinator answers CONCURRENT_TRANSACTIONS (as clients do)."""
    def attempt() -> Any:
        r = init_pid(raw, transactional_id, timeout_ms)
        return r if int(r.error_code) != CONCURRENT_TRANSACTIONS else None

    r = wait_for(attempt, 10, 0.05, "InitProducerId without CONCURRENT_TRANSACTIONS")
    assert int(r.error_code) == NONE, r
    return r.producer_id, r.producer_epoch


def add_partitions(raw: rk.RawClient, transactional_id: str, pid: int, epoch: int,
                   partitions: dict[str, list[int]], version: int = 3,
                   verify_only: bool = False) -> dict[tuple[str, int], int]:
    """AddPartitionsToTxn; the error code of each partition."""
    cls = rk.req_cls(24, version)
    if version < 4:
        tcls = rk._nested(cls, "v3_and_below_topics")
        req = cls(v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=pid,
                  v3_and_below_producer_epoch=epoch,
                  v3_and_below_topics=tuple(tcls(name=t, partitions=tuple(ps)) for t, ps in partitions.items()))
        resp = raw.request(req)
        results = resp.results_by_topic_v3_and_below
    else:
        xcls = rk._nested(cls, "transactions")
        tcls = rk._nested(xcls, "topics")
        txn = xcls(transactional_id=transactional_id, producer_id=pid, producer_epoch=epoch, verify_only=verify_only,
                   topics=tuple(tcls(name=t, partitions=tuple(ps)) for t, ps in partitions.items()))
        resp = raw.request(cls(transactions=(txn,)))
        assert int(resp.error_code) == NONE, resp
        (result,) = resp.results_by_transaction
        assert result.transactional_id == transactional_id
        results = result.topic_results
    return {(t.name, p.partition_index): int(p.partition_error_code) for t in results for p in t.results_by_partition}


def end_txn(raw: rk.RawClient, transactional_id: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
    cls = rk.req_cls(26, version)
    resp = raw.request(cls(transactional_id=transactional_id, producer_id=pid, producer_epoch=epoch,
                           committed=commit))
    return int(resp.error_code)


def describe_txns(raw: rk.RawClient, *ids: str) -> tuple[Any, ...]:
    """DescribeTransactions v0 (protocol.client reads the answer: kio refuses the start time -1
    Kafka answers for a transaction that has not started)."""
    return raw.request(rk.req_cls(65, 0)(transactional_ids=tuple(ids))).transaction_states


def describe_txn(bootstrap: str, transactional_id: str) -> Any:
    with rk.RawClient(bootstrap) as raw:
        (state,) = describe_txns(raw, transactional_id)
    return state


def txn_batch(pid: int, epoch: int, seq: int, values: list[bytes]) -> bytes:
    """A transactional record batch v2 (attribute bit 4 set, CRC recomputed)."""
    buf = bytearray(rk.encode_batch([rk.Rec(v) for v in values], producer_id=pid, producer_epoch=epoch,
                                    base_sequence=seq))
    (attrs,) = struct.unpack_from(">h", buf, 21)
    struct.pack_into(">h", buf, 21, attrs | TRANSACTIONAL_BIT)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


def produce_raw(raw: rk.RawClient, topic: str, partition: int, records: bytes, transactional_id: str | None,
                version: int = 9) -> Any:
    req = dataclasses.replace(rk.produce_request(topic, partition, records, version=version),
                              transactional_id=transactional_id)
    (t,) = raw.request(req).responses
    (p,) = t.partition_responses
    return p


def fetch_raw(raw: rk.RawClient, topic: str, partition: int, offset: int, isolation: int,
              max_bytes: int = 1 << 20) -> Any:
    req = dataclasses.replace(rk.fetch_request(topic, partition, offset, max_bytes=max_bytes, version=12),
                              isolation_level=isolation)
    resp = raw.request(req)
    assert int(resp.error_code) == NONE, resp
    (t,) = resp.responses
    (p,) = t.partitions
    assert int(p.error_code) == NONE, p
    return p


def list_offset(raw: rk.RawClient, topic: str, partition: int, isolation: int, timestamp: int = -1,
                version: int = 7) -> int:
    cls = rk.req_cls(2, version)
    tcls = rk._nested(cls, "topics")
    pcls = rk._nested(tcls, "partitions")
    p = pcls(**rk._fit(pcls, {"partition_index": partition, "current_leader_epoch": -1, "timestamp": timestamp,
                              "max_num_offsets": 1}))
    req = cls(**rk._fit(cls, {"replica_id": -1, "isolation_level": isolation,
                              "topics": (tcls(name=topic, partitions=(p,)),), "timeout_ms": 5000}))
    (t,) = raw.request(req).topics
    (pr,) = t.partitions
    assert int(pr.error_code) == NONE, pr
    return pr.offset


def offsets(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    """(last stable offset, high watermark) as ListOffsets answers them."""
    with rk.RawClient(bootstrap) as raw:
        return (list_offset(raw, topic, partition, READ_COMMITTED), list_offset(raw, topic, partition, READ_UNCOMMITTED))


def marker_kind(batch: rk.Batch) -> int:
    """COMMIT_MARKER or ABORT_MARKER for a control batch (its one record's key: version, type)."""
    (rec,) = batch.records()
    version, kind = struct.unpack(">hh", rec.key)
    assert version == 0
    return kind


def txn_producer(bootstrap: str, transactional_id: str, **extra: Any) -> Producer:
    return Producer(producer_conf(bootstrap, **{"transactional.id": transactional_id, **extra}))


def kafka_error(exc: KafkaException) -> KafkaError:
    err = exc.args[0]
    assert isinstance(err, KafkaError), exc
    return err


# --------------------------------------------------------------------------------------------
# Consumers: everything up to the end of each partition (the LSO for read_committed)


def confluent_read(bootstrap: str, topic: str, partitions: list[int], isolation: str,
                   timeout: float = 15.0) -> dict[int, list[bytes]]:
    """Values per partition from the beginning until the consumer reports the partition's end."""
    c = Consumer(consumer_conf(bootstrap, **{"isolation.level": isolation, "enable.partition.eof": True}))
    got: dict[int, list[bytes]] = {p: [] for p in partitions}
    at_end: set[int] = set()
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = time.monotonic() + timeout
        while at_end != set(partitions):
            assert time.monotonic() < deadline, f"partitions {set(partitions) - at_end} not read to their end"
            msg = c.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                raise AssertionError(f"consumer error: {msg.error()}")
            at_end.discard(msg.partition())
            got[msg.partition()].append(msg.value())
    finally:
        c.close()
    return got


def kafka_python_read(bootstrap: str, topic: str, ends: dict[int, int], timeout: float = 15.0) -> dict[int, list[bytes]]:
    """read_committed from the beginning until each partition's position reaches `ends`."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False,
                      auto_offset_reset="earliest", request_timeout_ms=10000, fetch_max_wait_ms=100)
    got: dict[int, list[bytes]] = {p: [] for p in ends}
    try:
        tps = [KTP(topic, p) for p in ends]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout
        while any(c.position(tp) < ends[tp.partition] for tp in tps):
            assert time.monotonic() < deadline, {tp.partition: c.position(tp) for tp in tps}
            for tp, msgs in c.poll(timeout_ms=200).items():
                got[tp.partition].extend(m.value for m in msgs)
    finally:
        c.close()
    return got


async def _aiokafka_read(bootstrap: str, topic: str, ends: dict[int, int], timeout: float) -> dict[int, list[bytes]]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False,
                         auto_offset_reset="earliest", fetch_max_wait_ms=100)
    got: dict[int, list[bytes]] = {p: [] for p in ends}
    await c.start()
    try:
        tps = [ATP(topic, p) for p in ends]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout
        while True:
            positions = {tp.partition: await c.position(tp) for tp in tps}
            if all(positions[p] >= end for p, end in ends.items()):
                break
            assert time.monotonic() < deadline, positions
            for tp, msgs in (await c.getmany(*tps, timeout_ms=200)).items():
                got[tp.partition].extend(m.value for m in msgs)
    finally:
        await c.stop()
    return got


def aiokafka_read(bootstrap: str, topic: str, ends: dict[int, int], timeout: float = 15.0) -> dict[int, list[bytes]]:
    return asyncio.run(_aiokafka_read(bootstrap, topic, ends, timeout))


# --------------------------------------------------------------------------------------------
# 1. commit, abort, commit across two partitions; every client's read_committed view


def _commit_abort_commit(bootstrap: str, topic: str, tid: str) -> Producer:
    p = txn_producer(bootstrap, tid)
    p.init_transactions(15)
    for values, commit in (({0: [b"c1-a", b"c1-b"], 1: [b"c1-c"]}, True),
                           ({0: [b"a2-a", b"a2-b"], 1: [b"a2-c"]}, False),
                           ({0: [b"c3-a"], 1: [b"c3-b", b"c3-c"]}, True)):
        p.begin_transaction()
        for partition, vals in values.items():
            for v in vals:
                p.produce(topic, value=v, partition=partition)
        assert p.flush(15) == 0
        if commit:
            p.commit_transaction(15)
        else:
            p.abort_transaction(15)
    return p


COMMITTED = {0: [b"c1-a", b"c1-b", b"c3-a"], 1: [b"c1-c", b"c3-b", b"c3-c"]}
EVERYTHING = {0: [b"c1-a", b"c1-b", b"a2-a", b"a2-b", b"c3-a"], 1: [b"c1-c", b"a2-c", b"c3-b", b"c3-c"]}
# offsets: records, then the marker of each transaction
MARKERS = {0: {2: COMMIT_MARKER, 5: ABORT_MARKER, 7: COMMIT_MARKER}, 1: {1: COMMIT_MARKER, 3: ABORT_MARKER,
                                                                          6: COMMIT_MARKER}}
ABORTED_FIRST = {0: 3, 1: 2}
ENDS = {0: 8, 1: 7}


@pytest.fixture(scope="module")
def committed_topic(broker) -> tuple[str, int]:
    """A two-partition topic holding commit, abort, commit of one transactional producer; its
    producer id."""
    topic = f"txn-cac-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, partitions=2)
    tid = txn_id()
    _commit_abort_commit(broker.bootstrap, topic, tid)
    pid = describe_txn(broker.bootstrap, tid).producer_id
    return topic, pid


def test_commit_abort_commit_log_layout_and_offsets(broker, committed_topic):
    topic, pid = committed_topic
    with rk.RawClient(broker.bootstrap) as raw:
        for partition in (0, 1):
            batches = rk.fetch_all_batches(raw, topic, partition)
            data = [b for b in batches if not b.is_control]
            controls = [b for b in batches if b.is_control]
            assert [(r.offset, r.value) for r in rk.records_of(batches)] == [
                (o, v) for o, v in zip([o for o in range(ENDS[partition]) if o not in MARKERS[partition]],
                                       EVERYTHING[partition])]
            assert all(b.attributes & TRANSACTIONAL_BIT and b.producer_id == pid for b in data)
            assert {b.base_offset: marker_kind(b) for b in controls} == MARKERS[partition]
            assert all(b.attributes & TRANSACTIONAL_BIT and b.producer_id == pid and b.record_count == 1
                       for b in controls)
            assert list_offset(raw, topic, partition, READ_UNCOMMITTED) == ENDS[partition]
            assert list_offset(raw, topic, partition, READ_COMMITTED) == ENDS[partition]


def test_raw_fetch_read_committed_lists_the_aborted_transaction(broker, committed_topic):
    topic, pid = committed_topic
    with rk.RawClient(broker.bootstrap) as raw:
        for partition in (0, 1):
            p = fetch_raw(raw, topic, partition, 0, READ_COMMITTED)
            assert (p.high_watermark, p.last_stable_offset) == (ENDS[partition], ENDS[partition])
            assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions or ()] == [
                (pid, ABORTED_FIRST[partition])]
            # the records themselves are all there: the consumer drops the aborted ones
            got = rk.parse_batches(p.records)
            assert {b.base_offset for b in got if b.is_control} == set(MARKERS[partition])
            # read_uncommitted answers no aborted transactions at all (null)
            pu = fetch_raw(raw, topic, partition, 0, READ_UNCOMMITTED)
            assert not pu.aborted_transactions
            # past the aborted transaction nothing is listed
            pl = fetch_raw(raw, topic, partition, max(MARKERS[partition]) , READ_COMMITTED)
            assert not pl.aborted_transactions


def test_confluent_consumers_read_committed_and_uncommitted(broker, committed_topic):
    topic, _ = committed_topic
    assert confluent_read(broker.bootstrap, topic, [0, 1], "read_committed") == COMMITTED
    assert confluent_read(broker.bootstrap, topic, [0, 1], "read_uncommitted") == EVERYTHING


def test_kafka_python_consumer_read_committed(broker, committed_topic):
    topic, _ = committed_topic
    assert kafka_python_read(broker.bootstrap, topic, ENDS) == COMMITTED


def test_aiokafka_consumer_read_committed(broker, committed_topic):
    topic, _ = committed_topic
    assert aiokafka_read(broker.bootstrap, topic, ENDS) == COMMITTED


# --------------------------------------------------------------------------------------------
# 2. an open transaction holds the last stable offset


@pytest.mark.parametrize("list_offsets_version", [2, 7, 9])
def test_open_transaction_holds_the_last_stable_offset(broker, topic_name, list_offsets_version):
    create_topic(broker.bootstrap, topic_name)
    produce_sync(Producer(producer_conf(broker.bootstrap)), topic_name,
                 [{"value": b"plain-%d" % i, "partition": 0} for i in range(3)])
    p = txn_producer(broker.bootstrap, txn_id())
    p.init_transactions(15)
    p.begin_transaction()
    future = int(time.time() * 1000) + 60_000
    for i in range(2):
        p.produce(topic_name, value=b"open-%d" % i, partition=0, timestamp=future)
    assert p.flush(15) == 0
    with rk.RawClient(broker.bootstrap) as raw:
        assert list_offset(raw, topic_name, 0, READ_COMMITTED, version=list_offsets_version) == 3
        assert list_offset(raw, topic_name, 0, READ_UNCOMMITTED, version=list_offsets_version) == 5
        # a timestamp lookup answers nothing at or past the LSO for read_committed
        assert list_offset(raw, topic_name, 0, READ_UNCOMMITTED, timestamp=future, version=list_offsets_version) == 3
        assert list_offset(raw, topic_name, 0, READ_COMMITTED, timestamp=future, version=list_offsets_version) == -1
        assert list_offset(raw, topic_name, 0, READ_COMMITTED, timestamp=-2, version=list_offsets_version) == 0
        f = fetch_raw(raw, topic_name, 0, 0, READ_COMMITTED)
        assert (f.high_watermark, f.last_stable_offset) == (5, 3)
        got = rk.parse_batches(f.records)
        assert got and max(b.last_offset for b in got) < 3, [(b.base_offset, b.last_offset) for b in got]
        f = fetch_raw(raw, topic_name, 0, 3, READ_COMMITTED)
        assert (f.high_watermark, f.last_stable_offset) == (5, 3)
        assert not rk.parse_batches(f.records)
        # read_uncommitted sees the open transaction's records
        fu = fetch_raw(raw, topic_name, 0, 3, READ_UNCOMMITTED)
        assert [r.value for r in rk.records_of(rk.parse_batches(fu.records))] == [b"open-0", b"open-1"]

        p.commit_transaction(15)
        assert list_offset(raw, topic_name, 0, READ_COMMITTED, version=list_offsets_version) == 6
        assert list_offset(raw, topic_name, 0, READ_COMMITTED, timestamp=future, version=list_offsets_version) == 3
        assert list_offset(raw, topic_name, 0, READ_UNCOMMITTED, version=list_offsets_version) == 6
        f = fetch_raw(raw, topic_name, 0, 3, READ_COMMITTED)
        assert (f.high_watermark, f.last_stable_offset) == (6, 6)
        assert [r.value for r in rk.records_of(rk.parse_batches(f.records))] == [b"open-0", b"open-1"]


def test_interleaved_transactions_of_two_producers(broker, topic_name):
    """The LSO is the first offset of the oldest open transaction; an aborted transaction
    interleaved with a committed one is skipped record by record."""
    create_topic(broker.bootstrap, topic_name)
    b_id = txn_id("b")
    a = txn_producer(broker.bootstrap, txn_id("a"))
    b = txn_producer(broker.bootstrap, b_id)
    a.init_transactions(15)
    b.init_transactions(15)
    a.begin_transaction()
    b.begin_transaction()
    for producer, value in ((a, b"a-0"), (b, b"b-0"), (a, b"a-1")):
        producer.produce(topic_name, value=value, partition=0)
        assert producer.flush(15) == 0
    assert offsets(broker.bootstrap, topic_name) == (0, 3)
    a.commit_transaction(15)  # marker at 3; b's transaction (from 1) still open
    assert offsets(broker.bootstrap, topic_name) == (1, 4)
    b.produce(topic_name, value=b"b-1", partition=0)
    assert b.flush(15) == 0
    assert offsets(broker.bootstrap, topic_name) == (1, 5)
    with rk.RawClient(broker.bootstrap) as raw:
        f = fetch_raw(raw, topic_name, 0, 0, READ_COMMITTED)
        assert (f.last_stable_offset, f.high_watermark) == (1, 5)
        assert max(bt.last_offset for bt in rk.parse_batches(f.records)) < 1
    b.abort_transaction(15)  # marker at 5
    assert offsets(broker.bootstrap, topic_name) == (6, 6)
    b_pid = describe_txn(broker.bootstrap, b_id).producer_id
    with rk.RawClient(broker.bootstrap) as raw:
        f = fetch_raw(raw, topic_name, 0, 0, READ_COMMITTED)
        assert [(x.producer_id, x.first_offset) for x in f.aborted_transactions or ()] == [(b_pid, 1)]
    expected = {0: [b"a-0", b"a-1"]}
    assert confluent_read(broker.bootstrap, topic_name, [0], "read_committed") == expected
    assert kafka_python_read(broker.bootstrap, topic_name, {0: 6}) == expected
    assert aiokafka_read(broker.bootstrap, topic_name, {0: 6}) == expected


# --------------------------------------------------------------------------------------------
# 3. zombie fencing


def test_reinitialised_producer_fences_the_zombie(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    tid = txn_id()
    a = txn_producer(broker.bootstrap, tid)
    a.init_transactions(15)
    a.begin_transaction()
    for i in range(3):
        a.produce(topic_name, value=b"zombie-%d" % i, partition=0)
    assert a.flush(15) == 0
    before = describe_txn(broker.bootstrap, tid)
    assert before.transaction_state == "Ongoing"

    b = txn_producer(broker.bootstrap, tid)
    b.init_transactions(15)  # aborts A's transaction with a bumped epoch, then bumps it again
    after = describe_txn(broker.bootstrap, tid)
    assert (after.producer_id, after.transaction_state) == (before.producer_id, "Empty")
    assert after.producer_epoch == before.producer_epoch + 2, (before.producer_epoch, after.producer_epoch)
    assert offsets(broker.bootstrap, topic_name) == (4, 4)  # 3 records + abort marker

    with pytest.raises(KafkaException) as info:
        a.commit_transaction(10)
    err = kafka_error(info.value)
    assert err.fatal(), err
    assert err.code() == KafkaError._FENCED, err

    b.begin_transaction()
    b.produce(topic_name, value=b"b-0", partition=0)
    b.commit_transaction(15)
    with rk.RawClient(broker.bootstrap) as raw:
        batches = rk.fetch_all_batches(raw, topic_name, 0)
    markers = {bt.base_offset: (marker_kind(bt), bt.producer_epoch) for bt in batches if bt.is_control}
    assert markers == {3: (ABORT_MARKER, before.producer_epoch + 1), 5: (COMMIT_MARKER, after.producer_epoch)}
    assert confluent_read(broker.bootstrap, topic_name, [0], "read_committed") == {0: [b"b-0"]}


# --------------------------------------------------------------------------------------------
# 4. transaction timeout


@pytest.fixture(scope="module")
def fast_timeout_broker(tmp_path_factory):
    yield from module_broker(tmp_path_factory, "txn-timeouts",
                             {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 200})


def test_timed_out_transaction_is_aborted_and_the_producer_fenced(fast_timeout_broker, topic_name):
    bootstrap = fast_timeout_broker.bootstrap
    create_topic(bootstrap, topic_name)
    tid = txn_id()
    p = txn_producer(bootstrap, tid, **{"transaction.timeout.ms": 1000, "socket.timeout.ms": 1000,
                                        "request.timeout.ms": 1000, "message.timeout.ms": 1000})
    p.init_transactions(15)
    p.begin_transaction()
    p.produce(topic_name, value=b"late-0", partition=0)
    p.produce(topic_name, value=b"late-1", partition=0)
    assert p.flush(15) == 0
    before = describe_txn(bootstrap, tid)
    assert before.transaction_state == "Ongoing"
    assert before.transaction_timeout_ms == 1000
    assert offsets(bootstrap, topic_name) == (0, 2)

    wait_for(lambda: offsets(bootstrap, topic_name) == (3, 3), 10, 0.05, "the timed-out transaction aborted")
    after = wait_for(lambda: (s := describe_txn(bootstrap, tid)).transaction_state == "CompleteAbort" and s,
                     10, 0.05, "CompleteAbort")
    assert (after.producer_id, after.producer_epoch) == (before.producer_id, before.producer_epoch + 1)
    assert after.topics == ()

    with pytest.raises(KafkaException) as info:
        p.commit_transaction(10)
    err = kafka_error(info.value)
    assert err.fatal() and err.code() == KafkaError._FENCED, err
    with rk.RawClient(bootstrap) as raw:
        (marker,) = [b for b in rk.fetch_all_batches(raw, topic_name, 0) if b.is_control]
        assert (marker.base_offset, marker_kind(marker), marker.producer_epoch) == (
            2, ABORT_MARKER, before.producer_epoch + 1)
        f = fetch_raw(raw, topic_name, 0, 0, READ_COMMITTED)
        assert [(a.producer_id, a.first_offset) for a in f.aborted_transactions or ()] == [(before.producer_id, 0)]
    assert confluent_read(bootstrap, topic_name, [0], "read_committed") == {0: []}


# --------------------------------------------------------------------------------------------
# 5. a producer process killed in a transaction


def _read_line(proc: subprocess.Popen[bytes], timeout: float) -> bytes:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"no line from the producer script within {timeout}s"
    return proc.stdout.readline()


def test_producer_killed_in_a_transaction_is_aborted_by_its_successor(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    tid = txn_id()
    proc = subprocess.Popen([sys.executable, str(SCRIPT), broker.bootstrap, topic_name, tid, "5"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**os.environ})
    try:
        assert _read_line(proc, 30).strip() == b"ready"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()
    zombie = describe_txn(broker.bootstrap, tid)
    assert zombie.transaction_state == "Ongoing"
    assert [(t.topic, tuple(t.partitions)) for t in zombie.topics] == [(topic_name, (0,))]
    assert offsets(broker.bootstrap, topic_name) == (0, 5)

    p = txn_producer(broker.bootstrap, tid)
    p.init_transactions(15)
    assert offsets(broker.bootstrap, topic_name) == (6, 6)
    p.begin_transaction()
    p.produce(topic_name, value=b"successor-0", partition=0)
    p.produce(topic_name, value=b"successor-1", partition=0)
    p.commit_transaction(15)
    assert offsets(broker.bootstrap, topic_name) == (9, 9)
    state = describe_txn(broker.bootstrap, tid)
    assert (state.transaction_state, state.producer_epoch) == ("CompleteCommit", zombie.producer_epoch + 2)

    expected = {0: [b"successor-0", b"successor-1"]}
    assert confluent_read(broker.bootstrap, topic_name, [0], "read_committed") == expected
    assert kafka_python_read(broker.bootstrap, topic_name, {0: 9}) == expected
    assert confluent_read(broker.bootstrap, topic_name, [0], "read_uncommitted") == {
        0: [b"zombie-%d" % i for i in range(5)] + expected[0]}


# --------------------------------------------------------------------------------------------
# 6. aiokafka's transactional producer


class _Rollback(Exception):
    pass


async def _aiokafka_transactions(bootstrap: str, topic: str, tid: str) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid, request_timeout_ms=10000)
    await producer.start()
    try:
        async with producer.transaction():
            await producer.send_and_wait(topic, b"aio-commit-0", partition=0)
            await producer.send_and_wait(topic, b"aio-commit-1", partition=1)
        with pytest.raises(_Rollback):
            async with producer.transaction():
                await producer.send_and_wait(topic, b"aio-abort-0", partition=0)
                await producer.send_and_wait(topic, b"aio-abort-1", partition=1)
                raise _Rollback()
        async with producer.transaction():
            await producer.send_and_wait(topic, b"aio-commit-2", partition=0)
    finally:
        await producer.stop()


def test_aiokafka_transactional_producer_commit_and_abort(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    tid = txn_id()
    asyncio.run(_aiokafka_transactions(broker.bootstrap, topic_name, tid))
    state = describe_txn(broker.bootstrap, tid)
    assert state.transaction_state == "CompleteCommit"
    # p0: commit-0, C, abort-0, A, commit-2, C; p1: commit-1, C, abort-1, A
    assert offsets(broker.bootstrap, topic_name, 0) == (6, 6)
    assert offsets(broker.bootstrap, topic_name, 1) == (4, 4)
    with rk.RawClient(broker.bootstrap) as raw:
        for partition, aborted_first in ((0, 2), (1, 2)):
            f = fetch_raw(raw, topic_name, partition, 0, READ_COMMITTED)
            assert [(a.producer_id, a.first_offset) for a in f.aborted_transactions or ()] == [
                (state.producer_id, aborted_first)]
    expected = {0: [b"aio-commit-0", b"aio-commit-2"], 1: [b"aio-commit-1"]}
    assert confluent_read(broker.bootstrap, topic_name, [0, 1], "read_committed") == expected
    assert aiokafka_read(broker.bootstrap, topic_name, {0: 6, 1: 4}) == expected


# --------------------------------------------------------------------------------------------
# 7. the coordinator's and Produce's error answers


@pytest.mark.parametrize("version", [0, 2, 3, 4, 5])
def test_init_producer_id_errors(broker, version):
    with rk.RawClient(broker.bootstrap) as raw:
        r = init_pid(raw, "", version=version)
        assert (int(r.error_code), r.producer_id, r.producer_epoch) == (INVALID_REQUEST, -1, -1), r
        r = init_pid(raw, txn_id(), timeout_ms=900001, version=version)  # transaction.max.timeout.ms 900000
        assert (int(r.error_code), r.producer_id) == (INVALID_TRANSACTION_TIMEOUT, -1), r
        r = init_pid(raw, txn_id(), timeout_ms=900000, version=version)
        assert int(r.error_code) == NONE and r.producer_id >= 0 and r.producer_epoch == 0, r


def test_init_producer_id_bumps_the_epoch_of_an_existing_id(broker):
    tid = txn_id()
    with rk.RawClient(broker.bootstrap) as raw:
        pid, epoch = init_ok(raw, tid)
        assert epoch == 0
        assert init_ok(raw, tid) == (pid, 1)
        (state,) = describe_txns(raw, tid)
        assert (state.producer_id, state.producer_epoch, state.transaction_state) == (pid, 1, "Empty")


def _txn_with(raw: rk.RawClient, topic: str, partitions: list[int] | None = None) -> tuple[str, int, int]:
    tid = txn_id()
    pid, epoch = init_ok(raw, tid)
    if partitions:
        assert set(add_partitions(raw, tid, pid, epoch, {topic: partitions}).values()) == {NONE}
    return tid, pid, epoch


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4, 5])
def test_add_partitions_to_txn_errors(broker, topic_name, version):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    with rk.RawClient(broker.bootstrap) as raw:
        tid, pid, epoch = _txn_with(raw, topic_name)
        # unknown transactional id
        assert add_partitions(raw, txn_id(), pid, epoch, {topic_name: [0]}, version) == {
            (topic_name, 0): INVALID_PRODUCER_ID_MAPPING}
        # a producer id that is not the id's
        assert add_partitions(raw, tid, pid + 1000, epoch, {topic_name: [0]}, version) == {
            (topic_name, 0): INVALID_PRODUCER_ID_MAPPING}
        # a wrong epoch: PRODUCER_FENCED, INVALID_PRODUCER_EPOCH for clients before v2
        fenced = INVALID_PRODUCER_EPOCH if version < 2 else PRODUCER_FENCED
        assert add_partitions(raw, tid, pid, epoch + 1, {topic_name: [0]}, version) == {(topic_name, 0): fenced}
        assert add_partitions(raw, tid, pid, epoch - 1, {topic_name: [0]}, version) == {(topic_name, 0): fenced}
        # an unknown topic (or partition) fails the whole request
        missing = f"missing-{uuid.uuid4().hex[:8]}"
        assert add_partitions(raw, tid, pid, epoch, {topic_name: [0, 7], missing: [0]}, version) == {
            (topic_name, 0): OPERATION_NOT_ATTEMPTED, (topic_name, 7): UNKNOWN_TOPIC_OR_PARTITION,
            (missing, 0): UNKNOWN_TOPIC_OR_PARTITION}
        (state,) = describe_txns(raw, tid)
        assert (state.transaction_state, state.topics) == ("Empty", ())
        if version < 4:
            # a client may not add an internal topic itself
            assert add_partitions(raw, tid, pid, epoch, {topic_name: [1], "__consumer_offsets": [0]}, version) == {
                (topic_name, 1): OPERATION_NOT_ATTEMPTED, ("__consumer_offsets", 0): TOPIC_AUTHORIZATION_FAILED}
        # and then the real thing
        assert add_partitions(raw, tid, pid, epoch, {topic_name: [0, 1]}, version) == {
            (topic_name, 0): NONE, (topic_name, 1): NONE}
        (state,) = describe_txns(raw, tid)
        assert state.transaction_state == "Ongoing"
        assert [(t.topic, sorted(t.partitions)) for t in state.topics] == [(topic_name, [0, 1])]


@pytest.mark.parametrize("version", [4, 5])
def test_add_partitions_to_txn_verify_only(broker, topic_name, version):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    with rk.RawClient(broker.bootstrap) as raw:
        tid, pid, epoch = _txn_with(raw, topic_name, [0])
        assert add_partitions(raw, tid, pid, epoch, {topic_name: [0, 1]}, version, verify_only=True) == {
            (topic_name, 0): NONE, (topic_name, 1): TRANSACTION_ABORTABLE}
        # verifying adds nothing
        (state,) = describe_txns(raw, tid)
        assert [(t.topic, list(t.partitions)) for t in state.topics] == [(topic_name, [0])]
        assert add_partitions(raw, tid, pid, epoch + 1, {topic_name: [0]}, version, verify_only=True) == {
            (topic_name, 0): PRODUCER_FENCED}
        assert add_partitions(raw, txn_id(), pid, epoch, {topic_name: [0]}, version, verify_only=True) == {
            (topic_name, 0): INVALID_PRODUCER_ID_MAPPING}


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_end_txn_errors(broker, topic_name, version):
    create_topic(broker.bootstrap, topic_name)
    with rk.RawClient(broker.bootstrap) as raw:
        tid, pid, epoch = _txn_with(raw, topic_name)
        # nothing added: the transaction is Empty
        assert end_txn(raw, tid, pid, epoch, True, version) == INVALID_TXN_STATE
        assert end_txn(raw, tid, pid, epoch, False, version) == INVALID_TXN_STATE
        assert end_txn(raw, txn_id(), pid, epoch, True, version) == INVALID_PRODUCER_ID_MAPPING
        assert set(add_partitions(raw, tid, pid, epoch, {topic_name: [0]}).values()) == {NONE}
        assert int(produce_raw(raw, topic_name, 0, txn_batch(pid, epoch, 0, [b"x"]), tid).error_code) == NONE
        fenced = INVALID_PRODUCER_EPOCH if version < 2 else PRODUCER_FENCED
        assert end_txn(raw, tid, pid, epoch + 1, True, version) == fenced
        assert end_txn(raw, tid, pid, epoch, True, version) == NONE
        wait_for(lambda: describe_txns(raw, tid)[0].transaction_state == "CompleteCommit", 10, 0.05,
                 "CompleteCommit")
        assert end_txn(raw, tid, pid, epoch, True, version) == NONE  # a retry of the commit
        assert end_txn(raw, tid, pid, epoch, False, version) == INVALID_TXN_STATE
        assert list_offset(raw, topic_name, 0, READ_COMMITTED) == 2


def test_end_txn_abort_retry_and_commit_after_abort(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    with rk.RawClient(broker.bootstrap) as raw:
        tid, pid, epoch = _txn_with(raw, topic_name, [0])
        assert end_txn(raw, tid, pid, epoch, False) == NONE
        wait_for(lambda: describe_txns(raw, tid)[0].transaction_state == "CompleteAbort", 10, 0.05, "CompleteAbort")
        assert end_txn(raw, tid, pid, epoch, False) == NONE
        assert end_txn(raw, tid, pid, epoch, True) == INVALID_TXN_STATE
        # the abort wrote a marker although nothing was produced (the partition was added)
        assert list_offset(raw, topic_name, 0, READ_UNCOMMITTED) == 1
        assert list_offset(raw, topic_name, 0, READ_COMMITTED) == 1


@pytest.mark.parametrize(("version", "expected"), [(3, INVALID_TXN_STATE), (9, INVALID_TXN_STATE),
                                                   (10, INVALID_TXN_STATE), (11, TRANSACTION_ABORTABLE),
                                                   (12, TRANSACTION_ABORTABLE)])
def test_transactional_produce_to_a_partition_not_added(broker, topic_name, version, expected):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    with rk.RawClient(broker.bootstrap) as raw:
        tid, pid, epoch = _txn_with(raw, topic_name, [0])
        r = produce_raw(raw, topic_name, 1, txn_batch(pid, epoch, 0, [b"not-added"]), tid, version=version)
        assert int(r.error_code) == expected, r
        # a fenced epoch is INVALID_PRODUCER_EPOCH on Produce
        r = produce_raw(raw, topic_name, 0, txn_batch(pid, epoch + 1, 0, [b"fenced"]), tid, version=version)
        assert int(r.error_code) == INVALID_PRODUCER_EPOCH, r
        # the added partition takes it
        r = produce_raw(raw, topic_name, 0, txn_batch(pid, epoch, 0, [b"added"]), tid, version=version)
        assert (int(r.error_code), r.base_offset) == (NONE, 0), r
        # and a plain (non-transactional) batch of the same producer may not interleave
        plain = rk.encode_batch([rk.Rec(b"plain")], producer_id=pid, producer_epoch=epoch, base_sequence=1)
        r = produce_raw(raw, topic_name, 0, plain, None, version=version)
        assert int(r.error_code) == INVALID_TXN_STATE, r
        assert list_offset(raw, topic_name, 1, READ_UNCOMMITTED) == 0
        assert list_offset(raw, topic_name, 0, READ_UNCOMMITTED) == 1
        assert list_offset(raw, topic_name, 0, READ_COMMITTED) == 0


def test_transactional_batch_without_transactional_id(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    with rk.RawClient(broker.bootstrap) as raw:
        tid, pid, epoch = _txn_with(raw, topic_name, [0])
        r = produce_raw(raw, topic_name, 0, txn_batch(pid, epoch, 0, [b"anonymous"]), None)
        assert int(r.error_code) == TRANSACTIONAL_ID_AUTHORIZATION_FAILED, r
        assert list_offset(raw, topic_name, 0, READ_UNCOMMITTED) == 0
        del tid


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 6])
def test_find_coordinator_for_a_transactional_id(broker, version):
    cls = rk.req_cls(10, version)
    tid = txn_id()
    with rk.RawClient(broker.bootstrap) as raw:
        meta = raw.request(rk.metadata_request([], version=12))
        (node,) = meta.brokers
        resp = raw.request(cls(**rk._fit(cls, {"key": tid, "key_type": 1, "coordinator_keys": (tid,)})))
    host, port = broker.bootstrap.rsplit(":", 1)
    if version >= 4:
        (c,) = resp.coordinators
        assert c.key == tid
    else:
        c = resp
    assert (int(c.error_code), c.node_id, c.host, c.port) == (NONE, node.node_id, host, int(port)), resp


@pytest.mark.parametrize("version", [3, 4, 5])
def test_init_producer_id_with_expected_epoch(broker, version):
    """KIP-360: a transactional producer re-initialising after an abortable error names its
    current producer id and epoch; a retry of that bump is answered the bumped epoch again."""
    tid = txn_id()
    fenced = INVALID_PRODUCER_EPOCH if version < 4 else PRODUCER_FENCED
    with rk.RawClient(broker.bootstrap) as raw:
        pid, epoch = init_ok(raw, tid)
        r = init_pid(raw, tid, version=version, producer_id=pid, producer_epoch=epoch)
        assert (int(r.error_code), r.producer_id, r.producer_epoch) == (NONE, pid, epoch + 1), r
        # the same request again (the response was lost): no second bump
        r = init_pid(raw, tid, version=version, producer_id=pid, producer_epoch=epoch)
        assert (int(r.error_code), r.producer_id, r.producer_epoch) == (NONE, pid, epoch + 1), r
        # an epoch that is neither the current nor the previous one, or another producer id
        r = init_pid(raw, tid, version=version, producer_id=pid, producer_epoch=epoch + 7)
        assert int(r.error_code) == fenced, r
        r = init_pid(raw, tid, version=version, producer_id=pid + 1000, producer_epoch=epoch + 1)
        assert int(r.error_code) == fenced, r
        # a new instance (no expected epoch) bumps and forgets the previous epoch
        assert init_ok(raw, tid) == (pid, epoch + 2)
        r = init_pid(raw, tid, version=version, producer_id=pid, producer_epoch=epoch + 1)
        assert int(r.error_code) == fenced, r


def test_raw_fencing_refuses_every_request_of_the_old_epoch(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    tid = txn_id()
    with rk.RawClient(broker.bootstrap) as raw:
        pid, epoch = init_ok(raw, tid)
        assert set(add_partitions(raw, tid, pid, epoch, {topic_name: [0]}).values()) == {NONE}
        r = produce_raw(raw, topic_name, 0, txn_batch(pid, epoch, 0, [b"old-0"]), tid)
        assert (int(r.error_code), r.base_offset) == (NONE, 0), r
        # a new instance: the first answer is CONCURRENT_TRANSACTIONS while the open one is aborted
        r = init_pid(raw, tid)
        assert int(r.error_code) == CONCURRENT_TRANSACTIONS, r
        assert init_ok(raw, tid) == (pid, epoch + 2)
        assert list_offset(raw, topic_name, 0, READ_COMMITTED) == 2  # record + abort marker
        # the old instance is refused everywhere
        r = produce_raw(raw, topic_name, 0, txn_batch(pid, epoch, 1, [b"old-1"]), tid)
        assert int(r.error_code) == INVALID_PRODUCER_EPOCH, r
        assert add_partitions(raw, tid, pid, epoch, {topic_name: [1]}) == {(topic_name, 1): PRODUCER_FENCED}
        assert end_txn(raw, tid, pid, epoch, True) == PRODUCER_FENCED
        assert end_txn(raw, tid, pid, epoch, False, version=1) == INVALID_PRODUCER_EPOCH
        assert list_offset(raw, topic_name, 0, READ_UNCOMMITTED) == 2


def _java_hash(text: str) -> int:
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


def _offsets_partition(group: str, partitions: int = 50) -> int:
    """Kafka's partitionFor(groupId): Utils.abs(groupId.hashCode) % offsets.topic.num.partitions
    (Utils.abs maps Integer.MIN_VALUE to 0)."""
    h = _java_hash(group)
    return (0 if h == -(2**31) else abs(h)) % partitions


def _group_with_hash(negative: bool) -> str:
    """A unique group name whose Java hashCode has the sign asked for; a negative one is picked
    where Utils.abs and a sign-bit mask (Utils.toPositive) give different partitions."""
    while True:
        group = f"g-{uuid.uuid4().hex[:10]}"
        h = _java_hash(group)
        if not negative and h >= 0:
            return group
        if negative and h < 0 and _offsets_partition(group) != (h & 0x7FFFFFFF) % 50:
            return group


@pytest.mark.parametrize("negative_hash", [False, True], ids=["positive-hash", "negative-hash"])
@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_add_offsets_to_txn(broker, topic_name, version, negative_hash):
    create_topic(broker.bootstrap, topic_name)
    group = _group_with_hash(negative_hash)
    cls = rk.req_cls(25, version)

    def add_offsets(tid: str, pid: int, epoch: int) -> int:
        return int(raw.request(cls(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                   group_id=group)).error_code)

    with rk.RawClient(broker.bootstrap) as raw:
        tid, pid, epoch = _txn_with(raw, topic_name, [0])
        assert add_offsets(txn_id(), pid, epoch) == INVALID_PRODUCER_ID_MAPPING
        assert add_offsets(tid, pid, epoch + 1) == (INVALID_PRODUCER_EPOCH if version < 2 else PRODUCER_FENCED)
        assert add_offsets(tid, pid, epoch) == NONE
        (state,) = describe_txns(raw, tid)
        assert sorted((t.topic, tuple(t.partitions)) for t in state.topics) == sorted(
            [(topic_name, (0,)), ("__consumer_offsets", (_offsets_partition(group),))])
        assert end_txn(raw, tid, pid, epoch, True) == NONE
        wait_for(lambda: describe_txns(raw, tid)[0].transaction_state == "CompleteCommit", 10, 0.05,
                 "CompleteCommit")
