"""The transaction coordinator's APIs: AddPartitionsToTxn (24) v0–5, AddOffsetsToTxn (25) v0–4 and
EndTxn (26) v0–4 (v5 is transaction version 2, not served), answered as Kafka's KafkaApis does,
including PRODUCER_FENCED sent as INVALID_PRODUCER_EPOCH to clients too old to know it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import (
    Op,
    Res,
    allows,
    refuse_cluster,
    refuse_group,
    refuse_transactional_id,
    topics_allowed,
)
from sharebroker.broker.structured_log import get_logger
from sharebroker.broker.topics import INTERNAL_TOPICS
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

log = get_logger("sharebroker.transactions")
OFFSETS_TOPIC = "__consumer_offsets"


def _fenced_as(error: ErrorCode, version: int, first_with_fenced: int) -> ErrorCode:
    if error == ErrorCode.producer_fenced and version < first_with_fenced:
        return ErrorCode.invalid_producer_epoch
    return error


def _topic_results(errors: dict[tuple[str, int], ErrorCode]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, index), code in errors.items():
        by_topic.setdefault(topic, []).append({"partition_index": index, "partition_error_code": code})
    return [{"name": name, "results_by_partition": parts} for name, parts in by_topic.items()]


async def _add_one(broker: Broker, txn_id: str | None, producer_id: int, epoch: int, topics: Any, version: int,
                   verify_only: bool, conn: Connection) -> dict[tuple[str, int], ErrorCode]:
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    if version < 4 and not allows(broker, conn, Op.WRITE, Res.TRANSACTIONAL_ID, txn_id or ""):
        return dict.fromkeys(wanted, ErrorCode.transactional_id_authorization_failed)
    # A client may not add an internal topic itself (Kafka leaves them out of its authorization).
    refused = {tp: ErrorCode.topic_authorization_failed for tp in wanted if version < 4 and tp[0] in INTERNAL_TOPICS}
    writable = (topics_allowed(broker, conn, Op.WRITE, {name for name, _ in wanted if name not in INTERNAL_TOPICS})
                if version < 4 else None)
    if writable is not None:
        refused.update({tp: ErrorCode.topic_authorization_failed for tp in wanted
                        if tp not in refused and tp[0] not in writable})
    refused.update({tp: ErrorCode.unknown_topic_or_partition for tp in wanted
                    if tp not in refused and broker.topics.partition(*tp) is None})
    if refused:
        # Any refused partition fails the whole request: the rest were not attempted.
        return {tp: refused.get(tp, ErrorCode.operation_not_attempted) for tp in wanted}
    coordinator = broker.transactions
    if verify_only:
        return coordinator.verify_partitions(txn_id or "", producer_id, epoch, wanted)
    error = await coordinator.add_partitions(txn_id or "", producer_id, epoch, wanted)
    if error not in (ErrorCode.none, ErrorCode.concurrent_transactions):
        log.info("partitions not added to transaction", transactional_id=txn_id, producer_id=producer_id,
                 epoch=epoch, error=error.name, conn=conn.id)
    return dict.fromkeys(wanted, _fenced_as(error, version, 2))


@api(24)
async def add_partitions_to_txn(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    v = req.api_version
    cls = response_class(24, v)
    if v >= 4 and (denied := refuse_cluster(broker, conn, req, Op.CLUSTER_ACTION)) is not None:
        return denied  # the broker-to-coordinator form is for brokers only
    if v < 4:
        errors = await _add_one(broker, body.v3_and_below_transactional_id, body.v3_and_below_producer_id,
                                body.v3_and_below_producer_epoch, body.v3_and_below_topics, v, False, conn)
        return build(cls, {"throttle_time": 0, "results_by_topic_v3_and_below": _topic_results(errors)})
    results = []
    for txn in body.transactions:
        errors = await _add_one(broker, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics, v,
                                txn.verify_only, conn)
        results.append({"transactional_id": txn.transactional_id, "topic_results": _topic_results(errors)})
    return build(cls, {"throttle_time": 0, "error_code": ErrorCode.none, "results_by_transaction": results})


@api(25)
async def add_offsets_to_txn(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    if (denied := refuse_transactional_id(broker, conn, req, body.transactional_id)) is not None:
        return denied
    if (denied := refuse_group(broker, conn, req, Op.READ, body.group_id)) is not None:
        return denied
    offsets = broker.group_log.partition_of(body.group_id)
    error = await broker.transactions.add_partitions(body.transactional_id, body.producer_id, body.producer_epoch,
                                                     [(OFFSETS_TOPIC, offsets)])
    return build(response_class(25, req.api_version),
                 {"throttle_time": 0, "error_code": _fenced_as(error, req.api_version, 2)})


@api(26)
async def end_txn(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    v = req.api_version
    if (denied := refuse_transactional_id(broker, conn, req, body.transactional_id)) is not None:
        return denied
    error = await broker.transactions.end_txn(body.transactional_id, body.producer_id, body.producer_epoch,
                                              body.committed)
    if error not in (ErrorCode.none, ErrorCode.concurrent_transactions):
        log.info("transaction not ended", transactional_id=body.transactional_id, producer_id=body.producer_id,
                 epoch=body.producer_epoch, commit=body.committed, error=error.name, conn=conn.id)
    data: dict[str, Any] = {"throttle_time": 0, "error_code": _fenced_as(error, v, 2)}
    if v >= 5:
        data.update(producer_id=-1, producer_epoch=-1)
    return build(response_class(26, v), data)

