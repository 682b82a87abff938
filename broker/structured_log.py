"""structlog set-up: one renderer for people (console) and one for machines (JSON lines); the event
loop's exception handler (failures nobody awaited become one structured line); and a limiter for
lines that a retrying client would otherwise repeat many times a second."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import structlog


def configure_logging(fmt: str = "console", level: str = "info") -> None:
    renderer: structlog.types.Processor
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper(), logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)


_loop_log = get_logger("sharebroker.loop")


def loop_exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """What asyncio reports itself (a task or future that failed and was never awaited, a
    callback that raised, a transport error) as one structured line instead of its multi-line
    default."""
    exc = context.get("exception")
    fields: dict[str, Any] = {"message": context.get("message")}
    source = context.get("task") or context.get("future")
    if source is not None:
        fields["task"] = _describe(source)
    elif context.get("handle") is not None:
        fields["callback"] = repr(context["handle"])[:200]
    event = "unhandled error in background task" if source is not None else "unhandled event loop error"
    if exc is None:
        _loop_log.warning(event, **fields)
        return
    fields["error"] = f"{type(exc).__name__}: {exc}"
    _loop_log.error(event, exc_info=exc, **fields)


def _describe(source: Any) -> str:
    get_coro = getattr(source, "get_coro", None)
    coro = get_coro() if get_coro is not None else None
    name = getattr(source, "get_name", lambda: type(source).__name__)()
    qualname = getattr(coro, "__qualname__", None)
    return f"{name} ({qualname})" if qualname else name


def install_loop_exception_handler(loop: asyncio.AbstractEventLoop) -> None:
    loop.set_exception_handler(loop_exception_handler)


class Repeats:
    """Lets the first occurrence of each key through, then one per `interval_s`; `allow` returns
    how many were held back since the last one let through (None: hold this one back). For
    failures a client retries many times a second (a full disk), so the log keeps one line per
    cause and interval with a count, not one per request."""

    def __init__(self, interval_s: float, *, max_keys: int = 1024,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self.max_keys = max_keys
        self._clock = clock
        self._seen: OrderedDict[Hashable, list[float | int]] = OrderedDict()

    def allow(self, key: Hashable) -> int | None:
        now = self._clock()
        entry = self._seen.get(key)
        if entry is None:
            self._seen[key] = [now, 0]
            if len(self._seen) > self.max_keys:
                self._seen.popitem(last=False)
            return 0
        if now - entry[0] >= self.interval_s:
            held = int(entry[1])
            entry[0], entry[1] = now, 0
            self._seen.move_to_end(key)
            return held
        entry[1] += 1
        return None

    def forget(self, key: Hashable) -> None:
        self._seen.pop(key, None)
