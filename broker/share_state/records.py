"""Kafka's `__share_group_state` record formats (reference schemas share-coordinator/): key =
int16 record type + ShareSnapshotKey/ShareUpdateKey v0 (GroupId, TopicId, Partition); value =
int16 version + ShareSnapshotValue/ShareUpdateValue v0 (flexible, DeliveryCompleteCount as tag 0).
A null value is a tombstone."""

from __future__ import annotations

import functools
import struct
import uuid

from sharebroker.broker.java_compat import partition_for_key
from sharebroker.broker.share_state.store import SNAPSHOT, UPDATE, Key, SnapshotValue, StateBatch, StateRecord, UpdateValue
from sharebroker.protocol.primitives import Reader, Writer

__all__ = ["SNAPSHOT", "UPDATE", "decode_key", "decode_record", "decode_value", "encode_record", "state_partition"]


def encode_record(record: StateRecord) -> tuple[bytes, bytes | None]:
    """(key, value) bytes of a state record; a tombstone has no value."""
    key = encode_key(record.kind, *record.key)
    v = record.value
    if v is None:
        return key, None
    return key, encode_snapshot(v) if isinstance(v, SnapshotValue) else encode_update(v)


def decode_record(key: bytes, value: bytes | None) -> StateRecord:
    record_type, group_id, topic_id, partition = decode_key(key)
    return decode_value(record_type, (group_id, topic_id, partition), value)


def decode_value(record_type: int, k: Key, value: bytes | None) -> StateRecord:
    """The record of an already decoded key (`decode_key`) and its value bytes."""
    if value is None:
        return StateRecord(k, record_type, None)
    if record_type == SNAPSHOT:
        return StateRecord(k, SNAPSHOT, decode_snapshot(value))
    if record_type == UPDATE:
        return StateRecord(k, UPDATE, decode_update(value))
    raise ValueError(f"unknown share state record type {record_type}")


def encode_key(record_type: int, group_id: str, topic_id: uuid.UUID, partition: int) -> bytes:
    w = Writer()
    w.i16(record_type)
    w.string(group_id)
    w.uuid(topic_id)
    w.i32(partition)
    return w.getvalue()


def decode_key(data: bytes) -> tuple[int, str, uuid.UUID, int]:
    r = Reader(data)
    return r.i16(), r.string() or "", r.uuid(), r.i32()


def _encode_batches(w: Writer, batches: list[StateBatch]) -> None:
    w.compact_len(len(batches))
    for b in batches:
        w.i64(b.first_offset)
        w.i64(b.last_offset)
        w.i8(b.delivery_state)
        w.i16(b.delivery_count)
        w.no_tags()  # no tagged fields in a StateBatch


def _encode_tags(w: Writer, delivery_complete_count: int) -> None:
    if delivery_complete_count == -1:
        w.no_tags()
        return
    w.uvarint(1)
    w.uvarint(0)  # tag 0
    w.uvarint(4)  # size
    w.i32(delivery_complete_count)


def encode_snapshot(v: SnapshotValue) -> bytes:
    w = Writer()
    w.i16(0)
    for epoch in (v.snapshot_epoch, v.state_epoch, v.leader_epoch):
        w.i32(epoch)
    for n in (v.start_offset, v.create_timestamp, v.write_timestamp):
        w.i64(n)
    _encode_batches(w, v.batches)
    _encode_tags(w, v.delivery_complete_count)
    return w.getvalue()


def encode_update(v: UpdateValue) -> bytes:
    w = Writer()
    w.i16(0)
    w.i32(v.snapshot_epoch)
    w.i32(v.leader_epoch)
    w.i64(v.start_offset)
    _encode_batches(w, v.batches)
    _encode_tags(w, v.delivery_complete_count)
    return w.getvalue()


def _decode_batches(r: Reader) -> list[StateBatch]:
    batches = []
    for _ in range(r.compact_len()):
        first, last, state, count = r.i64(), r.i64(), r.i8(), r.i16()
        r.skip_tags()
        batches.append(StateBatch(first, last, state, count))
    return batches


def _read_dcc(r: Reader) -> int:
    dcc = -1
    for tag, value in r.tags():
        if tag == 0 and len(value) == 4:
            (dcc,) = struct.unpack(">i", value)
    return dcc


def decode_snapshot(data: bytes) -> SnapshotValue:
    r = Reader(data, 2)
    snapshot_epoch, state_epoch, leader_epoch = r.i32(), r.i32(), r.i32()
    start_offset, create_ts, write_ts = r.i64(), r.i64(), r.i64()
    batches = _decode_batches(r)
    return SnapshotValue(snapshot_epoch, state_epoch, leader_epoch, start_offset, _read_dcc(r),
                         create_ts, write_ts, batches)


def decode_update(data: bytes) -> UpdateValue:
    r = Reader(data, 2)
    snapshot_epoch, leader_epoch, start_offset = r.i32(), r.i32(), r.i64()
    batches = _decode_batches(r)
    return UpdateValue(snapshot_epoch, leader_epoch, start_offset, _read_dcc(r), batches)


@functools.lru_cache(maxsize=65536)  # every state write asks, for the same few keys
def state_partition(group_id: str, topic_id: uuid.UUID, partition: int, num_partitions: int) -> int:
    """Kafka's placement (ShareCoordinatorService.partitionFor): Utils.abs(javaHash(
    "group:topicId:partition")) % partitions, where the topic id prints in Kafka's base64 form."""
    import base64
    tid = base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")
    return partition_for_key(f"{group_id}:{tid}:{partition}", num_partitions)
