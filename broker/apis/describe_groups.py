"""DescribeGroups (15) v0–6: state, protocol and members of classic groups (metadata only when
Stable). Unknown ids and other groups' ids are Dead, with GROUP_ID_NOT_FOUND from v6."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.groups.classic_coordinator import member_rows
from sharebroker.broker.groups.classic_group import STABLE
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

INT32_MIN = -(2**31)
# READ 3, DELETE 6, DESCRIBE 8 on a GROUP resource
GROUP_OPERATIONS = sum(1 << op for op in (3, 6, 8))


@api(15)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    v = req.api_version
    include_ops = bool(getattr(body, "include_authorized_operations", False))
    groups = []
    for group_id in body.groups:
        group = broker.classic_groups.describe(group_id)
        if group is None:
            kind = broker.group_type(group_id)
            message = f"Group {group_id} is not a classic group." if kind else f"Group {group_id} not found."
            groups.append({"error_code": ErrorCode.group_id_not_found if v >= 6 else ErrorCode.none,
                           "error_message": message if v >= 6 else None, "group_id": group_id,
                           "group_state": "Dead", "protocol_type": "", "protocol_data": "", "members": [],
                           "authorized_operations": INT32_MIN})
            continue
        groups.append({
            "error_code": ErrorCode.none, "error_message": None, "group_id": group_id, "group_state": group.state,
            "protocol_type": group.protocol_type or "",
            "protocol_data": (group.protocol_name or "") if group.state == STABLE else "",
            "members": [{"member_id": m, "group_instance_id": i, "client_id": c, "client_host": h,
                         "member_metadata": meta, "member_assignment": assignment}
                        for m, i, c, h, meta, assignment in member_rows(group)],
            "authorized_operations": GROUP_OPERATIONS if include_ops else INT32_MIN})
    return build(response_class(15, v), {"throttle_time": 0, "groups": groups})
