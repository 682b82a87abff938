"""A stateful property test of a consumer group with members of both protocols: consumer-protocol
members (ConsumerGroupHeartbeat) and classic members, eager and cooperative (JoinGroup, SyncGroup,
Heartbeat), joining, beating, rejoining when told, leaving and being fenced in any order, with the
clients modelled as they behave: a consumer-protocol client owns what its last heartbeat answer
assigned; a classic client owns what its last SyncGroup gave it, an eager one drops everything
when told to rebalance, a cooperative one keeps what it owns until its next sync.

Invariants: no partition is owned by two clients at once (one record never goes to two members);
the coordinator's ownership map agrees with its members; every member's assignment is within its
target or pending revocation."""

from __future__ import annotations

import struct
import uuid

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from kio.schema.errors import ErrorCode

from sharebroker.broker.groups.consumer_group import (
    ClassicJoin,
    ConsumerGroup,
    ConsumerSettings,
    Heartbeat,
)
from sharebroker.broker.groups.share_group import TopicInfo
from sharebroker.protocol.errors import KafkaError

TID = uuid.uuid4()
TOPICS = {"t": TopicInfo("t", TID, 6)}
SETTINGS = ConsumerSettings(session_timeout_ms=1000)
CLIENTS = ("c1", "c2", "k1", "k2", "e1")  # c: consumer protocol, k: cooperative classic, e: eager classic
REBALANCE_MS = 500


def _subscription(owned: set[int]) -> bytes:
    out = struct.pack(">hi", 1, 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", -1)
    if not owned:
        return out + struct.pack(">i", 0)
    out += struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", len(owned))
    return out + b"".join(struct.pack(">i", p) for p in sorted(owned))


class MixedGroup(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.group = ConsumerGroup("g")
        self.now = 0
        self.owned: dict[str, set[int]] = {c: set() for c in CLIENTS}  # what each client consumes
        self.epoch: dict[str, int] = {}  # member epoch / generation the client knows, while a member
        self.synced: dict[str, bool] = {}

    # -- helpers ---------------------------------------------------------------------------------

    def member(self, client: str) -> bool:
        return client in self.group.members

    def gone(self, client: str) -> None:
        """The client is no member any more: it stops consuming (its session ended)."""
        self.owned[client] = set()
        self.epoch.pop(client, None)
        self.synced.pop(client, None)

    # -- consumer-protocol clients -----------------------------------------------------------------

    @rule(client=st.sampled_from(("c1", "c2")))
    def consumer_heartbeat(self, client: str) -> None:
        self.now += 10
        if not self.member(client):
            self.gone(client)
            hb = Heartbeat(client, 0, rebalance_timeout_ms=REBALANCE_MS, subscribed_names=("t",), owned=())
        else:
            owned = ((TID, tuple(sorted(self.owned[client]))),) if self.owned[client] else ()
            hb = Heartbeat(client, self.epoch[client], owned=owned)
        try:
            reply = self.group.heartbeat(hb, TOPICS, self.now, SETTINGS)
        except KafkaError as exc:
            assert exc.code in (ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id), exc
            self.gone(client)
            return
        self.group.arm_revocation_timers(self.now)
        self.epoch[client] = reply.member_epoch
        if reply.assignment is not None:
            self.owned[client] = set(reply.assignment.get(TID, ()))

    @precondition(lambda self: any(self.member(c) for c in ("c1", "c2")))
    @rule(client=st.sampled_from(("c1", "c2")))
    def consumer_leave(self, client: str) -> None:
        if not self.member(client):
            return
        self.group.heartbeat(Heartbeat(client, -1), TOPICS, self.now, SETTINGS)
        self.gone(client)

    # -- classic clients -------------------------------------------------------------------------

    @rule(client=st.sampled_from(("k1", "k2", "e1")))
    def classic_join(self, client: str) -> None:
        self.now += 10
        eager = client.startswith("e")
        if eager:
            self.owned[client] = set()  # an eager client revokes everything before it rejoins
        protocol = "range" if eager else "cooperative-sticky"
        req = ClassicJoin(client, None, "consumer", ((protocol, _subscription(self.owned[client])),), 5000,
                          REBALANCE_MS, unknown_member=False)
        protocols_ok = self.group.supports_classic_protocols("consumer", {protocol})
        try:
            m = self.group.classic_join(req, TOPICS, self.now, SETTINGS)
        except KafkaError as exc:
            assert exc.code == ErrorCode.inconsistent_group_protocol and not protocols_ok, exc
            return
        self.group.arm_revocation_timers(self.now)
        self.epoch[client] = m.epoch
        self.synced[client] = False

    @precondition(lambda self: any(self.member(c) for c in ("k1", "k2", "e1")))
    @rule(client=st.sampled_from(("k1", "k2", "e1")))
    def classic_sync(self, client: str) -> None:
        if not self.member(client) or client not in self.epoch:
            return
        protocol = "range" if client.startswith("e") else "cooperative-sticky"
        try:
            m = self.group.classic_sync(client, None, self.epoch[client], "consumer", protocol, self.now)
        except KafkaError as exc:
            assert exc.code in (ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation), exc
            if client.startswith("e"):
                self.owned[client] = set()
            return
        self.owned[client] = set(m.current.assigned.get(TID, ()))
        self.synced[client] = True

    @precondition(lambda self: any(self.member(c) for c in ("k1", "k2", "e1")))
    @rule(client=st.sampled_from(("k1", "k2", "e1")))
    def classic_heartbeat(self, client: str) -> None:
        if not self.member(client) or client not in self.epoch:
            return
        try:
            code = self.group.classic_heartbeat(client, None, self.epoch[client], self.now)
        except KafkaError as exc:
            assert exc.code == ErrorCode.illegal_generation, exc
            code = exc.code
        if code != ErrorCode.none and client.startswith("e"):
            self.owned[client] = set()  # told to rebalance: an eager client revokes all at once

    @precondition(lambda self: any(self.member(c) for c in ("k1", "k2", "e1")))
    @rule(client=st.sampled_from(("k1", "k2", "e1")))
    def classic_leave(self, client: str) -> None:
        if not self.member(client):
            return
        results, leaving = self.group.leaving_members([(client, None)])
        assert results == [(client, None, ErrorCode.none)] and leaving == {client}
        self.group.remove_members(leaving, TOPICS, SETTINGS.assignors[0])
        self.gone(client)

    # -- time ------------------------------------------------------------------------------------

    @rule(ms=st.sampled_from((100, 600, 1200)))
    def time_passes(self, ms: int) -> None:
        """Members whose session, rebalance, join or sync deadline passes are fenced; their clients,
        whose own session timers ran out too, stop consuming."""
        self.now += ms
        for member_id, _reason in self.group.expired(self.now):
            self.group.fence(member_id, TOPICS, SETTINGS.assignors[0])
            self.gone(member_id)

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def one_client_per_partition(self) -> None:
        seen: dict[int, str] = {}
        for client, parts in self.owned.items():
            for p in parts:
                assert p not in seen, f"partition {p} owned by {seen[p]} and {client}"
                seen[p] = client

    @invariant()
    def coordinator_ownership_is_consistent(self) -> None:
        claimed: dict[tuple[uuid.UUID, int], str] = {}
        for m in self.group.members.values():
            for a in (m.current.assigned, m.current.pending_revocation):
                for p in a.get(TID, ()):
                    assert (TID, p) not in claimed, f"partition {p} held by {claimed[(TID, p)]} and {m.member_id}"
                    claimed[(TID, p)] = m.member_id
        assert set(self.group.owners) == set(claimed)

    @invariant()
    def clients_own_only_what_the_coordinator_gave_them(self) -> None:
        for client, parts in self.owned.items():
            if not parts:
                continue
            m = self.group.members.get(client)
            assert m is not None, f"{client} consumes {parts} without being a member"
            held = set(m.current.assigned.get(TID, ())) | set(m.current.pending_revocation.get(TID, ()))
            assert parts <= held, f"{client} consumes {parts}, the coordinator gives it {held}"


MixedGroup.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                                        suppress_health_check=[HealthCheck.too_slow])
TestMixedGroup = MixedGroup.TestCase
