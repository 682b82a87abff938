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
from sharebroker.protocol.primitives import Reader, Writer, write_uvarint

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


@functools.lru_cache(maxsize=65536)  # every state write of a share partition has the same key
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


_SNAPSHOT_HEAD = struct.Struct(">hiiiqqq")  # version 0, three epochs, start offset, two timestamps
_UPDATE_HEAD = struct.Struct(">hiiq")  # version 0, snapshot epoch, leader epoch, start offset
_STATE_BATCH = struct.Struct(">qqbhb")  # first, last, delivery state, delivery count, no tags
_DCC_TAG = struct.Struct(">BBBi")  # one tagged field: tag 0, size 4, DeliveryCompleteCount


def _encode_batches_and_tags(out: bytearray, batches: list[StateBatch], delivery_complete_count: int) -> bytes:
    """StateBatches as a compact array, then the value's tagged fields (DeliveryCompleteCount as
    tag 0 unless -1)."""
    write_uvarint(out, len(batches) + 1)
    pack = _STATE_BATCH.pack
    for b in batches:
        out += pack(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count, 0)
    if delivery_complete_count == -1:
        out.append(0)
    else:
        out += _DCC_TAG.pack(1, 0, 4, delivery_complete_count)
    return bytes(out)


def encode_snapshot(v: SnapshotValue) -> bytes:
    out = bytearray(_SNAPSHOT_HEAD.pack(0, v.snapshot_epoch, v.state_epoch, v.leader_epoch, v.start_offset,
                                        v.create_timestamp, v.write_timestamp))
    return _encode_batches_and_tags(out, v.batches, v.delivery_complete_count)


def encode_update(v: UpdateValue) -> bytes:
    out = bytearray(_UPDATE_HEAD.pack(0, v.snapshot_epoch, v.leader_epoch, v.start_offset))
    return _encode_batches_and_tags(out, v.batches, v.delivery_complete_count)


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
