"""The share coordinator: durable share-partition state on the internal topic
`__share_group_state`, the way Kafka keeps it (share-groups-spec §10).

Every state change is appended as a ShareSnapshot or ShareUpdate record (Kafka's formats) before
the call returns, through the same segment log and flush policy as any topic; writes that arrive
while an append is in flight share the next one (`share.coordinator.append.linger.ms` adds a
wait). At start-up the topic is replayed into the in-memory store (records an older version
placed on the wrong partition first, then moved: see `load`). Old records are pruned by
moving the log start offset past the oldest snapshot still needed; keys that only took updates
for a while get a fresh snapshot first, so the topic stays bounded under a steady workload."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import defaultdict, deque
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.flusher import now_ms
from sharebroker.broker.internal_topics import InternalLog, read_records
from sharebroker.broker.share_state import records as rec
from sharebroker.broker.share_state.store import (
    Key,
    ReadResult,
    ShareStateStore,
    SnapshotValue,
    StateBatch,
    StateRecord,
    Summary,
)
from sharebroker.broker.structured_log import get_logger
from sharebroker.broker.topics import is_remote
from sharebroker.protocol.errors import KafkaError

if TYPE_CHECKING:
    from sharebroker.broker.topics import Topic, Topics
    from sharebroker.config import BrokerConfig

log = get_logger("sharebroker.share_state")

STATE_TOPIC = "__share_group_state"

__all__ = ["ShareCoordinator", "ReadResult", "StateBatch", "Summary", "STATE_TOPIC"]


class ShareCoordinator:
    def __init__(self, config: BrokerConfig, topics: Topics, internal: InternalLog) -> None:
        self.config = config
        self.topics = topics  # to check that a partition the state is asked for exists
        self.internal = internal
        cfg = config
        self.num_partitions: int = cfg["share.coordinator.state.topic.num.partitions"]
        self.store = ShareStateStore(cfg["share.coordinator.snapshot.update.records.per.snapshot"])
        self.linger_ms: int = cfg["share.coordinator.append.linger.ms"]
        self.prune_interval_ms: int = cfg["share.coordinator.state.topic.prune.interval.ms"]
        self.cold_interval_ms: int = cfg["share.coordinator.cold.partition.snapshot.interval.ms"]
        self._queues: dict[int, list[tuple[list[tuple[bytes, bytes | None]], asyncio.Future[list[int]]]]] = defaultdict(list)
        self._draining: set[int] = set()
        self._snapshot_offsets: dict[Key, int] = {}   # offset of each key's newest snapshot record
        self._snapshot_times: dict[Key, int] = {}
        # Keys whose newest snapshot is in another partition than their own (written under the old
        # placement): that partition and the snapshot's offset there, until a snapshot is moved.
        self._misplaced: dict[Key, tuple[int, int]] = {}
        self.relocation: asyncio.Task[int] | None = None  # moving those at start-up (`start`)
        self._former: dict[Key, int] = {}  # keys with misplaced records at start-up -> where they are
        self._drainers: set[asyncio.Task[None]] = set()
        # Keys with an operation running -> the operations waiting for their turn (`_serialized`)
        self._key_waiters: dict[Key, deque[asyncio.Future[None]] | None] = {}
        self._pruner: asyncio.Task[None] | None = None
        self.replay_ms = 0.0

    # -- the internal topic ----------------------------------------------------------------------

    async def _topic(self) -> Topic:
        """The state topic; the first call creates it (a slice at a time, the loop serving between)."""
        return await self.internal.ensure(STATE_TOPIC, self.num_partitions,
                                          self.config["share.coordinator.state.topic.segment.bytes"])

    def _partition_for(self, key: Key) -> int:
        return rec.state_partition(key[0], key[1], key[2], self.num_partitions)

    def load(self) -> None:
        """Replay `__share_group_state` into memory; runs before the listener accepts requests.

        A record found outside its key's partition (`_partition_for`) was written under the old
        placement (a sign-bit mask instead of Kafka's Utils.abs). Every write since goes to the
        key's own partition, so a misplaced record is older than every correctly placed record of
        its key (but for the tombstones `delete` adds, which only remove what the placed records
        then rebuild): when any exist, the misplaced ones are replayed first, then the placed ones,
        so a stale record never wins whatever order the partitions come in. `start` then moves the
        state of keys whose newest snapshot is still misplaced to their own partition."""
        topic = self.internal.get(STATE_TOPIC)
        if topic is None:
            return
        t0 = time.perf_counter()
        errors: list[tuple[int, int, str]] = []
        count, misplaced = self._replay_pass(topic, misplaced=False, errors=errors)
        if misplaced:  # an old data directory: start over in age order
            self.store.states.clear()
            self._snapshot_offsets.clear()
            self._snapshot_times.clear()
            self._misplaced.clear()
            self._former.clear()
            errors.clear()
            misplaced, _ = self._replay_pass(topic, misplaced=True, errors=errors)
            count, _ = self._replay_pass(topic, misplaced=False, errors=errors)
            count += misplaced
        for index, off, error in errors:  # a record no writer of ours makes: skipped, say where
            log.error("unreadable share state record skipped", state_partition=index, offset=off, error=error)
        self.replay_ms = (time.perf_counter() - t0) * 1000
        log.info("share state replayed", records=count, misplaced_records=misplaced,
                 share_partitions=len(self.store.states), replay_ms=round(self.replay_ms, 1))

    def _replay_pass(self, topic: Topic, *, misplaced: bool, errors: list[tuple[int, int, str]]) -> tuple[int, int]:
        """Replay, over all partitions in offset order, the records that are misplaced (or, with
        `misplaced` false, the correctly placed ones and any unreadable one, into `errors`).
        Returns (records replayed, records of the other kind passed over)."""
        replayed = passed = 0
        n = self.num_partitions
        for partition in topic.partitions:
            if is_remote(partition):  # another worker's (worker.processes > 1)
                continue
            index = partition.index
            for off, key_bytes, value in read_records(partition.log):
                try:
                    record_type, group_id, topic_id, p = rec.decode_key(key_bytes)
                except ValueError as exc:
                    if not misplaced:
                        errors.append((index, off, str(exc)))
                    continue
                if (rec.state_partition(group_id, topic_id, p, n) != index) != misplaced:
                    passed += 1
                    continue
                try:
                    record = rec.decode_value(record_type, (group_id, topic_id, p), value)
                except ValueError as exc:
                    errors.append((index, off, str(exc)))
                    continue
                self.store.apply(record)
                if misplaced:
                    self._former[record.key] = index
                self._track(record, off, misplaced_in=index if misplaced else None)
                replayed += 1
        return replayed, passed

    def _track(self, record: StateRecord, offset: int, *, misplaced_in: int | None = None) -> None:
        """Remember where each key's newest snapshot is (pruning keeps it). A replayed record read
        from another partition than its key's (`misplaced_in`) is remembered apart, in
        `_misplaced`: its offset means nothing in the key's own partition."""
        key = record.key
        if record.value is None:
            self._snapshot_offsets.pop(key, None)
            self._snapshot_times.pop(key, None)
            self._misplaced.pop(key, None)
        elif isinstance(record.value, SnapshotValue):
            if misplaced_in is None:
                self._snapshot_offsets[key] = offset
                self._misplaced.pop(key, None)
            else:
                self._snapshot_offsets.pop(key, None)
                self._misplaced[key] = (misplaced_in, offset)
            self._snapshot_times[key] = record.value.write_timestamp

    # -- appends ---------------------------------------------------------------------------------

    async def _append(self, key: Key, key_bytes: bytes, value: bytes | None, index: int | None = None) -> int:
        """Append one record for `key` (to its state partition, or to `index`) and return its
        offset once the flush policy is met. With no append in flight on that partition (and no
        linger) the record is appended at once; otherwise it joins the queue that the running
        append drains next (group commit)."""
        if index is None:
            index = self._partition_for(key)
        if index not in self._draining and self.linger_ms <= 0:
            self._draining.add(index)
            try:
                partition = (await self._topic()).partitions[index]
                return await self.internal.append(partition, [(key_bytes, value)])
            except Exception as exc:
                raise _append_failed(exc, index) from None
            finally:
                self._draining.discard(index)
                if self._queues[index]:
                    self._start_drain(index)
        fut: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        self._queues[index].append(([(key_bytes, value)], fut))
        if index not in self._draining:
            self._start_drain(index)
        offsets = await fut
        return offsets[0]

    def _start_drain(self, index: int) -> None:
        self._draining.add(index)
        task = asyncio.get_running_loop().create_task(self._drain(index), name=f"share-state-append-{index}")
        self._drainers.add(task)  # referenced until done; _drain settles every queued future itself
        task.add_done_callback(self._drainers.discard)

    async def _drain(self, index: int) -> None:
        try:
            try:
                partition = (await self._topic()).partitions[index]
            except Exception as exc:
                self._fail_queue(index, _append_failed(exc, index))
                return
            while self._queues[index]:
                if self.linger_ms > 0:
                    await asyncio.sleep(self.linger_ms / 1000)
                items, self._queues[index] = self._queues[index], []
                records = [r for recs, _ in items for r in recs]
                try:
                    offset = await self.internal.append(partition, records)
                except Exception as exc:
                    self._fail(items, _append_failed(exc, index))
                    continue
                for recs, fut in items:
                    if not fut.done():
                        fut.set_result(list(range(offset, offset + len(recs))))
                    offset += len(recs)
        finally:
            self._draining.discard(index)

    def _fail_queue(self, index: int, exc: KafkaError) -> None:
        items, self._queues[index] = self._queues[index], []
        self._fail(items, exc)

    @staticmethod
    def _fail(items: list[Any], exc: KafkaError) -> None:
        for _, fut in items:
            if not fut.done():
                fut.set_exception(KafkaError(exc.code, exc.message))

    async def _commit(self, record: StateRecord) -> None:
        """Append the record; only once it is durable (per the flush policy) apply it, through
        the same function that replays the topic. A failed append changes nothing."""
        key_bytes, value = rec.encode_record(record)
        offset = await self._append(record.key, key_bytes, value)
        self.store.apply(record)
        self._track(record, offset)

    async def _acquire(self, key: Key) -> None:
        """Take the key's turn: at once when no operation of the key runs (the common case: a
        lookup and an insert), else after the ones queued before, in order. A key is in
        `_key_waiters` while an operation of it runs: with None until another one waits."""
        waiters = self._key_waiters
        if key not in waiters:
            waiters[key] = None
            return
        queue = waiters[key]
        if queue is None:
            queue = waiters[key] = deque()
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._release(key)  # handed the turn while being cancelled: pass it on
            elif turn in queue:  # (a release may have dropped it already)
                queue.remove(turn)
            raise

    def _release(self, key: Key) -> None:
        """End the key's turn: hand it to the next waiter, or mark the key free."""
        queue = self._key_waiters.pop(key)
        while queue:
            turn = queue.popleft()
            if not turn.done():
                self._key_waiters[key] = queue  # still taken: by `turn` now
                turn.set_result(None)
                return

    @contextlib.asynccontextmanager
    async def _serialized(self, key: Key) -> AsyncIterator[None]:
        """One operation at a time per share partition, as Kafka's coordinator runtime runs one
        shard's operations in order: each is checked against the state the previous one left."""
        await self._acquire(key)
        try:
            yield
        finally:
            self._release(key)

    # -- the persister operations ----------------------------------------------------------------

    def _check_partition(self, topic_id: uuid.UUID | None, partition: int) -> None:
        topic = self.topics.get_by_id(topic_id)
        if topic is None or not 0 <= partition < len(topic.partitions):
            raise KafkaError(ErrorCode.unknown_topic_or_partition,
                             f"Topic {topic_id} partition {partition} does not exist.")

    async def initialize(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
                         start_offset: int) -> None:
        ShareStateStore._check_key(topic_id, partition)
        self._check_partition(topic_id, partition)
        key = (group_id, topic_id, partition)
        async with self._serialized(key):
            record = self.store.initialize(key, state_epoch, start_offset, now_ms())
            if record is not None:
                await self._commit(record)

    async def read(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int) -> ReadResult:
        ShareStateStore._check_key(topic_id, partition)
        self._check_partition(topic_id, partition)
        key = (group_id, topic_id, partition)
        async with self._serialized(key):
            result, record = self.store.read(key, leader_epoch)
            if record is not None:  # a new leader: its epoch is recorded so older leaders stay fenced
                await self._commit(record)
            return result

    async def write(self, group_id: str, topic_id: uuid.UUID, partition: int, *, state_epoch: int,
                    leader_epoch: int, start_offset: int, delivery_complete_count: int,
                    batches: list[StateBatch]) -> None:
        ShareStateStore._check_key(topic_id, partition)
        self._check_partition(topic_id, partition)
        key = (group_id, topic_id, partition)
        await self._acquire(key)  # `_serialized`, without a context manager on the hot path
        try:
            await self._commit(self.store.write(
                key, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start_offset,
                delivery_complete_count=delivery_complete_count, batches=batches, now_ms=now_ms()))
        finally:
            self._release(key)

    async def delete(self, group_id: str, topic_id: uuid.UUID, partition: int) -> None:
        ShareStateStore._check_key(topic_id, partition)
        key = (group_id, topic_id, partition)
        async with self._serialized(key):
            record = self.store.delete(key)
            if record is not None:
                former = self._former.get(key)
                if former is not None:
                    # Its records from before the placement change lie in `former`: a tombstone
                    # there too, or they would come back at a restart once pruning has dropped
                    # the tombstone from the key's own partition. First, so that a crash in
                    # between leaves the key as the placed records have it.
                    await self._append(key, *rec.encode_record(record), index=former)
                await self._commit(record)

    async def read_summary(self, group_id: str, topic_id: uuid.UUID, partition: int) -> Summary:
        ShareStateStore._check_key(topic_id, partition)
        return self.store.summary((group_id, topic_id, partition))

    # -- pruning ---------------------------------------------------------------------------------

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._misplaced:
            self.relocation = loop.create_task(self.relocate_misplaced(), name="share-state-relocate")
        self._pruner = loop.create_task(self._prune_forever(), name="share-state-prune")

    async def stop(self) -> None:
        for task in (self.relocation, self._pruner):
            if task is not None:
                task.cancel()

    async def relocate_misplaced(self) -> int:
        """Write a fresh snapshot of the current state of every live key whose newest snapshot is
        misplaced (see `load`) to the key's own partition, so that pruning can later drop the old
        records of its former partition. Returns the number of keys moved; a key whose append fails
        stays misplaced (pruning keeps its old records) and is tried again at the next prune."""
        pending = [key for key in self._misplaced if key in self.store.states]
        if not pending:
            return 0

        async def move(key: Key) -> bool:
            async with self._serialized(key):
                if key not in self._misplaced:  # a snapshot or a tombstone was written meanwhile
                    return False
                record = self.store.snapshot(key, now_ms())
                if record is None:
                    return False
                try:
                    await self._commit(record)
                except KafkaError:  # _append has logged it
                    return False
                return True

        results = await asyncio.gather(*(move(key) for key in pending))  # appends to one partition share a batch
        moved = sum(results)
        log.info("share state relocated", keys=moved, still_misplaced=len(self._misplaced))
        return moved

    async def _prune_forever(self) -> None:
        while True:
            await asyncio.sleep(self.prune_interval_ms / 1000)
            try:
                await self.prune()
            except Exception:
                log.exception("share state pruning failed")

    async def prune(self) -> None:
        """Snapshot keys whose newest snapshot is old and has updates after it, then move each
        state partition's log start to the oldest newest-snapshot among its live keys."""
        topic = self.internal.get(STATE_TOPIC)
        if topic is None:
            return
        if self.relocation is not None and not self.relocation.done():
            await self.relocation
        if self._misplaced:  # a relocation that failed: again
            await self.relocate_misplaced()
        now = now_ms()
        for key, state in list(self.store.states.items()):
            if state.updates_since_snapshot and now - self._snapshot_times.get(key, 0) >= self.cold_interval_ms:
                async with self._serialized(key):
                    record = self.store.snapshot(key, now)
                    if record is not None:
                        await self._commit(record)
        floor: dict[int, int] = {}

        def keep(index: int, offset: int) -> None:
            floor[index] = min(floor.get(index, offset), offset)

        for key in self.store.states:
            index = self._partition_for(key)
            offset = self._snapshot_offsets.get(key)
            if offset is not None:
                keep(index, offset)
            misplaced = self._misplaced.get(key)
            if misplaced is not None:
                # Not moved yet: its snapshot and the updates after it lie in its former partition,
                # and the updates written since in its own partition, at offsets unknown here.
                keep(*misplaced)
                keep(index, topic.partitions[index].log.log_start_offset)
        for partition in topic.partitions:
            if is_remote(partition):
                continue
            plog = partition.log
            target = floor.get(partition.index, plog.high_watermark)
            if target > plog.log_start_offset:
                plog.delete_records(target)
                log.info("share state pruned", state_partition=partition.index, log_start_offset=target,
                         size_bytes=plog.size_bytes)


def _append_failed(exc: Exception, index: int) -> KafkaError:
    """What a failed state append answers: the internal log's own error for a write the disk
    refused or a topic that cannot be created (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, which
    the share-partition leader turns into COORDINATOR_NOT_AVAILABLE as Kafka's SharePartition
    does), UNKNOWN_SERVER_ERROR for anything else (a bug, with its traceback)."""
    if isinstance(exc, KafkaError):
        log.warning("share state append failed", state_partition=index, error=exc.code.name, message=exc.message)
        return exc
    log.error("share state append failed", state_partition=index, exc_info=exc)
    return KafkaError(ErrorCode.unknown_server_error, f"share state append failed: {exc}")
