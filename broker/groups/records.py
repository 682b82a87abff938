"""Kafka's share-group records in `__consumer_offsets` (reference schemas group-coordinator/):
ShareGroupMemberMetadata (10), ShareGroupMetadata (11), ShareGroupTargetAssignmentMetadata (12,
the time of the last target computation, which the assignment interval runs from),
ShareGroupCurrentMemberAssignment (14) and ShareGroupStatePartitionMetadata (15). Keys are an
int16 record type followed by the non-flexible v0 key; values an int16 version followed by the
flexible v0 value. A null value is a tombstone."""

from __future__ import annotations

import uuid
from typing import Any

from sharebroker.broker.groups.consumer_records import read_target_metadata, target_metadata_value
from sharebroker.broker.java_compat import partition_for_key
from sharebroker.protocol.primitives import Reader, Writer

MEMBER_METADATA, GROUP_METADATA, TARGET_METADATA, MEMBER_ASSIGNMENT, STATE_PARTITIONS = 10, 11, 12, 14, 15
RECORD_TYPES = (MEMBER_METADATA, GROUP_METADATA, TARGET_METADATA, MEMBER_ASSIGNMENT, STATE_PARTITIONS)


def _key(record_type: int, *strings: str) -> bytes:
    w = Writer()
    w.i16(record_type)
    for s in strings:
        w.string(s)
    return bytes(w.out)


def group_metadata(group_id: str, epoch: int, metadata_hash: int = 0) -> tuple[bytes, bytes]:
    w = Writer()
    w.i16(0)
    w.i32(epoch)
    w.i64(metadata_hash)
    w.no_tags()
    return _key(GROUP_METADATA, group_id), bytes(w.out)


def target_metadata(group_id: str, assignment_epoch: int, assignment_timestamp_ms: int = 0) -> tuple[bytes, bytes]:
    """The epoch and end time (wall clock, 0: none) of the last target computation, as Kafka 4.3+;
    the value is the consumer groups' one."""
    return _key(TARGET_METADATA, group_id), target_metadata_value(assignment_epoch, assignment_timestamp_ms)


def member_metadata(group_id: str, m: Any) -> tuple[bytes, bytes]:
    w = Writer()
    w.i16(0)
    w.compact_str(m.rack_id)
    w.compact_str(m.client_id)
    w.compact_str(m.client_host)
    w.compact_len(len(m.subscribed))
    for name in m.subscribed:
        w.compact_str(name)
    w.no_tags()
    return _key(MEMBER_METADATA, group_id, m.member_id), bytes(w.out)


def member_assignment(group_id: str, m: Any) -> tuple[bytes, bytes]:
    w = Writer()
    w.i16(0)
    w.i32(m.epoch)
    w.i32(m.previous_epoch)
    w.i8(0)  # MemberState STABLE: share members have no revocation phase
    w.compact_len(len(m.assignment))
    for tid, parts in sorted(m.assignment.items(), key=lambda kv: str(kv[0])):
        w.uuid(tid)
        w.compact_len(len(parts))
        for p in sorted(parts):
            w.i32(p)
        w.no_tags()
    w.no_tags()
    return _key(MEMBER_ASSIGNMENT, group_id, m.member_id), bytes(w.out)


def state_partitions(group_id: str, initialized: dict[uuid.UUID, set[int]], names: dict[uuid.UUID, str]) -> tuple[bytes, bytes]:
    w = Writer()
    w.i16(0)
    w.compact_len(0)  # InitializingTopics: initialization completes before the record is written
    w.compact_len(len(initialized))
    for tid, parts in sorted(initialized.items(), key=lambda kv: str(kv[0])):
        w.uuid(tid)
        w.compact_str(names.get(tid, ""))
        w.compact_len(len(parts))
        for p in sorted(parts):
            w.i32(p)
        w.no_tags()
    w.compact_len(0)  # DeletingTopics
    w.no_tags()
    return _key(STATE_PARTITIONS, group_id), bytes(w.out)


def member_tombstones(group_id: str, member_id: str) -> list[tuple[bytes, None]]:
    return [(_key(MEMBER_METADATA, group_id, member_id), None), (_key(MEMBER_ASSIGNMENT, group_id, member_id), None)]


def group_tombstones(group_id: str) -> list[tuple[bytes, None]]:
    """Kafka's order for a deleted (empty) group (ShareGroup.createGroupTombstoneRecords): the target
    metadata, the state-partition metadata, the group record last."""
    return [(_key(TARGET_METADATA, group_id), None), (_key(STATE_PARTITIONS, group_id), None),
            (_key(GROUP_METADATA, group_id), None)]


def decode(key: bytes, value: bytes | None) -> tuple[int, list[str], dict[str, Any] | None]:
    """(record type, key strings, value fields or None for a tombstone); unknown types give {}."""
    r = Reader(key)
    record_type = r.i16()
    strings = [r.string() or ""]
    if record_type in (MEMBER_METADATA, MEMBER_ASSIGNMENT):
        strings.append(r.string() or "")
    if value is None:
        return record_type, strings, None
    v = Reader(value, 2)
    if record_type == GROUP_METADATA:
        return record_type, strings, {"epoch": v.i32(), "metadata_hash": v.i64()}
    if record_type == TARGET_METADATA:
        return record_type, strings, read_target_metadata(v)
    if record_type == MEMBER_METADATA:
        rack, client_id, client_host = v.compact_str(), v.compact_str(), v.compact_str()
        subscribed = [v.compact_str() for _ in range(v.compact_len())]
        return record_type, strings, {"rack_id": rack, "client_id": client_id or "", "client_host": client_host or "",
                                      "subscribed": tuple(s for s in subscribed if s is not None)}
    if record_type == MEMBER_ASSIGNMENT:
        epoch, previous, _state = v.i32(), v.i32(), v.i8()
        assignment = {}
        for _ in range(v.compact_len()):
            tid = v.uuid()
            assignment[tid] = frozenset(v.i32() for _ in range(v.compact_len()))
            v.skip_tags()
        return record_type, strings, {"epoch": epoch, "previous_epoch": previous, "assignment": assignment}
    if record_type == STATE_PARTITIONS:
        def topics() -> dict[uuid.UUID, tuple[str, set[int]]]:
            out = {}
            for _ in range(v.compact_len()):
                tid = v.uuid()
                name = v.compact_str() or ""
                out[tid] = (name, {v.i32() for _ in range(v.compact_len())})
                v.skip_tags()
            return out
        topics()  # InitializingTopics
        return record_type, strings, {"initialized": topics()}
    return record_type, strings, {}


def offsets_partition(group_id: str, num_partitions: int) -> int:
    """Kafka's Utils.abs(groupId.hashCode) % offsets.topic.num.partitions."""
    return partition_for_key(group_id, num_partitions)
