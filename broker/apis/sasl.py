"""SaslHandshake (17) and SaslAuthenticate (36) outside an exchange, and AlterUserScramCredentials (51).

On a SASL listener the connection's SaslSession answers both before authentication (see
broker/security/sasl.py); a handshake on an authenticated connection starts re-authentication
there too. What reaches these handlers is what Kafka's KafkaApis answers: a handshake on a
PLAINTEXT or SSL listener, or a SaslAuthenticate after authentication, with ILLEGAL_SASL_STATE."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import Op, refuse_cluster
from sharebroker.broker.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_NAMES,
    MIN_ITERATIONS,
    ScramCredential,
    credential_from_salted,
)
from sharebroker.broker.structured_log import get_logger
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

log = get_logger("sharebroker.security")
_TWICE = "A user credential cannot be altered twice in the same request"


@api(17)
async def sasl_handshake(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    return build(response_class(17, req.api_version), {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": ()})


@api(36)
async def sasl_authenticate(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    return build(response_class(36, req.api_version), {
        "error_code": ErrorCode.illegal_sasl_state,
        "error_message": "SaslAuthenticate request received after successful authentication",
        "auth_bytes": b"", "session_lifetime": 0})


def _check(name: str, mechanism: int) -> tuple[ErrorCode, str] | None:
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if mechanism not in MECHANISM_NAMES:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    return None


@api(51)
async def alter_user_scram_credentials(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    """As Kafka's ScramControlManager.alterCredentials: each user altered at most once per request,
    deletions of what exists, upsertions with 4096..16384 iterations; the valid ones applied at once.
    With ACLs on, it needs ALTER on the cluster."""
    if (denied := refuse_cluster(broker, conn, req, Op.ALTER)) is not None:
        return denied
    store = broker.scram_credentials
    deletes: dict[str, str] = {}
    upserts: dict[str, tuple[str, ScramCredential]] = {}
    errors: dict[str, tuple[ErrorCode, str]] = {}
    for d in req.body.deletions:
        if d.name in errors:
            continue
        if deletes.pop(d.name, None) is not None:
            errors[d.name] = (ErrorCode.duplicate_resource, _TWICE)
            continue
        error = _check(d.name, int(d.mechanism))
        if error is None and store.get(d.name, MECHANISM_NAMES[int(d.mechanism)]) is None:
            error = (ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist")
        if error is not None:
            errors[d.name] = error
        else:
            deletes[d.name] = MECHANISM_NAMES[int(d.mechanism)]
    for u in req.body.upsertions:
        if u.name in errors:
            continue
        if deletes.pop(u.name, None) is not None or upserts.pop(u.name, None) is not None:
            errors[u.name] = (ErrorCode.duplicate_resource, _TWICE)
            continue
        error = _check(u.name, int(u.mechanism))
        if error is None and u.iterations < MIN_ITERATIONS:
            error = (ErrorCode.unacceptable_credential, "Too few iterations")
        elif error is None and u.iterations > MAX_ITERATIONS:
            error = (ErrorCode.unacceptable_credential, "Too many iterations")
        if error is not None:
            errors[u.name] = error
            continue
        mechanism = MECHANISM_NAMES[int(u.mechanism)]
        upserts[u.name] = (mechanism, credential_from_salted(mechanism, u.salted_password, u.salt, u.iterations))
    if deletes or upserts:
        store.apply([(user, m, c) for user, (m, c) in upserts.items()], list(deletes.items()))
        log.info("SCRAM credentials altered", upserted=",".join(f"{u}/{m}" for u, (m, _) in upserts.items()),
                 deleted=",".join(f"{u}/{m}" for u, m in deletes.items()), principal=str(conn.principal))
    results = ([{"user": n, "error_code": ErrorCode.none, "error_message": None} for n in deletes]
               + [{"user": n, "error_code": ErrorCode.none, "error_message": None} for n in upserts]
               + [{"user": n, "error_code": code, "error_message": msg} for n, (code, msg) in errors.items()])
    return build(response_class(51, req.api_version), {"throttle_time": 0, "results": results})
