"""The persister of a worker (worker.processes > 1): share state whose `__share_group_state`
partition this worker owns goes to its own share coordinator; the rest goes to the owning worker
with the share coordinator's wire APIs (Initialize/Read/Write/Delete ShareGroupState and
ReadShareGroupStateSummary, keys 83–87), as Kafka's share-partition leaders reach the share
coordinator on another broker. Errors come back as the KafkaError the owner answered."""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.share_state import records as rec
from sharebroker.broker.share_state.coordinator import STATE_TOPIC, ShareCoordinator
from sharebroker.broker.share_state.store import ReadResult, StateBatch, Summary
from sharebroker.broker.workers import WorkerIdentity, owner_index
from sharebroker.broker.workers.peer import Peer
from sharebroker.protocol.errors import KafkaError


class RoutingPersister:
    def __init__(self, local: ShareCoordinator, identity: WorkerIdentity, peers: dict[int, Peer]) -> None:
        self.local = local
        self.identity = identity
        self.peers = peers  # worker index -> connection

    def _owner(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int:
        index = rec.state_partition(group_id, topic_id, partition, self.local.num_partitions)
        return owner_index(STATE_TOPIC, index, self.identity.count)

    async def _call(self, owner: int, key: int, version: int, group_id: str, topic_id: uuid.UUID,
                    partition: dict[str, Any]) -> Any:
        resp = await self.peers[owner].request(key, version, {
            "group_id": group_id, "topics": [{"topic_id": topic_id, "partitions": [partition]}]})
        p = resp.results[0].partitions[0]
        if p.error_code != ErrorCode.none:
            raise KafkaError(p.error_code, p.error_message or "")
        return p

    async def initialize(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
                         start_offset: int) -> None:
        owner = self._owner(group_id, topic_id, partition)
        if owner == self.identity.index:
            return await self.local.initialize(group_id, topic_id, partition, state_epoch, start_offset)
        await self._call(owner, 83, 0, group_id, topic_id,
                         {"partition": partition, "state_epoch": state_epoch, "start_offset": start_offset})

    async def read(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int) -> ReadResult:
        owner = self._owner(group_id, topic_id, partition)
        if owner == self.identity.index:
            return await self.local.read(group_id, topic_id, partition, leader_epoch)
        p = await self._call(owner, 84, 0, group_id, topic_id, {"partition": partition, "leader_epoch": leader_epoch})
        return ReadResult(int(p.state_epoch), int(p.start_offset),
                          [StateBatch(int(b.first_offset), int(b.last_offset), int(b.delivery_state),
                                      int(b.delivery_count)) for b in p.state_batches])

    async def write(self, group_id: str, topic_id: uuid.UUID, partition: int, *, state_epoch: int,
                    leader_epoch: int, start_offset: int, delivery_complete_count: int,
                    batches: list[StateBatch]) -> None:
        owner = self._owner(group_id, topic_id, partition)
        if owner == self.identity.index:
            return await self.local.write(group_id, topic_id, partition, state_epoch=state_epoch,
                                          leader_epoch=leader_epoch, start_offset=start_offset,
                                          delivery_complete_count=delivery_complete_count, batches=batches)
        await self._call(owner, 85, 1, group_id, topic_id, {
            "partition": partition, "state_epoch": state_epoch, "leader_epoch": leader_epoch,
            "start_offset": start_offset, "delivery_complete_count": delivery_complete_count,
            "state_batches": [{"first_offset": b.first_offset, "last_offset": b.last_offset,
                               "delivery_state": b.delivery_state, "delivery_count": b.delivery_count}
                              for b in batches]})

    async def delete(self, group_id: str, topic_id: uuid.UUID, partition: int) -> None:
        owner = self._owner(group_id, topic_id, partition)
        if owner == self.identity.index:
            return await self.local.delete(group_id, topic_id, partition)
        await self._call(owner, 86, 0, group_id, topic_id, {"partition": partition})

    async def read_summary(self, group_id: str, topic_id: uuid.UUID, partition: int) -> Summary:
        owner = self._owner(group_id, topic_id, partition)
        if owner == self.identity.index:
            return await self.local.read_summary(group_id, topic_id, partition)
        p = await self._call(owner, 87, 1, group_id, topic_id, {"partition": partition, "leader_epoch": -1})
        return Summary(int(p.state_epoch), int(p.leader_epoch), int(p.start_offset),
                       int(getattr(p, "delivery_complete_count", -1)))

    # The broker starts, stops and loads its share coordinator through its persister.
    def __getattr__(self, name: str) -> Any:
        return getattr(self.local, name)
