"""The API router: one module per API (or tight family), each registering its handler by key.

A handler is `async def handle(broker, conn, req) -> response entity | None`; None means no
response (Produce with acks=0)."""

from __future__ import annotations

import importlib
import pkgutil
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


# Every module of this package is an API handler module; importing it registers its handlers.
for _info in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_info.name}")

_missing = set(API_VERSIONS) - set(HANDLERS)
assert not _missing, f"advertised APIs without a handler: {sorted(_missing)}"
