"""Consumer groups (KIP-848) in-process on a temp dir: a classic group upgraded by a consumer member
keeps its classic members (their ClassicMemberMetadata survives a restart), the last consumer member
leaving downgrades the group back to a classic group, and committed offsets of a consumer group
expire as Kafka's cleanupExpiredOffsets says (unsubscribed topics, counted from the commit; an
empty group left without offsets goes)."""

from __future__ import annotations

import struct
from pathlib import Path

from kio.schema.errors import ErrorCode

from sharebroker.broker.flusher import now_ms
from sharebroker.broker.groups.classic_group import PREPARING_REBALANCE
from sharebroker.broker.groups.consumer_group import Heartbeat
from sharebroker.broker.groups.consumer_protocol import decode_assignment, encode_assignment
from sharebroker.broker.server import Broker
from tests.unit.test_group_log import running_broker

SETTINGS = {"group.initial.rebalance.delay.ms": "0"}


def _subscription(*topics: str) -> bytes:
    out = struct.pack(">hi", 1, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">ii", -1, 0)  # no user data, owns nothing (an eager client rejoining)


async def _classic_stable_group(b: Broker, group: str, topic: str, partitions: int) -> str:
    """A classic group of one member that owns every partition of `topic` at generation 1."""
    cg = b.classic_groups
    kw = {"group_id": group, "group_instance_id": None, "client_id": "c", "client_host": "/127.0.0.1",
          "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000, "protocol_type": "consumer",
          "protocols": (("range", _subscription(topic)), ("roundrobin", _subscription(topic))), "version": 5}
    first = await cg.join(member_id="", **kw)
    joined = await cg.join(member_id=first.member_id, **kw)
    assert joined.error == ErrorCode.none and joined.generation_id == 1
    assignment = encode_assignment([(topic, range(partitions))], 1)
    synced = await cg.sync(group_id=group, member_id=joined.member_id, group_instance_id=None, generation_id=1,
                           protocol_type="consumer", protocol_name="range", assignments={joined.member_id: assignment})
    assert synced.error == ErrorCode.none
    return joined.member_id


def _join(member: str, *topics: str) -> Heartbeat:
    return Heartbeat(member_id=member, member_epoch=0, rebalance_timeout_ms=10_000, subscribed_names=topics, owned=())


async def test_upgrade_keeps_classic_members_across_a_restart_and_the_last_consumer_member_downgrades(
        tmp_path: Path) -> None:
    async with running_broker(tmp_path, SETTINGS) as b:
        b.topics.create("t", 4, {}, now_ms())
        classic_member = await _classic_stable_group(b, "g", "t", 4)
        reply = await b.consumer_groups._heartbeat("g", _join("c1", "t"))
        assert reply["member_id"] == "c1" and reply["member_epoch"] == 2  # generation 1, bumped by the join
        # a classic member's epoch is its generation: a mismatch is ILLEGAL_GENERATION, as in Kafka
        assert b.consumer_groups.validate_offset_fetch("g", classic_member, 7)[0] == ErrorCode.illegal_generation  # type: ignore[index]
        assert b.consumer_groups.validate_offset_fetch("g", "c1", 7)[0] == ErrorCode.stale_member_epoch  # type: ignore[index]
        assert b.consumer_groups.validate_offset_commit("g", classic_member, None, 1, 8) is None  # v8 is fine for it
        assert b.group_type("g") == "consumer" and "g" not in b.classic_groups.groups
        group = b.consumer_groups.groups["g"]
        old = group.members[classic_member]
        assert old.classic is not None and old.classic.session_timeout_ms == 10_000
        assert [name for name, _ in old.classic.protocols] == ["range", "roundrobin"]
        assert old.epoch == 1  # still at the classic generation: it must rejoin
        assert b.consumer_groups.classic_heartbeat(group_id="g", member_id=classic_member, group_instance_id=None,
                                                   generation_id=1) == ErrorCode.rebalance_in_progress
        described = b.consumer_groups.describe("g")
        assert sorted(m["member_type"] for m in described["members"]) == [0, 1]

    async with running_broker(tmp_path, SETTINGS) as b2:
        group = b2.consumer_groups.groups["g"]
        assert set(group.members) == {classic_member, "c1"}
        kept = group.members[classic_member]
        assert kept.classic is not None and [n for n, _ in kept.classic.protocols] == ["range", "roundrobin"]
        # the classic member rejoins through the consumer group and gets its share
        joined = await b2.consumer_groups.classic_join(
            group_id="g", member_id=classic_member, group_instance_id=None, client_id="c", client_host="/127.0.0.1",
            session_timeout_ms=10_000, rebalance_timeout_ms=10_000, protocol_type="consumer",
            protocols=kept.classic.protocols, version=5)
        assert joined.error == ErrorCode.none and joined.generation_id == 2 and joined.protocol_name == "range"
        synced = await b2.consumer_groups.classic_sync(group_id="g", member_id=classic_member, group_instance_id=None,
                                                       generation_id=2, protocol_type="consumer",
                                                       protocol_name="range", assignments={})
        assert synced.error == ErrorCode.none
        (topic, mine), = decode_assignment(synced.assignment)
        assert topic == "t" and len(mine) == 2
        # the consumer member leaves: the group is a classic group again, rebalancing
        await b2.consumer_groups._heartbeat("g", Heartbeat(member_id="c1", member_epoch=-1))
        assert b2.group_type("g") == "classic" and "g" not in b2.consumer_groups.groups
        classic = b2.classic_groups.groups["g"]
        assert classic.state == PREPARING_REBALANCE and list(classic.members) == [classic_member]
        assert classic.protocol_name == "range" and classic.generation_id == 2
        assert [n for n, _ in classic.members[classic_member].protocols] == ["range", "roundrobin"]
        # requests routed to the consumer group just before it went are answered by the classic group
        cg = b2.consumer_groups
        assert cg.classic_heartbeat(group_id="g", member_id=classic_member, group_instance_id=None,
                                    generation_id=2) == ErrorCode.rebalance_in_progress
        synced = await cg.classic_sync(group_id="g", member_id=classic_member, group_instance_id=None,
                                       generation_id=2, protocol_type="consumer", protocol_name="range", assignments={})
        assert synced.error == ErrorCode.rebalance_in_progress
        assert await cg.classic_leave("g", [(classic_member, None)]) == (
            ErrorCode.none, [(classic_member, None, ErrorCode.none)])
        assert b2.classic_groups.groups["g"].members == {}

    async with running_broker(tmp_path, SETTINGS) as b3:
        assert b3.group_type("g") == "classic" and b3.consumer_groups.groups == {}


async def test_a_classic_member_only_told_its_member_id_follows_the_group_to_the_consumer_protocol(
        tmp_path: Path) -> None:
    """An Empty classic group whose first member got MEMBER_ID_REQUIRED is still empty (Kafka's
    ClassicGroup.isEmpty): a consumer member takes the id, and the JoinGroup that follows with the
    member id joins the consumer group as a member of the classic protocol."""
    async with running_broker(tmp_path, SETTINGS) as b:
        b.topics.create("t", 2, {}, now_ms())
        kw = {"group_id": "g", "group_instance_id": None, "client_id": "c", "client_host": "/127.0.0.1",
              "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000, "protocol_type": "consumer",
              "protocols": (("range", _subscription("t")),), "version": 5}
        first = await b.classic_groups.join(member_id="", **kw)
        assert first.error == ErrorCode.member_id_required
        reply = await b.consumer_groups._heartbeat("g", _join("c1", "t"))
        assert reply["member_epoch"] == 1 and b.group_type("g") == "consumer"
        joined = await b.consumer_groups.classic_join(member_id=first.member_id, **kw)  # type: ignore[arg-type]
        assert joined.error == ErrorCode.none and joined.member_id == first.member_id
        assert set(b.consumer_groups.groups["g"].members) == {"c1", first.member_id}


async def test_upgrade_refused_when_the_policy_disables_it(tmp_path: Path) -> None:
    async with running_broker(tmp_path, {**SETTINGS, "group.consumer.migration.policy": "downgrade"}) as b:
        b.topics.create("t", 1, {}, now_ms())
        await _classic_stable_group(b, "g", "t", 1)
        try:
            await b.consumer_groups._heartbeat("g", _join("c1", "t"))
        except Exception as exc:  # noqa: BLE001 - the KafkaError carries the code
            assert getattr(exc, "code", None) == ErrorCode.group_id_not_found
        else:
            raise AssertionError("a disabled upgrade must refuse the consumer member")
        assert b.group_type("g") == "classic"


async def test_disabled_migration_keeps_classic_members_out_of_a_consumer_group(tmp_path: Path) -> None:
    async with running_broker(tmp_path, {**SETTINGS, "group.consumer.migration.policy": "disabled"}) as b:
        b.topics.create("t", 1, {}, now_ms())
        await b.consumer_groups._heartbeat("g", _join("c1", "t"))
        joined = await b.consumer_groups.classic_join(
            group_id="g", member_id="", group_instance_id=None, client_id="c", client_host="/127.0.0.1",
            session_timeout_ms=10_000, rebalance_timeout_ms=10_000, protocol_type="consumer",
            protocols=(("range", _subscription("t")),), version=5)
        assert joined.error == ErrorCode.inconsistent_group_protocol
        assert set(b.consumer_groups.groups["g"].members) == {"c1"}


async def test_upgrade_refused_when_a_custom_assignor_left_user_data(tmp_path: Path) -> None:
    async with running_broker(tmp_path, SETTINGS) as b:
        b.topics.create("t", 2, {}, now_ms())
        cg = b.classic_groups
        kw = {"group_id": "g", "group_instance_id": None, "client_id": "c", "client_host": "/127.0.0.1",
              "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000, "protocol_type": "consumer",
              "protocols": (("custom", _subscription("t")),), "version": 5}
        first = await cg.join(member_id="", **kw)
        joined = await cg.join(member_id=first.member_id, **kw)
        synced = await cg.sync(group_id="g", member_id=joined.member_id, group_instance_id=None, generation_id=1,
                               protocol_type="consumer", protocol_name="custom",
                               assignments={joined.member_id: encode_assignment([("t", [0, 1])], 1, b"state")})
        assert synced.error == ErrorCode.none
        try:
            await b.consumer_groups._heartbeat("g", _join("c1", "t"))
        except Exception as exc:  # noqa: BLE001 - the KafkaError carries the code
            assert getattr(exc, "code", None) == ErrorCode.unsupported_version
            assert getattr(exc, "message", "") == "userData from a custom assignor would be lost"
        else:
            raise AssertionError("the upgrade must refuse to drop a custom assignor's user data")
        assert b.group_type("g") == "classic" and list(b.classic_groups.groups["g"].members) == [joined.member_id]


async def test_consumer_group_offsets_expire_and_the_empty_group_goes(tmp_path: Path) -> None:
    async with running_broker(tmp_path, SETTINGS) as b:
        b.topics.create("t", 1, {}, now_ms())
        b.topics.create("u", 1, {}, now_ms())
        await b.consumer_groups._heartbeat("g", _join("m1", "t"))
        errors = await b.classic_groups.store_offsets("g", [("t", 0, 5, -1, None), ("u", 0, 7, -1, None)])
        assert set(errors.values()) == {ErrorCode.none}
        retention = b.config["offsets.retention.minutes"] * 60_000
        await b.classic_groups.expire_offsets(now_ms() + retention - 60_000)
        assert set(b.classic_groups.offsets["g"]) == {("t", 0), ("u", 0)}  # not old enough yet
        await b.classic_groups.expire_offsets(now_ms() + retention + 1)
        assert set(b.classic_groups.offsets["g"]) == {("t", 0)}  # "u" is subscribed by no member
        assert "g" in b.consumer_groups.groups
        await b.consumer_groups._heartbeat("g", Heartbeat(member_id="m1", member_epoch=-1))
        await b.classic_groups.expire_offsets(now_ms() + retention + 1)
        assert "g" not in b.consumer_groups.groups and "g" not in b.classic_groups.offsets
        assert b.group_type("g") is None

    async with running_broker(tmp_path, SETTINGS) as b2:
        assert "g" not in b2.consumer_groups.groups and "g" not in b2.classic_groups.offsets


async def test_classic_static_member_replacing_the_last_consumer_member_downgrades_without_rebalance(
        tmp_path: Path) -> None:
    async with running_broker(tmp_path, SETTINGS) as b:
        b.topics.create("t", 4, {}, now_ms())
        classic_member = await _classic_stable_group(b, "g", "t", 4)
        hb = Heartbeat(member_id="c1", member_epoch=0, instance_id="i1", rebalance_timeout_ms=10_000,
                       subscribed_names=("t",), owned=())
        await b.consumer_groups._heartbeat("g", hb)
        group = b.consumer_groups.groups["g"]
        protocols = group.members[classic_member].classic.protocols  # type: ignore[union-attr]
        # the static application restarts on the classic protocol under the same instance id
        joined = await b.consumer_groups.classic_join(
            group_id="g", member_id="", group_instance_id="i1", client_id="c", client_host="/127.0.0.1",
            session_timeout_ms=10_000, rebalance_timeout_ms=10_000, protocol_type="consumer", protocols=protocols,
            version=5)
        assert joined.error == ErrorCode.none and joined.member_id not in ("", "c1")
        assert b.group_type("g") == "classic" and "g" not in b.consumer_groups.groups
        classic = b.classic_groups.groups["g"]
        assert classic.state == "Stable" and classic.generation_id == joined.generation_id == 2
        assert set(classic.members) == {classic_member, joined.member_id}
        assert classic.static_members == {"i1": joined.member_id}
        # it takes over what c1 was to own, and collects it with SyncGroup from the classic group
        synced = await b.classic_groups.sync(group_id="g", member_id=joined.member_id, group_instance_id="i1",
                                             generation_id=2, protocol_type="consumer", protocol_name="range",
                                             assignments={})
        assert synced.error == ErrorCode.none
        (topic, parts), = decode_assignment(synced.assignment)
        assert topic == "t" and len(parts) == 2


async def test_leave_group_removing_the_last_consumer_member_downgrades(tmp_path: Path) -> None:
    """Kafka's consumerGroupFenceMembers: an administrative LeaveGroup (Admin
    removeMembersFromConsumerGroup) that fences the last member of the consumer protocol, while
    classic members remain, downgrades the group as its leaving would; the answer echoes the ids."""
    async with running_broker(tmp_path, SETTINGS) as b:
        b.topics.create("t", 4, {}, now_ms())
        classic_member = await _classic_stable_group(b, "g", "t", 4)
        await b.consumer_groups._heartbeat("g", _join("c1", "t"))
        assert b.group_type("g") == "consumer"
        assert await b.consumer_groups.classic_leave("g", [("c1", None)]) == (ErrorCode.none, [("c1", None, ErrorCode.none)])
        assert b.group_type("g") == "classic" and "g" not in b.consumer_groups.groups
        classic = b.classic_groups.groups["g"]
        assert set(classic.members) == {classic_member} and classic.state == PREPARING_REBALANCE
