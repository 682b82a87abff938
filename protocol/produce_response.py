"""A direct encoder for the Produce (0) v3-13 response.

A one-record Produce is the job queue's other hot request, and kio's generic path (dicts built
into entities, then every field walked by the writer) cost about half of its handling. This
writes the layout of ProduceResponse.json straight into one bytearray: byte for byte what kio
writes for the same content (tests/unit/test_produce_response.py checks every served version).

What the broker never sends is not encoded: RecordErrors is always empty, and the tagged
CurrentLeader and NodeEndpoints (v10+) are left at their defaults, which Kafka then omits."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sharebroker.protocol.primitives import write_compact_str, write_uvarint

__all__ = ["PRODUCE_VERSIONS", "ProducePartitionResponse", "ProduceTopicResponse", "encode_produce_response",
           "throttle_position"]

PRODUCE_VERSIONS = range(3, 14)
FIRST_FLEXIBLE = 9
FIRST_TOPIC_ID = 13

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">ii")  # size (patched last), correlation id
_PARTITION_V3 = struct.Struct(">ihqq")  # index, error code, base offset, log append time
_PARTITION_V5 = struct.Struct(">ihqqq")  # ... log start offset
_ZERO_UUID = bytes(16)


@dataclass(slots=True)
class ProducePartitionResponse:
    index: int
    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = -1  # -1: CreateTime topic
    log_start_offset: int = -1  # v5+
    error_message: str | None = None  # v8+


@dataclass(slots=True)
class ProduceTopicResponse:
    name: str | None  # before v13
    topic_id: uuid.UUID | None  # v13+
    partitions: list[ProducePartitionResponse]


def _legacy_str(out: bytearray, s: str | None) -> None:
    if s is None:
        out += b"\xff\xff"
        return
    data = s.encode()
    out += _I16.pack(len(data))
    out += data


def encode_produce_response(correlation_id: int, version: int, topics: Sequence[ProduceTopicResponse], *,
                            throttle_time_ms: int = 0) -> bytearray:
    """The size-prefixed response frame, in one bytearray (the throttle time may be patched in
    at `throttle_position`)."""
    if version not in PRODUCE_VERSIONS:
        raise ValueError(f"Produce response version {version} is not encoded here")
    flexible = version >= FIRST_FLEXIBLE
    out = bytearray(_HEAD.pack(0, correlation_id))
    if flexible:
        out.append(0)  # response header v1: no tags
        write_uvarint(out, len(topics) + 1)
    else:
        out += _I32.pack(len(topics))
    with_start = version >= 5
    with_errors = version >= 8
    for t in topics:
        if version >= FIRST_TOPIC_ID:
            out += t.topic_id.bytes if t.topic_id is not None else _ZERO_UUID
        elif flexible:
            write_compact_str(out, t.name)
        else:
            _legacy_str(out, t.name)
        if flexible:
            write_uvarint(out, len(t.partitions) + 1)
        else:
            out += _I32.pack(len(t.partitions))
        for p in t.partitions:
            if with_start:
                out += _PARTITION_V5.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms,
                                          p.log_start_offset)
            else:
                out += _PARTITION_V3.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms)
            if with_errors:
                if flexible:
                    out.append(1)  # RecordErrors: empty compact array
                    write_compact_str(out, p.error_message)
                    out.append(0)  # partition tags
                else:
                    out += b"\x00\x00\x00\x00"
                    _legacy_str(out, p.error_message)
        if flexible:
            out.append(0)  # topic tags
    out += _I32.pack(throttle_time_ms)
    if flexible:
        out.append(0)  # response tags
    _I32.pack_into(out, 0, len(out) - 4)
    return out


def throttle_position(frame: bytearray, version: int) -> int:
    """Where ThrottleTimeMs sits in an encoded frame: the body's last field (then the tags)."""
    return len(frame) - (5 if version >= FIRST_FLEXIBLE else 4)
