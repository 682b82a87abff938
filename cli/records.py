"""Record batches for the console tools: encoding produced lines and decoding fetched batches
(every codec, headers, exact timestamps)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sharebroker.protocol.record_batch import BATCH_HEADER_SIZE, LOG_OVERHEAD, decode_records, encode_batch, read_header

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


def encode(records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int | None]], *,
           timestamp_ms: int, compression: int = 0) -> bytes:
    return bytes(encode_batch(records, timestamp_ms=timestamp_ms, compression=compression))


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
    while pos + BATCH_HEADER_SIZE <= len(data):
        h = read_header(data, pos)
        end = pos + h.size
        if end > len(data) or h.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
            break
        if h.magic != 2:
            raise ValueError(f"record batch with magic {h.magic} at offset {h.base_offset} is not supported")
        next_offset = h.next_offset
        if h.is_control:  # transaction markers
            pos = end
            continue
        for r in decode_records(data[pos:end]):
            headers = [(hk.decode("utf-8", "replace"), hv) for hk, hv in r.headers]
            out.append(Record(r.offset, r.timestamp, h.timestamp_type, r.key, r.value, headers,
                              h.partition_leader_epoch, partition, topic))
        pos = end
    return Decoded(out, next_offset)
