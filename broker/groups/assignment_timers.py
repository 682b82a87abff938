"""The timers that compute a group's pending target assignment once Kafka's assignment interval
has passed (`group.share.assignment.interval.ms`, `group.consumer.assignment.interval.ms`): one per
group, each running the coordinator's assignment as a task of its own when due. And the two
conversions of the time of the last computation between this process's monotonic clock and the
wall-clock AssignmentTimestamp (Kafka 4.3+) of the target-assignment metadata records, through
which the interval runs on across a restart."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any

from sharebroker.broker.clock import Clock, TimerHandle


def assignment_timestamp(clock: Clock, monotonic_ms: int | None) -> int:
    """The wall-clock time of a computation's monotonic one, for AssignmentTimestamp (0: unknown,
    or none yet)."""
    if monotonic_ms is None:
        return 0
    return max(1, clock.wall_ms() - (clock.monotonic_ms() - monotonic_ms))


def assignment_time(clock: Clock, timestamp_ms: int) -> int | None:
    """A replayed AssignmentTimestamp on this process's monotonic clock: as Kafka, the interval
    runs on from the last computation across a restart (a time ahead of the wall clock counts as
    now); 0, from a broker before 4.3 or for an emptied group, means none (the next target may be
    computed at once)."""
    if timestamp_ms <= 0:
        return None
    return clock.monotonic_ms() - max(0, clock.wall_ms() - timestamp_ms)


class AssignmentTimers:
    """At most one pending timer per group; when it is due, `assign(group_id)` runs as a task,
    kept until it ends so that `stop` can cancel it."""

    def __init__(self, clock: Clock, assign: Callable[[str], Coroutine[Any, Any, None]], name: str) -> None:
        self._clock = clock
        self._assign = assign
        self._name = name
        self._timers: dict[str, tuple[int, TimerHandle]] = {}  # group -> (due, its timer)
        self._tasks: set[asyncio.Task[None]] = set()

    def __contains__(self, group_id: str) -> bool:
        return group_id in self._timers

    def pending(self) -> list[str]:
        """The groups with a timer set."""
        return list(self._timers)

    def schedule(self, group_id: str, due_ms: int) -> None:
        """Run the group's assignment at `due_ms` (monotonic); an earlier timer with another due
        time is replaced (the interval changed since it was set)."""
        scheduled = self._timers.get(group_id)
        if scheduled is not None:
            if scheduled[0] == due_ms:
                return
            scheduled[1].cancel()
        self._timers[group_id] = (due_ms, self._clock.call_at(due_ms, functools.partial(self.run_now, group_id)))

    def cancel(self, group_id: str) -> None:
        scheduled = self._timers.pop(group_id, None)
        if scheduled is not None:
            scheduled[1].cancel()

    def run_now(self, group_id: str) -> None:
        """Run the group's assignment now (its timer, if any, is dropped)."""
        self.cancel(group_id)
        task = asyncio.get_running_loop().create_task(self._assign(group_id), name=self._name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        """Cancel every timer, and every assignment being computed and written."""
        for _, timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
