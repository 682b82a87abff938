"""ShareFetch (78) v1–2: session epochs, piggy-backed acknowledgements, acquisition from every
partition of the share session, and long polling until records are acquirable or MaxWaitMs."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.metrics import all_none, error_name
from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import GROUP_DENIED, Op, Res, allows, topic_refusal
from sharebroker.broker.apis.share_common import (
    apply_acknowledgements,
    check_ids,
    current_leader,
    merge_topics,
    resolve_partition,
)
from sharebroker.broker.delayed_fetch import delayed_fetch
from sharebroker.broker.share.leader import SharePartitionLeader
from sharebroker.broker.share.partition import AcquireMode
from sharebroker.broker.share.sessions import FINAL_EPOCH, INITIAL_EPOCH, ShareSession
from sharebroker.broker.structured_log import get_logger
from sharebroker.broker.topics import Partition
from sharebroker.protocol.codec import DecodedRequest
from sharebroker.protocol.errors import KafkaError
from sharebroker.protocol.fetch_responses import (
    AcquiredRecords,
    Buffer,
    ShareFetchPartition,
    ShareFetchTopic,
    encode_share_fetch_response,
)

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

log = get_logger("sharebroker.share")

# A single read is bounded so that a fetch of a few hundred records never copies megabytes.
_READ_CAP_BYTES = 1 << 20
_MS = datetime.timedelta(milliseconds=1)

Key = tuple[uuid.UUID, int]  # (topic id, partition index)


def _entry(broker: Broker, index: int, partition: Partition | None) -> ShareFetchPartition:
    leader = current_leader(broker, partition)
    return ShareFetchPartition(index, current_leader=(leader["leader_id"], leader["leader_epoch"]))


async def _fetch(broker: Broker, group_id: str, member_id: str, session: ShareSession, body: Any,
                 entries: dict[Key, ShareFetchPartition], refused: Callable[[Any], bool] | None,
                 counting: bool) -> None:
    """Acquire from the session's partitions, waiting up to MaxWaitMs for something to acquire;
    `counting` (metrics on): the record bytes answered are counted on their partitions."""
    keys = list(session.partitions)
    if not keys:
        return
    shift = session.epoch % len(keys)
    keys = keys[shift:] + keys[:shift]
    leaders: list[tuple[Key, Partition, SharePartitionLeader]] = []
    for key in keys:
        if refused is not None and refused(key[0]):  # no READ on the topic: nothing acquired from it
            e = entries.setdefault(key, _entry(broker, key[1], None))
            e.error_code, e.error_message = ErrorCode.topic_authorization_failed, None
            continue
        partition, code, message = resolve_partition(broker, *key)
        if partition is None:
            assert code is not None
            e = entries.setdefault(key, _entry(broker, key[1], None))
            e.error_code, e.error_message = code, message
            continue
        leader = broker.share.leader(group_id, partition)
        try:
            await leader.ensure_loaded()
        except KafkaError as exc:
            e = entries.setdefault(key, _entry(broker, key[1], partition))
            e.error_code, e.error_message = exc.code, exc.message
            continue
        leaders.append((key, partition, leader))
    if not leaders:
        return
    mode = AcquireMode(getattr(body, "share_acquire_mode", 0) or 0)
    per_partition_bytes = max(1, min(body.max_bytes // len(leaders), _READ_CAP_BYTES))

    def attempt() -> bool:
        """One pass over the leaders; whether anything was acquired."""
        for gone in [entry for entry in leaders if entry[2].fenced]:
            # Dropped while this fetch waited (topic deleted, state fenced): answer its error now.
            key = gone[0]
            partition, code, message = resolve_partition(broker, *key)
            e = entries.setdefault(key, _entry(broker, key[1], partition))
            if code is None:
                code, message = ErrorCode.not_leader_or_follower, "The share partition leader was unloaded."
            e.error_code, e.error_message = code, message
            leaders.remove(gone)
        remaining = body.max_records
        got_any = False
        for key, partition, leader in leaders:
            if remaining <= 0:
                break
            if not leader.try_fetch_lock():
                continue
            try:
                acq = leader.acquire(member_id, max_records=remaining, batch_size=body.batch_size, mode=mode,
                                     max_bytes=per_partition_bytes)
            finally:
                leader.release_fetch_lock()
            if acq.acquired:
                got_any = True
                remaining -= sum(r.last_offset - r.first_offset + 1 for r in acq.acquired)
                e = entries.setdefault(key, _entry(broker, key[1], partition))
                e.records = acq.records
                if counting:
                    partition.bytes_out += len(acq.records)
                e.acquired_records = [AcquiredRecords(r.first_offset, r.last_offset, r.delivery_count)
                                      for r in acq.acquired]
                session.move_to_end(key)
        return got_any

    def wakeups(_: bool) -> list[asyncio.Future[None]]:
        # New records, or records acquirable again (acknowledged, released, lock expired).
        return ([p.wait_for_append() for _, p, _ in leaders]
                + [broker.share.waiter(leader.key) for _, _, leader in leaders])

    clock = broker.clock
    wait_ms = max(body.max_wait // _MS, 0)
    workers = broker.workers
    if workers is not None and wait_ms > workers.share_fetch_wait_ms and any(
            len(p.topic.partitions) > 1 for _, p, _ in leaders):
        # The member's other partitions are led by another worker, and librdkafka fetches records
        # from one broker at a time: a long poll here would hold up what is acquirable there.
        wait_ms = workers.share_fetch_wait_ms
    deadline = clock.monotonic_ms() + wait_ms
    await delayed_fetch(attempt, lambda got_any: got_any or not leaders, wakeups, deadline, clock)


def _fetch_counts(broker: Broker, session: ShareSession,
                  entries: dict[Key, ShareFetchPartition]) -> tuple[tuple[str, str], ...] | dict[str, bool]:
    """What TotalShareFetchRequestsPerSec and FailedShareFetchRequestsPerSec count of a fetch, once
    per topic: without a failed partition (nearly always) the counter keys the session keeps for
    its topics; with one, each topic and whether a partition of it failed."""
    for e in entries.values():
        if e.error_code:
            break
    else:
        return session.fetch_metric_keys or _session_fetch_keys(broker, session)
    failed = {topic_id for (topic_id, _), e in entries.items() if e.error_code}
    topics: dict[str, bool] = {}
    for topic_id in dict.fromkeys(topic_id for topic_id, _ in session.partitions):
        topic = broker.topics.get_by_id(topic_id)
        if topic is not None:
            topics[topic.name] = topic_id in failed
    return topics


def _session_fetch_keys(broker: Broker, session: ShareSession) -> tuple[tuple[str, str], ...]:
    keys = session.fetch_metric_keys = tuple(
        ("fetch", topic.name) for topic_id in dict.fromkeys(topic_id for topic_id, _ in session.partitions)
        if (topic := broker.topics.get_by_id(topic_id)) is not None)
    return keys


def _note_counts(conn: Connection, broker: Broker, session: ShareSession, entries: dict[Key, ShareFetchPartition],
                 fetch: tuple[tuple[str, str], ...] | dict[str, bool] | None, fetched: bool,
                 acked: dict[str, bool] | None) -> None:
    """With metrics on: the response's error codes for ErrorsPerSec (the top level, then each
    partition, as errorCounts) and what the request asked of which topics, in one pass over the
    entries. `fetch` is the fetch's counts when taken before later errors, else `fetched` says
    whether the request fetched."""
    for e in entries.values():
        if e.error_code:
            errors = conn.response_errors = {"NONE": 1}
            for entry in entries.values():
                name = error_name(entry.error_code)
                errors[name] = errors.get(name, 0) + 1
            if fetch is None and fetched:
                fetch = _fetch_counts(broker, session, entries)
            break
    else:
        conn.response_errors = all_none(1 + len(entries))
        if fetch is None and fetched:
            fetch = session.fetch_metric_keys or _session_fetch_keys(broker, session)
    if fetch is not None or acked:
        conn.share_facts = (fetch, acked or None)


@api(78)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> list[Buffer]:
    body = req.body
    v = req.api_version
    group_id, member_id, epoch = body.group_id, body.member_id, body.share_session_epoch

    def top_error(code: ErrorCode, message: str) -> list[Buffer]:
        log.warning("share fetch refused", conn=conn.id, group=group_id, member=member_id, epoch=epoch,
                    error=code.name, message=message)
        if broker.metrics.enabled:
            conn.response_errors = {error_name(code): 1}
        return encode_share_fetch_response(req.correlation_id, v, (), error_code=code, error_message=message)

    requested = merge_topics(body.topics)
    is_renew = bool(getattr(body, "is_renew_ack", False))
    if not allows(broker, conn, Op.READ, Res.GROUP, group_id):
        return top_error(ErrorCode.group_authorization_failed, GROUP_DENIED)
    refused = topic_refusal(broker, conn)
    try:
        check_ids(group_id, member_id)
        if is_renew:
            bad = [name for name, value in (("MaxBytes", body.max_bytes), ("MinBytes", body.min_bytes),
                                            ("MaxRecords", body.max_records),
                                            ("MaxWaitMs", body.max_wait // _MS)) if value != 0]
            if bad:
                raise KafkaError(ErrorCode.invalid_request,
                                 f"{', '.join(bad)} must be 0 when IsRenewAck is true.")
        sessions = broker.share.sessions
        if epoch == INITIAL_EPOCH:
            if any(p.acknowledgement_batches for p in requested.values()):
                raise KafkaError(ErrorCode.invalid_request,
                                 "Acknowledge data is not allowed in the initial share fetch request.")
            try:
                session, _old = sessions.open(group_id, member_id, conn.id)
            except KafkaError:
                await asyncio.sleep(max(body.max_wait.total_seconds(), 0.0))  # Kafka delays this refusal
                raise
            broker.share.bind_connection(conn)
            for key in requested:
                session.add(key)
        else:
            session = sessions.check(group_id, member_id, epoch)
            if epoch != FINAL_EPOCH:
                for key in requested:
                    session.add(key)
                for t in body.forgotten_topics_data:
                    for index in t.partitions:
                        session.forget((t.topic_id, index))
                session.bump()
    except KafkaError as exc:
        return top_error(exc.code, exc.message)

    entries: dict[Key, ShareFetchPartition] = {}
    counting = broker.metrics.enabled
    acked: dict[str, bool] | None = {} if counting else None
    for key, p in requested.items():
        if not p.acknowledgement_batches:
            continue
        if refused is not None and refused(key[0]):
            e = entries.setdefault(key, _entry(broker, key[1], None))
            e.acknowledge_error_code, e.acknowledge_error_message = ErrorCode.topic_authorization_failed, None
            continue
        code, message = await apply_acknowledgements(broker, group_id, member_id, key[0], key[1],
                                                     p.acknowledgement_batches, version=v, is_renew=is_renew,
                                                     topics=acked)
        partition, _, _ = resolve_partition(broker, *key)
        e = entries.setdefault(key, _entry(broker, key[1], partition))
        e.acknowledge_error_code, e.acknowledge_error_message = code, message

    fetch_counts = None
    fetched = False
    try:
        if epoch == FINAL_EPOCH:
            await broker.share.release_session(session)
        elif not is_renew and body.max_records > 0 and body.max_bytes > 0:
            await _fetch(broker, group_id, member_id, session, body, entries, refused, counting)
            fetched = True
            if counting and session.pending_new:  # before their errors below, which are not the fetch's
                fetch_counts = _fetch_counts(broker, session, entries)
    except BaseException:
        if acked:  # counted even if the fetch failed
            conn.share_facts = (None, acked)
        raise

    for key in list(session.pending_new):
        partition, unresolved, why = resolve_partition(broker, *key)
        e = entries.setdefault(key, _entry(broker, key[1], partition))
        if unresolved is not None and e.error_code == ErrorCode.none:
            e.error_code, e.error_message = unresolved, why
    session.pending_new.clear()

    by_topic: dict[uuid.UUID, list[ShareFetchPartition]] = {}
    for (topic_id, _), e in entries.items():
        by_topic.setdefault(topic_id, []).append(e)
    if counting:
        _note_counts(conn, broker, session, entries, fetch_counts, fetched, acked)
    return encode_share_fetch_response(
        req.correlation_id, v, [ShareFetchTopic(topic_id, partitions) for topic_id, partitions in by_topic.items()],
        acquisition_lock_timeout_ms=broker.share_groups.limits(group_id).record_lock_duration_ms)
