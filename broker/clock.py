"""The broker's one clock and timer scheduler.

Deadlines (acquisition locks, sessions) are kept on the monotonic clock, so a step of the wall
clock neither expires nor stretches them; wall time is only for what Kafka stamps with it (record
and state timestamps, ``share.auto.offset.reset=by_duration``). Owners receive a ``Clock`` rather
than reading time themselves, so tests drive them with a manual one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def monotonic_ms(self) -> int:
        """Milliseconds on a clock that never steps; for deadlines."""
        ...

    def wall_ms(self) -> int:
        """Milliseconds since the epoch; for timestamps only."""
        ...

    def call_at(self, deadline_ms: int, callback: Callable[[], None]) -> TimerHandle:
        """Run ``callback`` on the event loop once ``monotonic_ms()`` reaches ``deadline_ms``."""
        ...


class LoopClock:
    """The real clock: CLOCK_MONOTONIC for deadlines, timers on the running event loop."""

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def call_at(self, deadline_ms: int, callback: Callable[[], None]) -> TimerHandle:
        delay = max(0, deadline_ms - self.monotonic_ms()) / 1000
        return asyncio.get_running_loop().call_later(delay, callback)


__all__ = ["Clock", "LoopClock", "TimerHandle"]
