"""Share group coordinator state machine (share-groups-spec §9): the SimpleAssignor, ShareGroupHeartbeat
join/heartbeat/leave/fencing, share-partition initialization, reconciliation, topic deletion, session
expiry and request validation. Pure and synchronous: time is passed in explicitly."""

from __future__ import annotations

import math
import random
import uuid
from collections import Counter

import pytest
from kio.schema.errors import ErrorCode

from sharebroker.broker.groups.share_group import (
    EMPTY,
    STABLE,
    ShareGroup,
    TopicInfo,
    assign_partitions,
    validate_heartbeat,
)
from sharebroker.protocol.errors import KafkaError

TIMEOUT = 45_000
MAX_SIZE = 200


def topic(name: str, partitions: int, topic_id: uuid.UUID | None = None) -> TopicInfo:
    return TopicInfo(name, topic_id or uuid.uuid4(), partitions)


def hb(g: ShareGroup, member: str, epoch: int, subscribed: tuple[str, ...] | None = None, *, now: int = 0,
       max_size: int = MAX_SIZE, rack: str | None = None, timeout: int = TIMEOUT):
    return g.heartbeat(member_id=member, member_epoch=epoch, rack_id=rack, subscribed=subscribed, client_id="cid",
                       client_host="/127.0.0.1", now_ms=now, session_timeout_ms=timeout, max_size=max_size)


def init_all(g: ShareGroup, topics: dict[str, TopicInfo]) -> list[tuple[TopicInfo, int, int]]:
    """What the coordinator does after a heartbeat: initialize every pending share partition (the
    persister call always succeeds here) and mark them initialized."""
    todo = g.partitions_to_initialize(topics)
    by_topic: dict[uuid.UUID, tuple[TopicInfo, list[int]]] = {}
    for info, p, _start in todo:
        by_topic.setdefault(info.topic_id, (info, []))[1].append(p)
    for info, parts in by_topic.values():
        g.mark_initialized(info, parts)
    return todo


def beat(g: ShareGroup, topics: dict[str, TopicInfo], member: str, epoch: int,
         subscribed: tuple[str, ...] | None = None, *, now: int = 0, max_size: int = MAX_SIZE) -> int:
    """A full ShareGroupHeartbeat round trip as the coordinator runs it (heartbeat, initialize,
    reconcile). Returns the MemberEpoch the response carries (-1 for a leave)."""
    hb(g, member, epoch, subscribed, now=now, max_size=max_size)
    if epoch == -1:
        return -1
    init_all(g, topics)
    g.reconcile(topics)
    g.advance_member(member)
    return g.members[member].epoch


def joined_group(topics: dict[str, TopicInfo], subscriptions: dict[str, tuple[str, ...]]) -> ShareGroup:
    """Members join (epoch 0) with their subscriptions, in order; then the coordinator initializes
    the share partitions and reconciles once for all of them."""
    g = ShareGroup("g")
    for member, subscribed in subscriptions.items():
        hb(g, member, 0, subscribed)
    init_all(g, topics)
    g.reconcile(topics)
    return g


def parts(g: ShareGroup, member: str, info: TopicInfo) -> set[int]:
    """The member's target assignment: what its next heartbeat hands it."""
    return set(g.target.get(member, {}).get(info.topic_id, frozenset()))


def raises(code: ErrorCode, fn, *args, **kwargs) -> KafkaError:
    with pytest.raises(KafkaError) as exc:
        fn(*args, **kwargs)
    assert exc.value.code == code, (exc.value.code, exc.value.message)
    return exc.value


# ------------------------------------------------------------------------------------------------
# SimpleAssignor (§9.3)
# ------------------------------------------------------------------------------------------------

def desired_sharing(m: int, p: int) -> int:
    return math.ceil(m / p)


def check_balanced(result: dict[str, set[int]], members: list[str], partitions: list[int]) -> None:
    """Balanced as the spec defines it: each partition shared by exactly ceil(M/P) members, member
    counts differ by at most one, nothing outside the assignable partitions."""
    assert set(result) == set(members)
    sharing = desired_sharing(len(members), len(partitions))
    shared = Counter(p for ps in result.values() for p in ps)
    assert set(shared) <= set(partitions)
    assert all(shared[p] == sharing for p in partitions), (shared, sharing)
    counts = [len(result[m]) for m in members]
    assert max(counts) - min(counts) <= 1, counts
    assert sum(counts) == sharing * len(partitions)


def test_assignor_three_partitions_one_member_gets_all():
    assert assign_partitions(["a"], [0, 1, 2], {}) == {"a": {0, 1, 2}}


def test_assignor_one_partition_three_members_all_share_it():
    assert assign_partitions(["a", "b", "c"], [0], {}) == {"a": {0}, "b": {0}, "c": {0}}


def test_assignor_five_members_two_partitions_sharing_three():
    members = ["a", "b", "c", "d", "e"]
    result = assign_partitions(members, [0, 1], {})
    assert sorted(len(result[m]) for m in members) == [1, 1, 1, 1, 2]
    shared = Counter(p for ps in result.values() for p in ps)
    assert shared == {0: 3, 1: 3}
    check_balanced(result, members, [0, 1])


def test_assignor_no_members_or_no_partitions():
    assert assign_partitions([], [0, 1], {}) == {}
    assert assign_partitions(["a", "b"], [], {"a": {0}}) == {"a": set(), "b": set()}


@pytest.mark.parametrize("m,p", [(1, 1), (2, 4), (3, 7), (4, 4), (5, 13), (7, 8), (10, 100)])
def test_assignor_balance_members_not_more_than_partitions(m, p):
    members = [f"m{i}" for i in range(m)]
    result = assign_partitions(members, list(range(p)), {})
    check_balanced(result, members, list(range(p)))
    # every partition covered exactly once
    assert sorted(x for ps in result.values() for x in ps) == list(range(p))


@pytest.mark.parametrize("m,p", [(2, 1), (3, 2), (4, 3), (6, 4), (9, 2), (12, 5)])
def test_assignor_balance_more_members_than_partitions(m, p):
    members = [f"m{i}" for i in range(m)]
    result = assign_partitions(members, list(range(p)), {})
    check_balanced(result, members, list(range(p)))


def test_assignor_only_given_partitions_are_assigned():
    # partitions 1 and 3 are not assignable (e.g. not initialized); previous ownership of them is dropped
    result = assign_partitions(["a", "b"], [0, 2, 4], {"a": {1, 3}, "b": {0}})
    assert set().union(*result.values()) == {0, 2, 4}
    check_balanced(result, ["a", "b"], [0, 2, 4])


def test_assignor_random_previous_members_not_more_than_partitions():
    """Whatever the previous assignment (stale, overlapping, partial, out of range), with M <= P the
    result covers each assignable partition exactly once and counts differ by at most one."""
    rng = random.Random(932)
    for _ in range(1500):
        p = rng.randint(1, 12)
        m = rng.randint(1, p)
        members = [f"m{i}" for i in range(m)]
        rng.shuffle(members)
        partitions = sorted(rng.sample(range(p + 4), p))
        previous = {mid: set(rng.sample(range(p + 6), rng.randint(0, p))) for mid in members if rng.random() < 0.8}
        previous["gone"] = {0, 1}
        result = assign_partitions(members, partitions, previous)
        check_balanced(result, members, partitions)
        assert sorted(x for ps in result.values() for x in ps) == partitions


def test_assignor_fresh_group_balanced_for_all_small_sizes():
    """From a clean slate (no previous assignment, so nothing forces an imbalance) every partition is
    shared by exactly ceil(M/P) members and member counts differ by at most one."""
    failures = []
    for p in range(1, 9):
        for m in range(1, 25):
            members = [f"m{i}" for i in range(m)]
            result = assign_partitions(members, list(range(p)), {})
            shared = Counter(x for ps in result.values() for x in ps)
            if any(shared[x] != desired_sharing(m, p) for x in range(p)):
                failures.append((m, p, sum(shared.values()), desired_sharing(m, p) * p))
    assert failures == [], f"(members, partitions, assignments made, assignments wanted): {failures}"


def test_assignor_random_previous_members_more_than_partitions():
    """With sharing and an arbitrary previous assignment, every partition is still covered and never
    shared more than ceil(M/P)."""
    rng = random.Random(4932)
    for _ in range(1500):
        p = rng.randint(1, 5)
        m = rng.randint(p + 1, 14)
        members = [f"m{i}" for i in range(m)]
        partitions = list(range(p))
        previous = {mid: set(rng.sample(range(p + 2), rng.randint(0, p))) for mid in members}
        result = assign_partitions(members, partitions, previous)
        shared = Counter(x for ps in result.values() for x in ps)
        assert set(shared) == set(partitions)
        assert max(shared.values()) <= desired_sharing(m, p)


def test_assignor_sticky_when_member_added():
    old = assign_partitions(["a", "b", "c"], list(range(6)), {})
    assert all(len(ps) == 2 for ps in old.values())
    new = assign_partitions(["a", "b", "c", "d"], list(range(6)), old)
    check_balanced(new, ["a", "b", "c", "d"], list(range(6)))
    for m in "abc":
        assert new[m] <= old[m], "existing members only give partitions up, never swap"
    moved = {p for m in "abcd" for p in new[m] if p not in old.get(m, set())}
    assert moved == new["d"]
    assert len(moved) <= 2
    kept = sum(len(new[m] & old[m]) for m in "abc")
    assert kept >= 4


def test_assignor_sticky_when_member_removed():
    old = assign_partitions(["a", "b", "c"], list(range(6)), {})
    new = assign_partitions(["a", "b"], list(range(6)), old)
    check_balanced(new, ["a", "b"], list(range(6)))
    assert new["a"] >= old["a"] and new["b"] >= old["b"]
    gained = (new["a"] - old["a"]) | (new["b"] - old["b"])
    assert gained == old["c"], "only the removed member's partitions move"


def test_assignor_sticky_random_add_and_remove():
    """When the member counts divide the partition count evenly, adding a member moves exactly its
    share and nothing else; removing one moves exactly the removed member's partitions."""
    rng = random.Random(17)
    for _ in range(300):
        m = rng.randint(2, 6)
        share = rng.randint(1, 4)
        # add: P divisible by M+1
        p = (m + 1) * share * rng.randint(1, 2)
        members = [f"m{i}" for i in range(m)]
        old = assign_partitions(members, list(range(p)), {})
        new_members = members + ["new"]
        rng.shuffle(new_members)
        new = assign_partitions(new_members, list(range(p)), old)
        check_balanced(new, new_members, list(range(p)))
        for mid in members:
            assert new[mid] <= old[mid]
        assert sum(len(old[mid] - new[mid]) for mid in members) == len(new["new"]) == p // (m + 1)
        # remove: P divisible by M-1 (and P >= M, so no sharing)
        p = (m - 1) * max(share, 2)
        old = assign_partitions(members, list(range(p)), {})
        gone = rng.choice(members)
        rest = [x for x in members if x != gone]
        new = assign_partitions(rest, list(range(p)), old)
        check_balanced(new, rest, list(range(p)))
        for mid in rest:
            assert new[mid] >= old[mid]
        assert set().union(*(new[mid] - old[mid] for mid in rest)) == old[gone]


def test_assignor_sticky_with_sharing_keeps_previous_holders():
    old = assign_partitions(["a", "b", "c"], [0], {})
    new = assign_partitions(["a", "b", "c", "d"], [0], old)
    assert new == {"a": {0}, "b": {0}, "c": {0}, "d": {0}}


# ------------------------------------------------------------------------------------------------
# Join / heartbeat / leave / fencing (§9.2)
# ------------------------------------------------------------------------------------------------

@pytest.fixture
def t4() -> TopicInfo:
    return topic("t", 4)


def test_join_with_epoch_zero_creates_member_and_bumps_group_epoch(t4):
    g = ShareGroup("g")
    assert g.state == EMPTY and g.epoch == 0
    hb(g, "A", 0, ("t",))
    assert "A" in g.members
    assert g.epoch > 0
    assert g.state == STABLE
    m = g.members["A"]
    assert m.client_id == "cid" and m.client_host == "/127.0.0.1"
    assert m.subscribed == ("t",)


def test_joined_member_gets_the_assignment_epoch_and_all_initialized_partitions(t4):
    g = ShareGroup("g")
    topics = {"t": t4}
    epoch = beat(g, topics, "A", 0, ("t",))
    assert epoch == g.assignment_epoch == g.epoch > 0
    assert parts(g, "A", t4) == {0, 1, 2, 3}


def test_heartbeat_with_current_epoch_keeps_everything(t4):
    g = ShareGroup("g")
    topics = {"t": t4}
    e = beat(g, topics, "A", 0, ("t",))
    group_epoch = g.epoch
    assert beat(g, topics, "A", e) == e
    assert beat(g, topics, "A", e, ("t",)) == e  # same subscription, full request: no change
    assert g.epoch == group_epoch
    assert parts(g, "A", t4) == {0, 1, 2, 3}


def test_rejoin_with_epoch_zero_and_same_id_keeps_member(t4):
    g = ShareGroup("g")
    topics = {"t": t4}
    e = beat(g, topics, "A", 0, ("t",))
    beat(g, topics, "B", 0, ("t",))
    e = beat(g, topics, "A", g.members["A"].epoch)
    before = dict(g.members["A"].assignment)
    group_epoch = g.epoch
    assert beat(g, topics, "A", 0, ("t",)) == e, "nothing changed: the member gets its current epoch back"
    assert g.epoch == group_epoch
    assert len(g.members) == 2
    assert g.members["A"].assignment == before


def test_lost_response_previous_epoch_accepted(t4):
    g = ShareGroup("g")
    topics = {"t": t4}
    e1 = beat(g, topics, "A", 0, ("t",))
    beat(g, topics, "B", 0, ("t",))
    e2 = beat(g, topics, "A", e1)  # the response carrying e2 is lost ...
    assert e2 > e1
    assert beat(g, topics, "A", e1) == e2  # ... so A retries with e1: accepted, told e2 again
    assert beat(g, topics, "A", e2) == e2


def test_higher_epoch_is_fenced(t4):
    g = ShareGroup("g")
    topics = {"t": t4}
    e = beat(g, topics, "A", 0, ("t",))
    err = raises(ErrorCode.fenced_member_epoch, hb, g, "A", e + 1)
    assert err.message
    raises(ErrorCode.fenced_member_epoch, hb, g, "A", e + 100)
    assert beat(g, topics, "A", e) == e, "a fenced request changes nothing"


def test_stale_epoch_older_than_previous_is_fenced(t4):
    g = ShareGroup("g")
    topics = {"t": t4}
    e1 = beat(g, topics, "A", 0, ("t",))
    beat(g, topics, "B", 0, ("t",))
    e2 = beat(g, topics, "A", e1)
    beat(g, topics, "C", 0, ("t",))
    e3 = beat(g, topics, "A", e2)
    assert e1 < e2 < e3
    raises(ErrorCode.fenced_member_epoch, hb, g, "A", e1)
    assert "A" in g.members


def test_member_that_saw_every_response_is_not_fenced_when_others_join(t4):
    """A member that sends the epoch of the last response it received is never fenced: the epoch
    check is received == member epoch (or == the previous epoch after a lost response). Two other
    members joining between two of A's heartbeats must not fence A (3 consumers starting together)."""
    g = ShareGroup("g")
    topics = {"t": t4}
    e1 = beat(g, topics, "A", 0, ("t",))
    beat(g, topics, "B", 0, ("t",))
    beat(g, topics, "C", 0, ("t",))
    # A has only ever been told e1; its next regular heartbeat carries e1
    e = beat(g, topics, "A", e1)
    assert e >= e1
    assert parts(g, "A", t4)


def test_member_that_saw_every_response_is_not_fenced_after_expiry_and_join(t4):
    g = ShareGroup("g")
    topics = {"t": t4}
    ea = beat(g, topics, "A", 0, ("t",), now=0)
    eb = beat(g, topics, "B", 0, ("t",), now=0)
    beat(g, topics, "B", eb, now=0)
    ea = beat(g, topics, "A", ea, now=40_000)
    beat(g, topics, "C", 0, ("t",), now=41_000)
    # B stops heartbeating and expires; the sweep removes it and reconciles
    assert g.expired_members(46_000) == ["B"]
    g.remove_member("B")
    g.reconcile(topics)
    # B is gone; A, which received every response, heartbeats with its last epoch
    assert beat(g, topics, "A", ea, now=46_000) >= ea


def test_unknown_member_with_positive_epoch(t4):
    g = ShareGroup("g")
    topics = {"t": t4}
    beat(g, topics, "A", 0, ("t",))
    raises(ErrorCode.unknown_member_id, hb, g, "nobody", 3)
    raises(ErrorCode.unknown_member_id, hb, g, "nobody", 1)
    assert set(g.members) == {"A"}


def test_unknown_member_leave(t4):
    g = ShareGroup("g")
    topics = {"t": t4}
    beat(g, topics, "A", 0, ("t",))
    epoch = g.epoch
    raises(ErrorCode.unknown_member_id, hb, g, "nobody", -1)
    assert g.epoch == epoch and set(g.members) == {"A"}


def test_leave_removes_member_bumps_epoch_and_group_becomes_empty(t4):
    g = ShareGroup("g")
    topics = {"t": t4}
    beat(g, topics, "A", 0, ("t",))
    epoch = g.epoch
    result = hb(g, "A", -1)
    assert result.member_epoch == -1
    assert result.assignment is None
    assert "A" not in g.members
    assert g.epoch > epoch
    assert g.state == EMPTY
    assert g.assignment_epoch == g.epoch, "the group became empty: the assignment epoch follows"
    raises(ErrorCode.unknown_member_id, hb, g, "A", -1)
    raises(ErrorCode.unknown_member_id, hb, g, "A", epoch)


def test_leave_moves_only_the_leavers_partitions(t4):
    t6 = topic("t", 6, t4.topic_id)
    g = ShareGroup("g")
    topics = {"t": t6}
    for m in "ABC":
        beat(g, topics, m, 0, ("t",))
    for m in "ABC":
        beat(g, topics, m, g.members[m].epoch)
    before = {m: parts(g, m, t6) for m in "ABC"}
    assert sorted(len(v) for v in before.values()) == [2, 2, 2]
    beat(g, topics, "C", -1)
    g.reconcile(topics)
    after = {m: parts(g, m, t6) for m in "AB"}
    assert after["A"] >= before["A"] and after["B"] >= before["B"]
    assert after["A"] | after["B"] == set(range(6))
    assert not after["A"] & after["B"]
    assert g.state == STABLE


def test_member_rejoins_after_leave(t4):
    g = ShareGroup("g")
    topics = {"t": t4}
    beat(g, topics, "A", 0, ("t",))
    hb(g, "A", -1)
    epoch = g.epoch
    e = beat(g, topics, "A", 0, ("t",))
    assert g.epoch > epoch and e == g.epoch
    assert parts(g, "A", t4) == {0, 1, 2, 3}


def test_group_max_size(t4):
    g = ShareGroup("g")
    topics = {"t": t4}
    beat(g, topics, "A", 0, ("t",), max_size=2)
    beat(g, topics, "B", 0, ("t",), max_size=2)
    epoch = g.epoch
    err = raises(ErrorCode.group_max_size_reached, hb, g, "C", 0, ("t",), max_size=2)
    assert err.message
    assert set(g.members) == {"A", "B"} and g.epoch == epoch
    # members already in the group may still rejoin and heartbeat at the limit
    beat(g, topics, "A", 0, ("t",), max_size=2)
    beat(g, topics, "B", g.members["B"].epoch, max_size=2)
    assert set(g.members) == {"A", "B"}
    # a free slot lets C in
    hb(g, "A", -1)
    beat(g, topics, "C", 0, ("t",), max_size=2)
    assert set(g.members) == {"B", "C"}


def test_subscription_change_bumps_group_epoch():
    ta, tb = topic("a", 2), topic("b", 2)
    topics = {"a": ta, "b": tb}
    g = ShareGroup("g")
    e = beat(g, topics, "A", 0, ("a",))
    epoch = g.epoch
    hb(g, "A", e, ("a",))  # same subscription
    assert g.epoch == epoch
    hb(g, "A", e, None)  # null: unchanged
    assert g.epoch == epoch and g.members["A"].subscribed == ("a",)
    hb(g, "A", e, ("a", "b"))
    assert g.epoch > epoch
    e2 = beat(g, topics, "A", e)
    assert e2 > e
    assert parts(g, "A", ta) == {0, 1} and parts(g, "A", tb) == {0, 1}
    # unsubscribing from a topic bumps the epoch and drops its partitions
    epoch = g.epoch
    e3 = beat(g, topics, "A", e2, ("b",))
    assert g.epoch > epoch and e3 > e2
    assert parts(g, "A", ta) == set() and parts(g, "A", tb) == {0, 1}


def test_rack_id_updated_only_when_given(t4):
    g = ShareGroup("g")
    hb(g, "A", 0, ("t",), rack="r1")
    assert g.members["A"].rack_id == "r1"
    hb(g, "A", 0, ("t",), rack=None)
    assert g.members["A"].rack_id == "r1"


# ------------------------------------------------------------------------------------------------
# Share-partition initialization, reconciliation, topic deletion
# ------------------------------------------------------------------------------------------------

def test_partitions_to_initialize_new_topic_starts_at_minus_one(t4):
    g = ShareGroup("g")
    hb(g, "A", 0, ("t",))
    todo = g.partitions_to_initialize({"t": t4})
    assert sorted((info.topic_id, p, start) for info, p, start in todo) == [(t4.topic_id, p, -1) for p in range(4)]


def test_partitions_to_initialize_ignores_unknown_topics_and_unsubscribed_ones(t4):
    g = ShareGroup("g")
    other = topic("other", 3)
    hb(g, "A", 0, ("t", "missing"))
    todo = g.partitions_to_initialize({"t": t4, "other": other})
    assert {info.name for info, _, _ in todo} == {"t"}


def test_new_partitions_of_known_topic_start_at_zero_and_new_topic_at_minus_one(t4):
    g = ShareGroup("g")
    topics = {"t": t4}
    e = beat(g, topics, "A", 0, ("t",))
    assert g.partitions_to_initialize(topics) == []
    grown = topic("t", 6, t4.topic_id)
    u = topic("u", 2)
    hb(g, "A", e, ("t", "u"))
    todo = g.partitions_to_initialize({"t": grown, "u": u})
    got = sorted((info.name, p, start) for info, p, start in todo)
    assert got == [("t", 4, 0), ("t", 5, 0), ("u", 0, -1), ("u", 1, -1)]


def test_recreated_topic_with_new_id_initializes_at_minus_one(t4):
    g = ShareGroup("g")
    topics = {"t": t4}
    beat(g, topics, "A", 0, ("t",))
    assert g.forget_topic(t4.topic_id)
    new_t = topic("t", 2)
    todo = g.partitions_to_initialize({"t": new_t})
    assert sorted((info.topic_id, p, s) for info, p, s in todo) == [(new_t.topic_id, 0, -1), (new_t.topic_id, 1, -1)]


def test_only_initialized_partitions_are_assigned(t4):
    g = ShareGroup("g")
    topics = {"t": t4}
    hb(g, "A", 0, ("t",))
    g.reconcile(topics)
    assert parts(g, "A", t4) == set(), "nothing initialized yet: empty assignment"
    g.mark_initialized(t4, [0, 2])
    g.reconcile(topics)
    assert parts(g, "A", t4) == {0, 2}
    assert sorted(p for _, p, _ in g.partitions_to_initialize(topics)) == [1, 3]
    g.mark_initialized(t4, [1, 3])
    g.reconcile(topics)
    assert parts(g, "A", t4) == {0, 1, 2, 3}


def test_mark_initialized_bumps_epoch_and_members_follow(t4):
    g = ShareGroup("g")
    topics = {"t": t4}
    hb(g, "A", 0, ("t",))
    g.reconcile(topics)
    e = g.members["A"].epoch
    epoch = g.epoch
    g.mark_initialized(t4, [0, 1, 2, 3])
    assert g.epoch > epoch
    g.reconcile(topics)
    assert g.members["A"].epoch == e  # a member moves only on its own heartbeat
    g.advance_member("A")
    assert g.members["A"].epoch == g.assignment_epoch == g.epoch > e


def test_members_take_the_assignment_epoch_on_their_heartbeat(t4):
    g = joined_group({"t": t4}, {m: ("t",) for m in "ABC"})
    for m in "ABC":
        g.advance_member(m)
    assert {g.members[m].epoch for m in "ABC"} == {g.assignment_epoch}
    assert g.assignment_epoch == g.epoch
    counts = sorted(len(parts(g, m, t4)) for m in "ABC")
    assert counts == [1, 1, 2]
    assert set().union(*(parts(g, m, t4) for m in "ABC")) == {0, 1, 2, 3}


def test_reconcile_without_change_is_idempotent(t4):
    g = ShareGroup("g")
    topics = {"t": t4}
    beat(g, topics, "A", 0, ("t",))
    beat(g, topics, "B", 0, ("t",))
    snapshot = (g.epoch, g.assignment_epoch, {m: (x.epoch, dict(x.assignment)) for m, x in g.members.items()})
    g.reconcile(topics)
    g.reconcile(topics)
    assert snapshot == (g.epoch, g.assignment_epoch, {m: (x.epoch, dict(x.assignment)) for m, x in g.members.items()})


def test_partition_count_change_bumps_epoch():
    t2 = topic("t", 2)
    g = ShareGroup("g")
    beat(g, {"t": t2}, "A", 0, ("t",))
    epoch = g.epoch
    grown = topic("t", 3, t2.topic_id)
    g.reconcile({"t": grown})
    assert g.epoch > epoch
    e = beat(g, {"t": grown}, "A", g.members["A"].epoch)
    assert parts(g, "A", grown) == {0, 1, 2}
    assert e == g.epoch


def test_heterogeneous_subscriptions_balance_per_topic():
    t1, t2 = topic("t1", 4), topic("t2", 4)
    g = joined_group({"t1": t1, "t2": t2}, {"A": ("t1", "t2"), "B": ("t1",), "C": ("t2",)})
    assert len(parts(g, "A", t1)) == 2 and len(parts(g, "A", t2)) == 2
    assert parts(g, "A", t1) | parts(g, "B", t1) == {0, 1, 2, 3}
    assert not parts(g, "A", t1) & parts(g, "B", t1)
    assert parts(g, "A", t2) | parts(g, "C", t2) == {0, 1, 2, 3}
    assert not parts(g, "A", t2) & parts(g, "C", t2)
    assert parts(g, "B", t2) == set() and parts(g, "C", t1) == set(), "only subscribed topics are assigned"


def test_heterogeneous_sharing_per_topic():
    t1, t2 = topic("t1", 1), topic("t2", 3)
    g = joined_group({"t1": t1, "t2": t2}, {"A": ("t1", "t2"), "B": ("t1",), "C": ("t1",)})
    assert all(parts(g, m, t1) == {0} for m in "ABC")
    assert parts(g, "A", t2) == {0, 1, 2}


def test_forget_topic_removes_assignments_after_reconcile():
    t1, t2 = topic("t1", 2), topic("t2", 2)
    topics = {"t1": t1, "t2": t2}
    g = ShareGroup("g")
    beat(g, topics, "A", 0, ("t1", "t2"))
    assert parts(g, "A", t1) == {0, 1}
    epoch = g.epoch
    assert g.forget_topic(t1.topic_id) is True
    assert g.epoch > epoch
    g.reconcile({"t2": t2})  # the deleted topic is gone from metadata
    g.advance_member("A")
    assert t1.topic_id not in g.members["A"].assignment
    assert parts(g, "A", t2) == {0, 1}
    assert g.members["A"].epoch == g.epoch
    assert g.forget_topic(t1.topic_id) is False
    assert g.forget_topic(uuid.uuid4()) is False


def test_forget_topic_even_if_metadata_still_lists_it():
    t1 = topic("t1", 2)
    g = ShareGroup("g")
    beat(g, {"t1": t1}, "A", 0, ("t1",))
    g.forget_topic(t1.topic_id)
    g.reconcile({"t1": t1})
    assert parts(g, "A", t1) == set(), "uninitialized partitions are not assignable"


def test_expired_members_by_deadline(t4):
    g = ShareGroup("g")
    hb(g, "A", 0, ("t",), now=1_000, timeout=45_000)
    hb(g, "B", 0, ("t",), now=5_000, timeout=45_000)
    assert g.expired_members(0) == []
    assert g.expired_members(45_999) == []
    assert g.expired_members(46_001) == ["A"]
    assert sorted(g.expired_members(50_001)) == ["A", "B"]
    # a heartbeat re-arms the timer
    hb(g, "A", 0, ("t",), now=40_000, timeout=45_000)
    assert g.expired_members(50_001) == ["B"]
    assert g.expired_members(84_999) == ["B"]
    assert sorted(g.expired_members(85_001)) == ["A", "B"]


def test_expired_member_removed_then_unknown_then_rejoins(t4):
    g = ShareGroup("g")
    topics = {"t": t4}
    e = beat(g, topics, "A", 0, ("t",), now=0)
    for m in g.expired_members(TIMEOUT + 1):
        g.remove_member(m)
    assert g.state == EMPTY
    raises(ErrorCode.unknown_member_id, hb, g, "A", e)
    epoch = g.epoch
    e2 = beat(g, topics, "A", 0, ("t",), now=TIMEOUT + 2)
    assert g.epoch > epoch and e2 == g.epoch
    assert parts(g, "A", t4) == {0, 1, 2, 3}


# ------------------------------------------------------------------------------------------------
# Request validation (§9.1)
# ------------------------------------------------------------------------------------------------

def vraises(code: ErrorCode, message: str | None, *args) -> None:
    err = raises(code, validate_heartbeat, *args)
    if message is not None:
        assert err.message == message


def test_validate_accepts_good_requests():
    validate_heartbeat("g", "m" * 36, 0, None, ("t",))
    validate_heartbeat("g", "m", 5, "rack", None)
    validate_heartbeat("g", "m", -1, None, None)
    validate_heartbeat("g", "m", 3, None, ())


@pytest.mark.parametrize("member_id", [None, "x" * 37, "y" * 100])
def test_validate_invalid_member_id(member_id):
    vraises(ErrorCode.invalid_request, "Invalid member id in the request.", "g", member_id, 0, None, ("t",))


def test_validate_empty_member_id_is_invalid_request():
    # §9.1 step 3 (front door) and step 6 ("MemberId can't be empty.") both cover it; only the code is fixed
    raises(ErrorCode.invalid_request, validate_heartbeat, "g", "", 0, None, ("t",))


def test_validate_member_id_checked_before_group_id():
    vraises(ErrorCode.invalid_request, "Invalid member id in the request.", "", "x" * 37, 0, None, ("t",))


def test_validate_empty_group_id():
    vraises(ErrorCode.invalid_request, "GroupId can't be empty.", "", "m", 0, None, ("t",))


def test_validate_empty_rack_id():
    vraises(ErrorCode.invalid_request, "RackId can't be empty.", "g", "m", 0, "", ("t",))


def test_validate_group_before_rack_before_subscription():
    vraises(ErrorCode.invalid_request, "GroupId can't be empty.", "", "m", 0, "", None)
    vraises(ErrorCode.invalid_request, "RackId can't be empty.", "g", "m", 0, "", None)


@pytest.mark.parametrize("subscribed", [None, ()])
def test_validate_first_request_needs_subscription(subscribed):
    vraises(ErrorCode.invalid_request, "SubscribedTopicNames must be set in first request.", "g", "m", 0, None,
            subscribed)


@pytest.mark.parametrize("epoch", [-2, -3, -(2**31)])
def test_validate_member_epoch_below_minus_one(epoch):
    vraises(ErrorCode.invalid_request, "MemberEpoch is invalid.", "g", "m", epoch, None, ("t",))


# -- share.assignment.interval.ms --------------------------------------------------------------


def test_the_target_is_computed_at_most_once_per_interval() -> None:
    t = topic("t", 4)
    topics = {"t": t}
    g = ShareGroup("g")
    hb(g, "a", 0, ("t",))
    init_all(g, topics)
    assert g.reconcile(topics, now_ms=1_000, interval_ms=5_000)  # no previous target: at once
    g.advance_member("a")
    first = g.assignment_epoch
    hb(g, "b", 0, ("t",), now=1_500)
    assert g.assignment_pending()
    assert g.next_assignment_ms(5_000) == 6_000
    assert not g.reconcile(topics, now_ms=5_999, interval_ms=5_000)
    g.advance_member("b")  # answered from the last target, at its epoch, with nothing
    assert (g.members["b"].epoch, g.members["b"].assignment) == (first, {})
    assert g.reconcile(topics, now_ms=6_000, interval_ms=5_000)
    assert g.assignment_epoch == g.epoch > first and g.assignment_time_ms == 6_000
    assert parts(g, "a", t) | parts(g, "b", t) == {0, 1, 2, 3}
    assert g.next_assignment_ms(0) is None  # a zero interval never waits


def test_a_restored_group_waits_from_its_replayed_computation_time() -> None:
    """The replay sets the time of the last computation (from the group's target-metadata record;
    None without one, as from a broker that did not write it); restoring keeps it, so the interval
    runs on across a restart, and a group without it computes its next target at once."""
    t = topic("t", 2)
    topics = {"t": t}
    g = joined_group(topics, {"a": ("t",)})
    g.advance_member("a")
    g.assignment_time_ms = 4_000  # as replayed
    hb(g, "b", 0, ("t",))
    g.restore(topics)
    assert g.assignment_pending() and g.next_assignment_ms(15_000) == 19_000
    assert not g.reconcile(topics, now_ms=18_999, interval_ms=15_000)
    assert g.reconcile(topics, now_ms=19_000, interval_ms=15_000)
    g.assignment_time_ms = None  # no record, or one without AssignmentTimestamp
    hb(g, "c", 0, ("t",))
    g.restore(topics)
    assert g.next_assignment_ms(15_000) is None and g.reconcile(topics, now_ms=19_001, interval_ms=15_000)


def test_an_emptied_group_assigns_its_next_join_at_once() -> None:
    """As Kafka, which writes AssignmentTimestamp 0 when the last member leaves: the group is as new."""
    t = topic("t", 2)
    topics = {"t": t}
    g = ShareGroup("g")
    hb(g, "a", 0, ("t",))
    init_all(g, topics)
    assert g.reconcile(topics, now_ms=1_000, interval_ms=5_000)
    g.remove_member("a")
    assert (g.assignment_epoch, g.assignment_time_ms) == (g.epoch, None)
    hb(g, "b", 0, ("t",), now=1_500)
    assert g.reconcile(topics, now_ms=1_500, interval_ms=5_000)


def test_an_unsubscribed_topic_leaves_the_assignment_before_the_next_target() -> None:
    t, u = topic("t", 1), topic("u", 1)
    topics = {"t": t, "u": u}
    g = ShareGroup("g")
    hb(g, "a", 0, ("t", "u"))
    init_all(g, topics)
    g.reconcile(topics, now_ms=1, interval_ms=5_000)
    g.advance_member("a")
    assert set(g.members["a"].assignment) == {t.topic_id, u.topic_id}
    hb(g, "a", g.members["a"].epoch, ("t",))
    assert not g.reconcile(topics, now_ms=2, interval_ms=5_000)
    g.advance_member("a", {t.topic_id})
    assert set(g.members["a"].assignment) == {t.topic_id}


def test_a_deleted_topic_leaves_the_assignment_before_the_next_target() -> None:
    """Within the assignment interval no new target is computed, but a member's next heartbeat
    no longer carries a topic that was deleted (Kafka filters against the current metadata)."""
    t, u = topic("t", 1), topic("u", 1)
    topics = {"t": t, "u": u}
    g = ShareGroup("g")
    hb(g, "a", 0, ("t", "u"))
    init_all(g, topics)
    g.reconcile(topics, now_ms=1, interval_ms=5_000)
    g.advance_member("a", None, {t.topic_id, u.topic_id})
    assert set(g.members["a"].assignment) == {t.topic_id, u.topic_id}
    del topics["u"]  # deleted: the epoch moves, the interval holds the next target back
    hb(g, "a", g.members["a"].epoch)
    assert not g.reconcile(topics, now_ms=2, interval_ms=5_000)
    g.advance_member("a", None, {t.topic_id})
    assert set(g.members["a"].assignment) == {t.topic_id}
    assert "a" in g.changed_members


def test_the_next_target_is_sticky_to_the_previous_target() -> None:
    """A member that has not heartbeated since the last target still holds an older assignment;
    the next target starts from the previous target (Kafka's TargetAssignmentBuilder), so a member
    that already moved is not moved again for it."""
    t = topic("t", 4)
    topics = {"t": t}
    g = ShareGroup("g")
    for m in ("a", "b"):
        hb(g, m, 0, ("t",))
    init_all(g, topics)
    g.reconcile(topics, now_ms=1)
    # The last target gave a {2, 3} and b {0, 1}; b took it, a still holds all four from before.
    g.target = {"a": {t.topic_id: frozenset({2, 3})}, "b": {t.topic_id: frozenset({0, 1})}}
    g.members["a"].assignment = {t.topic_id: frozenset({0, 1, 2, 3})}
    g.members["b"].assignment = {t.topic_id: frozenset({0, 1})}
    hb(g, "c", 0, ("t",), now=2)
    g.reconcile(topics, now_ms=2)
    nxt = {m: set(g.target[m].get(t.topic_id, ())) for m in ("a", "b", "c")}
    assert nxt["a"] == {2, 3} and nxt["b"] <= {0, 1} and len(nxt["b"]) == 1, nxt
