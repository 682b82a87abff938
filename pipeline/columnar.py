"""Record batches decoded into Arrow columns with numpy: the report's hot loop.

A batch's records are a chain of varint-framed records, so one record's position depends on the
one before it; but the batches of a segment are independent. The decoder walks many batches in
lockstep: step i decodes record i of every batch that has one, each field as one numpy operation
over all of them. The Python work is then per step (the largest record count among the batches),
not per record; a few long batches left alone at the end are finished record by record.
Keys and values are gathered into Arrow binary arrays in one copy. The per-record Python decoder
(protocol/record_batch.decode_records) stays the reference: a chunk that does not decode cleanly
here is decoded by it, which raises the error it would."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sharebroker.protocol.record_batch import BATCH_HEADER_SIZE, NONE, BatchHeader, InvalidRecordError, decompress
from sharebroker.protocol.record_batch import _varint

LOCKSTEP_MIN = 8  # batches still walking below which the rest is finished record by record
_PAD = 16  # zero bytes after the data: a varint read past a corrupt record's end stays in bounds
_MAX_RAW = 2**31 - _PAD  # record bytes of one decode: Arrow's binary view offsets are int32
_MIN_RECORD_SIZE = 7  # length, attributes, timestamp and offset deltas, key and value lengths, header count


class ColumnarDecodeError(ValueError):
    """The bytes are not well-formed records (the caller falls back to the per-record decoder)."""


@dataclass
class DecodedColumns:
    """The records of a run of data batches, in log order."""
    offset: np.ndarray  # int64
    timestamp: np.ndarray  # int64
    timestamp_type: np.ndarray  # int8, per record
    producer_id: np.ndarray  # int64
    compression: np.ndarray  # int8
    headers: np.ndarray  # int32: record header count
    key: pa.Array  # binary
    value: pa.Array  # binary

    def __len__(self) -> int:
        return len(self.offset)


def _varints(d: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The zigzag varints at `pos` (int64 positions in the uint8 array `d`): values and the
    positions after them."""
    b = d[pos]
    val = (b & 0x7F).astype(np.uint64)
    nxt = pos + 1
    more = np.flatnonzero(b & 0x80)
    shift = 7
    while more.size:
        if shift > 63:
            raise ColumnarDecodeError("varint longer than 10 bytes")
        b = d[nxt[more]]
        val[more] |= (b & 0x7F).astype(np.uint64) << np.uint64(shift)
        nxt[more] += 1
        more = more[(b & 0x80) != 0]
        shift += 7
    return (val >> np.uint64(1)).astype(np.int64) ^ -(val & np.uint64(1)).astype(np.int64), nxt


_FIELDS = 7  # record end, timestamp delta, offset delta, key start, key length, value start, value length


def _walk_one(d: bytes, pos: int, end: int, count: int, out: np.ndarray, at: int) -> None:
    """Records [i, count) of one batch from `pos`, field by field into out[:, at:at + count]."""
    for j in range(at, at + count):
        length, p = _varint(d, pos)
        rec_end = p + length
        tsd, p = _varint(d, p + 1)  # skip the attributes byte
        offd, p = _varint(d, p)
        klen, p = _varint(d, p)
        kstart = p
        p += max(klen, 0)
        vlen, p = _varint(d, p)
        vstart = p
        p += max(vlen, 0)
        nh, p = _varint(d, p)
        if length < 0 or p > rec_end or rec_end > end or nh < 0 or nh * 2 > rec_end - p or klen > length or vlen > length:
            raise ColumnarDecodeError("record runs past its length or its batch")
        out[:, j] = (tsd, offd, kstart, klen, vstart, vlen, nh)
        pos = rec_end


def _walk(d: np.ndarray, raw: bytes, starts: np.ndarray, ends: np.ndarray, counts: np.ndarray,
          first: np.ndarray) -> np.ndarray:
    """The fields of every record (rows: timestamp delta, offset delta, key start, key length,
    value start, value length, header count), record r of batch b in column first[b] + r."""
    total = int(counts.sum())
    out = np.zeros((_FIELDS, total), dtype=np.int64)
    order = np.argsort(-counts, kind="stable")  # the batches still walking are always a prefix
    pos, cnt, end, at = starts[order].copy(), counts[order], ends[order], first[order]
    step = 0
    while True:
        k = int(np.count_nonzero(cnt > step))
        if k == 0:
            break
        if k < LOCKSTEP_MIN:  # a few long batches left: record by record is cheaper than a step
            for b in range(k):
                _walk_one(raw, int(pos[b]), int(end[b]), int(cnt[b]) - step, out, int(at[b]) + step)
            break
        p = pos[:k]
        length, q = _varints(d, p)
        # Lengths are checked before they move a position (or overflow one): every range handed
        # to _binary then lies inside its batch.
        if bool(((length < 0) | (length > end[:k] - q)).any()):
            raise ColumnarDecodeError("record runs past its batch")
        rec_end = q + length
        tsd, q = _varints(d, q + 1)
        offd, q = _varints(d, q)
        klen, q = _varints(d, q)
        if bool((klen > length).any()):
            raise ColumnarDecodeError("key longer than its record")
        kstart = q
        q = q + np.maximum(klen, 0)
        vlen, q = _varints(d, q)
        if bool((vlen > length).any()):
            raise ColumnarDecodeError("value longer than its record")
        vstart = q
        q = q + np.maximum(vlen, 0)
        nh, q = _varints(d, q)
        # A header takes at least two bytes (two lengths): a count past the record is refused.
        if bool(((q > rec_end) | (nh < 0) | (nh * 2 > rec_end - q)).any()):
            raise ColumnarDecodeError("record runs past its length or its batch")
        cols = at[:k] + step
        out[0, cols], out[1, cols], out[2, cols], out[3, cols] = tsd, offd, kstart, klen
        out[4, cols], out[5, cols], out[6, cols] = vstart, vlen, nh
        pos[:k] = rec_end
        step += 1
    return out


def _binary(d: np.ndarray, raw: bytes, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """An Arrow binary array of the byte ranges (start, length) of `raw` (`d` is its uint8 view,
    at least 12 bytes longer than any range's start); a negative length is null. Built as Arrow's
    binary view (16 bytes per value: its length and either the value inline, up to 12 bytes, or a
    4-byte prefix and its offset in `raw`), which Arrow's cast then gathers into one buffer."""
    n = len(starts)
    valid = lengths >= 0
    sizes = np.where(valid, lengths, 0).astype("<i4")
    views = np.zeros((n, 16), dtype=np.uint8)
    views[:, 0:4] = sizes.view(np.uint8).reshape(n, 4)
    k = np.arange(12)
    head = d[starts[:, None] + k]
    # Bytes past an inline value's length are not zeroed, as Arrow asks of a view array: the
    # array lives only for the cast below, which reads `length` bytes.
    short = sizes <= 12
    views[short, 4:16] = head[short]
    long_ = ~short
    views[long_, 4:8] = head[long_, :4]  # buffer index 0 in bytes 8..11 stays zero
    views[long_, 12:16] = starts[long_].astype("<i4").view(np.uint8).reshape(-1, 4)
    nulls = n - int(np.count_nonzero(valid))
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    view = pa.Array.from_buffers(pa.binary_view(), n, [validity, pa.py_buffer(views), pa.py_buffer(raw)],
                                 null_count=nulls)
    return view.cast(pa.binary())


def decode_batches(batches: Sequence[tuple[bytes | memoryview, BatchHeader]]) -> DecodedColumns:
    """The records of `batches` (whole, CRC-valid data batches, each with the buffer it lies in, in
    log order; several segments' batches may be decoded together, which is what makes the lockstep
    pay) as columns. Raises ColumnarDecodeError when their bytes are not well-formed records,
    ImportError when a compression library is missing."""
    headers = [h for _, h in batches]
    bodies: list[bytes | memoryview] = []
    starts, ends = [], []
    at = 0
    for buf, h in batches:
        body: bytes | memoryview = memoryview(buf)[h.position + BATCH_HEADER_SIZE:h.position + h.size]
        if h.compression != NONE:
            try:
                body = decompress(h.compression, bytes(body))
            except ImportError:
                raise
            except Exception as exc:
                raise ColumnarDecodeError(f"batch at offset {h.base_offset} does not decompress: {exc}") from exc
        bodies.append(body)
        starts.append(at)
        at += len(body)
        ends.append(at)
    if at >= _MAX_RAW:  # Arrow's view offsets are 32-bit: decoded apart, record by record
        raise ColumnarDecodeError(f"{at} bytes of records in one chunk, over the columnar decoder's 2 GiB")
    counts = np.fromiter((h.record_count for h in headers), dtype=np.int64, count=len(headers))
    if bool((counts < 0).any()) or int(counts.sum()) * _MIN_RECORD_SIZE > at:
        # A record takes at least 7 bytes: a count the bytes cannot hold is not allocated for.
        raise ColumnarDecodeError("batch record counts exceed what their bytes can hold")
    raw = b"".join(bodies) + bytes(_PAD)
    d = np.frombuffer(raw, dtype=np.uint8)
    first = np.zeros(len(headers), dtype=np.int64)
    if len(headers) > 1:
        np.cumsum(counts[:-1], out=first[1:])
    try:
        fields = _walk(d, raw, np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64), counts, first)
    except (IndexError, OverflowError) as exc:
        raise ColumnarDecodeError("records end before the batch's record count") from exc
    except InvalidRecordError as exc:  # the codec's varint reader: longer than 10 bytes
        raise ColumnarDecodeError(str(exc)) from exc
    tsd, offd, kstart, klen, vstart, vlen, nh = fields

    def per_record(values: Iterable[int], dtype: type) -> np.ndarray:
        return np.repeat(np.fromiter(values, dtype=np.int64, count=len(headers)), counts).astype(dtype)

    log_append = per_record((1 if h.timestamp_type else 0 for h in headers), np.int8)
    base_ts = per_record((h.base_timestamp for h in headers), np.int64)
    max_ts = per_record((h.max_timestamp for h in headers), np.int64)
    return DecodedColumns(
        offset=per_record((h.base_offset for h in headers), np.int64) + offd,
        timestamp=np.where(log_append == 1, max_ts, base_ts + tsd),
        timestamp_type=log_append,
        producer_id=per_record((h.producer_id for h in headers), np.int64),
        compression=per_record((h.compression for h in headers), np.int8),
        headers=nh.astype(np.int32),
        key=_binary(d, raw, kstart, klen),
        value=_binary(d, raw, vstart, vlen),
    )
