"""OffsetDelete (47) v0: delete committed offsets of an empty classic group, or of topics a
consumer group no longer subscribes to."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import Op, refuse_group, topics_allowed
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker


@api(47)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    if (denied := refuse_group(broker, conn, req, Op.DELETE, body.group_id)) is not None:
        return denied
    readable = topics_allowed(broker, conn, Op.READ, (t.name for t in body.topics))
    refused = [(t.name, [p.partition_index for p in t.partitions]) for t in body.topics
               if readable is not None and t.name not in readable]
    wanted = [(t.name, [p.partition_index for p in t.partitions]) for t in body.topics
              if readable is None or t.name in readable]
    subscribed = None
    consumer_group = broker.consumer_groups.groups.get(body.group_id)
    if consumer_group is not None:
        subscribed = consumer_group.subscribed_topic_names().__contains__
    code, errors = await broker.classic_groups.delete_offsets(body.group_id, wanted, subscribed)
    topics = [{"name": name, "partitions": [{"partition_index": p, "error_code": ErrorCode.topic_authorization_failed}
                                            for p in partitions]} for name, partitions in refused]
    for name, partitions in wanted:
        rows = [{"partition_index": p, "error_code": errors[(name, p)]} for p in partitions if (name, p) in errors]
        if rows:
            topics.append({"name": name, "partitions": rows})
    return build(response_class(47, req.api_version),
                 {"error_code": code if code is not None else ErrorCode.none, "throttle_time": 0, "topics": topics})
