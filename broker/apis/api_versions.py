"""ApiVersions (18): the keys and version ranges actually served, plus supported features."""

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
        "supported_features": broker.supported_features(),
        "finalized_features_epoch": broker.features_epoch,
        "finalized_features": broker.finalized_features(),
    })
