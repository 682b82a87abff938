"""A classic consumer group (JoinGroup/SyncGroup protocol) as a pure state machine. No I/O and no
clock: every call takes `now_ms` (the owner's monotonic clock, so the state timestamp is on it too);
timers are deadlines the owner asks for (`next_deadline`) and fires (`tick`).

Kafka's rules (GroupMetadataManager/ClassicGroup, 4.2): Empty → PreparingRebalance (members
(re)join; a new group waits group.initial.rebalance.delay.ms, extended while members keep
arriving, up to the rebalance timeout) → CompletingRebalance (generation + 1; the leader gets
every member's metadata and computes the assignment) → Stable once the leader's SyncGroup
assignment is persisted. Members that do not rejoin within the rebalance timeout are removed
(static members stay); members that do not heartbeat within their session timeout are removed;
members that do not SyncGroup within the rebalance timeout are removed and a new rebalance starts.

Parked JoinGroup and SyncGroup requests are opaque `waiter` tokens; their answers go to
`replies` as (waiter, JoinResult | SyncResult). Group metadata the owner must persist goes to
`writes`; the owner appends it and reports back with `write_done`, which completes what waited on
the write (a leader's assignment, a static member's replacement)."""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.groups.consumer_protocol import CONSUMER_PROTOCOL_TYPE, decode_subscription
from sharebroker.broker.groups.classic_records import (
    CommittedOffset,
    GroupSnapshot,
    MemberSnapshot,
)

EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, DEAD = (
    "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")

_VALID_PREVIOUS = {
    PREPARING_REBALANCE: {STABLE, COMPLETING_REBALANCE, EMPTY},
    COMPLETING_REBALANCE: {PREPARING_REBALANCE},
    STABLE: {COMPLETING_REBALANCE},
    EMPTY: {PREPARING_REBALANCE},
    DEAD: {STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE, EMPTY, DEAD},
}

NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
Protocols = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class ClassicSettings:
    initial_rebalance_delay_ms: int = 3000
    max_size: int = 2**31 - 1
    new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS


@dataclass(slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)  # leader only


@dataclass(slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class JoinRequest:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    version: int


@dataclass(slots=True)
class MetadataWrite:
    """A GroupMetadata record to persist; `then` says what completes once it is durable."""
    snapshot: GroupSnapshot
    then: tuple | None = None


@dataclass(slots=True)
class ClassicMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    is_new: bool = False
    join_waiter: Any = None
    sync_waiter: Any = None
    heartbeat_deadline_ms: int | None = None

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def protocol_names(self) -> set[str]:
        return {name for name, _ in self.protocols}

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def has_satisfied_heartbeat(self) -> bool:
        if self.is_new:  # new members expire even while their JoinGroup is parked
            return False
        return self.join_waiter is not None or self.sync_waiter is not None


@dataclass(slots=True)
class _JoinTimer:
    deadline_ms: int
    initial: bool
    delay_ms: int = 0
    remaining_ms: int = 0


def _new_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


class ClassicGroup:
    def __init__(self, group_id: str, settings: ClassicSettings | None = None, *, generation_id: int = 0,
                 protocol_type: str | None = None, protocol_name: str | None = None, leader_id: str | None = None,
                 state: str = EMPTY, state_timestamp_ms: int | None = None) -> None:
        self.group_id = group_id
        self.settings = settings or ClassicSettings()
        self.state = state
        self.previous_state = state
        self.state_timestamp_ms = state_timestamp_ms
        self.generation_id = generation_id
        self.protocol_type = protocol_type
        self.protocol_name = protocol_name
        self.leader_id = leader_id
        self.members: dict[str, ClassicMember] = {}
        self.static_members: dict[str, str] = {}
        self.pending_members: dict[str, int] = {}  # member id -> deadline (MEMBER_ID_REQUIRED issued)
        self.pending_sync: set[str] = set()
        self.new_member_added = False
        self.subscribed_topics: set[str] | None = None
        self.offsets: dict[tuple[str, int], CommittedOffset] = {}
        self.replies: list[tuple[Any, JoinResult | SyncResult]] = []
        self.writes: list[MetadataWrite] = []
        self.member_id_factory = _new_member_id
        self._join_timer: _JoinTimer | None = None
        self._sync_timer: tuple[int, int] | None = None  # (deadline, generation)

    # -- queries ---------------------------------------------------------------------------------

    def is_simple(self) -> bool:
        """A group that only stores offsets (no member ever joined with a protocol)."""
        return self.protocol_type is None and self.state == EMPTY

    def awaiting_join_count(self) -> int:
        return sum(1 for m in self.members.values() if m.join_waiter is not None)

    def has_all_members_joined(self) -> bool:
        return self.awaiting_join_count() == len(self.members) and not self.pending_members

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[PREPARING_REBALANCE]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def _support_count(self, name: str) -> int:
        return sum(1 for m in self.members.values() if name in m.protocol_names())

    def supports_protocols(self, protocol_type: str, names: set[str]) -> bool:
        if self.state == EMPTY:
            return bool(protocol_type) and bool(names)
        n = len(self.members)
        return self.protocol_type == protocol_type and any(self._support_count(p) == n for p in names)

    def select_protocol(self) -> str:
        if not self.members:
            raise ValueError(f"cannot select a protocol for empty group {self.group_id}")
        n = len(self.members)
        candidates = {p for m in self.members.values() for p in m.protocol_names() if self._support_count(p) == n}
        votes = Counter(m.vote(candidates) for m in self.members.values())
        return votes.most_common(1)[0][0]

    def is_subscribed_to(self, topic: str) -> bool:
        if self.subscribed_topics is None:
            return self.protocol_type == CONSUMER_PROTOCOL_TYPE
        return topic in self.subscribed_topics

    def _compute_subscribed_topics(self) -> set[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            try:
                topics.update(decode_subscription(m.metadata(self.protocol_name)).topics)
            except ValueError:
                return None
        return topics

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode | None:
        if group_instance_id is not None:
            existing = self.static_members.get(group_instance_id)
            if existing is None:
                return ErrorCode.unknown_member_id
            if existing != member_id:
                return ErrorCode.fenced_instance_id
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        return None

    def next_deadline(self) -> int | None:
        deadlines = [d for d in self.pending_members.values()]
        deadlines += [m.heartbeat_deadline_ms for m in self.members.values() if m.heartbeat_deadline_ms is not None]
        if self._join_timer is not None:
            deadlines.append(self._join_timer.deadline_ms)
        if self._sync_timer is not None:
            deadlines.append(self._sync_timer[0])
        return min(deadlines, default=None)

    # -- outbox ----------------------------------------------------------------------------------

    def take_replies(self) -> list[tuple[Any, JoinResult | SyncResult]]:
        out, self.replies = self.replies, []
        return out

    def take_writes(self) -> list[MetadataWrite]:
        out, self.writes = self.writes, []
        return out

    def _reply(self, waiter: Any, result: JoinResult | SyncResult) -> None:
        if waiter is not None:
            self.replies.append((waiter, result))

    def _complete_join(self, member: ClassicMember, result: JoinResult) -> bool:
        if member.join_waiter is None:
            return False
        self._reply(member.join_waiter, result)
        member.join_waiter = None
        return True

    def _complete_sync(self, member: ClassicMember, result: SyncResult) -> bool:
        if member.sync_waiter is None:
            return False
        self._reply(member.sync_waiter, result)
        member.sync_waiter = None
        return True

    def _generation_reply(self, member_id: str, *, with_members: bool, skip_assignment: bool = False) -> JoinResult:
        return JoinResult(ErrorCode.none, member_id, self.generation_id, self.protocol_type, self.protocol_name,
                          self.leader_id or "", skip_assignment,
                          self.member_list() if with_members else [])

    def member_list(self) -> list[tuple[str, str | None, bytes]]:
        return [(m.member_id, m.group_instance_id, m.metadata(self.protocol_name)) for m in self.members.values()]

    # -- persistence -----------------------------------------------------------------------------

    def snapshot(self, assignment: dict[str, bytes] | None = None) -> GroupSnapshot:
        """GroupMetadataValue for this group; without an assignment it lists no members (Kafka's
        "empty group" record)."""
        members: tuple[MemberSnapshot, ...] = ()
        if assignment is not None:
            members = tuple(MemberSnapshot(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                           m.rebalance_timeout_ms, m.session_timeout_ms,
                                           m.metadata(self.protocol_name), assignment.get(m.member_id, b""))
                            for m in self.members.values())
        return GroupSnapshot(self.protocol_type or "", self.generation_id, self.protocol_name, self.leader_id,
                             self.state_timestamp_ms if self.state_timestamp_ms is not None else -1, members)

    @classmethod
    def from_snapshot(cls, group_id: str, snap: GroupSnapshot, settings: ClassicSettings | None = None) -> ClassicGroup:
        group = cls(group_id, settings, generation_id=snap.generation, protocol_type=snap.protocol_type or None,
                    protocol_name=snap.protocol, leader_id=snap.leader, state=STABLE if snap.members else EMPTY,
                    state_timestamp_ms=None if snap.state_timestamp_ms == -1 else snap.state_timestamp_ms)
        for ms in snap.members:
            member = ClassicMember(ms.member_id, ms.group_instance_id, ms.client_id, ms.client_host,
                                   ms.rebalance_timeout_ms, ms.session_timeout_ms, snap.protocol_type,
                                   ((snap.protocol or "", ms.subscription),), ms.assignment)
            group._place(member)
        if group.leader_id is not None and group.leader_id not in group.members:
            group.leader_id = next(iter(group.members), None)
        group.subscribed_topics = group._compute_subscribed_topics()
        return group

    @classmethod
    def stable(cls, group_id: str, settings: ClassicSettings, generation: int, members: list[ClassicMember],
               now_ms: int) -> ClassicGroup:
        """A Stable group of `members` at `generation` (a consumer group downgraded, as Kafka's
        ClassicGroup.fromConsumerGroup): the first member leads, the protocol is the one they all
        support by vote; the caller sets the members' assignments."""
        group = cls(group_id, settings, generation_id=generation, protocol_type=CONSUMER_PROTOCOL_TYPE,
                    leader_id=members[0].member_id, state=STABLE, state_timestamp_ms=now_ms)
        for member in members:
            group._place(member)
        group.protocol_name = group.select_protocol()
        group.subscribed_topics = group._compute_subscribed_topics()
        return group

    def _place(self, member: ClassicMember) -> None:
        """A member restored or carried over (no join phase)."""
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id

    def loaded(self, now_ms: int) -> None:
        """After replay: members that do not heartbeat within their session timeout expire."""
        for m in self.members.values():
            m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms
        if len(self.members) > self.settings.max_size:
            self._prepare_rebalance(now_ms)

    def write_done(self, write: MetadataWrite, ok: bool, now_ms: int) -> None:
        then = write.then
        if then is None:
            return
        if then[0] == "assignment":
            _, generation, assignment = then
            if self.state != COMPLETING_REBALANCE or self.generation_id != generation:
                return  # another rebalance started while the record was written
            if not ok:
                self._reset_and_propagate_assignment_error(ErrorCode.coordinator_not_available, now_ms)
                self._maybe_prepare_rebalance_or_complete_join(now_ms)
                return
            for m in self.members.values():
                m.assignment = assignment.get(m.member_id, b"")
            self._propagate_assignment(ErrorCode.none, now_ms)
            self._transition(STABLE, now_ms)
        elif then[0] == "static":
            _, new_id, old_id, skip_supported, old_leader, old_protocols, old_rebalance, old_session = then
            member = self.members.get(new_id)
            if member is None:
                return
            if not ok:
                member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms = (
                    old_protocols, old_rebalance, old_session)
                waiter, member.join_waiter = member.join_waiter, None
                if member.group_instance_id is not None:
                    restored = self._replace_static_member(member.group_instance_id, new_id, old_id)
                    restored.heartbeat_deadline_ms = now_ms + restored.session_timeout_ms
                self._reply(waiter, JoinResult(ErrorCode.coordinator_not_available, "", self.generation_id,
                                               self.protocol_type, self.protocol_name, old_leader or ""))
                return
            if skip_supported:
                leader = self.leader_id == new_id
                self._complete_join(member, self._generation_reply(new_id, with_members=leader, skip_assignment=leader))
            else:
                self._complete_join(member, JoinResult(ErrorCode.none, new_id, self.generation_id, self.protocol_type,
                                                       self.protocol_name, old_leader or ""))

    # -- state changes ---------------------------------------------------------------------------

    def _transition(self, state: str, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise AssertionError(f"group {self.group_id}: invalid transition {self.state} -> {state}")
        self.previous_state = self.state
        self.state = state
        self.state_timestamp_ms = now_ms

    def mark_dead(self, now_ms: int, error: ErrorCode = ErrorCode.coordinator_not_available) -> None:
        """The group goes; whoever waits in JoinGroup or SyncGroup is answered with `error`."""
        for m in self.members.values():
            self._complete_join(m, JoinResult(error, m.member_id))
            self._complete_sync(m, SyncResult(error))
        self._transition(DEAD, now_ms)
        self._join_timer = None
        self._sync_timer = None

    def _add_member(self, member: ClassicMember, waiter: Any) -> None:
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        member.join_waiter = waiter
        self.pending_members.pop(member.member_id, None)

    def _remove_member(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None:
            if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
                del self.static_members[member.group_instance_id]
            # Nothing parked may be left without an answer.
            self._complete_join(member, JoinResult(ErrorCode.unknown_member_id, ""))
            self._complete_sync(member, SyncResult(ErrorCode.unknown_member_id))
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync.discard(member_id)

    def _replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> ClassicMember:
        old = self.members.pop(old_id)
        # Fence whoever still waits under the old member id.
        self._complete_join(old, JoinResult(ErrorCode.fenced_instance_id, old_id))
        self._complete_sync(old, SyncResult(ErrorCode.fenced_instance_id))
        new = ClassicMember(new_id, instance_id, old.client_id, old.client_host, old.rebalance_timeout_ms,
                            old.session_timeout_ms, old.protocol_type, old.protocols, old.assignment)
        self.members[new_id] = new
        if self.leader_id == old_id:
            self.leader_id = new_id
        self.static_members[instance_id] = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return new

    # -- JoinGroup -------------------------------------------------------------------------------

    def join(self, req: JoinRequest, waiter: Any, now_ms: int) -> None:
        """Handle a JoinGroup; the answer goes to `waiter` now or when the join phase completes."""
        if not self._accept_joining_member(req.member_id):
            self._remove_member(req.member_id)
            self._reply(waiter, JoinResult(ErrorCode.group_max_size_reached, ""))
        elif req.member_id == "":
            self._join_new_member(req, waiter, now_ms)
        else:
            self._join_existing_member(req, waiter, now_ms)

    def _accept_joining_member(self, member_id: str) -> bool:
        max_size = self.settings.max_size
        if self.state in (EMPTY, DEAD):
            return True
        if self.state == PREPARING_REBALANCE:
            member = self.members.get(member_id)
            return (member is not None and member.join_waiter is not None) or self.awaiting_join_count() < max_size
        return member_id in self.members or len(self.members) < max_size

    def _join_new_member(self, req: JoinRequest, waiter: Any, now_ms: int) -> None:
        if self.state == DEAD:
            self._reply(waiter, JoinResult(ErrorCode.coordinator_not_available, ""))
            return
        if not self.supports_protocols(req.protocol_type, {n for n, _ in req.protocols}):
            self._reply(waiter, JoinResult(ErrorCode.inconsistent_group_protocol, ""))
            return
        instance_id = req.group_instance_id
        new_id = self.member_id_factory(instance_id if instance_id is not None else req.client_id)
        if instance_id is not None:
            existing = self.static_members.get(instance_id)
            if existing is not None:
                self._rejoin_static_member(req, existing, new_id, waiter, now_ms)
            else:
                self._add_member_then_rebalance(req, new_id, waiter, now_ms)
        elif req.version >= 4:
            # The member must come back with this id; until then it holds a place in the group.
            self.pending_members[new_id] = now_ms + req.session_timeout_ms
            self._reply(waiter, JoinResult(ErrorCode.member_id_required, new_id))
        else:
            self._add_member_then_rebalance(req, new_id, waiter, now_ms)

    def _join_existing_member(self, req: JoinRequest, waiter: Any, now_ms: int) -> None:
        member_id = req.member_id
        if self.state == DEAD:
            self._reply(waiter, JoinResult(ErrorCode.coordinator_not_available, member_id))
            return
        if not self.supports_protocols(req.protocol_type, {n for n, _ in req.protocols}):
            self._reply(waiter, JoinResult(ErrorCode.inconsistent_group_protocol, member_id))
            return
        if member_id in self.pending_members:
            if req.group_instance_id is not None:
                self._reply(waiter, JoinResult(ErrorCode.invalid_request, member_id))
                return
            self._add_member_then_rebalance(req, member_id, waiter, now_ms)
            return
        error = self.validate_member(member_id, req.group_instance_id)
        if error is not None:
            self._reply(waiter, JoinResult(error, member_id))
            return
        member = self.members[member_id]
        if self.state == PREPARING_REBALANCE:
            self._update_member_then_rebalance(member, req, waiter, now_ms)
        elif self.state == COMPLETING_REBALANCE:
            if member.protocols == req.protocols:
                # Lost JoinGroup response: answer again with the current generation.
                self._reply(waiter, self._generation_reply(member_id, with_members=member_id == self.leader_id))
            else:
                self._update_member_then_rebalance(member, req, waiter, now_ms)
        elif self.state == STABLE:
            if member_id == self.leader_id or member.protocols != req.protocols:
                # The leader rejoining forces a rebalance (it may have seen metadata change).
                self._update_member_then_rebalance(member, req, waiter, now_ms)
            else:
                self._reply(waiter, self._generation_reply(member_id, with_members=False))
        else:
            self._reply(waiter, JoinResult(ErrorCode.unknown_member_id, member_id))

    def _add_member_then_rebalance(self, req: JoinRequest, member_id: str, waiter: Any, now_ms: int) -> None:
        member = ClassicMember(member_id, req.group_instance_id, req.client_id, req.client_host,
                               req.rebalance_timeout_ms, req.session_timeout_ms, req.protocol_type, req.protocols,
                               is_new=True)
        if self.state == PREPARING_REBALANCE and self.previous_state == EMPTY:
            self.new_member_added = True  # the initial rebalance waits a little longer
        self._add_member(member, waiter)
        # Parked new members cannot heartbeat; they expire if they never complete the join.
        member.heartbeat_deadline_ms = now_ms + self.settings.new_member_join_timeout_ms
        self._maybe_prepare_rebalance_or_complete_join(now_ms)

    def _update_member(self, member: ClassicMember, protocols: Protocols, rebalance_timeout_ms: int,
                       session_timeout_ms: int, waiter: Any) -> None:
        member.protocols = protocols
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if member.join_waiter is not None and member.join_waiter is not waiter:
            # A second JoinGroup for the same member replaces the parked one.
            self._reply(member.join_waiter, JoinResult(ErrorCode.rebalance_in_progress, member.member_id))
        member.join_waiter = waiter

    def _update_member_then_rebalance(self, member: ClassicMember, req: JoinRequest, waiter: Any, now_ms: int) -> None:
        self._update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, waiter)
        self._maybe_prepare_rebalance_or_complete_join(now_ms)

    def _rejoin_static_member(self, req: JoinRequest, old_id: str, new_id: str, waiter: Any, now_ms: int) -> None:
        """A known group.instance.id joins without a member id (a restarted static member): it
        takes over the old member's place and assignment."""
        old_leader = self.leader_id
        member = self._replace_static_member(req.group_instance_id or "", old_id, new_id)
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        old = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        self._update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, waiter)
        if self.state == STABLE:
            if self.protocol_name == self.select_protocol():
                # Same selected protocol: no rebalance; persist the new member id, then answer.
                assignment = {m.member_id: m.assignment for m in self.members.values()}
                self.writes.append(MetadataWrite(self.snapshot(assignment),
                                                 ("static", new_id, old_id, req.version >= 9, old_leader, *old)))
            else:
                self._maybe_prepare_rebalance_or_complete_join(now_ms)
        elif self.state == COMPLETING_REBALANCE:
            # The leader may already be assigning to the old member id: rebalance.
            self._prepare_rebalance(now_ms)
        else:
            self._maybe_complete_join_phase(now_ms)

    # -- rebalance phases ------------------------------------------------------------------------

    def _maybe_prepare_rebalance_or_complete_join(self, now_ms: int) -> None:
        if self.can_rebalance():
            self._prepare_rebalance(now_ms)
        else:
            self._maybe_complete_join_phase(now_ms)

    def rebalance(self, now_ms: int) -> None:
        """Start a rebalance from outside (a consumer group downgraded to this classic group)."""
        if self.can_rebalance():
            self._prepare_rebalance(now_ms)

    def _prepare_rebalance(self, now_ms: int) -> None:
        if self.state == COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment_error(ErrorCode.rebalance_in_progress, now_ms)
        self.pending_sync.clear()
        self._sync_timer = None
        initial = self.state == EMPTY
        if initial:
            delay = self.settings.initial_rebalance_delay_ms
            remaining = max(self.rebalance_timeout_ms() - delay, 0)
            self._join_timer = _JoinTimer(now_ms + delay, True, delay, remaining)
        self._transition(PREPARING_REBALANCE, now_ms)
        if not initial:
            if self.has_all_members_joined():
                self._complete_join_phase(now_ms)
            else:
                self._join_timer = _JoinTimer(now_ms + self.rebalance_timeout_ms(), False)

    def _maybe_complete_join_phase(self, now_ms: int) -> None:
        if (self.state == PREPARING_REBALANCE and self.previous_state != EMPTY
                and self.has_all_members_joined()):
            self._complete_join_phase(now_ms)

    def _complete_join_phase(self, now_ms: int) -> None:
        self._join_timer = None
        for m in list(self.members.values()):
            if m.join_waiter is None and m.group_instance_id is None:
                self._remove_member(m.member_id)  # dynamic members that did not rejoin in time
        if self.state == DEAD:
            return
        if not self._maybe_elect_joined_leader() and self.members:
            # Nobody rejoined: wait another rebalance timeout for session expiry to clear them.
            self._join_timer = _JoinTimer(now_ms + self.rebalance_timeout_ms(), False)
            return
        self._init_next_generation(now_ms)
        if self.state == EMPTY:
            self.writes.append(MetadataWrite(self.snapshot({})))
            return
        for m in self.members.values():
            self._complete_join(m, self._generation_reply(m.member_id, with_members=m.member_id == self.leader_id))
            m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms
            m.is_new = False
            self.pending_sync.add(m.member_id)
        self._sync_timer = (now_ms + self.rebalance_timeout_ms(), self.generation_id)

    def _maybe_elect_joined_leader(self) -> bool:
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.join_waiter is not None:
            return True
        for m in self.members.values():
            if m.join_waiter is not None:
                self.leader_id = m.member_id
                return True
        return False

    def _init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self._compute_subscribed_topics()
            self._transition(COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self._compute_subscribed_topics()
            self._transition(EMPTY, now_ms)
        self.pending_sync.clear()

    def _reset_and_propagate_assignment_error(self, error: ErrorCode, now_ms: int) -> None:
        for m in self.members.values():
            m.assignment = b""
        self._propagate_assignment(error, now_ms)

    def _propagate_assignment(self, error: ErrorCode, now_ms: int) -> None:
        ok = error == ErrorCode.none
        for m in self.members.values():
            result = SyncResult(error, self.protocol_type if ok else None, self.protocol_name if ok else None,
                                m.assignment)
            if self._complete_sync(m, result):
                m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms

    # -- SyncGroup -------------------------------------------------------------------------------

    def sync(self, *, member_id: str, group_instance_id: str | None, generation_id: int, protocol_type: str | None,
             protocol_name: str | None, assignments: dict[str, bytes], waiter: Any, now_ms: int) -> None:
        if self.state == EMPTY:
            self._reply(waiter, SyncResult(ErrorCode.unknown_member_id))
            return
        error = self._validate_sync(member_id, group_instance_id, generation_id, protocol_type, protocol_name)
        if error is not None:
            self._reply(waiter, SyncResult(error))
        elif self.state == PREPARING_REBALANCE:
            self._reply(waiter, SyncResult(ErrorCode.rebalance_in_progress))
        elif self.state == COMPLETING_REBALANCE:
            member = self.members[member_id]
            if member.sync_waiter is not None and member.sync_waiter is not waiter:
                self._reply(member.sync_waiter, SyncResult(ErrorCode.rebalance_in_progress))
            member.sync_waiter = waiter
            self.pending_sync.discard(member_id)
            if member_id == self.leader_id:
                assignment = {m: assignments.get(m, b"") for m in self.members}
                self.writes.append(MetadataWrite(self.snapshot(assignment),
                                                 ("assignment", self.generation_id, assignment)))
        elif self.state == STABLE:
            self.pending_sync.discard(member_id)
            member = self.members[member_id]
            self._reply(waiter, SyncResult(ErrorCode.none, self.protocol_type, self.protocol_name, member.assignment))
        else:
            self._reply(waiter, SyncResult(ErrorCode.coordinator_not_available))

    def _validate_sync(self, member_id: str, group_instance_id: str | None, generation_id: int,
                       protocol_type: str | None, protocol_name: str | None) -> ErrorCode | None:
        if self.state == DEAD:
            return ErrorCode.coordinator_not_available
        error = self.validate_member(member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != self.generation_id:
            return ErrorCode.illegal_generation
        if _inconsistent(protocol_type, self.protocol_type) or _inconsistent(protocol_name, self.protocol_name):
            return ErrorCode.inconsistent_group_protocol
        return None

    # -- Heartbeat and LeaveGroup ----------------------------------------------------------------

    def heartbeat(self, *, member_id: str, group_instance_id: str | None, generation_id: int,
                  now_ms: int) -> ErrorCode:
        if self.state == DEAD:
            return ErrorCode.coordinator_not_available
        error = self.validate_member(member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != self.generation_id:
            return ErrorCode.illegal_generation
        if self.state == EMPTY:
            return ErrorCode.unknown_member_id
        member = self.members[member_id]
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if self.state == PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, identities: list[tuple[str, str | None]], now_ms: int) -> list[tuple[str, str | None, ErrorCode]]:
        """Remove members by id or (member id "") by group.instance.id; one result per identity."""
        results: list[tuple[str, str | None, ErrorCode]] = []
        removed = False
        for member_id, instance_id in identities:
            if member_id == "":
                existing = self.static_members.get(instance_id) if instance_id is not None else None
                if existing is None:
                    results.append((member_id, instance_id, ErrorCode.unknown_member_id))
                else:
                    self._remove_current_member(existing)
                    removed = True
                    results.append((member_id, instance_id, ErrorCode.none))  # Kafka echoes the request's ids
            elif member_id in self.pending_members:
                del self.pending_members[member_id]
                results.append((member_id, instance_id, ErrorCode.none))
            else:
                error = self.validate_member(member_id, instance_id)
                if error is not None:
                    results.append((member_id, instance_id, error))
                else:
                    self._remove_current_member(member_id)
                    removed = True
                    results.append((member_id, instance_id, ErrorCode.none))
        if removed or any(e == ErrorCode.none for _, _, e in results):
            if self.state in (STABLE, COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(now_ms)
            elif self.state == PREPARING_REBALANCE:
                self._maybe_complete_join_phase(now_ms)
        return results

    def _remove_current_member(self, member_id: str) -> None:
        member = self.members[member_id]
        self._complete_join(member, JoinResult(ErrorCode.unknown_member_id, ""))
        self._remove_member(member_id)

    # -- offsets ---------------------------------------------------------------------------------

    def validate_offset_commit(self, *, member_id: str, group_instance_id: str | None,
                               generation_id: int) -> ErrorCode | None:
        if self.state == DEAD:
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and self.state == EMPTY:
            return None  # admin or manually assigned consumer committing for an empty group
        if generation_id >= 0 or member_id or group_instance_id is not None:
            error = self.validate_member(member_id, group_instance_id)
            if error is not None:
                return error
            if generation_id != self.generation_id:
                return ErrorCode.illegal_generation
        elif self.state != EMPTY:
            return ErrorCode.unknown_member_id
        if self.state == COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return None

    def offset_committed(self, member_id: str, now_ms: int) -> None:
        """A commit from a member counts as a sign of life in Stable and PreparingRebalance."""
        member = self.members.get(member_id)
        if member is not None and self.state in (STABLE, PREPARING_REBALANCE):
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms

    def validate_offset_delete(self) -> ErrorCode | None:
        if self.state == DEAD:
            return ErrorCode.group_id_not_found
        if self.state != EMPTY and self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return ErrorCode.non_empty_group
        return None

    # -- timers ----------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Fire every timer whose deadline has passed."""
        for member_id, deadline in list(self.pending_members.items()):
            if deadline <= now_ms and member_id in self.pending_members:
                del self.pending_members[member_id]
                if self.state == PREPARING_REBALANCE and self.has_all_members_joined():
                    self._complete_join_phase(now_ms)
        for member in list(self.members.values()):
            beat_deadline = member.heartbeat_deadline_ms
            if beat_deadline is None or beat_deadline > now_ms or self.members.get(member.member_id) is not member:
                continue
            member.heartbeat_deadline_ms = None
            if not member.has_satisfied_heartbeat():
                self._expire_member(member, now_ms)
        timer = self._join_timer
        if timer is not None and timer.deadline_ms <= now_ms:
            self._join_timer = None
            if self.state == PREPARING_REBALANCE:
                if timer.initial:
                    self._extend_or_complete_initial_rebalance(timer, now_ms)
                else:
                    self._complete_join_phase(now_ms)
        if self._sync_timer is not None and self._sync_timer[0] <= now_ms:
            _, generation = self._sync_timer
            self._sync_timer = None
            self._expire_pending_sync(generation, now_ms)

    def _expire_member(self, member: ClassicMember, now_ms: int) -> None:
        self._complete_join(member, JoinResult(ErrorCode.unknown_member_id, ""))
        self._remove_member(member.member_id)
        if self.state in (STABLE, COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(now_ms)
        elif self.state == PREPARING_REBALANCE and self.has_all_members_joined():
            self._complete_join_phase(now_ms)

    def _extend_or_complete_initial_rebalance(self, timer: _JoinTimer, now_ms: int) -> None:
        if self.new_member_added and timer.remaining_ms != 0:
            self.new_member_added = False
            delay = min(self.settings.initial_rebalance_delay_ms, timer.remaining_ms)
            remaining = max(timer.remaining_ms - timer.delay_ms, 0)
            self._join_timer = _JoinTimer(now_ms + delay, True, delay, remaining)
        else:
            self._complete_join_phase(now_ms)

    def _expire_pending_sync(self, generation: int, now_ms: int) -> None:
        if generation != self.generation_id or self.state not in (COMPLETING_REBALANCE, STABLE):
            return
        if self.pending_sync:
            for member_id in list(self.pending_sync):
                self._remove_member(member_id)
            self._prepare_rebalance(now_ms)


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current
