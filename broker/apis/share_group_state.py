"""The share coordinator's state RPCs, keys 83–87 (InitializeShareGroupState,
ReadShareGroupState, WriteShareGroupState, DeleteShareGroupState, ReadShareGroupStateSummary).
Clients never send them; Kafka's brokers do, and tools can. They call the same share coordinator
the in-process share-partition leaders use."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import CLUSTER_DENIED, Op, Res, allows
from sharebroker.broker.security.acl_store import CLUSTER_NAME
from sharebroker.broker.share_state.store import StateBatch
from sharebroker.protocol.codec import DecodedRequest, build, response_class
from sharebroker.protocol.errors import KafkaError

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker


async def _per_partition(broker: Broker, conn: Connection, req: DecodedRequest,
                         op: Callable[[Any, str, Any, Any], Awaitable[dict[str, Any]]]) -> Any:
    body = req.body
    results = []
    # the share coordinator's inter-broker APIs need CLUSTER_ACTION, as in Kafka
    permitted = allows(broker, conn, Op.CLUSTER_ACTION, Res.CLUSTER, CLUSTER_NAME)
    for t in body.topics:
        parts = []
        for p in t.partitions:
            entry: dict[str, Any] = {"partition": p.partition, "error_code": ErrorCode.none, "error_message": None}
            try:
                if not permitted:
                    raise KafkaError(ErrorCode.cluster_authorization_failed, CLUSTER_DENIED)
                if not body.group_id:
                    raise KafkaError(ErrorCode.invalid_request, "Group id can't be empty.")
                entry.update(await op(broker.share_persister, body.group_id, t.topic_id, p))
            except KafkaError as exc:
                entry.update(error_code=exc.code, error_message=exc.message)
            parts.append(entry)
        results.append({"topic_id": t.topic_id, "partitions": parts})
    return build(response_class(req.api_key, req.api_version), {"results": results})


def _batches(items: Any) -> list[StateBatch]:
    return [StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in items]


@api(83)
async def initialize(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    async def op(coord: Any, group: str, topic_id: Any, p: Any) -> dict[str, Any]:
        await coord.initialize(group, topic_id, p.partition, p.state_epoch, p.start_offset)
        return {}
    return await _per_partition(broker, conn, req, op)


@api(84)
async def read(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    async def op(coord: Any, group: str, topic_id: Any, p: Any) -> dict[str, Any]:
        r = await coord.read(group, topic_id, p.partition, p.leader_epoch)
        return {"state_epoch": r.state_epoch, "start_offset": r.start_offset, "state_batches": [
            {"first_offset": b.first_offset, "last_offset": b.last_offset, "delivery_state": b.delivery_state,
             "delivery_count": b.delivery_count} for b in r.batches]}
    return await _per_partition(broker, conn, req, op)


@api(85)
async def write(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    async def op(coord: Any, group: str, topic_id: Any, p: Any) -> dict[str, Any]:
        await coord.write(group, topic_id, p.partition, state_epoch=p.state_epoch, leader_epoch=p.leader_epoch,
                          start_offset=p.start_offset,
                          delivery_complete_count=getattr(p, "delivery_complete_count", -1),
                          batches=_batches(p.state_batches))
        return {}
    return await _per_partition(broker, conn, req, op)


@api(86)
async def delete(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    async def op(coord: Any, group: str, topic_id: Any, p: Any) -> dict[str, Any]:
        await coord.delete(group, topic_id, p.partition)
        return {}
    return await _per_partition(broker, conn, req, op)


@api(87)
async def read_summary(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    async def op(coord: Any, group: str, topic_id: Any, p: Any) -> dict[str, Any]:
        s = await coord.read_summary(group, topic_id, p.partition)
        return {"state_epoch": s.state_epoch, "leader_epoch": s.leader_epoch, "start_offset": s.start_offset,
                "delivery_complete_count": s.delivery_complete_count}
    return await _per_partition(broker, conn, req, op)
