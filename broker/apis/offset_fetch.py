"""OffsetFetch (9) v1–10: committed offsets of one group (v1–7) or several (v8+); null topics
(v2+) means every committed partition. RequireStable (v7+) waits for commits being written. From
v9 a consumer-group member names itself (member id and epoch), checked as Kafka does; v10 names
topics by id."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import Op, Res, allows, refuse_group, topics_allowed
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker


async def _group(broker: Broker, conn: Connection, group_id: str, topics: Any, require_stable: bool,
                 by_id: bool) -> list[dict[str, Any]]:
    unknown_ids: list[Any] = []
    if topics is None:
        wanted = None
    elif by_id:
        wanted = []
        for t in topics:
            topic = broker.topics.get_by_id(t.topic_id)
            if topic is None:
                unknown_ids.append(t)
            else:
                wanted.append((topic.name, list(t.partition_indexes)))
    else:
        wanted = [(t.name, list(t.partition_indexes)) for t in topics]
    fetched = await broker.classic_groups.fetch_offsets(group_id, wanted, require_stable)
    # as Kafka: offsets of topics the principal may not describe are left out of an all-topics
    # answer, and answered TOPIC_AUTHORIZATION_FAILED when asked for by name
    described = topics_allowed(broker, conn, Op.DESCRIBE, (name for name, _ in fetched))
    out = []
    for name, rows in fetched:
        if described is not None and name not in described:
            if wanted is None:
                continue
            rows = [(p, -1, -1, "", ErrorCode.topic_authorization_failed) for p, *_ in rows]
        partitions = [{"partition_index": p, "committed_offset": offset, "committed_leader_epoch": epoch,
                       "metadata": meta, "error_code": code} for p, offset, epoch, meta, code in rows]
        if by_id:
            topic = broker.topics.get(name)
            if topic is None:
                continue  # offsets of a topic gone since: no id to name it by
            out.append({"topic_id": topic.topic_id, "partitions": partitions})
        else:
            out.append({"name": name, "partitions": partitions})
    for t in unknown_ids:
        out.append({"topic_id": t.topic_id, "partitions": [
            {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
             "error_code": ErrorCode.unknown_topic_id} for p in t.partition_indexes]})
    return out


@api(9)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    v = req.api_version
    require_stable = bool(getattr(body, "require_stable", False))
    cls = response_class(9, v)
    if v >= 8:
        groups = []
        for g in body.groups:
            refused: tuple[ErrorCode, str | None] | None = None
            if not allows(broker, conn, Op.DESCRIBE, Res.GROUP, g.group_id):
                refused = (ErrorCode.group_authorization_failed, None)
            elif broker.group_type(g.group_id) == "consumer":
                refused = broker.consumer_groups.validate_offset_fetch(
                    g.group_id, getattr(g, "member_id", None), getattr(g, "member_epoch", -1))
            if refused is not None:
                groups.append({"group_id": g.group_id, "error_code": refused[0], "topics": []})
                continue
            groups.append({"group_id": g.group_id, "error_code": ErrorCode.none,
                           "topics": await _group(broker, conn, g.group_id, g.topics, require_stable, v >= 10)})
        return build(cls, {"throttle_time": 0, "groups": groups})
    if (denied := refuse_group(broker, conn, req, Op.DESCRIBE, body.group_id)) is not None:
        return denied
    topics = await _group(broker, conn, body.group_id, body.topics, require_stable, False)
    return build(cls, {"throttle_time": 0, "error_code": ErrorCode.none, "topics": topics})
