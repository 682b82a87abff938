"""Produce (0) v3–13: validate the one v2 batch per partition (header and CRC only, never the
records), check idempotent-producer sequences, append verbatim, and answer once the flush policy
is satisfied."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import CloseConnection, api, error_response
from sharebroker.broker.flusher import now_ms
from sharebroker.broker.metrics import all_none, error_name
from sharebroker.broker.security.acl_store import AclOperation, ResourceType

from sharebroker.broker.structured_log import Repeats, get_logger
from sharebroker.protocol.errors import KafkaError, error_code_for
from sharebroker.protocol.codec import DecodedRequest
from sharebroker.protocol.fetch_responses import Buffer
from sharebroker.protocol.produce_response import ProducePartitionResponse, ProduceTopicResponse, encode_produce_response
from sharebroker.protocol.record_batch import first_keyless_record, parse_produce_records

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

log = get_logger("sharebroker.produce")
# A producer retries a refused write every retry.backoff.ms: one line per partition and cause
# every 10 s, with the count of the others, is enough.
_refusals = Repeats(10.0)

def _append_one(broker: Broker, partition: Any, records: bytes | memoryview | None, version: int,
                now: int, transactional_id: str | None, entry: ProducePartitionResponse, counting: bool) -> None:
    """Validate and append one partition's batch, filling its response entry (and, `counting`,
    the partition's metrics counters)."""
    plog = partition.log
    topic = partition.topic
    cfg = topic.config
    (batch,) = headers = parse_produce_records(records or b"", api_version=version,
                                               max_message_bytes=cfg.max_message_bytes)
    if batch.size > cfg.segment_bytes:
        raise KafkaError(ErrorCode.record_list_too_large,
                         f"The record batch of {batch.size} bytes exceeds segment.bytes ({cfg.segment_bytes}).")
    if cfg.compact and not batch.is_control:
        keyless = first_keyless_record(records or b"")
        if keyless is not None:
            raise KafkaError(ErrorCode.invalid_record, f"Compacted topic cannot accept message without key in topic "
                                                       f"partition {topic.name}-{partition.index}.")
    log_append_time = cfg.message_timestamp_type == "LogAppendTime"
    if not log_append_time:
        _check_timestamps(batch, cfg, now)
    pid = batch.producer_id
    if pid >= 0:
        _check_transaction(broker, partition, batch, version, transactional_id)
        dup = partition.producers.check(pid, batch.producer_epoch, batch.base_sequence, batch.last_sequence)
        if dup is not None:
            log.info("duplicate batch acknowledged with its original offset", topic=topic.name,
                     partition=partition.index, producer_id=pid, sequence=batch.base_sequence, offset=dup.first_offset)
            entry.base_offset, entry.log_start_offset = dup.first_offset, plog.log_start_offset
            return
    # A large request's records are a writable view of its frame: offsets go in there, no copy.
    buf = records if isinstance(records, memoryview) and not records.readonly else bytearray(records or b"")
    result = plog.append(buf, headers, leader_epoch=partition.leader_epoch, now_ms=now,
                         log_append_time=log_append_time)
    if pid >= 0:
        partition.producers.record(pid, batch.producer_epoch, batch.base_sequence, batch.last_sequence,
                                   result.first_offset, result.last_offset, batch.max_timestamp,
                                   transactional=batch.is_transactional)
    if counting:
        partition.messages_in += batch.record_count
        partition.bytes_in += batch.size
    if result.rolled:
        # After the producer state took this batch in: the roll's snapshot is taken at the log
        # end offset, which already counts it.
        broker.segment_rolled(partition)
    entry.base_offset, entry.log_start_offset = result.first_offset, result.log_start_offset
    if log_append_time:
        entry.log_append_time_ms = result.log_append_time_ms


def _check_transaction(broker: Broker, partition: Any, batch: Any, version: int, transactional_id: str | None) -> None:
    """A transactional batch must come with its transactional id and, when it opens the
    producer's transaction on this partition, the partition must have been added to that
    transaction (KIP-890 verification, transaction.partition.verification.enable); a plain batch
    may not interleave an open transaction of the same producer."""
    pid = batch.producer_id
    open_txn = pid in partition.producers.open_txns
    if not batch.is_transactional:
        if open_txn:
            raise KafkaError(ErrorCode.invalid_txn_state,
                             f"Expected a transactional write from producer {pid}: it has a transaction open on "
                             f"{partition.topic.name}-{partition.index}.")
        return
    if transactional_id is None:
        raise KafkaError(ErrorCode.transactional_id_authorization_failed,
                         "A transactional batch needs the transactional id in the produce request.")
    if open_txn or not broker.config["transaction.partition.verification.enable"]:
        return
    tp = (partition.topic.name, partition.index)
    error = broker.transactions.verify_write(transactional_id, pid, batch.producer_epoch, tp,
                                             knows_abortable=version > 10)
    if error is not None:
        raise KafkaError(error, f"Transactional write of producer {pid} (epoch {batch.producer_epoch}) to "
                                f"{tp[0]}-{tp[1]} refused: the partition is not in its open transaction.")


def _check_timestamps(batch: Any, cfg: Any, now: int) -> None:
    before = cfg.message_timestamp_before_max_ms
    after = cfg.message_timestamp_after_max_ms
    if batch.base_timestamp >= 0 and now - batch.base_timestamp > before:
        raise KafkaError(ErrorCode.invalid_timestamp,
                         f"Timestamp {batch.base_timestamp} of a record is earlier than the allowed "
                         f"message.timestamp.before.max.ms ({before} ms before now).")
    if batch.max_timestamp - now > after:
        raise KafkaError(ErrorCode.invalid_timestamp,
                         f"Timestamp {batch.max_timestamp} of a record is later than the allowed "
                         f"message.timestamp.after.max.ms ({after} ms after now).")


def _unexpected(exc: Exception, topic: Any, index: int, conn: Connection, stage: str) -> tuple[ErrorCode, str]:
    """The partition's error for an exception of the log (a full disk, a failed fsync) or a bug:
    KAFKA_STORAGE_ERROR or UNKNOWN_SERVER_ERROR for this partition only, as Kafka answers it."""
    code, message = error_code_for(exc)
    name = getattr(topic, "name", None)
    if isinstance(exc, OSError) and code == ErrorCode.kafka_storage_error:
        doing = "appending records to" if stage == "append" else "flushing"
        message = f"Error while {doing} {name}-{index}: {exc.strerror or exc}"
    if code == ErrorCode.unknown_server_error:
        log.error("produce failed", topic=name, partition=index, stage=stage, error=code.name,
                  message=message, conn=conn.id, exc_info=exc)
    else:
        held = _refusals.allow((name, index, code, stage))
        if held is not None:
            log.warning("produce refused", topic=name, partition=index, stage=stage, error=code.name,
                        message=message, conn=conn.id, repeats_not_logged=held)
    return code, message


@api(0)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    v = req.api_version
    acks = body.acks
    now = now_ms()
    topics = broker.topics
    responses = []
    appended: list[tuple[Any, ProducePartitionResponse]] = []
    failed = False
    counting = broker.metrics.enabled
    resolved = []  # (request entry, topic or None, its name or None, the error if unknown)
    for td in body.topic_data:
        if v >= 13:
            topic = topics.get_by_id(td.topic_id)
            resolved.append((td, topic, getattr(topic, "name", None), ErrorCode.unknown_topic_id))
        else:
            resolved.append((td, topics.get(td.name), td.name, ErrorCode.unknown_topic_or_partition))
    az = broker.authorizer
    writable: set[str] = set()
    if az is not None:
        if body.transactional_id is not None and not az.allows(
                conn, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id):
            if acks == 0:
                raise CloseConnection()
            return error_response(req, ErrorCode.transactional_id_authorization_failed,
                                  "Transactional Id authorization failed.")
        writable = az.filter(conn, AclOperation.WRITE, ResourceType.TOPIC,
                             (name for _, _, name, _ in resolved if name is not None))
    for td, topic, name, missing in resolved:
        denied = az is not None and name is not None and name not in writable
        parts = []
        for pd in td.partition_data:
            entry = ProducePartitionResponse(pd.index)
            try:
                if acks not in (-1, 0, 1):
                    raise KafkaError(ErrorCode.invalid_required_acks, f"Invalid required acks value {acks}.")
                if denied:
                    raise KafkaError(ErrorCode.topic_authorization_failed, f"Not authorized to write to topic {name}.")
                if topic is None:
                    raise KafkaError(missing, "This server does not host this topic-partition.")
                if not 0 <= pd.index < len(topic.partitions):
                    raise KafkaError(ErrorCode.unknown_topic_or_partition,
                                     f"Partition {pd.index} of topic {topic.name} does not exist.")
                if topic.internal:
                    raise KafkaError(ErrorCode.invalid_topic_exception, f"Cannot append to internal topic {topic.name}.")
                partition = topic.partitions[pd.index]
                _append_one(broker, partition, pd.records, v, now, body.transactional_id, entry, counting)
                appended.append((partition, entry))
            except KafkaError as exc:
                failed = True
                entry.error_code, entry.error_message = exc.code, exc.message
                log.warning("produce refused", topic=getattr(topic, "name", None) or str(getattr(td, "topic_id", "")),
                         partition=pd.index, error=exc.code.name, message=exc.message, conn=conn.id)
            except Exception as exc:  # the log failed (full disk) or a bug: this partition only
                failed = True
                code, message = _unexpected(exc, topic, pd.index, conn, "append")
                _failed(entry, code, message)
            parts.append(entry)
        responses.append(ProduceTopicResponse(getattr(td, "name", None), getattr(td, "topic_id", None), parts))
    # Register every partition's flush before awaiting any, so they share one group commit.
    flushes = [(p, entry, f) for p, entry in appended if (f := broker.after_append(p, wait=acks != 0)) is not None]
    if flushes:
        results = await asyncio.gather(*(f for _, _, f in flushes), return_exceptions=True)
        for (p, entry, _), res in zip(flushes, results):
            if isinstance(res, Exception):
                # Appended but not durable as configured: Kafka answers the partition with the
                # storage error (the client retries; an idempotent producer's retry is deduplicated).
                failed = True
                code, message = _unexpected(res, p.topic, p.index, conn, "flush")
                _failed(entry, code, message)
            elif isinstance(res, BaseException):
                raise res
    if acks == 0:
        if failed:
            # Kafka closes an acks=0 connection on error: it is the only signal such a producer gets.
            raise CloseConnection()
        return None
    if counting:  # errorCounts: each partition (the response has no top-level code)
        if failed:
            errors = conn.response_errors = {}
            for t in responses:
                for e in t.partitions:
                    name = error_name(e.error_code)
                    errors[name] = errors.get(name, 0) + 1
        else:
            n = 0
            for t in responses:
                n += len(t.partitions)
            conn.response_errors = all_none(n)
    frame: list[Buffer] = [encode_produce_response(req.correlation_id, v, responses)]
    return frame


def _failed(entry: ProducePartitionResponse, code: ErrorCode, message: str) -> None:
    entry.error_code, entry.error_message = code, message
    entry.base_offset = entry.log_start_offset = -1
