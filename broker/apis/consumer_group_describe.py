"""ConsumerGroupDescribe (69) v0–1: consumer groups of the KIP-848 protocol with their members'
current and target assignments."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import INT32_MIN, Op, Res, allows, hide_unauthorized_topics, operations
from sharebroker.broker.apis.consumer_group_heartbeat import consumer_protocol_enabled
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker



@api(69)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    groups: list[dict[str, Any]] = []
    if not consumer_protocol_enabled(broker):
        groups = [{"error_code": ErrorCode.unsupported_version, "error_message": None, "group_id": group_id,
                   "group_state": "", "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "", "members": [],
                   "authorized_operations": INT32_MIN} for group_id in body.group_ids]
        return build(response_class(69, req.api_version), {"throttle_time": 0, "groups": groups})
    for group_id in body.group_ids:
        if not allows(broker, conn, Op.DESCRIBE, Res.GROUP, group_id):
            groups.append({"error_code": ErrorCode.group_authorization_failed, "error_message": None,
                           "group_id": group_id, "group_state": "", "group_epoch": 0, "assignment_epoch": 0,
                           "assignor_name": "", "members": [], "authorized_operations": INT32_MIN})
            continue
        if not group_id:
            entry: dict[str, Any] = {"error_code": ErrorCode.invalid_group_id, "error_message": "Group id can't be empty.",
                                     "group_id": group_id, "group_state": "Dead", "group_epoch": -1,
                                     "assignment_epoch": -1, "assignor_name": "", "members": []}
        else:
            entry = broker.consumer_groups.describe(group_id)
        entry["authorized_operations"] = (
            operations(broker, conn, body.include_authorized_operations, Res.GROUP, group_id)
            if entry["error_code"] == ErrorCode.none else INT32_MIN)
        groups.append(entry)
    hide_unauthorized_topics(broker, conn, groups)
    return build(response_class(69, req.api_version), {"throttle_time": 0, "groups": groups})
