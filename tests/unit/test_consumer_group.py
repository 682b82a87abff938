"""The KIP-848 consumer group as a pure state machine: the assignors, Kafka's CurrentAssignmentBuilder
states (STABLE / UNREVOKED_PARTITIONS / UNRELEASED_PARTITIONS), revocation before reassignment,
static membership, request validation and the records' round trip."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from sharebroker.broker.groups import consumer_records as rec
from sharebroker.broker.groups.assignors import MemberSubscription, assign
from sharebroker.broker.groups.consumer_group import (
    STABLE,
    UNRELEASED_PARTITIONS,
    UNREVOKED_PARTITIONS,
    ConsumerGroup,
    ConsumerMember,
    ConsumerSettings,
    CurrentAssignment,
    Heartbeat,
    next_current_assignment,
    validate_heartbeat,
)
from sharebroker.broker.groups.share_group import TopicInfo
from sharebroker.protocol.errors import KafkaError

T1, T2 = uuid.uuid4(), uuid.uuid4()
TOPICS = {"a": TopicInfo("a", T1, 6), "b": TopicInfo("b", T2, 3)}
SETTINGS = ConsumerSettings(session_timeout_ms=1000)


def partitions(result: dict, member: str) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for t, ps in result.get(member, {}).items() for p in ps}


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_assignors_cover_every_partition_once_and_balance(assignor: str) -> None:
    members = [MemberSubscription(f"m{i}", None, frozenset({"a", "b"})) for i in range(4)]
    result = assign(assignor, members, TOPICS, {})
    owned = [partitions(result, m.member_id) for m in members]
    every = set().union(*owned)
    assert every == {(T1, p) for p in range(6)} | {(T2, p) for p in range(3)}
    assert sum(len(o) for o in owned) == 9
    if assignor == "uniform":
        assert max(map(len, owned)) - min(map(len, owned)) <= 1


def test_range_assigns_consecutive_ranges_per_topic() -> None:
    members = [MemberSubscription("m1", None, frozenset({"a"})), MemberSubscription("m0", None, frozenset({"a"}))]
    result = assign("range", members, TOPICS, {})
    assert result["m0"] == {T1: frozenset({0, 1, 2})} and result["m1"] == {T1: frozenset({3, 4, 5})}


def test_uniform_is_sticky_and_respects_subscriptions() -> None:
    members = [MemberSubscription("m0", None, frozenset({"a"})), MemberSubscription("m1", None, frozenset({"a"}))]
    first = assign("uniform", members, TOPICS, {})
    members.append(MemberSubscription("m2", None, frozenset({"a"})))
    second = assign("uniform", members, TOPICS, first)
    for m in ("m0", "m1"):
        assert partitions(second, m) <= partitions(first, m)  # nobody gets what it did not have
    assert all(len(partitions(second, m)) == 2 for m in ("m0", "m1", "m2"))
    mixed = [MemberSubscription("x", None, frozenset({"a"})), MemberSubscription("y", None, frozenset({"b"}))]
    result = assign("uniform", mixed, TOPICS, {})
    assert set(result["x"]) == {T1} and set(result["y"]) == {T2}


def test_revocation_before_reassignment() -> None:
    free = lambda t, p: -1  # noqa: E731
    owned_by_other = lambda t, p: 3  # noqa: E731
    member = CurrentAssignment(3, 2, STABLE, {T1: frozenset({0, 1})}, {})
    # Target takes 1 away: the member stays at epoch 3 until it reports it released it.
    nxt = next_current_assignment(member, 4, {T1: frozenset({0})}, free, ((T1, (0, 1)),))
    assert (nxt.state, nxt.epoch, nxt.assigned, nxt.pending_revocation) == (
        UNREVOKED_PARTITIONS, 3, {T1: frozenset({0})}, {T1: frozenset({1})})
    assert next_current_assignment(nxt, 4, {T1: frozenset({0})}, free, ((T1, (0, 1)),)) is nxt
    done = next_current_assignment(nxt, 4, {T1: frozenset({0})}, free, ((T1, (0,)),))
    assert (done.state, done.epoch, done.previous_epoch) == (STABLE, 4, 3)
    # A partition still owned elsewhere is withheld: UNRELEASED_PARTITIONS until it is free.
    waiting = next_current_assignment(done, 5, {T1: frozenset({0, 2})}, owned_by_other, ((T1, (0,)),))
    assert (waiting.state, waiting.epoch, waiting.assigned) == (UNRELEASED_PARTITIONS, 5, {T1: frozenset({0})})
    got = next_current_assignment(waiting, 5, {T1: frozenset({0, 2})}, free, ((T1, (0,)),))
    assert (got.state, got.assigned) == (STABLE, {T1: frozenset({0, 2})})


def join(group: ConsumerGroup, member_id: str, now: int = 0, **kw: object) -> object:
    hb = Heartbeat(member_id=member_id, member_epoch=0, rebalance_timeout_ms=1000, subscribed_names=("a",), owned=(),
                   **kw)  # type: ignore[arg-type]
    return group.heartbeat(hb, TOPICS, now, SETTINGS)


def test_group_moves_partitions_only_after_revocation() -> None:
    g = ConsumerGroup("g")
    r1 = join(g, "m1")
    assert r1.member_epoch == 1 and sum(len(p) for p in r1.assignment.values()) == 6  # type: ignore[attr-defined]
    r2 = join(g, "m2")
    assert r2.member_epoch == 2 and r2.assignment == {}  # type: ignore[attr-defined]
    assert g.state == "Reconciling"
    owned = tuple((t, tuple(sorted(ps))) for t, ps in g.members["m1"].current.assigned.items())
    r1 = g.heartbeat(Heartbeat("m1", 1, owned=owned), TOPICS, 1, SETTINGS)
    assert r1.member_epoch == 1 and g.members["m1"].current.state == UNREVOKED_PARTITIONS
    kept = tuple((t, tuple(sorted(ps))) for t, ps in r1.assignment.items())  # type: ignore[union-attr]
    r1 = g.heartbeat(Heartbeat("m1", 1, owned=kept), TOPICS, 2, SETTINGS)
    assert r1.member_epoch == 2
    r2 = g.heartbeat(Heartbeat("m2", 2, owned=()), TOPICS, 3, SETTINGS)
    assert sum(len(p) for p in r2.assignment.values()) == 3  # type: ignore[union-attr]
    assert g.state == "Stable"


def test_epoch_fencing_and_unknown_members() -> None:
    g = ConsumerGroup("g")
    join(g, "m1")
    with pytest.raises(KafkaError) as e:
        g.heartbeat(Heartbeat("m1", 5, owned=()), TOPICS, 1, SETTINGS)
    assert e.value.code == ErrorCode.fenced_member_epoch
    with pytest.raises(KafkaError) as e:
        g.heartbeat(Heartbeat("nobody", 1), TOPICS, 1, SETTINGS)
    assert e.value.code == ErrorCode.unknown_member_id
    with pytest.raises(KafkaError) as e:
        join(g, "m2", 0) if False else g.heartbeat(
            Heartbeat("m9", 0, rebalance_timeout_ms=1, subscribed_names=("a",), owned=()), TOPICS, 0,
            ConsumerSettings(max_size=1))
    assert e.value.code == ErrorCode.group_max_size_reached


def test_a_full_group_still_takes_back_its_static_member() -> None:
    """Kafka 4.x's throwIfConsumerGroupIsFull: a known instance id never grows the group."""
    g = ConsumerGroup("g")
    join(g, "m1", instance_id="i1")
    full = ConsumerSettings(max_size=1)
    g.heartbeat(Heartbeat("m1", -2, instance_id="i1"), TOPICS, 1, full)  # a temporary static leave
    back = g.heartbeat(Heartbeat("m2", 0, instance_id="i1", rebalance_timeout_ms=1000, subscribed_names=("a",),
                                 owned=()), TOPICS, 2, full)
    assert back.member_id == "m2" and set(g.members) == {"m2"}
    with pytest.raises(KafkaError) as e:
        g.heartbeat(Heartbeat("m3", 0, instance_id="i2", rebalance_timeout_ms=1000, subscribed_names=("a",),
                              owned=()), TOPICS, 3, full)
    assert e.value.code == ErrorCode.group_max_size_reached


def test_static_member_rejoins_with_its_assignment() -> None:
    g = ConsumerGroup("g")
    join(g, "m1", instance_id="i1")
    before = dict(g.members["m1"].current.assigned)
    with pytest.raises(KafkaError) as e:
        join(g, "m2", instance_id="i1")
    assert e.value.code == ErrorCode.unreleased_instance_id
    g.heartbeat(Heartbeat("m1", -2, instance_id="i1"), TOPICS, 1, SETTINGS)
    assert g.members["m1"].epoch == -2
    reply = join(g, "m2", instance_id="i1")
    assert "m1" not in g.members and reply.assignment == before  # type: ignore[attr-defined]
    with pytest.raises(KafkaError) as e:
        g.heartbeat(Heartbeat("m1", 1, instance_id="i1"), TOPICS, 2, SETTINGS)
    assert e.value.code == ErrorCode.fenced_instance_id


def test_session_timeout_fences() -> None:
    g = ConsumerGroup("g")
    join(g, "m1", now=0)
    assert g.expired(999) == [] and g.expired(1000) == [("m1", "session timeout")]
    g.fence("m1", TOPICS, "uniform")
    assert g.state == "Empty" and not g.owners


# -- consumer.assignment.interval.ms -------------------------------------------------------------

PACED = ConsumerSettings(session_timeout_ms=60_000, assignment_interval_ms=1000)


def test_assignment_interval_holds_the_next_target_back() -> None:
    """Kafka 4.3+'s canComputeNextTargetAssignment: the first target at once; within the interval a
    join only bumps the group epoch and the joiner is reconciled towards the last target (empty, at
    its epoch); once the interval has passed the pending target is computed, sticky to the last."""
    g = ConsumerGroup("g")
    paced_join = lambda m, now: g.heartbeat(Heartbeat(m, 0, rebalance_timeout_ms=1000, subscribed_names=("a",),  # noqa: E731
                                                      owned=()), TOPICS, now, PACED)
    r1 = paced_join("m1", 100)
    assert (r1.member_epoch, g.assignment_time_ms) == (1, 100)
    assert sum(len(p) for p in r1.assignment.values()) == 6  # type: ignore[union-attr]
    first_target = dict(g.target["m1"])
    r2 = paced_join("m2", 600)
    assert (g.epoch, g.assignment_epoch, g.state) == (2, 1, "Assigning")
    assert r2.member_epoch == 1 and r2.assignment == {}  # the last target's epoch, nothing in it for m2
    assert g.target == {"m1": first_target} and g.next_assignment_ms(PACED.assignment_interval_ms) == 1100
    assert g.next_assignment_ms(0) is None  # Kafka's escape hatch: a zero interval computes at once
    owned = tuple((t, tuple(sorted(ps))) for t, ps in first_target.items())
    r1 = g.heartbeat(Heartbeat("m1", 1, owned=owned), TOPICS, 1099, PACED)
    assert r1.assignment is None and g.assignment_epoch == 1  # answered from the last target
    r1 = g.heartbeat(Heartbeat("m1", 1, owned=owned), TOPICS, 1100, PACED)
    assert (g.assignment_epoch, g.assignment_time_ms) == (2, 1100)
    assert partitions(g.target, "m1") < {(T1, p) for p in first_target[T1]}  # sticky: m1 keeps part of its own
    assert len(partitions(g.target, "m1")) == len(partitions(g.target, "m2")) == 3


def test_assignment_interval_leave_bumps_only_and_an_emptied_group_assigns_at_once() -> None:
    g = ConsumerGroup("g")
    for i, m in enumerate(("m1", "m2")):
        g.heartbeat(Heartbeat(m, 0, rebalance_timeout_ms=1000, subscribed_names=("a",), owned=()), TOPICS, i,
                    ConsumerSettings(session_timeout_ms=60_000))  # interval 0: both assigned at once
    assert g.assignment_epoch == 2
    g.heartbeat(Heartbeat("m2", -1), TOPICS, 500, PACED)
    assert (g.epoch, g.assignment_epoch) == (3, 2) and set(g.target) == {"m1"}  # m2's target is gone with it
    assert len(partitions(g.target, "m1")) == 3  # the orphaned partitions wait for the next target
    g.fence("m1", TOPICS, "uniform", 600, 1000)
    assert (g.state, g.epoch, g.assignment_epoch, g.assignment_time_ms) == ("Empty", 4, 4, None)
    r = g.heartbeat(Heartbeat("m3", 0, rebalance_timeout_ms=1000, subscribed_names=("a",), owned=()), TOPICS, 700,
                    PACED)
    assert r.member_epoch == 5 and sum(len(p) for p in r.assignment.values()) == 6  # type: ignore[union-attr]


def test_assignment_interval_applies_to_metadata_changes() -> None:
    g = ConsumerGroup("g")
    g.heartbeat(Heartbeat("m1", 0, rebalance_timeout_ms=1000, subscribed_names=("a",), owned=()), TOPICS, 0, PACED)
    grown = {**TOPICS, "a": TopicInfo("a", T1, 8)}
    assert g.refresh(grown, "uniform", now_ms=10, interval_ms=1000)  # the epoch moved...
    assert (g.epoch, g.assignment_epoch) == (2, 1) and len(partitions(g.target, "m1")) == 6  # ...not the target
    assert g.refresh(grown, "uniform", now_ms=1000, interval_ms=1000)
    assert g.assignment_epoch == 2 and len(partitions(g.target, "m1")) == 8


def test_a_subscription_change_within_the_interval_gives_up_unsubscribed_topics_at_once() -> None:
    """Kafka 4.3+'s CurrentAssignmentBuilder with hasSubscriptionChanged: while the interval holds
    the next target back, a member that drops a topic from its subscription revokes that topic's
    partitions at its next heartbeat (at its current epoch), not when the target is computed."""
    g = ConsumerGroup("g")
    r = g.heartbeat(Heartbeat("m1", 0, rebalance_timeout_ms=1000, subscribed_names=("a", "b"), owned=()), TOPICS, 0,
                    PACED)
    assert set(r.assignment) == {T1, T2}  # type: ignore[arg-type]
    owned = tuple((t, tuple(sorted(ps))) for t, ps in g.members["m1"].current.assigned.items())
    r = g.heartbeat(Heartbeat("m1", 1, subscribed_names=("a",), owned=owned), TOPICS, 10, PACED)
    assert (g.epoch, g.assignment_epoch) == (2, 1)  # the target still has b's partitions...
    cur = g.members["m1"].current
    assert (r.member_epoch, cur.state) == (1, UNREVOKED_PARTITIONS)  # ...but the member gives them up now
    assert set(r.assignment) == {T1} and cur.pending_revocation == {T2: frozenset({0, 1, 2})}  # type: ignore[arg-type]
    kept = tuple((t, tuple(sorted(ps))) for t, ps in cur.assigned.items())
    r = g.heartbeat(Heartbeat("m1", 1, owned=kept), TOPICS, 20, PACED)
    assert (r.member_epoch, g.members["m1"].current.state) == (1, STABLE)  # revoked; the target is still pending
    assert not any(tid == T2 for tid, _ in g.owners)  # b's partitions are free for others


@pytest.mark.parametrize(("hb", "version", "message"), [
    (Heartbeat("", 0, rebalance_timeout_ms=1, subscribed_names=("a",), owned=()), 1, "MemberId can't be empty."),
    (Heartbeat("m", 0, subscribed_names=("a",), owned=()), 1, "RebalanceTimeoutMs must be provided in first request."),
    (Heartbeat("m", 0, rebalance_timeout_ms=1, subscribed_names=("a",), owned=((T1, (0,)),)), 1,
     "TopicPartitions must be empty when (re-)joining."),
    (Heartbeat("m", 0, rebalance_timeout_ms=1, owned=()), 1,
     "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."),
    (Heartbeat("m", -2), 1, "InstanceId can't be null."),
    (Heartbeat("m", -3), 1, "MemberEpoch is invalid."),
])
def test_validation_messages(hb: Heartbeat, version: int, message: str) -> None:
    with pytest.raises(KafkaError) as e:
        validate_heartbeat(hb, version, "g", ("uniform", "range"))
    assert (e.value.code, e.value.message) == (ErrorCode.invalid_request, message)
    validate_heartbeat(Heartbeat("", 0, rebalance_timeout_ms=1, subscribed_names=("a",), owned=()), 0, "g", ("uniform",))


def test_records_round_trip() -> None:
    m = ConsumerMember("m1", instance_id="i", rack_id=None, client_id="c", client_host="/h", rebalance_timeout_ms=5,
                       server_assignor="range", subscribed_names=("a", "b"), subscribed_regex="x.*")
    d = rec.decode(*rec.member_metadata("g", m))
    assert (d.record_type, d.group_id, d.second) == (rec.MEMBER_METADATA, "g", "m1")
    assert d.fields == {"instance_id": "i", "rack_id": None, "client_id": "c", "client_host": "/h",
                        "subscribed_names": ("a", "b"), "subscribed_regex": "x.*", "rebalance_timeout_ms": 5,
                        "server_assignor": "range", "classic": None}
    c = CurrentAssignment(4, 3, UNREVOKED_PARTITIONS, {T1: frozenset({1})}, {T2: frozenset({0, 2})})
    assert rec.decode(*rec.current_assignment("g", "m1", c)).fields == {
        "epoch": 4, "previous_epoch": 3, "state": 1, "assigned": {T1: frozenset({1})},
        "pending_revocation": {T2: frozenset({0, 2})}}
    assert rec.decode(*rec.group_metadata("g", 7)).fields == {"epoch": 7}
    assert rec.decode(*rec.regular_expression("g", "t.*", ("ta",), 1, 2)).fields == {"topics": ("ta",)}
    assert rec.decode(rec.key(rec.TARGET_MEMBER, "g", "m1"), None).fields is None
    # AssignmentTimestamp (Kafka 4.3+): tag 0, left out at its default 0
    k, v = rec.target_metadata("g", 5)
    assert v == b"\x00\x00" + (5).to_bytes(4, "big") + b"\x00"
    assert rec.decode(k, v).fields == {"assignment_epoch": 5, "assignment_timestamp_ms": 0}
    k, v = rec.target_metadata("g", 5, 1_700_000_000_123)
    assert v == b"\x00\x00" + (5).to_bytes(4, "big") + b"\x01\x00\x08" + (1_700_000_000_123).to_bytes(8, "big")
    assert rec.decode(k, v).fields == {"assignment_epoch": 5, "assignment_timestamp_ms": 1_700_000_000_123}
