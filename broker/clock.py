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


# A timer or periodic check that runs more than this after it was due ran after a stall of the event
# loop: a step that held it (creating an internal topic's 50 partitions), or the process not being
# scheduled on a loaded machine. Requests that arrived meanwhile may still wait unread in sockets.
STALL_MS = 100
# Expiry is held back at most this long while every check runs late (a loop that never catches up).
MAX_HOLD_MS = 30_000


class ExpiryHold:
    """Session expiry that runs late is held back until a check runs on time, so that what arrived
    during the stall (a member's heartbeat) is served first. Kafka's network threads read requests
    while its coordinator is busy, so there a heartbeat that arrived before the deadline is queued
    ahead of the expiry; here the timer would otherwise run before the loop reads the socket, and
    expire a member that was on time. Back-to-back stalls hold it again, up to MAX_HOLD_MS."""

    def __init__(self) -> None:
        self._since: int | None = None  # when the checks started running late

    def holds(self, due_ms: int, now_ms: int) -> bool:
        """Whether a check due at `due_ms` and running at `now_ms` must skip expiring (and check
        again STALL_MS later)."""
        if now_ms - due_ms <= STALL_MS:
            self._since = None
            return False
        if self._since is None:
            self._since = now_ms
        if now_ms - self._since >= MAX_HOLD_MS:
            self._since = None
            return False
        return True


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


__all__ = ["MAX_HOLD_MS", "STALL_MS", "Clock", "ExpiryHold", "LoopClock", "TimerHandle"]
