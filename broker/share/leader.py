"""The share-partition leader: the one owner of a (group, topic, partition)'s in-flight state.
It loads the state from the persister on first use, reads the log for acquisitions, applies
acknowledgements with Kafka's two-phase write (mark, persist, commit or roll back), runs the
acquisition-lock timer, and wakes waiting ShareFetch requests when records become available."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass
from itertools import groupby
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from kio.schema.errors import ErrorCode

from sharebroker.broker.clock import Clock, TimerHandle
from sharebroker.broker.metrics import NULL_RECORDER, Recorder
from sharebroker.broker.share.dead_letters import Archiving, DeadLetters, dlq_producer_id
from sharebroker.broker.share.partition import (
    AcquiredRange,
    AcquireMode,
    LogBatch,
    PersistedBatch,
    RecordState,
    ShareLimits,
    SharePartition,
    StateWrite,
)
from sharebroker.broker.share_state.persister import Persister
from sharebroker.broker.share_state.store import StateBatch
from sharebroker.broker.structured_log import get_logger
from sharebroker.protocol.record_batch import BatchHeader, iter_batch_headers
from sharebroker.storage import OffsetOutOfRange
from sharebroker.protocol.errors import KafkaError

if TYPE_CHECKING:
    from sharebroker.broker.topics import Partition

log = get_logger("sharebroker.share")
trace_log = get_logger("sharebroker.share.trace")

LATEST, EARLIEST = -1, -2
HISTORY_EVENTS = 256  # record events a leader remembers for the admin view's delivery history
_STATE_NAMES = {0: "available", 1: "acquired", 2: "acknowledged", 3: "archiving", 4: "archived"}
_ACK_NAMES = {0: "gap", 1: "accept", 2: "release", 3: "reject", 4: "renew"}
_ACCEPT = 1


class RecordEvent(NamedTuple):
    """One change of a range of records (the admin view's delivery history, the trace log line).
    A named tuple: made on the hot paths while the view is on, at a fraction of a frozen
    dataclass's cost."""
    wall_ms: int
    kind: str  # acquire, accept, release, reject, renew, gap, expire, archive
    first: int
    last: int
    member: str
    delivery_count: int


def ack_runs(first: int, last: int, types: list[int]) -> list[tuple[int, int, int]]:
    """An acknowledgement batch as (first, last, type) runs: one run when it carries one type
    (or a per-offset list of one type, checked at C speed), else one per change of type."""
    if len(types) == 1 or types.count(types[0]) == len(types):
        return [(first, last, types[0])]
    runs = []
    lo = first
    for t, same in groupby(types):
        hi = lo + sum(1 for _ in same) - 1
        runs.append((lo, hi, t))
        lo = hi + 1
    return runs


def _accepts_only(batches: list[tuple[int, int, list[int]]]) -> bool:
    """Whether an acknowledgement only accepts. The view's history leaves those out: it explains
    poison records (archived, or at the delivery limit and not acknowledged), which an accepted
    record never is, and the common case then costs the hot path this check alone."""
    for _, _, types in batches:
        if types[0] != _ACCEPT or (len(types) > 1 and types.count(_ACCEPT) != len(types)):
            return False
    return True


def _map_persister_error(exc: KafkaError) -> KafkaError:
    """The code a share-partition leader answers for a persister failure, as Kafka's SharePartition
    maps them: coordinator trouble is retriable, a fenced epoch means this leader is stale."""
    code = exc.code
    if code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress):
        return KafkaError(ErrorCode.coordinator_not_available, exc.message)
    if code in (ErrorCode.fenced_leader_epoch, ErrorCode.fenced_state_epoch):
        return KafkaError(ErrorCode.not_leader_or_follower, exc.message)
    if code in (ErrorCode.group_id_not_found, ErrorCode.unknown_topic_or_partition):
        return exc
    return KafkaError(ErrorCode.unknown_server_error, exc.message)


@dataclass(slots=True)
class Acquisition:
    records: bytes
    acquired: list[AcquiredRange]


class OffsetReset(Protocol):
    def timestamp(self, now_ms: int) -> int: ...


class LeaderHost(Protocol):
    """What a leader needs from the registry that owns it (SharePartitions)."""

    def limits(self, group_id: str) -> ShareLimits: ...

    def auto_offset_reset(self, group_id: str) -> OffsetReset: ...

    def wake(self, leader: SharePartitionLeader) -> None: ...

    def drop(self, leader: SharePartitionLeader) -> None: ...

    @property
    def dead_letters(self) -> DeadLetters: ...


class SharePartitionLeader:
    def __init__(self, host: LeaderHost, persister: Persister, clock: Clock, group_id: str,
                 partition: Partition, *, metrics: Recorder = NULL_RECORDER) -> None:
        self.metrics = metrics
        self.owner = host
        self.persister = persister
        self.clock = clock
        self.group_id = group_id
        self.partition = partition
        self.topic_id = partition.topic.topic_id
        self.sp: SharePartition | None = None
        self.state_epoch = 0
        self._loading: asyncio.Future[None] | None = None
        self._fetch_lock = False
        self._timer: TimerHandle | None = None
        self._timer_at: int | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writes_in_flight = 0
        self._persisted_start = -1
        self.fenced = False
        self._dlq_task: asyncio.Task[None] | None = None
        self._dlq_resume = False
        self._archiving_writes = 0  # lock-expiry writes with ARCHIVING records not yet settled
        # Record events: kept (history, bounded) while the admin view is on, logged while the
        # group's share.record.trace.enable is; `observed` is the one check the hot paths make.
        # The history's times are the monotonic clock's, which an acquisition has at hand;
        # events() turns them into wall-clock times. Plain tuples of ints and strings, which the
        # garbage collector stops tracking: RecordEvent's fields, named only when someone looks.
        self.history: deque[tuple[int, str, int, int, str, int]] | None = None
        self.trace = False
        self.observed = False

    def observe(self, *, history: bool, trace: bool) -> None:
        if history and self.history is None:
            self.history = deque(maxlen=HISTORY_EVENTS)
        elif not history:
            self.history = None
        self.trace = trace
        self.observed = history or trace

    def _event(self, kind: str, member: str, first: int, last: int, delivery_count: int) -> None:
        """Remember and/or log one range that changed by `kind`. The history keeps plain tuples
        (RecordEvent's fields, in order): this runs on every acquisition and acknowledgement while
        the view is on, and `events()` names them only when someone looks."""
        if self.history is not None:
            self.history.append((self.clock.monotonic_ms(), kind, first, last, member, delivery_count))
        if self.trace:
            trace_log.info("share record " + kind, group=self.group_id, topic=self.partition.topic.name,
                           partition=self.partition.index, first_offset=first, last_offset=last,
                           member=member or None, delivery_count=delivery_count)

    def events(self) -> list[RecordEvent]:
        """The remembered record events, oldest first (empty while the view is off)."""
        if not self.history:
            return []
        to_wall = self.clock.wall_ms() - self.clock.monotonic_ms()
        return [RecordEvent(e[0] + to_wall, *e[1:]) for e in self.history]

    def _write_events(self, write: StateWrite, kind: str, member: str) -> None:
        """A release or expiry write's ranges: back to AVAILABLE (`kind`) or archived."""
        for b in write.batches:
            self._event(kind if b.state < RecordState.ARCHIVING else "archive", member, b.first_offset,
                        b.last_offset, b.delivery_count)

    @property
    def key(self) -> tuple[str, Any, int]:
        return (self.group_id, self.topic_id, self.partition.index)

    @property
    def metrics_key(self) -> tuple[str, str, int]:
        """(group, topic name, partition): the labels of its share-partition metrics."""
        return (self.group_id, self.partition.topic.name, self.partition.index)

    # -- loading ---------------------------------------------------------------------------------

    async def ensure_loaded(self) -> SharePartition:
        if self.sp is not None:
            return self.sp
        if self._loading is None:
            self._loading = asyncio.get_running_loop().create_future()
            try:
                await self._load()
                self._loading.set_result(None)
            except BaseException as exc:
                self._loading.set_exception(exc)
                self._loading.exception()  # retrieved: waiters re-raise it themselves
                self._loading = None
                raise
        else:
            await asyncio.shield(self._loading)
        assert self.sp is not None
        return self.sp

    async def _load(self) -> None:
        started = time.perf_counter() if self.metrics.enabled else 0.0
        try:
            state = await self.persister.read(self.group_id, self.topic_id, self.partition.index, self.partition.leader_epoch)
        except KafkaError as exc:
            raise _map_persister_error(exc) from None
        start = state.start_offset
        if start < 0:
            start = self._reset_offset()
        persisted = [PersistedBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                     for b in state.batches]
        try:
            sp = SharePartition(start_offset=start, persisted=persisted)
        except ValueError as exc:
            raise KafkaError(ErrorCode.unknown_server_error, f"Invalid persisted share state: {exc}") from None
        self.state_epoch = state.state_epoch
        self._persisted_start = state.start_offset
        plog = self.partition.log
        if sp.start_offset < plog.log_start_offset:
            sp.move_log_start(plog.log_start_offset)
        self.sp = sp
        if self.metrics.enabled:
            self.metrics.share_partition_loaded((time.perf_counter() - started) * 1000)
        if sp.archiving:
            # A DLQ flow that a restart (or a new leader) interrupted: finish it, exactly once.
            self._dlq_resume = True
            self._kick_dlq()
        log.info("share partition loaded", group=self.group_id, topic=self.partition.topic.name,
                 partition=self.partition.index, start_offset=sp.start_offset, state_epoch=self.state_epoch,
                 in_flight_batches=len(state.batches))

    def _reset_offset(self) -> int:
        """share.auto.offset.reset for a partition whose start offset was never persisted."""
        plog = self.partition.log
        reset = self.owner.auto_offset_reset(self.group_id)
        ts = reset.timestamp(self.clock.wall_ms())
        if ts == LATEST:
            return plog.high_watermark
        if ts == EARLIEST:
            return plog.log_start_offset
        found = plog.offset_for_timestamp(ts)
        return found[0] if found is not None else plog.high_watermark

    # -- persistence -----------------------------------------------------------------------------

    async def _persist(self, write: StateWrite, *, ignore_failure: bool = False) -> None:
        """Write, then commit; roll back on failure (lock expiry keeps its transitions)."""
        sp = self.sp
        assert sp is not None
        batches = [StateBatch(b.first_offset, b.last_offset, int(b.state), b.delivery_count) for b in write.batches]
        # An expiry's ARCHIVING is applied before its write: the DLQ waits until it is durable.
        expiry_archiving = write.kind == "expiry" and any(b.state == RecordState.ARCHIVING for b in write.batches)
        self._archiving_writes += expiry_archiving
        self._writes_in_flight += 1
        try:
            await self.persister.write(
                self.group_id, self.topic_id, self.partition.index, state_epoch=self.state_epoch,
                leader_epoch=self.partition.leader_epoch, start_offset=write.start_offset,
                delivery_complete_count=write.delivery_complete_count, batches=batches)
        except KafkaError as exc:
            self._writes_in_flight -= 1
            self._archiving_writes -= expiry_archiving
            if write.kind == "expiry" or ignore_failure:
                sp.commit(write, now_ms=self.clock.monotonic_ms())
            else:
                sp.rollback(write, limits=self.owner.limits(self.group_id), now_ms=self.clock.monotonic_ms())
            self._after_change()
            mapped = _map_persister_error(exc)
            if mapped.code == ErrorCode.not_leader_or_follower:
                self.fenced = True
                self.owner.drop(self)
            log.warning("share state write failed", group=self.group_id, topic=self.partition.topic.name,
                        partition=self.partition.index, error=exc.code.name, message=exc.message, kind=write.kind)
            if write.kind != "expiry" and not ignore_failure:
                raise mapped from None
            return
        except BaseException:
            self._writes_in_flight -= 1
            self._archiving_writes -= expiry_archiving
            raise
        self._writes_in_flight -= 1
        self._archiving_writes -= expiry_archiving
        self._persisted_start = max(self._persisted_start, write.start_offset)
        sp.commit(write, now_ms=self.clock.monotonic_ms())
        if self.metrics.enabled and write.kind != "expiry" and (at_limit := write.archived_at_limit):
            self.metrics.archived_at_limit(self.metrics_key, at_limit)  # expiry's are counted when they apply
        self._after_change()
        if self._writes_in_flight == 0 and sp.start_offset > self._persisted_start and not self.fenced:
            # Writes that overlapped each other each computed the start offset without the
            # others' acknowledgements; once the last settles, the one SPSO they reached together
            # is persisted, so START-OFFSET never stays behind completed records.
            self._spawn(self._persist(StateWrite(sp.start_offset, sp.delivery_complete_count, [], "start"),
                                      ignore_failure=True))

    def _after_change(self) -> None:
        self._arm_timer()
        self.owner.wake(self)
        if self.sp is not None and self.sp.archiving:
            self._kick_dlq()

    # -- dead-letter queue (KIP-1191) ------------------------------------------------------------

    def _kick_dlq(self) -> None:
        """Start the DLQ drain unless it runs: it writes ARCHIVING records off the fetch path."""
        if self._dlq_task is None and not self.fenced:
            self._dlq_task = asyncio.get_running_loop().create_task(self._drain_dlq())
            self._tasks.add(self._dlq_task)
            self._dlq_task.add_done_callback(self._settled)

    async def _drain_dlq(self) -> None:
        """One DLQ batch, then ARCHIVED for exactly its offsets, durable, then the next: so at most
        one written batch is not ARCHIVED yet when the process dies (see dead_letters.py)."""
        try:
            dlq = self.owner.dead_letters
            producer_id = dlq_producer_id(self.group_id, self.topic_id, self.partition.index)
            while not self.fenced and self.sp is not None and not self._archiving_writes:
                sp = self.sp
                pending = [Archiving(f, l, c, r) for f, l, c, r in sp.archiving_ranges()]
                if not pending:
                    break
                if self._dlq_resume:
                    self._dlq_resume = False
                    done = dlq.already_written(self.group_id, self.partition, producer_id)
                    write = sp.finish_archiving((o, o) for o in sorted(done))
                    if write is not None:
                        log.info("DLQ records found written before a restart, archived without rewriting",
                                 group=self.group_id, topic=self.partition.topic.name,
                                 partition=self.partition.index, records=sum(b.last_offset - b.first_offset + 1
                                                                             for b in write.batches))
                        await self._persist_archived(write)
                        continue
                limits = self.owner.limits(self.group_id)
                outcome = await dlq.write_round(self.group_id, self.partition, producer_id, pending,
                                                limits.delivery_count_limit)
                write = sp.finish_archiving(outcome.ranges)
                if write is None:
                    break  # nothing it covers is ARCHIVING any more: never write the same round again
                await self._persist_archived(write)
        finally:
            self._dlq_task = None

    async def _persist_archived(self, write: StateWrite) -> None:
        """Persist ARCHIVED until it is durable (or this leader is fenced): the next DLQ batch may
        not be written before, or a crash could leave two unarchived batches."""
        backoff = 0.1
        while True:
            try:
                await self._persist(write)
                return
            except KafkaError:
                sp = self.sp
                if self.fenced or sp is None:
                    return
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                write = StateWrite(sp.start_offset, sp.delivery_complete_count, write.batches, "archive")

    # -- acquisition -----------------------------------------------------------------------------

    def try_fetch_lock(self) -> bool:
        if self._fetch_lock or self.fenced:
            return False
        self._fetch_lock = True
        return True

    def release_fetch_lock(self) -> None:
        self._fetch_lock = False

    def acquire(self, member_id: str, *, max_records: int, batch_size: int, mode: AcquireMode,
                max_bytes: int) -> Acquisition:
        """Read from the next fetch offset and acquire; the caller holds the fetch lock."""
        sp = self.sp
        assert sp is not None
        self._expire_due()
        limits = self.owner.limits(self.group_id)
        if max_records <= 0 or not sp.can_acquire(limits):
            return Acquisition(b"", [])
        plog = self.partition.log
        for _attempt in range(2):
            offset = sp.next_fetch_offset()
            # read_committed: nothing at or past the last stable offset (an open transaction's records)
            upper = self.partition.last_stable_offset if limits.read_committed else plog.high_watermark
            if offset >= upper:
                return Acquisition(b"", [])
            spans: list[tuple[int, int, int]] = []  # (base offset, last offset, size) per batch read
            try:
                read = plog.read(offset, max(max_bytes, 1), max_offset=upper, min_one_batch=True,
                                 through_offset=sp.read_through(offset, max_records, limits), batches=spans)
                break
            except OffsetOutOfRange:
                sp.move_log_start(plog.log_start_offset)  # records deleted under us: skip ahead
        else:
            return Acquisition(b"", [])
        data = read.records
        if not data:
            return Acquisition(b"", [])
        # One job per batch (a producer with linger.ms=0) makes a batch per record: the spans the
        # read walked serve here, so no header is parsed twice (a third of a 100-record fetch's CPU).
        batches = [LogBatch(base, last) for base, last, _size in spans]
        aborted = (self._aborted_batches(list(iter_batch_headers(data)), offset, read.next_offset)
                   if limits.read_committed else ())
        now = self.clock.monotonic_ms()
        acquired = sp.acquire(member_id, batches, max_records=max_records, batch_size=batch_size, mode=mode,
                              limits=limits, now_ms=now, fetch_offset=offset, aborted_batches=aborted)
        if not acquired:
            return Acquisition(b"", [])
        if self.observed:
            history = self.history
            if history is not None and not self.trace:  # the view alone: no call per range
                for a in acquired:
                    history.append((now, "acquire", a.first_offset, a.last_offset, member_id, a.delivery_count))
            else:
                for a in acquired:
                    self._event("acquire", member_id, a.first_offset, a.last_offset, a.delivery_count)
        self._arm_timer()
        lo, hi = acquired[0].first_offset, acquired[-1].last_offset
        if spans[0][1] >= lo and spans[-1][0] <= hi:  # every batch read holds an acquired record
            return Acquisition(data, acquired)
        start = end = -1
        position = 0
        for base, last, size in spans:
            if last >= lo:
                if base > hi:
                    break
                if start < 0:
                    start = position
                end = position + size
            position += size
        return Acquisition(data[start:end] if start >= 0 else b"", acquired)

    def _aborted_batches(self, headers: list[BatchHeader], start: int, end: int) -> list[LogBatch]:
        """The data batches of aborted transactions among those read: a transactional batch of a
        producer between the first offset of its aborted transaction and that abort's marker. The
        markers themselves are control batches and stay (the client acknowledges them as gaps)."""
        spans = self.partition.producers.aborted_spans(start, end)
        if not spans:
            return []
        return [LogBatch(h.base_offset, h.last_offset) for h in headers
                if h.is_transactional and not h.is_control and any(
                    a.producer_id == h.producer_id and a.first_offset <= h.base_offset < a.last_offset for a in spans)]

    # -- acknowledgement and release -------------------------------------------------------------

    async def acknowledge(self, member_id: str, batches: list[tuple[int, int, list[int]]], *, is_renew: bool) -> None:
        """Apply acknowledgements; raises KafkaError with the partition's error code."""
        sp = await self.ensure_loaded()
        self._expire_due()
        limits = self.owner.limits(self.group_id)
        write = sp.acknowledge(member_id, batches, limits=limits, now_ms=self.clock.monotonic_ms(), is_renew=is_renew)
        if write is None:
            self._arm_timer()
            if self.observed and (self.trace or not _accepts_only(batches)):
                self._ack_events(member_id, batches, None)
            return
        await self._persist(write)
        if self.observed and (self.trace or not _accepts_only(batches)):
            self._ack_events(member_id, batches, write)

    def _ack_events(self, member_id: str, batches: list[tuple[int, int, list[int]]], write: StateWrite | None) -> None:
        """Acknowledgements as events by type (runs of one type in a per-offset list), with the
        delivery count the write gives the range, and the ranges the write archived (a reject, or a
        release at the delivery count limit)."""
        written = write.batches if write is not None else ()
        for first, last, types in batches:
            for lo, hi, t in ack_runs(first, last, types):
                count = -1
                for b in written:  # one batch per acknowledged range: a short scan
                    if b.first_offset == lo and b.last_offset == hi:
                        count = b.delivery_count
                        break
                self._event(_ACK_NAMES.get(t) or str(t), member_id, lo, hi, count)
        for b in written:
            if b.state >= RecordState.ARCHIVING:
                self._event("archive", member_id, b.first_offset, b.last_offset, b.delivery_count)

    async def release_member(self, member_id: str) -> None:
        if self.sp is None:
            return
        write = self.sp.release_member(member_id, limits=self.owner.limits(self.group_id), now_ms=self.clock.monotonic_ms())
        if write is not None:
            if self.observed:
                self._write_events(write, "release", member_id)
            try:
                await self._persist(write)
            except KafkaError:
                pass  # already logged; the records come back through lock expiry

    # -- lock expiry -----------------------------------------------------------------------------

    def _expire_due(self) -> None:
        sp = self.sp
        if sp is None:
            return
        deadline = sp.next_lock_deadline()
        if deadline is not None and deadline <= self.clock.monotonic_ms():
            self._on_timer()

    def _arm_timer(self) -> None:
        sp = self.sp
        if sp is None:
            return
        deadline = sp.next_lock_deadline()
        if deadline is None or (self._timer is not None and self._timer_at is not None
                                and self._timer_at <= deadline):
            # A timer due no later stays armed: when it fires early it finds nothing due and
            # arms the next deadline, so acquiring and acknowledging one record at a time never
            # cancels and re-creates loop timers.
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = deadline
        self._timer = self.clock.call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        sp = self.sp
        if sp is None or self.fenced:
            return
        write = sp.expire_locks(limits=self.owner.limits(self.group_id), now_ms=self.clock.monotonic_ms())
        if write is None:
            self._arm_timer()
            return
        if self.observed:
            self._write_events(write, "expire", "")
        if self.metrics.enabled:
            self.metrics.locks_expired(self.metrics_key, write.expired)
            if write.expired_at_limit:
                self.metrics.archived_at_limit(self.metrics_key, write.expired_at_limit)
        self._spawn(self._persist(write))
        self._arm_timer()
        self.owner.wake(self)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run a background write, keeping a reference and logging (never losing) its failure."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._settled)

    def _settled(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("share state background write failed", group=self.group_id,
                      topic=self.partition.topic.name, partition=self.partition.index,
                      error=f"{type(exc).__name__}: {exc}")

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.fenced = True


__all__ = ["SharePartitionLeader", "Acquisition", "RecordEvent"]
