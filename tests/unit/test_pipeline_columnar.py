"""The report's vectorised record decoder and its one-pass scan task, checked against the
per-record reference decoder (segment_records) without a JVM."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from sharebroker.broker.share_state.records import encode_record
from sharebroker.broker.share_state.store import SNAPSHOT, SnapshotValue, StateBatch, StateRecord
from sharebroker.pipeline import columnar
from sharebroker.pipeline.analytics import Segment, SegmentWalk, list_segments, mapped, segment_records
from sharebroker.pipeline.columnar import ColumnarDecodeError, decode_batches
from sharebroker.pipeline.report_scan import read_share_state, scan_task
from sharebroker.protocol.record_batch import GZIP, LZ4, NONE, SNAPPY, ZSTD, encode_batch

TS = 1_700_000_000_000


def reference(seg: Segment) -> dict[str, list]:
    chunks = list(segment_records(seg))
    return {c: sum((ch[c] for ch in chunks), []) for c in chunks[0]} if chunks else {}


def decoded(segs: list[Segment]) -> dict[str, list]:
    pairs = []
    with_maps = [mapped(s.path) for s in segs]
    bufs = [m.__enter__() for m in with_maps]
    try:
        for seg, buf in zip(segs, bufs):
            pairs += [(bytes(buf), h) for h in SegmentWalk(seg, buf)]
        cols = decode_batches(pairs)
    finally:
        for m in with_maps:
            m.__exit__(None, None, None)
    return {"offset": cols.offset.tolist(), "timestamp": cols.timestamp.tolist(),
            "timestamp_type": cols.timestamp_type.tolist(), "key": cols.key.to_pylist(),
            "value": cols.value.to_pylist(), "headers": cols.headers.tolist(),
            "producer_id": cols.producer_id.tolist(), "compression": cols.compression.tolist()}


def random_segment(directory: Path, rng: random.Random, batches: int) -> Segment:
    """Batches of 1-300 records (so both the lockstep and the record-by-record tail run), keys and
    values null, empty, short (inline in Arrow's view) or long (multi-byte varint lengths), headers,
    every codec, LogAppendTime, transactional control batches and a torn tail."""
    directory.mkdir(parents=True)
    out, offset = [], 0
    for i in range(batches):
        if i % 17 == 16:
            out.append(encode_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")], timestamp_ms=TS,
                                    base_offset=offset, producer_id=7, producer_epoch=0, transactional=True,
                                    control=True))
            offset += 1
            continue
        records = []
        for j in range(rng.choice([1, 2, rng.randrange(1, 300)])):
            def payload() -> bytes | None:
                kind = rng.randrange(5)
                return None if kind == 0 else b"" if kind == 1 else rng.randbytes(rng.randrange(1, 13)) \
                    if kind == 2 else rng.randbytes(rng.randrange(13, 3000))
            headers = [(f"h{k}", rng.choice([None, b"x" * rng.randrange(200)])) for k in range(rng.randrange(3))]
            records.append((payload(), payload(), headers, TS + rng.randrange(-5, 10**7) if j else TS))
        out.append(encode_batch(records, timestamp_ms=TS + i, base_offset=offset,
                                compression=rng.choice([NONE, NONE, GZIP, SNAPPY, LZ4, ZSTD]),
                                log_append_time=rng.random() < 0.1, producer_id=rng.choice([-1, 5])))
        offset += len(records)
    path = directory / f"{0:020d}.log"
    path.write_bytes(b"".join(bytes(b) for b in out) + bytes(out[0])[:40])
    return Segment(str(path), directory.name.rsplit("-", 1)[0], int(directory.name.rsplit("-", 1)[1]), 0,
                   path.stat().st_size, None)


@pytest.mark.parametrize("seed", range(4))
def test_vectorised_decoding_gives_the_reference_decoders_columns(tmp_path, seed):
    rng = random.Random(seed)
    segs = [random_segment(tmp_path / f"t-{i}", rng, rng.randrange(1, 40)) for i in range(3)]
    want: dict[str, list] = {}
    for seg in segs:
        for c, values in reference(seg).items():
            want.setdefault(c, []).extend(values)
    got = decoded(segs)
    assert got == {c: v for c, v in want.items() if c not in ("topic", "partition")}
    assert len(got["offset"]) > 100


def test_long_batches_are_finished_record_by_record(tmp_path, monkeypatch):
    """With the lockstep threshold above the batch count, the record-by-record tail does it all."""
    rng = random.Random(9)
    seg = random_segment(tmp_path / "t-0", rng, 6)
    want = {c: v for c, v in reference(seg).items() if c not in ("topic", "partition")}
    monkeypatch.setattr(columnar, "LOCKSTEP_MIN", 1000)
    assert decoded([seg]) == want
    monkeypatch.setattr(columnar, "LOCKSTEP_MIN", 0)
    assert decoded([seg]) == want


def test_malformed_records_are_refused(tmp_path):
    batch = bytearray(encode_batch([(b"k", b"value"), (b"k2", b"v2")], timestamp_ms=TS))
    batch[61] = 0x7E  # the first record's length (zigzag 63) now runs past the batch
    seg_path = tmp_path / "t-0" / f"{0:020d}.log"
    seg_path.parent.mkdir()
    seg_path.write_bytes(bytes(batch))
    from sharebroker.protocol.record_batch import read_header
    h = read_header(bytes(batch), 0)
    with pytest.raises(ColumnarDecodeError):
        decode_batches([(bytes(batch), h)] * 10)  # lockstep
    with pytest.raises(ColumnarDecodeError):
        decode_batches([(bytes(batch), h)])  # record by record


def test_scan_task_writes_records_once_and_returns_the_small_tables(tmp_path):
    rng = random.Random(3)
    data = tmp_path / "data"
    segs = [random_segment(data / f"orders-{p}", rng, 12) for p in range(2)]
    tid = uuid.uuid4()
    state_dir = data / "__share_group_state-0"
    state_dir.mkdir()
    key, value = encode_record(StateRecord(("g", tid, 1), SNAPSHOT, SnapshotValue(
        0, 1, 0, 5, 0, TS, TS, [StateBatch(5, 6, 4, 2)])))
    (state_dir / f"{0:020d}.log").write_bytes(bytes(encode_batch([(key, value)], timestamp_ms=TS)))
    state, state_summaries = read_share_state([s for s in list_segments(data) if s.topic == "__share_group_state"],
                                              {str(tid): "orders"})
    assert [(r["group"], r["topic"], r["start_offset"]) for r in state.to_pylist()] == [("g", "orders", 5)]
    assert [r["records"] for r in state_summaries] == [1]
    out = tmp_path / "out"
    user = [s for s in list_segments(data) if s.topic == "orders"]
    archived = {("orders", 1): [(5, 6, "g", 2), (9, 9, "h", 3)], ("orders", 0): [(10**9, 10**9, "g", 1)]}
    for _attempt in range(2):  # a retried task replaces its files: no record twice
        tables = scan_task(3, user, str(out), archived)
    files = sorted(p.relative_to(out) for p in (out / "records").rglob("*") if p.is_file())
    assert files == [Path("records/topic=orders/part-00003.parquet")]
    rows = pq.read_table(out / "records" / "topic=orders").to_pylist()
    want = []
    for seg in segs:
        ref = reference(seg)
        want += list(zip(ref["partition"], ref["offset"], ref["key"], ref["value"], ref["timestamp"]))
    assert sorted((r["partition"], r["offset"], r["key"], r["value"], r["timestamp"]) for r in rows) == sorted(want)
    assert [r["torn_bytes"] for r in tables["segments"].to_pylist()] == [40, 40]
    by_offset = {(p, o): (k, v, ts) for p, o, k, v, ts in want}
    assert sorted((r["group"], r["partition"], r["offset"], r["delivery_count"], r["key"], r["value"], r["timestamp"])
                  for r in tables["archived"].to_pylist()) == \
        sorted([("g", 1, o, 2, *by_offset[(1, o)]) for o in (5, 6)] + [("h", 1, 9, 3, *by_offset[(1, 9)])])
    seconds = tables["seconds"].to_pylist()
    assert sum(r["count"] for r in seconds) == sum(1 for *_, ts in want if ts >= 0)
    assert all(r["topic"] == "orders" for r in seconds)


def test_a_task_writes_its_buffered_topics_when_it_holds_too_much(tmp_path, monkeypatch):
    """Many small topics in one task: the buffered records are written as they pile up rather
    than all held until the task ends, and nothing is lost or written twice. (Chunks of one batch
    here, so each batch is a piece of its own.)"""
    from sharebroker.pipeline import report_scan

    rng = random.Random(5)
    segs = [random_segment(tmp_path / "data" / f"t{i}-0", rng, 4) for i in range(3)]
    monkeypatch.setattr(report_scan, "CHUNK_BYTES", 1)
    for pending in (2**40, 1):  # everything held to the end; written at each piece
        monkeypatch.setattr(report_scan, "PENDING_BYTES", pending)
        scan_task(0, segs, str(tmp_path / f"out-{pending}"))
        for seg in segs:
            f = pq.ParquetFile(tmp_path / f"out-{pending}" / "records" / f"topic={seg.topic}" / "part-00000.parquet")
            assert f.metadata.num_row_groups == (1 if pending > 1 else len(data_batches(seg)))
            assert [r["offset"] for r in f.read().to_pylist()] == reference(seg)["offset"]


def data_batches(seg: Segment) -> list:
    with mapped(seg.path) as buf:
        return list(SegmentWalk(seg, buf))


@pytest.mark.parametrize("lockstep", [True, False])
def test_a_key_longer_than_its_record_is_refused_not_read(lockstep):
    """A producer's broken record under a valid CRC: a key length far past the batch is refused
    before any byte is gathered (the scan then lets the reference decoder say where it is)."""
    from sharebroker.protocol.crc import crc32c
    from sharebroker.protocol.record_batch import read_header

    batch = bytearray(encode_batch([(b"k", b"value")] * 3, timestamp_ms=TS))
    # The first record: length, attributes, timestamp delta, offset delta, then the key's length.
    at = 61 + 1 + 1 + 1 + 1
    assert batch[at] == 2  # zigzag(1)
    batch[at:at + 1] = b"\xfe" + b"\xff" * 8 + b"\x01"  # zigzag: 2**63 - 1 bytes of key
    batch[8:12] = (len(batch) - 12).to_bytes(4, "big")
    batch[17:21] = crc32c(bytes(batch[21:])).to_bytes(4, "big")
    h = read_header(bytes(batch), 0)
    with pytest.raises(ColumnarDecodeError):
        decode_batches([(bytes(batch), h)] * (20 if lockstep else 1))


def test_the_scan_names_the_segment_and_batch_the_reference_decoder_refuses(tmp_path):
    from sharebroker.protocol.crc import crc32c

    good = bytes(encode_batch([(b"k", b"v")], timestamp_ms=TS))
    bad = bytearray(encode_batch([(b"k", b"value")] * 2, timestamp_ms=TS, base_offset=1))
    bad[61 + 4] = 0x7E  # the first key's length: 63 bytes, past the batch
    bad[17:21] = crc32c(bytes(bad[21:])).to_bytes(4, "big")
    path = tmp_path / "data" / "t-0" / f"{0:020d}.log"
    path.parent.mkdir(parents=True)
    path.write_bytes(good + bytes(bad))
    (seg,) = list_segments(tmp_path / "data")
    with pytest.raises(ValueError, match=f"{path}: batch at offset 1 does not decode"):
        scan_task(0, [seg], str(tmp_path / "out"))


def _recrc(batch: bytearray) -> bytes:
    from sharebroker.protocol.crc import crc32c

    batch[8:12] = (len(batch) - 12).to_bytes(4, "big")
    batch[17:21] = crc32c(bytes(batch[21:])).to_bytes(4, "big")
    return bytes(batch)


@pytest.mark.parametrize("lockstep", [True, False])
def test_a_header_count_past_its_record_is_refused(lockstep):
    """A header count the record's bytes cannot hold (each header takes two length bytes at least)
    is refused, not carried into the columns."""
    from sharebroker.protocol.record_batch import read_header

    batch = bytearray(encode_batch([(b"k", b"value")] * 3, timestamp_ms=TS))
    # The first record: length, attributes, ts delta, offset delta, key length, key, value length,
    # value, then the header count (0).
    at = 61 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 5
    assert batch[at] == 0
    batch[at] = 0x7E  # zigzag(63): 63 headers in no bytes
    data = _recrc(batch)
    h = read_header(data, 0)
    with pytest.raises(ColumnarDecodeError):
        decode_batches([(data, h)] * (20 if lockstep else 1))


def test_a_record_count_its_bytes_cannot_hold_is_refused_before_allocating():
    """A huge record count under a valid CRC is refused before columns for it are allocated."""
    from sharebroker.protocol.record_batch import read_header

    batch = bytearray(encode_batch([(b"k", b"value")] * 3, timestamp_ms=TS))
    batch[57:61] = (2**31 - 1).to_bytes(4, "big")  # the batch header's record count
    data = _recrc(batch)
    h = read_header(data, 0)
    assert h.record_count == 2**31 - 1
    with pytest.raises(ColumnarDecodeError, match="record counts"):
        decode_batches([(data, h)])
