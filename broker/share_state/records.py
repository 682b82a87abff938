"""Kafka's `__share_group_state` record formats (reference schemas share-coordinator/): key =
int16 record type + ShareSnapshotKey/ShareUpdateKey v0 (GroupId, TopicId, Partition); value =
int16 version + ShareSnapshotValue/ShareUpdateValue v0 (flexible, DeliveryCompleteCount as tag 0).
A null value is a tombstone."""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from broker.share_state.store import StateBatch

SNAPSHOT, UPDATE = 0, 1
_I16 = struct.Struct(">h")
_BATCH = struct.Struct(">qqbh")


@dataclass(frozen=True, slots=True)
class SnapshotValue:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    create_timestamp: int
    write_timestamp: int
    batches: list[StateBatch]


@dataclass(frozen=True, slots=True)
class UpdateValue:
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    batches: list[StateBatch]


def _uvarint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def encode_key(record_type: int, group_id: str, topic_id: uuid.UUID, partition: int) -> bytes:
    g = group_id.encode()
    return _I16.pack(record_type) + _I16.pack(len(g)) + g + topic_id.bytes + struct.pack(">i", partition)


def decode_key(data: bytes) -> tuple[int, str, uuid.UUID, int]:
    (record_type,) = _I16.unpack_from(data, 0)
    (glen,) = _I16.unpack_from(data, 2)
    group_id = data[4:4 + glen].decode()
    p = 4 + glen
    topic_id = uuid.UUID(bytes=bytes(data[p:p + 16]))
    (partition,) = struct.unpack_from(">i", data, p + 16)
    return record_type, group_id, topic_id, partition


def _encode_batches(out: bytearray, batches: list[StateBatch]) -> None:
    _uvarint(out, len(batches) + 1)
    for b in batches:
        out += _BATCH.pack(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
        out.append(0)  # no tagged fields in a StateBatch


def _encode_tags(out: bytearray, delivery_complete_count: int) -> None:
    if delivery_complete_count == -1:
        out.append(0)
        return
    out.append(1)
    out.append(0)  # tag 0
    out.append(4)  # size
    out += struct.pack(">i", delivery_complete_count)


def encode_snapshot(v: SnapshotValue) -> bytes:
    out = bytearray(_I16.pack(0))
    out += struct.pack(">iiiq", v.snapshot_epoch, v.state_epoch, v.leader_epoch, v.start_offset)
    out += struct.pack(">qq", v.create_timestamp, v.write_timestamp)
    _encode_batches(out, v.batches)
    _encode_tags(out, v.delivery_complete_count)
    return bytes(out)


def encode_update(v: UpdateValue) -> bytes:
    out = bytearray(_I16.pack(0))
    out += struct.pack(">iiq", v.snapshot_epoch, v.leader_epoch, v.start_offset)
    _encode_batches(out, v.batches)
    _encode_tags(out, v.delivery_complete_count)
    return bytes(out)


def _decode_batches(buf: bytes, pos: int) -> tuple[list[StateBatch], int]:
    n, pos = _read_uvarint(buf, pos)
    batches = []
    for _ in range(n - 1):
        first, last, state, count = _BATCH.unpack_from(buf, pos)
        pos += _BATCH.size
        pos = _skip_tags(buf, pos)
        batches.append(StateBatch(first, last, state, count))
    return batches, pos


def _skip_tags(buf: bytes, pos: int) -> int:
    count, pos = _read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = _read_uvarint(buf, pos)
        size, pos = _read_uvarint(buf, pos)
        pos += size
    return pos


def _read_dcc(buf: bytes, pos: int) -> int:
    count, pos = _read_uvarint(buf, pos)
    dcc = -1
    for _ in range(count):
        tag, pos = _read_uvarint(buf, pos)
        size, pos = _read_uvarint(buf, pos)
        if tag == 0 and size == 4:
            (dcc,) = struct.unpack_from(">i", buf, pos)
        pos += size
    return dcc


def decode_snapshot(data: bytes) -> SnapshotValue:
    snapshot_epoch, state_epoch, leader_epoch, start_offset = struct.unpack_from(">iiiq", data, 2)
    create_ts, write_ts = struct.unpack_from(">qq", data, 22)
    batches, pos = _decode_batches(data, 38)
    return SnapshotValue(snapshot_epoch, state_epoch, leader_epoch, start_offset, _read_dcc(data, pos),
                         create_ts, write_ts, batches)


def decode_update(data: bytes) -> UpdateValue:
    snapshot_epoch, leader_epoch, start_offset = struct.unpack_from(">iiq", data, 2)
    batches, pos = _decode_batches(data, 18)
    return UpdateValue(snapshot_epoch, leader_epoch, start_offset, _read_dcc(data, pos), batches)


def state_partition(group_id: str, topic_id: uuid.UUID, partition: int, num_partitions: int) -> int:
    """Kafka's placement: abs(javaHash("group:topicId:partition")) % partitions, where the topic id
    prints in Kafka's base64 form."""
    import base64
    tid = base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")
    return (java_string_hash(f"{group_id}:{tid}:{partition}") & 0x7FFFFFFF) % num_partitions


def java_string_hash(text: str) -> int:
    h = 0
    for unit in _utf16_units(text):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _utf16_units(text: str) -> list[int]:
    data = text.encode("utf-16-be")
    return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]
