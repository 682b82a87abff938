"""The classic-group coordinator in-process on a temp dir (no sockets): group metadata and committed
offsets persisted in __consumer_offsets survive compaction and a restart; deleted groups and
expired offsets stay gone."""

from __future__ import annotations

from pathlib import Path

from kio.schema.errors import ErrorCode

from sharebroker.broker.flusher import now_ms
from sharebroker.broker.groups.classic_group import EMPTY, STABLE
from sharebroker.broker.server import Broker
from tests.unit.test_group_log import compact_consumer_offsets, running_broker

SETTINGS = {"group.initial.rebalance.delay.ms": "0"}


async def _stable_member(b: Broker, group: str) -> str:
    cg = b.classic_groups
    kw = {"group_id": group, "group_instance_id": None, "client_id": "c", "client_host": "/127.0.0.1",
              "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000, "protocol_type": "consumer",
              "protocols": (("range", b"meta"),), "version": 5}
    first = await cg.join(member_id="", **kw)
    assert first.error == ErrorCode.member_id_required
    joined = await cg.join(member_id=first.member_id, **kw)
    assert joined.error == ErrorCode.none and joined.generation_id == 1
    synced = await cg.sync(group_id=group, member_id=joined.member_id, group_instance_id=None, generation_id=1,
                           protocol_type="consumer", protocol_name="range", assignments={joined.member_id: b"A"})
    assert synced.error == ErrorCode.none and synced.assignment == b"A"
    return joined.member_id


async def _commit(b: Broker, group: str, offsets: list[tuple[str, int, int]], *, member: str = "",
                  generation: int = -1) -> None:
    errors = await b.classic_groups.commit_offsets(group_id=group, member_id=member, group_instance_id=None,
                                                   generation_id=generation,
                                                   offsets=[(t, p, o, -1, f"m{o}") for t, p, o in offsets], version=9)
    assert set(errors.values()) == {ErrorCode.none}, errors


async def test_groups_and_offsets_survive_compaction_and_restart(tmp_path: Path) -> None:
    async with running_broker(tmp_path, SETTINGS) as b:
        b.topics.create("t", 2, {}, now_ms())
        member = await _stable_member(b, "g")
        for i in range(40):
            await _commit(b, "g", [("t", 0, i), ("t", 1, 2 * i)], member=member, generation=1)
        await _commit(b, "simple", [("t", 0, 7)])
        await _commit(b, "gone", [("t", 1, 3)])
        assert await b.classic_groups.delete_group("gone") == (ErrorCode.none, None)
        assert (await b.classic_groups.delete_group("g"))[0] == ErrorCode.non_empty_group
        await compact_consumer_offsets(b)

    async with running_broker(tmp_path, SETTINGS) as b2:
        groups = b2.classic_groups.groups
        assert set(groups) == {"g", "simple"}
        g = groups["g"]
        assert g.state == STABLE and g.generation_id == 1 and g.protocol_name == "range"
        assert list(g.members) == [member] and g.members[member].assignment == b"A"
        assert g.offsets[("t", 0)].offset == 39 and g.offsets[("t", 1)].offset == 78
        assert g.offsets[("t", 1)].metadata == "m78"
        assert groups["simple"].state == EMPTY and groups["simple"].protocol_type is None
        # the member from before the restart carries on with its generation
        assert b2.classic_groups.heartbeat(group_id="g", member_id=member, group_instance_id=None,
                                           generation_id=1) == ErrorCode.none
        fetched = await b2.classic_groups.fetch_offsets("g", None, True)
        assert fetched == [("t", [(0, 39, -1, "m39", ErrorCode.none), (1, 78, -1, "m78", ErrorCode.none)])]
        assert await b2.classic_groups.fetch_offsets("gone", [("t", [1])], False) == [
            ("t", [(1, -1, -1, "", ErrorCode.none)])]


async def test_offsets_of_empty_groups_expire_and_the_group_goes(tmp_path: Path) -> None:
    async with running_broker(tmp_path, SETTINGS) as b:
        b.topics.create("t", 1, {}, now_ms())
        member = await _stable_member(b, "g")
        await _commit(b, "g", [("t", 0, 5)], member=member, generation=1)
        await _commit(b, "simple", [("t", 0, 1)])
        retention = b.config["offsets.retention.minutes"] * 60_000
        await b.classic_groups.expire_offsets(now_ms() + retention + 1)
        # a stable group subscribed to nothing we can parse keeps its offsets; the simple group expires
        assert "simple" not in b.classic_groups.groups
        assert b.classic_groups.groups["g"].offsets
        _, results = b.classic_groups.leave("g", [(member, None)])
        assert results == [(member, None, ErrorCode.none)]
        assert b.classic_groups.groups["g"].state == EMPTY
        await b.classic_groups.expire_offsets(now_ms() + retention + 1)
        assert "g" not in b.classic_groups.groups
    async with running_broker(tmp_path, SETTINGS) as b2:
        assert b2.classic_groups.groups == {}


async def test_topic_deletion_drops_its_offsets(tmp_path: Path) -> None:
    async with running_broker(tmp_path, SETTINGS) as b:
        b.topics.create("t", 1, {}, now_ms())
        b.topics.create("u", 1, {}, now_ms())
        await _commit(b, "s", [("t", 0, 3), ("u", 0, 4)])
        await b.delete_topic("t")
        assert set(b.classic_groups.groups["s"].offsets) == {("u", 0)}
    async with running_broker(tmp_path, SETTINGS) as b2:
        assert set(b2.classic_groups.groups["s"].offsets) == {("u", 0)}
