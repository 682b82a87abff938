"""delayed_fetch, the long poll of Fetch and ShareFetch, driven without sockets: futures the test
resolves stand for appends and acknowledgements, a manual clock for the deadline."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from sharebroker.broker.clock import LoopClock
from sharebroker.broker.delayed_fetch import delayed_fetch


class Timer:
    def __init__(self, deadline_ms: int, callback: Callable[[], None]) -> None:
        self.deadline_ms = deadline_ms
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    def __init__(self) -> None:
        self.now = 1_000
        self.timers: list[Timer] = []

    def monotonic_ms(self) -> int:
        return self.now

    def wall_ms(self) -> int:
        return self.now

    def call_at(self, deadline_ms: int, callback: Callable[[], None]) -> Timer:
        timer = Timer(deadline_ms, callback)
        self.timers.append(timer)
        return timer

    def advance(self, ms: int) -> None:
        self.now += ms
        for t in list(self.timers):
            if not t.cancelled and t.deadline_ms <= self.now:
                t.cancelled = True
                t.callback()


class Source:
    """What a partition or share leader does: hands out a fresh future per waiter."""

    def __init__(self) -> None:
        self.handed: list[asyncio.Future[None]] = []

    def waiter(self) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.handed.append(fut)
        return fut

    def wake(self) -> None:
        for fut in self.handed:
            if not fut.done():
                fut.set_result(None)

    def pending(self) -> list[asyncio.Future[None]]:
        return [f for f in self.handed if not f.done()]


class Attempts:
    """An attempt that returns how many times it ran; complete once `ready` is set."""

    def __init__(self) -> None:
        self.count = 0
        self.ready = False

    def __call__(self) -> int:
        self.count += 1
        return self.count

    def complete(self, _: int) -> bool:
        return self.ready


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def poll(attempts: Attempts, sources: list[Source], deadline_ms: int, clock: ManualClock | LoopClock
         ) -> asyncio.Task[int]:
    return asyncio.ensure_future(delayed_fetch(attempts, attempts.complete,
                                               lambda _: [s.waiter() for s in sources], deadline_ms, clock))


async def test_a_complete_first_attempt_returns_without_waiting():
    clock, attempts, source = ManualClock(), Attempts(), Source()
    attempts.ready = True
    assert await poll(attempts, [source], clock.now + 500, clock) == 1
    assert source.handed == [] and clock.timers == []


async def test_a_deadline_already_reached_answers_the_first_attempt():
    clock, attempts, source = ManualClock(), Attempts(), Source()
    assert await poll(attempts, [source], clock.now, clock) == 1
    assert source.handed == []


async def test_with_nothing_to_wait_on_the_first_attempt_stands():
    clock, attempts = ManualClock(), Attempts()
    assert await poll(attempts, [], clock.now + 500, clock) == 1
    assert clock.timers == []


async def test_an_append_wakes_it_and_the_other_waiters_are_cancelled():
    clock, attempts = ManualClock(), Attempts()
    appends, acks = Source(), Source()
    task = poll(attempts, [appends, acks], clock.now + 500, clock)
    await settle()
    assert not task.done() and attempts.count == 1
    attempts.ready = True
    appends.wake()
    assert await task == 2
    assert acks.handed[0].cancelled()
    assert clock.timers[0].cancelled  # the deadline timer is gone too


async def test_a_wake_that_does_not_complete_waits_again_with_fresh_waiters():
    clock, attempts, source = ManualClock(), Attempts(), Source()
    task = poll(attempts, [source], clock.now + 500, clock)
    await settle()
    source.wake()
    await settle()
    assert not task.done() and attempts.count == 2
    assert len(source.handed) == 2 and len(source.pending()) == 1
    attempts.ready = True
    source.wake()
    assert await task == 3


async def test_it_answers_at_the_deadline_with_the_last_attempt():
    clock, attempts, source = ManualClock(), Attempts(), Source()
    task = poll(attempts, [source], clock.now + 500, clock)
    await settle()
    clock.advance(499)
    await settle()
    assert not task.done()
    clock.advance(1)
    assert await task == 2  # one more try at the deadline, then the answer as it is
    assert source.pending() == [] and source.handed[0].cancelled()


async def test_a_waiter_already_done_retries_at_once():
    clock, attempts = ManualClock(), Attempts()

    def wakeups(_: int) -> list[asyncio.Future[None]]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return [fut]

    assert await delayed_fetch(attempts, lambda n: n >= 3, wakeups, clock.now + 500, clock) == 3
    assert clock.now == 1_000  # no time passed


async def test_cancelling_the_caller_propagates_and_cancels_the_waiters():
    clock, attempts = ManualClock(), Attempts()
    appends, acks = Source(), Source()
    task = poll(attempts, [appends, acks], clock.now + 500, clock)
    await settle()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert appends.handed[0].cancelled() and acks.handed[0].cancelled()
    assert clock.timers[0].cancelled


async def test_on_the_loop_clock_it_answers_at_the_deadline():
    clock, attempts, source = LoopClock(), Attempts(), Source()
    start = clock.monotonic_ms()
    assert await asyncio.wait_for(poll(attempts, [source], start + 30, clock), 5) == 2
    assert clock.monotonic_ms() >= start + 30
    assert source.handed[0].cancelled()
