"""JoinGroup (11) v0–9: join or rejoin a classic group; the answer is parked until the join phase
of the rebalance completes (the leader's answer carries every member's protocol metadata). A
consumer group answers a classic member at once, its member epoch as the generation."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import Op, refuse_group
from sharebroker.broker.structured_log import get_logger
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

log = get_logger("sharebroker.groups")


def ms(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    return int(value)


@api(11)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    if (denied := refuse_group(broker, conn, req, Op.READ, body.group_id)) is not None:
        return denied
    v = req.api_version
    session_timeout = ms(body.session_timeout)
    # v0 has no rebalance timeout: the session timeout plays both roles
    rebalance_timeout = session_timeout if v == 0 else ms(body.rebalance_timeout)
    if rebalance_timeout < 0:
        rebalance_timeout = session_timeout
    # A consumer group (KIP-848) takes classic members too: Kafka's upgrade path.
    join = (broker.consumer_groups.classic_join if broker.group_type(body.group_id) == "consumer"
            else broker.classic_groups.join)
    result = await join(
        group_id=body.group_id, member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None), client_id=req.client_id or "",
        client_host=conn.client_host, session_timeout_ms=session_timeout, rebalance_timeout_ms=rebalance_timeout,
        protocol_type=body.protocol_type, protocols=tuple((p.name, bytes(p.metadata)) for p in body.protocols),
        version=v)
    if result.error not in (ErrorCode.none, ErrorCode.member_id_required):
        log.info("join group refused", conn=conn.id, group=body.group_id, member=body.member_id,
                 error=result.error.name)
    return build(response_class(11, v), {
        "throttle_time": 0, "error_code": result.error, "generation_id": result.generation_id,
        "protocol_type": result.protocol_type,
        # ProtocolName is nullable from v7 only
        "protocol_name": result.protocol_name if v >= 7 else (result.protocol_name or ""),
        "leader": result.leader, "skip_assignment": result.skip_assignment, "member_id": result.member_id,
        "members": [{"member_id": m, "group_instance_id": i, "metadata": meta} for m, i, meta in result.members],
    })
