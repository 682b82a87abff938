"""SyncGroup (14) v0–5: the leader hands in the assignment; every member gets its own part once
it is persisted."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import Op, refuse_group
from sharebroker.broker.groups.classic_group import SyncResult
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker


@api(14)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    if (denied := refuse_group(broker, conn, req, Op.READ, body.group_id)) is not None:
        return denied
    v = req.api_version
    protocol_type = getattr(body, "protocol_type", None)
    protocol_name = getattr(body, "protocol_name", None)
    if v >= 5 and (protocol_type is None or protocol_name is None):
        result = SyncResult(ErrorCode.inconsistent_group_protocol)  # mandatory from v5
    elif broker.group_type(body.group_id) == "consumer":  # a classic member of a consumer group
        result = await broker.consumer_groups.classic_sync(
            group_id=body.group_id, member_id=body.member_id,
            group_instance_id=getattr(body, "group_instance_id", None), generation_id=body.generation_id,
            protocol_type=protocol_type, protocol_name=protocol_name,
            assignments={a.member_id: bytes(a.assignment) for a in body.assignments})
    else:
        result = await broker.classic_groups.sync(
            group_id=body.group_id, member_id=body.member_id,
            group_instance_id=getattr(body, "group_instance_id", None), generation_id=body.generation_id,
            protocol_type=protocol_type, protocol_name=protocol_name,
            assignments={a.member_id: bytes(a.assignment) for a in body.assignments})
    return build(response_class(14, v), {
        "throttle_time": 0, "error_code": result.error, "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name, "assignment": result.assignment})
