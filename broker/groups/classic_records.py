"""Kafka's classic-group records in `__consumer_offsets` (group-coordinator schemas):

- OffsetCommit: key version 0 or 1 = (group, topic, partition); value OffsetCommitValue v0-v4
  (we write v3: offset, leader epoch, metadata, commit timestamp).
- GroupMetadata: key version 2 = (group); value GroupMetadataValue v0-v4 (we write v3: protocol
  type, generation, protocol, leader, state timestamp, members with subscription and assignment).

Keys are an int16 version followed by the non-flexible fields; values an int16 version followed
by the fields (flexible from v4: compact strings and tagged fields). A null value is a tombstone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sharebroker.protocol.primitives import Reader, Writer

OFFSET_COMMIT_KEYS = (0, 1)
OFFSET_COMMIT, GROUP_METADATA = 1, 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = -1
    expire_timestamp_ms: int = -1
    # Where its record is in __consumer_offsets (not persisted): of two commits whose appends
    # finish out of order, the later record wins, as on replay. -1: replayed, older than any since.
    log_offset: int = field(default=-1, compare=False)


@dataclass(frozen=True, slots=True)
class MemberSnapshot:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    """What GroupMetadataValue holds: the last persisted generation of a classic group."""
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp_ms: int = -1
    members: tuple[MemberSnapshot, ...] = field(default_factory=tuple)


# -- keys ----------------------------------------------------------------------------------------


def offset_commit_key(group_id: str, topic: str, partition: int) -> bytes:
    out = Writer()
    out.i16(OFFSET_COMMIT)
    out.string(group_id)
    out.string(topic)
    out.i32(partition)
    return bytes(out.out)


def group_metadata_key(group_id: str) -> bytes:
    out = Writer()
    out.i16(GROUP_METADATA)
    out.string(group_id)
    return bytes(out.out)


def decode_key(key: bytes) -> tuple[int, str, str | None, int | None]:
    """(record type, group, topic, partition); topic and partition only for offset commits."""
    r = Reader(key)
    version = r.i16()
    group = r.string() or ""
    if version in OFFSET_COMMIT_KEYS:
        topic = r.string() or ""
        return OFFSET_COMMIT, group, topic, r.i32()
    if version == GROUP_METADATA:
        return GROUP_METADATA, group, None, None
    raise ValueError(f"not a classic-group record key (version {version})")


# -- values --------------------------------------------------------------------------------------


def offset_commit_value(c: CommittedOffset) -> bytes:
    out = Writer()
    out.i16(OFFSET_VALUE_VERSION)
    out.i64(c.offset)
    out.i32(c.leader_epoch)
    out.string(c.metadata)
    out.i64(c.commit_timestamp_ms)
    return bytes(out.out)


def decode_offset_commit_value(value: bytes) -> CommittedOffset:
    r = Reader(value)
    version = r.i16()
    flexible = version >= 4
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.string(flexible) or ""
    commit_ts = r.i64()
    expire_ts = r.i64() if version == 1 else -1
    if flexible:
        r.skip_tags()
    return CommittedOffset(offset, leader_epoch, metadata, commit_ts, expire_ts)


def group_metadata_value(s: GroupSnapshot) -> bytes:
    out = Writer()
    out.i16(GROUP_VALUE_VERSION)
    out.string(s.protocol_type)
    out.i32(s.generation)
    out.string(s.protocol)
    out.string(s.leader)
    out.i64(s.state_timestamp_ms)
    out.i32(len(s.members))
    for m in s.members:
        out.string(m.member_id)
        out.string(m.group_instance_id)
        out.string(m.client_id)
        out.string(m.client_host)
        out.i32(m.rebalance_timeout_ms)
        out.i32(m.session_timeout_ms)
        out.bytes_(m.subscription)
        out.bytes_(m.assignment)
    return bytes(out.out)


def decode_group_metadata_value(value: bytes) -> GroupSnapshot:
    r = Reader(value)
    version = r.i16()
    flex = version >= 4
    protocol_type = r.string(flex) or ""
    generation = r.i32()
    protocol = r.string(flex)
    leader = r.string(flex)
    state_ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(max(r.array_len(flex), 0)):
        member_id = r.string(flex) or ""
        instance_id = r.string(flex) if version >= 3 else None
        client_id = r.string(flex) or ""
        client_host = r.string(flex) or ""
        rebalance = r.i32() if version >= 1 else -1
        session = r.i32()
        subscription = r.bytes_(flex) or b""
        assignment = r.bytes_(flex) or b""
        if flex:
            r.skip_tags()
        members.append(MemberSnapshot(member_id, instance_id, client_id, client_host,
                                      session if rebalance == -1 else rebalance, session, subscription, assignment))
    if flex:
        r.skip_tags()
    return GroupSnapshot(protocol_type, generation, protocol, leader, state_ts, tuple(members))
