"""Share coordinator persistence (share-groups-spec §10): the PersisterStateBatchCombiner merge rule and
the per-key store with Initialize / Read / Write / Delete / ReadSummary semantics. The store's
operations only plan records; ``Applied`` applies each one as the coordinator does once its
append succeeded."""

from __future__ import annotations

import random
import uuid

import pytest
from kio.schema.errors import ErrorCode

from sharebroker.broker.share_state.store import (
    SNAPSHOT,
    ShareGroupOffset,
    ShareStateStore as PlanningStore,
    StateBatch,
    merge_batches,
    merge_into,
)
from sharebroker.protocol.errors import KafkaError

AV, AK, AR = 0, 2, 4
TID = uuid.UUID("00000000-0000-0000-0000-0000000000aa")
KEY = ("g", TID, 0)


def b(first: int, last: int, state: int, count: int) -> StateBatch:
    return StateBatch(first, last, state, count)


def raises(code: ErrorCode, fn, *args, **kwargs) -> KafkaError:
    with pytest.raises(KafkaError) as exc:
        fn(*args, **kwargs)
    assert exc.value.code == code, (exc.value.code, exc.value.message)
    return exc.value


def check_well_formed(out: list[StateBatch]) -> None:
    for x in out:
        assert x.first_offset <= x.last_offset
    for x, y in zip(out, out[1:]):
        assert x.last_offset < y.first_offset, "sorted and non-overlapping"
        if x.last_offset + 1 == y.first_offset:
            assert (x.delivery_state, x.delivery_count) != (y.delivery_state, y.delivery_count), "coalesced"


def reference_merge(current: list[StateBatch], incoming: list[StateBatch], start: int) -> list[StateBatch]:
    """Brute force, offset by offset: the covering batch with the highest (delivery count, state) wins;
    offsets below the start offset are gone; equal neighbours coalesce."""
    winner: dict[int, tuple[int, int]] = {}
    for x in (*current, *incoming):
        for off in range(max(x.first_offset, start), x.last_offset + 1):
            cand = (x.delivery_count, x.delivery_state)
            if off not in winner or cand > winner[off]:
                winner[off] = cand
    out: list[StateBatch] = []
    for off in sorted(winner):
        count, state = winner[off]
        if out and out[-1].last_offset == off - 1 and (out[-1].delivery_state, out[-1].delivery_count) == (state, count):
            out[-1] = b(out[-1].first_offset, off, state, count)
        else:
            out.append(b(off, off, state, count))
    return out


# ------------------------------------------------------------------------------------------------
# Merge rule
# ------------------------------------------------------------------------------------------------

def test_merge_empty():
    assert merge_batches([], [], 0) == []
    assert merge_batches([], [], -1) == []


def test_merge_disjoint_sorted():
    out = merge_batches([b(20, 29, AK, 1)], [b(0, 9, AV, 1)], 0)
    assert out == [b(0, 9, AV, 1), b(20, 29, AK, 1)]


def test_merge_higher_delivery_count_wins_regardless_of_state():
    out = merge_batches([b(0, 9, AR, 1)], [b(3, 5, AV, 2)], 0)
    assert out == [b(0, 2, AR, 1), b(3, 5, AV, 2), b(6, 9, AR, 1)]
    out = merge_batches([b(3, 5, AV, 2)], [b(0, 9, AR, 1)], 0)
    assert out == [b(0, 2, AR, 1), b(3, 5, AV, 2), b(6, 9, AR, 1)], "order of the inputs does not matter"


def test_merge_tie_on_count_higher_state_wins():
    assert merge_batches([b(0, 9, AV, 1)], [b(0, 9, AK, 1)], 0) == [b(0, 9, AK, 1)]
    assert merge_batches([b(0, 9, AK, 1)], [b(0, 9, AV, 1)], 0) == [b(0, 9, AK, 1)]
    assert merge_batches([b(0, 9, AK, 1)], [b(5, 14, AR, 1)], 0) == [b(0, 4, AK, 1), b(5, 14, AR, 1)]
    assert merge_batches([b(0, 4, AR, 3)], [b(0, 4, AK, 3), b(0, 4, AV, 3)], 0) == [b(0, 4, AR, 3)]


def test_merge_clips_at_start_offset_and_drops_below():
    out = merge_batches([b(0, 4, AK, 1), b(5, 9, AV, 1)], [b(10, 12, AR, 1)], 7)
    assert out == [b(7, 9, AV, 1), b(10, 12, AR, 1)]
    assert merge_batches([b(0, 6, AK, 1)], [], 7) == []
    assert merge_batches([b(0, 7, AK, 1)], [], 7) == [b(7, 7, AK, 1)]
    assert merge_batches([b(0, 9, AK, 1)], [], -1) == [b(0, 9, AK, 1)]


def test_merge_coalesces_equal_neighbours():
    assert merge_batches([b(0, 4, AK, 1)], [b(5, 9, AK, 1)], 0) == [b(0, 9, AK, 1)]
    assert merge_batches([b(0, 4, AK, 1), b(10, 14, AK, 1)], [b(5, 9, AK, 1)], 0) == [b(0, 14, AK, 1)]
    # equal state but different count: not coalesced
    assert merge_batches([b(0, 4, AK, 1)], [b(5, 9, AK, 2)], 0) == [b(0, 4, AK, 1), b(5, 9, AK, 2)]
    # a gap: not coalesced
    assert merge_batches([b(0, 4, AK, 1)], [b(6, 9, AK, 1)], 0) == [b(0, 4, AK, 1), b(6, 9, AK, 1)]


def test_merge_overlapping_incoming_among_themselves():
    out = merge_batches([], [b(0, 9, AV, 1), b(5, 14, AV, 2), b(12, 20, AK, 2)], 0)
    assert out == [b(0, 4, AV, 1), b(5, 11, AV, 2), b(12, 20, AK, 2)]


def test_merge_single_offset_batches():
    out = merge_batches([b(5, 5, AK, 1)], [b(5, 5, AV, 1), b(6, 6, AK, 1)], 0)
    assert out == [b(5, 6, AK, 1)]


def test_merge_huge_ranges_cheap():
    out = merge_batches([b(0, 10**15, AV, 1)], [b(10**12, 10**12 + 5, AK, 1)], 0)
    assert out == [b(0, 10**12 - 1, AV, 1), b(10**12, 10**12 + 5, AK, 1), b(10**12 + 6, 10**15, AV, 1)]


def random_batches(rng: random.Random, n: int, *, disjoint: bool) -> list[StateBatch]:
    out = []
    cur = rng.randint(0, 5)
    for _ in range(n):
        if disjoint:
            first = cur + rng.randint(0, 3)
        else:
            first = rng.randint(0, 40)
        last = first + rng.randint(0, 8)
        out.append(b(first, last, rng.choice((AV, AK, AR)), rng.randint(0, 3)))
        cur = last + 1
    if not disjoint:
        rng.shuffle(out)
    return out


def test_merge_property_against_brute_force():
    rng = random.Random(8500)
    for _ in range(3000):
        current = reference_merge(random_batches(rng, rng.randint(0, 6), disjoint=True), [], -1)
        incoming = random_batches(rng, rng.randint(0, 6), disjoint=False)
        start = rng.choice((-1, 0, rng.randint(0, 45)))
        out = merge_batches(current, incoming, start)
        assert out == reference_merge(current, incoming, start), (current, incoming, start)
        check_well_formed(out)
        assert all(x.first_offset >= start for x in out)


def test_merge_of_ordered_ranges_alone_against_brute_force():
    """The fast path a leader's writes take (nothing stored yet, ranges in order, disjoint)."""
    rng = random.Random(932)
    for _ in range(3000):
        incoming = random_batches(rng, rng.randint(0, 6), disjoint=True)
        start = rng.choice((-1, 0, rng.randint(0, 45)))
        out = merge_batches([], incoming, start)
        assert out == reference_merge([], incoming, start), (incoming, start)
        check_well_formed(out)


def test_merge_property_arbitrary_inputs():
    rng = random.Random(86)
    for _ in range(2000):
        current = random_batches(rng, rng.randint(0, 5), disjoint=False)
        incoming = random_batches(rng, rng.randint(0, 5), disjoint=False)
        start = rng.randint(-1, 30)
        out = merge_batches(current, incoming, start)
        assert out == reference_merge(current, incoming, start)
        check_well_formed(out)


def test_merge_is_idempotent_and_order_free():
    rng = random.Random(3)
    for _ in range(500):
        xs = random_batches(rng, 5, disjoint=False)
        ys = random_batches(rng, 5, disjoint=False)
        once = merge_batches(xs, ys, 0)
        assert merge_batches(once, [], 0) == once
        assert merge_batches(once, once, 0) == once
        assert merge_batches(ys, xs, 0) == once


# ------------------------------------------------------------------------------------------------
# Initialize
# ------------------------------------------------------------------------------------------------

class Applied:
    """The store driven like the coordinator: plan an operation's record, then apply it (the
    append always succeeds here). Returns what a caller of the old mutating API saw."""

    def __init__(self, snapshot_every: int = 500) -> None:
        self.plans = PlanningStore(snapshot_every=snapshot_every)
        self.states = self.plans.states
        self.records = []

    def _apply(self, record) -> None:
        self.records.append(record)
        self.plans.apply(record)

    def initialize(self, key, state_epoch, start_offset, now_ms) -> ShareGroupOffset | None:
        record = self.plans.initialize(key, state_epoch, start_offset, now_ms)
        if record is None:
            return None
        self._apply(record)
        return self.states[key]

    def read(self, key, leader_epoch):
        result, record = self.plans.read(key, leader_epoch)
        if record is not None:
            self._apply(record)
        return result, record is not None

    def write(self, key, **kw):
        record = self.plans.write(key, **kw)
        self._apply(record)
        return self.states[key], record.kind == SNAPSHOT

    def delete(self, key) -> bool:
        record = self.plans.delete(key)
        if record is not None:
            self._apply(record)
        return record is not None

    def summary(self, key):
        return self.plans.summary(key)


ShareStateStore = Applied  # noqa: F811 - the tests below drive the store through Applied


@pytest.fixture
def store() -> Applied:
    return Applied(snapshot_every=500)


def write(s: ShareStateStore, key=KEY, *, state_epoch=0, leader_epoch=0, start_offset=0, dcc=0, batches=(), now=0):
    return s.write(key, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start_offset,
                   delivery_complete_count=dcc, batches=list(batches), now_ms=now)


def test_initialize_fresh(store):
    st = store.initialize(KEY, 3, -1, now_ms=10)
    assert st is not None
    assert st.state_epoch == 3 and st.start_offset == -1 and st.batches == []
    assert st.snapshot_epoch == 0
    summary = store.summary(KEY)
    assert (summary.state_epoch, summary.start_offset, summary.delivery_complete_count) == (3, -1, -1)


def test_initialize_delivery_complete_count_zero_for_real_start_offset(store):
    store.initialize(KEY, 1, 0, now_ms=0)
    assert store.summary(KEY).delivery_complete_count == 0
    store.initialize(KEY, 2, 42, now_ms=0)
    assert store.summary(KEY).delivery_complete_count == 0
    store.initialize(KEY, 3, -1, now_ms=0)
    assert store.summary(KEY).delivery_complete_count == -1


def test_initialize_identical_repeat_is_noop(store):
    store.initialize(KEY, 2, 5, now_ms=0)
    write(store, state_epoch=2, leader_epoch=1, start_offset=5, batches=[b(5, 9, AK, 1)])
    assert store.initialize(KEY, 2, 5, now_ms=1) is None
    result, _ = store.read(KEY, 1)
    assert result.batches == [b(5, 9, AK, 1)], "the no-op kept the in-flight state"


def test_initialize_older_state_epoch_fenced(store):
    store.initialize(KEY, 5, 0, now_ms=0)
    err = raises(ErrorCode.fenced_state_epoch, store.initialize, KEY, 4, 0, now_ms=0)
    assert err.message
    assert store.summary(KEY).state_epoch == 5


def test_reinitialize_wipes_batches_and_bumps_snapshot_epoch(store):
    store.initialize(KEY, 1, 0, now_ms=0)
    write(store, state_epoch=1, leader_epoch=0, start_offset=3, dcc=2, batches=[b(3, 9, AK, 1)])
    st = store.initialize(KEY, 2, 100, now_ms=5)  # AlterShareGroupOffsets
    assert st is not None and st.snapshot_epoch == 1
    result, _ = store.read(KEY, 0)
    assert (result.state_epoch, result.start_offset, result.batches) == (2, 100, [])
    assert store.summary(KEY).delivery_complete_count == 0
    # same state epoch, different start offset: not a repeat, so it re-initializes too
    st = store.initialize(KEY, 2, 7, now_ms=6)
    assert st is not None and st.start_offset == 7 and st.snapshot_epoch == 2


def test_reinitialize_does_not_let_old_leader_back_in(store):
    store.initialize(KEY, 1, 0, now_ms=0)
    store.read(KEY, 4)
    store.initialize(KEY, 2, 0, now_ms=0)
    raises(ErrorCode.fenced_leader_epoch, store.read, KEY, 3)


@pytest.mark.parametrize("key,state_epoch", [(("g", None, 0), 0), (("g", TID, -1), 0), (KEY, -1)])
def test_initialize_invalid_input(store, key, state_epoch):
    raises(ErrorCode.invalid_request, store.initialize, key, state_epoch, 0, now_ms=0)
    assert store.states == {}


# ------------------------------------------------------------------------------------------------
# Read
# ------------------------------------------------------------------------------------------------

def test_read_uninitialized_is_invalid_request(store):
    raises(ErrorCode.invalid_request, store.read, KEY, 0)
    store.initialize(("g", TID, 1), 0, 0, now_ms=0)
    raises(ErrorCode.invalid_request, store.read, KEY, 0)
    raises(ErrorCode.invalid_request, store.read, ("other", TID, 1), 0)


@pytest.mark.parametrize("key", [("g", None, 0), ("g", TID, -1)])
def test_read_invalid_input(store, key):
    raises(ErrorCode.invalid_request, store.read, key, 0)


def test_read_returns_state(store):
    store.initialize(KEY, 3, 10, now_ms=0)
    write(store, state_epoch=3, leader_epoch=2, start_offset=10, batches=[b(10, 14, AR, 2), b(15, 19, AK, 1)])
    result, moved = store.read(KEY, 2)
    assert (result.state_epoch, result.start_offset) == (3, 10)
    assert result.batches == [b(10, 14, AR, 2), b(15, 19, AK, 1)]
    assert moved is False


def test_read_leader_epoch_fencing_and_move(store):
    store.initialize(KEY, 0, 0, now_ms=0)
    _, moved = store.read(KEY, 5)
    assert moved is True
    assert store.summary(KEY).leader_epoch == 5
    err = raises(ErrorCode.fenced_leader_epoch, store.read, KEY, 4)
    assert err.message
    _, moved = store.read(KEY, 5)
    assert moved is False
    _, moved = store.read(KEY, 9)
    assert moved is True
    assert store.summary(KEY).leader_epoch == 9
    # the old leader is now fenced for writes too
    raises(ErrorCode.fenced_leader_epoch, write, store, leader_epoch=5)


def test_read_result_is_not_aliased_to_store(store):
    store.initialize(KEY, 0, 0, now_ms=0)
    write(store, batches=[b(0, 4, AK, 1)])
    result, _ = store.read(KEY, 0)
    result.batches.append(b(99, 99, AV, 1))
    again, _ = store.read(KEY, 0)
    assert again.batches == [b(0, 4, AK, 1)]


# ------------------------------------------------------------------------------------------------
# Write
# ------------------------------------------------------------------------------------------------

def test_write_uninitialized_is_invalid_request(store):
    raises(ErrorCode.invalid_request, write, store)
    assert store.states == {}


@pytest.mark.parametrize("kw", [dict(leader_epoch=-1), dict(state_epoch=-1), dict(key=("g", None, 0)),
                                dict(key=("g", TID, -2))])
def test_write_invalid_input(store, kw):
    store.initialize(KEY, 0, 0, now_ms=0)
    raises(ErrorCode.invalid_request, write, store, **kw)


def test_write_fencing_leader_then_state(store):
    store.initialize(KEY, 3, 0, now_ms=0)
    write(store, state_epoch=3, leader_epoch=5, start_offset=0, batches=[b(0, 4, AK, 1)])
    before = store.read(KEY, 5)[0]
    raises(ErrorCode.fenced_leader_epoch, write, store, state_epoch=2, leader_epoch=4, start_offset=3,
           batches=[b(0, 9, AR, 9)])
    raises(ErrorCode.fenced_leader_epoch, write, store, state_epoch=3, leader_epoch=4, start_offset=3)
    raises(ErrorCode.fenced_state_epoch, write, store, state_epoch=2, leader_epoch=5, start_offset=3,
           batches=[b(0, 9, AR, 9)])
    raises(ErrorCode.fenced_state_epoch, write, store, state_epoch=2, leader_epoch=6, start_offset=3)
    after = store.read(KEY, 5)[0]
    assert after == before, "fenced writes change nothing"
    assert store.summary(KEY).leader_epoch == 5
    write(store, state_epoch=3, leader_epoch=6, start_offset=0)
    assert store.summary(KEY).leader_epoch == 6
    raises(ErrorCode.fenced_leader_epoch, write, store, state_epoch=3, leader_epoch=5)


def test_write_after_reinitialize_with_new_state_epoch_fences_old_state(store):
    store.initialize(KEY, 1, 0, now_ms=0)
    write(store, state_epoch=1, leader_epoch=0)
    store.initialize(KEY, 2, 50, now_ms=0)
    raises(ErrorCode.fenced_state_epoch, write, store, state_epoch=1, leader_epoch=0, start_offset=60)
    write(store, state_epoch=2, leader_epoch=0, start_offset=50)


def test_write_merges_batches(store):
    store.initialize(KEY, 0, 0, now_ms=0)
    write(store, batches=[b(0, 9, AV, 1)])
    write(store, batches=[b(5, 14, AK, 1)])
    write(store, batches=[b(2, 3, AV, 2)])
    result, _ = store.read(KEY, 0)
    assert result.batches == [b(0, 1, AV, 1), b(2, 3, AV, 2), b(4, 4, AV, 1), b(5, 14, AK, 1)]


def test_write_start_offset_never_regresses(store):
    store.initialize(KEY, 0, 0, now_ms=0)
    write(store, start_offset=10, batches=[b(10, 19, AV, 1)])
    assert store.summary(KEY).start_offset == 10
    write(store, start_offset=5, batches=[b(5, 12, AR, 3)])
    result, _ = store.read(KEY, 0)
    assert result.start_offset == 10
    assert result.batches == [b(10, 12, AR, 3), b(13, 19, AV, 1)], "nothing below the stored start offset"
    write(store, start_offset=15)
    result, _ = store.read(KEY, 0)
    assert result.start_offset == 15
    assert result.batches == [b(15, 19, AV, 1)], "state below the new start offset is pruned"


def test_write_start_offset_from_minus_one(store):
    store.initialize(KEY, 0, -1, now_ms=0)
    write(store, start_offset=7, dcc=0)
    s = store.summary(KEY)
    assert (s.start_offset, s.delivery_complete_count) == (7, 0)


def test_write_delivery_complete_count_rules(store):
    store.initialize(KEY, 0, 0, now_ms=0)
    assert store.summary(KEY).delivery_complete_count == 0
    write(store, start_offset=10, dcc=3)  # request SPSO > stored: request value
    assert store.summary(KEY).delivery_complete_count == 3
    write(store, start_offset=10, dcc=2)  # equal SPSO: max of both
    assert store.summary(KEY).delivery_complete_count == 3
    write(store, start_offset=10, dcc=8)
    assert store.summary(KEY).delivery_complete_count == 8
    write(store, start_offset=4, dcc=100)  # request SPSO < stored: keep stored
    assert store.summary(KEY).delivery_complete_count == 8
    write(store, start_offset=20, dcc=1)  # SPSO moved on: request value even if lower
    s = store.summary(KEY)
    assert (s.start_offset, s.delivery_complete_count) == (20, 1)


def test_write_never_changes_the_state_epoch(store):
    """Only Initialize (and Delete) change a state epoch; a write with a newer one is accepted
    but leaves it, so the live store and a replay of its records agree (issue 10)."""
    store.initialize(KEY, 1, 0, now_ms=0)
    write(store, state_epoch=4, leader_epoch=0)
    assert store.summary(KEY).state_epoch == 1
    assert replayed(store.records).states == store.states
    write(store, state_epoch=1, leader_epoch=0)  # the initialized epoch still writes
    raises(ErrorCode.fenced_state_epoch, write, store, state_epoch=0, leader_epoch=0)


def replayed(records) -> PlanningStore:
    """A fresh store fed the encoded records, as start-up replays `__share_group_state`."""
    from sharebroker.broker.share_state import records as rec
    fresh = PlanningStore()
    for r in records:
        fresh.apply(rec.decode_record(*rec.encode_record(r)))
    return fresh


def test_merge_into_equals_merge_batches():
    rng = random.Random(7)
    for _ in range(400):
        cur = merge_batches([], random_batches(rng, rng.randint(0, 12), disjoint=True), 0)
        inc = random_batches(rng, rng.randint(0, 4), disjoint=False)
        start = rng.randint(0, 60)
        expect = merge_batches(cur, inc, start)
        got = list(cur)
        merge_into(got, sorted(inc, key=lambda x: x.first_offset), start)
        assert got == expect, (cur, inc, start)


def snapshot_pattern(store: ShareStateStore, writes: int) -> list[bool]:
    return [write(store, start_offset=i)[1] for i in range(writes)]


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_snapshot_due_after_n_updates(n):
    """A write becomes a full snapshot when the key has had >= N updates since its last snapshot
    (Initialize writes a snapshot): N update records, then a snapshot, and so on."""
    store = ShareStateStore(snapshot_every=n)
    store.initialize(KEY, 0, 0, now_ms=0)
    pattern = snapshot_pattern(store, 3 * (n + 1))
    assert pattern == ([False] * n + [True]) * 3


def test_snapshot_epoch_moves_only_on_snapshots():
    store = ShareStateStore(snapshot_every=2)
    store.initialize(KEY, 0, 0, now_ms=0)
    epochs = []
    for i in range(9):
        st, due = write(store, start_offset=i)
        epochs.append((st.snapshot_epoch, due))
    for (e1, _), (e2, due) in zip([(0, True)] + epochs, epochs):
        assert e2 == (e1 + 1 if due else e1)
    assert sum(due for _, due in epochs) >= 2


def test_snapshot_every_zero_means_every_write():
    store = ShareStateStore(snapshot_every=0)
    store.initialize(KEY, 0, 0, now_ms=0)
    assert snapshot_pattern(store, 4) == [True] * 4


def test_reinitialize_resets_snapshot_counter():
    store = ShareStateStore(snapshot_every=3)
    store.initialize(KEY, 0, 0, now_ms=0)
    snapshot_pattern(store, 2)
    store.initialize(KEY, 1, 0, now_ms=0)  # a fresh snapshot
    assert [write(store, state_epoch=1, start_offset=i)[1] for i in range(4)] == [False, False, False, True]


def test_keys_are_independent(store):
    k2 = ("g", TID, 1)
    k3 = ("other", TID, 0)
    store.initialize(KEY, 1, 0, now_ms=0)
    store.initialize(k2, 2, 5, now_ms=0)
    store.initialize(k3, 3, 9, now_ms=0)
    store.read(KEY, 10)
    write(store, state_epoch=1, leader_epoch=10, start_offset=3, batches=[b(3, 4, AK, 1)])
    store.read(k2, 0)  # not fenced by KEY's leader epoch
    assert store.summary(k2).start_offset == 5 and store.summary(k3).state_epoch == 3
    assert store.read(k2, 0)[0].batches == []


# ------------------------------------------------------------------------------------------------
# Delete and ReadSummary
# ------------------------------------------------------------------------------------------------

def test_delete_missing_key_is_fine(store):
    assert store.delete(KEY) is False
    assert store.delete(("nobody", uuid.uuid4(), 3)) is False
    assert store.records == [] and store.states == {}


def test_delete_removes_state(store):
    store.initialize(KEY, 2, 5, now_ms=0)
    store.delete(KEY)
    s = store.summary(KEY)
    assert (s.state_epoch, s.leader_epoch, s.start_offset, s.delivery_complete_count) == (0, 0, -1, -1)
    raises(ErrorCode.invalid_request, store.read, KEY, 0)
    raises(ErrorCode.invalid_request, write, store)
    # it can be initialized again from scratch
    assert store.initialize(KEY, 0, -1, now_ms=0) is not None


def test_summary_missing_key(store):
    s = store.summary(KEY)
    assert (s.state_epoch, s.leader_epoch, s.start_offset, s.delivery_complete_count) == (0, 0, -1, -1)


def test_summary_has_no_fencing_and_reflects_state(store):
    store.initialize(KEY, 4, 0, now_ms=0)
    store.read(KEY, 7)
    write(store, state_epoch=4, leader_epoch=7, start_offset=12, dcc=6)
    s = store.summary(KEY)
    assert (s.state_epoch, s.leader_epoch, s.start_offset, s.delivery_complete_count) == (4, 7, 12, 6)


# ------------------------------------------------------------------------------------------------
# Live state equals the replay of the records it wrote (issue 10: one code path)
# ------------------------------------------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as hst  # noqa: E402

_batch = hst.builds(lambda f, n, s, c: b(f, f + n, s, c), hst.integers(0, 60), hst.integers(0, 6),
                    hst.sampled_from((AV, AK, AR)), hst.integers(0, 4))
_op = hst.one_of(
    hst.tuples(hst.just("init"), hst.integers(0, 3), hst.integers(-1, 40)),
    hst.tuples(hst.just("read"), hst.integers(0, 3)),
    hst.tuples(hst.just("write"), hst.integers(0, 3), hst.integers(0, 3), hst.integers(-1, 50),
               hst.integers(-1, 20), hst.lists(_batch, max_size=4)),
    hst.tuples(hst.just("delete")),
)


@settings(max_examples=300, deadline=None)
@given(ops=hst.lists(hst.tuples(hst.sampled_from([KEY, ("g", TID, 1)]), _op), max_size=40),
       snapshot_every=hst.integers(0, 4))
def test_live_state_equals_replay_of_its_records(ops, snapshot_every):
    live = Applied(snapshot_every=snapshot_every)
    epochs = {}
    for key, op in ops:
        try:
            if op[0] == "init":
                live.initialize(key, op[1], op[2], now_ms=1)
            elif op[0] == "read":
                live.read(key, op[1])
            elif op[0] == "write":
                live.write(key, state_epoch=op[1], leader_epoch=op[2], start_offset=op[3],
                           delivery_complete_count=op[4], batches=sorted(op[5], key=lambda x: x.first_offset),
                           now_ms=2)
            else:
                live.delete(key)
        except KafkaError:
            continue
        finally:
            if key in live.states:
                # the state epoch moves only with Initialize (or a delete and a new Initialize)
                if op[0] not in ("init", "delete") and key in epochs:
                    assert live.states[key].state_epoch == epochs[key]
                epochs[key] = live.states[key].state_epoch
            else:
                epochs.pop(key, None)
        for st_ in live.states.values():
            check_well_formed(st_.batches)
    assert replayed(live.records).states == live.states
