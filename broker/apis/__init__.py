"""The API router: one module per API (or tight family), each registering its handler by key.

A handler is `async def handle(broker, conn, req) -> response entity | None`; None means no
response (Produce with acks=0)."""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from protocol.api_table import API_VERSIONS
from protocol.codec import DecodedRequest, build, has_field, response_class


class CloseConnection(Exception):
    """Raised by a handler that wants the connection closed without a response."""


Handler = Callable[[Any, Any, DecodedRequest], Awaitable[Any]]
HANDLERS: dict[int, Handler] = {}


def api(key: int) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        HANDLERS[key] = fn
        return fn
    return register


def error_response(req: DecodedRequest, code: ErrorCode, message: str) -> Any | None:
    """A top-level error response for APIs whose response has a top-level error code."""
    cls = response_class(req.api_key, req.api_version)
    if not has_field(cls, "error_code"):
        return None
    data: dict[str, Any] = {"error_code": code}
    if has_field(cls, "error_message"):
        data["error_message"] = message
    return build(cls, data)


_MODULES = (
    "api_versions", "metadata", "produce", "fetch", "list_offsets", "find_coordinator",
    "topics_admin", "configs", "describe_cluster", "init_producer_id", "delete_records",
    "list_groups", "share_group_heartbeat", "share_group_describe", "share_fetch", "share_acknowledge",
    "share_group_state",
)
for _name in _MODULES:
    importlib.import_module(f"broker.apis.{_name}")

_missing = set(API_VERSIONS) - set(HANDLERS)
assert not _missing, f"advertised APIs without a handler: {sorted(_missing)}"
