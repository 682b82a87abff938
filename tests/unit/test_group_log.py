"""__consumer_offsets compaction keeps every live group: a real Broker object on a temp dir, run
in-process (no sockets needed), compacted and then reopened."""

from __future__ import annotations

import contextlib
import types
from collections.abc import AsyncIterator
from pathlib import Path

from sharebroker.broker.flusher import now_ms
from sharebroker.broker.server import Broker
from sharebroker.config import BrokerConfig


@contextlib.asynccontextmanager
async def running_broker(path: Path, settings: dict[str, str] | None = None) -> AsyncIterator[Broker]:
    """A Broker with its log dir at `path` (an ephemeral port; `settings` on top), started, and
    stopped on the way out."""
    b = Broker(BrokerConfig.load(None, {}, {"log.dirs": str(path), "listeners": "PLAINTEXT://127.0.0.1:0",
                                            **(settings or {})}))
    await b.start()
    try:
        yield b
    finally:
        await b.stop()


async def compact_consumer_offsets(b: Broker) -> None:
    """Force a compaction of __consumer_offsets and check that it shrank the live records."""
    offsets = b.topics.get("__consumer_offsets")
    size_before = sum(p.log.high_watermark - p.log.log_start_offset for p in offsets.partitions)
    await b.group_log.compact(force=True)
    size_after = sum(p.log.high_watermark - p.log.log_start_offset for p in offsets.partitions)
    assert size_after < size_before


def _heartbeat(group: str, member: str, epoch: int, topics: tuple[str, ...] | None) -> types.SimpleNamespace:
    return types.SimpleNamespace(group_id=group, member_id=member, member_epoch=epoch, rack_id=None,
                                 subscribed_topic_names=topics)


CONN = types.SimpleNamespace(client_id="cid", client_host="/127.0.0.1")


def _persisted_view(g) -> tuple:
    """Everything the share group's records say about it."""
    return (g.epoch, tuple(sorted((tid, tuple(sorted(ps))) for tid, ps in g.initialized.items())),
            tuple(sorted((m.member_id, m.epoch, m.previous_epoch, m.rack_id, m.client_id, m.client_host, m.subscribed,
                          tuple(sorted((str(t), tuple(sorted(ps))) for t, ps in m.assignment.items())))
                         for m in g.members.values())))


async def test_compaction_keeps_live_groups_and_drops_history(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as b:
        b.topics.create("t", 2, {}, now_ms())
        epochs = {}
        for i in range(30):  # many changes: joins, leaves
            r = await b.share_groups.heartbeat(_heartbeat("g1", f"m{i}", 0, ("t",)), CONN)
            epochs[f"m{i}"] = r.member_epoch
            if i % 2:
                await b.share_groups.heartbeat(_heartbeat("g1", f"m{i}", -1, None), CONN)
        await b.share_groups.heartbeat(_heartbeat("g2", "x", 0, ("t",)), CONN)
        before = {gid: _persisted_view(g) for gid, g in b.share_groups.groups.items()}
        await compact_consumer_offsets(b)
    async with running_broker(tmp_path) as b2:
        after = {gid: _persisted_view(g) for gid, g in b2.share_groups.groups.items()}
        assert after == before
        assert set(b2.share_groups.groups["g1"].members) == {f"m{i}" for i in range(0, 30, 2)}
