"""Heartbeat (12) v0–4: keeps a classic group member's session; REBALANCE_IN_PROGRESS tells it to
rejoin."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import Op, refuse_group
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker


@api(12)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    if (denied := refuse_group(broker, conn, req, Op.READ, body.group_id)) is not None:
        return denied
    beat = (broker.consumer_groups.classic_heartbeat if broker.group_type(body.group_id) == "consumer"
            else broker.classic_groups.heartbeat)
    code = beat(group_id=body.group_id, member_id=body.member_id,
                group_instance_id=getattr(body, "group_instance_id", None), generation_id=body.generation_id)
    return build(response_class(12, req.api_version), {"throttle_time": 0, "error_code": code})
