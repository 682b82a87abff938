"""storage.cleaner: one cleaning round over a real PartitionLog, swapped in with replace_segments.
The property test: for any writes (keys, updates, tombstones, codecs, batch and segment shapes),
compaction keeps exactly the last record of every key at its offset."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharebroker.protocol.record_batch import (
    CONTROL_BIT,
    DELETE_HORIZON_BIT,
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    decode_records,
    encode_batch,
    encode_marker,
    parse_batches,
)
from sharebroker.storage import LogConfig, PartitionLog
from sharebroker.storage.cleaner import CleanTask, clean
from sharebroker.storage.txn_index import AbortedTxnEntry

NOW = 1_700_000_000_000
RETENTION = 1000


def _open(path: Path) -> PartitionLog:
    return PartitionLog.open(path, LogConfig(cleanup_policy="compact", index_interval_bytes=64), recovery_point=0,
                             clean_shutdown=True, now_ms=NOW)


def _append(log: PartitionLog, records: list[tuple[bytes | None, bytes | None]], *, codec: int = NONE,
            pid: int = -1, transactional: bool = False) -> None:
    buf = encode_batch(records, timestamp_ms=NOW, compression=codec, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                       base_sequence=0 if pid >= 0 else -1, transactional=transactional)
    log.append(buf, parse_batches(buf, verify_crc=True), leader_epoch=0, now_ms=NOW)


def _marker(log: PartitionLog, pid: int, commit: bool) -> int:
    buf = encode_marker(pid, 0, commit, coordinator_epoch=0, timestamp_ms=NOW)
    return log.append(buf, parse_batches(buf, verify_crc=True), leader_epoch=0, now_ms=NOW).first_offset


def _round(log: PartitionLog, first_dirty: int, now: int, *, aborted: list[AbortedTxnEntry] | None = None,
           active: dict[int, tuple[int, int]] | None = None, map_bytes: int = 10**8) -> int:
    upto = log.segments[-1].base_offset
    c = log.config
    task = CleanTask(str(log.path), log.path.name, log.cleaning_sources(upto), first_dirty, upto, aborted or [],
                     active or {}, now, RETENTION, c.segment_bytes, c.segment_index_bytes, c.index_interval_bytes,
                     map_bytes)
    result = clean(task)
    for cleaned in result.cleaned:
        assert log.replace_segments(cleaned, now)
    return result.end_offset


def _batches(log: PartitionLog) -> list:
    data = log.read(log.log_start_offset, 1 << 30).records
    return [(h, bytes(data[h.position:h.position + h.size])) for h in parse_batches(data, verify_crc=True)]


def _records(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for h, raw in _batches(log):
        if not h.attributes & CONTROL_BIT:
            out += [(r.offset, r.key, r.value) for r in decode_records(raw)]
    return out


def test_latest_value_per_key_kept_at_its_offset_and_unchanged_batches_copied(tmp_path: Path) -> None:
    log = _open(tmp_path / "t-0")
    _append(log, [(b"a", b"1"), (b"b", b"1")])
    _append(log, [(b"c", b"1")])  # nothing in it is superseded: copied byte for byte
    log.roll(NOW)
    _append(log, [(b"a", b"2"), (b"b", None)])
    log.roll(NOW)
    _append(log, [(b"tail", b"x")])
    copied = _batches(log)[1][1]
    size_before = sum(s.size for s in log.segments)
    end = _round(log, 0, NOW)
    assert end == 5
    assert _records(log) == [(2, b"c", b"1"), (3, b"a", b"2"), (4, b"b", None), (5, b"tail", b"x")]
    batches = _batches(log)
    assert batches[0][1] == copied
    assert [h.base_offset for h, _ in batches] == [2, 3, 5]
    # The batch with a tombstone got its delete horizon; offsets and the last offset delta stay.
    h = batches[1][0]
    assert h.attributes & DELETE_HORIZON_BIT and h.base_timestamp == NOW + RETENTION and h.last_offset == 4
    assert sum(s.size for s in log.segments) < size_before
    # Past the horizon (and with new dirty data), the tombstone goes.
    _append(log, [(b"tail", b"y")])
    log.roll(NOW)
    _append(log, [(b"tail2", b"z")])
    _round(log, end, NOW + RETENTION + 1)
    assert _records(log) == [(2, b"c", b"1"), (3, b"a", b"2"), (6, b"tail", b"y"), (7, b"tail2", b"z")]
    # The cleaned log reopens as it is, and the cleaner's indexes are those a rebuild derives.
    indexes = [(s.index_list(), s.time_index_list()) for s in log.segments]
    log.close()
    reopened = PartitionLog.open(tmp_path / "t-0", log.config, recovery_point=0, clean_shutdown=False, now_ms=NOW)
    assert reopened.recovery_report == []
    assert [(s.index_list(), s.time_index_list()) for s in reopened.segments] == indexes
    assert _records(reopened) == [(2, b"c", b"1"), (3, b"a", b"2"), (6, b"tail", b"y"), (7, b"tail2", b"z")]


def test_aborted_batches_removed_and_markers_kept_until_safe(tmp_path: Path) -> None:
    log = _open(tmp_path / "t-0")
    _append(log, [(b"a", b"committed")], pid=7, transactional=True)
    _marker(log, 7, True)
    _append(log, [(b"a", b"aborted"), (b"x", b"aborted")], pid=7, transactional=True)
    abort_at = _marker(log, 7, False)
    aborted = [AbortedTxnEntry(7, 2, abort_at, 5)]
    log.append_aborted_txn(aborted[0])
    log.roll(NOW)
    _append(log, [(b"tail", b"t")])
    end = _round(log, 0, NOW, aborted=aborted)
    assert _records(log) == [(0, b"a", b"committed"), (5, b"tail", b"t")]
    markers = [h.base_offset for h, _ in _batches(log) if h.attributes & CONTROL_BIT]
    assert markers == [1, 4]  # the abort marker stays while its transaction's batches were just removed
    assert log.aborted_txns() == aborted  # and so does its transaction index entry
    # Next round: no batch of the aborted transaction is left, the marker gets a delete horizon...
    _append(log, [(b"tail", b"u")])
    log.roll(NOW)
    _append(log, [(b"end", b"e")])
    end = _round(log, end, NOW, aborted=aborted)
    abort = [h for h, _ in _batches(log) if h.base_offset == 4][0]
    assert abort.attributes & DELETE_HORIZON_BIT
    # ...and goes once it has passed; the commit marker stays while its transaction's data does.
    _append(log, [(b"end", b"f")])
    log.roll(NOW)
    _append(log, [(b"end2", b"g")])
    _round(log, end, NOW + RETENTION + 1, aborted=aborted)
    assert [h.base_offset for h, _ in _batches(log) if h.attributes & CONTROL_BIT] == [1]
    assert log.aborted_txns() == []


def test_active_producer_last_batch_kept_empty(tmp_path: Path) -> None:
    log = _open(tmp_path / "t-0")
    _append(log, [(b"a", b"1")], pid=9)
    _append(log, [(b"a", b"2")])
    log.roll(NOW)
    _append(log, [(b"tail", b"t")])
    _round(log, 0, NOW, active={9: (0, 0)})
    batches = _batches(log)
    assert batches[0][0].base_offset == 0 and batches[0][0].record_count == 0 and batches[0][0].producer_id == 9
    assert _records(log) == [(1, b"a", b"2"), (2, b"tail", b"t")]


def test_a_full_offset_map_ends_the_round_early(tmp_path: Path) -> None:
    log = _open(tmp_path / "t-0")
    for keys, value in ((range(0, 50), b"0"), (range(50, 100), b"1"), (range(0, 50), b"2")):
        _append(log, [(f"k{i:02d}".encode(), value) for i in keys])
        log.roll(NOW)
    _append(log, [(b"tail", b"t")])
    about_60_keys = int(60 * (120 + 3) / 0.9)
    end = _round(log, 0, NOW, map_bytes=about_60_keys)
    assert end == 50  # the map filled inside the second segment: the round ended after the first
    while end < 150:
        end = _round(log, end, NOW, map_bytes=about_60_keys)
    assert _records(log) == ([(50 + i, f"k{50 + i}".encode(), b"1") for i in range(50)]
                             + [(100 + i, f"k{i:02d}".encode(), b"2") for i in range(50)] + [(150, b"tail", b"t")])


def test_leftover_cleaned_and_swap_files_are_resolved_at_open(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log = _open(path)
    _append(log, [(b"a", b"1")])
    log.roll(NOW)
    _append(log, [(b"a", b"2")])
    log.roll(NOW)
    log.close()
    (path / "00000000000000000000.log.cleaned").write_bytes(b"partial")
    (path / "00000000000000000000.index.swap").write_bytes(b"")
    reopened = PartitionLog.open(path, log.config, recovery_point=0, clean_shutdown=False, now_ms=NOW)
    assert sorted(os.listdir(path)) == sorted(n for n in os.listdir(path) if "." in n and n.count(".") == 1)
    assert _records(reopened) == [(0, b"a", b"1"), (1, b"a", b"2")]


_writes = st.lists(
    st.tuples(
        st.lists(st.tuples(st.sampled_from([b"k0", b"k1", b"k2", b"k3", b"k4", b"k5"]),
                           st.one_of(st.none(), st.binary(max_size=8))), min_size=1, max_size=6),
        st.sampled_from([NONE, NONE, GZIP, SNAPPY, LZ4, ZSTD]),
        st.booleans()),  # roll a segment after this batch
    min_size=1, max_size=25)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writes=_writes)
def test_compaction_keeps_the_last_record_of_every_key(tmp_path_factory, writes) -> None:
    log = _open(tmp_path_factory.mktemp("p") / "t-0")
    written: list[tuple[int, bytes, bytes | None]] = []
    for records, codec, roll in writes:
        _append(log, records, codec=codec)
        written += [(len(written) + i, k, v) for i, (k, v) in enumerate(records)]
        if roll:
            log.roll(NOW)
    _append(log, [(b"active", b"x")])
    active_base = log.segments[-1].base_offset
    # The active segment is never read by the cleaner: what it supersedes stays until it rolls.
    last = {k: (o, v) for o, k, v in written if o < active_base}
    everything = _records(log)
    _round(log, 0, NOW)
    got = _records(log)
    cleaned = [r for r in got if r[0] < active_base]
    untouched = [r for r in everything if r[0] >= active_base]
    # Below the active segment: exactly the last record of each key whose last record is there.
    assert cleaned == sorted((o, k, v) for k, (o, v) in last.items())
    assert [r for r in got if r[0] >= active_base] == untouched
    # The cleaner's index files are exactly what a full recovery rebuilds from the log.
    indexes = [(s.index_list(), s.time_index_list()) for s in log.segments]
    log.close()
    reopened = PartitionLog.open(log.path, log.config, recovery_point=0, clean_shutdown=False, now_ms=NOW)
    assert [(s.index_list(), s.time_index_list()) for s in reopened.segments] == indexes
    assert _records(reopened) == got
    reopened.close()


def _planned(log: PartitionLog, checkpoint: int | None, now: int, lso: int | None = None):
    from types import SimpleNamespace

    from sharebroker.broker.log_cleaner import plan
    partition = SimpleNamespace(log=log, last_stable_offset=log.log_end_offset if lso is None else lso)
    return plan(partition, checkpoint, now)  # type: ignore[arg-type]


def test_plan_follows_kafka_cleanable_offsets(tmp_path: Path) -> None:
    log = _open(tmp_path / "t-0")
    for r in range(3):
        buf = encode_batch([(b"k", b"v" * 50)], timestamp_ms=NOW + r * 1000)
        log.append(buf, parse_batches(buf, verify_crc=True), leader_epoch=0, now_ms=NOW)
        log.roll(NOW)
    buf = encode_batch([(b"k", b"active")], timestamp_ms=NOW + 5000)
    log.append(buf, parse_batches(buf, verify_crc=True), leader_epoch=0, now_ms=NOW)
    sizes = [s.size for s in log.segments]
    ltc = _planned(log, None, NOW + 10_000)
    assert (ltc.first_dirty_offset, ltc.first_uncleanable_offset) == (0, 3)  # never the active segment
    assert ltc.cleanable_bytes == sum(sizes[:3]) and ltc.cleanable_ratio == 1.0
    # From the checkpoint on: segment 0 is clean.
    ltc = _planned(log, 1, NOW + 10_000)
    assert (ltc.clean_bytes, ltc.cleanable_bytes) == (sizes[0], sum(sizes[1:3]))
    # A checkpoint past the log end (a truncated log) starts over.
    assert _planned(log, 99, NOW + 10_000).first_dirty_offset == 0
    # min.compaction.lag.ms: the first segment with a record younger than the lag stops the range.
    log.config.min_compaction_lag_ms = 9_500
    assert _planned(log, None, NOW + 10_000).first_uncleanable_offset == 1
    log.config.min_compaction_lag_ms = 0
    # The last stable offset (an open transaction from offset 1) bounds it, rounded to its segment.
    assert _planned(log, None, NOW + 10_000, lso=1).first_uncleanable_offset == 1
    # max.compaction.lag.ms: a dirty segment whose first record is older must be cleaned now.
    assert not _planned(log, None, NOW + 10_000).need_compaction_now
    log.config.max_compaction_lag_ms = 5_000
    assert _planned(log, None, NOW + 10_000).need_compaction_now


def test_an_offset_map_too_small_for_one_key_is_an_error(tmp_path: Path) -> None:
    import pytest

    log = _open(tmp_path / "t-0")
    _append(log, [(b"k", b"1")])
    log.roll(NOW)
    _append(log, [(b"k", b"2")])
    with pytest.raises(ValueError, match="log.cleaner.dedupe.buffer.size"):
        _round(log, 0, NOW, map_bytes=10)
    assert not [n for n in os.listdir(log.path) if n.endswith(".cleaned")]
