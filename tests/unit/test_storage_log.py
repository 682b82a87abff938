"""storage.PartitionLog: append, read, segments and indexes, timestamps, retention, flush."""

from __future__ import annotations

import gc
import os
import struct
import threading
from array import array
from pathlib import Path

import pytest
from kio.records.readers import read_batch

from sharebroker.protocol.record_batch import encode_batch, parse_batches
from sharebroker.storage import LogConfig, OffsetOutOfRange, PartitionLog
from sharebroker.storage import segment as segment_module
from sharebroker.storage.file_cache import FileCache
from sharebroker.storage.index_cache import IndexCache
from sharebroker.storage.partition_log import LogClosedError
from sharebroker.storage.segment import LogSegment

NOW = 1_700_000_000_000


def make(values: list[bytes], *, ts: int = NOW) -> tuple[bytearray, list]:
    buf = encode_batch([(None, v) for v in values], timestamp_ms=ts)
    return buf, parse_batches(buf, verify_crc=True)


class Feed:
    """Appends numbered records so reads can be checked record by record."""

    def __init__(self, log: PartitionLog) -> None:
        self.log = log
        self.n = 0

    def put(self, records: int = 1, *, size: int = 50, ts: int | None = None, now: int = NOW,
            lat: bool = False):
        values = [f"{self.n + i:08d}".encode().ljust(size, b".") for i in range(records)]
        buf, hs = make(values, ts=NOW + self.n if ts is None else ts)
        res = self.log.append(buf, hs, leader_epoch=3, now_ms=now, log_append_time=lat)
        assert res.first_offset == self.n
        self.n += records
        return res


def decode(records: bytes) -> list[tuple[int, int]]:
    """(offset, number written in the value) of every record, via kio's reader."""
    out = []
    pos = 0
    while pos < len(records):
        batch, size = read_batch(records, pos)
        out += [(r.offset, int(r.value[:8])) for r in batch.records]
        pos += size
    return out


def open_log(path: Path, config: LogConfig | None = None, **kw) -> PartitionLog:
    kw.setdefault("recovery_point", 0)
    kw.setdefault("clean_shutdown", True)
    kw.setdefault("now_ms", NOW)
    return PartitionLog.open(path, config or LogConfig(), **kw)


def index_file(path: Path) -> list[tuple[int, int]]:
    data = path.read_bytes()
    assert len(data) % 8 == 0
    return [struct.unpack_from(">ii", data, i) for i in range(0, len(data), 8)]


def time_index_file(path: Path) -> list[tuple[int, int]]:
    data = path.read_bytes()
    assert len(data) % 12 == 0
    return [struct.unpack_from(">qi", data, i) for i in range(0, len(data), 12)]


@pytest.fixture
def log(tmp_path: Path):
    log = open_log(tmp_path / "events-0", LogConfig(segment_bytes=4000, index_interval_bytes=300))
    yield log
    if not log.closed:
        log.close()


def test_empty_log(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 0, 0)
    assert [p.name for p in sorted((tmp_path / "t-0").iterdir())] == [
        "00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex"]
    res = log.read(0, 1000)
    assert res.records == b"" and res.next_offset == 0
    assert log.offset_for_timestamp(0) is None
    assert log.max_timestamp() == (-1, -1)
    log.close()


def test_append_assigns_offsets_and_stores_batches_verbatim(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    buf, hs = make([b"a", b"b", b"c"])
    original = bytes(buf)
    res = log.append(buf, hs, leader_epoch=4, now_ms=NOW)
    assert (res.first_offset, res.last_offset, res.log_append_time_ms, res.log_start_offset) == (0, 2, -1, 0)
    res = log.append(*make([b"d"]), leader_epoch=4, now_ms=NOW)
    assert (res.first_offset, res.last_offset) == (3, 3)
    assert log.log_end_offset == log.high_watermark == 4
    on_disk = (tmp_path / "t-0" / "00000000000000000000.log").read_bytes()
    assert on_disk[:len(buf)] == bytes(buf)
    assert on_disk[16:len(buf)] == original[16:] and on_disk[8:12] == original[8:12]  # only offset/epoch changed
    first = parse_batches(on_disk, verify_crc=True)
    assert [(h.base_offset, h.partition_leader_epoch) for h in first] == [(0, 4), (3, 4)]
    log.close()


def test_append_rejects_headers_not_covering_buffer(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    buf, hs = make([b"a"])
    with pytest.raises(ValueError):
        log.append(buf + b"xx", hs, leader_epoch=0, now_ms=NOW)
    assert log.log_end_offset == 0 and log.size_bytes == 0
    log.close()


def test_round_trip_across_segment_rolls(log: PartitionLog) -> None:
    feed = Feed(log)
    for i in range(60):
        feed.put(1 + i % 4, size=60)
    assert len(log.segments) >= 4
    for a, b in zip(log.segments, log.segments[1:]):
        assert a.next_offset == b.base_offset
        assert a.size <= 4000
        assert (log.path / f"{b.base_offset:020d}.log").stat().st_size == b.size
    res = log.read(0, 10**9)
    assert decode(res.records) == [(i, i) for i in range(feed.n)]
    assert (res.first_offset, res.next_offset, res.high_watermark) == (0, feed.n, feed.n)
    assert log.size_bytes == sum(s.size for s in log.segments) == len(res.records)


def test_batch_larger_than_segment_goes_alone_into_a_new_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=1000))
    feed = Feed(log)
    feed.put(1, size=100)
    res = feed.put(1, size=3000)
    assert res.rolled
    feed.put(1, size=100)
    assert [s.base_offset for s in log.segments] == [0, 1, 2]
    assert decode(log.read(0, 10**6).records) == [(0, 0), (1, 1), (2, 2)]
    log.close()


def test_read_from_mid_batch_returns_containing_batch(log: PartitionLog) -> None:
    feed = Feed(log)
    for _ in range(10):
        feed.put(5)
    res = log.read(7, 10**6)
    assert res.first_offset == 5
    assert decode(res.records)[0] == (5, 5)
    assert res.next_offset == 50
    res = log.read(49, 10**6)
    assert decode(res.records) == [(45 + i, 45 + i) for i in range(5)]


def test_read_max_bytes_and_min_one_batch(log: PartitionLog) -> None:
    feed = Feed(log)
    for _ in range(6):
        feed.put(2, size=100)
    one = len(log.read(0, 1, min_one_batch=True).records)
    assert decode(log.read(0, 1).records) == [(0, 0), (1, 1)]
    empty = log.read(0, one - 1, min_one_batch=False)
    assert empty.records == b"" and empty.next_offset == 0 and empty.first_offset == -1
    two = log.read(0, int(one * 2.5))
    assert len(two.records) == 2 * one and two.next_offset == 4
    assert len(log.read(2, 2 * one).records) == 2 * one
    big = log.read(0, one, min_one_batch=True)
    assert len(big.records) == one


def test_min_one_batch_returns_a_batch_larger_than_max_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    feed = Feed(log)
    feed.put(1, size=5000)
    feed.put(1)
    res = log.read(0, 100)
    assert decode(res.records) == [(0, 0)] and len(res.records) > 5000
    assert log.read(0, 100, min_one_batch=False).records == b""
    log.close()


def test_read_stops_at_the_first_batch_that_does_not_fit(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    feed = Feed(log)
    feed.put(1, size=100)
    feed.put(1, size=5000)
    feed.put(1, size=100)
    small = len(log.read(0, 1).records)
    res = log.read(0, 3 * small, min_one_batch=False)
    assert decode(res.records) == [(0, 0)] and res.next_offset == 1  # never skips past the big batch
    assert decode(log.read(0, 3 * small, max_offset=3).records) == [(0, 0)]
    log.close()


def test_read_max_offset_bound(log: PartitionLog) -> None:
    feed = Feed(log)
    for _ in range(4):
        feed.put(5)
    res = log.read(0, 10**6, max_offset=12)
    assert decode(res.records)[-1] == (9, 9) and res.next_offset == 10
    assert log.read(0, 10**6, max_offset=4).records == b""  # the first batch ends past it
    assert log.read(10, 10**6, max_offset=15).next_offset == 15
    assert log.read(3, 10**6, max_offset=10**9).next_offset == 20


def test_read_bounds(log: PartitionLog) -> None:
    feed = Feed(log)
    feed.put(3)
    res = log.read(3, 1000)
    assert res.records == b"" and res.next_offset == 3 and res.high_watermark == 3
    with pytest.raises(OffsetOutOfRange) as exc:
        log.read(4, 1000)
    assert exc.value.code == 1 and exc.value.log_end_offset == 3
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 1000)


def test_read_crosses_segments_in_one_call(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=400))
    feed = Feed(log)
    for _ in range(9):
        feed.put(2, size=60)
    assert len(log.segments) >= 3
    res = log.read(1, 10**6)
    assert decode(res.records) == [(i, i) for i in range(18)]
    limited = log.read(0, 10**6, max_offset=11)
    assert decode(limited.records)[-1] == (9, 9)
    log.close()


def test_index_entries_every_interval(tmp_path: Path) -> None:
    interval = 500
    log = open_log(tmp_path / "t-0", LogConfig(index_interval_bytes=interval))
    feed = Feed(log)
    for i in range(40):
        feed.put(1 + i % 3, size=40 + 7 * i)
    seg = log.segments[0]
    entries = seg.index_list()
    assert len(entries) >= 5
    # Kafka's rule: an entry (last offset of the batch, its position) once more than the interval
    # has been appended since the previous entry's batch.
    expected, last_pos, pos = [], 0, 0
    for h in parse_batches((log.path / "00000000000000000000.log").read_bytes(), verify_crc=True):
        if pos - last_pos > interval:
            expected.append((h.last_offset, pos))
            last_pos = pos
        pos += h.size
    assert entries == expected
    # Entries reach the file in groups; a flush writes whatever is pending before the fsync.
    on_disk = index_file(log.path / "00000000000000000000.index")
    assert on_disk == entries[:len(on_disk)]
    log.flush()
    assert index_file(log.path / "00000000000000000000.index") == [(o, p) for o, p in entries]
    times = time_index_file(log.path / "00000000000000000000.timeindex")
    assert times == seg.time_index_list() and len(times) == len(entries)
    assert all(a[0] < b[0] for a, b in zip(times, times[1:]))
    for offset in range(feed.n):  # every lookup lands at or before the batch holding the offset
        assert decode(log.read(offset, 1).records)[-1][0] >= offset
    log.close()


def test_index_interval_is_exclusive(tmp_path: Path) -> None:
    size = len(make([b"0" * 50])[0])
    log = open_log(tmp_path / "t-0", LogConfig(index_interval_bytes=2 * size))
    feed = Feed(log)
    for _ in range(10):
        feed.put(1, size=50)
    # Kafka indexes a batch once *more than* the interval lies since the last entry's batch.
    assert log.segments[0].index_list() == [(3, 3 * size), (6, 6 * size), (9, 9 * size)]
    log.close()


def test_reopen_after_clean_close_keeps_everything(log: PartitionLog, tmp_path: Path) -> None:
    feed = Feed(log)
    for i in range(40):
        feed.put(1 + i % 3, size=80)
    segs = [(s.base_offset, s.size, s.next_offset, s.max_timestamp) for s in log.segments]
    log.close()
    before = {p.name: p.read_bytes() for p in log.path.iterdir()}
    again = open_log(log.path, log.config, recovery_point=feed.n)
    assert again.recovery_report == []
    assert [(s.base_offset, s.size, s.next_offset, s.max_timestamp) for s in again.segments] == segs
    assert again.log_end_offset == feed.n and again.recovery_point == feed.n
    assert decode(again.read(0, 10**9).records) == [(i, i) for i in range(feed.n)]
    assert {p.name: p.read_bytes() for p in again.path.iterdir()} == before
    Feed.put(_continue(again, feed.n))
    assert decode(again.read(feed.n, 1000).records) == [(feed.n, feed.n)]
    again.close()


def _continue(log: PartitionLog, n: int) -> Feed:
    f = Feed(log)
    f.n = n
    return f


def test_roll_on_segment_ms_by_first_batch_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig(segment_ms=1000))
    feed = Feed(log)
    assert not feed.put(ts=NOW).rolled
    assert not feed.put(ts=NOW + 1000).rolled  # not more than segment.ms yet
    assert feed.put(ts=NOW + 1001).rolled
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_roll_on_segment_ms_by_creation_time_without_timestamps(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig(segment_ms=1000), now_ms=NOW)
    feed = Feed(log)
    feed.put(ts=-1, now=NOW)
    assert not feed.put(ts=-1, now=NOW + 1000).rolled
    assert feed.put(ts=-1, now=NOW + 1001).rolled
    log.close()


def test_roll_when_index_is_full(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig(segment_index_bytes=24, index_interval_bytes=1))
    feed = Feed(log)
    for _ in range(12):
        feed.put()
    assert all(s.index_entries <= 3 for s in log.segments)
    assert len(log.segments) >= 3
    assert decode(log.read(0, 10**6).records) == [(i, i) for i in range(12)]
    log.close()


def test_log_append_time(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    feed = Feed(log)
    res = feed.put(2, ts=5, now=NOW + 77, lat=True)
    assert res.log_append_time_ms == NOW + 77
    [h] = parse_batches(log.read(0, 1000).records, verify_crc=True)
    assert h.timestamp_type == 1 and h.max_timestamp == NOW + 77
    assert log.max_timestamp() == (NOW + 77, 0)  # LogAppendTime: all records share it, first wins
    log.close()


def test_offset_for_timestamp(log: PartitionLog) -> None:
    feed = Feed(log)
    for i in range(50):
        feed.put(2, ts=NOW + 1000 * i)  # batch i holds offsets 2i, 2i+1 and max timestamp NOW+1000i
    assert len(log.segments) > 1
    assert log.offset_for_timestamp(0) == (0, NOW)
    assert log.offset_for_timestamp(NOW + 2500) == (6, NOW + 3000)
    assert log.offset_for_timestamp(NOW + 3000) == (6, NOW + 3000)
    assert log.offset_for_timestamp(NOW + 49_000) == (98, NOW + 49_000)
    assert log.offset_for_timestamp(NOW + 49_001) is None
    for i in range(50):
        assert log.offset_for_timestamp(NOW + 1000 * i - 1) == (2 * i, NOW + 1000 * i)
    assert log.max_timestamp() == (NOW + 49_000, 98)  # the first record carrying it
    log.delete_records(31)
    assert log.offset_for_timestamp(0) == (31, NOW + 15_000)


@pytest.mark.parametrize("compression", [0, 1, 2, 3, 4])
def test_timestamps_name_the_record_inside_the_batch(tmp_path: Path, compression: int) -> None:
    """Kafka answers with the first record whose timestamp qualifies, even inside a batch."""
    log = open_log(tmp_path / "t-0")
    Feed(log).put(3)  # offsets 0-2 at NOW
    stamps = [NOW + 1000, NOW + 5000, NOW + 3000, NOW + 5000, NOW + 4000]  # offsets 3-7
    buf = encode_batch([(None, b"v", (), t) for t in stamps], timestamp_ms=0, compression=compression)
    log.append(buf, parse_batches(buf, verify_crc=True), leader_epoch=0, now_ms=NOW)
    assert log.offset_for_timestamp(NOW + 1) == (3, NOW + 1000)
    assert log.offset_for_timestamp(NOW + 2000) == (4, NOW + 5000)
    assert log.offset_for_timestamp(NOW + 5000) == (4, NOW + 5000)
    assert log.offset_for_timestamp(NOW + 5001) is None
    assert log.max_timestamp() == (NOW + 5000, 4)
    log.delete_records(5)
    assert log.offset_for_timestamp(NOW + 2000) == (5, NOW + 3000)
    assert log.offset_for_timestamp(NOW + 4500) == (6, NOW + 5000)
    log.close()


def test_timestamps_fall_back_to_the_batch_without_the_codec(tmp_path: Path, monkeypatch) -> None:
    import sharebroker.protocol.record_batch as rb
    log = open_log(tmp_path / "t-0")
    buf = encode_batch([(None, b"v", (), NOW + i) for i in range(4)], timestamp_ms=0, compression=3)
    log.append(buf, parse_batches(buf, verify_crc=True), leader_epoch=0, now_ms=NOW)
    monkeypatch.setattr(rb, "_decompress", lambda codec, data: None)  # as if lz4 were not installed
    assert log.offset_for_timestamp(NOW + 2) == (0, NOW + 3)
    assert log.max_timestamp() == (NOW + 3, 3)
    log.close()


def test_offset_for_timestamp_with_out_of_order_timestamps(log: PartitionLog) -> None:
    feed = Feed(log)
    stamps = [5, 1, 9, 3, 9, 12, 2]
    for t in stamps:
        feed.put(1, ts=NOW + t)
    assert log.offset_for_timestamp(NOW + 4) == (0, NOW + 5)
    assert log.offset_for_timestamp(NOW + 6) == (2, NOW + 9)
    assert log.offset_for_timestamp(NOW + 10) == (5, NOW + 12)
    assert log.max_timestamp() == (NOW + 12, 5)


def test_max_timestamp_survives_reopen(log: PartitionLog) -> None:
    feed = Feed(log)
    for i in range(30):
        feed.put(1, ts=NOW + (7 * i) % 23)
    expected = log.max_timestamp()
    log.close()
    again = open_log(log.path, log.config, recovery_point=feed.n)
    assert again.max_timestamp() == expected
    again.close()


def test_delete_records(log: PartitionLog) -> None:
    feed = Feed(log)
    for _ in range(30):
        feed.put(2, size=80)
    n_segments = len(log.segments)
    second = log.segments[1].base_offset
    assert log.delete_records(second - 1) == second - 1  # inside the first segment: nothing deleted
    assert len(log.segments) == n_segments
    target = second + 3
    assert log.delete_records(target) == target
    assert log.log_start_offset == target == log.earliest_offset()
    assert len(log.segments) == n_segments - 1 and log.segments[0].base_offset == second
    assert not (log.path / "00000000000000000000.log").exists()
    with pytest.raises(OffsetOutOfRange):
        log.read(target - 1, 1000)
    res = log.read(target, 10**6)
    assert res.first_offset == target - 1 and res.log_start_offset == target  # batch holding it starts before
    assert log.delete_records(10) == target  # never goes back
    with pytest.raises(OffsetOutOfRange):
        log.delete_records(61)
    assert log.delete_records(-1) == 60 == log.high_watermark  # -1 means the high watermark
    assert len(log.segments) == 1  # the active segment stays
    Feed.put(_continue(log, 60))
    assert decode(log.read(60, 1000).records) == [(60, 60)]


def test_retention_by_time(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=500, retention_ms=10_000))
    feed = Feed(log)
    for i in range(20):
        feed.put(1, size=100, ts=NOW + 1000 * i)
    segs = log.segments
    assert len(segs) > 4
    now = segs[2].max_timestamp + 10_001
    notes = log.apply_retention(now)
    assert len(notes) == 3 and "retention.ms" in notes[0]
    assert log.segments == segs[3:]
    assert log.log_start_offset == segs[3].base_offset
    assert not segs[0].log_path.exists() and not segs[0].index_path.exists()
    assert log.apply_retention(now) == []
    # Everything expired: the active segment is rolled, then all old ones go.
    notes = log.apply_retention(NOW + 10**9)
    assert len(log.segments) == 1 and log.segments[0].size == 0
    assert log.log_start_offset == log.log_end_offset == 20
    assert log.apply_retention(NOW + 10**10) == []  # an empty active segment is never deleted
    Feed.put(_continue(log, 20))
    assert decode(log.read(20, 1000).records) == [(20, 20)]
    log.close()


def test_retention_by_size(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=500, retention_bytes=1200, retention_ms=-1))
    feed = Feed(log)
    for _ in range(20):
        feed.put(1, size=100)
    sizes = [s.size for s in log.segments]
    notes = log.apply_retention(NOW)
    assert notes and "retention.bytes" in notes[0]
    assert log.size_bytes >= 1200 or len(log.segments) == 1
    assert log.size_bytes - log.segments[0].size < 1200  # deleting one more would undershoot
    assert sum(sizes) - log.size_bytes == sum(sizes[:len(sizes) - len(log.segments)])
    res = log.read(log.log_start_offset, 10**6)
    assert decode(res.records)[-1] == (19, 19)
    log.close()


def test_a_steady_stream_under_retention_holds_bounded_index_memory(tmp_path: Path) -> None:
    """Under a steady stream with retention, a deleted segment must take its indexes with it
    (from memory, and from the index cache if read back): nothing may hold on to it."""
    path = tmp_path / "t-0"
    config = LogConfig(segment_bytes=2000, index_interval_bytes=100, retention_bytes=6000, retention_ms=-1)
    log = open_log(path, config)
    feed = Feed(log)
    deleted = 0
    for _ in range(30):
        for _ in range(20):
            feed.put(1, size=100)
        deleted += len(log.apply_retention(NOW))
        gc.collect()
        alive = [o for o in gc.get_objects() if isinstance(o, LogSegment) and o.directory == path]
        assert len(alive) == len(log.segments)
        entries = sum(s.index_entries + s.time_index_entries for s in log.segments)
        # retention keeps under retention.bytes plus one segment, and the active one grows to a segment
        assert entries <= 2 * (config.retention_bytes + 2 * config.segment_bytes) // config.index_interval_bytes
        del alive
    assert deleted > 50 and log.log_start_offset > 0
    log.close()


def index_bytes_in_memory(log: PartitionLog) -> int:
    """Bytes of index entries the log's segments hold in memory: the arrays they refer to
    (directly or in a tuple), whatever attributes hold them."""
    total = 0
    for seg in log.segments:
        for ref in gc.get_referents(seg):
            for arr in (ref if isinstance(ref, tuple) else (ref,)):
                if isinstance(arr, array):
                    total += arr.itemsize * len(arr)
    return total


def test_index_memory_does_not_grow_with_the_log_kept(tmp_path: Path) -> None:
    """Without retention the log only grows; the indexes in memory must not: a sealed segment
    drops its entries once they are in its files, and those read back for lookups stay within
    the index cache's budget (issue 24)."""
    budget = 2000
    files = FileCache(indexes=IndexCache(budget=budget))
    config = LogConfig(segment_bytes=2000, index_interval_bytes=100, retention_bytes=-1, retention_ms=-1)
    log = open_log(tmp_path / "t-0", config, files=files)
    feed = Feed(log)
    # The active segment's entries (20 bytes each at most) plus the budget, however many segments.
    bound = 20 * (config.segment_bytes // config.index_interval_bytes + 1) + budget
    for _ in range(40):
        for _ in range(20):
            feed.put(1, size=100)
        assert index_bytes_in_memory(log) <= bound
        # Reads and time lookups all over the old segments read their indexes back.
        for offset in range(0, feed.n, 7):
            assert decode(log.read(offset, 1).records)[0][0] == offset
            assert log.offset_for_timestamp(NOW + offset) == (offset, NOW + offset)
        assert index_bytes_in_memory(log) <= bound
    assert len(log.segments) > 50
    on_disk = sum((s.index_entries * 8 + s.time_index_entries * 12) for s in log.segments)
    assert on_disk > 5 * bound  # what the old code held
    assert files.indexes.evictions > 0 and files.indexes.used <= budget
    log.close()


def test_lookups_into_dropped_sealed_indexes_find_the_same_positions(tmp_path: Path) -> None:
    """A sealed segment's lookups after its entries were dropped and read back (again and again,
    the budget holding one segment's) land where the entries in its files say, by offset and by
    timestamp; reads and ListOffsets answers are those of a full walk."""
    files = FileCache(indexes=IndexCache(budget=1))
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=3000, index_interval_bytes=150), files=files)
    feed = Feed(log)
    bases = []
    for i in range(200):
        bases.append(feed.n)
        feed.put(1 + i % 3, size=30 + i % 40)
    sealed = log.segments[:-1]
    assert len(sealed) > 10
    assert not any(s.index_loaded for s in sealed)
    for seg in sealed:
        stem = log.path / f"{seg.base_offset:020d}"
        entries = [(seg.base_offset + rel, pos) for rel, pos in index_file(stem.with_suffix(".index"))]
        times = [(ts, seg.base_offset + rel) for ts, rel in time_index_file(stem.with_suffix(".timeindex"))]
        assert entries and times
        for offset in range(seg.base_offset, seg.next_offset):
            before = [pos for last, pos in entries if last <= offset]
            assert seg.lookup(offset) == (before[-1] if before else 0)
        for ts in range(NOW + seg.base_offset - 1, NOW + seg.next_offset + 1):
            before = [off for t, off in times if t <= ts]
            start = before[-1] if before else seg.base_offset
            assert seg.time_lookup(ts, 0) == seg.lookup(start)
        assert seg.index_list() == entries and seg.time_index_list() == times
    assert files.indexes.evictions >= len(sealed) - 1
    for offset in range(0, feed.n, 5):
        holder = max(b for b in bases if b <= offset)  # a batch's records share its timestamp
        assert decode(log.read(offset, 1).records)[0][0] == holder
        after = min(b for b in bases + [feed.n] if b >= offset)
        assert log.offset_for_timestamp(NOW + offset) == ((after, NOW + after) if after < feed.n else None)
    log.close()


def _sealed_first_segment(tmp_path: Path, config: LogConfig) -> tuple[PartitionLog, Feed, LogSegment,
                                                                      list[tuple[int, int]]]:
    """A log rolled twice: its first segment sealed, its index dropped from memory, with more
    than four entries in its file (returned)."""
    log = open_log(tmp_path / "t-0", config)
    feed = Feed(log)
    while len(log.segments) < 3:
        feed.put(1, size=60)
    seg = log.segments[0]
    assert not seg.index_loaded
    entries = index_file(seg.index_path)
    assert len(entries) > 4
    return log, feed, seg, entries


def test_a_sealed_index_file_damaged_after_sealing_is_read_back_as_its_valid_prefix(tmp_path: Path) -> None:
    """An index file cut short or overwritten after its segment was sealed (not by the broker):
    read back, only its valid leading entries are used (reads stay right, walking further), the
    file is trimmed to them at the next flush, and a restart rebuilds the rest from the log."""
    config = LogConfig(segment_bytes=3000, index_interval_bytes=150)
    log, feed, seg, entries = _sealed_first_segment(tmp_path, config)
    with open(seg.index_path, "r+b") as f:
        f.truncate(3 * 8 + 5)  # three entries and part of a fourth
    for offset in range(seg.base_offset, seg.next_offset):
        before = [pos for rel, pos in entries[:3] if rel <= offset]
        assert seg.lookup(offset) == (before[-1] if before else 0)
    for offset in range(seg.base_offset, seg.next_offset):
        assert decode(log.read(offset, 1).records)[0][0] == offset
    assert any("changed since it was written" in d for d in seg.index_damage)
    log.flush()
    assert index_file(seg.index_path) == entries[:3]
    log.close()
    again = open_log(tmp_path / "t-0", config)
    assert index_file(again.segments[0].index_path) == entries
    assert decode(again.read(0, 10**6).records) == [(i, i) for i in range(feed.n)]
    again.close()


def test_a_sealed_index_overwritten_in_place_is_not_trusted_when_read_back(tmp_path: Path) -> None:
    """An index file of the same size whose entries were overwritten after sealing (an entry now
    points past the log): read back, it is checked as at start-up, only its valid leading entries
    are used, and every record is still read from its offset."""
    config = LogConfig(segment_bytes=3000, index_interval_bytes=150)
    log, feed, seg, entries = _sealed_first_segment(tmp_path, config)
    rel2, _ = entries[2]
    with open(seg.index_path, "r+b") as f:
        f.seek(2 * 8)
        f.write(struct.pack(">ii", rel2, seg.size + 100))
    for offset in range(seg.base_offset, seg.next_offset):
        assert decode(log.read(offset, 1).records)[0][0] == offset
    assert any("changed since it was written" in d for d in seg.index_damage)
    for offset in range(seg.base_offset, seg.next_offset):
        before = [pos for rel, pos in entries[:2] if rel <= offset]
        assert seg.lookup(offset) == (before[-1] if before else 0)
    log.close()


def test_a_sealed_segment_keeps_entries_it_could_not_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """If a segment's index entries cannot be written when it is sealed (a full disk), the roll
    goes on, the segment keeps them in memory (the index cache does not drop them) until a flush
    writes them; then they may go, and lookups find the same positions throughout."""
    files = FileCache(indexes=IndexCache(budget=1))
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=3000, index_interval_bytes=150), files=files)
    feed = Feed(log)
    while len(log.segments) < 3:
        feed.put(1, size=60)
    real_write_all = segment_module.write_all

    def failing_write_all(fd: int, data) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(("index", "timeindex")):
            raise OSError(28, "No space left on device")
        real_write_all(fd, data)

    monkeypatch.setattr(segment_module, "write_all", failing_write_all)
    victim = log.segments[-1]
    while len(log.segments) < 4:
        feed.put(1, size=60)
    assert victim.sealed and victim.index_loaded and victim.index_pending
    expected = victim.index_list()
    assert len(expected) > len(index_file(victim.index_path))
    log.segments[0].lookup(1)  # reads another segment's index back: over budget, victim is kept
    assert victim.index_loaded and victim.index_list() == expected
    with pytest.raises(OSError):
        log.flush()
    monkeypatch.setattr(segment_module, "write_all", real_write_all)
    log.flush()
    assert not victim.index_pending and index_file(victim.index_path) == [
        (o - victim.base_offset, p) for o, p in expected]
    log.segments[0].lookup(1)
    assert not victim.index_loaded
    assert victim.index_list() == expected
    for offset in range(feed.n):
        assert decode(log.read(offset, 1).records)[0][0] == offset
    log.close()


def test_retention_by_size_deletes_when_exactly_at_the_limit(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=500, retention_ms=-1))
    feed = Feed(log)
    for _ in range(12):
        feed.put(1, size=100)
    segs = log.segments
    assert len({s.size for s in segs[:-1]}) == 1
    log.config.retention_bytes = log.size_bytes - segs[0].size  # deleting one segment lands exactly on it
    assert len(log.apply_retention(NOW)) == 1
    assert log.segments == segs[1:]
    log.close()


def test_empty_active_segment_is_never_deleted(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig(retention_bytes=0, retention_ms=0))
    active = log.segments[0]
    assert log.apply_retention(NOW + 10**12) == []
    assert log.segments == (active,)
    Feed(log).put()
    assert len(log.apply_retention(NOW + 10**12)) == 1  # non-empty: rolled, then deleted
    assert log.segments[0] is not active and log.segments[0].size == 0 and log.log_start_offset == 1
    assert log.apply_retention(NOW + 10**12) == []
    log.close()


def test_retention_disabled_and_compact(tmp_path: Path) -> None:
    for cfg in (LogConfig(segment_bytes=300, retention_ms=-1, retention_bytes=-1),
                LogConfig(segment_bytes=300, retention_ms=0, retention_bytes=0, cleanup_policy="compact")):
        log = open_log(tmp_path / f"t-{cfg.cleanup_policy}", cfg)
        feed = Feed(log)
        for _ in range(10):
            feed.put(1, size=100, ts=0)
        n = len(log.segments)
        assert log.apply_retention(NOW + 10**12) == []
        assert len(log.segments) == n and log.log_start_offset == 0
        log.close()


def test_flush_returns_durable_offset(log: PartitionLog) -> None:
    feed = Feed(log)
    for _ in range(5):
        feed.put(3)
    assert log.unflushed_messages == 15
    assert log.flush(now_ms=NOW + 5) == 15
    assert log.recovery_point == 15 and log.unflushed_messages == 0 and log.last_flush_ms == NOW + 5
    assert all(not s.dirty for s in log.segments)
    feed.put(2)
    assert log.unflushed_messages == 2
    assert log.flush() == 17


def test_flush_from_a_thread_during_appends_rolls_and_deletes(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=2000, retention_bytes=6000, retention_ms=-1))
    stop = threading.Event()
    errors: list[BaseException] = []
    durable: list[int] = []

    def flusher() -> None:
        try:
            while not stop.is_set():
                durable.append(log.flush())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=flusher)
    t.start()
    feed = Feed(log)
    try:
        for i in range(400):
            feed.put(1, size=150)
            if i % 10 == 0:
                log.apply_retention(NOW)
    finally:
        stop.set()
        t.join()
    assert not errors
    assert durable == sorted(durable) and durable[-1] <= feed.n
    assert log.flush() == feed.n and log.recovery_point == feed.n
    assert decode(log.read(log.log_start_offset, 10**6).records)[-1] == (399, 399)
    log.close()


def test_failed_write_is_rolled_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(tmp_path / "t-0")
    feed = Feed(log)
    feed.put(2)
    size = log.size_bytes
    real_write = os.write
    calls = {"n": 0}

    def failing_write(fd: int, data) -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            return real_write(fd, bytes(data)[:10])  # a short write, then the disk is full
        raise OSError(28, "No space left on device")

    buf, hs = make([b"x"])
    monkeypatch.setattr(os, "write", failing_write)
    with pytest.raises(OSError):
        log.append(buf, hs, leader_epoch=0, now_ms=NOW)
    monkeypatch.setattr(os, "write", real_write)
    assert log.size_bytes == size == (log.path / "00000000000000000000.log").stat().st_size
    assert log.log_end_offset == 2
    feed.put(1)
    assert decode(log.read(0, 10**6).records) == [(0, 0), (1, 1), (2, 2)]
    log.close()


def test_closed_and_deleted_log(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    Feed(log).put()
    log.close()
    with pytest.raises(LogClosedError):
        log.read(0, 100)
    with pytest.raises(LogClosedError):
        log.append(*make([b"x"]), leader_epoch=0, now_ms=NOW)
    again = open_log(tmp_path / "t-0")
    again.delete()
    assert not (tmp_path / "t-0").exists()


def test_log_config_from_kafka_names_and_topic_config_objects() -> None:
    cfg = LogConfig.from_kafka({"segment.bytes": "2048", "retention.ms": "-1", "cleanup.policy": "compact,delete",
                                "index.interval.bytes": 100, "unrelated": "x"})
    assert (cfg.segment_bytes, cfg.retention_ms, cfg.index_interval_bytes) == (2048, -1, 100)
    assert cfg.deletes and cfg.segment_index_bytes == LogConfig().segment_index_bytes

    class Typed:  # the shape of config's TopicConfig: snake_case attributes, policy as a tuple
        segment_bytes = 4096
        segment_ms = 10
        retention_bytes = 7
        cleanup_policy = ("compact",)

    cfg = LogConfig.from_topic_config(Typed())
    assert (cfg.segment_bytes, cfg.segment_ms, cfg.retention_bytes) == (4096, 10, 7)
    assert not cfg.deletes and cfg.index_interval_bytes == 4096


def test_a_reader_going_on_from_its_last_read_starts_where_that_read_ended(tmp_path: Path) -> None:
    """The read-end hint: job-by-job reads of one-record batches start at the batch they need
    (no walk from the index entry before it), and reads before, at, past or into a batch, and
    reads after further appends, return exactly what the index walk returns."""
    log = open_log(tmp_path / "jobs-0", LogConfig(segment_bytes=1 << 20, index_interval_bytes=4096))
    feed = Feed(log)
    for _ in range(100):
        feed.put(1)
    for _ in range(20):
        feed.put(3)  # offsets 100..159, three to a batch
    seg = log._segments[-1]
    positions = {}  # base offset -> position, from a full walk
    for pos, base, _size, _last, _mts, _attrs in seg.walk(0):
        positions[base] = pos
    for offset in range(0, 100):
        res = log.read(offset, 1 << 20, through_offset=offset)
        assert decode(res.records) == [(offset, offset)]
        assert seg.lookup(offset + 1) == positions.get(offset + 1, seg.size)  # no walk for the next job
    for offset in (150, 101, 0, 57, 159, 100, 102, 103):
        expect_first = offset if offset < 100 else 100 + (offset - 100) // 3 * 3
        res = log.read(offset, 1 << 20, through_offset=offset)
        assert res.first_offset == expect_first
        assert decode(res.records)[0][0] == expect_first
        assert res.next_offset == (offset + 1 if offset < 100 else expect_first + 3)
    log.read(159, 1 << 20)  # the end: the next batch is not written yet
    feed.put(2)
    res = log.read(160, 1 << 20)
    assert decode(res.records) == [(160, 160), (161, 161)]
    log.close()


def test_reads_within_the_walks_block_and_past_it_give_the_stored_bytes(tmp_path: Path) -> None:
    """A read of batches inside the header walk's last block takes their bytes from it; one that
    goes past it (many small batches, or a batch bigger than a block) reads them from the file.
    Either way the bytes are exactly the stored batches, checked against the file itself."""
    log = open_log(tmp_path / "t-0")
    feed = Feed(log)
    for i in range(400):  # about 45 KB of small batches, then big ones, then small ones again
        feed.put(1 + i % 3, size=40)
    for _ in range(3):
        feed.put(1, size=40_000)
    for i in range(50):
        feed.put(1 + i % 2, size=40)
    data = (tmp_path / "t-0" / "00000000000000000000.log").read_bytes()
    stored = {}
    pos = 0
    for h in parse_batches(data, verify_crc=True):
        stored[h.base_offset] = (pos, h.size, h.last_offset)
        pos += h.size

    def expected(first_base: int, next_offset: int) -> bytes:
        start = stored[first_base][0]
        end = max(p + s for p, s, last in stored.values() if last < next_offset)
        return data[start:end]

    for offset, max_bytes in [(0, 200), (5, 1 << 20), (300, 3000), (700, 100), (790, 1 << 20),
                              (feed.n - 3, 1 << 20), (0, 1 << 20)]:
        res = log.read(offset, max_bytes)
        assert res.records == expected(res.first_offset, res.next_offset), (offset, max_bytes)
        assert [o for o, _ in decode(res.records)][0] <= offset < res.next_offset
    log.close()
