"""ConsumerGroupHeartbeat (68) v0–1: join, heartbeat and leave a consumer group of the KIP-848
protocol; the answer carries the member's epoch and, when it changed, its assignment as topic ids."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import refuse_heartbeat
from sharebroker.broker.structured_log import get_logger
from sharebroker.protocol.codec import DecodedRequest, build, response_class
from sharebroker.protocol.errors import KafkaError

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

log = get_logger("sharebroker.groups")


def consumer_protocol_enabled(broker: Broker) -> bool:
    """Kafka's isConsumerGroupProtocolEnabled: "consumer" in group.coordinator.rebalance.protocols."""
    return any(p.lower() == "consumer" for p in broker.config["group.coordinator.rebalance.protocols"])


@api(68)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    cls = response_class(68, req.api_version)
    body = req.body
    if not consumer_protocol_enabled(broker):
        # Kafka's KafkaApis: an error code alone, which clients turn into "revert to the classic protocol"
        log.warning("consumer group heartbeat refused", conn=conn.id, group=body.group_id, member=body.member_id,
                    error=ErrorCode.unsupported_version.name,
                    message="the consumer rebalance protocol is not in group.coordinator.rebalance.protocols")
        return build(cls, {"throttle_time": 0, "error_code": ErrorCode.unsupported_version, "error_message": None,
                           "member_id": None, "member_epoch": 0, "heartbeat_interval": 0, "assignment": None})
    if (denied := refuse_heartbeat(broker, conn, req)) is not None:
        return denied
    try:
        result = await broker.consumer_groups.heartbeat(body, req.api_version, conn)
    except KafkaError as exc:
        log.warning("consumer group heartbeat refused", conn=conn.id, group=body.group_id, member=body.member_id,
                    epoch=body.member_epoch, error=exc.code.name, message=exc.message)
        return build(cls, {"throttle_time": 0, "error_code": exc.code, "error_message": exc.message,
                           "member_id": None, "member_epoch": 0, "heartbeat_interval": 0, "assignment": None})
    return build(cls, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, **result})
