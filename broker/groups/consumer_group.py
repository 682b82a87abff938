"""A consumer group of the KIP-848 protocol (`group.protocol=consumer`) as a pure state machine:
members, group epoch, target assignment, and each member's reconciliation towards it. No I/O and
no clock: callers pass `now_ms` and the topic metadata.

Kafka's rules (GroupMetadataManager.consumerGroupHeartbeat, ConsumerGroup, CurrentAssignmentBuilder
in Kafka 4.x): a change of membership, subscription or subscribed-topic metadata bumps the group
epoch; the target assignment is recomputed when it is behind the group epoch, at most once per
`consumer.assignment.interval.ms` (Kafka 4.3+: in between, members are reconciled towards the last
target, at its epoch); a member moves to a
new epoch only after it has revoked (no longer reports owning) what it must give up, and receives a
partition only once its previous owner has released it. A member that does not revoke within its
rebalance timeout, or does not heartbeat within the session timeout, is fenced (removed).

Members of the classic protocol live here too once a classic group is upgraded (KIP-848's online
migration): they join with JoinGroup (their ConsumerProtocolSubscription gives the topics and what
they own), collect the assignment with SyncGroup, and learn of a new epoch from Heartbeat's
REBALANCE_IN_PROGRESS; they must rejoin within the rebalance timeout once told, and sync within it
once joined."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass, field, replace

from kio.schema.errors import ErrorCode

from sharebroker.broker.groups.assignors import MemberSubscription, assign
from sharebroker.broker.groups.consumer_protocol import CONSUMER_PROTOCOL_TYPE, assignment_version, decode_subscription
from sharebroker.broker.groups.share_group import Assignment, TopicInfo
from sharebroker.protocol.errors import KafkaError

# MemberState ids as in Kafka's records
STABLE, UNREVOKED_PARTITIONS, UNRELEASED_PARTITIONS, UNKNOWN = 0, 1, 2, 127
MEMBER_STATE_NAMES = {STABLE: "STABLE", UNREVOKED_PARTITIONS: "UNREVOKED_PARTITIONS",
                      UNRELEASED_PARTITIONS: "UNRELEASED_PARTITIONS", UNKNOWN: "UNKNOWN"}
LEAVE_EPOCH, STATIC_LEAVE_EPOCH = -1, -2
# Group states (ConsumerGroupState)
EMPTY, ASSIGNING, RECONCILING, GROUP_STABLE, DEAD = "Empty", "Assigning", "Reconciling", "Stable", "Dead"
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})

Owned = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class CurrentAssignment:
    """A member's reconciliation state (ConsumerGroupCurrentMemberAssignmentValue)."""
    epoch: int = 0
    previous_epoch: int = 0
    state: int = STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClassicMetadata:
    """What a member of the classic protocol sent in its JoinGroup (Kafka's ClassicMemberMetadata)."""
    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]  # (name, ConsumerProtocolSubscription), preferred first

    @property
    def protocol_name(self) -> str:
        return self.protocols[0][0]

    def names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.protocols)

    def assignment_version(self) -> int:
        """SyncGroup answers in the version of the member's own subscription."""
        return assignment_version(self.protocols[0][1])


@dataclass(frozen=True, slots=True)
class ClassicJoin:
    """A JoinGroup of a classic member to a consumer group; `member_id` is already allocated."""
    member_id: str
    instance_id: str | None
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str = ""
    client_host: str = ""
    unknown_member: bool = False  # the request named no member id


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    subscribed_names: tuple[str, ...] = ()
    subscribed_regex: str | None = None
    current: CurrentAssignment = field(default_factory=CurrentAssignment)
    classic: ClassicMetadata | None = None  # set for a member of the classic protocol
    session_deadline_ms: int = 0
    revocation_deadline: tuple[int, int] | None = None  # (deadline, epoch it must leave by then)
    join_deadline_ms: int | None = None  # classic member told to rejoin must do so by then
    sync_deadline_ms: int | None = None  # classic member that joined must sync by then

    @property
    def epoch(self) -> int:
        return self.current.epoch

    def session_timeout_ms(self, settings: ConsumerSettings) -> int:
        return self.classic.session_timeout_ms if self.classic is not None else settings.session_timeout_ms

    def metadata_signature(self) -> tuple:
        return (self.instance_id, self.rack_id, self.client_id, self.client_host, self.rebalance_timeout_ms,
                self.server_assignor, self.subscribed_names, self.subscribed_regex, self.classic)


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """One ConsumerGroupHeartbeat, validated (see `validate_heartbeat`)."""
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_names: tuple[str, ...] | None = None
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    owned: Owned | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class ConsumerSettings:
    session_timeout_ms: int = 45000
    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = ("uniform", "range")  # the first is the default
    assignment_interval_ms: int = 0  # consumer.assignment.interval.ms (0: every epoch change computes at once)


@dataclass(slots=True)
class HeartbeatReply:
    member_id: str
    member_epoch: int
    assignment: Assignment | None  # None: not sent (unchanged)


def _sorted_assignment(a: Mapping[uuid.UUID, frozenset[int]]) -> tuple:
    return tuple(sorted((str(t), tuple(sorted(ps))) for t, ps in a.items() if ps))


def next_current_assignment(member: CurrentAssignment, target_epoch: int, target: Assignment,
                            owner_epoch: Callable[[uuid.UUID, int], int], owned: Owned | None,
                            subscribed: Container[uuid.UUID] | None = None,
                            subscription_changed: bool = False) -> CurrentAssignment:
    """Kafka's CurrentAssignmentBuilder: the member's next state towards the target. `owner_epoch`
    gives the epoch of a partition's current owner (-1 if free); `owned` is what the member
    reports owning (None when the heartbeat omitted it). With `subscribed` (the ids of the topics
    the member subscribes to that exist), a target's partitions of other topics count as not
    targeted, and when the member's subscription just changed it gives up those topics at once,
    even while the target is held back by the assignment interval."""
    def owns_any(pending: Assignment) -> bool:
        if owned is None:
            return True
        return any(p in pending.get(tid, ()) for tid, parts in owned for p in parts)

    def drop_unsubscribed() -> CurrentAssignment:
        """Kafka's updateCurrentAssignment: partitions of topics no longer subscribed are revoked
        at the member's current epoch."""
        if subscribed is None or all(tid in subscribed for tid in member.assigned):
            return member
        assigned = {tid: ps for tid, ps in member.assigned.items() if tid in subscribed}
        pending = dict(member.pending_revocation)
        for tid, ps in member.assigned.items():
            if tid not in subscribed:
                pending[tid] = pending.get(tid, frozenset()) | ps
        if owns_any(pending):
            return CurrentAssignment(member.epoch, member.epoch, UNREVOKED_PARTITIONS, assigned, pending)
        return CurrentAssignment(member.epoch, member.epoch, member.state, assigned, member.pending_revocation)

    def compute(epoch: int) -> CurrentAssignment:
        unreleased = False
        assigned: dict[uuid.UUID, frozenset[int]] = {}
        revoking: dict[uuid.UUID, frozenset[int]] = {}
        adding: dict[uuid.UUID, frozenset[int]] = {}
        for tid in set(target) | set(member.assigned):
            want = target.get(tid, frozenset()) if subscribed is None or tid in subscribed else frozenset()
            have = member.assigned.get(tid, frozenset())
            keep = have & want
            gone = have - keep
            new = want - keep
            free = frozenset(p for p in new if owner_epoch(tid, p) == -1)
            unreleased = unreleased or free != new
            if keep:
                assigned[tid] = keep
            if gone:
                revoking[tid] = gone
            if free:
                adding[tid] = free
        if revoking and owns_any(revoking):
            # Stay at the current epoch until the member reports it gave these up.
            return CurrentAssignment(epoch, member.epoch, UNREVOKED_PARTITIONS, assigned, revoking)
        for tid, ps in adding.items():
            assigned[tid] = assigned.get(tid, frozenset()) | ps
        state = UNRELEASED_PARTITIONS if unreleased else STABLE
        return CurrentAssignment(target_epoch, member.epoch, state, assigned, {})

    if member.state == STABLE:
        if member.epoch != target_epoch:
            return compute(member.epoch)
        return drop_unsubscribed() if subscription_changed else member
    if member.state == UNREVOKED_PARTITIONS:
        if owns_any(member.pending_revocation):
            return drop_unsubscribed() if subscription_changed else member
        return compute(member.epoch + 1)
    if member.state == UNRELEASED_PARTITIONS:
        return compute(member.epoch)
    if owned is None or owned:
        raise KafkaError(ErrorCode.fenced_member_epoch, "The consumer group member is in a unknown state. "
                         "The member must abandon all its partitions and rejoin.")
    return compute(target_epoch)


def _same(a: CurrentAssignment, b: CurrentAssignment) -> bool:
    return (a.epoch, a.previous_epoch, a.state, _sorted_assignment(a.assigned), _sorted_assignment(a.pending_revocation)) == \
        (b.epoch, b.previous_epoch, b.state, _sorted_assignment(b.assigned), _sorted_assignment(b.pending_revocation))


def compile_regex(pattern: str) -> re.Pattern[str]:
    """Kafka resolves RE2/J patterns; Python's `re` with a full match serves the common syntax."""
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise KafkaError(ErrorCode.invalid_regular_expression,
                         f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {exc}.") from None


class ConsumerGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.epoch = 0
        self.assignment_epoch = 0
        # When the target was last computed (monotonic ms); None when unknown (a new, emptied or
        # upgraded group, or one loaded at start-up): the next one may run at once.
        self.assignment_time_ms: int | None = None
        self.members: dict[str, ConsumerMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, Assignment] = {}
        self.owners: dict[tuple[uuid.UUID, int], int] = {}  # partition -> epoch of its owner
        self.resolved: dict[str, tuple[str, ...]] = {}  # regex -> matching topic names
        # With ACLs: which topics a regex may resolve to (those the principal of the member that
        # heartbeated last may describe, as Kafka resolves in the refreshing request's context).
        self.regex_topic_filter: Callable[[str], bool] | None = None
        self.metadata_signature: tuple = ()

    # -- queries ---------------------------------------------------------------------------------

    @property
    def state(self) -> str:
        if not self.members:
            return EMPTY
        if self.epoch > self.assignment_epoch:
            return ASSIGNING
        if any(m.current.state != STABLE or m.epoch != self.assignment_epoch for m in self.members.values()):
            return RECONCILING
        return GROUP_STABLE

    def member_topics(self, m: ConsumerMember) -> frozenset[str]:
        names = set(m.subscribed_names)
        if m.subscribed_regex is not None:
            names.update(self.resolved.get(m.subscribed_regex, ()))
        return frozenset(names)

    def subscribed_topic_names(self) -> set[str]:
        return {t for m in self.members.values() for t in self.member_topics(m)}

    def preferred_assignor(self, default: str) -> str:
        """The server assignor most members ask for (Kafka counts them), else the default."""
        counts: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor is not None:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        if not counts:
            return default
        return max(sorted(counts), key=lambda a: counts[a])

    def owner_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.owners.get((topic_id, partition), -1)

    def _signature(self, topics: Mapping[str, TopicInfo]) -> tuple:
        return tuple(sorted((n, str(topics[n].topic_id), topics[n].partitions)
                            for n in self.subscribed_topic_names() if n in topics))

    # -- ownership bookkeeping -------------------------------------------------------------------

    def _release(self, m: ConsumerMember) -> None:
        for a in (m.current.assigned, m.current.pending_revocation):
            for tid, parts in a.items():
                for p in parts:
                    if self.owners.get((tid, p)) == m.current.epoch:
                        del self.owners[(tid, p)]

    def _claim(self, m: ConsumerMember) -> None:
        for a in (m.current.assigned, m.current.pending_revocation):
            for tid, parts in a.items():
                for p in parts:
                    self.owners[(tid, p)] = m.current.epoch

    def set_current(self, m: ConsumerMember, current: CurrentAssignment) -> None:
        self._release(m)
        m.current = current
        self._claim(m)

    def add_member(self, m: ConsumerMember) -> None:
        self.members[m.member_id] = m
        if m.instance_id is not None:
            self.static_members[m.instance_id] = m.member_id
        self._claim(m)

    def remove_member(self, member_id: str) -> ConsumerMember | None:
        m = self.members.pop(member_id, None)
        if m is None:
            return None
        self._release(m)
        self.target.pop(member_id, None)
        if m.instance_id is not None and self.static_members.get(m.instance_id) == member_id:
            del self.static_members[m.instance_id]
        return m

    def fence(self, member_id: str, topics: Mapping[str, TopicInfo], default_assignor: str, now_ms: int = 0,
              interval_ms: int = 0) -> None:
        """Remove a member (leave, session or rebalance timeout) and bump the group epoch."""
        if self.remove_member(member_id) is None:
            return
        self.refresh(topics, default_assignor, bump=True, now_ms=now_ms, interval_ms=interval_ms)

    # -- heartbeat -------------------------------------------------------------------------------

    def _check_room(self, member_id: str, instance_id: str | None, settings: ConsumerSettings) -> None:
        """Kafka 4.x's throwIfConsumerGroupIsFull: a new member is refused at group.consumer.max.size;
        a known static instance replaces itself or is refused otherwise, it never grows the group."""
        if (len(self.members) >= settings.max_size and instance_id not in self.static_members
                and (not member_id or member_id not in self.members)):
            raise KafkaError(ErrorCode.group_max_size_reached, "The consumer group has reached its maximum capacity of "
                             f"{settings.max_size} members.")

    def _member_for(self, hb: Heartbeat, settings: ConsumerSettings) -> tuple[ConsumerMember, ConsumerMember | None]:
        """(the member to update, the static member it replaces); raises Kafka's errors."""
        joining = hb.member_epoch == 0
        self._check_room(hb.member_id, hb.instance_id, settings)
        if hb.instance_id is None:
            member = self.members.get(hb.member_id)
            if member is None:
                if not joining:
                    raise KafkaError(ErrorCode.unknown_member_id,
                                     f"Member {hb.member_id} is not a member of group {self.group_id}.")
                return ConsumerMember(hb.member_id), None
            _check_epoch(member, hb)
            return member, None
        existing_id = self.static_members.get(hb.instance_id)
        existing = self.members.get(existing_id) if existing_id is not None else None
        if joining:
            if existing is None:
                return self.members.get(hb.member_id) or ConsumerMember(hb.member_id), None
            if existing.member_id == hb.member_id:
                _check_epoch(existing, hb)
                return existing, None
            if existing.classic is None and existing.epoch != STATIC_LEAVE_EPOCH:
                raise KafkaError(ErrorCode.unreleased_instance_id,
                                 f"Static member {hb.member_id} with instance id {hb.instance_id} cannot join the "
                                 f"group because the instance id is owned by {existing.member_id} member.")
            return self._static_replacement(existing, hb.member_id), existing
        if existing is None:
            raise KafkaError(ErrorCode.unknown_member_id, f"Instance id {hb.instance_id} is unknown.")
        if existing.member_id != hb.member_id:
            raise _fenced(hb.member_id, hb.instance_id, existing.member_id)
        _check_epoch(existing, hb)
        return existing, None

    def heartbeat(self, hb: Heartbeat, topics: Mapping[str, TopicInfo], now_ms: int,
                  settings: ConsumerSettings) -> HeartbeatReply:
        """Apply one heartbeat (join, beat or leave) and answer it."""
        if hb.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self.leave(hb, topics, settings.assignors[0], now_ms, settings.assignment_interval_ms)
        member, replaced = self._member_for(hb, settings)
        before = member.current
        if hb.instance_id is not None:
            member.instance_id = hb.instance_id
        if hb.rack_id is not None:
            member.rack_id = hb.rack_id
        if hb.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = hb.rebalance_timeout_ms
        if hb.server_assignor is not None:
            member.server_assignor = hb.server_assignor
        member.client_id, member.client_host = hb.client_id, hb.client_host
        member.classic = None  # a static member of the classic protocol replaced by one of the consumer protocol
        # A new group always moves off epoch 0, even for a member subscribed to nothing yet (its
        # next heartbeat at epoch 0 would otherwise be a first request again); after that only a
        # subscription change bumps the group epoch (Kafka's hasMemberSubscriptionChanged); topic
        # metadata changes are caught by `refresh`.
        changed = False
        if hb.subscribed_names is not None and frozenset(hb.subscribed_names) != frozenset(member.subscribed_names):
            member.subscribed_names = tuple(hb.subscribed_names)
            changed = True
        if hb.subscribed_regex is not None and (hb.subscribed_regex or None) != member.subscribed_regex:
            member.subscribed_regex = hb.subscribed_regex or None
            changed = True
        self._install(member, replaced)
        self.refresh(topics, settings.assignors[0], bump=changed or self.epoch == 0, now_ms=now_ms,
                     interval_ms=settings.assignment_interval_ms)
        self.reconcile(member, hb.owned, topics, changed)
        member.session_deadline_ms = now_ms + settings.session_timeout_ms
        full = hb.member_epoch == 0 or (hb.rebalance_timeout_ms != -1 and hb.subscribed_names is not None
                                        and hb.owned is not None)
        send = full or _sorted_assignment(before.assigned) != _sorted_assignment(member.current.assigned)
        return HeartbeatReply(member.member_id, member.epoch, dict(member.current.assigned) if send else None)

    @staticmethod
    def _static_replacement(existing: ConsumerMember, member_id: str) -> ConsumerMember:
        """A new member id takes over a static member: its assignment, at epoch 0."""
        return replace(existing, member_id=member_id, current=replace(existing.current, epoch=0, previous_epoch=0),
                       revocation_deadline=None, join_deadline_ms=None, sync_deadline_ms=None)

    def _install(self, member: ConsumerMember, replaced: ConsumerMember | None) -> None:
        if replaced is not None:
            target = self.target.pop(replaced.member_id, None)
            self.remove_member(replaced.member_id)
            self.target[member.member_id] = target if target is not None else dict(member.current.assigned)
        if member.member_id not in self.members:
            self.add_member(member)

    def reconcile(self, member: ConsumerMember, owned: Owned | None, topics: Mapping[str, TopicInfo] | None = None,
                  subscription_changed: bool = False) -> None:
        if member.current.state == STABLE and member.epoch == self.assignment_epoch and not subscription_changed:
            return  # a steady member: nothing to move (no per-heartbeat work beyond this check)
        target = self.target.get(member.member_id, {})
        subscribed = None
        if topics is not None:
            subscribed = {topics[n].topic_id for n in self.member_topics(member) if n in topics}
        current = next_current_assignment(member.current, self.assignment_epoch, target, self.owner_epoch, owned,
                                          subscribed, subscription_changed)
        if current is member.current or _same(current, member.current):
            return
        self.set_current(member, current)
        if current.state == UNREVOKED_PARTITIONS and member.classic is None:
            # (a member of the classic protocol has only its join and sync timers, as in Kafka)
            if member.revocation_deadline is None or member.revocation_deadline[1] != current.epoch:
                member.revocation_deadline = (-1, current.epoch)  # armed by the caller, who knows the time
        else:
            member.revocation_deadline = None

    def arm_revocation_timers(self, now_ms: int) -> None:
        for m in self.members.values():
            if m.revocation_deadline is not None and m.revocation_deadline[0] == -1:
                m.revocation_deadline = (now_ms + max(m.rebalance_timeout_ms, 0), m.revocation_deadline[1])

    def leave(self, hb: Heartbeat, topics: Mapping[str, TopicInfo], default_assignor: str, now_ms: int = 0,
              interval_ms: int = 0) -> HeartbeatReply:
        if hb.instance_id is None:
            if hb.member_id not in self.members:
                raise KafkaError(ErrorCode.unknown_member_id,
                                 f"Member {hb.member_id} is not a member of group {self.group_id}.")
            self.fence(hb.member_id, topics, default_assignor, now_ms, interval_ms)
            return HeartbeatReply(hb.member_id, hb.member_epoch, None)
        existing_id = self.static_members.get(hb.instance_id)
        if existing_id is None:
            raise KafkaError(ErrorCode.unknown_member_id, f"Instance id {hb.instance_id} is unknown.")
        if existing_id != hb.member_id:
            raise _fenced(hb.member_id, hb.instance_id, existing_id)
        if hb.member_epoch == STATIC_LEAVE_EPOCH:
            # A temporary leave: the member keeps its assignment until its session expires.
            m = self.members[existing_id]
            self.set_current(m, replace(m.current, epoch=STATIC_LEAVE_EPOCH, pending_revocation={}))
            m.revocation_deadline = None
            return HeartbeatReply(existing_id, STATIC_LEAVE_EPOCH, None)
        self.fence(existing_id, topics, default_assignor, now_ms, interval_ms)
        return HeartbeatReply(hb.member_id, hb.member_epoch, None)

    # -- members of the classic protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) ------------

    def classic_member_count(self) -> int:
        return sum(1 for m in self.members.values() if m.classic is not None)

    def all_classic_except(self, member_id: str) -> bool:
        """True if every member but `member_id` uses the classic protocol and `member_id` does not."""
        leaving = self.members.get(member_id)
        return (leaving is not None and leaving.classic is None
                and self.classic_member_count() == len(self.members) - 1)

    def supports_classic_protocols(self, protocol_type: str, names: set[str]) -> bool:
        """Kafka's ConsumerGroup.supportsClassicProtocols: the consumer protocol type, and one
        protocol every classic member supports."""
        if protocol_type != CONSUMER_PROTOCOL_TYPE:
            return False
        if not self.members:
            return bool(names)
        n = self.classic_member_count()
        return any(sum(1 for m in self.members.values() if m.classic is not None and name in m.classic.names()) == n
                   for name in names)

    def _classic_member_for(self, req: ClassicJoin) -> tuple[ConsumerMember, ConsumerMember | None]:
        if req.instance_id is None:
            return self.members.get(req.member_id) or ConsumerMember(req.member_id), None
        existing_id = self.static_members.get(req.instance_id)
        existing = self.members.get(existing_id) if existing_id is not None else None
        if req.unknown_member:
            if existing is None:
                return ConsumerMember(req.member_id), None
            return self._static_replacement(existing, req.member_id), existing
        if existing is None:
            raise KafkaError(ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown.")
        if existing.member_id != req.member_id:
            raise _fenced(req.member_id, req.instance_id, existing.member_id)
        return existing, None

    def check_classic_join(self, req: ClassicJoin, settings: ConsumerSettings) -> None:
        """What Kafka checks before anything else, even before asking for a known member id."""
        self._check_room(req.member_id, req.instance_id, settings)
        if not req.protocols or not self.supports_classic_protocols(req.protocol_type, {n for n, _ in req.protocols}):
            raise KafkaError(ErrorCode.inconsistent_group_protocol, f"Member {req.member_id}'s protocols are not "
                             "supported.")

    def classic_join(self, req: ClassicJoin, topics: Mapping[str, TopicInfo], now_ms: int,
                     settings: ConsumerSettings) -> ConsumerMember:
        """Kafka's classicGroupJoinToConsumerGroup: the member is answered at once with its member
        epoch as the generation; what it owns comes from its subscription's owned partitions."""
        self.check_classic_join(req, settings)
        try:
            subscription = decode_subscription(req.protocols[0][1])
        except ValueError as exc:
            raise KafkaError(ErrorCode.inconsistent_group_protocol, f"Member {req.member_id}'s subscription does not "
                             f"parse: {exc}.") from None
        member, replaced = self._classic_member_for(req)
        if req.instance_id is not None:
            member.instance_id = req.instance_id
        if subscription.rack_id is not None:
            member.rack_id = subscription.rack_id
        if req.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.client_id, member.client_host = req.client_id, req.client_host
        member.classic = ClassicMetadata(req.session_timeout_ms, req.protocols)
        bump = frozenset(subscription.topics) != frozenset(member.subscribed_names) or member.subscribed_regex is not None
        member.subscribed_names, member.subscribed_regex = subscription.topics, None
        self._install(member, replaced)
        self.refresh(topics, settings.assignors[0], bump=bump, now_ms=now_ms, interval_ms=settings.assignment_interval_ms)
        owned = tuple((topics[name].topic_id, parts) for name, parts in subscription.owned_partitions if name in topics)
        self.reconcile(member, owned, topics, bump)
        member.session_deadline_ms = now_ms + req.session_timeout_ms
        member.join_deadline_ms = None
        member.sync_deadline_ms = now_ms + max(member.rebalance_timeout_ms, 0)
        return member

    def classic_member(self, member_id: str, instance_id: str | None) -> ConsumerMember:
        """Kafka's validateConsumerGroupMember and throwIfMemberDoesNotUseClassicProtocol."""
        if instance_id is None:
            member = self.members.get(member_id)
            if member is None:
                raise KafkaError(ErrorCode.unknown_member_id,
                                 f"Member {member_id} is not a member of group {self.group_id}.")
        else:
            existing_id = self.static_members.get(instance_id)
            member = self.members.get(existing_id) if existing_id is not None else None
            if member is None:
                raise KafkaError(ErrorCode.unknown_member_id, f"Member with instance id {instance_id} is not a member "
                                 f"of group {self.group_id}.")
            if member.member_id != member_id:
                raise _fenced(member_id, instance_id, member.member_id)
        if member.classic is None:
            raise KafkaError(ErrorCode.unknown_member_id, f"Member {member.member_id} does not use the classic "
                             "protocol.")
        return member

    def _check_generation(self, member: ConsumerMember, generation_id: int) -> None:
        if generation_id != member.epoch:
            raise KafkaError(ErrorCode.illegal_generation, f"The request generation id {generation_id} is not equal "
                             f"to the member epoch {member.epoch} of member {member.member_id}.")

    def _ask_rejoin(self, member: ConsumerMember, now_ms: int) -> None:
        if member.join_deadline_ms is None:
            member.join_deadline_ms = now_ms + max(member.rebalance_timeout_ms, 0)

    def classic_sync(self, member_id: str, instance_id: str | None, generation_id: int, protocol_type: str | None,
                     protocol_name: str | None, now_ms: int) -> ConsumerMember:
        """Kafka's classicGroupSyncToConsumerGroup: the member collects its current assignment."""
        member = self.classic_member(member_id, instance_id)
        self._check_generation(member, generation_id)
        assert member.classic is not None
        if protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE:
            raise KafkaError(ErrorCode.inconsistent_group_protocol,
                             f"The protocol type {protocol_type} from member {member_id} request is not equal to the "
                             f"group protocol type {CONSUMER_PROTOCOL_TYPE}.")
        if protocol_name is not None and protocol_name != member.classic.protocol_name:
            raise KafkaError(ErrorCode.inconsistent_group_protocol,
                             f"The protocol name {protocol_name} from member {member_id} request is not equal to the "
                             f"protocol name {member.classic.protocol_name} returned in the join response.")
        if self.assignment_epoch > member.epoch and member.current.state != UNREVOKED_PARTITIONS:
            self._ask_rejoin(member, now_ms)
            raise KafkaError(ErrorCode.rebalance_in_progress, f"A new rebalance is triggered in group {self.group_id} "
                             f"and member {member_id} should rejoin to catch up.")
        member.sync_deadline_ms = None
        member.session_deadline_ms = now_ms + member.classic.session_timeout_ms
        return member

    def waiting_on_unreleased_partition(self, member: ConsumerMember) -> bool:
        """A partition of the member's target that it lacks is still owned by another member."""
        for tid, parts in self.target.get(member.member_id, {}).items():
            have = member.current.assigned.get(tid, frozenset())
            if any(p not in have and self.owner_epoch(tid, p) != -1 for p in parts):
                return True
        return False

    def classic_heartbeat(self, member_id: str, instance_id: str | None, generation_id: int,
                          now_ms: int) -> ErrorCode:
        """Kafka's classicGroupHeartbeatToConsumerGroup: REBALANCE_IN_PROGRESS when the member must
        rejoin (a newer group epoch, partitions to revoke, or its awaited partitions are free)."""
        member = self.classic_member(member_id, instance_id)
        self._check_generation(member, generation_id)
        assert member.classic is not None
        member.session_deadline_ms = now_ms + member.classic.session_timeout_ms
        state = member.current.state
        if (member.epoch < self.assignment_epoch or state == UNREVOKED_PARTITIONS
                or (state == UNRELEASED_PARTITIONS and not self.waiting_on_unreleased_partition(member))):
            self._ask_rejoin(member, now_ms)
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leaving_members(self, identities: list[tuple[str, str | None]]
                        ) -> tuple[list[tuple[str, str | None, ErrorCode]], set[str]]:
        """Kafka's classicGroupLeaveToConsumerGroup, the lookup half: each identity (a member id,
        or an instance id with member id "" for an administrative removal) names a member of
        either protocol. One result per identity, echoing the request's ids, and the member ids
        to fence; nothing is removed yet."""
        results: list[tuple[str, str | None, ErrorCode]] = []
        leaving: set[str] = set()
        for member_id, instance_id in identities:
            try:
                if instance_id is None:
                    if member_id not in self.members:
                        raise KafkaError(ErrorCode.unknown_member_id,
                                         f"Member {member_id} is not a member of group {self.group_id}.")
                    found = member_id
                else:
                    existing_id = self.static_members.get(instance_id)
                    if existing_id is None or existing_id not in self.members:
                        raise KafkaError(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
                    if member_id and member_id != existing_id:
                        raise _fenced(member_id, instance_id, existing_id)
                    found = existing_id
            except KafkaError as exc:
                results.append((member_id, instance_id, exc.code))
                continue
            leaving.add(found)
            results.append((member_id, instance_id, ErrorCode.none))
        return results, leaving

    def classic_only_without(self, leaving: set[str]) -> bool:
        """Kafka's allMembersUseClassicProtocolExcept(members): every member that stays uses the
        classic protocol."""
        return all(m.classic is not None for m in self.members.values() if m.member_id not in leaving)

    def remove_members(self, leaving: set[str], topics: Mapping[str, TopicInfo], default_assignor: str,
                       now_ms: int = 0, interval_ms: int = 0) -> None:
        """Fence `leaving` with one epoch bump for them all (Kafka's consumerGroupFenceMembers)."""
        for member_id in sorted(leaving):
            self.remove_member(member_id)
        if leaving:
            self.refresh(topics, default_assignor, bump=True, now_ms=now_ms, interval_ms=interval_ms)

    # -- metadata and target assignment ----------------------------------------------------------

    def resolve_regexes(self, topics: Mapping[str, TopicInfo]) -> bool:
        """Re-resolve every subscribed regex against the topics; True if any resolution changed."""
        wanted = {m.subscribed_regex for m in self.members.values() if m.subscribed_regex is not None}
        resolved: dict[str, tuple[str, ...]] = {}
        for pattern in wanted:
            try:
                compiled = compile_regex(pattern)
            except KafkaError:
                resolved[pattern] = ()
                continue
            allowed = self.regex_topic_filter
            resolved[pattern] = tuple(sorted(n for n in topics if n not in INTERNAL_TOPICS and compiled.fullmatch(n)
                                             and (allowed is None or allowed(n))))
        changed = resolved != self.resolved
        self.resolved = resolved
        return changed

    def refresh(self, topics: Mapping[str, TopicInfo], default_assignor: str, *, bump: bool = False,
                now_ms: int = 0, interval_ms: int = 0) -> bool:
        """Bump the epoch (once) if asked or if regex resolutions or subscribed topics' metadata
        changed, and recompute the target assignment if it is behind the group epoch and the
        assignment interval allows (`next_assignment_ms`). True if anything moved."""
        before = (self.epoch, self.assignment_epoch)
        self.resolve_regexes(topics)
        signature = self._signature(topics)
        if signature != self.metadata_signature:
            self.metadata_signature = signature
            bump = True
        if bump:
            self.epoch += 1
        if not self.members:
            # Emptied: the (empty) target is current, and the next member's join computes at once,
            # as Kafka's fencing of the last members writes the assignment epoch with no timestamp.
            self.target = {}
            self.assignment_epoch = self.epoch
            self.assignment_time_ms = None
        elif self.assignment_pending():
            due = self.next_assignment_ms(interval_ms)
            if due is None or now_ms >= due:
                self.compute_target(topics, default_assignor, now_ms)
        return (self.epoch, self.assignment_epoch) != before

    def assignment_pending(self) -> bool:
        return self.epoch > self.assignment_epoch

    def next_assignment_ms(self, interval_ms: int) -> int | None:
        """When the pending target may be computed (None: at once), as Kafka's
        canComputeNextTargetAssignment: at once without a known previous computation or with a
        zero interval (its escape hatch for clock corrections), else once the interval has passed."""
        if self.assignment_time_ms is None or interval_ms == 0:
            return None
        return self.assignment_time_ms + interval_ms

    def compute_target(self, topics: Mapping[str, TopicInfo], default_assignor: str, now_ms: int) -> None:
        """The preferred assignor over every member at the group epoch, sticky to the previous
        target (not to what members hold, which lags behind it while the interval holds)."""
        subs = [MemberSubscription(m.member_id, m.instance_id, self.member_topics(m)) for m in self.members.values()]
        result = assign(self.preferred_assignor(default_assignor), subs, topics, self.target)
        self.target = {m: result.get(m, {}) for m in self.members}
        self.assignment_epoch = self.epoch
        self.assignment_time_ms = now_ms

    # -- timers ----------------------------------------------------------------------------------

    def expired(self, now_ms: int) -> list[tuple[str, str]]:
        """(member id, reason) of members whose session or revocation deadline passed."""
        out = []
        for m in self.members.values():
            if m.session_deadline_ms <= now_ms:
                out.append((m.member_id, "session timeout"))
            elif m.join_deadline_ms is not None and m.join_deadline_ms <= now_ms:
                out.append((m.member_id, "did not rejoin within the rebalance timeout"))
            elif m.sync_deadline_ms is not None and m.sync_deadline_ms <= now_ms:
                out.append((m.member_id, "did not sync within the rebalance timeout"))
            elif (m.revocation_deadline is not None and m.revocation_deadline[0] >= 0
                  and m.revocation_deadline[0] <= now_ms and m.current.epoch == m.revocation_deadline[1]
                  and m.current.state == UNREVOKED_PARTITIONS):
                out.append((m.member_id, "rebalance timeout"))
        return out


def _fenced(member_id: str, instance_id: str | None, owner_id: str) -> KafkaError:
    """FENCED_INSTANCE_ID: the static instance belongs to another member id now."""
    return KafkaError(ErrorCode.fenced_instance_id,
                      f"Static member {member_id} with instance id {instance_id} was fenced by member {owner_id}.")


def _check_epoch(member: ConsumerMember, hb: Heartbeat) -> None:
    """Kafka's throwIfConsumerGroupMemberEpochIsInvalid."""
    received, current = hb.member_epoch, member.epoch
    if received > current:
        raise KafkaError(ErrorCode.fenced_member_epoch,
                         f"The consumer group member has a greater member epoch ({received}) than the one known by "
                         f"the group coordinator ({current}). The member must abandon all its partitions and rejoin.")
    if received < current:
        subset = hb.owned is not None and all(
            p in member.current.assigned.get(tid, ()) for tid, parts in hb.owned for p in parts)
        if received != member.current.previous_epoch or not subset:
            raise KafkaError(ErrorCode.fenced_member_epoch,
                             f"The consumer group member has a smaller member epoch ({received}) than the one known "
                             f"by the group coordinator ({current}). The member must abandon all its partitions "
                             "and rejoin.")


def validate_heartbeat(hb: Heartbeat, version: int, group_id: str | None, assignors: tuple[str, ...]) -> None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid (4.x), in its order and words."""
    def not_empty(value: str | None, message: str) -> None:
        if value is not None and value.strip() == "":
            raise KafkaError(ErrorCode.invalid_request, message)

    if version >= 1 or hb.member_epoch > 0 or hb.member_epoch == LEAVE_EPOCH:
        not_empty(hb.member_id, "MemberId can't be empty.")
    not_empty(group_id, "GroupId can't be empty.")
    not_empty(hb.instance_id, "InstanceId can't be empty.")
    not_empty(hb.rack_id, "RackId can't be empty.")
    if hb.member_epoch == 0:
        if hb.rebalance_timeout_ms == -1:
            raise KafkaError(ErrorCode.invalid_request, "RebalanceTimeoutMs must be provided in first request.")
        if hb.owned is None or hb.owned:
            raise KafkaError(ErrorCode.invalid_request, "TopicPartitions must be empty when (re-)joining.")
        if hb.subscribed_names is None and hb.subscribed_regex is None:
            raise KafkaError(ErrorCode.invalid_request, "Either SubscribedTopicNames or SubscribedTopicRegex must be "
                             "non-null when (re-)joining.")
    elif hb.member_epoch == STATIC_LEAVE_EPOCH:
        if hb.instance_id is None:
            raise KafkaError(ErrorCode.invalid_request, "InstanceId can't be null.")
    elif hb.member_epoch < STATIC_LEAVE_EPOCH:
        raise KafkaError(ErrorCode.invalid_request, "MemberEpoch is invalid.")
    if hb.server_assignor is not None and hb.server_assignor not in assignors:
        raise KafkaError(ErrorCode.unsupported_assignor, f"ServerAssignor {hb.server_assignor} is not supported. "
                         f"Supported assignors: {', '.join(assignors)}.")
    if hb.subscribed_regex is not None and hb.subscribed_regex != "":
        compile_regex(hb.subscribed_regex)
