"""Fetch (1) v4–18 for consumers: whole stored batches from the fetch offset, long polling woken
by appends, and incremental fetch sessions (KIP-227, v7+) as Kafka's FetchManager runs them:

- epoch 0 (INITIAL): a full fetch; it closes the session it names, if any, and opens a new one
  when the cache has room (the answer carries its id, else 0);
- epoch -1 (FINAL, and every v4–6 fetch): a full fetch without a session, closing the one named;
- epoch N > 0: an incremental fetch of session `session_id`, which must expect epoch N and use
  topic ids exactly when the request does (v13+); the partitions named are added or updated,
  `forgotten_topics_data` leave, and the answer lists only partitions with something new.

A session-level refusal (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH,
FETCH_SESSION_TOPIC_ID_ERROR) is the top-level error code with no partitions. The sessions live in
`broker.fetch_sessions` (broker/fetch_sessions.py)."""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.metrics import error_name
from sharebroker.broker.apis import api
from sharebroker.broker.delayed_fetch import delayed_fetch
from sharebroker.broker.security.acl_store import AclOperation, ResourceType
from sharebroker.broker.fetch_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    SWEEP_MS,
    CachedPartition,
    FetchSession,
    PartitionKey,
    next_epoch,
)
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


Answer = tuple[PartitionKey, CachedPartition, FetchPartition, Partition | None]


@dataclass(slots=True)
class _Read:
    """One pass over the partitions to read."""

    answers: list[Answer] = field(default_factory=list)  # (key, request, answer, partition read)
    total: int = 0  # record bytes
    any_error: bool = False  # a read failed: Kafka answers at once then
    vanished: bool = False  # a partition read before is gone (deleted): answer at once, as Kafka does
    partitions: list[Partition] = field(default_factory=list)  # sessionless: woken by their appends
    leader_moved: bool = False  # a partition answered FENCED_LEADER_EPOCH: say who leads it now


def _read_all(broker: Broker, items: Iterable[tuple[PartitionKey, CachedPartition]], uses_topic_ids: bool,
              max_bytes: int, read_committed: bool, conn: Connection, session: FetchSession | None,
              seen: set[PartitionKey] | None) -> _Read:
    """Read `items` in order within the response's `max_bytes`, the first partition with records
    getting at least one whole batch. With a `session`, each partition read is watched for
    appends on its behalf; without, the partitions are collected for the long poll to wait on
    and `seen` remembers which ones resolved."""
    topics = broker.topics
    by_name = topics.by_name
    by_id = topics.by_id
    cache = broker.fetch_sessions
    watch = cache.watch
    live = session is not None and cache.get(session.id) is session
    remaining = max_bytes
    first_data = True
    out = _Read()
    answers = out.answers
    az = broker.authorizer
    readable: dict[str, bool] = {}
    for key, cp in items:
        entry = FetchPartition(cp.partition)
        name = cp.topic
        if name is None and uses_topic_ids and cp.topic_id is not None:
            found = by_id.get(cp.topic_id)
            if found is not None:
                name = cp.topic = found.name  # Kafka resolves a session's unknown ids lazily, then keeps the name
        topic = by_name.get(name) if name is not None else None
        denied = False
        if az is not None and name is not None:
            allowed = readable.get(name)
            if allowed is None:
                allowed = readable[name] = az.allows(conn, AclOperation.READ, ResourceType.TOPIC, name)
            denied = not allowed
        if denied or topic is None or not 0 <= cp.partition < len(topic.partitions):
            # refused before any read, as Kafka's KafkaApis does: these do not end a long poll
            # (a refusal by the ACLs does, as Kafka answers at once when nothing is left to read)
            if denied:
                entry.error_code = ErrorCode.topic_authorization_failed
                out.any_error = True
            else:
                entry.error_code = ErrorCode.unknown_topic_id if name is None else ErrorCode.unknown_topic_or_partition
            answers.append((key, cp, entry, None))
            if session is not None:
                session.unresolved.add(key)
                if cp.bound is not None:
                    watch.unbind(session.id, cp)
                    out.vanished = True
            elif seen is not None and key in seen:
                out.vanished = True
            continue
        if uses_topic_ids and topic.topic_id != cp.topic_id:
            # the name the session resolved now belongs to a recreated topic
            entry.error_code = ErrorCode.inconsistent_topic_id
            answers.append((key, cp, entry, None))
            out.any_error = True
            if session is not None:
                session.unresolved.discard(key)
                if cp.bound is not None:
                    watch.unbind(session.id, cp)
            continue
        partition = topic.partitions[cp.partition]
        answers.append((key, cp, entry, partition))
        if session is not None:
            session.unresolved.discard(key)
            if live:
                watch.bind(session, key, cp, partition)
        else:
            out.partitions.append(partition)
            if seen is not None:
                seen.add(key)
        epoch_error = None if cp.leader_epoch == -1 else partition.check_leader_epoch(cp.leader_epoch)
        plog = partition.log
        high_watermark = plog.high_watermark
        stable = partition.last_stable_offset
        entry.high_watermark = high_watermark
        entry.last_stable_offset = stable  # in both isolation levels, as Kafka answers
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
        fetch_offset = cp.fetch_offset
        limit = cp.max_bytes if cp.max_bytes < remaining else remaining
        if (limit <= 0 and not first_data) or fetch_offset == (stable if read_committed else high_watermark):
            # no room left, or nothing past the fetch offset (most partitions of a large fetch)
            if read_committed:
                entry.aborted_transactions = ()
            continue
        try:
            result = plog.read(fetch_offset, max(limit, 0), max_offset=stable if read_committed else None,
                               min_one_batch=first_data)
        except OffsetOutOfRange:
            entry.error_code = ErrorCode.offset_out_of_range
            out.any_error = True
            continue
        except Exception as exc:  # damaged or unreadable log, or a bug: this partition only
            entry.error_code = _read_failed(exc, partition, fetch_offset, conn)
            out.any_error = True
            continue
        data = result.records
        if read_committed:
            entry.aborted_transactions = partition.aborted_transactions(fetch_offset, result.next_offset) if data else ()
        if data:
            entry.records = data
            first_data = False
            out.total += len(data)
            remaining -= len(data)
    return out


def _fetch_data(body: Any, v: int) -> dict[PartitionKey, CachedPartition]:
    """The request's partitions by key, in request order; a partition named twice keeps its first
    place and its last parameters (Kafka's LinkedHashMap)."""
    out: dict[PartitionKey, CachedPartition] = {}
    uses_topic_ids = v >= 13
    with_leader_epoch, with_log_start, with_last_epoch = v >= 9, v >= 5, v >= 12
    for ft in body.topics:
        if uses_topic_ids:
            name, topic_id = None, ft.topic_id
            topic_key: Any = topic_id
        else:
            name, topic_id = ft.topic, None
            topic_key = name
        for fp in ft.partitions:
            out[(topic_key, fp.partition)] = CachedPartition(
                name, topic_id, fp.partition, fp.partition_max_bytes, fp.fetch_offset,
                fp.current_leader_epoch if with_leader_epoch else -1,
                fp.log_start_offset if with_log_start else -1,
                fp.last_fetched_epoch if with_last_epoch else -1)
    return out


def _forgotten(body: Any, v: int) -> list[PartitionKey]:
    uses_topic_ids = v >= 13
    return [(ft.topic_id if uses_topic_ids else ft.topic, p)
            for ft in getattr(body, "forgotten_topics_data", None) or () for p in ft.partitions]


def _privileged(body: Any, v: int) -> bool:
    """A follower's fetch (Kafka gives its sessions priority in the cache)."""
    replica_id = body.replica_state.replica_id if v >= 15 else body.replica_id
    return int(replica_id) >= 0


def _records_size(entry: FetchPartition) -> int:
    data = entry.records
    return len(data) if data else 0


def _response_topics(answers: Iterable[tuple[CachedPartition, FetchPartition]], uses_topic_ids: bool) -> list[FetchTopic]:
    """Consecutive partitions of one topic under one topic entry, in answer order (as Kafka's
    FetchResponse groups them)."""
    out: list[FetchTopic] = []
    parts: list[FetchPartition] = []
    last: object = None
    for cp, entry in answers:
        topic_key = cp.topic_id if uses_topic_ids else cp.topic
        if not out or topic_key != last:
            parts = []
            out.append(FetchTopic(None, cp.topic_id, parts) if uses_topic_ids else FetchTopic(cp.topic, None, parts))
            last = topic_key
        parts.append(entry)
    return out


def _respond(broker: Broker, conn: Connection, req: DecodedRequest, read: _Read,
             answers: Iterable[tuple[CachedPartition, FetchPartition]], session_id: int) -> list[Buffer]:
    v = req.api_version
    metrics = broker.metrics
    if metrics.enabled:
        answers = list(answers)
        errors = conn.response_errors = {"NONE": 1}  # the top level, then each partition (errorCounts)
        for cp, entry in answers:
            if entry.records:
                metrics.fetched(cp.topic or "", len(entry.records))
            name = error_name(entry.error_code)
            errors[name] = errors.get(name, 0) + 1
    endpoints: tuple[NodeEndpoint, ...] = ()
    if read.leader_moved:
        # the leader as a client on this listener reaches it
        endpoints = (NodeEndpoint(broker.node_id, *broker.endpoint(conn.listener), broker.config["broker.rack"]),)
    return encode_fetch_response(req.correlation_id, v, _response_topics(answers, v >= 13), session_id=session_id,
                                 node_endpoints=endpoints)


def _refuse(conn: Connection, req: DecodedRequest, code: ErrorCode, message: str, *, session_id: int,
            epoch: int, answer_session_id: int = INVALID_SESSION_ID) -> list[Buffer]:
    """A session-level error: the top-level code, no partitions; one log line (a client repeating
    the same mistake on one connection is counted, not logged each time)."""
    held = _reports.allow(("session", conn.id, code, session_id))
    if held is not None:
        log.info("fetch session refused", error=code.name, message=message, session_id=session_id, session_epoch=epoch,
                 version=req.api_version, conn=conn.id, client_id=conn.client_id, repeats_not_logged=held)
    if conn.broker.metrics.enabled:
        conn.response_errors = {error_name(code): 1}
    return encode_fetch_response(req.correlation_id, req.api_version, (), error_code=code, session_id=answer_session_id)


@api(1)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> list[Buffer]:
    body = req.body
    v = req.api_version
    session_id = int(getattr(body, "session_id", INVALID_SESSION_ID))
    epoch = int(getattr(body, "session_epoch", FINAL_EPOCH))  # v4-6 have no sessions: sessionless
    fetch_data = _fetch_data(body, v)
    if epoch == INITIAL_EPOCH or epoch == FINAL_EPOCH:
        if session_id != INVALID_SESSION_ID and broker.fetch_sessions.remove(session_id) is not None:
            log.debug("fetch session closed", session_id=session_id, reason="full fetch", conn=conn.id)
        return await _full_fetch(broker, conn, req, fetch_data, create_session=epoch == INITIAL_EPOCH)
    return await _incremental_fetch(broker, conn, req, fetch_data, session_id, epoch)


async def _full_fetch(broker: Broker, conn: Connection, req: DecodedRequest,
                      fetch_data: dict[PartitionKey, CachedPartition], *, create_session: bool) -> list[Buffer]:
    """Every partition asked for is answered; with `create_session`, they become a new session
    if the cache has (or can make) room."""
    body = req.body
    v = req.api_version
    uses_topic_ids = v >= 13
    read_committed = body.isolation_level == _READ_COMMITTED
    clock = broker.clock
    deadline = clock.monotonic_ms() + max(body.max_wait // _MS, 0)
    items = list(fetch_data.items())
    seen: set[PartitionKey] = set()
    min_bytes = body.min_bytes
    read = await delayed_fetch(
        lambda: _read_all(broker, items, uses_topic_ids, body.max_bytes, read_committed, conn, None, seen),
        lambda r: r.total >= min_bytes or r.any_error or r.vanished,
        lambda r: [p.wait_for_append() for p in r.partitions],
        deadline, clock)
    answer_session_id = INVALID_SESSION_ID
    if create_session:
        cache = broker.fetch_sessions
        evictions = cache.evictions
        session = cache.maybe_create_session(clock.monotonic_ms(), _privileged(body, v), len(fetch_data), uses_topic_ids,
                                             lambda: fetch_data, read_committed=read_committed)
        if session is not None:
            answer_session_id = session.id
            watch = cache.watch
            for key, cp, entry, partition in read.answers:
                session.record(key, cp, _records_size(entry), entry.error_code, entry.high_watermark,
                               entry.last_stable_offset, entry.log_start_offset, rotate=False)
                if partition is not None:
                    watch.bind(session, key, cp, partition)
                elif entry.error_code != ErrorCode.inconsistent_topic_id:
                    session.unresolved.add(key)
            log.debug("fetch session created", session_id=session.id, partitions=len(session), topic_ids=uses_topic_ids,
                      sessions=len(cache), conn=conn.id, client_id=conn.client_id,
                      evicted_session_id=cache.last_evicted_id if cache.evictions != evictions else None)
    return _respond(broker, conn, req, read, ((cp, entry) for _k, cp, entry, _p in read.answers), answer_session_id)


async def _incremental_fetch(broker: Broker, conn: Connection, req: DecodedRequest,
                             fetch_data: dict[PartitionKey, CachedPartition], session_id: int, epoch: int) -> list[Buffer]:
    body = req.body
    v = req.api_version
    cache = broker.fetch_sessions
    session = cache.get(session_id)
    if session is None:
        return _refuse(conn, req, ErrorCode.fetch_session_id_not_found,
                       f"Fetch session {session_id} is not in the cache: it was closed or evicted, or never existed.",
                       session_id=session_id, epoch=epoch)
    if session.epoch != epoch:
        return _refuse(conn, req, ErrorCode.invalid_fetch_session_epoch,
                       f"Fetch session {session_id} expects epoch {session.epoch}, the request carries {epoch}.",
                       session_id=session_id, epoch=epoch)
    uses_topic_ids = v >= 13
    if session.uses_topic_ids != uses_topic_ids:
        return _refuse(conn, req, ErrorCode.fetch_session_topic_id_error,
                       f"Fetch session {session_id} was created {'with' if session.uses_topic_ids else 'without'} topic ids; "
                       f"a version {v} request {'has none' if session.uses_topic_ids else 'uses them'}.",
                       session_id=session_id, epoch=epoch)
    forgotten = _forgotten(body, v)
    added, updated, removed = session.update(fetch_data, forgotten)
    watch = cache.watch
    for cp in removed:
        if cp.bound is not None:
            watch.unbind(session.id, cp)
    clock = broker.clock
    now = clock.monotonic_ms()
    if not session.partitions:
        # as Kafka: a session with nothing left closes; this one fetch goes on without it
        cache.remove(session)
        log.debug("fetch session closed", session_id=session_id, reason="no partitions left", conn=conn.id)
        return await _full_fetch(broker, conn, req, fetch_data, create_session=False)
    cache.touch(session, now)
    session.epoch = expected = next_epoch(session.epoch)
    read_committed = body.isolation_level == _READ_COMMITTED
    full = now >= session.sweep_due_ms or read_committed != session.read_committed
    requested = list(fetch_data)
    deadline = now + max(body.max_wait // _MS, 0)
    min_bytes = body.min_bytes
    read = await delayed_fetch(
        lambda: _read_all(broker, session.candidates(requested, full=full), uses_topic_ids, body.max_bytes,
                          read_committed, conn, session, None),
        # Kafka answers at once when no partition of the session can be read at all
        lambda r: r.total >= min_bytes or r.any_error or r.vanished or len(session.unresolved) >= len(session.partitions),
        lambda r: [watch.wait(session)],
        deadline, clock)
    if session.epoch != expected:
        # another request of this session (a duplicate, or a retry on a new connection) was
        # accepted while this one waited: its answer is the one the session goes on from
        return _refuse(conn, req, ErrorCode.invalid_fetch_session_epoch,
                       f"Fetch session {session_id} moved on to epoch {session.epoch} while this request waited.",
                       session_id=session_id, epoch=epoch, answer_session_id=session_id)
    session.read_committed = read_committed
    if full:
        session.sweep_due_ms = clock.monotonic_ms() + SWEEP_MS
    answers = [(cp, entry) for key, cp, entry, _p in read.answers
               if session.record(key, cp, _records_size(entry), entry.error_code, entry.high_watermark,
                                 entry.last_stable_offset, entry.log_start_offset)]
    log.debug("incremental fetch", session_id=session_id, session_epoch=epoch, partitions=len(session),
              added=len(added), updated=len(updated), removed=len(removed), read=len(read.answers),
              answered=len(answers), bytes=read.total, full_check=full, conn=conn.id)
    return _respond(broker, conn, req, read, answers, session_id)
