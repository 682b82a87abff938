"""`__consumer_offsets`: the one durable log of every group coordinator (share groups, classic
groups and their committed offsets). Records are keyed as in Kafka (int16 record type first);
a group's records go to partition abs(javaHash(group id)) % offsets.topic.num.partitions.

Coordinators append through `append`, are handed their records by type at start-up (`replay`),
and each provides the records that restate its live groups so that a busy partition can be
compacted: the live state is written again and everything before it dropped.

A coordinator applies a change to memory once its append returned (plan, append, apply), in the
same step. Compaction restates memory, so it must not run while an append of its partition is in
flight: the record of that append would be dropped with what precedes the restated state, and
the restated state would not hold it yet. Compaction waits for those appends, and appends wait for
a compaction of their partition to end."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

from sharebroker.broker.groups.records import offsets_partition
from sharebroker.broker.internal_topics import InternalLog, read_records
from sharebroker.broker.structured_log import get_logger
from sharebroker.broker.topics import is_remote
from sharebroker.protocol.primitives import Reader

if TYPE_CHECKING:
    from sharebroker.broker.topics import Topic

log = get_logger("sharebroker.groups")

OFFSETS_TOPIC = "__consumer_offsets"
_SEGMENT_BYTES = 100 * 1024 * 1024
_COMPACT_INTERVAL_S = 300
_COMPACT_AFTER_RECORDS = 1000

Record = tuple[bytes, bytes | None]
# group ids living in a partition index -> the records restating them
Restater = Callable[[Callable[[str], bool]], list[Record]]
# (partition index, producer id, key, value) of a record of a transaction open at start-up
OpenTxnHandler = Callable[[int, int, bytes, bytes | None], None]


class GroupLog:
    def __init__(self, internal: InternalLog, *, num_partitions: int) -> None:
        self.internal = internal
        self.num_partitions = num_partitions  # offsets.topic.num.partitions
        self._restaters: list[Restater] = []
        self._since_compaction: dict[int, int] = {}
        self._task: asyncio.Task[None] | None = None
        self._moving: asyncio.Task[None] | None = None
        self._appending: dict[int, int] = {}  # partition -> appends in flight (not yet applied)
        self._drained: dict[int, asyncio.Future[None]] = {}  # partition -> compaction waiting for them
        self._compacting: dict[int, asyncio.Future[None]] = {}  # partition -> compaction under way
        self.misplaced = 0  # records replayed from a partition their group does not map to

    def register(self, restate: Restater) -> None:
        self._restaters.append(restate)

    async def _topic(self) -> Topic:
        """The offsets topic; the first call creates it (a slice at a time, the loop serving between)."""
        return await self.internal.ensure(OFFSETS_TOPIC, self.num_partitions, _SEGMENT_BYTES)

    def partition_of(self, group_id: str) -> int:
        return offsets_partition(group_id, self.num_partitions)

    async def append(self, group_id: str, records: list[Record], *, transaction: tuple[int, int] | None = None) -> int:
        """Append one group's records (as a transactional batch of (producer id, epoch) if given);
        returns the offset of the first once the flush policy is met (-1 for no records)."""
        if not records:
            return -1
        partition = (await self._topic()).partitions[self.partition_of(group_id)]
        index = partition.index
        while (compaction := self._compacting.get(index)) is not None:
            await asyncio.shield(compaction)
        self._appending[index] = self._appending.get(index, 0) + 1
        try:
            first = await self.internal.append(partition, records, transaction=transaction)
            self._since_compaction[index] = self._since_compaction.get(index, 0) + len(records)
        finally:
            # The caller applies the change when this returns, before any other task runs: a
            # compaction woken here restates it.
            left = self._appending[index] - 1
            if left:
                self._appending[index] = left
            else:
                del self._appending[index]
                drained = self._drained.pop(index, None)
                if drained is not None and not drained.done():
                    drained.set_result(None)
        return first

    def replay(self, handlers: dict[int, Callable[[bytes, bytes | None], None]], *,
               open_transactions: OpenTxnHandler | None = None) -> int:
        """Hand every record to the handler of its type, committed transactional records where
        their commit marker is; returns how many were read. Records of transactions still open
        go to `open_transactions` (partition index, producer id, key, value)."""
        topic = self.internal.get(OFFSETS_TOPIC)
        if topic is None:
            return 0
        count = 0
        placed: dict[str, int] = {}  # group id -> its partition: a group has several records
        for partition in topic.partitions:
            if is_remote(partition):  # another worker's (worker.processes > 1)
                continue
            still_open: dict[int, list[tuple[int, bytes, bytes | None]]] = {}
            for off, key, value in read_records(partition.log, open_transactions=still_open):
                try:
                    group_id = Reader(key, 2).string() or ""
                    home = placed.get(group_id)
                    if home is None:
                        home = placed[group_id] = self.partition_of(group_id)
                    if partition.index != home:
                        self.misplaced += 1
                    (record_type,) = struct.unpack_from(">h", key, 0)
                    handler = handlers.get(record_type)
                    if handler is not None:
                        handler(key, value)
                except (ValueError, struct.error) as exc:  # no writer of ours makes one: skip, say where
                    log.error("unreadable group record skipped", partition=partition.index, offset=off,
                              error=str(exc))
                    continue
                count += 1
            if open_transactions is not None:
                for pid, held in still_open.items():
                    for _off, key, value in held:
                        open_transactions(partition.index, pid, key, value)
        return count

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._compact_forever(), name="group-log-compaction")
        if self.misplaced:
            # Written by a version that hashed group ids to partitions unlike Kafka: restate every
            # group in its own partition now, before a later compaction drops the old copies.
            log.info("group records found outside their partition, compacting", records=self.misplaced)
            self._moving = asyncio.get_running_loop().create_task(self.compact(force=True), name="group-log-move")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _compact_forever(self) -> None:
        while True:
            await asyncio.sleep(_COMPACT_INTERVAL_S)
            try:
                await self.compact()
            except Exception:
                log.exception("group log compaction failed")

    async def compact(self, *, force: bool = False) -> None:
        topic = self.internal.get(OFFSETS_TOPIC)
        if topic is None:
            return
        for partition in topic.partitions:
            if is_remote(partition):
                continue
            if not force and self._since_compaction.get(partition.index, 0) < _COMPACT_AFTER_RECORDS:
                continue
            index = partition.index
            def here(gid: str, i: int = index) -> bool:
                return self.partition_of(gid) == i

            loop = asyncio.get_running_loop()
            done = self._compacting[index] = loop.create_future()
            try:
                while self._appending.get(index):
                    drained = self._drained.setdefault(index, loop.create_future())
                    await drained
                records = [r for restate in self._restaters for r in restate(here)]
                # Never past an open transaction's offsets (TxnOffsetCommit): they are not restated
                start = partition.last_stable_offset
                if records:
                    await self.internal.append(partition, records)
                partition.log.delete_records(start)
            finally:
                del self._compacting[index]
                done.set_result(None)
            self._since_compaction[index] = 0
            log.info("group log compacted", partition=index, records=len(records),
                     log_start_offset=start)
