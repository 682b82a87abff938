"""fsync policy. Kafka's log.flush.interval.messages / .ms decide when a partition log is forced
to disk; by default (both unlimited) the OS decides. When an append crosses the message
threshold the producer's response waits for the fsync. fsyncs run in one worker thread, and every
request that arrives while one is running shares the next one (group commit), so
`log.flush.interval.messages=1` puts every acknowledged write on disk at the cost of one fsync per
batch of concurrent requests, not per request."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sharebroker.broker.structured_log import Repeats, get_logger

log = get_logger("sharebroker.flusher")
_failures = Repeats(10.0)  # a full disk fails every flush of a log: one line per log every 10 s


class Flusher:
    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fsync")
        self._pending: dict[int, tuple[Any, asyncio.Future[None]]] = {}
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="flusher")

    def sync(self, partition_log: Any) -> Awaitable[None]:
        """Register a flush of everything appended to `partition_log` so far, now; the result
        completes once it is on disk (registering before awaiting lets appends share a commit)."""
        key = id(partition_log)
        entry = self._pending.get(key)
        if entry is None:
            entry = (partition_log, asyncio.get_running_loop().create_future())
            self._pending[key] = entry
            self._wakeup.set()
        return asyncio.shield(entry[1])

    def request(self, partition_log: Any) -> None:
        """Schedule a flush without waiting for it (time-based policy)."""
        key = id(partition_log)
        if key not in self._pending:
            self._pending[key] = (partition_log, asyncio.get_running_loop().create_future())
            self._wakeup.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            batch, self._pending = self._pending, {}
            for partition_log, fut in batch.values():
                try:
                    await loop.run_in_executor(self._executor, partition_log.flush)
                    if not fut.done():
                        fut.set_result(None)
                except Exception as exc:
                    path = str(getattr(partition_log, "path", "?"))
                    if isinstance(exc, OSError):  # a full or failing disk: no traceback to read
                        held = _failures.allow(path)
                        if held is not None:
                            log.warning("flush failed", log=path, error=f"{type(exc).__name__}: {exc}",
                                        repeats_not_logged=held)
                    else:
                        log.exception("flush failed", log=path, error=f"{type(exc).__name__}: {exc}")
                    if not fut.done():
                        fut.set_exception(exc)
                        # Reported above; a flush nobody waits for (request()) must not come back
                        # as asyncio's "Future exception was never retrieved". Waiters still get it.
                        fut.exception()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        for _, fut in self._pending.values():
            if not fut.done():
                fut.cancel()
        self._executor.shutdown(wait=True)


def now_ms() -> int:
    return time.time_ns() // 1_000_000
