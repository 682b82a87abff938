"""ShareGroupDescribe (77) v1."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import INT32_MIN, Op, Res, allows, hide_unauthorized_topics, operations
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker



@api(77)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    groups = []
    for group_id in body.group_ids:
        entry: dict[str, Any] = {"error_code": ErrorCode.none, "error_message": None, "group_id": group_id,
                                 "group_state": "Dead", "group_epoch": -1, "assignment_epoch": -1,
                                 "assignor_name": "simple", "members": (), "authorized_operations": INT32_MIN}
        group = broker.share_groups.groups.get(group_id)
        if not allows(broker, conn, Op.DESCRIBE, Res.GROUP, group_id):
            entry.update(error_code=ErrorCode.group_authorization_failed, group_state="", group_epoch=0,
                         assignment_epoch=0, assignor_name="")
        elif not group_id:
            entry.update(error_code=ErrorCode.invalid_group_id, error_message="Group id can't be empty.")
        elif group is None:
            kind = broker.group_type(group_id)
            message = f"Group {group_id} is not a share group." if kind else f"Group {group_id} not found."
            entry.update(error_code=ErrorCode.group_id_not_found, error_message=message)
        else:
            names = {t.topic_id: t.name for t in broker.topics.by_name.values()}
            entry.update(group_state=group.state, group_epoch=group.epoch, assignment_epoch=group.assignment_epoch,
                         members=[{
                             "member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.epoch,
                             "client_id": m.client_id, "client_host": m.client_host,
                             "subscribed_topic_names": list(m.subscribed),
                             "assignment": {"topic_partitions": [
                                 {"topic_id": tid, "topic_name": names.get(tid, ""), "partitions": sorted(ps)}
                                 for tid, ps in m.assignment.items()]},
                         } for m in group.members.values()])
        if entry["error_code"] == ErrorCode.none:
            entry["authorized_operations"] = operations(broker, conn, body.include_authorized_operations,
                                                        Res.GROUP, group_id)
        groups.append(entry)
    hide_unauthorized_topics(broker, conn, groups)
    return build(response_class(77, req.api_version), {"throttle_time": 0, "groups": groups})
