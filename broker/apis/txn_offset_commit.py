"""TxnOffsetCommit (28) v0–5: a transactional producer's consumer offsets (send_offsets_to_transaction),
committed with its transaction. The group's `__consumer_offsets` partition must be in the
transaction (AddOffsetsToTxn), checked as Kafka's KIP-890 verification does; membership is
checked as for a transactional commit in Kafka's group coordinator."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import Op, refuse_group, refuse_transactional_id, topics_allowed
from sharebroker.broker.groups.group_log import OFFSETS_TOPIC
from sharebroker.broker.structured_log import get_logger
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

log = get_logger("sharebroker.transactions")


def _verify(broker: Broker, body: Any, version: int) -> ErrorCode | None:
    """Is the group's offsets partition in the producer's open transaction? (v5 knows
    TRANSACTION_ABORTABLE)"""
    tp = (OFFSETS_TOPIC, broker.group_log.partition_of(body.group_id))
    return broker.transactions.verify_write(body.transactional_id, body.producer_id, body.producer_epoch, tp,
                                            knows_abortable=version >= 5)


@api(28)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    v = req.api_version
    if (denied := refuse_transactional_id(broker, conn, req, body.transactional_id)) is not None:
        return denied
    if (denied := refuse_group(broker, conn, req, Op.READ, body.group_id)) is not None:
        return denied
    readable = topics_allowed(broker, conn, Op.READ, (t.name for t in body.topics))
    offsets = [(t.name, p.partition_index, p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                p.committed_metadata) for t in body.topics for p in t.partitions
               if readable is None or t.name in readable]
    unreadable = {(t.name, p.partition_index): ErrorCode.topic_authorization_failed for t in body.topics
                  for p in t.partitions if readable is not None and t.name not in readable}
    member_id = getattr(body, "member_id", "") or ""
    instance_id = getattr(body, "group_instance_id", None)
    generation = getattr(body, "generation_id", -1)
    group_type = broker.group_type(body.group_id)
    error = _verify(broker, body, v)
    if error is None and group_type == "consumer":
        # The consumer coordinator checks the member epoch; the offsets store then takes the
        # offsets without a classic membership check.
        refused = broker.consumer_groups.validate_offset_commit(body.group_id, member_id, instance_id, generation, v,
                                                                transactional=True)
        error = None if refused is None else refused[0]
        member_id, instance_id, generation = "", None, -1
    elif error is None and group_type not in (None, "classic"):
        error = ErrorCode.group_id_not_found
    if error is not None:
        errors = {(t, p): error for t, p, *_ in offsets}
        log.info("transactional offset commit refused", group=body.group_id, transactional_id=body.transactional_id,
                 producer_id=body.producer_id, epoch=body.producer_epoch, error=error.name, conn=conn.id)
    else:
        errors = await broker.classic_groups.txn_commit_offsets(
            group_id=body.group_id, producer_id=body.producer_id, producer_epoch=body.producer_epoch,
            member_id=member_id, group_instance_id=instance_id, generation_id=generation, offsets=offsets)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), code in {**unreadable, **errors}.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
    return build(response_class(28, v), {"throttle_time": 0, "topics": [
        {"name": name, "partitions": parts} for name, parts in by_topic.items()]})
