"""Record batches for the console tools: encoding produced lines and decoding fetched batches
(every codec, headers, exact timestamps)."""

from __future__ import annotations

import gzip
import struct
import zlib
from dataclasses import dataclass, field

from protocol.record_batch import encode_batch

_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = 61
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@dataclass
class Record:
    offset: int
    timestamp: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    leader_epoch: int = -1
    partition: int = 0
    topic: str = ""
    delivery_count: int | None = None


def encode(records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]], *,
           timestamp_ms: int, compression: int = 0) -> bytes:
    return bytes(encode_batch(records, timestamp_ms=timestamp_ms, compression=compression))


def _decompress(codec: int, data: bytes) -> bytes:
    if codec == 0:
        return data
    if codec == 1:
        return zlib.decompress(data, 47) if data[:2] != b"\x1f\x8b" else gzip.decompress(data)
    if codec == 2:
        import snappy  # type: ignore[import-not-found]

        if data.startswith(_XERIAL_MAGIC):
            out = bytearray()
            pos = 16
            while pos + 4 <= len(data):
                (n,) = struct.unpack_from(">i", data, pos)
                out += snappy.uncompress(data[pos + 4:pos + 4 + n])
                pos += 4 + n
            return bytes(out)
        return snappy.uncompress(data)
    if codec == 3:
        import lz4.frame  # type: ignore[import-not-found]

        return lz4.frame.decompress(data)
    if codec == 4:
        import zstandard  # type: ignore[import-not-found]

        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    raise ValueError(f"unknown compression codec {codec}")


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def _nbytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = _varint(buf, pos)
    if n < 0:
        return None, pos
    return bytes(buf[pos:pos + n]), pos + n


@dataclass
class Decoded:
    records: list[Record]
    next_offset: int | None  # one past the last complete batch (None: no complete batch)


def decode(blob: bytes | None, *, topic: str = "", partition: int = 0) -> Decoded:
    """Every record of the complete v2 batches in `blob`; control batches are skipped but still
    move `next_offset`. A trailing partial batch is ignored, as clients do."""
    data = bytes(blob or b"")
    out: list[Record] = []
    pos = 0
    next_offset: int | None = None
    while pos + HEADER_SIZE <= len(data):
        (base_offset, length, leader_epoch, magic, _crc, attrs, last_delta, base_ts, max_ts, _pid, _pepoch,
         _bseq, count) = _HEADER.unpack_from(data, pos)
        end = pos + 12 + length
        if end > len(data) or length < HEADER_SIZE - 12:
            break
        if magic != 2:
            raise ValueError(f"record batch with magic {magic} at offset {base_offset} is not supported")
        next_offset = base_offset + last_delta + 1
        if attrs & 0x20:  # control batch (transaction markers)
            pos = end
            continue
        ts_type = (attrs >> 3) & 1
        body = _decompress(attrs & 7, data[pos + HEADER_SIZE:end])
        p = 0
        for _ in range(count):
            rlen, p = _varint(body, p)
            rend = p + rlen
            p += 1  # attributes
            ts_delta, p = _varint(body, p)
            off_delta, p = _varint(body, p)
            key, p = _nbytes(body, p)
            value, p = _nbytes(body, p)
            nh, p = _varint(body, p)
            headers = []
            for _h in range(nh):
                hk, p = _nbytes(body, p)
                hv, p = _nbytes(body, p)
                headers.append(((hk or b"").decode("utf-8", "replace"), hv))
            ts = max_ts if ts_type == 1 else base_ts + ts_delta
            out.append(Record(base_offset + off_delta, ts, ts_type, key, value, headers, leader_epoch, partition,
                              topic))
            p = rend
        pos = end
    return Decoded(out, next_offset)
