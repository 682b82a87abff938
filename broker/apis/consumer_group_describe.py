"""ConsumerGroupDescribe (69) v0–1: consumer groups of the KIP-848 protocol with their members'
current and target assignments."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.consumer_group_heartbeat import consumer_protocol_enabled
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

INT32_MIN = -(2**31)
# READ 3, DELETE 6, DESCRIBE 8 on a GROUP resource
GROUP_OPERATIONS = sum(1 << op for op in (3, 6, 8))


@api(69)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    operations = GROUP_OPERATIONS if body.include_authorized_operations else INT32_MIN
    groups: list[dict[str, Any]] = []
    if not consumer_protocol_enabled(broker):
        groups = [{"error_code": ErrorCode.unsupported_version, "error_message": None, "group_id": group_id,
                   "group_state": "", "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "", "members": [],
                   "authorized_operations": INT32_MIN} for group_id in body.group_ids]
        return build(response_class(69, req.api_version), {"throttle_time": 0, "groups": groups})
    for group_id in body.group_ids:
        if not group_id:
            entry: dict[str, Any] = {"error_code": ErrorCode.invalid_group_id, "error_message": "Group id can't be empty.",
                                     "group_id": group_id, "group_state": "Dead", "group_epoch": -1,
                                     "assignment_epoch": -1, "assignor_name": "", "members": []}
        else:
            entry = broker.consumer_groups.describe(group_id)
        entry["authorized_operations"] = operations
        groups.append(entry)
    return build(response_class(69, req.api_version), {"throttle_time": 0, "groups": groups})
