"""The one long poll, for Fetch and ShareFetch alike (Kafka's DelayedFetch and DelayedShareFetch):
try; while the answer is not complete and the deadline has not passed, wait until something that
could change it happens (an append, an acknowledgement, a release, a lock expiry), then try again.

The handlers say what to try, when the answer is complete and what to wait on; waking, the
deadline and cleaning up the waiters happen here, once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TypeVar

from sharebroker.broker.clock import Clock

__all__ = ["delayed_fetch"]

T = TypeVar("T")


async def delayed_fetch(attempt: Callable[[], T], complete: Callable[[T], bool],
                        wakeups: Callable[[T], Sequence[asyncio.Future[None]]],
                        deadline_ms: int, clock: Clock) -> T:
    """The first result of `attempt()` that is `complete`, or the last one at `deadline_ms` (on
    `clock`'s monotonic clock). Between attempts it waits for the first of `wakeups(result)` (fresh
    futures, resolved by whatever could change the answer) or the deadline; with nothing to wait
    on, the result stands as it is. The futures are cancelled once the wait ends, however it ends;
    a cancellation of the caller propagates."""
    while True:
        result = attempt()
        if complete(result) or clock.monotonic_ms() >= deadline_ms:
            return result
        waiters = wakeups(result)
        if not waiters:
            return result
        await _first_of(waiters, deadline_ms, clock)


async def _first_of(waiters: Sequence[asyncio.Future[None]], deadline_ms: int, clock: Clock) -> None:
    """Wait until one of `waiters` is done or the deadline comes, then cancel them all."""
    woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def wake(_: object = None) -> None:
        if not woken.done():
            woken.set_result(None)

    timer = clock.call_at(deadline_ms, wake)
    for w in waiters:
        w.add_done_callback(wake)
    try:
        await woken
    finally:
        timer.cancel()
        for w in waiters:
            w.remove_done_callback(wake)
            w.cancel()  # their owners drop them from their waiter sets
