"""ExpiryHold: session expiry that runs late (after a stall of the event loop) is held back until a
check runs on time, through back-to-back stalls, and at most MAX_HOLD_MS."""

from __future__ import annotations

from sharebroker.broker.clock import MAX_HOLD_MS, STALL_MS, ExpiryHold


def test_an_on_time_check_expires() -> None:
    assert not ExpiryHold().holds(due_ms=1_000, now_ms=1_000 + STALL_MS)


def test_a_late_check_holds_until_one_runs_on_time() -> None:
    hold = ExpiryHold()
    assert hold.holds(due_ms=1_000, now_ms=4_000)  # the loop was held three seconds
    assert hold.holds(due_ms=4_100, now_ms=6_500)  # and again, right after: still held
    assert not hold.holds(due_ms=6_600, now_ms=6_610)  # a check on time: the backlog was served
    assert hold.holds(due_ms=7_000, now_ms=7_500)  # a later stall holds afresh


def test_a_loop_that_never_catches_up_expires_after_the_cap() -> None:
    hold = ExpiryHold()
    now = 10_000
    assert hold.holds(due_ms=now - 1_000, now_ms=now)
    while hold.holds(due_ms=now - 1_000, now_ms=now):
        now += 1_000
        assert now - 10_000 <= MAX_HOLD_MS
    assert now - 10_000 == MAX_HOLD_MS
