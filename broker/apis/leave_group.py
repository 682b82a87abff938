"""LeaveGroup (13) v0–5: one member (v0–2) or a batch of members by id or group.instance.id
(v3+) leave a classic group."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import Op, refuse_group
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker


@api(13)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    if (denied := refuse_group(broker, conn, req, Op.READ, body.group_id)) is not None:
        return denied
    v = req.api_version
    if v < 3:
        identities: list[tuple[str, str | None]] = [(body.member_id, None)]
    else:
        identities = [(m.member_id, m.group_instance_id) for m in body.members]
    if broker.group_type(body.group_id) == "consumer":  # classic members of a consumer group
        top, results = await broker.consumer_groups.classic_leave(body.group_id, identities)
    else:
        top, results = broker.classic_groups.leave(body.group_id, identities)
    cls = response_class(13, v)
    if v < 3:
        code = top if top != ErrorCode.none else next((e for _, _, e in results if e != ErrorCode.none),
                                                       ErrorCode.none)
        return build(cls, {"throttle_time": 0, "error_code": code})
    return build(cls, {"throttle_time": 0, "error_code": top, "members": [
        {"member_id": m, "group_instance_id": i, "error_code": e} for m, i, e in results]})
