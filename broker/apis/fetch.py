"""Fetch (1) v4–18 for consumers: whole stored batches from the fetch offset, long polling woken
by appends. Incremental fetch sessions are refused the way Kafka refuses them when its session
cache is full (SessionId 0 in the answer), so every fetch is a full fetch."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.structured_log import Repeats, get_logger
from sharebroker.protocol.errors import error_code_for
from sharebroker.protocol.codec import DecodedRequest, build, response_class
from sharebroker.storage import CorruptLogError, OffsetOutOfRange

log = get_logger("sharebroker.fetch")
_READ_COMMITTED = 1
# Consumers retry a failing partition every fetch: one line per damaged spot (or failing log and
# cause) every 5 minutes, with the count of the others.
_reports = Repeats(300.0)


def _read_failed(exc: Exception, partition: Any, fetch_offset: int, conn: Any) -> ErrorCode:
    """This partition's error for a read that failed, as Kafka answers it: CORRUPT_MESSAGE for
    bytes that are not record batches (named once in the log by file and position),
    KAFKA_STORAGE_ERROR for an I/O error, UNKNOWN_SERVER_ERROR for a bug. The other partitions of
    the request are served as usual."""
    topic, index = partition.topic.name, partition.index
    if isinstance(exc, CorruptLogError):
        held = _reports.allow(("corrupt", exc.path, exc.position))
        if held is not None:
            log.error("corrupt log segment", topic=topic, partition=index, file=exc.path, position=exc.position,
                      reason=exc.reason, fetch_offset=fetch_offset, conn=conn.id, repeats_not_logged=held,
                      hint="sharebroker verify --data-dir <log.dirs> lists every damaged range")
        return ErrorCode.corrupt_message
    code, message = error_code_for(exc)
    if code == ErrorCode.unknown_server_error:
        log.error("fetch failed", topic=topic, partition=index, fetch_offset=fetch_offset, error=code.name,
                  message=message, conn=conn.id, exc_info=exc)
    else:
        held = _reports.allow((topic, index, code))
        if held is not None:
            log.warning("fetch refused", topic=topic, partition=index, fetch_offset=fetch_offset, error=code.name,
                        message=message, conn=conn.id, repeats_not_logged=held)
    return code


def _read_all(broker: Any, body: Any, v: int, conn: Any) -> tuple[list[dict[str, Any]], int, bool, list[Any]]:
    """One pass over the requested partitions: (responses, bytes, any_error, partitions)."""
    topics = broker.topics
    remaining = body.max_bytes if v >= 3 else 2**31 - 1
    read_committed = getattr(body, "isolation_level", 0) == _READ_COMMITTED
    total = 0
    any_error = False
    first_data = True
    responses: list[dict[str, Any]] = []
    partitions: list[Any] = []
    for ft in body.topics:
        if v >= 13:
            topic = topics.get_by_id(ft.topic_id)
            missing = ErrorCode.unknown_topic_id
        else:
            topic = topics.get(ft.topic)
            missing = ErrorCode.unknown_topic_or_partition
        parts = []
        for fp in ft.partitions:
            entry: dict[str, Any] = {"partition_index": fp.partition, "error_code": ErrorCode.none,
                                     "high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1,
                                     "aborted_transactions": () if read_committed else None,
                                     "preferred_read_replica": -1, "records": b""}
            parts.append(entry)
            if topic is None:
                entry["error_code"] = missing
                any_error = True
                continue
            if not 0 <= fp.partition < len(topic.partitions):
                entry["error_code"] = ErrorCode.unknown_topic_or_partition
                any_error = True
                continue
            partition = topic.partitions[fp.partition]
            partitions.append(partition)
            epoch_error = partition.check_leader_epoch(getattr(fp, "current_leader_epoch", -1))
            plog = partition.log
            hw = plog.high_watermark
            entry.update(high_watermark=hw, last_stable_offset=hw, log_start_offset=plog.log_start_offset)
            if epoch_error is not None:
                entry["error_code"] = epoch_error
                any_error = True
                continue
            limit = min(fp.partition_max_bytes, remaining)
            if limit <= 0 and not first_data:
                continue
            try:
                result = plog.read(fp.fetch_offset, max(limit, 0), max_offset=hw if read_committed else None,
                                   min_one_batch=first_data)
            except OffsetOutOfRange:
                entry["error_code"] = ErrorCode.offset_out_of_range
                any_error = True
                continue
            except Exception as exc:  # damaged or unreadable log, or a bug: this partition only
                entry["error_code"] = _read_failed(exc, partition, fp.fetch_offset, conn)
                any_error = True
                continue
            data = result.records
            if data:
                entry["records"] = data
                first_data = False
                total += len(data)
                remaining -= len(data)
        responses.append({"topic": getattr(ft, "topic", None), "topic_id": getattr(ft, "topic_id", None),
                          "partitions": parts})
    return responses, total, any_error, partitions


@api(1)
async def handle(broker: Any, conn: Any, req: DecodedRequest) -> Any:
    body = req.body
    v = req.api_version
    cls = response_class(1, v)
    session_id = getattr(body, "session_id", 0)
    session_epoch = getattr(body, "session_epoch", -1)
    if session_id != 0:
        return build(cls, {"throttle_time": 0, "error_code": ErrorCode.fetch_session_id_not_found,
                           "session_id": 0, "responses": ()})
    if session_epoch > 0:
        return build(cls, {"throttle_time": 0, "error_code": ErrorCode.invalid_fetch_session_epoch,
                           "session_id": 0, "responses": ()})
    max_wait_s = max(body.max_wait.total_seconds(), 0.0)
    deadline = time.monotonic() + max_wait_s
    while True:
        responses, total, any_error, partitions = _read_all(broker, body, v, conn)
        remaining = deadline - time.monotonic()
        if total >= body.min_bytes or any_error or remaining <= 0 or not partitions:
            break
        waiters = [p.wait_for_append() for p in partitions]
        try:
            await asyncio.wait(waiters, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()
    return build(cls, {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": 0,
                       "responses": responses, "node_endpoints": ()})
