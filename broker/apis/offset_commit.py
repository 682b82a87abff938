"""OffsetCommit (8) v2–10: committed offsets of a classic group (generation checked), of a consumer
group of the KIP-848 protocol (member id and member epoch checked by its coordinator), or, with
generation -1 and no member id, of a group without members (admin tools, manual assignment).
v10 names topics by id."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import Op, refuse_group, topics_allowed
from sharebroker.broker.structured_log import get_logger
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

log = get_logger("sharebroker.groups")


@api(8)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    if (denied := refuse_group(broker, conn, req, Op.READ, body.group_id)) is not None:
        return denied
    by_id = req.api_version >= 10
    names: dict[Any, str | None] = {}
    for t in body.topics:
        if by_id:
            topic = broker.topics.get_by_id(t.topic_id)
            names[t.topic_id] = topic.name if topic is not None else None
        else:
            names[t.name] = t.name
    errors: dict[tuple[str, int], ErrorCode] = {}
    readable = topics_allowed(broker, conn, Op.READ, names.values())
    offsets = [(name, p.partition_index, p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                p.committed_metadata)
               for t in body.topics if (name := names[t.topic_id if by_id else t.name]) is not None
               and (readable is None or name in readable)
               for p in t.partitions]
    member_epoch = body.generation_id_or_member_epoch
    if broker.group_type(body.group_id) == "consumer":
        refused = broker.consumer_groups.validate_offset_commit(
            body.group_id, body.member_id, getattr(body, "group_instance_id", None), member_epoch, req.api_version)
        if refused is None:
            errors = await broker.classic_groups.store_offsets(body.group_id, offsets)
        else:
            log.info("consumer group offset commit refused", group=body.group_id, member=body.member_id,
                     epoch=member_epoch, error=refused[0].name, message=refused[1])
            errors = {(o[0], o[1]): refused[0] for o in offsets}
    else:
        errors = await broker.classic_groups.commit_offsets(
            group_id=body.group_id, member_id=body.member_id,
            group_instance_id=getattr(body, "group_instance_id", None),
            generation_id=member_epoch, offsets=offsets, version=req.api_version)
    topics = []
    for t in body.topics:
        key = t.topic_id if by_id else t.name
        name = names[key]
        partitions = [{"partition_index": p.partition_index,
                       "error_code": ErrorCode.unknown_topic_id if name is None
                       else ErrorCode.topic_authorization_failed if readable is not None and name not in readable
                       else errors[(name, p.partition_index)]}
                      for p in t.partitions]
        topics.append({"topic_id": t.topic_id, "partitions": partitions} if by_id
                      else {"name": t.name, "partitions": partitions})
    return build(response_class(8, req.api_version), {"throttle_time": 0, "topics": topics})
