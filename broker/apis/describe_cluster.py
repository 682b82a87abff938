"""DescribeCluster (60) v0–2."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import Op, Res, operations
from sharebroker.broker.security.acl_store import CLUSTER_NAME
from sharebroker.broker.apis.metadata import CLUSTER_OPERATIONS, INT32_MIN
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker


def _cluster_operations(broker: Broker, conn: Connection, include: bool) -> int:
    """As Kafka's AuthHelper: asked for, the cluster's authorized operations, 0 without DESCRIBE."""
    az = broker.authorizer
    if not include:
        return INT32_MIN
    if az is None:
        return CLUSTER_OPERATIONS
    if not az.allows_cluster(conn, Op.DESCRIBE):
        return 0
    return operations(broker, conn, True, Res.CLUSTER, CLUSTER_NAME)


@api(60)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    endpoint_type = getattr(body, "endpoint_type", 1)
    if endpoint_type not in (1, 2):
        return build(response_class(60, req.api_version), {
            "throttle_time": 0, "error_code": ErrorCode.unsupported_endpoint_type,
            "error_message": f"Unsupported endpoint type {endpoint_type}", "endpoint_type": endpoint_type,
            "cluster_id": broker.cluster_id, "controller_id": -1, "brokers": ()})
    host, port = broker.endpoint(conn.listener)
    nodes = [(broker.node_id, host, port)] if broker.workers is None else broker.workers.brokers()
    return build(response_class(60, req.api_version), {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "endpoint_type": endpoint_type,
        "cluster_id": broker.cluster_id,
        "controller_id": nodes[0][0],
        "brokers": [{"broker_id": node_id, "host": node_host, "port": node_port,
                     "rack": broker.config["broker.rack"], "is_fenced": False}
                    for node_id, node_host, node_port in nodes],
        "cluster_authorized_operations": _cluster_operations(broker, conn, body.include_cluster_authorized_operations),
    })
