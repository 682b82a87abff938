"""DescribeGroups (15) v0–6: state, protocol and members of classic groups (metadata only when
Stable). Unknown ids and other groups' ids are Dead, with GROUP_ID_NOT_FOUND from v6."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import INT32_MIN, Op, Res, allows, operations
from sharebroker.broker.groups.classic_coordinator import member_rows
from sharebroker.broker.groups.classic_group import STABLE
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker



@api(15)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    v = req.api_version
    include_ops = bool(getattr(body, "include_authorized_operations", False))
    groups = []
    for group_id in body.groups:
        if not allows(broker, conn, Op.DESCRIBE, Res.GROUP, group_id):
            groups.append({"error_code": ErrorCode.group_authorization_failed, "error_message": None,
                           "group_id": group_id, "group_state": "", "protocol_type": "", "protocol_data": "",
                           "members": [], "authorized_operations": INT32_MIN})
            continue
        group = broker.classic_groups.describe(group_id)
        if group is None:
            kind = broker.group_type(group_id)
            message = f"Group {group_id} is not a classic group." if kind else f"Group {group_id} not found."
            groups.append({"error_code": ErrorCode.group_id_not_found if v >= 6 else ErrorCode.none,
                           "error_message": message if v >= 6 else None, "group_id": group_id,
                           "group_state": "Dead", "protocol_type": "", "protocol_data": "", "members": [],
                           # as Kafka: filled in for every group answered without an error
                           "authorized_operations": operations(broker, conn, include_ops and v < 6, Res.GROUP,
                                                               group_id)})
            continue
        groups.append({
            "error_code": ErrorCode.none, "error_message": None, "group_id": group_id, "group_state": group.state,
            "protocol_type": group.protocol_type or "",
            "protocol_data": (group.protocol_name or "") if group.state == STABLE else "",
            "members": [{"member_id": m, "group_instance_id": i, "client_id": c, "client_host": h,
                         "member_metadata": meta, "member_assignment": assignment}
                        for m, i, c, h, meta, assignment in member_rows(group)],
            "authorized_operations": operations(broker, conn, include_ops, Res.GROUP, group_id)})
    return build(response_class(15, v), {"throttle_time": 0, "groups": groups})
