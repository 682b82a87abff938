"""InitProducerId (22) v0–5: a new producer id for an idempotent producer (or a bumped epoch,
KIP-360), and for a transactional id the id and epoch the transaction coordinator gives it."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api, error_response
from sharebroker.broker.apis.authorization import CLUSTER_DENIED, Op, Res, refuse_transactional_id
from sharebroker.broker.structured_log import get_logger
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

log = get_logger("sharebroker.producers")
_MAX_EPOCH = 32767


@api(22)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    cls = response_class(22, req.api_version)
    pid = getattr(body, "producer_id", -1)
    epoch = getattr(body, "producer_epoch", -1)
    if body.transactional_id is not None:
        if (denied := refuse_transactional_id(broker, conn, req, body.transactional_id)) is not None:
            return denied
        expected = (pid, epoch) if pid >= 0 else None
        timeout_ms = body.transaction_timeout // datetime.timedelta(milliseconds=1)
        result = await broker.transactions.init_producer_id(body.transactional_id, timeout_ms, expected)
        error = result.error
        if error == ErrorCode.producer_fenced and req.api_version < 4:
            error = ErrorCode.invalid_producer_epoch  # older clients do not know PRODUCER_FENCED
        if error not in (ErrorCode.none, ErrorCode.concurrent_transactions):
            log.info("transactional producer not initialised", transactional_id=body.transactional_id,
                     error=error.name, conn=conn.id)
        return build(cls, {"throttle_time": 0, "error_code": error, "producer_id": result.producer_id,
                           "producer_epoch": result.producer_epoch})
    az = broker.authorizer
    if az is not None and not az.allows_cluster(conn, Op.IDEMPOTENT_WRITE, log_denied=False) \
            and not az.authorize_by_resource_type(conn, Op.WRITE, Res.TOPIC):
        # as Kafka: an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic
        return error_response(req, ErrorCode.cluster_authorization_failed, CLUSTER_DENIED)
    if pid >= 0 and 0 <= epoch < _MAX_EPOCH - 1:
        # KIP-360: an idempotent producer may bump its own epoch to reset sequences.
        new_pid, new_epoch = pid, epoch + 1
    else:
        new_pid, new_epoch = broker.next_producer_id(), 0
    return build(cls, {"throttle_time": 0, "error_code": ErrorCode.none, "producer_id": new_pid,
                       "producer_epoch": new_epoch})
