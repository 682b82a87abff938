"""DescribeShareGroupOffsets (90) v0–1, AlterShareGroupOffsets (91) v0 and
DeleteShareGroupOffsets (92) v0: the admin side of share groups (share-groups-spec §11)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api

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
        if not g.group_id:
            entry.update(error_code=ErrorCode.invalid_group_id, error_message="The group id can't be empty.")
        elif broker.group_type(g.group_id) not in (None, "share"):
            entry.update(error_code=ErrorCode.group_id_not_found,
                         error_message=f"Group {g.group_id} is not a share group.")
        else:
            topics = None if g.topics is None else [(t.topic_name, list(t.partitions)) for t in g.topics]
            entry["topics"] = await broker.share_groups.describe_offsets(g.group_id, topics)
        groups.append(entry)
    return build(response_class(90, req.api_version), {"throttle_time": 0, "groups": groups})


@api(91)
async def alter(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    cls = response_class(91, req.api_version)
    offsets = {t.topic_name: {p.partition_index: p.start_offset for p in t.partitions} for t in body.topics}
    try:
        results = await broker.share_groups.alter_offsets(body.group_id, offsets)
    except KafkaError as exc:
        return build(cls, {"throttle_time": 0, "error_code": exc.code, "error_message": exc.message, "responses": ()})
    responses = []
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
    try:
        results = await broker.share_groups.delete_offsets(body.group_id, [t.topic_name for t in body.topics])
    except KafkaError as exc:
        return build(cls, {"throttle_time": 0, "error_code": exc.code, "error_message": exc.message, "responses": ()})
    return build(cls, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "responses": [
        {"topic_name": name, "topic_id": tid, "error_code": code, "error_message": message}
        for name, (code, message, tid) in results.items()]})
