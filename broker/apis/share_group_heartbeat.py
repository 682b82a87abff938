"""ShareGroupHeartbeat (76) v1: join, heartbeat and leave a share group; the answer carries the
member's assignment as topic ids."""

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


@api(76)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    cls = response_class(76, req.api_version)
    body = req.body
    if (denied := refuse_heartbeat(broker, conn, req)) is not None:
        return denied
    try:
        result = await broker.share_groups.heartbeat(body, conn)
    except KafkaError as exc:
        log.warning("share group heartbeat refused", conn=conn.id, group=body.group_id, member=body.member_id,
                    epoch=body.member_epoch, error=exc.code.name, message=exc.message)
        return build(cls, {"throttle_time": 0, "error_code": exc.code, "error_message": exc.message,
                           "member_id": None, "member_epoch": 0, "heartbeat_interval": 0, "assignment": None})
    return build(cls, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, **result})
