"""Transaction admin APIs as Kafka answers them: DescribeTransactions (65) v0, ListTransactions
(66) v0–2 (v1 duration filter, v2 transactional id pattern), DescribeProducers (61) v0 (the
producer state of partitions) and WriteTxnMarkers (27) v1, which `kafka-transactions.sh abort`
sends to end a hanging transaction on a partition."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import TOPIC_DENIED, Op, Res, allows, topics_allowed
from sharebroker.broker.structured_log import get_logger
from sharebroker.protocol.codec import DecodedRequest, build, response_class
from sharebroker.protocol.errors import KafkaError

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

log = get_logger("sharebroker.transactions")


@api(65)
async def describe_transactions(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    states = []
    for txn_id in req.body.transactional_ids:
        if not allows(broker, conn, Op.DESCRIBE, Res.TRANSACTIONAL_ID, txn_id):
            states.append({"error_code": ErrorCode.transactional_id_authorization_failed, "transactional_id": txn_id,
                           "transaction_state": "", "transaction_timeout": 0, "transaction_start_time": 0,
                           "producer_id": 0, "producer_epoch": 0, "topics": []})
            continue
        error, txn = broker.transactions.describe(txn_id)
        # Kafka sets only the error code on a failure: the rest keep their schema defaults
        entry: dict[str, Any] = {"error_code": error, "transactional_id": txn_id, "transaction_state": "",
                                 "transaction_timeout": 0, "transaction_start_time": 0, "producer_id": 0,
                                 "producer_epoch": 0, "topics": []}
        if txn is not None:
            by_topic: dict[str, list[int]] = {}
            # as Kafka: only the partitions of topics the principal may describe
            described = topics_allowed(broker, conn, Op.DESCRIBE, {topic for topic, _ in txn.partitions})
            for topic, index in sorted(txn.partitions):
                if described is None or topic in described:
                    by_topic.setdefault(topic, []).append(index)
            entry.update(transaction_state=txn.state.display, transaction_timeout=txn.timeout_ms,
                         transaction_start_time=txn.start_ms, producer_id=txn.producer_id,
                         producer_epoch=txn.producer_epoch,
                         topics=[{"topic": t, "partitions": p} for t, p in by_topic.items()])
        states.append(entry)
    return build(response_class(65, req.api_version), {"throttle_time": 0, "transaction_states": states})


@api(66)
async def list_transactions(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    cls = response_class(66, req.api_version)
    pattern = getattr(body, "transactional_id_pattern", None)
    if pattern:
        try:
            re.compile(pattern)
        except re.error:
            return build(cls, {"throttle_time": 0, "error_code": ErrorCode.invalid_regular_expression,
                               "unknown_state_filters": [], "transaction_states": []})
    txns, unknown = broker.transactions.listing(
        states=set(body.state_filters), producer_ids=set(body.producer_id_filters),
        min_duration_ms=getattr(body, "duration_filter", -1), id_pattern=pattern or None)
    az = broker.authorizer
    if az is not None:  # as Kafka: only the transactional ids the principal may describe
        txns = [t for t in txns if az.allows(conn, Op.DESCRIBE, Res.TRANSACTIONAL_ID, t.transactional_id,
                                             log_denied=False)]
    return build(cls, {"throttle_time": 0, "error_code": ErrorCode.none, "unknown_state_filters": unknown,
                       "transaction_states": [{"transactional_id": t.transactional_id, "producer_id": t.producer_id,
                                               "transaction_state": t.state.display} for t in txns]})


@api(61)
async def describe_producers(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    topics = []
    readable = topics_allowed(broker, conn, Op.READ, (t.name for t in req.body.topics))
    for t in req.body.topics:
        parts = []
        for index in t.partition_indexes:
            entry: dict[str, Any] = {"partition_index": index, "error_code": ErrorCode.none, "error_message": None,
                                     "active_producers": []}
            partition = broker.topics.partition(t.name, index)
            if readable is not None and t.name not in readable:
                entry.update(error_code=ErrorCode.topic_authorization_failed, error_message=TOPIC_DENIED)
            elif partition is None:
                entry.update(error_code=ErrorCode.unknown_topic_or_partition,
                             error_message=f"Partition {t.name}-{index} does not exist.")
            else:
                producers = partition.producers
                entry["active_producers"] = [
                    {"producer_id": pid, "producer_epoch": e.epoch, "last_sequence": e.last_seq,
                     "last_timestamp": e.last_timestamp, "coordinator_epoch": e.coordinator_epoch,
                     "current_txn_start_offset": producers.open_txns.get(pid, -1)}
                    for pid, e in sorted(producers.entries.items())]
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return build(response_class(61, req.api_version), {"throttle_time": 0, "topics": topics})


@api(27)
async def write_txn_markers(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    results = []
    az = broker.authorizer
    # as Kafka: ALTER on the cluster (what kafka-transactions.sh abort needs) or CLUSTER_ACTION
    permitted = az is None or az.allows_cluster(conn, Op.ALTER, log_denied=False) \
        or az.allows_cluster(conn, Op.CLUSTER_ACTION)
    for marker in req.body.markers:
        commit = bool(marker.transaction_result)
        topics = []
        for t in marker.topics:
            parts = []
            for index in t.partition_indexes:
                code = ErrorCode.none
                partition = broker.topics.partition(t.name, index)
                if not permitted:
                    code = ErrorCode.cluster_authorization_failed
                elif partition is None:
                    code = ErrorCode.unknown_topic_or_partition
                else:
                    try:
                        broker.transactions.write_markers(marker.producer_id, marker.producer_epoch, commit,
                                                          [(t.name, index)],
                                                          coordinator_epoch=max(marker.coordinator_epoch, 0))
                        flushed = broker.after_append(partition, wait=True)
                        if flushed is not None:
                            await flushed
                    except KafkaError as exc:
                        code = exc.code
                    except OSError:
                        code = ErrorCode.kafka_storage_error
                    log.info("transaction marker written on request", topic=t.name, partition=index,
                             producer_id=marker.producer_id, epoch=marker.producer_epoch,
                             result="commit" if commit else "abort", error=code.name, conn=conn.id)
                parts.append({"partition_index": index, "error_code": code})
            topics.append({"name": t.name, "partitions": parts})
        results.append({"producer_id": marker.producer_id, "topics": topics})
    return build(response_class(27, req.api_version), {"markers": results})
