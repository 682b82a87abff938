"""ApiVersions (18): the keys and version ranges actually served, plus supported features. Below v4
the features whose lowest version is 0 are left out, as Kafka does (KAFKA-17492): Java clients
3.3–3.7 refuse a range starting at 0, and their AdminClient's thread dies of it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.protocol.api_table import API_VERSIONS
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker


@api(18)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    cls = response_class(18, req.api_version)
    keys = [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(API_VERSIONS.items())]
    return build(cls, {
        "error_code": ErrorCode.none,
        "api_keys": keys,
        "throttle_time": 0,
        "supported_features": [f for f in broker.supported_features()
                               if req.api_version >= 4 or f["min_version"] > 0],
        "finalized_features_epoch": broker.features_epoch,
        "finalized_features": broker.finalized_features(),
    })
