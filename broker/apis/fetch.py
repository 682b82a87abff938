"""Fetch (1) v4–18 for consumers: whole stored batches from the fetch offset, long polling woken
by appends. Incremental fetch sessions are refused the way Kafka refuses them when its session
cache is full (SessionId 0 in the answer), so every fetch is a full fetch."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.delayed_fetch import delayed_fetch
from sharebroker.broker.structured_log import Repeats, get_logger
from sharebroker.broker.topics import Partition
from sharebroker.protocol.codec import DecodedRequest
from sharebroker.protocol.errors import error_code_for
from sharebroker.protocol.fetch_responses import Buffer, FetchPartition, FetchTopic, NodeEndpoint, encode_fetch_response
from sharebroker.storage import CorruptLogError, OffsetOutOfRange

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

log = get_logger("sharebroker.fetch")
_READ_COMMITTED = 1
_MS = datetime.timedelta(milliseconds=1)
# Consumers retry a failing partition every fetch: one line per damaged spot (or failing log and
# cause) every 5 minutes, with the count of the others.
_reports = Repeats(300.0)


def _read_failed(exc: Exception, partition: Partition, fetch_offset: int, conn: Connection) -> ErrorCode:
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


@dataclass(slots=True)
class _Read:
    """One pass over the requested partitions."""

    topics: list[FetchTopic] = field(default_factory=list)
    total: int = 0  # record bytes
    any_error: bool = False
    partitions: list[Partition] = field(default_factory=list)  # the ones that exist: woken by appends
    leader_moved: bool = False  # a partition answered FENCED_LEADER_EPOCH: say who leads it now


def _read_all(broker: Broker, body: Any, v: int, conn: Connection) -> _Read:
    topics = broker.topics
    remaining = body.max_bytes
    read_committed = getattr(body, "isolation_level", 0) == _READ_COMMITTED
    first_data = True
    out = _Read()
    for ft in body.topics:
        if v >= 13:
            topic = topics.get_by_id(ft.topic_id)
            missing = ErrorCode.unknown_topic_id
        else:
            topic = topics.get(ft.topic)
            missing = ErrorCode.unknown_topic_or_partition
        parts: list[FetchPartition] = []
        for fp in ft.partitions:
            entry = FetchPartition(fp.partition, aborted_transactions=() if read_committed else None)
            parts.append(entry)
            if topic is None:
                entry.error_code = missing
                out.any_error = True
                continue
            if not 0 <= fp.partition < len(topic.partitions):
                entry.error_code = ErrorCode.unknown_topic_or_partition
                out.any_error = True
                continue
            partition = topic.partitions[fp.partition]
            out.partitions.append(partition)
            epoch_error = partition.check_leader_epoch(getattr(fp, "current_leader_epoch", -1))
            plog = partition.log
            hw = plog.high_watermark
            entry.high_watermark = entry.last_stable_offset = hw
            entry.log_start_offset = plog.log_start_offset
            if epoch_error is not None:
                entry.error_code = epoch_error
                out.any_error = True
                if epoch_error == ErrorCode.fenced_leader_epoch:
                    # KIP-951, as Kafka: the current leader and its endpoint, so the client need
                    # not refresh its metadata first (read only from v12/v16 on)
                    entry.current_leader = (broker.node_id, partition.leader_epoch)
                    out.leader_moved = True
                continue
            limit = min(fp.partition_max_bytes, remaining)
            if limit <= 0 and not first_data:
                continue
            try:
                result = plog.read(fp.fetch_offset, max(limit, 0), max_offset=hw if read_committed else None,
                                   min_one_batch=first_data)
            except OffsetOutOfRange:
                entry.error_code = ErrorCode.offset_out_of_range
                out.any_error = True
                continue
            except Exception as exc:  # damaged or unreadable log, or a bug: this partition only
                entry.error_code = _read_failed(exc, partition, fp.fetch_offset, conn)
                out.any_error = True
                continue
            data = result.records
            if data:
                entry.records = data
                first_data = False
                out.total += len(data)
                remaining -= len(data)
        out.topics.append(FetchTopic(getattr(ft, "topic", None), getattr(ft, "topic_id", None), parts))
    return out


@api(1)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> list[Buffer]:
    body = req.body
    v = req.api_version
    if getattr(body, "session_id", 0) != 0:
        return encode_fetch_response(req.correlation_id, v, (), error_code=ErrorCode.fetch_session_id_not_found)
    if getattr(body, "session_epoch", -1) > 0:
        return encode_fetch_response(req.correlation_id, v, (), error_code=ErrorCode.invalid_fetch_session_epoch)
    clock = broker.clock
    deadline = clock.monotonic_ms() + max(body.max_wait // _MS, 0)
    read = await delayed_fetch(
        lambda: _read_all(broker, body, v, conn),
        lambda r: r.total >= body.min_bytes or r.any_error,
        lambda r: [p.wait_for_append() for p in r.partitions],
        deadline, clock)
    endpoints: tuple[NodeEndpoint, ...] = ()
    if read.leader_moved:
        # the leader as a client on this listener reaches it
        endpoints = (NodeEndpoint(broker.node_id, *broker.endpoint(conn.listener)),)
    return encode_fetch_response(req.correlation_id, v, read.topics, node_endpoints=endpoints)
