"""The persister boundary between share-partition leaders and the share coordinator: Kafka's
five operations (initialize, read, write, delete, read summary) as async calls. The leader only
talks to this interface, so where and how the state is kept can change underneath it."""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from broker.flusher import now_ms
from broker.share_state.store import PersisterError, ReadResult, ShareStateStore, StateBatch, Summary

__all__ = ["SharePersister", "PersisterError", "ReadResult", "StateBatch", "Summary"]


class SharePersister:
    def __init__(self, topics: Any, store: ShareStateStore | None = None) -> None:
        self._topics = topics
        self.store = store or ShareStateStore()

    def _check_partition(self, topic_id: uuid.UUID, partition: int) -> None:
        topic = self._topics.get_by_id(topic_id)
        if topic is None or not 0 <= partition < len(topic.partitions):
            raise PersisterError(ErrorCode.unknown_topic_or_partition,
                                 f"Topic {topic_id} partition {partition} does not exist.")

    async def initialize(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
                         start_offset: int) -> None:
        self._check_partition(topic_id, partition)
        self.store.initialize((group_id, topic_id, partition), state_epoch, start_offset, now_ms())

    async def read(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int) -> ReadResult:
        self._check_partition(topic_id, partition)
        result, _moved = self.store.read((group_id, topic_id, partition), leader_epoch)
        return result

    async def write(self, group_id: str, topic_id: uuid.UUID, partition: int, *, state_epoch: int,
                    leader_epoch: int, start_offset: int, delivery_complete_count: int,
                    batches: list[StateBatch]) -> None:
        self._check_partition(topic_id, partition)
        self.store.write((group_id, topic_id, partition), state_epoch=state_epoch, leader_epoch=leader_epoch,
                         start_offset=start_offset, delivery_complete_count=delivery_complete_count,
                         batches=batches, now_ms=now_ms())

    async def delete(self, group_id: str, topic_id: uuid.UUID, partition: int) -> None:
        self.store.delete((group_id, topic_id, partition))

    async def read_summary(self, group_id: str, topic_id: uuid.UUID, partition: int) -> Summary:
        return self.store.summary((group_id, topic_id, partition))

    def state_epoch(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int | None:
        state = self.store.states.get((group_id, topic_id, partition))
        return state.state_epoch if state else None
