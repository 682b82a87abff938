"""The persister seam: the five operations a share-partition leader and the group coordinator use
to keep share state durable (Kafka's Persister interface). The share coordinator
(``broker.share_state.coordinator.ShareCoordinator``) is the implementation; tests substitute
persisters that fail, fence or delay."""

from __future__ import annotations

import uuid
from typing import Protocol

from sharebroker.broker.share_state.store import ReadResult, StateBatch, Summary


class Persister(Protocol):
    async def initialize(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
                         start_offset: int) -> None: ...

    async def read(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int) -> ReadResult: ...

    async def write(self, group_id: str, topic_id: uuid.UUID, partition: int, *, state_epoch: int,
                    leader_epoch: int, start_offset: int, delivery_complete_count: int,
                    batches: list[StateBatch]) -> None: ...

    async def delete(self, group_id: str, topic_id: uuid.UUID, partition: int) -> None: ...

    async def read_summary(self, group_id: str, topic_id: uuid.UUID, partition: int) -> Summary: ...


__all__ = ["Persister"]
