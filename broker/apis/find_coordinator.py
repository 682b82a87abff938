"""FindCoordinator (10) v0–6: this node coordinates every group (key type 0), every transactional
id (key type 1) and every share partition (key type 2, v6+)."""

from __future__ import annotations

import re
import uuid
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import (
    CLUSTER_DENIED,
    GROUP_DENIED,
    TRANSACTIONAL_ID_DENIED,
    Op,
    Res,
    allows,
)
from sharebroker.broker.security.acl_store import CLUSTER_NAME
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

GROUP, TRANSACTION, SHARE = 0, 1, 2
_SHARE_KEY = re.compile(r"^(.+):([^:]+):(-?\d+)$")


def _resolve(broker: Broker, conn: Connection, key: str, key_type: int,
             version: int) -> tuple[ErrorCode, str | None]:
    if key_type == GROUP:
        if not allows(broker, conn, Op.DESCRIBE, Res.GROUP, key):
            return ErrorCode.group_authorization_failed, GROUP_DENIED
        return ErrorCode.none, None
    if key_type == TRANSACTION:
        if not allows(broker, conn, Op.DESCRIBE, Res.TRANSACTIONAL_ID, key):
            return ErrorCode.transactional_id_authorization_failed, TRANSACTIONAL_ID_DENIED
        return ErrorCode.none, None
    if key_type == SHARE:
        if not allows(broker, conn, Op.CLUSTER_ACTION, Res.CLUSTER, CLUSTER_NAME):
            return ErrorCode.cluster_authorization_failed, CLUSTER_DENIED
        if version < 6:
            return ErrorCode.invalid_request, "Share coordinator keys need FindCoordinator version 6 or above."
        m = _SHARE_KEY.match(key or "")
        if m is None:
            return ErrorCode.invalid_request, f"Invalid share coordinator key: {key}"
        try:
            share_key_topic_id(m.group(2))
        except ValueError:
            return ErrorCode.invalid_request, f"Invalid topic id in share coordinator key: {key}"
        if int(m.group(3)) < 0:
            return ErrorCode.invalid_request, f"Invalid partition in share coordinator key: {key}"
        return ErrorCode.none, None
    return ErrorCode.invalid_request, f"Unknown coordinator key type {key_type}."


def share_key_topic_id(text: str) -> uuid.UUID:
    """The topic id of a share coordinator key: Kafka's Uuid.toString() form, 22 characters of
    URL-safe base64 (which may contain '-'), or else a dashed UUID."""
    return _b64_uuid(text) if len(text) == 22 else uuid.UUID(text)


def _b64_uuid(text: str) -> uuid.UUID:
    import base64
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(text)
    return uuid.UUID(bytes=raw)


def _coordinator(broker: Broker, conn: Connection, key: str, key_type: int,
                 version: int) -> tuple[ErrorCode, str | None, int, str, int]:
    """(error, message, node id, host, port) of the coordinator of `key`."""
    code, message = _resolve(broker, conn, key, key_type, version)
    if code != ErrorCode.none:
        return code, message, -1, "", -1
    workers = broker.workers
    if workers is None:
        return (code, message, broker.node_id, *broker.endpoint(conn.listener))
    return workers.coordinator_node(key, key_type)


@api(10)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    v = req.api_version
    key_type = getattr(body, "key_type", GROUP)
    cls = response_class(10, v)
    if v >= 4:
        coordinators = []
        for key in body.coordinator_keys:
            code, message, node_id, host, port = _coordinator(broker, conn, key, key_type, v)
            coordinators.append({"key": key, "node_id": node_id, "host": host, "port": port,
                                 "error_code": code, "error_message": message})
        return build(cls, {"throttle_time": 0, "coordinators": coordinators})
    code, message, node_id, host, port = _coordinator(broker, conn, body.key, key_type, v)
    return build(cls, {"throttle_time": 0, "error_code": code, "error_message": message,
                       "node_id": node_id, "host": host, "port": port})
