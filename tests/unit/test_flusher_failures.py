"""Flusher: a failed flush reaches whoever waits for it, and one nobody waits for (a background
request) is logged once by the flusher instead of coming back later as asyncio's "Future exception
was never retrieved"."""

from __future__ import annotations

import asyncio
import errno
import gc
from pathlib import Path

import pytest

from sharebroker.broker.flusher import Flusher


class FullDiskLog:
    def __init__(self, name: str) -> None:
        self.path = Path("/data") / name
        self.calls = 0

    def flush(self) -> int:
        self.calls += 1
        raise OSError(errno.ENOSPC, "No space left on device")


async def test_failed_flushes_reach_waiters_and_nothing_is_left_unretrieved():
    loop = asyncio.get_running_loop()
    reported: list[dict] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    flusher = Flusher()
    flusher.start()
    try:
        background = FullDiskLog("t-0")
        flusher.request(background)  # nobody awaits this one
        waited = FullDiskLog("t-1")
        with pytest.raises(OSError) as exc:
            await asyncio.wait_for(flusher.sync(waited), 5)
        assert exc.value.errno == errno.ENOSPC
        assert background.calls == 1  # same round, before the awaited one
        # A new round drops the one that held the failed futures; they are freed and collected.
        last = FullDiskLog("t-2")
        flusher.request(last)
        deadline = loop.time() + 5
        while last.calls == 0 and loop.time() < deadline:
            await asyncio.sleep(0.01)
        assert last.calls == 1
        gc.collect()
    finally:
        await flusher.stop()
    gc.collect()
    assert not [c for c in reported if "never retrieved" in c.get("message", "")], reported
