"""A direct encoder for ShareFetch (78) v1-v2 responses, the share consumer's hot path: kio's
generic writer walks every field of every entity per response, which costs more than the rest of a
one-record fetch. The layout follows ShareFetchResponse.json (flexible from v0, records non-null
from v1); tests/unit/test_share_fetch_response.py checks it byte for byte against kio's encoding."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION = struct.Struct(">ih")      # partition index, error code
_LEADER = struct.Struct(">iib")        # leader id, leader epoch, no tags
_ACQUIRED = struct.Struct(">qqhb")     # first, last, delivery count, no tags


def _uvarint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _compact_nullable_str(out: bytearray, s: str | None) -> None:
    if s is None:
        out.append(0)
        return
    data = s.encode()
    _uvarint(out, len(data) + 1)
    out += data


def encode_share_fetch_response(correlation_id: int, *, error_code: int, error_message: str | None,
                                acquisition_lock_timeout_ms: int,
                                topics: Iterable[tuple[uuid.UUID, Sequence[Mapping[str, Any]]]],
                                node_endpoints: Sequence[tuple[int, str, int, str | None]] = ()) -> bytes:
    """The size-prefixed response frame (header v1). Each partition entry is a mapping with
    partition_index, error_code, error_message, acknowledge_error_code, acknowledge_error_message,
    current_leader {leader_id, leader_epoch}, records (bytes) and acquired_records
    [{first_offset, last_offset, delivery_count}]."""
    out = bytearray(b"\0\0\0\0")
    out += _I32.pack(correlation_id)
    out.append(0)  # response header tags
    out += _I32.pack(0)  # throttle time
    out += _I16.pack(int(error_code))
    _compact_nullable_str(out, error_message)
    out += _I32.pack(acquisition_lock_timeout_ms)
    topics = list(topics)
    _uvarint(out, len(topics) + 1)
    for topic_id, partitions in topics:
        out += topic_id.bytes
        _uvarint(out, len(partitions) + 1)
        for p in partitions:
            out += _PARTITION.pack(p["partition_index"], int(p["error_code"]))
            _compact_nullable_str(out, p["error_message"])
            out += _I16.pack(int(p["acknowledge_error_code"]))
            _compact_nullable_str(out, p["acknowledge_error_message"])
            leader = p["current_leader"]
            out += _LEADER.pack(leader["leader_id"], leader["leader_epoch"], 0)
            records = p["records"] or b""
            _uvarint(out, len(records) + 1)
            out += records
            acquired = p["acquired_records"]
            _uvarint(out, len(acquired) + 1)
            for r in acquired:
                out += _ACQUIRED.pack(r["first_offset"], r["last_offset"], r["delivery_count"], 0)
            out.append(0)  # partition tags
        out.append(0)  # topic tags
    _uvarint(out, len(node_endpoints) + 1)
    for node_id, host, port, rack in node_endpoints:
        out += _I32.pack(node_id)
        _compact_nullable_str(out, host)
        out += _I32.pack(port)
        _compact_nullable_str(out, rack)
        out.append(0)
    out.append(0)  # response tags
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


__all__ = ["encode_share_fetch_response"]
