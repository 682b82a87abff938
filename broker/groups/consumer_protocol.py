"""The embedded consumer protocol of classic groups (`protocol_type` "consumer"): the
ConsumerProtocolSubscription a member sends in JoinGroup and the ConsumerProtocolAssignment it
receives in SyncGroup (versions 0–3, non-flexible). The broker reads them only where a classic
member lives in a consumer group (KIP-848's upgrade path) and to know what a classic group
subscribes to."""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from sharebroker.protocol.primitives import Reader, Writer

CONSUMER_PROTOCOL_TYPE = "consumer"  # the protocol_type of groups using this embedded protocol
HIGHEST_VERSION = 3
TopicPartitions = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: TopicPartitions = ()  # v1+
    generation_id: int = -1  # v2+
    rack_id: str | None = None  # v3+


def _string(r: Reader) -> str:
    s = r.string()
    if s is None:
        raise ValueError("null string in the consumer protocol")
    return s


def _count(r: Reader, limit: int) -> int:
    n = r.i32()
    if n < 0 or n > limit:
        raise ValueError(f"bad array length {n} in the consumer protocol")
    return n


def _topic_partitions(r: Reader, limit: int) -> TopicPartitions:
    out = []
    for _ in range(_count(r, limit)):
        topic = _string(r)
        out.append((topic, tuple(r.i32() for _ in range(_count(r, limit)))))
    return tuple(out)


def version_of(data: bytes) -> int:
    """The version a subscription or assignment was written with (its first int16)."""
    if len(data) < 2:
        raise ValueError("consumer protocol bytes too short for a version")
    return int(struct.unpack_from(">h", data)[0])


def assignment_version(subscription: bytes) -> int:
    """The version a member's SyncGroup assignment is written in: its subscription's (0 if that
    does not even carry one)."""
    try:
        return version_of(subscription)
    except ValueError:
        return 0


def decode_subscription(data: bytes) -> Subscription:
    """A ConsumerProtocolSubscription; fields of versions newer than 3 are ignored, as Kafka does.
    Raises ValueError on malformed bytes."""
    try:
        r = Reader(data)
        version = r.i16()
        if version < 0:
            raise ValueError(f"unsupported consumer protocol subscription version {version}")
        limit = len(data)
        topics = tuple(_string(r) for _ in range(_count(r, limit)))
        user_data = r.bytes_()
        owned: TopicPartitions = ()
        generation = -1
        rack: str | None = None
        if version >= 1 and r.pos < limit:
            owned = _topic_partitions(r, limit)
        if version >= 2 and r.pos < limit:
            generation = r.i32()
        if version >= 3 and r.pos < limit:
            rack = r.string()
        return Subscription(version, topics, user_data, owned, generation, rack)
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise ValueError(f"malformed consumer protocol subscription: {exc}") from None


def encode_assignment(partitions: Iterable[tuple[str, Iterable[int]]], version: int,
                      user_data: bytes | None = None) -> bytes:
    """A ConsumerProtocolAssignment in the member's version (clamped to 0–3, as Kafka does)."""
    w = Writer()
    w.i16(min(max(version, 0), HIGHEST_VERSION))
    rows = sorted((topic, sorted(ps)) for topic, ps in partitions)
    rows = [(t, ps) for t, ps in rows if ps]
    w.i32(len(rows))
    for topic, ps in rows:
        w.string(topic)
        w.i32(len(ps))
        for p in ps:
            w.i32(p)
    w.bytes_(user_data)
    return w.getvalue()


def decode_assignment(data: bytes) -> TopicPartitions:
    """The assigned partitions of a ConsumerProtocolAssignment (empty bytes: none). Raises
    ValueError on malformed bytes."""
    return decode_assignment_with_user_data(data)[0]


def decode_assignment_with_user_data(data: bytes) -> tuple[TopicPartitions, bytes | None]:
    """The assigned partitions and the assignor's user data (None when null or absent)."""
    if not data:
        return (), None
    try:
        r = Reader(data)
        r.i16()
        partitions = _topic_partitions(r, len(data))
        user_data = r.bytes_() if r.pos < len(data) else None
        return partitions, user_data
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise ValueError(f"malformed consumer protocol assignment: {exc}") from None
