"""DeleteRecords (21) v0–2: move a partition's log start offset forward."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import Op, topics_allowed
from sharebroker.broker.structured_log import get_logger
from sharebroker.protocol.codec import DecodedRequest, build, response_class
from sharebroker.storage import OffsetOutOfRange

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

log = get_logger("sharebroker.admin")


@api(21)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    out = []
    deletable = topics_allowed(broker, conn, Op.DELETE, (t.name for t in req.body.topics))
    for t in req.body.topics:
        topic = broker.topics.get(t.name)
        parts = []
        for p in t.partitions:
            entry: dict[str, Any] = {"partition_index": p.partition_index, "low_watermark": -1,
                                     "error_code": ErrorCode.none}
            parts.append(entry)
            if deletable is not None and t.name not in deletable:
                entry["error_code"] = ErrorCode.topic_authorization_failed
                continue
            if topic is None or not 0 <= p.partition_index < len(topic.partitions):
                entry["error_code"] = ErrorCode.unknown_topic_or_partition
                continue
            partition = topic.partitions[p.partition_index]
            plog = partition.log
            target = plog.high_watermark if p.offset == -1 else p.offset
            if target < 0 or target > plog.high_watermark:
                entry["error_code"] = ErrorCode.offset_out_of_range
                continue
            try:
                entry["low_watermark"] = plog.delete_records(target)
            except OffsetOutOfRange:
                entry["error_code"] = ErrorCode.offset_out_of_range
                continue
            broker.on_log_start_moved(partition)
            log.info("records deleted", topic=t.name, partition=p.partition_index, log_start_offset=entry["low_watermark"])
        out.append({"name": t.name, "partitions": parts})
    return build(response_class(21, req.api_version), {"throttle_time": 0, "topics": out})
