"""Produce request bodies (v3–13) decoded without copying their record batches.

kio's reader returns each partition's records as a new `bytes` object, and the broker then needs a
mutable copy to write offsets into: two copies of every produced byte. Here the records are views
into the request frame itself, which the connection received into a buffer of its own, so offsets
are stamped in place and the same memory goes to the log file. Everything else in the request is
small and decoded as kio would."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sharebroker.protocol.primitives import Reader

__all__ = ["ProducePartitionData", "ProduceRequestBody", "ProduceTopicData", "decode_produce_body"]

FIRST_FLEXIBLE = 9  # v9 and later: compact strings and arrays, tagged fields
FIRST_TOPIC_ID = 13  # v13 names topics by id


@dataclass(slots=True)
class ProducePartitionData:
    index: int
    records: memoryview | bytes | None


@dataclass(slots=True)
class ProduceTopicData:
    name: str | None
    topic_id: uuid.UUID | None
    partition_data: list[ProducePartitionData]


@dataclass(slots=True)
class ProduceRequestBody:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[ProduceTopicData]


def decode_produce_body(frame: bytes | memoryview, offset: int, version: int) -> ProduceRequestBody:
    """The body that starts at `offset`; records are slices of `frame` (writable if it is).
    Raises ValueError, IndexError or struct.error on a malformed body."""
    r = Reader(frame, offset)
    flexible = version >= FIRST_FLEXIBLE
    transactional_id = r.string(flexible)
    acks = r.i16()
    timeout_ms = r.i32()
    topics = []
    for _ in range(_count(r, flexible)):
        if version >= FIRST_TOPIC_ID:
            name, topic_id = None, r.uuid()
        else:
            name, topic_id = r.string(flexible), None
            if name is None:
                raise ValueError("null topic name")
        partitions = []
        for _ in range(_count(r, flexible)):
            index = r.i32()
            size = r.uvarint() - 1 if flexible else r.i32()
            records = None if size < 0 else r.view(size)
            if flexible:
                r.skip_tags()
            partitions.append(ProducePartitionData(index, records))
        if flexible:
            r.skip_tags()
        topics.append(ProduceTopicData(name, topic_id, partitions))
    if flexible:
        r.skip_tags()
    return ProduceRequestBody(transactional_id, acks, timeout_ms, topics)


def _count(r: Reader, flexible: bool) -> int:
    n = r.array_len(flexible)
    if n < 0:
        raise ValueError(f"invalid array length {n}")
    return n
