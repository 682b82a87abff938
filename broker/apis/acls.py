"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31), v1–3, answered as a Kafka broker without
an authorizer answers them (`authorizer.class.name` unset, the default): SECURITY_DISABLED with
"No Authorizer is configured." for the request or for each creation and filter. Tools that list
ACLs on connect then show "security disabled" instead of failing on an unknown API."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

NO_AUTHORIZER = "No Authorizer is configured."


@api(29)
async def describe_acls(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    return build(response_class(29, req.api_version), {
        "throttle_time": 0, "error_code": ErrorCode.security_disabled, "error_message": NO_AUTHORIZER, "resources": ()})


@api(30)
async def create_acls(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    return build(response_class(30, req.api_version), {"throttle_time": 0, "results": [
        {"error_code": ErrorCode.security_disabled, "error_message": NO_AUTHORIZER} for _ in req.body.creations]})


@api(31)
async def delete_acls(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    return build(response_class(31, req.api_version), {"throttle_time": 0, "filter_results": [
        {"error_code": ErrorCode.security_disabled, "error_message": NO_AUTHORIZER, "matching_acls": ()}
        for _ in req.body.filters]})
