"""ListOffsets (2) v1–11: earliest, latest, max timestamp and by timestamp (time index). With
isolation level read_committed (v2+) "latest" is the last stable offset and nothing at or past it
is answered, as Kafka's Partition.fetchOffsetForTimestamp does."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import Op, topics_allowed
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
EARLIEST_PENDING_UPLOAD = -6
# The first ListOffsets version each special timestamp may be sent with (Kafka's ReplicaManager);
# any other negative timestamp, or one sent with an older version, is UNSUPPORTED_VERSION.
SPECIAL_TIMESTAMP_MIN_VERSION = {EARLIEST: 1, LATEST: 1, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9,
                                 EARLIEST_PENDING_UPLOAD: 11}


def _lookup(partition: Any, timestamp: int, read_committed: bool) -> tuple[int, int]:
    """(offset, timestamp) for one ListOffsets query; (-1, -1) when there is no such offset."""
    plog = partition.log
    fetchable = partition.last_stable_offset if read_committed else plog.high_watermark
    if timestamp == LATEST:
        return fetchable, -1
    offset, ts = _find(plog, timestamp)
    if offset >= fetchable and timestamp not in (EARLIEST, EARLIEST_LOCAL):
        return -1, -1
    return offset, ts


def _find(plog: Any, timestamp: int) -> tuple[int, int]:
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return plog.log_start_offset, -1
    if timestamp == MAX_TIMESTAMP:
        found = plog.max_timestamp()
        if found is None:
            return -1, -1
        ts, offset = found
        return offset, ts
    if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return -1, -1  # no tiered storage: nothing uploaded, nothing pending (the local log start is EARLIEST_LOCAL)
    found = plog.offset_for_timestamp(timestamp)
    if found is None:
        return -1, -1
    offset, ts = found
    return offset, ts


@api(2)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    v = req.api_version
    topics = broker.topics
    read_committed = getattr(body, "isolation_level", 0) == 1
    seen = Counter((t.name, p.partition_index) for t in body.topics for p in t.partitions)
    out = []
    described = topics_allowed(broker, conn, Op.DESCRIBE, (t.name for t in body.topics))
    for lt in body.topics:
        topic = topics.get(lt.name)
        parts = []
        for lp in lt.partitions:
            entry: dict[str, Any] = {"partition_index": lp.partition_index, "error_code": ErrorCode.none,
                                     "timestamp": -1, "offset": -1, "leader_epoch": -1}
            parts.append(entry)
            if described is not None and lt.name not in described:
                entry["error_code"] = ErrorCode.topic_authorization_failed
                continue
            if seen[(lt.name, lp.partition_index)] > 1:
                entry["error_code"] = ErrorCode.invalid_request
                continue
            if lp.timestamp < 0 and v < SPECIAL_TIMESTAMP_MIN_VERSION.get(lp.timestamp, 1 << 16):
                entry["error_code"] = ErrorCode.unsupported_version
                continue
            if topic is None or not 0 <= lp.partition_index < len(topic.partitions):
                entry["error_code"] = ErrorCode.unknown_topic_or_partition
                continue
            partition = topic.partitions[lp.partition_index]
            epoch_error = partition.check_leader_epoch(getattr(lp, "current_leader_epoch", -1))
            if epoch_error is not None:
                entry["error_code"] = epoch_error
                continue
            offset, ts = _lookup(partition, lp.timestamp, read_committed)
            entry.update(offset=offset, timestamp=ts, leader_epoch=partition.leader_epoch if offset >= 0 else -1)
        out.append({"name": lt.name, "partitions": parts})
    return build(response_class(2, v), {"throttle_time": 0, "topics": out})
