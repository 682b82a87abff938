"""DescribeLogDirs (35) v1–4: the one log directory with the size of every partition's log (all of
them, or those asked for), offset lag 0 (the high watermark is the log end on one node), and the
file system's total and usable bytes, as Kafka's ReplicaManager describes them. UI tools show
topic sizes from it."""

from __future__ import annotations

import shutil
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import Op, refuse_cluster
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker


@api(35)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    if (denied := refuse_cluster(broker, conn, req, Op.DESCRIBE)) is not None:
        return denied
    wanted: set[tuple[str, int]] | None = None
    if req.body.topics is not None:  # null: every partition
        wanted = {(t.topic, int(p)) for t in req.body.topics for p in t.partitions}
    sizes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for partition in broker.topics.all_partitions():
        name = partition.topic.name
        if wanted is not None and (name, partition.index) not in wanted:
            continue
        sizes[name].append({"partition_index": partition.index, "partition_size": partition.log.size_bytes,
                            "offset_lag": 0, "is_future_key": False})
    usage = shutil.disk_usage(broker.log_dir)
    return build(response_class(35, req.api_version), {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "results": [{"error_code": ErrorCode.none, "log_dir": str(broker.log_dir.resolve()),
                     "topics": [{"name": name, "partitions": parts} for name, parts in sorted(sizes.items())],
                     "total_bytes": usage.total, "usable_bytes": usage.free}],
    })
