"""The API router: one module per API (or tight family), each registering its handler by key.

A handler is `async def handle(broker, conn, req) -> response entity | None`; None means no
response (Produce with acks=0)."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.protocol.api_table import API_VERSIONS
from sharebroker.protocol.codec import DecodedRequest, build, has_field, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker


class CloseConnection(Exception):
    """Raised by a handler that wants the connection closed without a response."""


# The response is a kio entity of the request's version (Any: kio has a class per version).
Handler = Callable[["Broker", "Connection", DecodedRequest], Awaitable[Any]]
HANDLERS: dict[int, Handler] = {}


def api(key: int) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        HANDLERS[key] = fn
        return fn
    return register


def _produce_errors(req: DecodedRequest, code: ErrorCode, message: str) -> dict[str, Any] | None:
    if req.body.acks == 0:
        return None  # Kafka closes an acks=0 connection on error: nothing is answered
    return {"throttle_time": 0, "responses": [
        {"name": getattr(td, "name", None), "topic_id": getattr(td, "topic_id", None),
         "partition_responses": [{"index": pd.index, "error_code": code, "base_offset": -1, "log_append_time": -1,
                                  "log_start_offset": -1, "record_errors": (), "error_message": message}
                                 for pd in td.partition_data]}
        for td in req.body.topic_data]}


def _fetch_errors(req: DecodedRequest, code: ErrorCode, message: str) -> dict[str, Any]:
    # As Kafka: v13+ carry the error at the top only; older versions also in every partition
    # (v4-6 have no top-level error code).
    topics = [] if req.api_version >= 13 else [
        {"topic": getattr(ft, "topic", None), "topic_id": getattr(ft, "topic_id", None),
         "partitions": [{"partition_index": fp.partition, "error_code": code, "high_watermark": -1,
                         "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
                         "preferred_read_replica": -1, "records": b""} for fp in ft.partitions]}
        for ft in req.body.topics]
    return {"throttle_time": 0, "error_code": code, "session_id": 0, "responses": topics, "node_endpoints": ()}


def _metadata_errors(req: DecodedRequest, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"throttle_time": 0, "brokers": (), "cluster_id": None, "controller_id": -1, "error_code": code,
            "topics": [{"error_code": code, "name": getattr(t, "name", None), "topic_id": getattr(t, "topic_id", None),
                        "is_internal": False, "partitions": (), "topic_authorized_operations": -(2**31)}
                       for t in req.body.topics or ()]}


def _list_offsets_errors(req: DecodedRequest, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code, "timestamp": -1,
                                         "offset": -1, "leader_epoch": -1} for p in t.partitions]}
        for t in req.body.topics]}


def _offset_commit_errors(req: DecodedRequest, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"throttle_time": 0, "topics": [
        {"name": getattr(t, "name", None), "topic_id": getattr(t, "topic_id", None),
         "partitions": [{"partition_index": p.partition_index, "error_code": code} for p in t.partitions]}
        for t in req.body.topics]}


def _delete_groups_errors(req: DecodedRequest, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"throttle_time": 0, "results": [{"group_id": g, "error_code": code} for g in req.body.groups_names]}


def _create_topics_errors(req: DecodedRequest, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"throttle_time": 0, "topics": [
        {"name": t.name, "topic_id": None, "error_code": code, "error_message": message, "topic_config_error_code": 0,
         "num_partitions": -1, "replication_factor": -1, "configs": None} for t in req.body.topics]}


def _delete_topics_errors(req: DecodedRequest, code: ErrorCode, message: str) -> dict[str, Any]:
    body = req.body
    topics = ([(t.name, t.topic_id) for t in body.topics] if hasattr(body, "topics")
              else [(name, None) for name in body.topic_names])
    return {"throttle_time": 0, "responses": [
        {"name": name, "topic_id": tid, "error_code": code, "error_message": message} for name, tid in topics]}


def _delete_records_errors(req: DecodedRequest, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index, "low_watermark": -1, "error_code": code}
                                        for p in t.partitions]}
        for t in req.body.topics]}


def _create_partitions_errors(req: DecodedRequest, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"throttle_time": 0, "results": [
        {"name": t.name, "error_code": code, "error_message": message} for t in req.body.topics]}


def _alter_configs_errors(req: DecodedRequest, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"throttle_time": 0, "responses": [
        {"error_code": code, "error_message": message, "resource_type": r.resource_type, "resource_name": r.resource_name}
        for r in req.body.resources]}


def _txn_offset_commit_errors(req: DecodedRequest, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code}
                                        for p in t.partitions]} for t in req.body.topics]}


def _offset_fetch_errors(req: DecodedRequest, code: ErrorCode, message: str) -> dict[str, Any]:
    body = req.body
    if req.api_version >= 8:
        return {"throttle_time": 0, "groups": [{"group_id": g.group_id, "error_code": code, "topics": ()}
                                               for g in body.groups]}
    # v1 has no top-level error: each partition asked for carries it, as Kafka's getErrorResponse
    return {"throttle_time": 0, "error_code": code, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
                                         "metadata": "", "error_code": code} for p in t.partition_indexes]}
        for t in body.topics or ()]}


def _elect_leaders_errors(req: DecodedRequest, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": code, "replica_election_results": [
        {"topic": t.topic, "partition_result": [{"partition_id": p, "error_code": code, "error_message": message}
                                                for p in t.partitions]}
        for t in req.body.topic_partitions or ()]}


def _create_acls_errors(req: DecodedRequest, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"throttle_time": 0, "results": [{"error_code": code, "error_message": message} for _ in req.body.creations]}


def _delete_acls_errors(req: DecodedRequest, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"throttle_time": 0, "filter_results": [
        {"error_code": code, "error_message": message, "matching_acls": ()} for _ in req.body.filters]}


def _alter_client_quotas_errors(req: DecodedRequest, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"throttle_time": 0, "entries": [
        {"error_code": code, "error_message": message,
         "entity": [{"entity_type": e.entity_type, "entity_name": e.entity_name} for e in entry.entity]}
        for entry in req.body.entries]}


def _alter_user_scram_credentials_errors(req: DecodedRequest, code: ErrorCode, message: str) -> dict[str, Any]:
    users = sorted({d.name for d in req.body.deletions} | {u.name for u in req.body.upsertions})
    return {"throttle_time": 0, "results": [{"user": u, "error_code": code, "error_message": message}
                                            for u in users]}


# APIs whose errors live per partition (or per group): each answers every entry of the request
# with the error, as Kafka's getErrorResponse does.
_PER_ENTRY_ERRORS: dict[int, Callable[[DecodedRequest, ErrorCode, str], dict[str, Any] | None]] = {
    0: _produce_errors,
    1: _fetch_errors,
    2: _list_offsets_errors,
    3: _metadata_errors,
    8: _offset_commit_errors,
    9: _offset_fetch_errors,
    19: _create_topics_errors,
    20: _delete_topics_errors,
    21: _delete_records_errors,
    28: _txn_offset_commit_errors,
    30: _create_acls_errors,
    31: _delete_acls_errors,
    33: _alter_configs_errors,
    37: _create_partitions_errors,
    42: _delete_groups_errors,
    43: _elect_leaders_errors,
    44: _alter_configs_errors,
    49: _alter_client_quotas_errors,
    51: _alter_user_scram_credentials_errors,
}


def error_response(req: DecodedRequest, code: ErrorCode, message: str) -> Any | None:
    """A response that answers the whole request with one error: in every partition (or group)
    for the APIs that carry errors there, else at the top level. None when the API has nowhere to
    put an error (or is Produce with acks=0): the connection is then closed."""
    cls = response_class(req.api_key, req.api_version)
    per_entry = _PER_ENTRY_ERRORS.get(req.api_key)
    if per_entry is not None:
        data = per_entry(req, code, message)
        return None if data is None else build(cls, data)
    if not has_field(cls, "error_code"):
        return None
    data = {"error_code": code}
    if has_field(cls, "error_message"):
        data["error_message"] = message
    return build(cls, data)


# Every module of this package is an API handler module; importing it registers its handlers.
for _info in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_info.name}")

_missing = set(API_VERSIONS) - set(HANDLERS)
assert not _missing, f"advertised APIs without a handler: {sorted(_missing)}"
