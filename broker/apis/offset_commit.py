"""OffsetCommit (8) v2–9: committed offsets of a classic group (generation checked) or, with
generation -1 and no member id, of a group without members (admin tools, manual assignment)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sharebroker.broker.apis import api
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker


@api(8)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    offsets = [(t.name, p.partition_index, p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                p.committed_metadata) for t in body.topics for p in t.partitions]
    errors = await broker.classic_groups.commit_offsets(
        group_id=body.group_id, member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        generation_id=body.generation_id_or_member_epoch, offsets=offsets, version=req.api_version)
    topics = [{"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                               "error_code": errors[(t.name, p.partition_index)]}
                                              for p in t.partitions]} for t in body.topics]
    return build(response_class(8, req.api_version), {"throttle_time": 0, "topics": topics})
