"""ListGroups (16) v0–5 with the state (v4+) and type (v5+) filters."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import Op, Res
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker


@api(16)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    states = {s.lower() for s in getattr(body, "states_filter", ()) or ()}
    types = {t.lower() for t in getattr(body, "types_filter", ()) or ()}
    listed = []
    az = broker.authorizer
    # as Kafka: DESCRIBE on the cluster lists every group, else those the principal may describe
    every = az is None or az.allows_cluster(conn, Op.DESCRIBE, log_denied=False)
    for group_id, protocol_type, state, group_type in broker.list_groups():
        if states and state.lower() not in states:
            continue
        if not every and az is not None and not az.allows(conn, Op.DESCRIBE, Res.GROUP, group_id, log_denied=False):
            continue
        if types and group_type.lower() not in types:
            continue
        listed.append({"group_id": group_id, "protocol_type": protocol_type, "group_state": state,
                       "group_type": group_type})
    return build(response_class(16, req.api_version), {"throttle_time": 0, "error_code": ErrorCode.none,
                                                       "groups": listed})
