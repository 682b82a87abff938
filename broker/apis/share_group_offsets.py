"""DescribeShareGroupOffsets (90) v0–1, AlterShareGroupOffsets (91) v0 and
DeleteShareGroupOffsets (92) v0: the admin side of share groups (share-groups-spec §11)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import (
    GROUP_DENIED,
    TOPIC_DENIED,
    Op,
    Res,
    allows,
    refuse_group,
    topics_allowed,
)

from sharebroker.protocol.codec import DecodedRequest, build, response_class
from sharebroker.protocol.errors import KafkaError

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker


@api(90)
async def describe(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    groups = []
    for g in req.body.groups:
        entry: dict[str, Any] = {"group_id": g.group_id, "topics": (), "error_code": ErrorCode.none,
                                 "error_message": None}
        if not allows(broker, conn, Op.DESCRIBE, Res.GROUP, g.group_id):
            entry.update(error_code=ErrorCode.group_authorization_failed, error_message=GROUP_DENIED)
        elif not g.group_id:
            entry.update(error_code=ErrorCode.invalid_group_id, error_message="The group id can't be empty.")
        elif broker.group_type(g.group_id) not in (None, "share"):
            entry.update(error_code=ErrorCode.group_id_not_found,
                         error_message=f"Group {g.group_id} is not a share group.")
        else:
            topics = None if g.topics is None else [(t.topic_name, list(t.partitions)) for t in g.topics]
            described = await broker.share_groups.describe_offsets(g.group_id, topics)
            visible = topics_allowed(broker, conn, Op.DESCRIBE, (t["topic_name"] for t in described))
            if visible is not None:
                # as Kafka: all-topics answers leave out what the principal may not describe; named
                # topics are answered TOPIC_AUTHORIZATION_FAILED in each partition
                described = [t if t["topic_name"] in visible else {**t, "partitions": [
                    {**p, "start_offset": -1, "leader_epoch": -1, "lag": -1,
                     "error_code": ErrorCode.topic_authorization_failed, "error_message": TOPIC_DENIED}
                    for p in t["partitions"]]}
                    for t in described if t["topic_name"] in visible or topics is not None]
            entry["topics"] = described
        groups.append(entry)
    return build(response_class(90, req.api_version), {"throttle_time": 0, "groups": groups})


@api(91)
async def alter(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    cls = response_class(91, req.api_version)
    if (denied := refuse_group(broker, conn, req, Op.READ, body.group_id)) is not None:
        return denied
    readable = topics_allowed(broker, conn, Op.READ, (t.topic_name for t in body.topics))
    offsets = {t.topic_name: {p.partition_index: p.start_offset for p in t.partitions} for t in body.topics
               if readable is None or t.topic_name in readable}
    refused = [t for t in body.topics if readable is not None and t.topic_name not in readable]
    try:
        results = await broker.share_groups.alter_offsets(body.group_id, offsets) if offsets or not refused else {}
    except KafkaError as exc:
        return build(cls, {"throttle_time": 0, "error_code": exc.code, "error_message": exc.message, "responses": ()})
    responses: list[dict[str, Any]] = [
        {"topic_name": t.topic_name, "topic_id": None, "partitions": [
            {"partition_index": p.partition_index, "error_code": ErrorCode.topic_authorization_failed,
             "error_message": TOPIC_DENIED} for p in t.partitions]} for t in refused]
    for name, parts in results.items():
        topic = broker.topics.get(name)
        responses.append({"topic_name": name, "topic_id": topic.topic_id if topic else None, "partitions": [
            {"partition_index": index, "error_code": code, "error_message": message}
            for index, (code, message) in sorted(parts.items())]})
    return build(cls, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
                       "responses": responses})


@api(92)
async def delete(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    cls = response_class(92, req.api_version)
    if (denied := refuse_group(broker, conn, req, Op.DELETE, body.group_id)) is not None:
        return denied
    readable = topics_allowed(broker, conn, Op.READ, (t.topic_name for t in body.topics))
    names = [t.topic_name for t in body.topics if readable is None or t.topic_name in readable]
    refused = [t.topic_name for t in body.topics if readable is not None and t.topic_name not in readable]
    try:
        results = await broker.share_groups.delete_offsets(body.group_id, names) if names or not refused else {}
    except KafkaError as exc:
        return build(cls, {"throttle_time": 0, "error_code": exc.code, "error_message": exc.message, "responses": ()})
    return build(cls, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "responses": [
        {"topic_name": name, "topic_id": None, "error_code": ErrorCode.topic_authorization_failed,
         "error_message": TOPIC_DENIED} for name in refused] + [
        {"topic_name": name, "topic_id": tid, "error_code": code, "error_message": message}
        for name, (code, message, tid) in results.items()]})
