"""What the coordinators share about their internal topics (`__share_group_state`,
`__consumer_offsets`): creating them on first use, appending key/value records through the normal
log and flush policy, and reading every record back at start-up.

A write the disk refuses (a full disk, a failed fsync) raises KafkaError(NOT_COORDINATOR), the code
Kafka's coordinators answer for a storage error: the request that caused it is answered with it,
and the client looks the coordinator up again and retries instead of losing its connection. A topic
that cannot be created answers COORDINATOR_NOT_AVAILABLE."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterator
from typing import TYPE_CHECKING, Protocol

from sharebroker.broker.flusher import now_ms
from sharebroker.broker.replay import replay_batches
from sharebroker.broker.structured_log import get_logger
from sharebroker.protocol.errors import ErrorCode, KafkaError
from sharebroker.protocol.record_batch import (
    COMMIT_MARKER,
    InvalidRecordError,
    encode_batch,
    iter_records,
    read_header,
    read_marker,
)
from sharebroker.storage import PartitionLog

if TYPE_CHECKING:
    from sharebroker.broker.topics import Partition, Topic, Topics

log = get_logger("sharebroker.internal_topics")

COMPACTED_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


class AppendDurability(Protocol):
    """What follows an append on any partition (the broker's flush policy and segment-roll work)."""

    def after_append(self, partition: Partition, *, wait: bool) -> Awaitable[None] | None: ...

    def segment_rolled(self, partition: Partition) -> None: ...


class InternalLog(Protocol):
    """The seam the coordinators are built on: their topic, created on first use, and appends."""

    def get(self, name: str) -> Topic | None: ...

    async def ensure(self, name: str, partitions: int, segment_bytes: int) -> Topic: ...

    async def append(self, partition: Partition, records: list[tuple[bytes, bytes | None]], *,
                     transaction: tuple[int, int] | None = None) -> int: ...


class InternalTopics:
    """The broker's InternalLog: internal topics live in the normal topic table and log."""

    def __init__(self, topics: Topics, durability: AppendDurability) -> None:
        self._topics = topics
        self._durability = durability
        self._creating: dict[str, asyncio.Future[Topic]] = {}

    def get(self, name: str) -> Topic | None:
        return self._topics.get(name)

    async def ensure(self, name: str, partitions: int, segment_bytes: int) -> Topic:
        """The topic, created on first use (a slice of its partitions at a time, the event loop
        serving between slices); every caller that asks meanwhile waits for that one creation."""
        topic = self._topics.get(name)
        if topic is not None:
            return topic
        creating = self._creating.get(name)
        if creating is None:
            creating = self._creating[name] = asyncio.ensure_future(self._create(name, partitions, segment_bytes))
            creating.add_done_callback(lambda _: self._creating.pop(name, None))
        return await asyncio.shield(creating)

    async def stop(self) -> None:
        """Cancels the creations under way (the broker is stopping): what they made is removed."""
        pending = list(self._creating.values())
        for creating in pending:
            creating.cancel()
        if pending:
            await asyncio.wait(pending)

    async def _create(self, name: str, partitions: int, segment_bytes: int) -> Topic:
        try:
            # Pruned by the coordinators themselves (log start offset), never by time or size;
            # as in Kafka, the group and transaction logs are also compacted by the log cleaner
            # (their records are keyed state, the last per key wins), __share_group_state is not.
            policy = "compact" if name in COMPACTED_INTERNAL_TOPICS else "delete"
            return await self._topics.create_async(name, partitions, {
                "cleanup.policy": policy, "retention.ms": "-1", "retention.bytes": "-1",
                "segment.bytes": str(segment_bytes)}, now_ms())
        except KafkaError as exc:
            # Out of descriptors or space: nothing was created; as Kafka's FindCoordinator while
            # its topic cannot be created, the client is told to retry.
            raise KafkaError(ErrorCode.coordinator_not_available, exc.message) from exc

    async def append(self, partition: Partition, records: list[tuple[bytes, bytes | None]], *,
                     transaction: tuple[int, int] | None = None) -> int:
        """Append records as one batch; return the first offset once the flush policy is met.
        With `transaction` (producer id, epoch) the batch is transactional: it counts only once
        that producer's commit marker follows it (TxnOffsetCommit's offsets)."""
        now = now_ms()
        if transaction is None:
            buf = encode_batch(records, timestamp_ms=now)
        else:
            buf = encode_batch(records, timestamp_ms=now, producer_id=transaction[0], producer_epoch=transaction[1],
                               transactional=True)
        name = f"{partition.topic.name}-{partition.index}"
        try:
            # One batch we just encoded: its header needs no checks
            result = partition.log.append(buf, [read_header(buf, 0)], leader_epoch=partition.leader_epoch,
                                          now_ms=now)
        except OSError as exc:
            raise KafkaError(ErrorCode.not_coordinator, f"Could not append to {name}: {exc.strerror or exc}") from exc
        if transaction is not None:
            partition.producers.record(transaction[0], transaction[1], -1, -1, result.first_offset,
                                       result.last_offset, now, transactional=True)
        if result.rolled:
            self._durability.segment_rolled(partition)
        flushed = self._durability.after_append(partition, wait=True)
        if flushed is not None:
            try:
                await flushed
            except OSError as exc:
                raise KafkaError(ErrorCode.not_coordinator, f"Could not flush {name}: {exc.strerror or exc}") from exc
        return result.first_offset


def read_records(plog: PartitionLog, *, open_transactions: dict[int, list[tuple[int, bytes, bytes | None]]] | None = None,
                 ) -> Iterator[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every keyed record from the log start to the end, in the order
    they take effect: a transactional batch's records when its producer's commit marker comes
    (none if it aborts). Records of transactions still open at the end are left in
    `open_transactions` (producer id -> records) when given."""
    start = plog.log_start_offset
    pending: dict[int, list[tuple[int, bytes, bytes | None]]] = {}
    for data, h in replay_batches(plog, start, plog.high_watermark, what="internal topic"):
        batch = memoryview(data)[h.position:h.position + h.size]
        if h.is_control:
            try:
                kind, _epoch = read_marker(batch)
            except InvalidRecordError:
                continue
            held = pending.pop(h.producer_id, [])
            if kind == COMMIT_MARKER:
                yield from held
            continue
        records = [(off, key, value) for off, key, value in iter_records(batch) if off >= start and key is not None]
        if h.is_transactional:
            pending.setdefault(h.producer_id, []).extend(records)
        else:
            yield from records
    if open_transactions is not None:
        for pid, held in pending.items():
            open_transactions.setdefault(pid, []).extend(held)
