"""Kafka's consumer-group (KIP-848) records in `__consumer_offsets` (group-coordinator schemas):
ConsumerGroupMetadata (3), ConsumerGroupPartitionMetadata (4, no longer written since 4.0: only
tombstoned), ConsumerGroupMemberMetadata (5), ConsumerGroupTargetAssignmentMetadata (6),
ConsumerGroupTargetAssignmentMember (7), ConsumerGroupCurrentMemberAssignment (8) and
ConsumerGroupRegularExpression (16). Keys are an int16 record type followed by the non-flexible
key fields; values an int16 version (0) followed by the flexible v0 value. A null value is a
tombstone."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sharebroker.broker.groups.consumer_group import ClassicMetadata
from sharebroker.protocol.primitives import Reader, Writer

if TYPE_CHECKING:
    from sharebroker.broker.groups.consumer_group import ConsumerMember, CurrentAssignment
    from sharebroker.broker.groups.share_group import Assignment

GROUP_METADATA, PARTITION_METADATA, MEMBER_METADATA = 3, 4, 5
TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT, REGULAR_EXPRESSION = 6, 7, 8, 16
RECORD_TYPES = (GROUP_METADATA, PARTITION_METADATA, MEMBER_METADATA, TARGET_METADATA, TARGET_MEMBER,
                CURRENT_ASSIGNMENT, REGULAR_EXPRESSION)
_MEMBER_KEYED = (MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT)
Record = tuple[bytes, bytes | None]


def key(record_type: int, group_id: str, second: str | None = None) -> bytes:
    w = Writer()
    w.i16(record_type)
    w.string(group_id)
    if second is not None:
        w.string(second)
    return bytes(w.out)


def _topic_partitions(w: Writer, a: Assignment) -> None:
    parts = sorted(((t, ps) for t, ps in a.items() if ps), key=lambda kv: str(kv[0]))
    w.compact_len(len(parts))
    for tid, ps in parts:
        w.uuid(tid)
        w.compact_len(len(ps))
        for p in sorted(ps):
            w.i32(p)
        w.no_tags()


def _read_topic_partitions(r: Reader) -> dict[uuid.UUID, frozenset[int]]:
    out: dict[uuid.UUID, frozenset[int]] = {}
    for _ in range(r.compact_len()):
        tid = r.uuid()
        out[tid] = frozenset(r.i32() for _ in range(r.compact_len()))
        r.skip_tags()
    return out


def group_metadata(group_id: str, epoch: int) -> Record:
    w = Writer()
    w.i16(0)
    w.i32(epoch)
    w.no_tags()
    return key(GROUP_METADATA, group_id), bytes(w.out)


def member_metadata(group_id: str, m: ConsumerMember) -> Record:
    w = Writer()
    w.i16(0)
    w.compact_str(m.instance_id)
    w.compact_str(m.rack_id)
    w.compact_str(m.client_id)
    w.compact_str(m.client_host)
    w.compact_len(len(m.subscribed_names))
    for name in m.subscribed_names:
        w.compact_str(name)
    w.compact_str(m.subscribed_regex)
    w.i32(m.rebalance_timeout_ms)
    w.compact_str(m.server_assignor)
    if m.classic is None:
        w.no_tags()  # ClassicMemberMetadata (tag 0) is absent: the member uses the consumer protocol
    else:
        classic = _classic_member_metadata(m.classic)
        w.uvarint(1)
        w.uvarint(0)
        w.uvarint(len(classic))
        w.out += classic
    return key(MEMBER_METADATA, group_id, m.member_id), bytes(w.out)


def _classic_member_metadata(c: ClassicMetadata) -> bytes:
    """The nullable struct of tag 0: a presence byte, then SessionTimeoutMs and SupportedProtocols."""
    w = Writer()
    w.i8(1)
    w.i32(c.session_timeout_ms)
    w.compact_len(len(c.protocols))
    for name, metadata in c.protocols:
        w.compact_str(name)
        w.uvarint(len(metadata) + 1)
        w.out += metadata
        w.no_tags()
    w.no_tags()
    return bytes(w.out)


def _read_classic_member_metadata(data: bytes) -> ClassicMetadata | None:
    r = Reader(data)
    if r.i8() < 0:
        return None
    session = r.i32()
    protocols = []
    for _ in range(r.compact_len()):
        name = r.compact_str() or ""
        protocols.append((name, r.bytes_(flexible=True) or b""))
        r.skip_tags()
    return ClassicMetadata(session, tuple(protocols))


def target_metadata_value(assignment_epoch: int, assignment_timestamp_ms: int = 0) -> bytes:
    """The value of a target-assignment metadata record, the same for consumer (6) and share (12)
    groups. AssignmentTimestamp (Kafka 4.3+, tag 0, wall-clock ms at the end of the computation; 0
    when unknown) is left out at its default, as Kafka writes tagged fields."""
    w = Writer()
    w.i16(0)
    w.i32(assignment_epoch)
    if assignment_timestamp_ms:
        w.uvarint(1)
        w.uvarint(0)
        w.uvarint(8)
        w.i64(assignment_timestamp_ms)
    else:
        w.no_tags()
    return bytes(w.out)


def read_target_metadata(v: Reader) -> dict[str, int]:
    """A target-assignment metadata value after its version: a record without the tagged
    AssignmentTimestamp (before Kafka 4.3) reads as 0, unknown."""
    epoch = v.i32()
    return {"assignment_epoch": epoch,
            "assignment_timestamp_ms": next((Reader(raw).i64() for tag, raw in v.tags() if tag == 0), 0)}


def target_metadata(group_id: str, assignment_epoch: int, assignment_timestamp_ms: int = 0) -> Record:
    return key(TARGET_METADATA, group_id), target_metadata_value(assignment_epoch, assignment_timestamp_ms)


def target_member(group_id: str, member_id: str, a: Assignment) -> Record:
    w = Writer()
    w.i16(0)
    _topic_partitions(w, a)
    w.no_tags()
    return key(TARGET_MEMBER, group_id, member_id), bytes(w.out)


def current_assignment(group_id: str, member_id: str, c: CurrentAssignment) -> Record:
    w = Writer()
    w.i16(0)
    w.i32(c.epoch)
    w.i32(c.previous_epoch)
    w.i8(c.state)
    _topic_partitions(w, c.assigned)
    _topic_partitions(w, c.pending_revocation)
    w.no_tags()
    return key(CURRENT_ASSIGNMENT, group_id, member_id), bytes(w.out)


def regular_expression(group_id: str, regex: str, topics: tuple[str, ...], version: int, timestamp_ms: int) -> Record:
    w = Writer()
    w.i16(0)
    w.compact_len(len(topics))
    for t in topics:
        w.compact_str(t)
    w.i64(version)
    w.i64(timestamp_ms)
    w.no_tags()
    return key(REGULAR_EXPRESSION, group_id, regex), bytes(w.out)


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    """Kafka's order: current assignment, target assignment, then the member's metadata."""
    return [(key(CURRENT_ASSIGNMENT, group_id, member_id), None), (key(TARGET_MEMBER, group_id, member_id), None),
            (key(MEMBER_METADATA, group_id, member_id), None)]


def group_tombstones(group_id: str, member_ids: list[str], regexes: list[str]) -> list[Record]:
    """Kafka's order for a deleted group (ConsumerGroup.createGroupTombstoneRecords)."""
    out: list[Record] = [(key(CURRENT_ASSIGNMENT, group_id, m), None) for m in member_ids]
    out += [(key(TARGET_MEMBER, group_id, m), None) for m in member_ids]
    out.append((key(TARGET_METADATA, group_id), None))
    out += [(key(MEMBER_METADATA, group_id, m), None) for m in member_ids]
    out += [(key(REGULAR_EXPRESSION, group_id, r), None) for r in regexes]
    out.append((key(PARTITION_METADATA, group_id), None))
    out.append((key(GROUP_METADATA, group_id), None))
    return out


@dataclass(frozen=True, slots=True)
class Decoded:
    record_type: int
    group_id: str
    second: str | None  # member id, or the regex of a regular-expression record
    fields: dict[str, object] | None  # None for a tombstone


def decode(k: bytes, value: bytes | None) -> Decoded:
    r = Reader(k)
    record_type = r.i16()
    group_id = r.string() or ""
    second = r.string() or "" if record_type in _MEMBER_KEYED or record_type == REGULAR_EXPRESSION else None
    if value is None:
        return Decoded(record_type, group_id, second, None)
    v = Reader(value, 2)
    fields: dict[str, object] = {}
    if record_type == GROUP_METADATA:
        fields["epoch"] = v.i32()
    elif record_type == MEMBER_METADATA:
        fields.update(instance_id=v.compact_str(), rack_id=v.compact_str(), client_id=v.compact_str() or "",
                      client_host=v.compact_str() or "")
        fields["subscribed_names"] = tuple(s or "" for s in (v.compact_str() for _ in range(v.compact_len())))
        fields.update(subscribed_regex=v.compact_str(), rebalance_timeout_ms=v.i32(), server_assignor=v.compact_str())
        fields["classic"] = next((_read_classic_member_metadata(raw) for tag, raw in v.tags() if tag == 0), None)
    elif record_type == TARGET_METADATA:
        fields.update(read_target_metadata(v))
    elif record_type == TARGET_MEMBER:
        fields["assignment"] = _read_topic_partitions(v)
    elif record_type == CURRENT_ASSIGNMENT:
        fields.update(epoch=v.i32(), previous_epoch=v.i32(), state=v.i8())
        fields["assigned"] = _read_topic_partitions(v)
        fields["pending_revocation"] = _read_topic_partitions(v)
    elif record_type == REGULAR_EXPRESSION:
        fields["topics"] = tuple(s or "" for s in (v.compact_str() for _ in range(v.compact_len())))
    return Decoded(record_type, group_id, second, fields)
