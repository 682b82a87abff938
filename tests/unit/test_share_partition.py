"""SharePartition state machine (spec 5.1-5.10; checklist 15.1). Pure, explicit now_ms."""

from __future__ import annotations

import pytest

from sharebroker.broker.share.inflight import RecordState
from sharebroker.broker.share.partition import (AcquireMode, LogBatch, PersistedBatch, ShareLimits, SharePartition,
                                                validate_acknowledgement_batches)
from sharebroker.protocol.errors import ErrorCode, KafkaError

AV, AQ, AK, AR = RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
BO, RL = AcquireMode.BATCH_OPTIMIZED, AcquireMode.RECORD_LIMIT
LOCK = 30_000
L = ShareLimits(record_lock_duration_ms=LOCK, delivery_count_limit=5, max_in_flight_records=2000)


def limits(**kw) -> ShareLimits:
    base = dict(record_lock_duration_ms=LOCK, delivery_count_limit=5, max_in_flight_records=2000, renew_enabled=True)
    base.update(kw)
    return ShareLimits(**base)


def logb(*spans: tuple[int, int]) -> list[LogBatch]:
    return [LogBatch(a, b) for a, b in spans]


def acq(sp: SharePartition, member: str, spans, *, max_records=500, batch_size=500, mode=BO, lim=L, now=0,
        fetch_offset=None, aborted=()):
    got = sp.acquire(member, logb(*spans), max_records=max_records, batch_size=batch_size, mode=mode,
                     limits=lim, now_ms=now, fetch_offset=fetch_offset, aborted_batches=logb(*aborted))
    return [(r.first_offset, r.last_offset, r.delivery_count) for r in got]


def ack(sp: SharePartition, member: str, items, *, now=0, lim=L, commit=True, is_renew=False):
    w = sp.acknowledge(member, items, limits=lim, now_ms=now, is_renew=is_renew)
    if w is not None and commit:
        sp.commit(w, now_ms=now)
    return w


def release(sp: SharePartition, member: str, *, now=0, lim=L, commit=True):
    w = sp.release_member(member, limits=lim, now_ms=now)
    if w is not None and commit:
        sp.commit(w, now_ms=now)
    return w


def expire(sp: SharePartition, now: int, *, lim=L, commit=True):
    w = sp.expire_locks(limits=lim, now_ms=now)
    if w is not None and commit:
        sp.commit(w, now_ms=now)
    return w


def ranges(sp: SharePartition):
    return [(f, l, s, c) for f, l, s, c, _ in sp.in_flight_ranges()]


def owners(sp: SharePartition):
    return [(f, l, o) for f, l, _, _, o in sp.in_flight_ranges()]


def wb(w):
    return [(b.first_offset, b.last_offset, b.state, b.delivery_count) for b in w.batches]


def redelivered(first: int, last: int, lim: ShareLimits, *, member: str = "a") -> SharePartition:
    """Records 0-9 acquired by "a", then `first`-`last` of them released and acquired again by
    `member`: their second delivery."""
    sp = SharePartition(start_offset=0)
    acq(sp, "a", [(0, 9)], lim=lim, now=0)
    ack(sp, "a", [(first, last, [RELEASE])], lim=lim)
    acq(sp, member, [(first, last)], lim=lim, now=0)
    return sp


def expect_error(code: int, fn, *args, match: str | None = None, **kw) -> KafkaError:
    with pytest.raises(KafkaError) as ei:
        fn(*args, **kw)
    assert ei.value.code == code, ei.value
    if match is not None:
        assert match in ei.value.message, ei.value.message
    return ei.value


def P(first, last, state, count):
    return PersistedBatch(first, last, int(state), count)


# ---------------------------------------------------------------------------------------------
# Initialization (5.3)
# ---------------------------------------------------------------------------------------------

class TestInitialization:
    def test_loads_batches_counts_terminal_and_remembers_gap(self):
        sp = SharePartition(start_offset=10, persisted=[P(15, 19, AV, 1), P(20, 24, AK, 1), P(25, 29, AR, 2)])
        assert sp.start_offset == 10
        assert sp.end_offset == 29
        assert sp.delivery_complete_count == 10
        assert sp.lag_complete() == 10
        assert ranges(sp) == [(15, 19, AV, 1), (20, 24, AK, 1), (25, 29, AR, 2)]
        assert all(o == "" for _, _, o in owners(sp))
        assert sp.gap_window == (10, 29)
        assert sp.next_fetch_offset() == 10
        assert sp.next_lock_deadline() is None

    def test_empty_state(self):
        sp = SharePartition(start_offset=7)
        assert (sp.start_offset, sp.end_offset) == (7, 7)
        assert sp.in_flight_count() == 0
        assert sp.next_fetch_offset() == 7
        assert sp.gap_window is None
        assert sp.persisted_state() == []

    @pytest.mark.parametrize("batch", [P(5, 9, AV, 1), P(12, 11, AV, 1), P(10, 12, AQ, 1), P(10, 12, 9, 1)])
    def test_invalid_batches_fail(self, batch):
        with pytest.raises(ValueError):
            SharePartition(start_offset=10, persisted=[batch])

    def test_overlapping_batches_fail(self):
        with pytest.raises(ValueError):
            SharePartition(start_offset=0, persisted=[P(0, 5, AV, 1), P(5, 9, AV, 1)])

    def test_all_terminal_state_advances_spso_past_everything(self):
        sp = SharePartition(start_offset=0, persisted=[P(0, 9, AK, 1), P(10, 19, AR, 3)])
        assert (sp.start_offset, sp.end_offset) == (20, 20)
        assert ranges(sp) == []
        assert sp.delivery_complete_count == 0
        assert sp.next_fetch_offset() == 20

    def test_leading_terminal_batches_are_passed(self):
        sp = SharePartition(start_offset=0, persisted=[P(0, 9, AK, 1), P(10, 19, AV, 2), P(20, 24, AK, 1)])
        assert sp.start_offset == 10
        assert sp.end_offset == 24
        assert sp.delivery_complete_count == 5
        assert ranges(sp) == [(10, 19, AV, 2), (20, 24, AK, 1)]
        assert sp.next_fetch_offset() == 10

    def test_gap_at_beginning_blocks_spso_advance(self):
        sp = SharePartition(start_offset=0, persisted=[P(5, 9, AK, 1)])
        assert sp.start_offset == 0
        assert sp.gap_window == (0, 9)
        assert sp.delivery_complete_count == 5
        assert sp.next_fetch_offset() == 0

    def test_multiple_gaps_window_starts_at_first_hole(self):
        sp = SharePartition(start_offset=0, persisted=[P(5, 9, AV, 1), P(15, 19, AK, 1)])
        assert sp.gap_window == (0, 19)

    def test_gap_not_at_beginning(self):
        sp = SharePartition(start_offset=0, persisted=[P(0, 4, AV, 1), P(10, 14, AK, 1)])
        assert sp.gap_window == (5, 14)
        assert sp.next_fetch_offset() == 0

    def test_gap_only_after_terminal_prefix(self):
        sp = SharePartition(start_offset=0, persisted=[P(0, 4, AK, 1), P(10, 14, AV, 1)])
        # SPSO may pass the terminal batch but stops at the hole (5..9 were acquired, never acked).
        assert sp.start_offset == 5
        assert sp.next_fetch_offset() == 5

    def test_contiguous_batches_have_no_gap_window(self):
        sp = SharePartition(start_offset=0, persisted=[P(0, 4, AV, 1), P(5, 9, AK, 1)])
        assert sp.gap_window is None

    def test_archiving_batches_stay_archiving_until_their_dlq_write(self):
        sp = SharePartition(start_offset=0, persisted=[P(0, 4, AV, 1), P(5, 9, RecordState.ARCHIVING, 5)])
        assert ranges(sp) == [(0, 4, AV, 1), (5, 9, RecordState.ARCHIVING, 5)]
        assert sp.archiving == 5 and sp.archiving_ranges() == [(5, 9, 5, False)]
        w = sp.finish_archiving([(5, 9)])
        assert wb(w) == [(5, 9, 4, 5)]
        sp.commit(w, now_ms=0)
        assert sp.archiving == 0 and sp.archiving_ranges() == []
        assert sp.finish_archiving([(5, 9)]) is None

    def test_init_then_acquire_fills_gaps_and_reacquires_available(self):
        sp = SharePartition(start_offset=10, persisted=[P(15, 18, AV, 2), P(19, 22, AK, 1), P(26, 30, AV, 1)])
        assert sp.next_fetch_offset() == 10
        got = acq(sp, "a", [(10, 14), (15, 18), (19, 22), (23, 25), (26, 30), (31, 40)])
        assert got == [(10, 14, 1), (15, 18, 3), (23, 25, 1), (26, 30, 2), (31, 40, 1)]
        assert sp.end_offset == 40
        assert sp.gap_window is None
        assert sp.next_fetch_offset() == 41

    def test_init_then_acquire_with_small_max_records_inside_gap(self):
        sp = SharePartition(start_offset=10, persisted=[P(15, 18, AV, 1), P(25, 30, AK, 1)])
        # One log batch spans the gap and the cached batch; the rounding must not run into the cache.
        got = acq(sp, "a", [(10, 30)], max_records=2)
        assert got == [(10, 14, 1)]
        assert sp.gap_window == (15, 30)
        assert sp.next_fetch_offset() == 15

    def test_init_then_acquire_fetch_ends_within_cached_batch(self):
        sp = SharePartition(start_offset=10, persisted=[P(15, 18, AV, 2), P(19, 22, AK, 1)])
        got = acq(sp, "a", [(10, 16)])
        assert got == [(10, 14, 1), (15, 16, 3)]
        assert ranges(sp)[:3] == [(10, 14, AQ, 1), (15, 16, AQ, 3), (17, 18, AV, 2)]
        assert sp.next_fetch_offset() == 17

    def test_init_then_acquire_fetch_batch_prior_to_start_offset(self):
        sp = SharePartition(start_offset=10, persisted=[P(15, 18, AV, 1)])
        got = acq(sp, "a", [(5, 20)])
        assert got == [(10, 14, 1), (15, 18, 2), (19, 20, 1)]
        assert sp.start_offset == 10

    def test_init_gap_window_natural_gap_before_first_fetched_batch(self):
        sp = SharePartition(start_offset=0, persisted=[P(10, 14, AK, 1)])
        # Offsets 0..2 no longer exist in the log: the read returns 3.. first.
        got = acq(sp, "a", [(3, 5), (6, 9)], fetch_offset=0)
        assert got == [(3, 9, 1)]
        assert sp.start_offset == 3
        w = ack(sp, "a", [(3, 9, [ACCEPT])])
        assert wb(w) == [(3, 9, 2, 1)]
        # Kafka keeps the gap window until SPEO passes its end, so SPSO waits at the window start.
        assert (sp.start_offset, sp.end_offset) == (10, 14)
        assert sp.next_fetch_offset() == 15
        assert acq(sp, "a", [(15, 19)]) == [(15, 19, 1)]
        assert sp.gap_window is None
        ack(sp, "a", [(15, 19, [ACCEPT])])
        assert (sp.start_offset, sp.end_offset, ranges(sp)) == (20, 20, [])

    def test_gap_window_closes_when_end_offset_passes_it(self):
        sp = SharePartition(start_offset=0, persisted=[P(5, 9, AV, 1)])
        assert acq(sp, "a", [(0, 4), (5, 9), (10, 12)]) == [(0, 4, 1), (5, 9, 2), (10, 12, 1)]
        assert sp.gap_window is None

    def test_spso_stops_at_gap_after_last_offset_acknowledged(self):
        sp = SharePartition(start_offset=0, persisted=[P(0, 4, AV, 1), P(10, 14, AV, 1)])
        assert acq(sp, "a", [(0, 4)]) == [(0, 4, 2)]
        ack(sp, "a", [(0, 4, [ACCEPT])])
        assert sp.start_offset == 5
        assert sp.next_fetch_offset() == 5
        assert acq(sp, "a", [(5, 9)]) == [(5, 9, 1)]
        ack(sp, "a", [(5, 9, [ACCEPT])])
        assert sp.start_offset == 10


# ---------------------------------------------------------------------------------------------
# Acquisition basics (5.4)
# ---------------------------------------------------------------------------------------------

class TestAcquire:
    def test_single_record(self):
        sp = SharePartition(start_offset=0)
        assert acq(sp, "a", [(0, 0)], now=100) == [(0, 0, 1)]
        assert ranges(sp) == [(0, 0, AQ, 1)]
        assert owners(sp) == [(0, 0, "a")]
        assert sp.next_lock_deadline() == 100 + LOCK
        assert sp.end_offset == 0
        assert sp.next_fetch_offset() == 1

    def test_whole_fetched_batch_is_one_range(self):
        sp = SharePartition(start_offset=0)
        assert acq(sp, "a", [(0, 4)]) == [(0, 4, 1)]
        assert sp.in_flight_count() == 5

    def test_max_records_rounds_up_to_batch_end(self):
        sp = SharePartition(start_offset=0)
        assert acq(sp, "a", [(0, 4), (5, 9), (10, 14)], max_records=6) == [(0, 9, 1)]
        assert sp.end_offset == 9
        assert sp.next_fetch_offset() == 10

    def test_max_records_exact_batch_boundary(self):
        sp = SharePartition(start_offset=0)
        assert acq(sp, "a", [(0, 4), (5, 9), (10, 14)], max_records=5) == [(0, 4, 1)]

    def test_batch_size_does_not_split_one_log_batch(self):
        sp = SharePartition(start_offset=0)
        assert acq(sp, "a", [(0, 19)], batch_size=5) == [(0, 19, 1)]

    @pytest.mark.parametrize("batch_size, expected", [
        (10, [(0, 9, 1), (10, 19, 1)]),
        (6, [(0, 9, 1), (10, 19, 1)]),
        (3, [(0, 4, 1), (5, 9, 1), (10, 14, 1), (15, 19, 1)]),
        (20, [(0, 19, 1)]),
    ])
    def test_batch_size_splits_at_log_batch_boundaries(self, batch_size, expected):
        sp = SharePartition(start_offset=0)
        assert acq(sp, "a", [(0, 4), (5, 9), (10, 14), (15, 19)], batch_size=batch_size) == expected
        # each entry is its own cache batch with its own lock
        assert [(f, l) for f, l, *_ in ranges(sp)] == [(f, l) for f, l, _ in expected]

    def test_batch_size_with_max_records(self):
        sp = SharePartition(start_offset=0)
        assert acq(sp, "a", [(0, 4), (5, 9), (10, 14), (15, 19)], batch_size=5, max_records=7) == [(0, 4, 1), (5, 9, 1)]

    def test_overlap_with_cache_acquires_only_new_part(self):
        sp = SharePartition(start_offset=0)
        assert acq(sp, "a", [(0, 9)]) == [(0, 9, 1)]
        assert acq(sp, "b", [(0, 9), (10, 19)], fetch_offset=0) == [(10, 19, 1)]
        assert owners(sp) == [(0, 9, "a"), (10, 19, "b")]

    def test_same_batch_again_acquires_nothing(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        assert acq(sp, "a", [(0, 9)], fetch_offset=0) == []

    def test_empty_fetch(self):
        sp = SharePartition(start_offset=0)
        assert acq(sp, "a", []) == []
        assert acq(sp, "a", [(0, 9)], max_records=0) == []

    def test_first_acquired_offset_is_speo_when_cache_empty(self):
        sp = SharePartition(start_offset=10)
        assert acq(sp, "a", [(5, 14)]) == [(10, 14, 1)]
        sp2 = SharePartition(start_offset=10)
        assert acq(sp2, "a", [(0, 4), (5, 9), (10, 14), (15, 19)], batch_size=2) == [(10, 14, 1), (15, 19, 1)]

    def test_batch_prior_to_start_offset(self):
        sp = SharePartition(start_offset=10)
        assert acq(sp, "a", [(0, 9)]) == []
        assert ranges(sp) == []

    def test_moved_start_offset_no_overlap(self):
        sp = SharePartition(start_offset=5)
        assert acq(sp, "a", [(0, 9)]) == [(5, 9, 1)]
        w = ack(sp, "a", [(0, 9, [ACCEPT])])  # 0..4 below SPSO are skipped
        assert wb(w) == [(5, 9, 2, 1)]
        assert sp.start_offset == 10

    def test_in_flight_limit_blocks_new_records(self):
        lim = limits(max_in_flight_records=10)
        sp = SharePartition(start_offset=0)
        assert acq(sp, "a", [(0, 9)], lim=lim) == [(0, 9, 1)]
        assert not sp.can_acquire(lim)
        assert acq(sp, "a", [(10, 19)], lim=lim) == []

    def test_in_flight_limit_caps_max_records(self):
        lim = limits(max_in_flight_records=12)
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)], lim=lim)
        # capacity 2 left; rounded up to the end of the log batch (soft limit)
        assert acq(sp, "a", [(10, 14), (15, 19)], lim=lim) == [(10, 14, 1)]

    def test_in_flight_limit_release_inside_window_can_be_reacquired(self):
        lim = limits(max_in_flight_records=10)
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)], lim=lim)
        ack(sp, "a", [(5, 9, [RELEASE])], lim=lim)
        assert sp.next_fetch_offset() == 5
        assert sp.can_acquire(lim)
        # the log read from 5 returns the whole log batch 0..9 and beyond; capped at SPEO
        assert acq(sp, "b", [(0, 9), (10, 19)], lim=lim) == [(5, 9, 2)]
        assert sp.end_offset == 9
        assert not sp.can_acquire(lim)

    def test_in_flight_limit_subset_capped_by_max_records_and_speo(self):
        lim = limits(max_in_flight_records=20)
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4), (5, 9), (10, 14), (15, 19)], lim=lim, batch_size=5)
        ack(sp, "a", [(0, 4, [ACCEPT]), (5, 9, [RELEASE]), (10, 14, [RELEASE])], lim=lim)
        assert sp.start_offset == 5
        # in flight = 15 (< 20): MaxRecords 6 is capped to the 5 free slots; the released batch fills them
        assert acq(sp, "b", [(5, 9), (10, 14), (15, 19), (20, 24)], lim=lim, max_records=6) == [(5, 9, 2)]
        assert acq(sp, "b", [(10, 14), (15, 19), (20, 24)], lim=lim, max_records=6) == [(10, 14, 2)]
        assert sp.end_offset == 19

    def test_in_flight_limit_reached_reacquire_is_capped_at_speo(self):
        lim = limits(max_in_flight_records=10)
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4), (5, 9)], lim=lim, batch_size=5)
        ack(sp, "a", [(0, 4, [RELEASE]), (5, 9, [RELEASE])], lim=lim)
        assert acq(sp, "b", [(0, 4), (5, 9), (10, 14)], lim=lim, max_records=3) == [(0, 4, 2)]
        assert acq(sp, "b", [(5, 9), (10, 14)], lim=lim, max_records=100) == [(5, 9, 2)]
        assert sp.end_offset == 9

    def test_log_batch_base_before_first_record(self):
        # the containing log batch starts before the fetch offset; only cached AVAILABLE offsets count
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        ack(sp, "a", [(0, 4, [ACCEPT])])
        assert sp.start_offset == 5
        ack(sp, "a", [(5, 9, [RELEASE])])
        assert acq(sp, "b", [(0, 9), (10, 12)]) == [(5, 9, 2), (10, 12, 1)]

    def test_compaction_removed_cached_batches_are_archived(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4), (5, 9), (10, 14)], batch_size=5)
        ack(sp, "a", [(0, 4, [RELEASE]), (5, 9, [RELEASE]), (10, 14, [RELEASE])])
        assert sp.next_fetch_offset() == 0
        # compaction removed 0..9: the read from 0 starts at 10
        assert acq(sp, "b", [(10, 14)], fetch_offset=0) == [(10, 14, 2)]
        assert ranges(sp) == [(0, 4, AR, 1), (5, 9, AR, 1), (10, 14, AQ, 2)]
        assert sp.delivery_complete_count == 10
        ack(sp, "b", [(10, 14, [ACCEPT])])
        assert (sp.start_offset, ranges(sp), sp.delivery_complete_count) == (15, [], 0)

    def test_compaction_archiving_moves_spso_only_with_next_write(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4)])
        acq(sp, "a", [(5, 9)])
        acq(sp, "a", [(10, 24)])
        release(sp, "a")
        # 0..4 compacted away and the batch at 5 lost offset 5: the read from 0 returns batch 5..9 first
        assert acq(sp, "a", [(5, 9)], fetch_offset=0) == [(5, 9, 2)]
        assert sp.next_fetch_offset() == 10
        assert sp.start_offset == 0
        assert sp.delivery_complete_count == 5
        release(sp, "a")
        assert (sp.start_offset, sp.next_fetch_offset(), sp.delivery_complete_count) == (5, 5, 0)
        assert ranges(sp) == [(5, 9, AV, 2), (10, 24, AV, 1)]

    def test_compaction_removed_batches_between_fetch_data(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4), (5, 9), (10, 14), (15, 19)], batch_size=5)
        ack(sp, "a", [(0, 4, [ACCEPT]), (5, 9, [RELEASE]), (10, 14, [RELEASE]), (15, 19, [RELEASE])])
        assert sp.start_offset == 5
        # 10..14 vanished in the middle of the read: batch-based acquisition still takes the cached
        # batch between the first and last fetched offsets; the client reports its offsets as GAP
        assert acq(sp, "b", [(5, 9), (15, 19)]) == [(5, 9, 2), (10, 14, 2), (15, 19, 2)]
        ack(sp, "b", [(5, 9, [ACCEPT]), (10, 14, [GAP]), (15, 19, [ACCEPT])])
        assert (sp.start_offset, ranges(sp)) == (20, [])

    def test_compaction_fetch_offset_within_cached_batch(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9), (10, 19)], batch_size=10)
        ack(sp, "a", [(0, 4, [ACCEPT]), (5, 9, [RELEASE]), (10, 19, [RELEASE])])
        assert sp.next_fetch_offset() == 5
        # 5..9 gone from the log: only the AVAILABLE offsets in [5, 10) are archived
        assert acq(sp, "b", [(10, 19)], fetch_offset=5) == [(10, 19, 2)]
        assert ranges(sp)[0] == (5, 9, AR, 1)
        assert sp.delivery_complete_count == 5
        ack(sp, "b", [(10, 19, [ACCEPT])])
        assert (sp.start_offset, ranges(sp)) == (20, [])

    def test_compaction_does_not_archive_non_available(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4), (5, 9)], batch_size=5)
        assert acq(sp, "b", [(10, 14)], fetch_offset=0) == [(10, 14, 1)]
        assert ranges(sp)[:2] == [(0, 4, AQ, 1), (5, 9, AQ, 1)]

    def test_acquire_released_record_count_two(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 0)])
        ack(sp, "a", [(0, 0, [RELEASE])])
        assert acq(sp, "b", [(0, 0)]) == [(0, 0, 2)]

    def test_acquire_released_records_across_batches(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4), (5, 9), (10, 14)], batch_size=5)
        ack(sp, "a", [(2, 4, [RELEASE]), (5, 6, [RELEASE]), (10, 14, [ACCEPT])])
        assert sp.next_fetch_offset() == 2
        assert acq(sp, "b", [(0, 4), (5, 9), (10, 14)]) == [(2, 4, 2), (5, 6, 2)]

    def test_aborted_transaction_batches_archived_and_cut(self):
        sp = SharePartition(start_offset=0)
        got = acq(sp, "a", [(0, 4), (5, 9), (10, 14)], aborted=[(5, 9)])
        assert got == [(0, 4, 1), (10, 14, 1)]
        assert ranges(sp) == [(0, 4, AQ, 1), (5, 9, AR, 1), (10, 14, AQ, 1)]
        assert sp.delivery_complete_count == 5


# ---------------------------------------------------------------------------------------------
# Next fetch offset and capacity
# ---------------------------------------------------------------------------------------------

class TestNextFetchOffset:
    def test_initial_state(self):
        assert SharePartition(start_offset=3).next_fetch_offset() == 3

    def test_all_acquired(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        assert sp.next_fetch_offset() == 10

    def test_find_flag_with_empty_cache_returns_speo(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        ack(sp, "a", [(0, 9, [ACCEPT])])
        assert sp.next_fetch_offset() == 10
        assert sp.end_offset == 10

    def test_first_available_offset(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9), (10, 19)], batch_size=10)
        ack(sp, "a", [(13, 15, [RELEASE])])
        assert sp.next_fetch_offset() == 13
        acq(sp, "b", [(10, 19)])
        assert sp.next_fetch_offset() == 20

    def test_evolves_through_acquire_ack_release(self):
        sp = SharePartition(start_offset=0)
        assert sp.next_fetch_offset() == 0
        acq(sp, "a", [(0, 4)])
        assert sp.next_fetch_offset() == 5
        ack(sp, "a", [(0, 1, [ACCEPT]), (2, 2, [RELEASE])])
        assert sp.next_fetch_offset() == 2
        acq(sp, "a", [(0, 4)])
        assert sp.next_fetch_offset() == 5
        ack(sp, "a", [(2, 4, [ACCEPT])])
        assert sp.next_fetch_offset() == 5
        assert (sp.start_offset, ranges(sp)) == (5, [])

    def test_multiple_consumers(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4)])
        acq(sp, "b", [(5, 9)])
        ack(sp, "a", [(0, 4, [RELEASE])])
        assert sp.next_fetch_offset() == 0
        assert acq(sp, "b", [(0, 4)]) == [(0, 4, 2)]
        assert sp.next_fetch_offset() == 10

    def test_batch_with_ongoing_transition_is_skipped(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4), (5, 9)], batch_size=5)
        w = ack(sp, "a", [(0, 4, [RELEASE])], commit=False)
        assert sp.next_fetch_offset() == 10
        assert acq(sp, "b", [(0, 4), (5, 9)], fetch_offset=0) == []
        sp.commit(w, now_ms=0)
        assert sp.next_fetch_offset() == 0

    def test_offsets_with_ongoing_transition_are_skipped(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        ack(sp, "a", [(1, 1, [RELEASE])])
        w = ack(sp, "a", [(3, 4, [RELEASE])], commit=False)
        assert sp.next_fetch_offset() == 1
        assert acq(sp, "b", [(0, 9)]) == [(1, 1, 2)]
        assert sp.next_fetch_offset() == 10
        sp.commit(w, now_ms=0)
        assert sp.next_fetch_offset() == 3


class TestCanAcquire:
    lim = limits(max_in_flight_records=10)

    def test_empty_cache(self):
        assert SharePartition(start_offset=0).can_acquire(self.lim)

    def test_below_limit(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4)], lim=self.lim)
        assert sp.can_acquire(self.lim)

    def test_at_limit(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)], lim=self.lim)
        assert not sp.can_acquire(self.lim)

    def test_dynamic_limit(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)], lim=self.lim)
        assert sp.can_acquire(limits(max_in_flight_records=11))
        assert not sp.can_acquire(limits(max_in_flight_records=5))
        # a lower limit below the in-flight count never allows new records
        assert acq(sp, "a", [(10, 14)], lim=limits(max_in_flight_records=5)) == []

    @pytest.mark.parametrize("ack_type, expected_spso", [(ACCEPT, 10), (REJECT, 10), (RELEASE, 0)])
    def test_after_acknowledgement(self, ack_type, expected_spso):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)], lim=self.lim)
        assert not sp.can_acquire(self.lim)
        ack(sp, "a", [(0, 9, [ack_type])], lim=self.lim)
        assert sp.start_offset == expected_spso
        assert sp.can_acquire(self.lim)

    def test_spso_advance_frees_capacity(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4), (5, 9)], lim=self.lim, batch_size=5)
        ack(sp, "a", [(5, 9, [ACCEPT])], lim=self.lim)
        assert not sp.can_acquire(self.lim)
        ack(sp, "a", [(0, 4, [ACCEPT])], lim=self.lim)
        assert sp.can_acquire(self.lim)


# ---------------------------------------------------------------------------------------------
# Acknowledgement (5.7)
# ---------------------------------------------------------------------------------------------

class TestAcknowledge:
    def test_write_carries_the_start_offset_it_moves_to(self):
        """Issue 10 defect 4: the persisted start offset must not lag the acknowledgements."""
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 0), (1, 1), (2, 2)])
        w = ack(sp, "a", [(1, 1, [ACCEPT])])
        assert (w.start_offset, w.delivery_complete_count) == (0, 1)  # 0 still in flight
        w = ack(sp, "a", [(0, 0, [ACCEPT])])
        assert (w.start_offset, w.delivery_complete_count) == (2, 0)
        w = ack(sp, "a", [(2, 2, [REJECT])], commit=False)
        assert (w.start_offset, w.delivery_complete_count) == (3, 0)
        sp.rollback(w, limits=L, now_ms=0)
        assert sp.start_offset == 2  # a failed write moves nothing

    def test_single_record_batch(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 0)])
        w = ack(sp, "a", [(0, 0, [ACCEPT])])
        # The write carries the start offset this acknowledgement moves to (as Kafka persists it).
        assert (w.start_offset, w.delivery_complete_count) == (1, 0)
        assert wb(w) == [(0, 0, 2, 1)]
        assert (sp.start_offset, sp.end_offset, ranges(sp)) == (1, 1, [])
        assert sp.next_lock_deadline() is None

    def test_multiple_record_batch(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        w = ack(sp, "a", [(0, 9, [ACCEPT])])
        assert wb(w) == [(0, 9, 2, 1)]
        assert sp.start_offset == 10

    def test_each_type_maps_to_a_state(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 3)])
        w = ack(sp, "a", [(0, 3, [GAP, ACCEPT, RELEASE, REJECT])], commit=False)
        assert wb(w) == [(0, 0, 4, 1), (1, 1, 2, 1), (2, 2, 0, 1), (3, 3, 4, 1)]
        assert ranges(sp) == [(0, 0, AR, 1), (1, 1, AK, 1), (2, 2, AV, 1), (3, 3, AR, 1)]
        assert sp.delivery_complete_count == 3
        sp.commit(w, now_ms=0)
        assert sp.start_offset == 2
        assert sp.delivery_complete_count == 1  # offset 3
        assert sp.next_fetch_offset() == 2

    def test_per_offset_types_with_gaps(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        w = ack(sp, "a", [(0, 9, [ACCEPT, ACCEPT, GAP, ACCEPT, ACCEPT, GAP, GAP, ACCEPT, ACCEPT, ACCEPT])])
        assert wb(w) == [(0, 1, 2, 1), (2, 2, 4, 1), (3, 4, 2, 1), (5, 6, 4, 1), (7, 9, 2, 1)]
        assert (sp.start_offset, ranges(sp)) == (10, [])

    def test_subsets_explode_a_batch(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        ack(sp, "a", [(2, 4, [ACCEPT]), (6, 7, [GAP])])
        assert ranges(sp) == [(0, 1, AQ, 1), (2, 4, AK, 1), (5, 5, AQ, 1), (6, 7, AR, 1), (8, 9, AQ, 1)]
        assert owners(sp)[0] == (0, 1, "a")
        assert sp.start_offset == 0
        assert sp.delivery_complete_count == 5
        ack(sp, "a", [(0, 1, [ACCEPT]), (5, 5, [REJECT])])
        assert sp.start_offset == 8
        assert ranges(sp) == [(8, 9, AQ, 1)]
        assert sp.delivery_complete_count == 0

    def test_ack_spanning_multiple_cached_batches(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4), (5, 9)], batch_size=5)
        w = ack(sp, "a", [(0, 9, [ACCEPT])])
        assert wb(w) == [(0, 9, 2, 1)]
        assert sp.start_offset == 10

    def test_out_of_range_with_empty_cache(self):
        sp = SharePartition(start_offset=0)
        expect_error(ErrorCode.invalid_record_state, ack, sp, "a", [(0, 5, [ACCEPT])], match="not found in the cache")

    @pytest.mark.parametrize("first, last, match", [
        (12, 15, "first offset in request is past"),
        (5, 15, "last offset in request is past"),
    ])
    def test_beyond_cached_range_is_invalid_request(self, first, last, match):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        expect_error(ErrorCode.invalid_request, ack, sp, "a", [(first, last, [ACCEPT])], match=match)

    def test_first_batch_out_of_range_fails_whole_request(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        expect_error(ErrorCode.invalid_request, ack, sp, "a", [(0, 4, [ACCEPT]), (20, 25, [ACCEPT])])
        assert ranges(sp) == [(0, 9, AQ, 1)]
        assert sp.delivery_complete_count == 0
        assert sp.in_transition_ranges() == []

    def test_hole_between_cached_batches(self):
        sp = SharePartition(start_offset=0, persisted=[P(0, 4, AV, 1), P(10, 14, AV, 1)])
        acq(sp, "a", [(0, 4)])
        acq(sp, "a", [(10, 14)], fetch_offset=10)
        expect_error(ErrorCode.invalid_request, ack, sp, "a", [(6, 8, [ACCEPT])])

    def test_another_member_whole_batch(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        expect_error(ErrorCode.invalid_record_state, ack, sp, "b", [(0, 9, [ACCEPT])], match="not the owner of batch")

    def test_another_member_subset(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        expect_error(ErrorCode.invalid_record_state, ack, sp, "b", [(2, 3, [ACCEPT])], match="not the owner of batch")
        ack(sp, "a", [(0, 0, [ACCEPT])])  # explode
        expect_error(ErrorCode.invalid_record_state, ack, sp, "b", [(2, 3, [ACCEPT])], match="not the owner of offset")
        assert ranges(sp) == [(1, 9, AQ, 1)]

    def test_not_acquired_after_release(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        ack(sp, "a", [(0, 9, [RELEASE])])
        expect_error(ErrorCode.invalid_record_state, ack, sp, "a", [(0, 9, [ACCEPT])], match="not in the acquired state")
        expect_error(ErrorCode.invalid_record_state, ack, sp, "a", [(2, 3, [ACCEPT])], match="not in the acquired state")

    def test_acknowledging_twice_fails(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        ack(sp, "a", [(5, 9, [ACCEPT])])
        expect_error(ErrorCode.invalid_record_state, ack, sp, "a", [(5, 9, [ACCEPT])], match="offset is not acquired")

    def test_rollback_of_earlier_batches_on_full_batch_error(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9), (10, 19)], batch_size=10)
        acq(sp, "b", [(20, 29)])
        expect_error(ErrorCode.invalid_record_state, ack, sp, "a",
                     [(0, 9, [ACCEPT]), (10, 19, [REJECT]), (20, 29, [ACCEPT])])
        assert ranges(sp) == [(0, 9, AQ, 1), (10, 19, AQ, 1), (20, 29, AQ, 1)]
        assert owners(sp) == [(0, 9, "a"), (10, 19, "a"), (20, 29, "b")]
        assert sp.delivery_complete_count == 0
        assert sp.next_lock_deadline() == LOCK
        # the locks survived the rollback
        w = expire(sp, LOCK)
        assert wb(w) == [(0, 29, 0, 1)]

    def test_rollback_of_earlier_offsets_on_subset_error(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        acq(sp, "b", [(10, 19)])
        ack(sp, "b", [(15, 15, [ACCEPT])])
        expect_error(ErrorCode.invalid_record_state, ack, sp, "a",
                     [(0, 2, [ACCEPT]), (3, 3, [RELEASE]), (5, 12, [ACCEPT])])
        assert ranges(sp) == [(0, 9, AQ, 1), (10, 14, AQ, 1), (15, 15, AK, 1), (16, 19, AQ, 1)]
        assert sp.next_fetch_offset() == 20

    def test_overlapping_offset_in_one_request_fails_and_rolls_back(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        expect_error(ErrorCode.invalid_record_state, ack, sp, "a", [(0, 4, [ACCEPT]), (4, 9, [ACCEPT])])
        assert ranges(sp) == [(0, 9, AQ, 1)]

    @pytest.mark.parametrize("types", [[5], [-1], [ACCEPT, 7]])
    def test_invalid_acknowledge_type(self, types):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        last = len(types) - 1 if len(types) > 1 else 9
        expect_error(ErrorCode.invalid_request, ack, sp, "a", [(0, last, types)], match="Invalid acknowledge type")

    def test_write_failure_rolls_back_batch(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        w = ack(sp, "a", [(0, 9, [ACCEPT])], now=5, commit=False)
        assert sp.delivery_complete_count == 10
        assert sp.in_transition_ranges() == [(0, 9)]
        sp.rollback(w, limits=L, now_ms=10)
        assert ranges(sp) == [(0, 9, AQ, 1)]
        assert owners(sp) == [(0, 9, "a")]
        assert sp.delivery_complete_count == 0
        assert sp.start_offset == 0
        assert sp.next_lock_deadline() == LOCK
        # acking again works
        ack(sp, "a", [(0, 9, [ACCEPT])], now=11)
        assert sp.start_offset == 10

    def test_write_failure_rolls_back_offsets(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        w = ack(sp, "a", [(0, 2, [ACCEPT]), (5, 6, [RELEASE])], commit=False)
        sp.rollback(w, limits=L, now_ms=1)
        assert ranges(sp) == [(0, 9, AQ, 1)]
        assert sp.delivery_complete_count == 0

    def test_settling_a_write_twice_is_refused(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        w = ack(sp, "a", [(0, 9, [ACCEPT])])
        with pytest.raises(ValueError):
            sp.commit(w, now_ms=0)

    def test_batch_entirely_below_spso_is_ignored(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        ack(sp, "a", [(0, 9, [ACCEPT])])
        assert ack(sp, "a", [(0, 9, [ACCEPT])]) is None
        assert ack(sp, "a", [(3, 4, [REJECT])]) is None

    def test_transition_in_progress_refuses_second_ack(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        ack(sp, "a", [(0, 9, [ACCEPT])], commit=False)
        expect_error(ErrorCode.invalid_record_state, ack, sp, "a", [(0, 9, [ACCEPT])])


# ---------------------------------------------------------------------------------------------
# Acquisition lock (5.5)
# ---------------------------------------------------------------------------------------------

class TestLockExpiry:
    def test_single_record_expires_to_available(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 0)], now=100)
        assert expire(sp, 100 + LOCK - 1) is None
        w = expire(sp, 100 + LOCK)
        assert wb(w) == [(0, 0, 0, 1)]
        assert ranges(sp) == [(0, 0, AV, 1)]
        assert owners(sp) == [(0, 0, "")]
        assert sp.next_fetch_offset() == 0
        assert sp.next_lock_deadline() is None

    def test_separate_timers_per_acquired_range(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)], now=0)
        acq(sp, "a", [(10, 19)], now=100)
        assert sp.next_lock_deadline() == LOCK
        w = expire(sp, LOCK)
        assert wb(w) == [(0, 9, 0, 1)]
        assert sp.next_lock_deadline() == LOCK + 100
        assert ranges(sp) == [(0, 9, AV, 1), (10, 19, AQ, 1)]

    def test_reacquire_after_expiry_gets_new_timer_and_count(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)], now=0)
        expire(sp, LOCK)
        assert acq(sp, "b", [(0, 9)], now=LOCK + 5) == [(0, 9, 2)]
        assert sp.next_lock_deadline() == 2 * LOCK + 5
        assert expire(sp, 2 * LOCK) is None

    @pytest.mark.parametrize("kind", [ACCEPT, RELEASE], ids=["ack", "release"])
    def test_acknowledgement_cancels_lock(self, kind):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        ack(sp, "a", [(0, 9, [kind])])
        assert sp.next_lock_deadline() is None
        assert expire(sp, 10 * LOCK) is None

    def test_per_offset_locks_after_partial_ack(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        ack(sp, "a", [(0, 9, [ACCEPT, GAP, ACCEPT, ACCEPT, ACCEPT, ACCEPT, ACCEPT, ACCEPT, ACCEPT, ACCEPT])])
        assert sp.next_lock_deadline() is None
        acq(sp, "b", [(10, 19)], now=10)
        ack(sp, "b", [(12, 13, [ACCEPT])], now=20)
        w = expire(sp, 10 + LOCK)
        assert wb(w) == [(10, 11, 0, 1), (14, 19, 0, 1)]
        assert sp.next_fetch_offset() == 10

    def test_subset_reacquired_has_its_own_lock(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)], now=0)
        ack(sp, "a", [(3, 5, [RELEASE])], now=1)
        assert acq(sp, "b", [(0, 9)], now=1000) == [(3, 5, 2)]
        w = expire(sp, LOCK)
        assert wb(w) == [(0, 2, 0, 1), (6, 9, 0, 1)]
        assert sp.next_lock_deadline() == 1000 + LOCK
        w = expire(sp, 1000 + LOCK)
        assert wb(w) == [(3, 5, 0, 2)]

    def test_expiry_at_delivery_limit_archives(self):
        lim = limits(delivery_count_limit=2)
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)], lim=lim, now=0)
        expire(sp, LOCK, lim=lim)
        assert acq(sp, "a", [(0, 9)], lim=lim, now=LOCK) == [(0, 9, 2)]
        w = expire(sp, 2 * LOCK, lim=lim, commit=False)
        assert wb(w) == [(0, 9, 4, 2)]
        assert sp.delivery_complete_count == 10
        sp.commit(w, now_ms=2 * LOCK)
        assert (sp.start_offset, sp.end_offset, ranges(sp), sp.delivery_complete_count) == (10, 10, [], 0)

    def test_expiry_archiving_moves_spso_but_keeps_rest(self):
        lim = limits(delivery_count_limit=2)
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4), (5, 9)], batch_size=5, lim=lim, now=0)
        ack(sp, "a", [(0, 4, [RELEASE])], lim=lim)
        acq(sp, "a", [(0, 4)], lim=lim, now=100)  # count 2
        expire(sp, 100 + LOCK, lim=lim)
        assert sp.start_offset == 5
        assert ranges(sp) == [(5, 9, AV, 1)]

    def test_ack_after_expiry_is_invalid_record_state(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        expire(sp, LOCK)
        expect_error(ErrorCode.invalid_record_state, ack, sp, "a", [(0, 9, [ACCEPT])])
        expect_error(ErrorCode.invalid_record_state, ack, sp, "a", [(0, 4, [ACCEPT])])

    def test_mixed_acks_then_expiry_of_the_rest(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        ack(sp, "a", [(0, 1, [ACCEPT]), (2, 3, [RELEASE]), (4, 5, [REJECT])])
        w = expire(sp, LOCK)
        assert wb(w) == [(6, 9, 0, 1)]
        assert ranges(sp) == [(2, 3, AV, 1), (4, 5, AR, 1), (6, 9, AV, 1)]
        assert sp.start_offset == 2

    def test_expiry_while_ack_write_pending_then_write_fails(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)], now=0)
        w = ack(sp, "a", [(0, 9, [ACCEPT])], now=10, commit=False)
        assert sp.next_lock_deadline() is None
        assert expire(sp, LOCK) is None  # in transition: not touched
        sp.rollback(w, limits=L, now_ms=LOCK + 1)
        assert ranges(sp) == [(0, 9, AV, 1)]
        assert owners(sp) == [(0, 9, "")]
        assert sp.delivery_complete_count == 0
        assert sp.next_fetch_offset() == 0

    def test_expiry_while_offsets_ack_write_pending_then_write_fails(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)], now=0)
        w = ack(sp, "a", [(0, 4, [ACCEPT])], now=10, commit=False)
        expire(sp, LOCK)  # 5..9 expire now
        assert ranges(sp) == [(0, 4, AK, 1), (5, 9, AV, 1)]
        sp.rollback(w, limits=L, now_ms=LOCK + 1)
        assert ranges(sp) == [(0, 9, AV, 1)]
        assert sp.delivery_complete_count == 0

    def test_write_failure_after_expiry_on_last_delivery_archives(self):
        lim = limits(delivery_count_limit=2)
        sp = redelivered(0, 9, lim)
        w = ack(sp, "a", [(0, 9, [ACCEPT])], lim=lim, now=10, commit=False)
        assert sp.delivery_complete_count == 10
        sp.rollback(w, limits=lim, now_ms=LOCK)
        # the lock expired meanwhile and the delivery limit was reached: archived, SPSO passes it
        assert (sp.start_offset, ranges(sp), sp.delivery_complete_count) == (10, [], 0)

    def test_write_failure_after_expiry_on_last_delivery_offsets(self):
        lim = limits(delivery_count_limit=2)
        sp = redelivered(5, 9, lim)
        w = ack(sp, "a", [(5, 9, [ACCEPT])], lim=lim, now=10, commit=False)
        assert sp.delivery_complete_count == 5
        expire(sp, LOCK, lim=lim)  # 0..4 (count 1) become AVAILABLE
        sp.rollback(w, limits=lim, now_ms=LOCK)
        assert ranges(sp) == [(0, 4, AV, 1), (5, 9, AR, 2)]
        assert sp.delivery_complete_count == 5

    def test_ack_racing_expiry_only_one_wins(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)], now=0)
        w = ack(sp, "a", [(0, 9, [ACCEPT])], now=LOCK - 1, commit=False)
        assert expire(sp, LOCK) is None
        sp.commit(w, now_ms=LOCK + 1)
        assert (sp.start_offset, ranges(sp)) == (10, [])

    def test_expiry_transition_kept_when_its_write_fails(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        w = expire(sp, LOCK, commit=False)
        sp.rollback(w, limits=L, now_ms=LOCK)
        assert ranges(sp) == [(0, 9, AV, 1)]
        assert sp.next_fetch_offset() == 0

    def test_archived_on_expiry_despite_write_failure(self):
        lim = limits(delivery_count_limit=2)
        sp = redelivered(0, 9, lim)
        w = expire(sp, LOCK, lim=lim, commit=False)
        sp.rollback(w, limits=lim, now_ms=LOCK)
        assert (sp.start_offset, ranges(sp)) == (10, [])

    def test_lock_duration_comes_from_limits(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4)], lim=limits(record_lock_duration_ms=15_000), now=0)
        acq(sp, "a", [(5, 9)], lim=limits(record_lock_duration_ms=60_000), now=0)
        assert sp.next_lock_deadline() == 15_000
        expire(sp, 15_000)
        assert sp.next_lock_deadline() == 60_000

    def test_release_of_mixed_states_cancels_remaining_timers(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        ack(sp, "a", [(0, 9, [ACCEPT, GAP, RELEASE, ACCEPT, ACCEPT, ACCEPT, ACCEPT, ACCEPT, ACCEPT, ACCEPT])])
        assert sp.next_lock_deadline() is None
        assert ranges(sp) == [(2, 2, AV, 1), (3, 9, AK, 1)]


# ---------------------------------------------------------------------------------------------
# Release on session close (5.9)
# ---------------------------------------------------------------------------------------------

class TestReleaseMember:
    def test_single_record_batch(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 0)])
        w = release(sp, "a")
        assert wb(w) == [(0, 0, 0, 1)]
        assert ranges(sp) == [(0, 0, AV, 1)]
        assert sp.next_fetch_offset() == 0
        assert sp.next_lock_deadline() is None

    def test_multiple_batches(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4), (5, 9)], batch_size=5)
        w = release(sp, "a")
        assert wb(w) == [(0, 9, 0, 1)]
        assert ranges(sp) == [(0, 4, AV, 1), (5, 9, AV, 1)]

    def test_acknowledged_records_untouched(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        ack(sp, "a", [(2, 3, [ACCEPT]), (6, 6, [REJECT])])
        w = release(sp, "a")
        assert wb(w) == [(0, 1, 0, 1), (4, 5, 0, 1), (7, 9, 0, 1)]
        assert ranges(sp) == [(0, 1, AV, 1), (2, 3, AK, 1), (4, 5, AV, 1), (6, 6, AR, 1), (7, 9, AV, 1)]

    def test_other_members_untouched(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4)])
        acq(sp, "b", [(5, 9)])
        release(sp, "a")
        assert ranges(sp) == [(0, 4, AV, 1), (5, 9, AQ, 1)]
        assert owners(sp)[1] == (5, 9, "b")
        assert sp.next_lock_deadline() == LOCK

    def test_mixed_ownership_subset(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        ack(sp, "a", [(3, 5, [RELEASE])])
        acq(sp, "b", [(0, 9)])
        ack(sp, "b", [(4, 4, [ACCEPT])])
        release(sp, "a")
        assert ranges(sp) == [(0, 2, AV, 1), (3, 3, AQ, 2), (4, 4, AK, 2), (5, 5, AQ, 2), (6, 9, AV, 1)]
        assert owners(sp)[1] == (3, 3, "b")

    def test_empty_cache_is_noop(self):
        sp = SharePartition(start_offset=0)
        assert release(sp, "a") is None

    def test_nothing_to_release_means_no_write(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        assert release(sp, "b") is None
        ack(sp, "a", [(0, 4, [ACCEPT])])
        release(sp, "a")
        assert release(sp, "a") is None

    def test_write_failure_rolls_back(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        ack(sp, "a", [(0, 1, [ACCEPT])])
        w = release(sp, "a", commit=False)
        assert sp.next_fetch_offset() == 10
        sp.rollback(w, limits=L, now_ms=5)
        assert ranges(sp) == [(2, 9, AQ, 1)]
        assert owners(sp) == [(2, 9, "a")]

    def test_below_spso_archived_middle_of_batch(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        sp.move_log_start(5)
        w = release(sp, "a")
        assert wb(w) == [(0, 4, 4, 1), (5, 9, 0, 1)]
        assert sp.start_offset == 5
        # the record at SPSO is not terminal, so nothing is pruned yet (as in Kafka)
        assert ranges(sp) == [(0, 4, AR, 1), (5, 9, AV, 1)]
        assert sp.delivery_complete_count == 0
        acq(sp, "b", [(0, 9)])
        ack(sp, "b", [(5, 9, [ACCEPT])])
        assert (sp.start_offset, ranges(sp)) == (10, [])

    def test_below_spso_archived_log_start_inside_second_batch(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(5, 9)])
        assert sp.start_offset == 5  # nothing cached below the first acquired record
        acq(sp, "a", [(10, 14)])
        sp.move_log_start(11)
        assert (sp.next_fetch_offset(), sp.start_offset, sp.end_offset) == (15, 11, 14)
        release(sp, "a")
        assert ranges(sp) == [(5, 9, AR, 1), (10, 10, AR, 1), (11, 14, AV, 1)]
        assert sp.delivery_complete_count == 0

    def test_below_spso_archived_start_of_batch(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4), (5, 9)], batch_size=5)
        sp.move_log_start(5)
        w = release(sp, "a")
        assert wb(w) == [(0, 4, 4, 1), (5, 9, 0, 1)]
        assert ranges(sp) == [(0, 4, AR, 1), (5, 9, AV, 1)]
        assert sp.next_fetch_offset() == 5

    def test_below_spso_whole_cache(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4), (5, 9)], batch_size=5)
        sp.move_log_start(12)
        assert (sp.start_offset, sp.end_offset) == (12, 12)
        w = release(sp, "a")
        assert wb(w) == [(0, 9, 4, 1)]
        assert (sp.start_offset, sp.end_offset, ranges(sp)) == (12, 12, [])

    def test_delivery_count_not_decreased(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        release(sp, "a")
        assert acq(sp, "b", [(0, 9)]) == [(0, 9, 2)]
        w = release(sp, "b")
        assert wb(w) == [(0, 9, 0, 2)]
        assert ranges(sp) == [(0, 9, AV, 2)]


# ---------------------------------------------------------------------------------------------
# Delivery count limit (5.6)
# ---------------------------------------------------------------------------------------------

class TestDeliveryLimit:
    lim = limits(delivery_count_limit=2)

    def test_release_at_limit_archives_batch(self):
        sp = redelivered(0, 9, self.lim)
        w = ack(sp, "a", [(0, 9, [RELEASE])], lim=self.lim)
        assert wb(w) == [(0, 9, 4, 2)]
        assert (sp.start_offset, ranges(sp)) == (10, [])

    def test_subset_at_limit_archived_batch_remains(self):
        sp = redelivered(0, 9, self.lim)
        w = ack(sp, "a", [(0, 4, [RELEASE])], lim=self.lim)
        assert wb(w) == [(0, 4, 4, 2)]
        assert sp.start_offset == 5
        assert ranges(sp) == [(5, 9, AQ, 2)]
        assert sp.delivery_complete_count == 0

    def test_subset_archived_in_middle_keeps_cache(self):
        sp = redelivered(0, 9, self.lim)
        ack(sp, "a", [(3, 5, [RELEASE])], lim=self.lim)
        assert ranges(sp) == [(0, 2, AQ, 2), (3, 5, AR, 2), (6, 9, AQ, 2)]
        assert sp.delivery_complete_count == 3
        assert sp.start_offset == 0

    def test_release_member_below_limit_makes_available(self):
        lim = limits(delivery_count_limit=3)
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)], lim=lim)
        release(sp, "a", lim=lim)
        acq(sp, "a", [(0, 9)], lim=lim)
        ack(sp, "a", [(0, 4, [ACCEPT])], lim=lim)
        w = release(sp, "a", lim=lim)
        assert wb(w) == [(5, 9, 0, 2)]

    def test_release_member_at_limit_archives_subset(self):
        sp = redelivered(5, 9, self.lim, member="b")
        w = release(sp, "b", lim=self.lim)
        assert wb(w) == [(5, 9, 4, 2)]
        assert ranges(sp) == [(0, 4, AQ, 1), (5, 9, AR, 2)]

    def test_all_archived_clears_cache(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4), (5, 9)], batch_size=5, lim=self.lim)
        ack(sp, "a", [(0, 9, [RELEASE])], lim=self.lim)
        acq(sp, "a", [(0, 4), (5, 9)], lim=self.lim)
        ack(sp, "a", [(0, 9, [RELEASE])], lim=self.lim)
        assert (sp.start_offset, sp.end_offset, ranges(sp), sp.delivery_complete_count) == (10, 10, [], 0)

    def test_dynamic_limit_decrease_archives_on_next_release(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        ack(sp, "a", [(0, 9, [RELEASE])])
        acq(sp, "a", [(0, 9)])
        ack(sp, "a", [(0, 9, [RELEASE])])
        acq(sp, "a", [(0, 9)])  # count 3 under limit 5
        w = ack(sp, "a", [(0, 9, [RELEASE])], lim=limits(delivery_count_limit=3))
        assert wb(w) == [(0, 9, 4, 3)]

    def test_dynamic_limit_increase_allows_more(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 0)], lim=self.lim)
        ack(sp, "a", [(0, 0, [RELEASE])], lim=self.lim)
        acq(sp, "a", [(0, 0)], lim=self.lim)
        w = ack(sp, "a", [(0, 0, [RELEASE])], lim=limits(delivery_count_limit=4))
        assert wb(w) == [(0, 0, 0, 2)]


# ---------------------------------------------------------------------------------------------
# SPSO advancement and pruning (5.8)
# ---------------------------------------------------------------------------------------------

class TestStartOffsetAdvance:
    @pytest.mark.parametrize("ack_type, spso", [(ACCEPT, 10), (REJECT, 10), (RELEASE, 0)])
    def test_by_type(self, ack_type, spso):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        ack(sp, "a", [(0, 9, [ack_type])])
        assert sp.start_offset == spso

    def test_subset_from_beginning_moves_inside_batch(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        ack(sp, "a", [(0, 4, [ACCEPT])])
        assert sp.start_offset == 5
        assert ranges(sp) == [(5, 9, AQ, 1)]
        assert sp.in_flight_count() == 5

    def test_entire_first_batch_removed(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4), (5, 9)], batch_size=5)
        ack(sp, "a", [(0, 4, [ACCEPT])])
        assert sp.start_offset == 5
        assert ranges(sp) == [(5, 9, AQ, 1)]

    def test_acks_in_between_do_not_move(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4), (5, 9), (10, 14)], batch_size=5)
        ack(sp, "a", [(5, 9, [ACCEPT]), (12, 12, [REJECT])])
        assert sp.start_offset == 0
        assert sp.delivery_complete_count == 6
        ack(sp, "a", [(0, 4, [ACCEPT])])
        assert sp.start_offset == 10
        assert sp.delivery_complete_count == 1
        assert ranges(sp) == [(10, 11, AQ, 1), (12, 12, AR, 1), (13, 14, AQ, 1)]

    def test_all_acknowledged_clears_cache(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4), (5, 9)], batch_size=5)
        ack(sp, "a", [(0, 9, [ACCEPT])])
        assert (sp.start_offset, sp.end_offset, ranges(sp), sp.delivery_complete_count) == (10, 10, [], 0)
        assert sp.next_fetch_offset() == 10

    def test_spso_jumps_natural_hole_between_batches(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4)])
        acq(sp, "a", [(8, 12)], fetch_offset=5)  # 5..7 compacted away
        assert sp.start_offset == 0
        ack(sp, "a", [(0, 4, [ACCEPT])])
        assert sp.start_offset == 8

    def test_sequence_of_acquisitions_and_acks(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        acq(sp, "b", [(10, 19)])
        ack(sp, "b", [(10, 19, [ACCEPT])])
        assert sp.start_offset == 0
        ack(sp, "a", [(0, 5, [ACCEPT]), (6, 6, [RELEASE])])
        assert sp.start_offset == 6
        assert acq(sp, "b", [(0, 9), (10, 19), (20, 24)]) == [(6, 6, 2), (20, 24, 1)]
        ack(sp, "a", [(7, 9, [ACCEPT])])
        assert sp.start_offset == 6
        ack(sp, "b", [(6, 6, [ACCEPT]), (20, 24, [ACCEPT])])
        assert (sp.start_offset, ranges(sp)) == (25, [])

    def test_in_transition_batch_blocks_spso(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9), (10, 19)], batch_size=10)
        w2 = ack(sp, "a", [(10, 19, [ACCEPT])], commit=False)
        ack(sp, "a", [(0, 9, [ACCEPT])])
        assert sp.start_offset == 10
        sp.commit(w2, now_ms=0)
        assert sp.start_offset == 20

    def test_in_transition_offsets_block_spso(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        w2 = ack(sp, "a", [(5, 9, [ACCEPT])], commit=False)
        ack(sp, "a", [(0, 4, [ACCEPT])])
        assert sp.start_offset == 5
        sp.commit(w2, now_ms=0)
        assert (sp.start_offset, ranges(sp)) == (10, [])

    def test_reacquire_subset_with_another_member(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        ack(sp, "a", [(0, 4, [ACCEPT]), (5, 7, [RELEASE])])
        assert acq(sp, "b", [(0, 9)]) == [(5, 7, 2)]
        expect_error(ErrorCode.invalid_record_state, ack, sp, "a", [(5, 9, [ACCEPT])], match="not the owner of offset")
        ack(sp, "b", [(5, 7, [ACCEPT])])
        ack(sp, "a", [(8, 9, [ACCEPT])])
        assert (sp.start_offset, ranges(sp)) == (10, [])


# ---------------------------------------------------------------------------------------------
# Record-limit acquire mode (5.4 step 6)
# ---------------------------------------------------------------------------------------------

class TestRecordLimitMode:
    def test_single_batch(self):
        sp = SharePartition(start_offset=0)
        assert acq(sp, "a", [(0, 9)], max_records=3, mode=RL) == [(0, 2, 1)]
        assert ranges(sp) == [(0, 2, AQ, 1), (3, 9, AV, 0)]
        assert sp.end_offset == 9
        assert sp.next_fetch_offset() == 3
        assert acq(sp, "b", [(0, 9)], max_records=3, mode=RL) == [(3, 5, 1)]
        assert sp.next_fetch_offset() == 6

    def test_multiple_batches(self):
        sp = SharePartition(start_offset=0)
        assert acq(sp, "a", [(0, 4), (5, 9)], max_records=7, mode=RL) == [(0, 6, 1)]
        assert ranges(sp) == [(0, 6, AQ, 1), (7, 9, AV, 0)]

    def test_insufficient_records(self):
        sp = SharePartition(start_offset=0)
        assert acq(sp, "a", [(0, 4)], max_records=10, mode=RL) == [(0, 4, 1)]

    def test_no_batch_size_splitting(self):
        sp = SharePartition(start_offset=0)
        assert acq(sp, "a", [(0, 4), (5, 9)], max_records=10, batch_size=2, mode=RL) == [(0, 9, 1)]

    def test_acknowledge_partial_acquisitions(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)], max_records=3, mode=RL)
        acq(sp, "b", [(0, 9)], max_records=4, mode=RL)
        ack(sp, "a", [(0, 2, [ACCEPT])])
        assert sp.start_offset == 3
        ack(sp, "b", [(3, 6, [ACCEPT, REJECT, ACCEPT, ACCEPT])])
        assert sp.start_offset == 7
        assert ranges(sp) == [(7, 9, AV, 0)]
        assert acq(sp, "a", [(0, 9)], max_records=3, mode=RL) == [(7, 9, 1)]

    def test_overlap_with_new_batch(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4)])
        ack(sp, "a", [(0, 4, [RELEASE])])
        assert acq(sp, "b", [(0, 4), (5, 9)], max_records=7, mode=RL) == [(0, 4, 2), (5, 6, 1)]
        assert ranges(sp) == [(0, 4, AQ, 2), (5, 6, AQ, 1), (7, 9, AV, 0)]

    def test_cached_batch_larger_than_remaining_is_split(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        ack(sp, "a", [(0, 9, [RELEASE])])
        assert acq(sp, "b", [(0, 9)], max_records=4, mode=RL) == [(0, 3, 2)]
        assert ranges(sp) == [(0, 3, AQ, 2), (4, 9, AV, 1)]

    def test_moved_start_offset(self):
        sp = SharePartition(start_offset=5)
        assert acq(sp, "a", [(0, 14)], max_records=3, mode=RL) == [(5, 7, 1)]
        assert ranges(sp) == [(5, 7, AQ, 1), (8, 14, AV, 0)]

    def test_lock_only_on_acquired_part(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)], max_records=3, mode=RL)
        w = expire(sp, LOCK)
        assert wb(w) == [(0, 2, 0, 1)]
        assert ranges(sp) == [(0, 2, AV, 1), (3, 9, AV, 0)]
        assert acq(sp, "a", [(0, 9)], max_records=5, mode=RL) == [(0, 2, 2), (3, 4, 1)]

    def test_release_on_close_in_record_limit_mode(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)], max_records=4, mode=RL)
        ack(sp, "a", [(0, 3, [ACCEPT, GAP, RELEASE, ACCEPT])])
        assert release(sp, "a") is None
        assert ranges(sp) == [(2, 2, AV, 1), (3, 3, AK, 1), (4, 9, AV, 0)]

    def test_gap_window_in_record_limit_mode(self):
        sp = SharePartition(start_offset=0, persisted=[P(5, 9, AV, 1)])
        assert acq(sp, "a", [(0, 9)], max_records=3, mode=RL) == [(0, 2, 1)]
        assert sp.next_fetch_offset() == 3
        assert acq(sp, "a", [(0, 9)], max_records=3, mode=RL) == [(3, 4, 1), (5, 5, 2)]

    def test_members_in_different_modes(self):
        sp = SharePartition(start_offset=0)
        assert acq(sp, "a", [(0, 9)], max_records=2, mode=RL) == [(0, 1, 1)]
        assert acq(sp, "b", [(0, 9), (10, 19)], max_records=2, mode=BO) == [(2, 9, 1)]
        assert acq(sp, "c", [(10, 19)], max_records=2, mode=RL) == [(10, 11, 1)]


# ---------------------------------------------------------------------------------------------
# Renew (ack type 4)
# ---------------------------------------------------------------------------------------------

class TestRenew:
    def test_complete_batch(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)], now=0)
        assert ack(sp, "a", [(0, 9, [RENEW])], now=10_000, is_renew=True) is None
        assert ranges(sp) == [(0, 9, AQ, 1)]
        assert sp.next_lock_deadline() == 10_000 + LOCK
        assert expire(sp, LOCK) is None
        assert wb(expire(sp, 10_000 + LOCK)) == [(0, 9, 0, 1)]

    def test_renew_after_expiry_fails(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)], now=0)
        expire(sp, LOCK)
        expect_error(ErrorCode.invalid_record_state, ack, sp, "a", [(0, 9, [RENEW])], is_renew=True)

    def test_per_offset(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)], now=0)
        w = ack(sp, "a", [(0, 9, [RENEW] * 5 + [ACCEPT] * 5)], now=1000, is_renew=True)
        assert wb(w) == [(5, 9, 2, 1)]
        assert sp.next_lock_deadline() == 1000 + LOCK
        assert ranges(sp) == [(0, 4, AQ, 1), (5, 9, AK, 1)]

    def test_mixed_with_accept_in_one_request(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4), (5, 9)], batch_size=5, now=0)
        w = ack(sp, "a", [(0, 4, [ACCEPT]), (5, 9, [RENEW])], now=500, is_renew=True)
        assert wb(w) == [(0, 4, 2, 1)]
        assert sp.start_offset == 5
        assert sp.next_lock_deadline() == 500 + LOCK

    @pytest.mark.parametrize("batches", [[(0, 9, [RENEW])], [(2, 3, [RENEW])], [(0, 1, [RENEW, ACCEPT])]])
    def test_disabled_by_group_config(self, batches):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        expect_error(ErrorCode.invalid_record_state, ack, sp, "a", batches, is_renew=True, lim=limits(renew_enabled=False),
                     match="Renewing acquisition locks is not enabled")
        assert ranges(sp) == [(0, 9, AQ, 1)]

    def test_renew_requires_is_renew(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        expect_error(ErrorCode.invalid_request, ack, sp, "a", [(0, 9, [RENEW])])

    def test_renew_by_another_member_fails(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        expect_error(ErrorCode.invalid_record_state, ack, sp, "b", [(0, 9, [RENEW])], is_renew=True)


# ---------------------------------------------------------------------------------------------
# Delivery throttling near the limit (4.2)
# ---------------------------------------------------------------------------------------------

def _deliver_and_release_until_done(sp: SharePartition, spans, lim: ShareLimits) -> list[int]:
    """Fetch (from next_fetch_offset, whole log batches), release everything, repeat; piece sizes."""
    sizes = []
    for _ in range(10_000):
        if not ranges(sp):
            break
        got = acq(sp, "a", spans, lim=lim)
        if not got:
            break
        sizes.append(sum(l - f + 1 for f, l, _ in got))
        ack(sp, "a", [(f, l, [RELEASE]) for f, l, _ in got], lim=lim)
    return sizes


class TestThrottling:
    def test_repeated_release_limit_5(self):
        lim = limits(delivery_count_limit=5)  # throttle from count 3
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 99)], lim=lim)
        ack(sp, "a", [(0, 99, [RELEASE])], lim=lim)
        sizes = [100] + _deliver_and_release_until_done(sp, [(0, 99)], lim)
        assert sizes == [100, 100, 100, 50] + [1] * 50 + [50] + [1] * 50
        assert (sp.start_offset, ranges(sp)) == (100, [])

    def test_halving_until_single_record_limit_10(self):
        lim = limits(delivery_count_limit=10)  # throttle from count 5
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 499)], lim=lim)
        ack(sp, "a", [(0, 499, [RELEASE])], lim=lim)
        sizes = [500] + _deliver_and_release_until_done(sp, [(0, 499)], lim)
        assert sizes[:10] == [500, 500, 500, 500, 500, 250, 125, 62, 31, 1]
        assert sum(sizes) == 500 * 10  # every record delivered exactly L times

    def test_throttled_batch_waits_when_other_records_acquired(self):
        lim = limits(delivery_count_limit=5)
        sp = SharePartition(start_offset=0, persisted=[P(0, 9, AV, 1), P(10, 19, AV, 3), P(20, 29, AV, 1)])
        assert acq(sp, "a", [(0, 9), (10, 19), (20, 29)], lim=lim) == [(0, 9, 2)]
        assert acq(sp, "a", [(10, 19), (20, 29)], lim=lim) == [(10, 14, 4)]
        assert acq(sp, "a", [(10, 19), (20, 29)], lim=lim) == [(15, 19, 4)]
        assert acq(sp, "a", [(20, 29)], lim=lim) == [(20, 29, 2)]

    def test_last_attempt_record_isolated_with_mixed_counts(self):
        lim = limits(delivery_count_limit=5)
        sp = SharePartition(start_offset=0, persisted=[P(0, 2, AV, 2), P(3, 3, AV, 4), P(4, 9, AV, 2)])
        # batch-level: each persisted batch is its own cache batch
        assert acq(sp, "a", [(0, 9)], lim=lim) == [(0, 2, 3)]
        assert acq(sp, "a", [(0, 9)], lim=lim) == [(3, 3, 5)]
        assert acq(sp, "a", [(0, 9)], lim=lim) == [(4, 9, 3)]

    def test_last_attempt_inside_exploded_batch(self):
        lim = limits(delivery_count_limit=5)
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)], lim=lim)
        for _ in range(2):
            ack(sp, "a", [(0, 9, [RELEASE])], lim=lim)
            acq(sp, "a", [(0, 9)], lim=lim)
        # counts 3; release 4..9 only, deliver 0..3 twice more so they reach count 4 (last attempt)
        ack(sp, "a", [(4, 9, [RELEASE])], lim=lim)
        assert acq(sp, "b", [(0, 9)], lim=lim) == [(4, 8, 4)]  # 10 >> 1 = 5 records
        ack(sp, "a", [(0, 3, [RELEASE])], lim=lim)
        ack(sp, "b", [(4, 8, [RELEASE])], lim=lim)
        # 0..3 (count 3) are throttled to 10 >> 1 = 5 records but stop before 4, which is on its last attempt
        assert acq(sp, "c", [(0, 9)], lim=lim) == [(0, 3, 4)]
        ack(sp, "c", [(0, 3, [RELEASE])], lim=lim)
        # now offset 0 is on its last attempt: delivered alone
        assert acq(sp, "d", [(0, 9)], lim=lim) == [(0, 0, 5)]
        ack(sp, "d", [(0, 0, [RELEASE])], lim=lim)
        assert sp.start_offset == 1
        assert acq(sp, "d", [(0, 9)], lim=lim) == [(1, 1, 5)]

    def test_not_throttled_if_high_count_records_not_available(self):
        lim = limits(delivery_count_limit=5)
        sp = SharePartition(start_offset=0, persisted=[P(0, 9, AV, 1)])
        acq(sp, "a", [(0, 9)], lim=lim)
        for _ in range(2):
            ack(sp, "a", [(5, 9, [RELEASE])], lim=lim)
            acq(sp, "a", [(5, 9)], lim=lim)
        # 5..9 are ACQUIRED at count 4; the AVAILABLE ones have a low count
        ack(sp, "a", [(0, 4, [RELEASE])], lim=lim)
        assert acq(sp, "b", [(0, 9)], lim=lim) == [(0, 4, 3)]

    def test_in_transition_records_ignored_for_throttling(self):
        lim = limits(delivery_count_limit=5)
        sp = SharePartition(start_offset=0, persisted=[P(0, 9, AV, 3), P(10, 19, AV, 1)])
        acq(sp, "a", [(0, 9)], lim=lim)  # throttled: 0..4 at count 4
        assert ranges(sp)[:2] == [(0, 4, AQ, 4), (5, 9, AV, 3)]
        acq(sp, "a", [(0, 9)], lim=lim)  # 5..9 at count 4
        w = ack(sp, "a", [(0, 9, [RELEASE])], lim=lim, commit=False)
        assert acq(sp, "b", [(0, 9), (10, 19)], lim=lim, fetch_offset=10) == [(10, 19, 2)]
        sp.commit(w, now_ms=0)


# ---------------------------------------------------------------------------------------------
# Log start offset movement (5.10)
# ---------------------------------------------------------------------------------------------

class TestLogStartMovement:
    def test_on_initialised_empty_partition(self):
        sp = SharePartition(start_offset=0)
        sp.move_log_start(15)
        assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (15, 15, 15)

    def test_not_beyond_spso_is_ignored(self):
        sp = SharePartition(start_offset=10)
        sp.move_log_start(5)
        assert sp.start_offset == 10

    def test_archives_available_batches_below(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4), (5, 9), (10, 14)], batch_size=5)
        ack(sp, "a", [(0, 14, [RELEASE])])
        sp.move_log_start(10)
        assert ranges(sp) == [(0, 4, AR, 1), (5, 9, AR, 1), (10, 14, AV, 1)]
        assert sp.start_offset == 10
        assert sp.delivery_complete_count == 0
        assert sp.next_fetch_offset() == 10
        assert acq(sp, "b", [(10, 14), (15, 19)]) == [(10, 14, 2), (15, 19, 1)]
        ack(sp, "b", [(10, 19, [ACCEPT])])
        assert (sp.start_offset, ranges(sp)) == (20, [])

    def test_inside_batch_explodes_it(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        ack(sp, "a", [(0, 9, [RELEASE])])
        sp.move_log_start(5)
        assert ranges(sp) == [(0, 4, AR, 1), (5, 9, AV, 1)]
        assert sp.next_fetch_offset() == 5
        assert acq(sp, "b", [(0, 9)]) == [(5, 9, 2)]

    def test_partial_first_and_last_batches(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4), (5, 9), (10, 14)], batch_size=5)
        ack(sp, "a", [(2, 12, [RELEASE])])
        sp.move_log_start(7)
        assert ranges(sp) == [(0, 1, AQ, 1), (2, 4, AR, 1), (5, 6, AR, 1), (7, 9, AV, 1),
                              (10, 12, AV, 1), (13, 14, AQ, 1)]
        ack(sp, "a", [(0, 1, [ACCEPT])])  # below SPSO: ignored
        assert ranges(sp)[0] == (0, 1, AQ, 1)

    def test_then_accept_and_release(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        sp.move_log_start(3)
        w = ack(sp, "a", [(0, 9, [ACCEPT, ACCEPT, ACCEPT, ACCEPT, RELEASE, ACCEPT, ACCEPT, ACCEPT, ACCEPT, ACCEPT])])
        assert wb(w) == [(3, 3, 2, 1), (4, 4, 0, 1), (5, 9, 2, 1)]
        # 0..2 are still ACQUIRED (below SPSO) and block pruning until they expire
        assert sp.start_offset == 3
        expire(sp, LOCK)
        assert sp.start_offset == 4
        assert ranges(sp) == [(4, 4, AV, 1), (5, 9, AK, 1)]

    def test_to_end_offset(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        sp.move_log_start(9)
        assert (sp.start_offset, sp.end_offset) == (9, 9)
        assert sp.next_fetch_offset() == 10

    def test_to_end_offset_where_end_is_available(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        ack(sp, "a", [(9, 9, [RELEASE])])
        sp.move_log_start(9)
        assert sp.next_fetch_offset() == 9
        assert acq(sp, "b", [(0, 9)]) == [(9, 9, 2)]

    def test_ahead_of_end_offset(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        sp.move_log_start(15)
        assert (sp.start_offset, sp.end_offset) == (15, 15)
        assert sp.next_fetch_offset() == 15
        assert acq(sp, "b", [(15, 19)]) == [(15, 19, 1)]
        assert sp.in_flight_count() == 5

    def test_ahead_of_end_offset_after_acknowledgement(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        ack(sp, "a", [(5, 9, [ACCEPT])])
        assert sp.delivery_complete_count == 5
        sp.move_log_start(20)
        assert (sp.start_offset, sp.end_offset, sp.delivery_complete_count) == (20, 20, 0)
        expire(sp, LOCK)
        assert (sp.start_offset, sp.end_offset, ranges(sp)) == (20, 20, [])

    def test_with_holes_in_cache(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4)])
        acq(sp, "a", [(10, 14)], fetch_offset=5)
        ack(sp, "a", [(0, 4, [RELEASE]), (10, 14, [ACCEPT])])
        sp.move_log_start(7)
        assert ranges(sp) == [(0, 4, AR, 1), (10, 14, AK, 1)]
        assert sp.delivery_complete_count == 5
        assert sp.next_fetch_offset() == 15

    def test_dcc_ignores_records_before_spso(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        ack(sp, "a", [(2, 3, [ACCEPT]), (8, 9, [REJECT])])
        assert sp.delivery_complete_count == 4
        sp.move_log_start(5)
        assert sp.delivery_complete_count == 2
        w = expire(sp, LOCK, commit=False)
        assert wb(w) == [(0, 1, 4, 1), (4, 4, 4, 1), (5, 7, 0, 1)]
        assert sp.delivery_complete_count == 2
        sp.commit(w, now_ms=LOCK)
        assert sp.start_offset == 5

    def test_ack_batch_and_offsets_post_movement(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 4), (5, 9), (10, 14)], batch_size=5)
        sp.move_log_start(7)
        w = ack(sp, "a", [(0, 4, [ACCEPT]), (5, 9, [REJECT]), (10, 14, [ACCEPT])])
        assert wb(w) == [(7, 9, 4, 1), (10, 14, 2, 1)]

    def test_then_expiry_then_ack_fails(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        sp.move_log_start(5)
        expire(sp, LOCK)
        assert ranges(sp) == [(0, 4, AR, 1), (5, 9, AV, 1)]
        expect_error(ErrorCode.invalid_record_state, ack, sp, "a", [(0, 9, [ACCEPT])])
        expect_error(ErrorCode.invalid_record_state, ack, sp, "a", [(5, 9, [ACCEPT])])

    def test_write_failure_with_moved_log_start(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        w = ack(sp, "a", [(0, 9, [RELEASE])], commit=False)
        sp.move_log_start(5)  # pending RELEASE below: archived and stays archived on rollback
        sp.rollback(w, limits=L, now_ms=1)
        assert ranges(sp) == [(0, 4, AR, 1), (5, 9, AQ, 1)]
        assert owners(sp)[1] == (5, 9, "a")

    def test_pending_acknowledgement_then_movement_and_commit(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)])
        w = ack(sp, "a", [(0, 9, [RELEASE])], commit=False)
        sp.move_log_start(5)
        sp.commit(w, now_ms=1)
        assert sp.start_offset == 5
        assert ranges(sp) == [(0, 4, AR, 1), (5, 9, AV, 1)]
        assert sp.next_fetch_offset() == 5

    def test_renewal_with_movement(self):
        sp = SharePartition(start_offset=0)
        acq(sp, "a", [(0, 9)], now=0)
        sp.move_log_start(5)
        assert ack(sp, "a", [(0, 9, [RENEW])], now=1000, is_renew=True) is None
        # only offsets at/after SPSO were renewed
        w = expire(sp, LOCK)
        assert wb(w) == [(0, 4, 4, 1)]
        assert ranges(sp) == [(0, 4, AR, 1), (5, 9, AQ, 1)]
        assert sp.next_lock_deadline() == 1000 + LOCK
        ack(sp, "a", [(5, 9, [ACCEPT])], now=2000)
        assert (sp.start_offset, ranges(sp)) == (10, [])

    def test_gap_window_follows_movement(self):
        sp = SharePartition(start_offset=0, persisted=[P(10, 14, AV, 1)])
        sp.move_log_start(4)
        assert sp.gap_window == (4, 14)
        assert sp.next_fetch_offset() == 4


# ---------------------------------------------------------------------------------------------
# Persisted state, request validation, scale
# ---------------------------------------------------------------------------------------------

def test_persisted_state_snapshot_excludes_acquired_and_transitional():
    sp = SharePartition(start_offset=0)
    acq(sp, "a", [(0, 9)])
    ack(sp, "a", [(1, 2, [ACCEPT]), (3, 3, [RELEASE]), (4, 4, [REJECT])])
    ack(sp, "a", [(6, 6, [ACCEPT])], commit=False)
    assert sp.persisted_state() == [P(1, 2, AK, 1), P(3, 3, AV, 1), P(4, 4, AR, 1)]


def test_restart_from_persisted_state_round_trip():
    sp = SharePartition(start_offset=0)
    acq(sp, "a", [(0, 9)])
    ack(sp, "a", [(0, 3, [ACCEPT]), (5, 6, [RELEASE])])
    sp2 = SharePartition(start_offset=sp.start_offset, persisted=sp.persisted_state())
    assert sp2.start_offset == 4
    assert sp2.gap_window == (4, 6)
    # offset 4 and 7..9 were ACQUIRED (never persisted): fetched again as new records
    assert acq(sp2, "b", [(0, 9)]) == [(4, 4, 1), (5, 6, 2), (7, 9, 1)]


@pytest.mark.parametrize("batches, version, is_renew, ok", [
    ([(0, 9, [1])], 1, False, True),
    ([(0, 4, [1]), (4, 9, [2])], 1, False, True),
    ([(5, 4, [1])], 1, False, False),
    ([(5, 9, [1]), (0, 4, [1])], 1, False, False),
    ([(0, 5, [1]), (3, 9, [1])], 1, False, False),
    ([(0, 9, [])], 1, False, False),
    ([(0, 2, [1, 2])], 1, False, False),
    ([(0, 1, [1, 2])], 1, False, True),
    ([(0, 1, [4])], 1, True, False),
    ([(0, 1, [4])], 2, False, False),
    ([(0, 1, [4])], 2, True, True),
    ([(0, 1, [5])], 2, True, False),
    ([(0, 1, [-1])], 2, True, False),
])
def test_request_level_validation(batches, version, is_renew, ok):
    msg = validate_acknowledgement_batches(batches, version=version, is_renew=is_renew)
    assert (msg is None) == ok, msg


def test_one_million_records_in_thousand_record_batches_keeps_ranges_bounded():
    sp = SharePartition(start_offset=0)
    lim = limits(max_in_flight_records=2000)
    max_ranges = 0
    for i in range(1000):
        base = i * 1000
        got = acq(sp, "a", [(base + k * 100, base + k * 100 + 99) for k in range(10)], max_records=1000,
                  batch_size=1000, lim=lim, now=i)
        assert got == [(base, base + 999, 1)]
        max_ranges = max(max_ranges, len(sp.in_flight_ranges()))
        ack(sp, "a", [(base, base + 999, [ACCEPT])], lim=lim, now=i)
        max_ranges = max(max_ranges, len(sp.in_flight_ranges()))
    assert max_ranges == 1
    assert (sp.start_offset, sp.end_offset, sp.in_flight_ranges()) == (1_000_000, 1_000_000, [])
    assert sp.next_lock_deadline() is None


def test_huge_single_log_batch_is_handled_as_one_range():
    # Costs never scale with record counts: a billion-record batch is one range end to end.
    sp = SharePartition(start_offset=0)
    n = 10**9
    assert acq(sp, "a", [(0, n - 1)]) == [(0, n - 1, 1)]
    ack(sp, "a", [(n // 2, n // 2, [RELEASE])])
    assert len(sp.in_flight_ranges()) == 3
    assert acq(sp, "b", [(0, n - 1)]) == [(n // 2, n // 2, 2)]
    expire(sp, LOCK)
    assert ranges(sp) == [(0, n // 2 - 1, AV, 1), (n // 2, n // 2, AV, 2), (n // 2 + 1, n - 1, AV, 1)]
    assert acq(sp, "c", [(0, n - 1)]) == [(0, n // 2 - 1, 2), (n // 2, n // 2, 3), (n // 2 + 1, n - 1, 2)]
    ack(sp, "c", [(0, n - 1, [ACCEPT])])
    assert (sp.start_offset, sp.in_flight_ranges()) == (n, [])


# ---- dead-letter queue (KIP-1191): ARCHIVING ------------------------------------------------------

DLQ = limits(dlq=True, delivery_count_limit=2)
AG = RecordState.ARCHIVING


def test_reject_goes_archiving_with_dlq_and_archived_without():
    sp = SharePartition(start_offset=0)
    acq(sp, "a", [(0, 5)], lim=DLQ)
    w = ack(sp, "a", [(0, 5, [REJECT, ACCEPT, GAP, REJECT, RELEASE, ACCEPT])], lim=DLQ)
    assert wb(w) == [(0, 0, 3, 1), (1, 1, 2, 1), (2, 2, 4, 1), (3, 3, 3, 1), (4, 4, 0, 1), (5, 5, 2, 1)]
    assert sp.archiving_ranges() == [(0, 0, 1, True), (3, 3, 1, True)]
    assert sp.start_offset == 0  # ARCHIVING is not terminal: SPSO waits for the DLQ write
    sp.commit(sp.finish_archiving([(0, 0)]), now_ms=0)
    assert sp.start_offset == 3
    sp.commit(sp.finish_archiving([(3, 3)]), now_ms=0)
    assert sp.start_offset == 4 and sp.archiving == 0
    plain = SharePartition(start_offset=0)
    acq(plain, "a", [(0, 0)], lim=limits(delivery_count_limit=2))
    assert wb(ack(plain, "a", [(0, 0, [REJECT])], lim=limits(delivery_count_limit=2))) == [(0, 0, 4, 1)]


def test_release_and_expiry_at_the_limit_go_archiving():
    sp = SharePartition(start_offset=0)
    acq(sp, "a", [(0, 1)], lim=DLQ)
    ack(sp, "a", [(0, 1, [RELEASE])], lim=DLQ)
    assert acq(sp, "a", [(0, 1)], lim=DLQ) == [(0, 1, 2)]
    w = ack(sp, "a", [(0, 0, [RELEASE])], lim=DLQ)
    assert wb(w) == [(0, 0, 3, 2)]
    w = expire(sp, LOCK, lim=DLQ)
    assert wb(w) == [(1, 1, 3, 2)]
    assert sp.archiving_ranges() == [(0, 1, 2, False)]
    assert acq(sp, "b", [(0, 1)], lim=DLQ) == []  # ARCHIVING is never delivered again


def test_rolled_back_reject_is_acquired_again_not_archiving():
    sp = SharePartition(start_offset=0)
    acq(sp, "a", [(0, 0)], lim=DLQ)
    w = ack(sp, "a", [(0, 0, [REJECT])], lim=DLQ, commit=False)
    assert sp.archiving_ranges() == []  # in transition: not for the DLQ yet
    sp.rollback(w, limits=DLQ, now_ms=0)
    assert ranges(sp) == [(0, 0, AQ, 1)] and sp.archiving == 0


def test_reject_at_the_last_delivery_is_still_a_reject():
    sp = SharePartition(start_offset=0)
    acq(sp, "a", [(0, 1)], lim=DLQ)
    ack(sp, "a", [(0, 1, [RELEASE])], lim=DLQ)
    assert acq(sp, "a", [(0, 1)], lim=DLQ) == [(0, 1, 2)]
    ack(sp, "a", [(0, 1, [REJECT, RELEASE])], lim=DLQ)
    assert sp.archiving_ranges() == [(0, 0, 2, True), (1, 1, 2, False)]
