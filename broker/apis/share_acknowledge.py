"""ShareAcknowledge (79) v1–2: acknowledgements outside a fetch, on the same session epoch counter
as ShareFetch; epoch -1 closes the session and releases what the member still holds."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import Op, refuse_group, topic_refusal
from sharebroker.broker.apis.share_common import (
    apply_acknowledgements,
    check_ids,
    current_leader,
    merge_topics,
    resolve_partition,
)
from sharebroker.broker.share.sessions import FINAL_EPOCH, INITIAL_EPOCH
from sharebroker.broker.structured_log import get_logger
from sharebroker.protocol.codec import DecodedRequest, build, response_class
from sharebroker.protocol.errors import KafkaError

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

log = get_logger("sharebroker.share")


@api(79)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    v = req.api_version
    cls = response_class(79, v)
    group_id, member_id, epoch = body.group_id, body.member_id, body.share_session_epoch
    is_renew = bool(getattr(body, "is_renew_ack", False))
    if (denied := refuse_group(broker, conn, req, Op.READ, group_id)) is not None:
        return denied
    refused = topic_refusal(broker, conn)
    try:
        check_ids(group_id, member_id)
        if epoch == INITIAL_EPOCH:
            raise KafkaError(ErrorCode.invalid_share_session_epoch,
                             "A share session cannot be opened by ShareAcknowledge (epoch 0).")
        session = broker.share.sessions.check(group_id, member_id, epoch)
        if epoch != FINAL_EPOCH:
            session.bump()
    except KafkaError as exc:
        log.warning("share acknowledge refused", conn=conn.id, group=group_id, member=member_id, epoch=epoch,
                    error=exc.code.name, message=exc.message)
        return build(cls, {"throttle_time": 0, "error_code": exc.code, "error_message": exc.message,
                           "acquisition_lock_timeout": 0, "responses": ()})

    acks = merge_topics(body.topics)
    by_topic: dict[Any, list[dict[str, Any]]] = {}
    topics: dict[str, bool] | None = {} if broker.metrics.enabled else None
    for (topic_id, index), p in acks.items():
        if refused is not None and refused(topic_id):
            code, message = ErrorCode.topic_authorization_failed, None
        else:
            code, message = await apply_acknowledgements(broker, group_id, member_id, topic_id, index,
                                                         p.acknowledgement_batches, version=v, is_renew=is_renew,
                                                         topics=topics)
        partition, _, _ = resolve_partition(broker, topic_id, index)
        by_topic.setdefault(topic_id, []).append({
            "partition_index": index, "error_code": code, "error_message": message,
            "current_leader": current_leader(broker, partition)})
    if topics:
        conn.share_facts = (None, topics)
    if epoch == FINAL_EPOCH:
        await broker.share.release_session(session)
    return build(cls, {
        "throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
        "acquisition_lock_timeout": broker.share_groups.limits(group_id).record_lock_duration_ms,
        "responses": [{"topic_id": tid, "partitions": parts} for tid, parts in by_topic.items()],
        "node_endpoints": (),
    })
