"""What the coordinators share about their internal topics (`__share_group_state`,
`__consumer_offsets`): creating them on first use, appending key/value records through the normal
log and flush policy, and reading every record back at start-up.

A write the disk refuses (a full disk, a failed fsync) raises KafkaError(NOT_COORDINATOR), the code
Kafka's coordinators answer for a storage error: the request that caused it is answered with it,
and the client looks the coordinator up again and retries instead of losing its connection."""

from __future__ import annotations

from collections.abc import Awaitable, Iterator
from typing import TYPE_CHECKING, Protocol

from sharebroker.broker.flusher import now_ms
from sharebroker.broker.replay import replay_batches
from sharebroker.broker.structured_log import get_logger
from sharebroker.protocol.errors import ErrorCode, KafkaError
from sharebroker.protocol.record_batch import encode_batch, iter_records, parse_batches
from sharebroker.storage import PartitionLog

if TYPE_CHECKING:
    from sharebroker.broker.topics import Partition, Topic, Topics

log = get_logger("sharebroker.internal_topics")


class AppendDurability(Protocol):
    """What follows an append on any partition (the broker's flush policy and segment-roll work)."""

    def after_append(self, partition: Partition, *, wait: bool) -> Awaitable[None] | None: ...

    def segment_rolled(self, partition: Partition) -> None: ...


class InternalLog(Protocol):
    """The seam the coordinators are built on: their topic, created on first use, and appends."""

    def get(self, name: str) -> Topic | None: ...

    def ensure(self, name: str, partitions: int, segment_bytes: int) -> Topic: ...

    async def append(self, partition: Partition, records: list[tuple[bytes, bytes | None]]) -> int: ...


class InternalTopics:
    """The broker's InternalLog: internal topics live in the normal topic table and log."""

    def __init__(self, topics: Topics, durability: AppendDurability) -> None:
        self._topics = topics
        self._durability = durability

    def get(self, name: str) -> Topic | None:
        return self._topics.get(name)

    def ensure(self, name: str, partitions: int, segment_bytes: int) -> Topic:
        topic = self._topics.get(name)
        if topic is None:
            # Pruned by the coordinators themselves (log start offset), never by time or size.
            topic = self._topics.create(name, partitions, {
                "cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1",
                "segment.bytes": str(segment_bytes)}, now_ms())
        return topic

    async def append(self, partition: Partition, records: list[tuple[bytes, bytes | None]]) -> int:
        """Append records as one batch; return the first offset once the flush policy is met."""
        buf = encode_batch(records, timestamp_ms=now_ms())
        name = f"{partition.topic.name}-{partition.index}"
        try:
            result = partition.log.append(buf, parse_batches(buf, verify_crc=False),
                                          leader_epoch=partition.leader_epoch, now_ms=now_ms())
        except OSError as exc:
            raise KafkaError(ErrorCode.not_coordinator, f"Could not append to {name}: {exc.strerror or exc}") from exc
        if result.rolled:
            self._durability.segment_rolled(partition)
        flushed = self._durability.after_append(partition, wait=True)
        if flushed is not None:
            try:
                await flushed
            except OSError as exc:
                raise KafkaError(ErrorCode.not_coordinator, f"Could not flush {name}: {exc.strerror or exc}") from exc
        return result.first_offset


def read_records(plog: PartitionLog) -> Iterator[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every keyed record from the log start to the end."""
    start = plog.log_start_offset
    for data, h in replay_batches(plog, start, plog.high_watermark, what="internal topic"):
        if h.is_control:
            continue  # a transaction marker (AddOffsetsToTxn put the partition in a transaction)
        for off, key, value in iter_records(memoryview(data)[h.position:h.position + h.size]):
            if off >= start and key is not None:
                yield off, key, value
