"""A member's session runs from its heartbeat's answer: a heartbeat that the group's write held past
the deadline it started from (the first write of a fresh broker creates an internal topic's 50
partitions first) does not leave its member expired the moment it is answered. Share and consumer
groups; in-process Broker with a manual clock, the slow write a persist that takes longer than
the session."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from sharebroker.broker.flusher import now_ms
from sharebroker.broker.server import Broker
from sharebroker.config import BrokerConfig
from tests.integration.share_helpers import heartbeat_request
from tests.integration.test_consumer_protocol import hb_request
from tests.unit.share_leader_support import ManualClock

SESSION_MS = 3000
CONN = SimpleNamespace(client_id="c", client_host="/127.0.0.1", principal="User:ANONYMOUS",
                       broker=SimpleNamespace(authorizer=None))


def slow(clock: ManualClock, persist: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def held(*args: Any, **kwargs: Any) -> Any:
        clock.mono += SESSION_MS + 1_000  # the write took longer than the session (no timer runs meanwhile)
        return await persist(*args, **kwargs)
    return held


async def started(tmp_path: Path, clock: ManualClock) -> Broker:
    b = Broker(BrokerConfig.load(None, {}, {
        "log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0",
        "group.share.min.session.timeout.ms": str(SESSION_MS), "group.share.session.timeout.ms": str(SESSION_MS),
        "group.consumer.min.session.timeout.ms": str(SESSION_MS),
        "group.consumer.session.timeout.ms": str(SESSION_MS), "group.consumer.min.heartbeat.interval.ms": "500",
        "group.consumer.heartbeat.interval.ms": "500", "group.share.min.heartbeat.interval.ms": "500",
        "group.share.heartbeat.interval.ms": "500"}), clock=clock)
    await b.start()
    b.topics.create("t", 1, {}, now_ms())
    return b


async def test_a_share_member_held_by_its_write_is_not_expired_at_its_answer(tmp_path: Path) -> None:
    clock = ManualClock()
    b = await started(tmp_path, clock)
    try:
        coordinator = b.share_groups
        coordinator.persist = slow(clock, coordinator.persist)  # type: ignore[method-assign]
        answer = await coordinator.heartbeat(heartbeat_request("g", "member-1", 0, ["t"]), CONN)  # type: ignore[arg-type]
        assert answer.member_epoch >= 1
        assert coordinator.groups["g"].expired_members(clock.monotonic_ms()) == []
        assert coordinator.groups["g"].expired_members(clock.monotonic_ms() + SESSION_MS) == ["member-1"]
    finally:
        await b.stop()


async def test_a_consumer_group_member_held_by_its_write_is_not_expired_at_its_answer(tmp_path: Path) -> None:
    clock = ManualClock()
    b = await started(tmp_path, clock)
    try:
        coordinator = b.consumer_groups
        coordinator.persist = slow(clock, coordinator.persist)  # type: ignore[method-assign]
        answer = await coordinator.heartbeat(hb_request("g", "member-1", 0, topics=("t",), rebalance_ms=5000, owned=()),
                                             1, CONN)  # type: ignore[arg-type]
        assert answer["member_epoch"] >= 1
        group = coordinator.groups["g"]
        assert group.expired(clock.monotonic_ms()) == []
        assert [m for m, _ in group.expired(clock.monotonic_ms() + SESSION_MS)] == ["member-1"]
    finally:
        await b.stop()

