"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31), v1–3.

Without an authorizer (`authorizer.class.name` unset, the default) they are answered as Kafka
answers them: SECURITY_DISABLED for the request or for each creation and filter. With the
StandardAuthorizer they read and change the broker's durable ACL store; DescribeAcls needs
DESCRIBE on the cluster, the other two ALTER (else CLUSTER_AUTHORIZATION_FAILED)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import refuse_cluster
from sharebroker.broker.security.acl_store import AclBinding, AclFilter, AclOperation, validate_new_acl
from sharebroker.broker.structured_log import get_logger
from sharebroker.protocol.codec import DecodedRequest, build, response_class
from sharebroker.protocol.errors import KafkaError

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

log = get_logger("sharebroker.acls")

NO_AUTHORIZER = "No Authorizer is configured."


@api(29)
async def describe_acls(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    cls = response_class(29, req.api_version)
    az = broker.authorizer
    if az is None:
        return build(cls, {"throttle_time": 0, "error_code": ErrorCode.security_disabled,
                           "error_message": "No Authorizer is configured on the broker", "resources": ()})
    if (denied := refuse_cluster(broker, conn, req, AclOperation.DESCRIBE)) is not None:
        return denied
    flt = AclFilter.from_wire(req.body)
    try:
        flt.validate()
    except KafkaError as exc:
        return build(cls, {"throttle_time": 0, "error_code": exc.code, "error_message": exc.message, "resources": ()})
    grouped: dict[tuple[int, str, int], list[AclBinding]] = {}
    for acl in az.store.acls(flt):
        grouped.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(acl)
    return build(cls, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "resources": [
        {"resource_type": rtype, "resource_name": name, "pattern_type": ptype,
         "acls": [{"principal": a.principal, "host": a.host, "operation": a.operation,
                   "permission_type": a.permission} for a in acls]}
        for (rtype, name, ptype), acls in grouped.items()]})


@api(30)
async def create_acls(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    cls = response_class(30, req.api_version)
    az = broker.authorizer
    if az is None:
        return build(cls, {"throttle_time": 0, "results": [
            {"error_code": ErrorCode.security_disabled, "error_message": NO_AUTHORIZER} for _ in req.body.creations]})
    if (denied := refuse_cluster(broker, conn, req, AclOperation.ALTER)) is not None:
        return denied
    results: list[dict[str, Any]] = []
    valid: list[AclBinding] = []
    for creation in req.body.creations:
        acl = AclBinding.from_wire(creation)
        try:
            validate_new_acl(acl)
        except KafkaError as exc:
            results.append({"error_code": exc.code, "error_message": exc.message})
            continue
        valid.append(acl)
        results.append({"error_code": ErrorCode.none, "error_message": None})
    if valid:
        az.store.add(valid)  # durable (fsync, rename) before the answer
        log.info("acls created", principal=str(conn.principal), count=len(valid), conn=conn.id)
    return build(cls, {"throttle_time": 0, "results": results})


@api(31)
async def delete_acls(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    cls = response_class(31, req.api_version)
    az = broker.authorizer
    if az is None:
        return build(cls, {"throttle_time": 0, "filter_results": [
            {"error_code": ErrorCode.security_disabled, "error_message": NO_AUTHORIZER, "matching_acls": ()}
            for _ in req.body.filters]})
    if (denied := refuse_cluster(broker, conn, req, AclOperation.ALTER)) is not None:
        return denied
    filters = [AclFilter.from_wire(f) for f in req.body.filters]
    errors: dict[int, KafkaError] = {}
    for i, flt in enumerate(filters):
        try:
            flt.validate()
        except KafkaError as exc:
            errors[i] = exc
    valid = [f for i, f in enumerate(filters) if i not in errors]
    matched = iter(az.store.remove(valid))
    results: list[dict[str, Any]] = []
    for i in range(len(filters)):
        if i in errors:
            results.append({"error_code": errors[i].code, "error_message": errors[i].message, "matching_acls": ()})
            continue
        deleted = next(matched)
        results.append({"error_code": ErrorCode.none, "error_message": None, "matching_acls": [
            {"error_code": ErrorCode.none, "error_message": None, "resource_type": a.resource_type,
             "resource_name": a.resource_name, "pattern_type": a.pattern_type, "principal": a.principal,
             "host": a.host, "operation": a.operation, "permission_type": a.permission} for a in deleted]})
    if any(r["matching_acls"] for r in results):
        log.info("acls deleted", principal=str(conn.principal),
                 count=sum(len(r["matching_acls"]) for r in results), conn=conn.id)
    return build(cls, {"throttle_time": 0, "filter_results": results})
