"""InitProducerId (22) v0–5 for idempotent producers. A transactional id is refused until
transactions are implemented (they are not advertised either)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
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
    if body.transactional_id is not None:
        log.info("transactional producer refused", transactional_id=body.transactional_id, conn=conn.id)
        return build(cls, {"throttle_time": 0, "error_code": ErrorCode.coordinator_not_available,
                           "producer_id": -1, "producer_epoch": -1})
    pid = getattr(body, "producer_id", -1)
    epoch = getattr(body, "producer_epoch", -1)
    if pid >= 0 and 0 <= epoch < _MAX_EPOCH - 1:
        # KIP-360: an idempotent producer may bump its own epoch to reset sequences.
        new_pid, new_epoch = pid, epoch + 1
    else:
        new_pid, new_epoch = broker.next_producer_id(), 0
    return build(cls, {"throttle_time": 0, "error_code": ErrorCode.none, "producer_id": new_pid,
                       "producer_epoch": new_epoch})
