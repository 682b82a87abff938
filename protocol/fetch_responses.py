"""Direct encoders for the two hot responses, Fetch (1) v4-18 and ShareFetch (78) v1-2.

kio's generic writer walks every field of every entity and copies the record bytes into its
BytesIO; these write the layout of FetchResponse.json and ShareFetchResponse.json straight into
bytearrays and hand the record bytes through as they came from storage. A response comes out as a
list of buffers for `transport.writelines`: field bytes in bytearrays, each partition's records as
the very object the caller passed (bytes or memoryview), never copied into a new buffer. Joined,
the buffers are byte for byte what kio writes for the same content
(tests/unit/test_fetch_encoder.py checks every served version).

One content shape serves every version, as with codec.build: a field a version lacks is left out
(the topic name before Fetch v13, the topic id from v13, the tagged fields before v12)."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sharebroker.protocol.primitives import write_compact_str, write_uvarint

__all__ = [
    "AcquiredRecords",
    "Buffer",
    "FetchPartition",
    "FetchTopic",
    "NodeEndpoint",
    "ShareFetchPartition",
    "ShareFetchTopic",
    "encode_fetch_response",
    "encode_share_fetch_response",
    "frame_size",
]

Buffer = bytes | bytearray | memoryview

FETCH_VERSIONS = range(4, 19)
SHARE_FETCH_VERSIONS = range(1, 3)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">ii")  # size (patched last), correlation id
_PAIR = struct.Struct(">qq")  # aborted transaction: producer id, first offset
_PARTITION_V4 = struct.Struct(">ihqq")  # index, error, high watermark, last stable offset
_PARTITION_V5 = struct.Struct(">ihqqq")  # ... log start offset
_SHARE_PARTITION = struct.Struct(">ih")  # partition index, error code
_LEADER = struct.Struct(">iib")  # leader id, leader epoch, no tags
_EPOCH_END = struct.Struct(">iqb")  # epoch, end offset, no tags
_SNAPSHOT = struct.Struct(">qib")  # end offset, epoch, no tags
_ACQUIRED = struct.Struct(">qqhb")  # first, last, delivery count, no tags
_ZERO_UUID = bytes(16)
_UNSET = (-1, -1)  # the default of Fetch's tagged pairs: equal to it, the tag is not written
_NULL_RECORDS = _I32.pack(-1)
_EMPTY_RECORDS = _I32.pack(0)


@dataclass(slots=True)
class NodeEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(slots=True)
class FetchPartition:
    partition_index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1  # v5+
    aborted_transactions: Sequence[tuple[int, int]] | None = None  # (producer id, first offset)
    preferred_read_replica: int = -1  # v11+
    records: Buffer | None = b""
    # Tagged fields (v12+), written only when set:
    diverging_epoch: tuple[int, int] = _UNSET  # (epoch, end offset)
    current_leader: tuple[int, int] = _UNSET  # (leader id, leader epoch)
    snapshot_id: tuple[int, int] = _UNSET  # (end offset, epoch)


@dataclass(slots=True)
class FetchTopic:
    topic: str | None  # v4-12
    topic_id: uuid.UUID | None  # v13+
    partitions: Sequence[FetchPartition]


@dataclass(slots=True)
class AcquiredRecords:
    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(slots=True)
class ShareFetchPartition:
    partition_index: int
    error_code: int = 0
    error_message: str | None = None
    acknowledge_error_code: int = 0
    acknowledge_error_message: str | None = None
    current_leader: tuple[int, int] = (-1, -1)  # (leader id, leader epoch)
    records: Buffer = b""
    acquired_records: Sequence[AcquiredRecords] = ()


@dataclass(slots=True)
class ShareFetchTopic:
    topic_id: uuid.UUID | None
    partitions: Sequence[ShareFetchPartition]


def frame_size(frame: Sequence[Buffer]) -> int:
    return sum(memoryview(b).nbytes for b in frame)


class _Frame:
    """Field bytes go to `out`; records close it and go into `parts` whole."""

    __slots__ = ("out", "parts", "size")

    def __init__(self, correlation_id: int, flexible_header: bool) -> None:
        self.out = bytearray(_HEAD.pack(0, correlation_id))
        if flexible_header:
            self.out.append(0)  # response header v1: no tags
        self.parts: list[Buffer] = []
        self.size = 0  # bytes in `parts`

    def records(self, data: Buffer) -> None:
        n = data.nbytes if isinstance(data, memoryview) else len(data)
        if n:
            out = self.out
            self.parts.append(out)
            self.parts.append(data)
            self.size += len(out) + n
            self.out = bytearray()

    def finish(self) -> list[Buffer]:
        out = self.out
        parts = self.parts
        if out or not parts:
            parts.append(out)
        first = parts[0]
        assert isinstance(first, bytearray)
        _I32.pack_into(first, 0, self.size + len(out) - 4)
        return parts


def _legacy_str(out: bytearray, s: str | None) -> None:
    if s is None:
        raise TypeError("topic name is None in a Fetch response version before 13")
    data = s.encode()
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes is too long for an int16 length")
    out += _I16.pack(len(data))
    out += data


def _records_length(data: Buffer | None, flexible: bool) -> int:
    if data is None:
        return 0 if flexible else -1
    n = data.nbytes if isinstance(data, memoryview) else len(data)
    return n + 1 if flexible else n


def _node_endpoints(endpoints: Sequence[NodeEndpoint]) -> bytearray:
    out = bytearray()
    write_uvarint(out, len(endpoints) + 1)
    for e in endpoints:
        out += _I32.pack(e.node_id)
        write_compact_str(out, e.host)
        out += _I32.pack(e.port)
        write_compact_str(out, e.rack)
        out.append(0)
    return out


def encode_fetch_response(correlation_id: int, version: int, topics: Sequence[FetchTopic], *,
                          throttle_time_ms: int = 0, error_code: int = 0, session_id: int = 0,
                          node_endpoints: Sequence[NodeEndpoint] = ()) -> list[Buffer]:
    """The size-prefixed Fetch response frame, as buffers (see the module doc)."""
    if version not in FETCH_VERSIONS:
        raise ValueError(f"Fetch response version {version} is not encoded here")
    flexible = version >= 12
    frame = _Frame(correlation_id, flexible)
    out = frame.out
    out += _I32.pack(throttle_time_ms)
    if version >= 7:
        out += _I16.pack(error_code)
        out += _I32.pack(session_id)
    if flexible:
        write_uvarint(out, len(topics) + 1)
    else:
        out += _I32.pack(len(topics))
    with_log_start = version >= 5
    with_replica = version >= 11
    for t in topics:
        if version >= 13:
            out += t.topic_id.bytes if t.topic_id is not None else _ZERO_UUID
        elif flexible:
            if t.topic is None:
                raise TypeError("topic name is None in a Fetch response version before 13")
            write_compact_str(out, t.topic)
        else:
            _legacy_str(out, t.topic)
        partitions = t.partitions
        if flexible:
            write_uvarint(out, len(partitions) + 1)
        else:
            out += _I32.pack(len(partitions))
        for p in partitions:
            if with_log_start:
                out += _PARTITION_V5.pack(p.partition_index, p.error_code, p.high_watermark,
                                          p.last_stable_offset, p.log_start_offset)
            else:
                out += _PARTITION_V4.pack(p.partition_index, p.error_code, p.high_watermark,
                                          p.last_stable_offset)
            aborted = p.aborted_transactions
            if aborted is None:
                if flexible:
                    out.append(0)
                else:
                    out += _I32.pack(-1)
            else:
                if flexible:
                    write_uvarint(out, len(aborted) + 1)
                    for producer_id, first_offset in aborted:
                        out += _PAIR.pack(producer_id, first_offset)
                        out.append(0)
                else:
                    out += _I32.pack(len(aborted))
                    for producer_id, first_offset in aborted:
                        out += _PAIR.pack(producer_id, first_offset)
            if with_replica:
                out += _I32.pack(p.preferred_read_replica)
            records = p.records
            if records:  # bytes, or a view of them, travel as they are
                n = _records_length(records, flexible)
                if flexible:
                    write_uvarint(out, n)
                else:
                    out += _I32.pack(n)
                frame.records(records)
                out = frame.out
            elif flexible:
                out.append(0 if records is None else 1)  # null, or empty: compact length + 1
            else:
                out += _NULL_RECORDS if records is None else _EMPTY_RECORDS
            if flexible:
                diverging, leader, snapshot = p.diverging_epoch, p.current_leader, p.snapshot_id
                if diverging == _UNSET and leader == _UNSET and snapshot == _UNSET:
                    out.append(0)
                else:
                    out.append((diverging != _UNSET) + (leader != _UNSET) + (snapshot != _UNSET))
                    if diverging != _UNSET:
                        out += b"\x00\x0d"  # tag 0, 13 bytes
                        out += _EPOCH_END.pack(diverging[0], diverging[1], 0)
                    if leader != _UNSET:
                        out += b"\x01\x09"  # tag 1, 9 bytes
                        out += _LEADER.pack(leader[0], leader[1], 0)
                    if snapshot != _UNSET:
                        out += b"\x02\x0d"  # tag 2, 13 bytes
                        out += _SNAPSHOT.pack(snapshot[0], snapshot[1], 0)
        if flexible:
            out.append(0)  # topic tags
    if flexible:
        if version >= 16 and node_endpoints:
            encoded = _node_endpoints(node_endpoints)
            out += b"\x01\x00"  # one tag: 0
            write_uvarint(out, len(encoded))
            out += encoded
        else:
            out.append(0)
    return frame.finish()


def encode_share_fetch_response(correlation_id: int, version: int, topics: Sequence[ShareFetchTopic], *,
                                throttle_time_ms: int = 0, error_code: int = 0, error_message: str | None = None,
                                acquisition_lock_timeout_ms: int = 0,
                                node_endpoints: Sequence[NodeEndpoint] = ()) -> list[Buffer]:
    """The size-prefixed ShareFetch response frame, as buffers (see the module doc)."""
    if version not in SHARE_FETCH_VERSIONS:
        raise ValueError(f"ShareFetch response version {version} is not encoded here")
    frame = _Frame(correlation_id, True)
    out = frame.out
    out += _I32.pack(throttle_time_ms)
    out += _I16.pack(error_code)
    write_compact_str(out, error_message)
    out += _I32.pack(acquisition_lock_timeout_ms)
    write_uvarint(out, len(topics) + 1)
    for t in topics:
        out += t.topic_id.bytes if t.topic_id is not None else _ZERO_UUID
        write_uvarint(out, len(t.partitions) + 1)
        for p in t.partitions:
            out += _SHARE_PARTITION.pack(p.partition_index, p.error_code)
            write_compact_str(out, p.error_message)
            out += _I16.pack(p.acknowledge_error_code)
            write_compact_str(out, p.acknowledge_error_message)
            out += _LEADER.pack(p.current_leader[0], p.current_leader[1], 0)
            write_uvarint(out, _records_length(p.records, True))
            frame.records(p.records)
            out = frame.out
            acquired = p.acquired_records
            write_uvarint(out, len(acquired) + 1)
            for r in acquired:
                out += _ACQUIRED.pack(r.first_offset, r.last_offset, r.delivery_count, 0)
            out.append(0)  # partition tags
        out.append(0)  # topic tags
    out += _node_endpoints(node_endpoints)
    out.append(0)  # response tags
    return frame.finish()
