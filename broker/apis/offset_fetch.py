"""OffsetFetch (9) v1–9: committed offsets of one group (v1–7) or several (v8+); null topics
(v2+) means every committed partition. RequireStable (v7+) waits for commits being written."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker


async def _group(broker: Broker, group_id: str, topics: Any, require_stable: bool) -> list[dict[str, Any]]:
    wanted = None if topics is None else [(t.name, list(t.partition_indexes)) for t in topics]
    fetched = await broker.classic_groups.fetch_offsets(group_id, wanted, require_stable)
    return [{"name": name, "partitions": [
        {"partition_index": p, "committed_offset": offset, "committed_leader_epoch": epoch, "metadata": meta,
         "error_code": code} for p, offset, epoch, meta, code in rows]} for name, rows in fetched]


@api(9)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    v = req.api_version
    require_stable = bool(getattr(body, "require_stable", False))
    cls = response_class(9, v)
    if v >= 8:
        groups = []
        for g in body.groups:
            groups.append({"group_id": g.group_id, "error_code": ErrorCode.none,
                           "topics": await _group(broker, g.group_id, g.topics, require_stable)})
        return build(cls, {"throttle_time": 0, "groups": groups})
    topics = await _group(broker, body.group_id, body.topics, require_stable)
    return build(cls, {"throttle_time": 0, "error_code": ErrorCode.none, "topics": topics})
