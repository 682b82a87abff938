"""Classic-group deadlines (sessions, join and sync timers) run on the broker's monotonic clock: a
step of the wall clock neither expires a member nor keeps one alive, and the state timestamp the
group's record holds is still wall time (Kafka's currentStateTimestamp). In-process Broker with
a manual clock (the Clock seam every owner is built with)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from kio.schema.errors import ErrorCode

from sharebroker.broker.groups import classic_records as crec
from sharebroker.broker.groups.classic_group import EMPTY, STABLE
from sharebroker.broker.server import Broker
from sharebroker.config import BrokerConfig
from tests.unit.share_leader_support import ManualClock

T = TypeVar("T")
SESSION_MS = 10_000


async def settle(clock: ManualClock, work: Awaitable[T]) -> T:
    """Await `work`, moving the manual clock 1 ms per loop turn so zero-delay timers fire."""
    task = asyncio.ensure_future(work)
    for _ in range(1000):
        if task.done():
            return task.result()
        await asyncio.sleep(0)
        clock.advance(1)
    raise AssertionError("did not complete")


async def until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0)


async def test_members_expire_on_the_monotonic_clock_not_the_wall_clock(tmp_path: Path) -> None:
    clock = ManualClock()
    b = Broker(BrokerConfig.load(None, {}, {"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0",
                                            "group.initial.rebalance.delay.ms": "0"}), clock=clock)
    await b.start()
    try:
        # The offsets topic first: its files are made on a worker thread, in real time, which
        # `settle`'s turns of the manual clock do not wait for.
        await b.group_log._topic()
        cg = b.classic_groups
        kw = {"group_id": "g", "group_instance_id": None, "client_id": "c", "client_host": "/127.0.0.1",
              "session_timeout_ms": SESSION_MS, "rebalance_timeout_ms": SESSION_MS, "protocol_type": "consumer",
              "protocols": (("range", b"meta"),), "version": 5}
        first = await settle(clock, cg.join(member_id="", **kw))
        joined = await settle(clock, cg.join(member_id=first.member_id, **kw))
        member = joined.member_id
        synced = await settle(clock, cg.sync(group_id="g", member_id=member, group_instance_id=None,
                                             generation_id=joined.generation_id, protocol_type="consumer",
                                             protocol_name="range", assignments={member: b"A"}))
        assert synced.error == ErrorCode.none and cg.groups["g"].state == STABLE

        clock.wall += 3_600_000  # the wall clock jumps an hour: nothing expires
        clock.advance(SESSION_MS - 1_000)
        assert cg.heartbeat(group_id="g", member_id=member, group_instance_id=None,
                            generation_id=joined.generation_id) == ErrorCode.none
        clock.wall -= 7_200_000  # and back two: nothing is kept alive either
        clock.advance(SESSION_MS + 1)  # a session without a heartbeat, on the monotonic clock
        # The timer runs well after its due time, as after a stall of the loop: the expiry waits
        # STALL_MS for requests that arrived meanwhile, then removes the member.
        await settle(clock, until(lambda: not cg.groups["g"].members))
        group = cg.groups["g"]
        assert group.state == EMPTY and not group.members

        # The record says when the group became empty in wall time.
        snap = crec.decode_group_metadata_value(cg._persisted["g"])
        assert abs(snap.state_timestamp_ms - clock.wall) < 100
    finally:
        await b.stop()
