"""The classic-group state machine driven with explicit time: rebalance phases, generations,
member ids, timeouts, static membership and offset-commit validation (Kafka 4.2's rules)."""

from __future__ import annotations

import itertools

import pytest
from kio.schema.errors import ErrorCode

from sharebroker.broker.groups.classic_group import (
    COMPLETING_REBALANCE,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    ClassicGroup,
    ClassicSettings,
    JoinRequest,
    JoinResult,
    SyncResult,
)

DELAY = 100
SESSION = 10_000
REBALANCE = 30_000
PROTOCOLS = (("range", b"meta-range"), ("roundrobin", b"meta-rr"))


class Waiter:
    """A parked request; the group answers it through its outbox."""

    _ids = itertools.count()

    def __init__(self) -> None:
        self.n = next(self._ids)

    def __repr__(self) -> str:
        return f"Waiter({self.n})"


class Harness:
    def __init__(self, settings: ClassicSettings | None = None) -> None:
        self.group = ClassicGroup("g", settings or ClassicSettings(initial_rebalance_delay_ms=DELAY))
        ids = itertools.count(1)
        self.group.member_id_factory = lambda prefix: f"{prefix}-{next(ids)}"
        self.answers: dict[Waiter, JoinResult | SyncResult] = {}
        self.now = 1_000_000

    def drain(self) -> None:
        for waiter, result in self.group.take_replies():
            assert waiter not in self.answers, f"{waiter} answered twice"
            self.answers[waiter] = result

    def join(self, member_id: str = "", *, client: str = "c", instance: str | None = None, version: int = 5,
             protocols=PROTOCOLS, protocol_type: str = "consumer", session: int = SESSION,
             rebalance: int = REBALANCE) -> Waiter:
        w = Waiter()
        self.group.join(JoinRequest(member_id, instance, client, "/127.0.0.1", session, rebalance, protocol_type,
                                    protocols, version), w, self.now)
        self.drain()
        return w

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None,
             instance: str | None = None) -> Waiter:
        w = Waiter()
        self.group.sync(member_id=member_id, group_instance_id=instance, generation_id=generation,
                        protocol_type="consumer", protocol_name=None, assignments=assignments or {}, waiter=w,
                        now_ms=self.now)
        self.drain()
        return w

    def persist_all(self, ok: bool = True) -> int:
        writes = self.group.take_writes()
        for write in writes:
            self.group.write_done(write, ok, self.now)
        self.drain()
        return len(writes)

    def advance(self, ms: int) -> None:
        self.now += ms
        self.group.tick(self.now)
        self.drain()

    def finish_initial(self) -> None:
        """Two initial delays: the first is extended when several members arrived in it."""
        self.advance(DELAY)
        self.advance(DELAY)

    def join_fresh(self, client: str = "c", **kw) -> str:
        """v4+ join: MEMBER_ID_REQUIRED, then rejoin with the given id (left parked)."""
        first = self.join("", client=client, **kw)
        answer = self.answers[first]
        assert answer.error == ErrorCode.member_id_required
        self.parked = self.join(answer.member_id, client=client, **kw)
        return answer.member_id

    def stable_group(self, *clients: str) -> dict[str, str]:
        """Members join a new group, the initial delay passes, the leader syncs; {client: id}."""
        ids = {}
        parked = {}
        for c in clients:
            ids[c] = self.join_fresh(c)
            parked[c] = self.parked
        self.finish_initial()
        leader = self.group.leader_id
        gen = self.group.generation_id
        for c, _mid in ids.items():
            assert self.answers[parked[c]].error == ErrorCode.none
        waiters = {mid: self.sync(mid, gen, {m: m.encode() for m in ids.values()} if mid == leader else None)
                   for mid in ids.values()}
        assert self.persist_all() == 1
        for mid, w in waiters.items():
            assert self.answers[w] == SyncResult(ErrorCode.none, "consumer", "range", mid.encode())
        assert self.group.state == STABLE
        return ids


def test_member_id_required_then_join_after_initial_delay() -> None:
    h = Harness()
    first = h.join("", version=4)
    answer = h.answers[first]
    assert answer.error == ErrorCode.member_id_required and answer.member_id == "c-1"
    assert h.group.state == EMPTY and "c-1" in h.group.pending_members
    parked = h.join("c-1", version=4)
    assert parked not in h.answers and h.group.state == PREPARING_REBALANCE
    h.advance(DELAY - 1)
    assert parked not in h.answers
    h.advance(1)
    result = h.answers[parked]
    assert result.error == ErrorCode.none and result.generation_id == 1 and result.leader == "c-1"
    assert result.protocol_name == "range" and result.members == [("c-1", None, b"meta-range")]
    assert h.group.state == COMPLETING_REBALANCE


def test_join_below_v4_gets_member_id_directly() -> None:
    h = Harness()
    w = h.join("", version=3)
    assert w not in h.answers
    h.advance(DELAY)
    assert h.answers[w].error == ErrorCode.none and h.answers[w].member_id == "c-1"


def test_initial_delay_is_extended_while_members_arrive() -> None:
    h = Harness()
    a = h.join_fresh("a")
    wa = h.parked
    h.advance(DELAY - 10)
    b = h.join_fresh("b")
    wb = h.parked
    h.advance(10)  # first delay over, but a member arrived: wait one more delay
    assert wa not in h.answers
    h.advance(DELAY)
    assert h.answers[wa].generation_id == h.answers[wb].generation_id == 1
    leader = h.group.leader_id
    assert leader == a
    assert [m[0] for m in h.answers[wa].members] == [a, b] and h.answers[wb].members == []


def test_leader_assignment_is_persisted_before_members_get_it() -> None:
    h = Harness()
    a = h.join_fresh("a")
    b = h.join_fresh("b")
    h.finish_initial()
    wb = h.sync(b, 1)
    assert wb not in h.answers  # followers wait for the leader
    wa = h.sync(a, 1, {a: b"A", b: b"B"})
    assert wa not in h.answers and h.group.state == COMPLETING_REBALANCE
    writes = h.group.take_writes()
    assert len(writes) == 1
    snap = writes[0].snapshot
    assert snap.generation == 1 and snap.protocol == "range" and snap.leader == a
    assert [(m.member_id, m.subscription, m.assignment) for m in snap.members] == [
        (a, b"meta-range", b"A"), (b, b"meta-range", b"B")]
    h.group.write_done(writes[0], True, h.now)
    h.drain()
    assert h.answers[wa].assignment == b"A" and h.answers[wb].assignment == b"B"
    assert h.group.state == STABLE


def test_failed_assignment_write_makes_members_rejoin() -> None:
    h = Harness()
    a = h.join_fresh("a")
    h.advance(DELAY)
    wa = h.sync(a, 1, {a: b"A"})
    h.persist_all(ok=False)
    assert h.answers[wa].error == ErrorCode.coordinator_not_available
    assert h.group.state == PREPARING_REBALANCE


def test_heartbeat_errors() -> None:
    h = Harness()
    ids = h.stable_group("a")
    a = ids["a"]
    assert h.group.heartbeat(member_id=a, group_instance_id=None, generation_id=1, now_ms=h.now) == ErrorCode.none
    assert h.group.heartbeat(member_id=a, group_instance_id=None, generation_id=7,
                             now_ms=h.now) == ErrorCode.illegal_generation
    assert h.group.heartbeat(member_id="nobody", group_instance_id=None, generation_id=1,
                             now_ms=h.now) == ErrorCode.unknown_member_id


def test_new_member_triggers_rebalance_and_members_split() -> None:
    h = Harness()
    a = h.stable_group("a")["a"]
    b = h.join_fresh("b")
    wb = h.parked
    assert h.group.state == PREPARING_REBALANCE
    assert h.group.heartbeat(member_id=a, group_instance_id=None, generation_id=1,
                             now_ms=h.now) == ErrorCode.rebalance_in_progress
    wa = h.join(a)  # the old member rejoins: everybody is in, no initial delay this time
    assert h.answers[wa].generation_id == h.answers[wb].generation_id == 2
    assert h.answers[wb].member_id == b
    assert h.answers[wa].leader == a and len(h.answers[wa].members) == 2
    assert h.group.state == COMPLETING_REBALANCE


def test_member_that_does_not_rejoin_within_rebalance_timeout_is_removed() -> None:
    h = Harness()
    ids = h.stable_group("a", "b")
    a, b = ids["a"], ids["b"]
    # keep b's session alive with heartbeats while a rejoins and b does not
    wa = h.join(a)  # the leader rejoining forces a rebalance
    for _ in range(REBALANCE // (SESSION // 2)):
        h.advance(SESSION // 2 - 1)
        if wa in h.answers:
            break
        h.group.heartbeat(member_id=b, group_instance_id=None, generation_id=1, now_ms=h.now)
    h.advance(REBALANCE)
    assert h.answers[wa].error == ErrorCode.none and h.answers[wa].generation_id == 2
    assert list(h.group.members) == [a]


def test_session_timeout_removes_member_and_rebalances() -> None:
    h = Harness()
    ids = h.stable_group("a", "b")
    h.advance(SESSION - 1)
    h.group.heartbeat(member_id=ids["a"], group_instance_id=None, generation_id=1, now_ms=h.now)
    h.advance(1)
    assert ids["b"] not in h.group.members
    assert h.group.state == PREPARING_REBALANCE


def test_members_that_do_not_sync_are_removed() -> None:
    h = Harness()
    a = h.join_fresh("a")
    b = h.join_fresh("b")
    h.finish_initial()
    wa = h.sync(a, 1, {a: b"A"})
    h.persist_all()
    assert h.answers[wa].assignment == b"A"
    # b never syncs: after the rebalance timeout it is removed and a rebalance starts
    h.group.heartbeat(member_id=a, group_instance_id=None, generation_id=1, now_ms=h.now)
    for _ in range(REBALANCE // 5000):
        h.advance(5000)
        h.group.heartbeat(member_id=a, group_instance_id=None, generation_id=h.group.generation_id, now_ms=h.now)
    assert b not in h.group.members and h.group.state == PREPARING_REBALANCE


def test_leave_rebalances_and_last_leave_empties_the_group() -> None:
    h = Harness()
    ids = h.stable_group("a", "b")
    results = h.group.leave([(ids["b"], None)], h.now)
    assert results == [(ids["b"], None, ErrorCode.none)]
    assert h.group.state == PREPARING_REBALANCE
    assert h.group.leave([("ghost", None)], h.now) == [("ghost", None, ErrorCode.unknown_member_id)]
    h.group.leave([(ids["a"], None)], h.now)
    assert h.group.state == EMPTY and h.group.generation_id == 2
    writes = h.group.take_writes()
    assert writes and writes[-1].snapshot.members == () and writes[-1].snapshot.generation == 2


def test_sync_errors() -> None:
    h = Harness()
    a = h.stable_group("a")["a"]
    w = h.sync(a, 5)
    assert h.answers[w].error == ErrorCode.illegal_generation
    w = h.sync("nobody", 1)
    assert h.answers[w].error == ErrorCode.unknown_member_id
    w = Waiter()
    h.group.sync(member_id=a, group_instance_id=None, generation_id=1, protocol_type="other", protocol_name="range",
                 assignments={}, waiter=w, now_ms=h.now)
    h.drain()
    assert h.answers[w].error == ErrorCode.inconsistent_group_protocol


def test_inconsistent_protocols_are_refused() -> None:
    h = Harness()
    h.stable_group("a")
    w = h.join("", protocol_type="connect")
    assert h.answers[w].error == ErrorCode.inconsistent_group_protocol and h.answers[w].member_id == ""
    w = h.join("", protocols=(("sticky", b""),))
    assert h.answers[w].error == ErrorCode.inconsistent_group_protocol


def test_unknown_member_rejoin_is_refused() -> None:
    h = Harness()
    h.stable_group("a")
    w = h.join("not-a-member")
    assert h.answers[w].error == ErrorCode.unknown_member_id


def test_lost_join_response_is_answered_again() -> None:
    h = Harness()
    a = h.join_fresh("a")
    h.advance(DELAY)
    again = h.join(a)
    assert h.answers[again].generation_id == 1 and h.answers[again].members  # leader: members again
    assert h.group.state == COMPLETING_REBALANCE


def test_static_member_restart_keeps_assignment_without_rebalance() -> None:
    h = Harness()
    w = h.join("", client="s", instance="inst-1")
    h.advance(DELAY)
    old = h.answers[w].member_id
    assert old == "inst-1-1"
    ws = h.sync(old, 1, {old: b"P0"})
    h.persist_all()
    assert h.answers[ws].assignment == b"P0"
    # restart: same instance id, no member id, same metadata
    w2 = h.join("", client="s", instance="inst-1", version=9)
    assert w2 not in h.answers and h.group.state == STABLE
    assert h.persist_all() == 1
    result = h.answers[w2]
    assert result.error == ErrorCode.none and result.generation_id == 1 and result.member_id != old
    assert result.skip_assignment and result.members  # v9 leader: skips the assignment
    new = result.member_id
    w3 = h.sync(new, 1, instance="inst-1")
    assert h.answers[w3].assignment == b"P0"
    assert h.group.heartbeat(member_id=old, group_instance_id="inst-1", generation_id=1,
                             now_ms=h.now) == ErrorCode.fenced_instance_id
    assert h.group.generation_id == 1


def test_static_member_with_new_protocol_triggers_rebalance() -> None:
    h = Harness()
    h.join("", client="s", instance="inst-1")
    h.advance(DELAY)
    old = h.group.leader_id
    assert old is not None
    h.sync(old, 1, {old: b"P0"})
    h.persist_all()
    w = h.join("", client="s", instance="inst-1", protocols=(("roundrobin", b"x"),))
    assert h.group.state in (PREPARING_REBALANCE, COMPLETING_REBALANCE)
    h.advance(REBALANCE)
    assert h.answers[w].generation_id == 2 and h.answers[w].protocol_name == "roundrobin"


def test_group_max_size() -> None:
    h = Harness(ClassicSettings(initial_rebalance_delay_ms=DELAY, max_size=1))
    h.stable_group("a")
    w = h.join("", version=3)
    assert h.answers[w].error == ErrorCode.group_max_size_reached


def test_offset_commit_validation() -> None:
    h = Harness()
    g = h.group
    assert g.validate_offset_commit(member_id="", group_instance_id=None, generation_id=-1) is None
    a = h.join_fresh("a")
    h.advance(DELAY)
    assert g.validate_offset_commit(member_id=a, group_instance_id=None,
                                    generation_id=1) == ErrorCode.rebalance_in_progress
    h.sync(a, 1, {a: b""})
    h.persist_all()
    assert g.validate_offset_commit(member_id=a, group_instance_id=None, generation_id=1) is None
    assert g.validate_offset_commit(member_id=a, group_instance_id=None,
                                    generation_id=0) == ErrorCode.illegal_generation
    assert g.validate_offset_commit(member_id="x", group_instance_id=None,
                                    generation_id=1) == ErrorCode.unknown_member_id
    assert g.validate_offset_commit(member_id="", group_instance_id=None,
                                    generation_id=-1) == ErrorCode.unknown_member_id


def test_pending_member_that_never_rejoins_expires() -> None:
    h = Harness()
    h.join("", version=4, session=SESSION)
    assert h.group.pending_members
    h.advance(SESSION)
    assert not h.group.pending_members


def test_snapshot_round_trip_restores_a_stable_group() -> None:
    h = Harness()
    ids = h.stable_group("a", "b")
    snap = h.group.snapshot({m.member_id: m.assignment for m in h.group.members.values()})
    restored = ClassicGroup.from_snapshot("g", snap)
    assert restored.state == STABLE and restored.generation_id == 1 and restored.protocol_name == "range"
    assert set(restored.members) == set(ids.values()) and restored.leader_id == h.group.leader_id
    restored.loaded(h.now)
    # members from before the restart can keep heartbeating with their generation
    assert restored.heartbeat(member_id=ids["a"], group_instance_id=None, generation_id=1,
                              now_ms=h.now) == ErrorCode.none
    restored.tick(h.now + SESSION)
    assert ids["b"] not in restored.members  # b never came back


@pytest.mark.parametrize("version", [0, 3, 5])
def test_joins_of_every_version_complete(version: int) -> None:
    h = Harness()
    w = h.join("", version=version) if version < 4 else None
    if w is None:
        h.join_fresh("c", version=version)
        w = h.parked
    h.advance(DELAY)
    assert h.answers[w].error == ErrorCode.none
