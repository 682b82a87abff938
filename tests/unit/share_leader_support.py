"""Test doubles for the share-partition leader's seams: a manual clock, a persister over the share
coordinator's own store (plan, then apply, as the coordinator does after an append) that can
fail, fence or delay, and a host with fixed limits. The partition log is real (a PartitionLog on
disk), so acquisition reads real record batches."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from sharebroker.broker.share.leader import SharePartitionLeader
from sharebroker.broker.share.partition import ShareLimits
from sharebroker.broker.share_state import records as rec
from sharebroker.broker.share_state.store import ReadResult, ShareStateStore, StateBatch, StateRecord, Summary
from sharebroker.broker.topics import Partition
from sharebroker.protocol.record_batch import encode_batch, parse_batches
from sharebroker.storage import LogConfig, PartitionLog
from sharebroker.protocol.errors import KafkaError

NOW_WALL = 1_700_000_000_000


class ManualClock:
    def __init__(self) -> None:
        self.mono = 1_000_000
        self.wall = NOW_WALL
        self.timers: list[list] = []  # [deadline, callback, cancelled]

    def monotonic_ms(self) -> int:
        return self.mono

    def wall_ms(self) -> int:
        return self.wall

    def call_at(self, deadline_ms: int, callback: Callable[[], None]):
        entry = [deadline_ms, callback, False]
        self.timers.append(entry)
        return SimpleNamespace(cancel=lambda: entry.__setitem__(2, True))

    def advance(self, ms: int) -> None:
        """Move the monotonic clock and run the timers that came due, in deadline order."""
        self.mono += ms
        while True:
            due = sorted((t for t in self.timers if not t[2] and t[0] <= self.mono), key=lambda t: t[0])
            if not due:
                break
            for t in due:
                t[2] = True
                t[1]()
        self.timers = [t for t in self.timers if not t[2]]


@dataclass
class MemoryPersister:
    """The five persister operations over ShareStateStore; ``log`` holds every applied record
    (encoded), so a restart can rebuild the store from it exactly as start-up does."""
    store: ShareStateStore = field(default_factory=ShareStateStore)
    log: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    fail_writes: int = 0           # the next N writes fail (the append did not happen)
    fence_writes: bool = False     # writes answer FENCED_STATE_EPOCH
    delay: int = 0                 # loop turns a write waits before its append completes
    writes: int = 0

    async def _commit(self, record: StateRecord) -> None:
        for _ in range(self.delay):
            await asyncio.sleep(0)
        encoded = rec.encode_record(record)
        self.log.append(encoded)
        self.store.apply(rec.decode_record(*encoded))

    async def initialize(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
                         start_offset: int) -> None:
        record = self.store.initialize((group_id, topic_id, partition), state_epoch, start_offset, NOW_WALL)
        if record is not None:
            await self._commit(record)

    async def read(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int) -> ReadResult:
        result, record = self.store.read((group_id, topic_id, partition), leader_epoch)
        if record is not None:
            await self._commit(record)
        return result

    async def write(self, group_id: str, topic_id: uuid.UUID, partition: int, *, state_epoch: int,
                    leader_epoch: int, start_offset: int, delivery_complete_count: int,
                    batches: list[StateBatch]) -> None:
        self.writes += 1
        if self.fence_writes:
            raise KafkaError(ErrorCode.fenced_state_epoch, "fenced by the test")
        record = self.store.write((group_id, topic_id, partition), state_epoch=state_epoch,
                                  leader_epoch=leader_epoch, start_offset=start_offset,
                                  delivery_complete_count=delivery_complete_count, batches=batches,
                                  now_ms=NOW_WALL)
        if self.fail_writes:
            self.fail_writes -= 1
            raise KafkaError(ErrorCode.unknown_server_error, "append failed (test)")
        await self._commit(record)

    async def delete(self, group_id: str, topic_id: uuid.UUID, partition: int) -> None:
        record = self.store.delete((group_id, topic_id, partition))
        if record is not None:
            await self._commit(record)

    async def read_summary(self, group_id: str, topic_id: uuid.UUID, partition: int) -> Summary:
        return self.store.summary((group_id, topic_id, partition))

    def restarted(self) -> MemoryPersister:
        """A persister whose store is rebuilt by replaying the records, as after a broker restart."""
        fresh = MemoryPersister(store=ShareStateStore(self.store.snapshot_every), log=list(self.log))
        for key, value in self.log:
            fresh.store.apply(rec.decode_record(key, value))
        return fresh


class Host:
    def __init__(self, limits: ShareLimits) -> None:
        self.lim = limits
        self.dropped: list[SharePartitionLeader] = []
        self.wakes = 0

    def limits(self, group_id: str) -> ShareLimits:
        return self.lim

    def auto_offset_reset(self, group_id: str):
        return SimpleNamespace(timestamp=lambda now_ms: -2)  # earliest

    def wake(self, leader: SharePartitionLeader) -> None:
        self.wakes += 1

    def drop(self, leader: SharePartitionLeader) -> None:
        self.dropped.append(leader)
        leader.close()


def open_partition(path: Path, topic_id: uuid.UUID) -> Partition:
    plog = PartitionLog.open(path, LogConfig(), recovery_point=0, clean_shutdown=True, now_ms=NOW_WALL)
    topic = SimpleNamespace(name="jobs", topic_id=topic_id)
    return Partition(topic, 0, plog)  # type: ignore[arg-type]


def append_jobs(partition: Partition, n: int, first: int = 0) -> None:
    """n records, each its own batch (what linger.ms=0 produces)."""
    for i in range(first, first + n):
        buf = encode_batch([(None, b"job-%d" % i)], timestamp_ms=NOW_WALL)
        partition.log.append(buf, parse_batches(buf, verify_crc=True), leader_epoch=0, now_ms=NOW_WALL)
