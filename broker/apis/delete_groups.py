"""DeleteGroups (42) v0–2 for share, classic and consumer groups: only empty groups can be deleted, a
consumer group with its committed offsets."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import GROUP_DENIED, Op, Res, allows
from sharebroker.broker.structured_log import get_logger
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

log = get_logger("sharebroker.groups")


@api(42)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    results = []
    for group_id in req.body.groups_names:
        kind = broker.group_type(group_id)
        code: ErrorCode
        message: str | None
        if not allows(broker, conn, Op.DELETE, Res.GROUP, group_id):
            code, message = ErrorCode.group_authorization_failed, GROUP_DENIED
        elif kind == "share":
            code, message = await broker.share_groups.delete_group(group_id)
        elif kind == "consumer":
            code, message = await broker.consumer_groups.delete_group(group_id)
            if code == ErrorCode.none:
                await broker.classic_groups.delete_all_offsets(group_id)
        elif kind is not None:
            code, message = await broker.classic_groups.delete_group(group_id)
        else:
            code, message = ErrorCode.group_id_not_found, f"Group {group_id} not found."
        if code != ErrorCode.none:
            log.info("group not deleted", group=group_id, error=code.name, message=message)
        results.append({"group_id": group_id, "error_code": code})  # DeleteGroups has no message field
    return build(response_class(42, req.api_version), {"throttle_time": 0, "results": results})
