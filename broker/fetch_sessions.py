"""Incremental fetch sessions (KIP-227) for Fetch v7+, as Kafka's FetchSession.scala keeps them.

A consumer's full fetch (epoch 0) creates a session holding every partition it asked for with
what the broker last answered for each (high watermark, last stable offset, log start offset).
Its incremental fetches (epoch N > 0) name only the partitions that were added or changed and the
ones to forget; the answer lists only the partitions with something new since the last answer
(`CachedPartition.must_respond`, Kafka's `maybeUpdateResponseData` plus the last stable offset).

The cache (`FetchSessionCache`, Kafka's `FetchSessionCacheShard`) holds at most
`max.incremental.fetch.session.cache.slots` sessions; a full cache makes room only by evicting a
session idle for longer than `MIN_EVICTION_MS`, or a smaller one (fewer partitions, not
privileged) that is older than that. Sessions belong to the cache, not to a connection: a client
may reconnect and continue.

Kafka reads every partition of a session on every fetch. Here a session also remembers which of
its partitions could answer at all (`candidates`): the ones the request named, the ones that
changed since (`changed`, fed by `AppendWatch` from appends), the ones that errored or still had
records to give last time; every `SWEEP_MS` (and whenever the isolation level changes) all of
them, which catches what no append announces (retention moving the log start offset). A fetch of
a 1,000-partition session with five busy partitions reads those five.

The cache and the sessions are plain objects that take `now`; `AppendWatch` is the one piece that
touches the event loop (the futures `Partition.wait_for_append()` hands out)."""

from __future__ import annotations

import asyncio
import functools
import heapq
import random
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sharebroker.broker.topics import Partition

__all__ = [
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "MIN_EVICTION_MS",
    "SWEEP_MS",
    "AppendWatch",
    "CachedPartition",
    "FetchSession",
    "FetchSessionCache",
    "PartitionKey",
    "next_epoch",
]

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0  # a full fetch that asks for a new session
FINAL_EPOCH = -1  # a full fetch without a session (closing the one named, if any)
# Kafka's KafkaServer.MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS (not a setting there either).
MIN_EVICTION_MS = 120_000
SWEEP_MS = 1_000  # every partition of a session is looked at least this often
_INT32_MAX = 2**31 - 1

# (topic id, partition) in sessions of Fetch v13+, (topic name, partition) before.
PartitionKey = tuple[uuid.UUID | str | None, int]


def next_epoch(epoch: int) -> int:
    """The session epoch after `epoch`: FINAL stays FINAL, INT32_MAX wraps to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _INT32_MAX else epoch + 1


class CachedPartition:
    """One partition of a session (or of one full fetch): the request's fetch parameters, and what
    the last answer in the session said about it."""

    __slots__ = ("topic", "topic_id", "partition", "max_bytes", "fetch_offset", "leader_epoch",
                 "fetcher_log_start_offset", "last_fetched_epoch", "high_watermark", "last_stable_offset",
                 "log_start_offset", "order", "bound")

    def __init__(self, topic: str | None, topic_id: uuid.UUID | None, partition: int, max_bytes: int = -1,
                 fetch_offset: int = -1, leader_epoch: int = -1, fetcher_log_start_offset: int = -1,
                 last_fetched_epoch: int = -1) -> None:
        self.topic = topic  # None until a topic id resolves (v13+)
        self.topic_id = topic_id  # None (the zero id) before v13
        self.partition = partition
        self.max_bytes = max_bytes
        self.fetch_offset = fetch_offset
        self.leader_epoch = leader_epoch
        self.fetcher_log_start_offset = fetcher_log_start_offset
        self.last_fetched_epoch = last_fetched_epoch
        # As last answered in the session; -1 (never answered) makes the next answer include it.
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1
        self.order = 0  # position in the session's iteration order (ascending)
        self.bound: Partition | None = None  # the partition AppendWatch watches for this session

    def update_request(self, req: CachedPartition) -> None:
        """An incremental request named this partition again: take its fetch parameters."""
        self.max_bytes = req.max_bytes
        self.fetch_offset = req.fetch_offset
        self.fetcher_log_start_offset = req.fetcher_log_start_offset
        self.leader_epoch = req.leader_epoch
        self.last_fetched_epoch = req.last_fetched_epoch

    def must_respond(self, records: int, error_code: int, high_watermark: int, last_stable_offset: int,
                     log_start_offset: int, preferred_read_replica: int = -1, *, update: bool) -> bool:
        """Whether an incremental answer must list this partition, given what was read for it now
        (`records` bytes of them); with `update`, remember what the answer says. Kafka's rule
        (records, high watermark, log start offset, preferred replica, error) plus the last stable
        offset, so a read_committed consumer hears when a transaction ends."""
        respond = records > 0
        if self.high_watermark != high_watermark:
            respond = True
            if update:
                self.high_watermark = high_watermark
        if self.last_stable_offset != last_stable_offset:
            respond = True
            if update:
                self.last_stable_offset = last_stable_offset
        if self.log_start_offset != log_start_offset:
            respond = True
            if update:
                self.log_start_offset = log_start_offset
        if preferred_read_replica >= 0:
            respond = True
        if error_code:
            # -1 again, so the partition is answered once more when the error goes away
            if update:
                self.high_watermark = -1
            respond = True
        return respond

    def __repr__(self) -> str:
        return (f"CachedPartition({self.topic!r}, {self.topic_id}, {self.partition}, fetch_offset={self.fetch_offset}, "
                f"high_watermark={self.high_watermark}, last_stable_offset={self.last_stable_offset}, "
                f"log_start_offset={self.log_start_offset})")


class FetchSession:
    """One incremental fetch session: its partitions in iteration order, its epoch (the one the
    next request must carry), and which partitions could have something to answer."""

    __slots__ = ("id", "privileged", "uses_topic_ids", "creation_ms", "last_used_ms", "epoch", "partitions",
                 "cached_size", "stamp", "changed", "errored", "behind", "unresolved", "read_committed",
                 "sweep_due_ms", "_next_order")

    def __init__(self, session_id: int, privileged: bool, partitions: dict[PartitionKey, CachedPartition],
                 uses_topic_ids: bool, now_ms: int, *, read_committed: bool = False) -> None:
        self.id = session_id
        self.privileged = privileged  # a follower's; consumers' are not
        self.uses_topic_ids = uses_topic_ids
        self.creation_ms = now_ms
        self.last_used_ms = now_ms
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.partitions = partitions
        self.cached_size = -1  # the size the cache last counted (-1: not in a cache)
        self.stamp = 0  # the cache's version of this session's entries in its eviction heaps
        self.changed: set[PartitionKey] = set()  # appended to (or otherwise touched) since last answered
        self.errored: set[PartitionKey] = set()  # answered with an error last time
        self.behind: set[PartitionKey] = set()  # had records past the fetch offset last time
        self.unresolved: set[PartitionKey] = set()  # no such topic or partition at the last look
        self.read_committed = read_committed  # the isolation level `behind` was judged by
        self.sweep_due_ms = now_ms + SWEEP_MS
        self._next_order = 0
        for cp in partitions.values():
            cp.order = self._next_order
            self._next_order += 1

    def __len__(self) -> int:
        return len(self.partitions)

    def update(self, fetch_data: Mapping[PartitionKey, CachedPartition],
               to_forget: Iterable[PartitionKey]) -> tuple[list[PartitionKey], list[PartitionKey], list[CachedPartition]]:
        """Apply an incremental request: new partitions join at the end of the iteration order,
        named ones take the request's fetch parameters, forgotten ones leave (after the others,
        as Kafka does). Returns (added, updated, removed)."""
        partitions = self.partitions
        added: list[PartitionKey] = []
        updated: list[PartitionKey] = []
        removed: list[CachedPartition] = []
        for key, req in fetch_data.items():
            cp = partitions.get(key)
            if cp is None:
                req.order = self._next_order
                self._next_order += 1
                partitions[key] = req
                added.append(key)
            else:
                cp.update_request(req)
                updated.append(key)
        for key in to_forget:
            cp = partitions.pop(key, None)
            if cp is not None:
                removed.append(cp)
                self.changed.discard(key)
                self.errored.discard(key)
                self.behind.discard(key)
                self.unresolved.discard(key)
        return added, updated, removed

    def candidates(self, requested: Iterable[PartitionKey], *, full: bool) -> list[tuple[PartitionKey, CachedPartition]]:
        """The partitions an incremental fetch must read, in the session's iteration order: all of
        them with `full`, else those named in the request, changed since the last answer, answered
        with an error, or left with records to give. No other partition can be in the answer: its
        high watermark, stable offset and log start offset are what was last answered and its
        fetch offset is at the end of what it can read."""
        partitions = self.partitions
        if full:
            return list(partitions.items())
        keys = set(requested)
        keys |= self.changed
        keys |= self.errored
        keys |= self.behind
        if len(keys) * 4 >= len(partitions):  # most of them: one pass in order beats a sort
            return [(k, cp) for k, cp in partitions.items() if k in keys]
        found = [(k, cp) for k in keys if (cp := partitions.get(k)) is not None]
        found.sort(key=lambda kc: kc[1].order)
        return found

    def record(self, key: PartitionKey, cp: CachedPartition, records: int, error_code: int, high_watermark: int,
               last_stable_offset: int, log_start_offset: int, preferred_read_replica: int = -1, *,
               rotate: bool = True) -> bool:
        """What was read for a partition goes into the answer: whether to list it (the rule of
        `must_respond`), remembering what is answered. With `rotate`, a partition that returned
        records moves to the end of the iteration order (Kafka does the same), so one with a
        large backlog does not take every response's byte budget from the others."""
        respond = cp.must_respond(records, error_code, high_watermark, last_stable_offset, log_start_offset,
                                  preferred_read_replica, update=True)
        self.changed.discard(key)
        if error_code:
            self.errored.add(key)
            self.behind.discard(key)
        else:
            self.errored.discard(key)
            readable_to = last_stable_offset if self.read_committed else high_watermark
            if cp.fetch_offset < readable_to:
                self.behind.add(key)
            else:
                self.behind.discard(key)
        if rotate and records > 0:
            partitions = self.partitions
            if partitions.get(key) is cp:
                del partitions[key]
                partitions[key] = cp
                cp.order = self._next_order
                self._next_order += 1
        return respond

    def __repr__(self) -> str:
        return (f"FetchSession(id={self.id}, privileged={self.privileged}, partitions={len(self.partitions)}, "
                f"uses_topic_ids={self.uses_topic_ids}, creation_ms={self.creation_ms}, "
                f"last_used_ms={self.last_used_ms}, epoch={self.epoch})")


class FetchSessionCache:
    """The broker's fetch sessions (Kafka's FetchSessionCacheShard; one shard here, as one event
    loop serves every request). Eviction as Kafka's `tryEvict`: a new session may replace the
    least recently used one if that has been idle for more than `eviction_ms`; otherwise the
    least valuable evictable one, ordered by (privileged, size, id), if the new one is worth
    more. Sessions become evictable by a consumer's session only once older than `eviction_ms`;
    a consumer's session is always evictable by a follower's."""

    def __init__(self, max_entries: int, eviction_ms: int = MIN_EVICTION_MS, *,
                 rng: random.Random | None = None) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.sessions: dict[int, FetchSession] = {}
        self.total_partitions = 0  # Kafka's NumIncrementalFetchPartitionsCached
        self.created = 0
        self.evictions = 0
        self.last_evicted_id = INVALID_SESSION_ID
        self.watch = AppendWatch(self)
        self._rng = rng or random.Random()
        self._stamp = 0
        # Heaps with stale entries skipped on the way out: (last used ms, id, stamp) and
        # (privileged, size, id, stamp). An entry counts while its stamp is the session's.
        self._last_used: list[tuple[int, ...]] = []
        self._evictable_by_all: list[tuple[int, ...]] = []
        self._evictable_by_privileged: list[tuple[int, ...]] = []

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def new_session_id(self) -> int:
        """A positive id no cached session has."""
        while True:
            session_id = self._rng.randrange(1, _INT32_MAX)
            if session_id not in self.sessions:
                return session_id

    def maybe_create_session(self, now_ms: int, privileged: bool, size: int, uses_topic_ids: bool,
                             create_partitions: Callable[[], dict[PartitionKey, CachedPartition]], *,
                             read_committed: bool = False) -> FetchSession | None:
        """A new session if there is room or room can be made by evicting one; None otherwise
        (the answer then carries session id 0 and the client keeps doing full fetches)."""
        if len(self.sessions) >= self.max_entries and not self._try_evict(privileged, size, now_ms):
            return None
        session = FetchSession(self.new_session_id(), privileged, create_partitions(), uses_topic_ids, now_ms,
                               read_committed=read_committed)
        self.sessions[session.id] = session
        self.created += 1
        self.touch(session, now_ms)
        return session

    def touch(self, session: FetchSession, now_ms: int) -> None:
        """The session was used: update its place in the last-used and evictable orders and its
        counted size."""
        self._stamp += 1
        stamp = session.stamp = self._stamp
        session.last_used_ms = now_ms
        if session.cached_size != -1:
            self.total_partitions -= session.cached_size
        size = session.cached_size = len(session.partitions)
        self.total_partitions += size
        sid = session.id
        heapq.heappush(self._last_used, (now_ms, sid, stamp))
        aged = now_ms - session.creation_ms > self.eviction_ms
        if not session.privileged or aged:
            heapq.heappush(self._evictable_by_privileged, (int(session.privileged), size, sid, stamp))
        if aged:
            heapq.heappush(self._evictable_by_all, (int(session.privileged), size, sid, stamp))
        if len(self._last_used) > 2 * len(self.sessions) + 64:
            self._compact()

    def remove(self, session: FetchSession | int) -> FetchSession | None:
        """Take a session out of the cache (closed, emptied or evicted); None if it was not in it."""
        found = self.sessions.get(session if isinstance(session, int) else session.id)
        if found is None or (not isinstance(session, int) and found is not session):
            return None
        del self.sessions[found.id]
        if found.cached_size != -1:
            self.total_partitions -= found.cached_size
            found.cached_size = -1
        self.watch.drop(found)
        return found

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        lru = self._first_valid(self._last_used)
        if lru is None:
            return False
        if now_ms - lru[0] > self.eviction_ms:
            return self._evict(lru[1])
        candidate = self._first_valid(self._evictable_by_privileged if privileged else self._evictable_by_all)
        if candidate is None:
            return False
        if (int(privileged), size, 0) < candidate[:3]:  # the new session is worth less than the cheapest one
            return False
        return self._evict(candidate[2])

    def _evict(self, session_id: int) -> bool:
        session = self.remove(session_id)
        if session is None:
            return False
        self.evictions += 1
        self.last_evicted_id = session.id
        return True

    def _valid(self, session_id: int, stamp: int) -> bool:
        session = self.sessions.get(session_id)
        return session is not None and session.stamp == stamp

    def _first_valid(self, heap: list[tuple[int, ...]]) -> tuple[int, ...] | None:
        while heap:
            top = heap[0]
            if self._valid(top[-2], top[-1]):
                return top
            heapq.heappop(heap)
        return None

    def _compact(self) -> None:
        for heap in (self._last_used, self._evictable_by_all, self._evictable_by_privileged):
            heap[:] = [e for e in heap if self._valid(e[-2], e[-1])]
            heapq.heapify(heap)


class _Watch:
    __slots__ = ("future", "subscribers")

    def __init__(self) -> None:
        self.future: asyncio.Future[None] | None = None
        self.subscribers: dict[int, PartitionKey] = {}  # session id -> its key for this partition


class AppendWatch:
    """Which sessions hear of appends to which partitions: one `Partition.wait_for_append()`
    future per watched partition (not one per partition per waiting fetch); when it fires, every
    session holding the partition marks it changed and its waiting fetch, if any, wakes. A
    session re-arms the watch whenever it reads the partition, so every change after a session's
    last read of a partition reaches that session."""

    def __init__(self, cache: FetchSessionCache) -> None:
        self._cache = cache
        self._watches: dict[Partition, _Watch] = {}
        self._waiters: dict[int, set[asyncio.Future[None]]] = {}

    def bind(self, session: FetchSession, key: PartitionKey, cp: CachedPartition, partition: Partition) -> None:
        """`session` has just read `partition` for `key`: tell it of the next append."""
        if cp.bound is not partition:
            if cp.bound is not None:
                self.unbind(session.id, cp)
            cp.bound = partition
        watch = self._watches.get(partition)
        if watch is None:
            watch = self._watches[partition] = _Watch()
        watch.subscribers[session.id] = key
        if watch.future is None:
            fut = watch.future = partition.wait_for_append()
            fut.add_done_callback(functools.partial(self._fired, partition))

    def unbind(self, session_id: int, cp: CachedPartition) -> None:
        partition = cp.bound
        cp.bound = None
        if partition is None:
            return
        watch = self._watches.get(partition)
        if watch is None:
            return
        watch.subscribers.pop(session_id, None)
        if not watch.subscribers:
            del self._watches[partition]
            if watch.future is not None:
                watch.future.cancel()  # the partition drops it from its waiters

    def drop(self, session: FetchSession) -> None:
        """The session left the cache: stop watching for it."""
        for cp in session.partitions.values():
            if cp.bound is not None:
                self.unbind(session.id, cp)

    def wait(self, session: FetchSession) -> asyncio.Future[None]:
        """A future resolved at the next change to any partition the session watches."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        sid = session.id
        self._waiters.setdefault(sid, set()).add(fut)
        fut.add_done_callback(lambda f: self._discard_waiter(sid, f))
        return fut

    @property
    def watched_partitions(self) -> int:
        return len(self._watches)

    def _discard_waiter(self, session_id: int, fut: asyncio.Future[None]) -> None:
        waiters = self._waiters.get(session_id)
        if waiters is not None:
            waiters.discard(fut)
            if not waiters:
                del self._waiters[session_id]

    def _fired(self, partition: Partition, fut: asyncio.Future[None]) -> None:
        watch = self._watches.get(partition)
        if watch is None or watch.future is not fut:
            return
        watch.future = None
        sessions = self._cache.sessions
        for sid, key in list(watch.subscribers.items()):
            session = sessions.get(sid)
            cp = session.partitions.get(key) if session is not None else None
            if session is None or cp is None or cp.bound is not partition:
                del watch.subscribers[sid]
                continue
            session.changed.add(key)
            waiters = self._waiters.pop(sid, None)
            if waiters:
                for w in waiters:
                    if not w.done():
                        w.set_result(None)
        if not watch.subscribers:
            del self._watches[partition]
