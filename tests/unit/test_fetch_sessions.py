"""Incremental fetch sessions (KIP-227) without sockets: the cache's size limit and eviction order
(as Kafka's FetchSessionCacheShard), a session's partition bookkeeping, the rule for which
partitions an incremental answer lists (Kafka's maybeUpdateResponseData plus the last stable
offset), the rotation of partitions that returned records, the candidate set that spares reading
idle partitions, and the append watch that feeds it."""

from __future__ import annotations

import asyncio
import random
import uuid

import pytest

from sharebroker.broker.fetch_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    MIN_EVICTION_MS,
    CachedPartition,
    FetchSession,
    FetchSessionCache,
    next_epoch,
)

INT32_MAX = 2**31 - 1
FOO = uuid.UUID("00000000-0000-0000-0000-0000000000f0")


def parts(n: int, topic: str = "t") -> dict:
    return {(topic, i): CachedPartition(topic, None, i, 1000, 0) for i in range(n)}


def cache_of(slots: int, eviction_ms: int = 100) -> FetchSessionCache:
    return FetchSessionCache(slots, eviction_ms, rng=random.Random(7))


def create(cache: FetchSessionCache, now: int, size: int, privileged: bool = False) -> int:
    session = cache.maybe_create_session(now, privileged, size, True, lambda: parts(size))
    return INVALID_SESSION_ID if session is None else session.id


def assert_holds(cache: FetchSessionCache, *ids: int) -> None:
    assert sorted(cache.sessions) == sorted(ids)


# -- epochs and ids -----------------------------------------------------------------------------


def test_epochs():
    assert (INVALID_SESSION_ID, INITIAL_EPOCH, FINAL_EPOCH) == (0, 0, -1)
    assert next_epoch(INITIAL_EPOCH) == 1
    assert next_epoch(41) == 42
    assert next_epoch(INT32_MAX) == 1  # wraps past INT32_MAX to 1, never to 0 (INITIAL)
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH
    assert MIN_EVICTION_MS == 120_000


def test_new_session_ids_are_positive_and_unused():
    cache = cache_of(10_000)
    ids = [create(cache, 0, 1) for _ in range(2_000)]
    assert all(0 < i < INT32_MAX for i in ids)
    assert len(set(ids)) == len(ids)
    assert all(cache.get(i).epoch == 1 for i in ids)  # a new session expects epoch 1 next


# -- the cache ----------------------------------------------------------------------------------


def test_full_cache_evicts_stale_then_smaller_aged_sessions():
    cache = cache_of(3, eviction_ms=100)
    id1, id2, id3 = create(cache, 0, 10), create(cache, 10, 20), create(cache, 20, 30)
    # full, nothing idle for more than 100 ms, nothing older than 100 ms: no room
    assert create(cache, 30, 40) == INVALID_SESSION_ID
    assert create(cache, 40, 5) == INVALID_SESSION_ID
    assert_holds(cache, id1, id2, id3)
    # id2 (last used at 10) is idle for more than 100 ms at 210: the least recently used goes
    cache.touch(cache.get(id1), 200)
    id4 = create(cache, 210, 11)
    assert_holds(cache, id1, id3, id4)
    assert cache.evictions == 1 and cache.last_evicted_id == id2
    # nothing idle now; all three are older than 100 ms, so the smallest (id1, 10 partitions)
    # makes room for a larger one ...
    cache.touch(cache.get(id1), 400)
    cache.touch(cache.get(id3), 390)
    cache.touch(cache.get(id4), 400)
    id5 = create(cache, 410, 50)
    assert_holds(cache, id3, id4, id5)
    # ... but not for a smaller one (5 < 11) ...
    assert create(cache, 410, 5) == INVALID_SESSION_ID
    # ... while a follower's (privileged) session may take a consumer's place at any age
    id6 = create(cache, 410, 5, privileged=True)
    assert_holds(cache, id3, id5, id6)
    assert cache.evictions == 3


def test_equal_size_does_not_evict():
    cache = cache_of(1, eviction_ms=100)
    first = create(cache, 0, 10)
    cache.touch(cache.get(first), 150)  # older than 100 ms, used recently
    assert create(cache, 160, 10) == INVALID_SESSION_ID
    assert create(cache, 160, 11) != INVALID_SESSION_ID
    assert first not in cache.sessions


def test_privileged_session_is_safe_from_consumers_until_aged():
    cache = cache_of(1, eviction_ms=100)
    follower = create(cache, 0, 1, privileged=True)
    assert create(cache, 50, 1000) == INVALID_SESSION_ID  # young privileged: not evictable by a consumer
    cache.touch(cache.get(follower), 90)
    assert create(cache, 150, 1000) == INVALID_SESSION_ID  # touched when not yet 100 ms old
    cache.touch(cache.get(follower), 150)
    assert create(cache, 160, 1) == INVALID_SESSION_ID  # aged, but (False, 1) < (True, 1)
    assert create(cache, 300, 1) != INVALID_SESSION_ID  # idle for 150 ms: stale, whoever asks
    assert follower not in cache.sessions


def test_zero_slots_never_creates_a_session():
    cache = cache_of(0)
    assert create(cache, 0, 1) == INVALID_SESSION_ID
    assert create(cache, 10**9, 1, privileged=True) == INVALID_SESSION_ID
    assert len(cache) == 0


def test_total_partitions_follow_touches_and_removal():
    cache = cache_of(2, eviction_ms=100)
    id1 = create(cache, 0, 2)
    id2 = create(cache, 0, 4)
    assert cache.total_partitions == 6
    s1, s2 = cache.get(id1), cache.get(id2)
    cache.touch(s1, 200)
    cache.touch(s2, 200)
    id3 = create(cache, 200, 5)  # both aged; the smaller (id1) goes
    assert_holds(cache, id2, id3)
    assert cache.total_partitions == 9
    assert cache.remove(id3) is not None
    assert cache.remove(id3) is None
    assert cache.total_partitions == 4
    s2.update({}, [("t", 0)])
    assert s2.cached_size == 4  # counted again at the next touch, as Kafka does
    cache.touch(s2, 300)
    assert cache.total_partitions == 3


def test_remove_wants_the_cached_object():
    cache = cache_of(2)
    sid = create(cache, 0, 1)
    impostor = FetchSession(sid, False, {}, True, 0)
    assert cache.remove(impostor) is None
    assert cache.get(sid) is not None


def test_eviction_heaps_stay_bounded_under_many_touches():
    cache = cache_of(4)
    sessions = [cache.get(create(cache, 0, 3)) for _ in range(4)]
    for now in range(1, 20_000):
        cache.touch(sessions[now % 4], now)
    assert len(cache._last_used) <= 2 * len(cache) + 65
    # and eviction still sees the right least recently used one
    lru = min(sessions, key=lambda s: s.last_used_ms)
    assert create(cache, 19_999 + 101 + 3, 1) != INVALID_SESSION_ID
    assert lru.id not in cache.sessions


# -- a session's partitions ---------------------------------------------------------------------


def test_update_adds_at_the_end_updates_in_place_and_forgets_last():
    session = FetchSession(1, False, parts(3), False, 0)
    changed = CachedPartition("t", None, 1, 500, 77, 3, 5, 2)
    added_cp = CachedPartition("u", None, 0, 100, 9)
    session.errored.add(("t", 2))
    session.behind.add(("t", 2))
    added, updated, removed = session.update({("t", 1): changed, ("u", 0): added_cp, ("v", 0): CachedPartition("v", None, 0)},
                                             [("t", 2), ("v", 0), ("x", 9)])
    assert added == [("u", 0), ("v", 0)] and updated == [("t", 1)]
    assert [cp.partition for cp in removed] == [2, 0]  # t-2, and v-0 added then forgotten in one request
    assert list(session.partitions) == [("t", 0), ("t", 1), ("u", 0)]
    kept = session.partitions[("t", 1)]
    assert kept is not changed  # the cached object stays (it holds the last answer)
    assert (kept.max_bytes, kept.fetch_offset, kept.leader_epoch, kept.fetcher_log_start_offset,
            kept.last_fetched_epoch) == (500, 77, 3, 5, 2)
    assert session.partitions[("u", 0)] is added_cp
    assert ("t", 2) not in session.errored and ("t", 2) not in session.behind


@pytest.mark.parametrize("what, args, expected", [
    ("nothing new", dict(records=0, error_code=0, high_watermark=10, last_stable_offset=10, log_start_offset=0), False),
    ("records", dict(records=1, error_code=0, high_watermark=10, last_stable_offset=10, log_start_offset=0), True),
    ("high watermark", dict(records=0, error_code=0, high_watermark=11, last_stable_offset=10, log_start_offset=0), True),
    ("last stable offset", dict(records=0, error_code=0, high_watermark=10, last_stable_offset=8, log_start_offset=0), True),
    ("log start offset", dict(records=0, error_code=0, high_watermark=10, last_stable_offset=10, log_start_offset=4), True),
    ("error", dict(records=0, error_code=1, high_watermark=10, last_stable_offset=10, log_start_offset=0), True),
    ("preferred replica", dict(records=0, error_code=0, high_watermark=10, last_stable_offset=10, log_start_offset=0,
                               preferred_read_replica=2), True),
])
def test_must_respond(what, args, expected):
    cp = CachedPartition("t", None, 0)
    cp.high_watermark, cp.last_stable_offset, cp.log_start_offset = 10, 10, 0
    assert cp.must_respond(**args, update=False) is expected, what
    assert (cp.high_watermark, cp.last_stable_offset, cp.log_start_offset) == (10, 10, 0)  # not updated
    cp.must_respond(**args, update=True)
    # once answered, the same state is not news any more (an error always is)
    assert cp.must_respond(**args, update=False) is (args["error_code"] != 0 or args.get("preferred_read_replica", -1) >= 0
                                                     or args["records"] > 0)


def test_error_is_answered_until_it_clears_and_once_more_after():
    session = FetchSession(1, False, parts(1), False, 0)
    key, cp = next(iter(session.partitions.items()))
    assert session.record(key, cp, 0, 0, 10, 10, 0)  # the first answer of a partition is news
    assert not session.record(key, cp, 0, 0, 10, 10, 0)
    assert session.record(key, cp, 0, 1, 10, 10, 0)  # OFFSET_OUT_OF_RANGE
    assert key in session.errored and cp.high_watermark == -1
    assert session.record(key, cp, 0, 1, 10, 10, 0)
    assert session.record(key, cp, 0, 0, 10, 10, 0)  # cleared: listed once more (the -1 differs)
    assert key not in session.errored
    assert not session.record(key, cp, 0, 0, 10, 10, 0)


def test_behind_is_judged_by_the_isolation_level():
    session = FetchSession(1, False, parts(1), False, 0)
    key, cp = next(iter(session.partitions.items()))
    cp.fetch_offset = 5
    session.record(key, cp, 0, 0, 10, 5, 0)  # read_uncommitted: records up to the high watermark
    assert key in session.behind
    session.read_committed = True
    session.record(key, cp, 0, 0, 10, 5, 0)  # read_committed: nothing below the stable offset
    assert key not in session.behind
    session.record(key, cp, 0, 0, 10, 7, 0)
    assert key in session.behind


def test_partitions_that_returned_records_rotate_to_the_end():
    session = FetchSession(1, False, parts(4), False, 0)
    order = lambda: [k[1] for k in session.partitions]  # noqa: E731
    for key, cp in list(session.partitions.items()):
        session.record(key, cp, 0, 0, 10, 10, 0)
    session.record(("t", 0), session.partitions[("t", 0)], 100, 0, 20, 20, 0)
    assert order() == [1, 2, 3, 0]
    session.record(("t", 2), session.partitions[("t", 2)], 0, 0, 30, 30, 0)  # news, but no records: stays
    assert order() == [1, 2, 3, 0]
    session.record(("t", 1), session.partitions[("t", 1)], 100, 0, 30, 30, 0)
    assert order() == [2, 3, 0, 1]
    assert [cp.order for cp in session.partitions.values()] == sorted(cp.order for cp in session.partitions.values())
    fresh = FetchSession(2, False, parts(2), False, 0)
    fresh.record(("t", 0), fresh.partitions[("t", 0)], 100, 0, 20, 20, 0, rotate=False)
    assert list(fresh.partitions) == [("t", 0), ("t", 1)]  # the answer that creates a session keeps the order


def caught_up(n: int) -> FetchSession:
    session = FetchSession(1, False, parts(n), False, 0)
    for key, cp in session.partitions.items():
        cp.fetch_offset = 10
        session.record(key, cp, 0, 0, 10, 10, 0)
    return session


def test_candidates_are_what_could_answer_in_session_order():
    session = caught_up(1000)
    assert session.candidates([], full=False) == []
    session.changed.update({("t", 900), ("t", 3)})
    session.errored.add(("t", 500))
    session.behind.add(("t", 7))
    got = [k for k, _ in session.candidates([("t", 42), ("gone", 1)], full=False)]
    assert got == [("t", 3), ("t", 7), ("t", 42), ("t", 500), ("t", 900)]
    session.record(("t", 3), session.partitions[("t", 3)], 10, 0, 20, 20, 0)  # records: rotates to the end
    got = [k for k, _ in session.candidates([], full=False)]
    assert got == [("t", 7), ("t", 500), ("t", 900), ("t", 3)]
    assert len(session.candidates([], full=True)) == 1000
    many = [("t", i) for i in range(0, 1000, 3)]  # the one-pass path gives the same order
    assert [k for k, _ in session.candidates(many, full=False)] == sorted(
        set(many) | {("t", 7), ("t", 500), ("t", 900), ("t", 3)}, key=lambda k: session.partitions[k].order)


def test_a_read_partition_leaves_changed():
    session = caught_up(2)
    session.changed.add(("t", 1))
    cp = session.partitions[("t", 1)]
    assert not session.record(("t", 1), cp, 0, 0, 10, 10, 0)
    assert not session.changed


# -- the append watch ---------------------------------------------------------------------------


class FakePartition:
    def __init__(self) -> None:
        self.waiters: set[asyncio.Future[None]] = set()

    def wait_for_append(self) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.add(fut)
        fut.add_done_callback(self.waiters.discard)
        return fut

    def notify_append(self) -> None:
        for fut in list(self.waiters):
            if not fut.done():
                fut.set_result(None)


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_append_marks_the_partition_changed_and_wakes_the_waiting_fetch():
    cache = cache_of(10)
    p0, p1 = FakePartition(), FakePartition()
    a = cache.maybe_create_session(0, False, 2, True, lambda: parts(2))
    b = cache.maybe_create_session(0, False, 2, True, lambda: parts(2))
    for session in (a, b):
        cache.watch.bind(session, ("t", 0), session.partitions[("t", 0)], p0)
        cache.watch.bind(session, ("t", 1), session.partitions[("t", 1)], p1)
    assert len(p0.waiters) == 1 and len(p1.waiters) == 1  # one watch per partition, not per session
    woken = cache.watch.wait(a)
    p1.notify_append()
    await settle()
    assert woken.done()
    assert a.changed == {("t", 1)} and b.changed == {("t", 1)}
    assert not p1.waiters  # fired; armed again only when a session reads the partition
    p1.notify_append()
    await settle()
    cache.watch.bind(a, ("t", 1), a.partitions[("t", 1)], p1)
    assert len(p1.waiters) == 1


async def test_forgotten_and_removed_sessions_stop_watching():
    cache = cache_of(10)
    p0, p1 = FakePartition(), FakePartition()
    a = cache.maybe_create_session(0, False, 2, True, lambda: parts(2))
    cache.watch.bind(a, ("t", 0), a.partitions[("t", 0)], p0)
    cache.watch.bind(a, ("t", 1), a.partitions[("t", 1)], p1)
    _, _, removed = a.update({}, [("t", 0)])
    for cp in removed:
        cache.watch.unbind(a.id, cp)
    await settle()
    assert not p0.waiters  # its watch was cancelled: no subscriber left
    cache.remove(a)
    await settle()
    assert not p1.waiters and cache.watch.watched_partitions == 0
    p1.notify_append()
    await settle()
    assert not a.changed


async def test_rebinding_to_a_recreated_partition_moves_the_watch():
    cache = cache_of(10)
    old, new = FakePartition(), FakePartition()
    a = cache.maybe_create_session(0, False, 1, True, lambda: parts(1))
    cp = a.partitions[("t", 0)]
    cache.watch.bind(a, ("t", 0), cp, old)
    cache.watch.bind(a, ("t", 0), cp, new)
    await settle()
    assert cp.bound is new and not old.waiters and len(new.waiters) == 1
    old.notify_append()
    await settle()
    assert not a.changed
    new.notify_append()
    await settle()
    assert a.changed == {("t", 0)}
