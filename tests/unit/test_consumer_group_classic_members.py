"""Members of the classic protocol inside a KIP-848 consumer group (the online migration path):
JoinGroup / SyncGroup / Heartbeat / LeaveGroup against the consumer group's state machine, their
interplay with consumer-protocol members, their timers, and the ClassicMemberMetadata tag of the
member metadata record."""

from __future__ import annotations

import struct
import uuid

import pytest
from kio.schema.errors import ErrorCode

from sharebroker.broker.groups import consumer_records as rec
from sharebroker.broker.groups.consumer_group import (
    STABLE,
    UNRELEASED_PARTITIONS,
    UNREVOKED_PARTITIONS,
    ClassicJoin,
    ClassicMetadata,
    ConsumerGroup,
    ConsumerMember,
    ConsumerSettings,
    Heartbeat,
    HeartbeatReply,
)
from sharebroker.broker.groups.share_group import TopicInfo
from sharebroker.protocol.errors import KafkaError

T1 = uuid.uuid4()
TOPICS = {"a": TopicInfo("a", T1, 6)}
NAMES = {T1: "a"}
ALL = {(T1, p) for p in range(6)}
SETTINGS = ConsumerSettings(session_timeout_ms=1000)
SESSION, REBALANCE = 5000, 3000


# -- helpers -------------------------------------------------------------------------------------


def _str(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def subscription(topics: tuple[str, ...] = ("a",), owned: tuple[tuple[str, tuple[int, ...]], ...] = ()) -> bytes:
    """A ConsumerProtocolSubscription v1: topics, null user data, owned partitions."""
    out = struct.pack(">hi", 1, len(topics)) + b"".join(_str(t) for t in topics) + struct.pack(">i", -1)
    out += struct.pack(">i", len(owned))
    for topic, parts in owned:
        out += _str(topic) + struct.pack(">i", len(parts)) + b"".join(struct.pack(">i", p) for p in parts)
    return out


def join_req(member_id: str, *, owned: tuple[tuple[str, tuple[int, ...]], ...] = (), instance_id: str | None = None,
             protocols: tuple[tuple[str, bytes], ...] | None = None, protocol_type: str = "consumer",
             unknown_member: bool = False) -> ClassicJoin:
    if protocols is None:
        protocols = (("range", subscription(("a",), owned)),)
    return ClassicJoin(member_id=member_id, instance_id=instance_id, protocol_type=protocol_type, protocols=protocols,
                       session_timeout_ms=SESSION, rebalance_timeout_ms=REBALANCE, unknown_member=unknown_member)


def classic_join(g: ConsumerGroup, member_id: str, now: int = 0, **kw: object) -> ConsumerMember:
    """A first JoinGroup names no member id (the coordinator allocated `member_id`); a rejoin names it."""
    kw.setdefault("unknown_member", member_id not in g.members)
    return g.classic_join(join_req(member_id, **kw), TOPICS, now, SETTINGS)  # type: ignore[arg-type]


def consumer_join(g: ConsumerGroup, member_id: str, now: int = 0) -> HeartbeatReply:
    hb = Heartbeat(member_id=member_id, member_epoch=0, subscribed_names=("a",), rebalance_timeout_ms=REBALANCE,
                   owned=())
    return g.heartbeat(hb, TOPICS, now, SETTINGS)


def parts(assignment: dict) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for t, ps in assignment.items() for p in ps}


def owned_by_name(m: ConsumerMember) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """What a classic client would list as owned partitions in its subscription."""
    return tuple((NAMES[t], tuple(sorted(ps))) for t, ps in m.current.assigned.items() if ps)


def owned_by_id(m: ConsumerMember) -> tuple[tuple[uuid.UUID, tuple[int, ...]], ...]:
    """What a consumer-protocol client reports as owned in its heartbeat."""
    return tuple((t, tuple(sorted(ps))) for t, ps in m.current.assigned.items() if ps)


def error_of(call: object, *args: object) -> ErrorCode:
    with pytest.raises(KafkaError) as e:
        call(*args)  # type: ignore[operator]
    return e.value.code


# -- joining, syncing ----------------------------------------------------------------------------


def test_classic_member_joins_empty_group_and_syncs() -> None:
    g = ConsumerGroup("g")
    m = classic_join(g, "c1", now=100)
    assert g.epoch == 1
    assert m.epoch == 1 == g.epoch
    assert m.current.state == STABLE
    assert parts(m.current.assigned) == ALL
    assert m.subscribed_names == ("a",)
    assert m.classic is not None
    assert m.classic.session_timeout_ms == SESSION
    assert m.classic.protocols == (("range", subscription()),)
    assert m.classic.protocol_name == "range"
    assert m.session_deadline_ms == 100 + SESSION
    assert m.sync_deadline_ms == 100 + REBALANCE
    assert m.join_deadline_ms is None
    assert g.members["c1"] is m

    synced = g.classic_sync("c1", None, m.epoch, "consumer", "range", 200)
    assert synced is m
    assert synced.sync_deadline_ms is None
    assert parts(synced.current.assigned) == ALL
    assert synced.session_deadline_ms == 200 + SESSION
    # A sync without protocol type / name (old SyncGroup versions) is fine too.
    assert g.classic_sync("c1", None, 1, None, None, 300) is m
    assert g.classic_heartbeat("c1", None, 1, 400) == ErrorCode.none
    assert g.state == "Stable"


def test_consumer_member_waits_for_classic_member_to_release_eagerly() -> None:
    g = ConsumerGroup("g")
    c1 = classic_join(g, "c1", now=0)
    g.classic_sync("c1", None, 1, "consumer", "range", 0)
    assert parts(c1.current.assigned) == ALL

    reply = consumer_join(g, "m2", now=10)
    assert g.epoch == 2
    m2 = g.members["m2"]
    assert reply.member_epoch == 2
    # Everything m2 is to get is still owned by c1: nothing yet.
    assert parts(reply.assignment or {}) == set()
    assert parts(m2.current.assigned) == set()
    assert m2.current.state == UNRELEASED_PARTITIONS
    m2_target = parts(g.target["m2"])
    c1_target = parts(g.target["c1"])
    assert len(m2_target) == len(c1_target) == 3 and m2_target | c1_target == ALL

    # The classic member learns of the new epoch from its heartbeat.
    assert g.classic_heartbeat("c1", None, 1, 20) == ErrorCode.rebalance_in_progress
    assert c1.join_deadline_ms == 20 + REBALANCE
    # Told again later: the join deadline is not pushed back.
    assert g.classic_heartbeat("c1", None, 1, 500) == ErrorCode.rebalance_in_progress
    assert c1.join_deadline_ms == 20 + REBALANCE
    assert c1.epoch == 1 and parts(c1.current.assigned) == ALL

    # The consumer member's heartbeat does not hand it partitions c1 still owns.
    reply = g.heartbeat(Heartbeat("m2", 2, owned=()), TOPICS, 30, SETTINGS)
    assert parts(g.members["m2"].current.assigned) == set()
    assert g.members["m2"].current.state == UNRELEASED_PARTITIONS

    # An eager client revokes everything before rejoining: owned partitions empty.
    c1 = classic_join(g, "c1", now=600, owned=())
    assert c1.epoch == 2
    assert c1.current.state == STABLE
    assert parts(c1.current.assigned) == c1_target
    assert c1.join_deadline_ms is None
    assert c1.sync_deadline_ms == 600 + REBALANCE
    assert g.epoch == 2  # same subscription: no new epoch
    assert g.classic_sync("c1", None, 2, "consumer", "range", 610) is c1

    # Now the freed partitions go to the consumer member.
    reply = g.heartbeat(Heartbeat("m2", 2, owned=owned_by_id(g.members["m2"])), TOPICS, 620, SETTINGS)
    m2 = g.members["m2"]
    assert reply.member_epoch == 2
    assert parts(reply.assignment or {}) == m2_target
    assert m2.current.state == STABLE
    a, b = parts(c1.current.assigned), parts(m2.current.assigned)
    assert a | b == ALL and not a & b
    assert g.classic_heartbeat("c1", None, 2, 630) == ErrorCode.none
    assert g.state == "Stable"


def test_cooperative_classic_member_revokes_before_advancing() -> None:
    g = ConsumerGroup("g")
    classic_join(g, "c1", now=0)
    g.classic_sync("c1", None, 1, "consumer", "range", 0)
    consumer_join(g, "m2", now=10)
    assert g.epoch == 2
    c1_target = parts(g.target["c1"])

    # Rejoining while still listing all six partitions: it must first give up the others.
    c1 = classic_join(g, "c1", now=20, owned=(("a", tuple(range(6))),))
    assert c1.current.state == UNREVOKED_PARTITIONS
    assert c1.epoch == 1
    assert parts(c1.current.assigned) == c1_target
    assert parts(c1.current.pending_revocation) == ALL - c1_target

    # SyncGroup at generation 1 succeeds and gives the assignment without the revoked partitions.
    synced = g.classic_sync("c1", None, 1, "consumer", "range", 30)
    assert synced is c1
    assert parts(synced.current.assigned) == c1_target
    assert c1.sync_deadline_ms is None
    # ... but the heartbeat asks it to rejoin to complete the revocation.
    assert g.classic_heartbeat("c1", None, 1, 40) == ErrorCode.rebalance_in_progress
    assert c1.join_deadline_ms == 40 + REBALANCE

    # The consumer member still cannot take the partitions pending revocation.
    g.heartbeat(Heartbeat("m2", 2, owned=()), TOPICS, 50, SETTINGS)
    assert parts(g.members["m2"].current.assigned) == set()

    # Rejoining without them completes the revocation.
    c1 = classic_join(g, "c1", now=60, owned=owned_by_name(c1))
    assert c1.epoch == 2
    assert c1.current.state == STABLE
    assert c1.current.pending_revocation == {}
    assert parts(c1.current.assigned) == c1_target
    assert c1.join_deadline_ms is None
    assert g.classic_sync("c1", None, 2, "consumer", "range", 70) is c1
    assert g.classic_heartbeat("c1", None, 2, 80) == ErrorCode.none

    g.heartbeat(Heartbeat("m2", 2, owned=()), TOPICS, 90, SETTINGS)
    a, b = parts(c1.current.assigned), parts(g.members["m2"].current.assigned)
    assert a | b == ALL and not a & b and len(b) == 3


def test_classic_member_waiting_on_unreleased_partitions_is_told_to_rejoin_once_they_are_free() -> None:
    g = ConsumerGroup("g")
    consumer_join(g, "m1", now=0)
    m1 = g.members["m1"]
    assert parts(m1.current.assigned) == ALL
    c2 = classic_join(g, "c2", now=10)
    assert g.epoch == 2 and c2.epoch == 2
    assert c2.current.state == UNRELEASED_PARTITIONS and parts(c2.current.assigned) == set()
    assert g.waiting_on_unreleased_partition(c2)
    assert g.classic_sync("c2", None, 2, "consumer", "range", 20) is c2
    # Still owned by m1: nothing to rejoin for.
    assert g.classic_heartbeat("c2", None, 2, 30) == ErrorCode.none
    assert c2.join_deadline_ms is None

    # m1 revokes what c2 is to get.
    g.heartbeat(Heartbeat("m1", 1, owned=owned_by_id(m1)), TOPICS, 40, SETTINGS)
    assert m1.current.state == UNREVOKED_PARTITIONS
    g.heartbeat(Heartbeat("m1", 1, owned=owned_by_id(m1)), TOPICS, 50, SETTINGS)
    assert m1.epoch == 2 and m1.current.state == STABLE
    assert not g.waiting_on_unreleased_partition(c2)
    assert g.classic_heartbeat("c2", None, 2, 60) == ErrorCode.rebalance_in_progress
    assert c2.join_deadline_ms == 60 + REBALANCE

    c2 = classic_join(g, "c2", now=70)
    assert c2.current.state == STABLE and parts(c2.current.assigned) == parts(g.target["c2"])
    a, b = parts(m1.current.assigned), parts(c2.current.assigned)
    assert a | b == ALL and not a & b and len(b) == 3


# -- errors --------------------------------------------------------------------------------------


def test_wrong_generation_is_illegal_generation() -> None:
    g = ConsumerGroup("g")
    classic_join(g, "c1")
    assert error_of(g.classic_sync, "c1", None, 2, "consumer", "range", 0) == ErrorCode.illegal_generation
    assert error_of(g.classic_sync, "c1", None, 0, "consumer", "range", 0) == ErrorCode.illegal_generation
    assert error_of(g.classic_heartbeat, "c1", None, 5, 0) == ErrorCode.illegal_generation
    assert error_of(g.classic_heartbeat, "c1", None, -1, 0) == ErrorCode.illegal_generation


def test_unknown_and_consumer_protocol_members_are_unknown_to_classic_requests() -> None:
    g = ConsumerGroup("g")
    classic_join(g, "c1")
    consumer_join(g, "m2")
    assert error_of(g.classic_sync, "nobody", None, 1, "consumer", "range", 0) == ErrorCode.unknown_member_id
    assert error_of(g.classic_heartbeat, "nobody", None, 1, 0) == ErrorCode.unknown_member_id
    assert error_of(g.classic_heartbeat, "c1", "no-such-instance", 1, 0) == ErrorCode.unknown_member_id
    m2 = g.members["m2"]
    assert error_of(g.classic_heartbeat, "m2", None, m2.epoch, 0) == ErrorCode.unknown_member_id
    assert error_of(g.classic_sync, "m2", None, m2.epoch, "consumer", "range", 0) == ErrorCode.unknown_member_id


def test_unsupported_protocols_are_inconsistent() -> None:
    g = ConsumerGroup("g")
    with pytest.raises(KafkaError) as e:
        g.classic_join(join_req("c0", protocol_type="connect"), TOPICS, 0, SETTINGS)
    assert e.value.code == ErrorCode.inconsistent_group_protocol
    assert not g.members and g.epoch == 0
    with pytest.raises(KafkaError) as e:
        g.classic_join(join_req("c0", protocols=()), TOPICS, 0, SETTINGS)
    assert e.value.code == ErrorCode.inconsistent_group_protocol

    classic_join(g, "c1")  # supports "range" only
    before = g.epoch
    with pytest.raises(KafkaError) as e:
        g.classic_join(join_req("c2", protocols=(("roundrobin", subscription()),)), TOPICS, 0, SETTINGS)
    assert e.value.code == ErrorCode.inconsistent_group_protocol
    with pytest.raises(KafkaError) as e:
        g.classic_join(join_req("c2", protocol_type="connect"), TOPICS, 0, SETTINGS)
    assert e.value.code == ErrorCode.inconsistent_group_protocol
    assert set(g.members) == {"c1"} and g.epoch == before
    # One common protocol is enough.
    c2 = g.classic_join(join_req("c2", protocols=(("roundrobin", subscription()), ("range", subscription()))),
                        TOPICS, 0, SETTINGS)
    assert c2.classic is not None and c2.classic.protocol_name == "roundrobin"


def test_sync_with_another_protocol_is_inconsistent() -> None:
    g = ConsumerGroup("g")
    classic_join(g, "c1")
    assert error_of(g.classic_sync, "c1", None, 1, "consumer", "roundrobin", 0) == ErrorCode.inconsistent_group_protocol
    assert error_of(g.classic_sync, "c1", None, 1, "connect", "range", 0) == ErrorCode.inconsistent_group_protocol
    assert g.members["c1"].sync_deadline_ms is not None  # not synced


def test_static_classic_member_replaced_by_new_member_id() -> None:
    g = ConsumerGroup("g")
    old = classic_join(g, "c1", instance_id="i1")
    g.classic_sync("c1", "i1", 1, "consumer", "range", 0)
    before = parts(old.current.assigned)
    assert before == ALL

    new = classic_join(g, "c2", now=100, instance_id="i1", unknown_member=True)
    assert "c1" not in g.members
    assert set(g.members) == {"c2"}
    assert g.static_members["i1"] == "c2"
    assert new.member_id == "c2" and new.instance_id == "i1"
    assert parts(new.current.assigned) == before
    assert new.classic is not None
    assert g.classic_sync("c2", "i1", new.epoch, "consumer", "range", 110) is new
    # The replaced member id is fenced by the instance id.
    assert error_of(g.classic_heartbeat, "c1", "i1", 1, 120) == ErrorCode.fenced_instance_id

    # A known member id that is not the instance's owner is fenced.
    with pytest.raises(KafkaError) as e:
        classic_join(g, "zzz", now=130, instance_id="i1", unknown_member=False)
    assert e.value.code == ErrorCode.fenced_instance_id
    assert set(g.members) == {"c2"} and parts(g.members["c2"].current.assigned) == before


# -- leaving -------------------------------------------------------------------------------------


def leave(g: ConsumerGroup, identities: list[tuple[str, str | None]]) -> list[tuple[str, str | None, ErrorCode]]:
    """LeaveGroup as the coordinator applies it when the group is not downgraded."""
    results, leaving = g.leaving_members(identities)
    g.remove_members(leaving, TOPICS, "uniform")
    return results


def test_leave_group_by_member_id_and_instance_id_fences_members_of_either_protocol() -> None:
    """Kafka's classicGroupLeaveToConsumerGroup: any member, classic or consumer protocol, by id or
    by instance id (member id "" for an administrative removal); the answer echoes the request's ids."""
    g = ConsumerGroup("g")
    classic_join(g, "c1")
    classic_join(g, "c2", instance_id="i2")
    classic_join(g, "c3")
    consumer_join(g, "m4")
    consumer_join(g, "m5")
    epoch = g.epoch
    results = leave(g, [("c1", None), ("", "i2"), ("nobody", None), ("m4", None), ("", "ghost")])
    assert results == [
        ("c1", None, ErrorCode.none),
        ("", "i2", ErrorCode.none),
        ("nobody", None, ErrorCode.unknown_member_id),
        ("m4", None, ErrorCode.none),
        ("", "ghost", ErrorCode.unknown_member_id),
    ]
    assert set(g.members) == {"c3", "m5"}
    assert "i2" not in g.static_members
    assert g.epoch == epoch + 1
    assert set(g.target) == {"c3", "m5"}
    assert parts(g.target["c3"]) | parts(g.target["m5"]) == ALL


def test_leave_group_with_nobody_leaving_keeps_the_epoch() -> None:
    g = ConsumerGroup("g")
    classic_join(g, "c1")
    consumer_join(g, "m2")
    epoch = g.epoch
    assert leave(g, [("m9", None), ("x", None)]) == [
        ("m9", None, ErrorCode.unknown_member_id), ("x", None, ErrorCode.unknown_member_id)]
    assert g.epoch == epoch and set(g.members) == {"c1", "m2"}


def test_leave_group_by_instance_id_with_wrong_member_id_is_fenced() -> None:
    g = ConsumerGroup("g")
    classic_join(g, "c1", instance_id="i1")
    assert leave(g, [("other", "i1")]) == [("other", "i1", ErrorCode.fenced_instance_id)]
    assert set(g.members) == {"c1"}
    assert leave(g, [("c1", "i1")]) == [("c1", "i1", ErrorCode.none)]
    assert not g.members and g.state == "Empty"


def test_classic_only_without() -> None:
    g = ConsumerGroup("g")
    classic_join(g, "c1")
    consumer_join(g, "m1")
    consumer_join(g, "m2")
    assert not g.classic_only_without({"m1"}) and g.classic_only_without({"m1", "m2"})
    assert g.classic_only_without({"m1", "m2", "c1"})


# -- timers --------------------------------------------------------------------------------------


def test_expired_sync_deadline() -> None:
    g = ConsumerGroup("g")
    classic_join(g, "c1", now=100)
    assert g.expired(100 + REBALANCE - 1) == []
    out = g.expired(100 + REBALANCE)
    assert [m for m, _ in out] == ["c1"] and "sync" in out[0][1]


def test_expired_join_deadline() -> None:
    g = ConsumerGroup("g")
    classic_join(g, "c1", now=0)
    g.classic_sync("c1", None, 1, "consumer", "range", 0)
    consumer_join(g, "m2", now=0)
    assert g.classic_heartbeat("c1", None, 1, 1000) == ErrorCode.rebalance_in_progress
    g.heartbeat(Heartbeat("m2", 2, owned=()), TOPICS, 1000 + REBALANCE, SETTINGS)  # keep m2 alive
    assert g.expired(1000 + REBALANCE - 1) == []
    out = g.expired(1000 + REBALANCE)
    assert [m for m, _ in out] == ["c1"] and "rejoin" in out[0][1]


def test_expired_classic_session_uses_the_classic_session_timeout() -> None:
    g = ConsumerGroup("g")
    classic_join(g, "c1", now=0)
    g.classic_sync("c1", None, 1, "consumer", "range", 100)
    # SETTINGS.session_timeout_ms (1000) is for consumer-protocol members only.
    assert g.expired(100 + SETTINGS.session_timeout_ms) == []
    assert g.expired(100 + SESSION - 1) == []
    assert g.expired(100 + SESSION) == [("c1", "session timeout")]
    # A heartbeat renews the session.
    assert g.classic_heartbeat("c1", None, 1, 2000) == ErrorCode.none
    assert g.expired(100 + SESSION) == []
    assert [m for m, _ in g.expired(2000 + SESSION)] == ["c1"]


# -- predicates ----------------------------------------------------------------------------------


def test_all_classic_except() -> None:
    g = ConsumerGroup("g")
    assert not g.all_classic_except("m1")
    consumer_join(g, "m1")
    assert g.all_classic_except("m1")  # nobody else
    classic_join(g, "c1")
    classic_join(g, "c2")
    assert g.all_classic_except("m1")
    assert not g.all_classic_except("c1")  # it is classic itself
    assert not g.all_classic_except("nobody")
    consumer_join(g, "m2")
    assert not g.all_classic_except("m1")
    assert not g.all_classic_except("m2")


def test_supports_classic_protocols() -> None:
    g = ConsumerGroup("g")
    assert g.supports_classic_protocols("consumer", {"range"})
    assert not g.supports_classic_protocols("consumer", set())
    assert not g.supports_classic_protocols("connect", {"range"})
    consumer_join(g, "m1")  # no classic member yet: any protocol will do
    assert g.supports_classic_protocols("consumer", {"anything"})
    assert not g.supports_classic_protocols("connect", {"anything"})
    g.classic_join(join_req("c1", protocols=(("range", subscription()), ("roundrobin", subscription()))),
                   TOPICS, 0, SETTINGS)
    classic_join(g, "c2")  # range only
    assert g.supports_classic_protocols("consumer", {"range"})
    assert g.supports_classic_protocols("consumer", {"sticky", "range"})
    assert not g.supports_classic_protocols("consumer", {"roundrobin"})
    assert not g.supports_classic_protocols("consumer", {"sticky"})
    assert not g.supports_classic_protocols("consumer", set())
    assert not g.supports_classic_protocols("connect", {"range"})


# -- records -------------------------------------------------------------------------------------


def test_member_metadata_record_carries_classic_metadata() -> None:
    classic = ClassicMetadata(45000, (("range", b"\x00\x01sub"), ("roundrobin", b"x")))
    m = ConsumerMember("c1", instance_id="i1", client_id="cid", client_host="/h", rebalance_timeout_ms=300,
                       subscribed_names=("a", "b"), classic=classic)
    d = rec.decode(*rec.member_metadata("g", m))
    assert (d.record_type, d.group_id, d.second) == (rec.MEMBER_METADATA, "g", "c1")
    assert d.fields is not None
    assert d.fields["classic"] == classic
    assert d.fields["subscribed_names"] == ("a", "b")
    assert d.fields["rebalance_timeout_ms"] == 300
    assert d.fields["instance_id"] == "i1"
    assert d.fields["server_assignor"] is None


def test_member_metadata_record_of_joined_classic_member() -> None:
    g = ConsumerGroup("g")
    m = classic_join(g, "c1")
    d = rec.decode(*rec.member_metadata("g", m))
    assert d.fields is not None and d.fields["classic"] == ClassicMetadata(SESSION, (("range", subscription()),))


def test_member_metadata_record_without_classic_metadata() -> None:
    m = ConsumerMember("m1", subscribed_names=("a",), rebalance_timeout_ms=5, server_assignor="uniform")
    d = rec.decode(*rec.member_metadata("g", m))
    assert d.fields is not None
    assert d.fields["classic"] is None
    assert (d.fields["subscribed_names"], d.fields["server_assignor"]) == (("a",), "uniform")
