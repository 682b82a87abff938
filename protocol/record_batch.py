"""Kafka record batch v2: header parsing, CRC-32C, offset assignment. Pure: bytes in, values out.

The broker never decodes records (Principle 3). It reads the 61-byte batch header, checks the CRC
over the batch, and rewrites only baseOffset and partitionLeaderEpoch, which lie outside the CRC.
The one exception is LogAppendTime: Kafka then stamps maxTimestamp and the timestamp-type bit,
which are inside the CRC, so the CRC is recomputed for those batches only.

Header layout (big-endian), offsets in bytes:

    0 baseOffset int64        8 batchLength int32 (bytes after this field)
   12 partitionLeaderEpoch    16 magic int8          17 crc uint32 (CRC-32C of bytes 21..end)
   21 attributes int16        23 lastOffsetDelta     27 baseTimestamp int64
   35 maxTimestamp int64      43 producerId int64    51 producerEpoch int16
   53 baseSequence int32      57 recordCount int32   61 records...

Error codes (plain ints, Kafka's numbers) follow what Apache Kafka 4.x answers to a v3+ produce:
CRC mismatch, a length below the 61-byte header, a batch running past the buffer, a negative count
or offset delta, an unknown magic (not 0-2) or compression id -> ErrorCode.corrupt_message (2). Magic 0/1
(legacy message sets) -> ErrorCode.invalid_record (87): Kafka 4 only takes produce v3+ and rejects
non-v2 batches there with InvalidRecordException, so UNSUPPORTED_FOR_MESSAGE_FORMAT (43) is not
used. The produce-only rules (exactly one batch, baseOffset 0, count consistency, no control
batches from clients) live in `parse_produce_records`.
"""

from __future__ import annotations

import gzip
import mmap
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sharebroker.protocol.crc import crc32c
from sharebroker.protocol.errors import ErrorCode, KafkaError

BufferLike = bytes | bytearray | memoryview | mmap.mmap  # what the header readers accept

__all__ = [
    "BATCH_HEADER_SIZE",
    "LOG_OVERHEAD",
    "MIN_BATCH_LENGTH",
    "BatchHeader",
    "BatchRecord",
    "BatchWalk",
    "InvalidRecordError",
    "assign_offsets",
    "batch_crc",
    "decode_records",
    "decompress",
    "encode_batch",
    "first_keyless_record",
    "iter_batch_headers",
    "iter_records",
    "parse_batches",
    "parse_produce_records",
    "read_header",
    "record_timestamps",
]

BATCH_HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength, the part batchLength does not count
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD  # 49
_CRC_START = 21  # CRC covers attributes .. end of batch
_MAGIC_OFFSET = 16
_LEGACY_MIN_LENGTH = 14  # Kafka's LegacyRecord.RECORD_OVERHEAD_V0, checked before the magic

# Attribute bits.
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08  # 1 = LogAppendTime
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40
NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4

_HEADER = struct.Struct(">qiibIhiqqqhii")
assert _HEADER.size == BATCH_HEADER_SIZE
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_INT32_MAX = 0x7FFFFFFF


class InvalidRecordError(KafkaError, ValueError):
    """A produce payload Kafka would refuse, with the Kafka error code to answer it with."""


@dataclass(slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    position: int = 0  # byte offset of the batch in the buffer (or file) it was read from

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return 1 if self.attributes & TIMESTAMP_TYPE_BIT else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_BIT)

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record; wraps at 2^31-1 like Kafka's DefaultRecordBatch."""
        seq = self.base_sequence
        if seq < 0:
            return -1
        inc = self.last_offset_delta
        if seq > _INT32_MAX - inc:
            return inc - (_INT32_MAX - seq) - 1
        return seq + inc


def read_header(buf: BufferLike, pos: int = 0) -> BatchHeader:
    """Unpack the 61-byte header at `pos` without any validation (needs 61 bytes there)."""
    return BatchHeader(*_HEADER.unpack_from(buf, pos), pos)  # type: ignore[call-arg]  # 13 fields, then pos


def batch_crc(buf: BufferLike, header: BatchHeader) -> int:
    """CRC-32C of the batch `header` describes, as stored in its crc field when valid."""
    start = header.position
    return crc32c(memoryview(buf)[start + _CRC_START:start + header.size])


def _check_header(h: BatchHeader) -> None:
    """Header-level sanity shared by every path that trusts a batch."""
    if h.record_count < 0:
        raise InvalidRecordError(ErrorCode.corrupt_message, f"Record batch at byte {h.position} has a negative record count "
                                                  f"({h.record_count}).")
    if h.last_offset_delta < 0:
        raise InvalidRecordError(ErrorCode.corrupt_message, f"Record batch at byte {h.position} has a negative last offset "
                                                  f"delta ({h.last_offset_delta}).")
    if h.compression > ZSTD:
        raise InvalidRecordError(ErrorCode.corrupt_message, f"Record batch at byte {h.position} uses unknown compression "
                                                  f"type id {h.compression}.")


def _check_magic(buf: bytes | bytearray | memoryview, pos: int) -> None:
    magic = buf[pos + _MAGIC_OFFSET]
    if magic != 2:
        if magic in (0, 1):
            raise InvalidRecordError(ErrorCode.invalid_record, f"Record batch at byte {pos} has magic {magic}; produce "
                                                     "requests with version 3 or above must use magic 2.")
        raise InvalidRecordError(ErrorCode.corrupt_message, f"Invalid magic found in record batch at byte {pos}: {magic}.")


def parse_batches(buf: bytes | bytearray | memoryview, *, verify_crc: bool) -> list[BatchHeader]:
    """Headers of the batches laid back to back in `buf`; raise InvalidRecordError if any part of it
    is malformed (including trailing bytes that do not make a whole batch). Records are not decoded:
    only header-level consistency and, with verify_crc, the CRC are checked. Empty input -> []."""
    n = len(buf)
    pos = 0
    out: list[BatchHeader] = []
    mv = memoryview(buf) if verify_crc else None
    while pos < n:
        if n - pos < _MAGIC_OFFSET + 1:
            raise InvalidRecordError(ErrorCode.corrupt_message, f"Truncated record batch: {n - pos} trailing bytes at byte "
                                                      f"{pos} do not hold a batch header.")
        length = _I32.unpack_from(buf, pos + 8)[0]
        _check_magic(buf, pos)
        if length < MIN_BATCH_LENGTH:
            raise InvalidRecordError(ErrorCode.corrupt_message, f"Record batch at byte {pos} is smaller than the minimum "
                                                      f"({length + LOG_OVERHEAD} < {BATCH_HEADER_SIZE} bytes).")
        end = pos + LOG_OVERHEAD + length
        if end > n:
            raise InvalidRecordError(ErrorCode.corrupt_message, f"Truncated record batch at byte {pos}: it declares "
                                                      f"{length + LOG_OVERHEAD} bytes, {n - pos} remain.")
        h = read_header(buf, pos)
        _check_header(h)
        if mv is not None:
            crc = crc32c(mv[pos + _CRC_START:end])
            if crc != h.crc:
                raise InvalidRecordError(ErrorCode.corrupt_message, f"Record is corrupt (stored crc = {h.crc}, computed crc = "
                                                          f"{crc}) in the batch at byte {pos}.")
        out.append(h)
        pos = end
    return out


def parse_produce_records(buf: bytes | bytearray | memoryview, *, api_version: int | None = None,
                          max_message_bytes: int | None = None) -> list[BatchHeader]:
    """Validate one partition's records of a Produce v3+ request the way Kafka 4 does, in Kafka's
    order, and return the headers (always exactly one). CRC is always verified.

    ErrorCode.invalid_record: no complete batch, more than one batch, magic 0/1, baseOffset != 0, offset
    range and record count disagree, a control batch, a producer id with a negative sequence.
    ErrorCode.message_too_large: batch larger than max.message.bytes. ErrorCode.unsupported_compression_type: zstd below
    produce v7. ErrorCode.corrupt_message: as in `parse_batches`. Deviation: bytes after the one batch are
    refused (ErrorCode.corrupt_message) where Kafka would silently trim a partial trailing batch."""
    n = len(buf)
    if n >= BATCH_HEADER_SIZE:
        # Fast path for the batch every well-behaved client sends; anything else takes the
        # step-by-step path below, which finds the error Kafka would report first.
        f = _HEADER.unpack_from(buf, 0)
        attrs = f[5]
        if (f[1] + LOG_OVERHEAD == n and f[3] == 2 and f[0] == 0 and f[1] >= MIN_BATCH_LENGTH
                and f[12] == f[6] + 1 > 0 and not attrs & CONTROL_BIT and (f[9] < 0 or f[11] >= 0)
                and (attrs & COMPRESSION_MASK) < ZSTD + (0 if api_version is not None and api_version < 7 else 1)
                and (max_message_bytes is None or n <= max_message_bytes)):
            crc = crc32c(memoryview(buf)[_CRC_START:])
            if crc != f[4]:
                raise InvalidRecordError(ErrorCode.corrupt_message, f"Record is corrupt (stored crc = {f[4]}, computed crc = "
                                                          f"{crc}).")
            return [BatchHeader(*f, 0)]  # type: ignore[call-arg]
    # Kafka walks batch sizes first: a size below 14 or a bad magic is corrupt, anything shorter
    # than one whole batch means "no batch".
    if n >= LOG_OVERHEAD:
        length = _I32.unpack_from(buf, 8)[0]
        if length < _LEGACY_MIN_LENGTH:
            raise InvalidRecordError(ErrorCode.corrupt_message, f"Record size {length} is less than the minimum record "
                                                      f"overhead ({_LEGACY_MIN_LENGTH}).")
        if n > _MAGIC_OFFSET:
            _check_magic(buf, 0)
    if n < _MAGIC_OFFSET + 1 or n < LOG_OVERHEAD + _I32.unpack_from(buf, 8)[0]:
        raise InvalidRecordError(ErrorCode.invalid_record, "Produce requests with version 3 or above must have at least "
                                                 "one record batch per partition.")
    first_end = LOG_OVERHEAD + _I32.unpack_from(buf, 8)[0]
    rest = n - first_end
    if rest > 0:
        if rest >= LOG_OVERHEAD and rest >= LOG_OVERHEAD + _I32.unpack_from(buf, first_end + 8)[0]:
            raise InvalidRecordError(ErrorCode.invalid_record, "Produce requests with version 3 or above are only allowed to "
                                                     "contain exactly one record batch per partition.")
        raise InvalidRecordError(ErrorCode.corrupt_message, f"{rest} trailing bytes after the record batch do not make a "
                                                  "whole batch.")
    if first_end < BATCH_HEADER_SIZE:
        raise InvalidRecordError(ErrorCode.corrupt_message, f"Record batch is smaller than the minimum "
                                                  f"({first_end} < {BATCH_HEADER_SIZE} bytes).")
    h = read_header(buf, 0)
    if h.compression == ZSTD and api_version is not None and api_version < 7:
        raise InvalidRecordError(ErrorCode.unsupported_compression_type, "Produce requests with ZStandard compression "
                                                               "need version 7 or above.")
    if h.base_offset != 0:
        raise InvalidRecordError(ErrorCode.invalid_record, f"The baseOffset of the record batch in the append should be 0, "
                                                 f"but it is {h.base_offset}.")
    if max_message_bytes is not None and h.size > max_message_bytes:
        raise InvalidRecordError(ErrorCode.message_too_large, f"The record batch is {h.size} bytes, larger than the maximum "
                                                    f"allowed ({max_message_bytes}).")
    _check_header(h)
    crc = crc32c(memoryview(buf)[_CRC_START:first_end])
    if crc != h.crc:
        raise InvalidRecordError(ErrorCode.corrupt_message, f"Record is corrupt (stored crc = {h.crc}, computed crc = {crc}).")
    count = h.last_offset_delta + 1
    if h.record_count <= 0:
        raise InvalidRecordError(ErrorCode.invalid_record, f"Invalid reported count for record batch: {h.record_count}.")
    if count != h.record_count:
        raise InvalidRecordError(ErrorCode.invalid_record, f"Inconsistent batch offset range [0, {h.last_offset_delta}] and "
                                                 f"count of records {h.record_count}.")
    if h.is_control:
        raise InvalidRecordError(ErrorCode.invalid_record, "Clients are not allowed to write control records.")
    if h.producer_id >= 0 and h.base_sequence < 0:
        raise InvalidRecordError(ErrorCode.invalid_record, f"Invalid sequence number {h.base_sequence} in record batch with "
                                                 f"producerId {h.producer_id}.")
    return [h]


class BatchWalk(Iterator[BatchHeader]):
    """Iterator over the whole batches of a buffer, without CRC checks. It stops, without raising,
    at the end of the buffer, at a truncated tail or at a header that cannot be a v2 batch;
    `position` is then where it stopped (the end of the last whole batch) and `stopped_by` says why
    (None = clean end of buffer)."""

    __slots__ = ("_buf", "_n", "position", "stopped_by")

    def __init__(self, buf: BufferLike, start: int = 0) -> None:
        self._buf = buf
        self._n = len(buf)
        self.position = start
        self.stopped_by: str | None = None

    def __iter__(self) -> BatchWalk:
        return self

    def __next__(self) -> BatchHeader:
        pos = self.position
        n = self._n
        if pos >= n or self.stopped_by is not None:
            raise StopIteration
        if n - pos < BATCH_HEADER_SIZE:
            self.stopped_by = f"truncated batch header ({n - pos} bytes)"
            raise StopIteration
        h = read_header(self._buf, pos)
        if h.magic != 2:
            self.stopped_by = f"invalid magic {h.magic}"
            raise StopIteration
        if h.batch_length < MIN_BATCH_LENGTH:
            self.stopped_by = f"batch length {h.batch_length} below the minimum {MIN_BATCH_LENGTH}"
            raise StopIteration
        if h.record_count < 0 or h.last_offset_delta < 0:
            self.stopped_by = "negative record count or offset delta"
            raise StopIteration
        end = pos + LOG_OVERHEAD + h.batch_length
        if end > n:
            self.stopped_by = f"truncated batch (declares {h.size} bytes, {n - pos} present)"
            raise StopIteration
        self.position = end
        return h


def iter_batch_headers(buf: BufferLike, start: int = 0) -> BatchWalk:
    """Fast header walk (no CRC) from `start`; see BatchWalk for where and why it stops."""
    return BatchWalk(buf, start)


def assign_offsets(buf: bytearray | memoryview, headers: Sequence[BatchHeader], base_offset: int, leader_epoch: int, *,
                   log_append_time_ms: int | None = None) -> int:
    """Rewrite baseOffset and partitionLeaderEpoch of each batch in place (outside the CRC, so the
    CRC stays valid) and update `headers` to match; return the next offset to assign.

    With log_append_time_ms (topic uses LogAppendTime) Kafka stamps maxTimestamp and sets the
    timestamp-type bit, both inside the CRC, so the CRC is recomputed for those batches. Without it
    (CreateTime topic), a batch claiming LogAppendTime gets the bit cleared as Kafka does."""
    nxt = base_offset
    mv: memoryview | None = None
    for h in headers:
        p = h.position
        _I64.pack_into(buf, p, nxt)
        _I32.pack_into(buf, p + 12, leader_epoch)
        h.base_offset = nxt
        h.partition_leader_epoch = leader_epoch
        attrs = h.attributes
        if log_append_time_ms is not None:
            if not attrs & TIMESTAMP_TYPE_BIT or h.max_timestamp != log_append_time_ms:
                h.attributes = attrs | TIMESTAMP_TYPE_BIT
                h.max_timestamp = log_append_time_ms
                _I16.pack_into(buf, p + 21, h.attributes)
                _I64.pack_into(buf, p + 35, log_append_time_ms)
                mv = mv or memoryview(buf)
                h.crc = crc32c(mv[p + _CRC_START:p + h.size])
                _U32.pack_into(buf, p + 17, h.crc)
        elif attrs & TIMESTAMP_TYPE_BIT:
            h.attributes = attrs & ~TIMESTAMP_TYPE_BIT
            _I16.pack_into(buf, p + 21, h.attributes)
            mv = mv or memoryview(buf)
            h.crc = crc32c(mv[p + _CRC_START:p + h.size])
            _U32.pack_into(buf, p + 17, h.crc)
        nxt += h.last_offset_delta + 1
    if mv is not None:
        mv.release()
    return nxt


# -- record timestamps (ListOffsets only: one batch, decoded off the hot path) ------------------

_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def _gunzip(data: bytes) -> bytes:
    """Every member of a gzip stream (a producer may concatenate several)."""
    out = bytearray()
    while data:
        d = zlib.decompressobj(47)  # 47: gzip or zlib header, detected
        out += d.decompress(data)
        data = d.unused_data
        if not d.eof:
            raise zlib.error("truncated gzip stream")
    return bytes(out)


def decompress(codec: int, data: bytes) -> bytes:
    """The records section of a batch compressed with `codec` (NONE returns `data`). Raises
    ImportError when the codec's library is absent (snappy, lz4 and zstd are optional)."""
    if codec == NONE:
        return data
    if codec == GZIP:
        return _gunzip(data)
    if codec == SNAPPY:
        import snappy
        if data.startswith(_XERIAL_MAGIC):  # the Java client's framing: 16-byte header, sized blocks
            out = bytearray()
            pos = 16
            while pos + 4 <= len(data):
                n = _I32.unpack_from(data, pos)[0]
                out += snappy.uncompress(data[pos + 4:pos + 4 + n])
                pos += 4 + n
            return bytes(out)
        plain: bytes = snappy.uncompress(data)
        return plain
    if codec == LZ4:
        import lz4.frame
        unframed: bytes = lz4.frame.decompress(data)
        return unframed
    if codec == ZSTD:
        import zstandard
        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    raise InvalidRecordError(ErrorCode.corrupt_message, f"unknown compression type id {codec}")


def _decompress(codec: int, data: bytes) -> bytes | None:
    """`decompress`, or None when the codec's library is absent (only ListOffsets-by-timestamp and
    internal-topic replay ever need it)."""
    try:
        return decompress(codec, data)
    except ImportError:
        return None


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise InvalidRecordError(ErrorCode.corrupt_message, "varint longer than 10 bytes")


def record_timestamps(batch: bytes | bytearray | memoryview) -> list[tuple[int, int]] | None:
    """(offset, timestamp) of every record of one whole batch, decompressing if needed; None if
    the codec's library is not installed. Per-record work: for ListOffsets, never for produce or
    fetch. LogAppendTime batches need no decoding: every record carries the batch max timestamp."""
    h = read_header(batch, 0)
    if h.timestamp_type == 1:
        return [(h.base_offset + i, h.max_timestamp) for i in range(h.last_offset_delta + 1)]
    body = bytes(memoryview(batch)[BATCH_HEADER_SIZE:h.size])
    if h.compression:
        decompressed = _decompress(h.compression, body)
        if decompressed is None:
            return None
        body = decompressed
    out = []
    pos = 0
    try:
        for _ in range(h.record_count):
            length, pos = _varint(body, pos)
            end = pos + length
            ts_delta, p = _varint(body, pos + 1)  # after the attributes byte
            off_delta, _ = _varint(body, p)
            out.append((h.base_offset + off_delta, h.base_timestamp + ts_delta))
            pos = end
    except IndexError:
        raise InvalidRecordError(ErrorCode.corrupt_message, "records end before the batch's record count") from None
    return out


def first_keyless_record(batch: bytes | bytearray | memoryview) -> int | None:
    """Index of the first record of one whole batch without a key (None if every record has one),
    decompressing if needed: Kafka refuses keyless records on a compacted topic. Per-record work,
    paid by compacted topics only (as in Kafka, whose validator decodes them too)."""
    h = read_header(batch, 0)
    body = bytes(memoryview(batch)[BATCH_HEADER_SIZE:h.size])
    if h.compression:
        body = decompress(h.compression, body)
    pos = 0
    try:
        for i in range(h.record_count):
            length, pos = _varint(body, pos)
            end = pos + length
            _ts, p = _varint(body, pos + 1)
            _off, p = _varint(body, p)
            key_length, _ = _varint(body, p)
            if key_length < 0:
                return i
            pos = end
    except IndexError:
        raise InvalidRecordError(ErrorCode.corrupt_message, "records end before the batch's record count") from None
    return None


# -- encoding (internal topics and tests; per-record work, so never on the produce path) -------

def _zigzag(out: bytearray, v: int) -> None:
    v = (v << 1) ^ (v >> 63)
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _nullable_bytes(out: bytearray, b: bytes | None) -> None:
    if b is None:
        _zigzag(out, -1)
    else:
        _zigzag(out, len(b))
        out += b


RecordSpec = tuple[Any, ...]  # (key, value) | (key, value, headers) | (key, value, headers, timestamp_ms)


def encode_batch(records: Sequence[RecordSpec], *, timestamp_ms: int, base_offset: int = 0,
                 partition_leader_epoch: int = -1, producer_id: int = -1, producer_epoch: int = -1,
                 base_sequence: int = -1, transactional: bool = False, control: bool = False,
                 log_append_time: bool = False, compression: int = NONE) -> bytearray:
    """Encode one v2 record batch. Each record is (key, value[, headers[, timestamp_ms]]) with
    headers a sequence of (str | bytes key, bytes | None value); record timestamps default to
    `timestamp_ms`. Compression: gzip uses the stdlib; snappy, lz4 and zstd need their libraries."""
    if not records:
        raise ValueError("a record batch holds at least one record")
    stamps = [r[3] if len(r) > 3 and r[3] is not None else timestamp_ms for r in records]
    base_ts = stamps[0]
    body = bytearray()
    rec = bytearray()
    for i, r in enumerate(records):
        rec.clear()
        rec.append(0)  # record attributes
        _zigzag(rec, stamps[i] - base_ts)
        _zigzag(rec, i)
        _nullable_bytes(rec, r[0])
        _nullable_bytes(rec, r[1])
        headers = r[2] if len(r) > 2 and r[2] else ()
        _zigzag(rec, len(headers))
        for hk, hv in headers:
            hkb = hk.encode() if isinstance(hk, str) else hk
            _zigzag(rec, len(hkb))
            rec += hkb
            _nullable_bytes(rec, hv)
        _zigzag(body, len(rec))
        body += rec
    if compression == GZIP:
        body = bytearray(gzip.compress(bytes(body)))
    elif compression == SNAPPY:
        import snappy
        body = bytearray(snappy.compress(bytes(body)))
    elif compression == LZ4:
        import lz4.frame
        body = bytearray(lz4.frame.compress(bytes(body)))
    elif compression == ZSTD:
        import zstandard
        body = bytearray(zstandard.ZstdCompressor().compress(bytes(body)))
    elif compression != NONE:
        raise ValueError(f"unknown compression type id {compression}")
    attrs = compression
    if log_append_time:
        attrs |= TIMESTAMP_TYPE_BIT
    if transactional:
        attrs |= TRANSACTIONAL_BIT
    if control:
        attrs |= CONTROL_BIT
    n = len(records)
    buf = bytearray(BATCH_HEADER_SIZE)
    _HEADER.pack_into(buf, 0, base_offset, BATCH_HEADER_SIZE - LOG_OVERHEAD + len(body), partition_leader_epoch,
                      2, 0, attrs, n - 1, base_ts, max(stamps), producer_id, producer_epoch, base_sequence, n)
    buf += body
    _U32.pack_into(buf, 17, crc32c(memoryview(buf)[_CRC_START:]))
    return buf


@dataclass(frozen=True, slots=True)
class BatchRecord:
    offset: int
    timestamp: int  # the batch max timestamp under LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: list[tuple[bytes, bytes | None]]


def _nullable_slice(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = _varint(buf, pos)
    if n < 0:
        return None, pos
    return buf[pos:pos + n], pos + n


def decode_records(batch: bytes | bytearray | memoryview) -> list[BatchRecord]:
    """Every record of one whole batch, decompressing if needed (ImportError when the codec's
    library is absent). Per-record work: for the tools and for replaying internal topics, never on
    the produce or fetch path."""
    h = read_header(batch, 0)
    body = bytes(memoryview(batch)[BATCH_HEADER_SIZE:h.size])
    if h.compression:
        body = decompress(h.compression, body)
    out: list[BatchRecord] = []
    pos = 0
    try:
        for _ in range(h.record_count):
            length, pos = _varint(body, pos)
            end = pos + length
            ts_delta, p = _varint(body, pos + 1)  # skip the attributes byte
            off_delta, p = _varint(body, p)
            key, p = _nullable_slice(body, p)
            value, p = _nullable_slice(body, p)
            n_headers, p = _varint(body, p)
            headers = []
            for _h in range(n_headers):
                hk, p = _nullable_slice(body, p)
                hv, p = _nullable_slice(body, p)
                headers.append((hk or b"", hv))
            ts = h.max_timestamp if h.timestamp_type == 1 else h.base_timestamp + ts_delta
            out.append(BatchRecord(h.base_offset + off_delta, ts, key, value, headers))
            pos = end
    except IndexError:
        raise InvalidRecordError(ErrorCode.corrupt_message, "records end before the batch's record count") from None
    return out


def iter_records(batch: bytes | bytearray | memoryview) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record of one whole batch, decompressing if needed. For
    replaying internal topics at start-up; never on the produce or fetch path."""
    try:
        records = decode_records(batch)
    except ImportError:
        raise InvalidRecordError(ErrorCode.corrupt_message,
                                 f"no library for compression type {read_header(batch, 0).compression}") from None
    return [(r.offset, r.key, r.value) for r in records]


# -- transaction markers (control batches) -------------------------------------------------------

ABORT_MARKER, COMMIT_MARKER = 0, 1  # Kafka's ControlRecordType
_CONTROL_KEY = struct.Struct(">hh")  # version 0, type
_MARKER_VALUE = struct.Struct(">hi")  # version 0, coordinator epoch


def encode_marker(producer_id: int, producer_epoch: int, commit: bool, *, coordinator_epoch: int,
                  timestamp_ms: int) -> bytearray:
    """One control batch holding an end-transaction marker, as Kafka's coordinator writes it."""
    key = _CONTROL_KEY.pack(0, COMMIT_MARKER if commit else ABORT_MARKER)
    value = _MARKER_VALUE.pack(0, coordinator_epoch)
    return encode_batch([(key, value)], timestamp_ms=timestamp_ms, producer_id=producer_id,
                        producer_epoch=producer_epoch, transactional=True, control=True)


def read_marker(batch: bytes | bytearray | memoryview) -> tuple[int, int]:
    """(control record type, coordinator epoch) of one whole control batch: the type is
    COMMIT_MARKER, ABORT_MARKER or another Kafka defines (epoch -1 for those); raises
    InvalidRecordError if it holds no readable control key."""
    for _offset, key, value in iter_records(batch):
        if key is None or len(key) < _CONTROL_KEY.size:
            break
        kind = int(_CONTROL_KEY.unpack_from(key, 0)[1])
        epoch = -1
        if kind in (ABORT_MARKER, COMMIT_MARKER) and value is not None and len(value) >= _MARKER_VALUE.size:
            epoch = int(_MARKER_VALUE.unpack_from(value, 0)[1])
        return kind, epoch
    raise InvalidRecordError(ErrorCode.corrupt_message, "control batch without a control record key")
