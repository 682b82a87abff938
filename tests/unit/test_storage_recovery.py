"""storage.PartitionLog.open: torn tails, corrupt batches, damaged indexes, recovery points."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from kio.records.readers import read_batch

from sharebroker.protocol.record_batch import encode_batch, parse_batches
from sharebroker.storage import LogConfig, PartitionLog
from sharebroker.storage import segment as segment_module

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=3000, index_interval_bytes=250)


def put(log: PartitionLog, value: int, records: int = 1, *, ts: int | None = None) -> None:
    buf = encode_batch([(None, f"{value + i:08d}".encode().ljust(60, b"."),) for i in range(records)],
                       timestamp_ms=NOW + value if ts is None else ts)
    res = log.append(buf, parse_batches(buf, verify_crc=True), leader_epoch=1, now_ms=NOW)
    assert res.first_offset == value


def fill(path: Path, batches: int, *, config: LogConfig = CONFIG, records: int = 1) -> PartitionLog:
    log = PartitionLog.open(path, config, recovery_point=0, clean_shutdown=True, now_ms=NOW)
    for i in range(batches):
        put(log, i * records, records)
    return log


def crash(log: PartitionLog) -> None:
    """Stop without a clean close: files stay as written, nothing sealed or checkpointed."""
    for seg in log.segments:
        seg.close_fds()


def reopen(path: Path, *, recovery_point: int = 0, clean: bool = False, config: LogConfig = CONFIG) -> PartitionLog:
    return PartitionLog.open(path, config, recovery_point=recovery_point, clean_shutdown=clean, now_ms=NOW)


def values(log: PartitionLog) -> list[int]:
    """The number written in each record's value, in log order, checking offsets match them."""
    res = log.read(log.log_start_offset, 10**9)
    out, pos = [], 0
    while pos < len(res.records):
        batch, size = read_batch(res.records, pos)
        for r in batch.records:
            assert int(r.value[:8]) == r.offset
            out.append(r.offset)
        pos += size
    return out


def batch_positions(path: Path) -> list[int]:
    return [h.position for h in parse_batches(path.read_bytes(), verify_crc=True)]


def crashed(path: Path, batches: int, *, config: LogConfig) -> tuple[Path, list[int]]:
    """`batches` one-record batches written and the process crashed; the first segment file and
    the positions of its batches."""
    crash(fill(path, batches, config=config))
    seg = path / "00000000000000000000.log"
    return seg, batch_positions(seg)


def flip(file: Path, pos: int, mask: int = 0xFF) -> None:
    """XOR the byte at `pos` with `mask`."""
    data = bytearray(file.read_bytes())
    data[pos] ^= mask
    file.write_bytes(data)


def last_log(path: Path) -> Path:
    return sorted(path.glob("*.log"))[-1]


def test_torn_tail_is_cut_exactly_at_the_last_good_batch(tmp_path: Path) -> None:
    path = tmp_path / "orders-0"
    seg, starts = crashed(path, 10, config=LogConfig())
    full = seg.stat().st_size
    os.truncate(seg, starts[-1] + 40)  # the last batch is half written
    again = reopen(path, config=LogConfig())
    assert again.log_end_offset == 9
    assert seg.stat().st_size == starts[-1]
    assert len(again.recovery_report) == 1
    note = again.recovery_report[0]
    assert "truncated 40 bytes" in note and f"position {starts[-1]}" in note and "offset 9" in note
    assert full - starts[-1] > 40
    put(again, 9)
    put(again, 10)
    assert values(again) == list(range(11))
    again.close()


# Seeded random bytes: the same test ids in every pytest-xdist worker's collection.
@pytest.mark.parametrize("garbage", [b"\x00" * 300, random.Random(97).randbytes(500),
                                     b"\x00\x00\x00\x00\x00\x00\x00\x09" + b"\xff" * 80],
                         ids=["zeros", "random", "huge-length"])
def test_garbage_after_last_good_batch_is_removed(tmp_path: Path, garbage: bytes) -> None:
    path = tmp_path / "t-0"
    seg, _ = crashed(path, 5, config=LogConfig())
    good = seg.stat().st_size
    with open(seg, "ab") as f:
        f.write(garbage)
    again = reopen(path, config=LogConfig())
    assert seg.stat().st_size == good
    assert again.log_end_offset == 5
    assert f"truncated {len(garbage)} bytes at position {good}" in again.recovery_report[0]
    put(again, 5)
    assert values(again) == list(range(6))
    again.close()


def test_corrupt_crc_in_last_batch_is_cut(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    seg, starts = crashed(path, 6, config=LogConfig())
    flip(seg, starts[-1] + 75, 0x01)  # a record byte of the last batch
    again = reopen(path, config=LogConfig())
    assert again.log_end_offset == 5 and seg.stat().st_size == starts[-1]
    assert "CRC mismatch" in again.recovery_report[0]
    again.close()


def test_corrupt_batch_in_an_earlier_segment_drops_the_later_ones(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log = fill(path, 60)
    segs = [(s.base_offset, s.log_path) for s in log.segments]
    assert len(segs) >= 3
    crash(log)
    victim = segs[1][1]
    flip(victim, batch_positions(victim)[2] + 70)
    again = reopen(path, recovery_point=segs[1][0])
    assert again.log_end_offset == segs[1][0] + 2
    assert [s.base_offset for s in again.segments] == [segs[0][0], segs[1][0]]
    assert all(not p.exists() for _, p in segs[2:])
    assert any("deleted segment" in line for line in again.recovery_report)
    assert values(again) == list(range(segs[1][0] + 2))
    put(again, segs[1][0] + 2)
    again.close()


def test_batches_below_the_recovery_point_are_not_scanned(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "t-0"
    log = fill(path, 60)
    segs = [(s.base_offset, s.log_path) for s in log.segments]
    leo = log.log_end_offset
    log.flush()
    crash(log)
    # Corrupt a record (inside the CRC) in the first segment: below the recovery point.
    flip(segs[0][1], 100)
    checked: list[tuple[str, int]] = []
    real = segment_module.verify_batches

    def spy(fd: int, start: int, end: int):
        checked.append((os.readlink(f"/proc/self/fd/{fd}"), start))
        return real(fd, start, end)

    monkeypatch.setattr(segment_module, "verify_batches", spy)
    rp = segs[-1][0] + 5
    again = reopen(path, recovery_point=rp)
    assert again.recovery_report == []
    assert again.log_end_offset == leo
    assert [Path(p).name for p, _ in checked] == [segs[-1][1].name]  # only the segment holding rp
    start = checked[0][1]
    assert 0 < start <= again.segments[-1].size
    # ... and from the index entry at or below the recovery point, not the segment start.
    assert start == again.segments[-1].lookup(rp)
    again.close()


def test_clean_shutdown_checks_no_crc(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "t-0"
    log = fill(path, 30)
    log.close()
    calls: list[int] = []
    real = segment_module.verify_batches
    monkeypatch.setattr(segment_module, "verify_batches", lambda fd, s, e: calls.append(s) or real(fd, s, e))
    again = reopen(path, recovery_point=0, clean=True)
    assert calls == [] and again.recovery_report == []
    assert values(again) == list(range(30))
    again.close()


def test_corruption_past_recovery_point_inside_segment_is_found(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    seg, starts = crashed(path, 20, config=LogConfig(index_interval_bytes=250))
    flip(seg, starts[15] + 70)
    again = reopen(path, recovery_point=10, config=LogConfig(index_interval_bytes=250))
    assert again.log_end_offset == 15
    assert again.recovery_point == 10
    assert all(p < again.segments[0].size for _, p in again.segments[0].index_list())
    again.close()


def test_index_entries_past_the_cut_are_removed(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    seg, starts = crashed(path, 40, config=LogConfig(index_interval_bytes=100))
    os.truncate(seg, starts[20] + 3)
    again = reopen(path, config=LogConfig(index_interval_bytes=100))
    assert again.log_end_offset == 20
    idx = (path / "00000000000000000000.index").read_bytes()
    tidx = (path / "00000000000000000000.timeindex").read_bytes()
    entries = again.segments[0].index_list()
    assert len(idx) == 8 * len(entries) and entries
    assert all(o < 20 and p < starts[20] for o, p in entries)
    assert len(tidx) == 12 * again.segments[0].time_index_entries
    assert all(o < 20 for _, o in again.segments[0].time_index_list())
    again.close()


def test_torn_tail_with_clean_marker_is_still_cut(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log = fill(path, 10, config=LogConfig())
    log.close()
    seg = path / "00000000000000000000.log"
    starts = batch_positions(seg)
    os.truncate(seg, starts[-1] + 10)
    again = reopen(path, recovery_point=10, clean=True, config=LogConfig())
    assert again.log_end_offset == 9 and seg.stat().st_size == starts[-1]
    assert again.recovery_report and "truncated 10 bytes" in again.recovery_report[0]
    again.close()


def _snapshot(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in path.iterdir() if p.suffix in (".index", ".timeindex")}


def _rule_entries(log_path: Path, interval: int) -> list[tuple[int, int]]:
    base = int(log_path.stem)
    out, last, pos = [], 0, 0
    for h in parse_batches(log_path.read_bytes(), verify_crc=True):
        if pos - last > interval:
            out.append((h.last_offset - base, pos))
            last = pos
        pos += h.size
    return out


# Tail damage (what a crash leaves) keeps the valid leading entries and re-derives the rest, so the
# files come back byte for byte; damage in the middle keeps the entries before it.
@pytest.mark.parametrize("damage, identical", [
    ("missing-index", True), ("missing-timeindex", True), ("odd-size", True), ("past-end", True),
    ("zeros", True), ("foreign", True), ("not-monotonic", False), ("timeindex-garbage", True),
    ("last-entry-wrong", True), ("timeindex-past-end", True),
])
@pytest.mark.parametrize("clean", [True, False])
def test_damaged_indexes_are_rebuilt(tmp_path: Path, damage: str, identical: bool, clean: bool) -> None:
    path = tmp_path / "t-0"
    log = fill(path, 60)
    log.close()
    expected = _snapshot(path)
    assert len(expected) >= 6
    victim = sorted(path.glob("*.index"))[1]
    tvictim = victim.with_suffix(".timeindex")
    data = victim.read_bytes()
    assert len(data) >= 24
    if damage == "missing-index":
        victim.unlink()
    elif damage == "missing-timeindex":
        tvictim.unlink()
    elif damage == "odd-size":
        victim.write_bytes(data + b"\x01\x02\x03")
    elif damage == "not-monotonic":
        victim.write_bytes(data[:8] + data[16:24] + data[8:16] + data[24:])
    elif damage == "past-end":
        victim.write_bytes(data + (100).to_bytes(4, "big") + (10**6).to_bytes(4, "big"))
    elif damage == "foreign":  # monotonic and in bounds, but naming the wrong offsets
        victim.write_bytes(b"".join((int.from_bytes(data[i:i + 4], "big") + 1).to_bytes(4, "big") + data[i + 4:i + 8]
                                    for i in range(0, len(data), 8)))
    elif damage == "zeros":
        victim.write_bytes(data + bytes(64))
    elif damage == "timeindex-past-end":  # well formed, but names an offset the segment lacks
        tvictim.write_bytes(tvictim.read_bytes() + (NOW + 10**6).to_bytes(8, "big") + (500).to_bytes(4, "big"))
    elif damage == "last-entry-wrong":  # only the tail walk from the last entry can tell
        victim.write_bytes(data[:-8] + (int.from_bytes(data[-8:-4], "big") + 1).to_bytes(4, "big") + data[-4:])
    elif damage == "timeindex-garbage":
        t = tvictim.read_bytes()
        tvictim.write_bytes(t[12:24] + t[:12] + t[24:])
    again = reopen(path, recovery_point=0 if clean else 60, clean=clean)
    assert any("rebuilt" in line for line in again.recovery_report), again.recovery_report
    assert not any("truncated" in line for line in again.recovery_report)
    assert values(again) == list(range(60))
    got = _snapshot(path)
    active = again.segments[-1].timeindex_path.name
    if not clean:
        # Full recovery re-derives the active segment's time index; its sealing entry comes back at close.
        assert expected[active].startswith(got[active])
        got[active] = expected[active]
    if identical:
        assert got == expected
    else:
        rule = _rule_entries(victim.with_suffix(".log"), CONFIG.index_interval_bytes)
        entries = [(o - int(victim.stem), p) for o, p in again.segments[1].index_list()]
        assert set(entries) <= set(rule) and entries[-1] == rule[-1]
    for offset in range(60):
        assert again.read(offset, 1).next_offset > offset
    again.close()


def test_leftover_files_are_removed(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log = fill(path, 3)
    log.close()
    (path / "00000000000000000099.index").write_bytes(b"")
    (path / "00000000000000000000.log.deleted").write_bytes(b"x")
    (path / "00000000000000000000.index.tmp").write_bytes(b"x")
    again = reopen(path, clean=True, recovery_point=3)
    assert len(again.recovery_report) == 3
    assert sorted(p.name for p in path.iterdir()) == [
        "00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex"]
    again.close()


def test_empty_active_segment_after_roll_survives_crash(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log = fill(path, 5, config=LogConfig())
    log.roll(NOW)
    crash(log)
    again = reopen(path, config=LogConfig())
    assert [s.base_offset for s in again.segments] == [0, 5]
    assert again.log_end_offset == 5 and again.recovery_report == []
    put(again, 5)
    assert values(again) == list(range(6))
    again.close()


def test_whole_active_segment_torn(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log = fill(path, 60)
    segs = [s.base_offset for s in log.segments]
    crash(log)
    os.truncate(last_log(path), 30)
    again = reopen(path, recovery_point=segs[-1])
    assert again.log_end_offset == segs[-1]
    assert [s.base_offset for s in again.segments] == segs
    put(again, segs[-1])
    again.close()


def test_batch_with_offset_going_backwards_is_cut(tmp_path: Path) -> None:
    """baseOffset lies outside the CRC: a header whose offset goes back is garbage too."""
    path = tmp_path / "t-0"
    seg, starts = crashed(path, 8, config=LogConfig())
    data = bytearray(seg.read_bytes())
    data[starts[6]:starts[6] + 8] = (2).to_bytes(8, "big")
    seg.write_bytes(data)
    again = reopen(path, config=LogConfig())
    assert again.log_end_offset == 6 and seg.stat().st_size == starts[6]
    assert "goes backwards" in again.recovery_report[0]
    again.close()


def test_full_recovery_rebuilds_indexes_identically(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log = fill(path, 60)
    log.close()
    expected = _snapshot(path)
    for p in path.glob("*.index"):
        p.write_bytes(p.read_bytes()[:-3] + bytes(40))  # torn index tails everywhere
    again = reopen(path, recovery_point=0, clean=False)
    got = _snapshot(path)
    active = again.segments[-1].timeindex_path.name
    assert expected[active].startswith(got[active])
    got[active] = expected[active]
    assert got == expected
    assert values(again) == list(range(60))
    again.close()


def test_index_entries_lost_in_a_crash_are_re_derived(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log = fill(path, 25, config=LogConfig(index_interval_bytes=100))
    expected = log.segments[0].index_list()
    on_disk = (path / "00000000000000000000.index").stat().st_size // 8
    assert on_disk < len(expected)  # some entries were still only in memory
    crash(log)
    again = reopen(path, recovery_point=25, clean=True, config=LogConfig(index_interval_bytes=100))
    assert again.segments[0].index_list() == expected
    assert (path / "00000000000000000000.index").stat().st_size == 8 * len(expected)
    again.close()
