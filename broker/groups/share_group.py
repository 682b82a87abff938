"""A share group as a pure state machine: members, epochs, the SimpleAssignor, and which share
partitions are initialized. No I/O and no clock: callers pass `now_ms` and the topic metadata.

Kafka's rules (share-groups-spec §9): epoch 0 joins (or rejoins with the same member id), -1
leaves, other epochs must match the member's current epoch (or its previous one, for a lost
response); any membership, subscription or metadata change bumps the group epoch, and members take
the target assignment at their next heartbeat (share groups have no revocation phase). Only
initialized share partitions are assignable.

The target assignment is recomputed at most once per `share.assignment.interval.ms` (Kafka 4.3+):
until the interval since the last computation has passed, members are answered from the last
target, at its epoch."""

from __future__ import annotations

import math
import uuid
from collections import Counter
from collections.abc import Container
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode
from sharebroker.protocol.errors import KafkaError

EMPTY, STABLE, DEAD = "Empty", "Stable", "Dead"
MAX_MEMBER_ID_LENGTH = 36
_NEVER = 2**63


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """What the assignor needs to know of a subscribed topic."""
    name: str
    topic_id: uuid.UUID
    partitions: int


Assignment = dict[uuid.UUID, frozenset[int]]


@dataclass(slots=True)
class ShareMember:
    member_id: str
    epoch: int = 0
    previous_epoch: int = -1
    client_id: str = ""
    client_host: str = ""
    rack_id: str | None = None
    subscribed: tuple[str, ...] = ()
    assignment: Assignment = field(default_factory=dict)
    deadline_ms: int = 0


@dataclass(slots=True)
class HeartbeatResult:
    member_id: str
    member_epoch: int
    assignment: Assignment | None  # None = unchanged, not sent


def assign_partitions(members: list[str], partitions: list[int], previous: dict[str, set[int]]) -> dict[str, set[int]]:
    """Kafka's SimpleAssignor for one topic: balance first, stickiness second. When members
    outnumber partitions each partition is shared by ceil(M/P) members."""
    result: dict[str, set[int]] = {m: set() for m in members}
    m_count, p_count = len(members), len(partitions)
    if m_count == 0 or p_count == 0:
        return result
    sharing = math.ceil(m_count / p_count)
    per_member = sharing * p_count / m_count
    quota = {m: math.ceil(per_member * (i + 1)) - math.ceil(per_member * i) for i, m in enumerate(members)}
    valid = set(partitions)
    shared: Counter[int] = Counter()
    for m in members:  # keep what each member had, within its quota and the sharing bound
        for p in sorted(previous.get(m, ())):
            if p in valid and len(result[m]) < quota[m] and shared[p] < sharing:
                result[m].add(p)
                shared[p] += 1
    # One pass over the partitions, filling each to the sharing target from a single round-robin
    # over members with room; a partition is skipped only if no member can take it.
    cursor = 0
    for p in partitions:
        misses = 0
        while shared[p] < sharing and misses < m_count:
            m = members[cursor % m_count]
            cursor += 1
            if len(result[m]) < quota[m] and p not in result[m]:
                result[m].add(p)
                shared[p] += 1
                misses = 0
            else:
                misses += 1
    return result


class ShareGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.epoch = 0
        self.assignment_epoch = 0
        # When the target was last computed (monotonic ms; after a restart, from the AssignmentTimestamp
        # of the group's target-assignment metadata record), None before the first computation, once
        # the group is emptied, or unknown: the next one may run at once, as Kafka's
        # canComputeNextTargetAssignment.
        self.assignment_time_ms: int | None = None
        # Moves whenever what `refresh_metadata` and initialization look at may have changed (the
        # set of subscribed topics, the initialized partitions): with the topics' own version it
        # tells a heartbeat that nothing needs checking.
        self.topology_version = 0
        self.checked_topology: tuple[int, int] | None = None
        self.members: dict[str, ShareMember] = {}
        self.initialized: dict[uuid.UUID, set[int]] = {}
        self.target: dict[str, Assignment] = {}
        self.known_topics: dict[str, uuid.UUID] = {}  # topics this group has initialized, by name
        self._metadata_signature: tuple = ()
        # What the group's records must say again since they were last written, so that a
        # heartbeat that changes nothing writes nothing and one that changes a member writes
        # that member: the cost of a write never grows with the group.
        self.changed_members: set[str] = set()
        self.left_members: set[str] = set()
        self.initialized_changed = False
        self._subscriptions: Counter[str] = Counter()  # topic -> members subscribed to it
        self._earliest_deadline_ms = _NEVER  # no member's session ends before this (see expired_members)

    @property
    def state(self) -> str:
        return STABLE if self.members else EMPTY

    def subscribed_topic_names(self) -> set[str]:
        return set(self._subscriptions)

    def _subscribe(self, member: ShareMember, topics: tuple[str, ...]) -> None:
        before = len(self._subscriptions)
        new_topic = any(name not in self._subscriptions for name in topics)
        self._subscriptions.subtract(member.subscribed)
        self._subscriptions.update(topics)
        for name in member.subscribed:
            if self._subscriptions[name] <= 0:
                del self._subscriptions[name]
        member.subscribed = topics
        if new_topic or len(self._subscriptions) != before:
            self.topology_version += 1

    def has_changes(self) -> bool:
        return bool(self.changed_members or self.left_members or self.initialized_changed)

    def take_changes(self) -> tuple[set[str], set[str], bool]:
        """(changed members, left members, initialized changed) since the last call, cleared."""
        out = (self.changed_members, self.left_members, self.initialized_changed)
        self.changed_members, self.left_members, self.initialized_changed = set(), set(), False
        return out

    def give_back_changes(self, changed: set[str], left: set[str], initialized: bool) -> None:
        """Changes taken for a write that failed: written with the next one."""
        self.changed_members |= {m for m in changed if m in self.members}
        self.left_members |= {m for m in left if m not in self.members}
        self.initialized_changed |= initialized

    # -- membership -------------------------------------------------------------------------------

    def heartbeat(self, *, member_id: str, member_epoch: int, rack_id: str | None,
                  subscribed: tuple[str, ...] | None, client_id: str, client_host: str,
                  now_ms: int, session_timeout_ms: int, max_size: int) -> HeartbeatResult:
        """Validate and apply one heartbeat (join, beat, leave); the caller then calls
        `reconcile` with fresh topic metadata."""
        if member_epoch == -1:
            member = self.members.get(member_id)
            if member is None:
                raise KafkaError(ErrorCode.unknown_member_id,
                                 f"Member {member_id} is not a member of group {self.group_id}.")
            self.remove_member(member_id)
            return HeartbeatResult(member_id, -1, None)
        member = self.members.get(member_id)
        joining = member_epoch == 0
        if joining:
            if member is None:
                if len(self.members) >= max_size:
                    raise KafkaError(ErrorCode.group_max_size_reached,
                                     f"The share group {self.group_id} has reached its maximum capacity of {max_size} members.")
                member = ShareMember(member_id)
                self.members[member_id] = member
                self.changed_members.add(member_id)
                self.left_members.discard(member_id)
                self.epoch += 1
        else:
            if member is None:
                raise KafkaError(ErrorCode.unknown_member_id,
                                 f"Member {member_id} is not a member of group {self.group_id}.")
            if member_epoch != member.epoch and member_epoch != member.previous_epoch:
                raise KafkaError(ErrorCode.fenced_member_epoch,
                                 f"The share group member has an invalid epoch {member_epoch}; "
                                 f"its current epoch is {member.epoch}.")
        if (client_id, client_host) != (member.client_id, member.client_host) or (
                rack_id is not None and rack_id != member.rack_id):
            member.client_id = client_id
            member.client_host = client_host
            if rack_id is not None:
                member.rack_id = rack_id
            self.changed_members.add(member_id)
        if subscribed is not None and tuple(sorted(set(subscribed))) != member.subscribed:
            self._subscribe(member, tuple(sorted(set(subscribed))))
            self.changed_members.add(member_id)
            self.epoch += 1
        self.set_deadline(member, now_ms + session_timeout_ms)
        return HeartbeatResult(member_id, member.epoch, None)

    def remove_member(self, member_id: str) -> None:
        self.target.pop(member_id, None)
        member = self.members.pop(member_id, None)
        if member is not None:
            self._subscribe(member, ())
            self.changed_members.discard(member_id)
            self.left_members.add(member_id)
            self.epoch += 1
            if not self.members:  # as a new group, as Kafka: the next join is assigned at once
                self.assignment_epoch = self.epoch
                self.assignment_time_ms = None

    def expired_members(self, now_ms: int) -> list[str]:
        """Members whose session deadline has passed. Heartbeats only move deadlines later, so
        until the earliest deadline seen at the last scan comes, no member can have expired and
        the ten-a-second sweep costs nothing per member."""
        if now_ms < self._earliest_deadline_ms:
            return []
        # the earliest of all, expired ones included: until the caller removes them they are due
        self._earliest_deadline_ms = min((m.deadline_ms for m in self.members.values()), default=_NEVER)
        return [m.member_id for m in self.members.values() if m.deadline_ms <= now_ms]

    def set_deadline(self, member: ShareMember, deadline_ms: int) -> None:
        member.deadline_ms = deadline_ms
        if deadline_ms < self._earliest_deadline_ms:
            self._earliest_deadline_ms = deadline_ms

    # -- share-partition initialization and assignment -------------------------------------------

    def partitions_to_initialize(self, topics: dict[str, TopicInfo]) -> list[tuple[TopicInfo, int, int]]:
        """(topic, partition, start offset) for every subscribed partition not yet initialized:
        -1 (share.auto.offset.reset decides) for a topic new to the group, 0 for new partitions of
        a topic the group already knows, so nothing produced to them is skipped."""
        todo = []
        for name in sorted(self.subscribed_topic_names()):
            info = topics.get(name)
            if info is None:
                continue
            done = self.initialized.get(info.topic_id, set())
            known = self.known_topics.get(name) == info.topic_id
            for p in range(info.partitions):
                if p not in done:
                    todo.append((info, p, 0 if known else -1))
        return todo

    def mark_initialized(self, info: TopicInfo, partitions: list[int]) -> None:
        if not partitions:
            return
        self.initialized.setdefault(info.topic_id, set()).update(partitions)
        self.known_topics[info.name] = info.topic_id
        self.initialized_changed = True
        self.topology_version += 1
        self.epoch += 1

    def forget_topic(self, topic_id: uuid.UUID) -> bool:
        """A deleted topic leaves the group's initialized state; True if it was there."""
        found = self.initialized.pop(topic_id, None) is not None
        for name, tid in list(self.known_topics.items()):
            if tid == topic_id:
                del self.known_topics[name]
                found = True
        if found:
            self.initialized_changed = True
            self.topology_version += 1
            self.epoch += 1
        return found

    def metadata_signature(self, topics: dict[str, TopicInfo]) -> tuple:
        return tuple(sorted((n, str(topics[n].topic_id), topics[n].partitions)
                            for n in self.subscribed_topic_names() if n in topics))

    def restore(self, topics: dict[str, TopicInfo]) -> None:
        """After replaying persisted records (which set members' fields and the time of the last
        target computation directly): members keep their assignments as the target, and nothing
        is waiting to be written. The assignment interval runs on from the replayed time."""
        self._subscriptions = Counter(t for m in self.members.values() for t in m.subscribed)
        self.assignment_epoch = max((m.epoch for m in self.members.values()), default=self.epoch)
        self.target = {m.member_id: dict(m.assignment) for m in self.members.values()}
        self._metadata_signature = self.metadata_signature(topics)
        self.topology_version += 1
        self.take_changes()

    def refresh_metadata(self, topics: dict[str, TopicInfo]) -> None:
        """Bump the epoch if the subscribed topics' metadata changed."""
        signature = self.metadata_signature(topics)
        if signature != self._metadata_signature:
            self._metadata_signature = signature
            self.epoch += 1

    def assignment_pending(self) -> bool:
        return self.assignment_epoch < self.epoch

    def next_assignment_ms(self, interval_ms: int) -> int | None:
        """When the pending target may be computed (None: now), as Kafka's
        canComputeNextTargetAssignment: at once without a previous computation or with a zero
        interval (its escape hatch for clock corrections), else once the interval has passed."""
        if self.assignment_time_ms is None or interval_ms == 0:
            return None
        return self.assignment_time_ms + interval_ms

    def reconcile(self, topics: dict[str, TopicInfo], now_ms: int = 0, interval_ms: int = 0) -> bool:
        """Bump the epoch if subscribed topics' metadata changed, then recompute the target
        assignment if it is behind the group epoch and the interval allows; True if it was."""
        self.refresh_metadata(topics)
        if not self.assignment_pending():
            return False
        due = self.next_assignment_ms(interval_ms)
        if due is not None and now_ms < due:
            return False
        self.compute_target(topics, now_ms)
        return True

    def compute_target(self, topics: dict[str, TopicInfo], now_ms: int) -> None:
        """The SimpleAssignor over every member, at the group epoch. Members move onto it at their
        own next heartbeat (`advance_member`)."""
        # Sticky to the previous target, as Kafka's TargetAssignmentBuilder: with an interval,
        # members that have not heartbeated since still hold older assignments, which can overlap.
        # (A member not in it, after a restart that restored no target, keeps what it holds.)
        previous = {m.member_id: self.target.get(m.member_id, m.assignment) for m in self.members.values()}
        target: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in self.members}
        for name in sorted(self.subscribed_topic_names()):
            info = topics.get(name)
            if info is None:
                continue
            assignable = sorted(p for p in self.initialized.get(info.topic_id, ()) if p < info.partitions)
            subscribers = [m.member_id for m in self.members.values() if name in m.subscribed]
            prev = {m: set(previous[m].get(info.topic_id, ())) for m in subscribers}
            for m, parts in assign_partitions(subscribers, assignable, prev).items():
                if parts:
                    target[m][info.topic_id] = parts
        self.assignment_epoch = self.epoch
        self.assignment_time_ms = now_ms
        self.target = {m: {tid: frozenset(ps) for tid, ps in parts.items()} for m, parts in target.items()}

    def advance_member(self, member_id: str, subscribed_ids: set[uuid.UUID] | None = None,
                       existing: Container[uuid.UUID] | None = None) -> None:
        """Move a member onto the target assignment; only its own heartbeat does this, so the
        epoch it last saw stays valid until it has been told the new one. `subscribed_ids`, given
        when its subscription just changed, keeps only partitions of topics it still subscribes
        to, and `existing` (the topic ids that exist) drops those of deleted topics, as Kafka's
        assignment builder filters against the current metadata before the next target."""
        member = self.members[member_id]
        if member.epoch != self.assignment_epoch:
            member.previous_epoch = member.epoch
            member.epoch = self.assignment_epoch
            member.assignment = self.target.get(member_id, {})
            self.changed_members.add(member_id)
        if subscribed_ids is not None and any(tid not in subscribed_ids for tid in member.assignment):
            member.assignment = {tid: ps for tid, ps in member.assignment.items() if tid in subscribed_ids}
            self.changed_members.add(member_id)
        if existing is not None and any(tid not in existing for tid in member.assignment):
            member.assignment = {tid: ps for tid, ps in member.assignment.items() if tid in existing}
            self.changed_members.add(member_id)


def validate_heartbeat(group_id: str | None, member_id: str | None, member_epoch: int, rack_id: str | None,
                       subscribed: tuple[str, ...] | None) -> None:
    """Request validation in Kafka's order (§9.1), raising INVALID_REQUEST with its messages."""
    if member_id is None or member_id == "" or len(member_id) > MAX_MEMBER_ID_LENGTH:
        if member_id == "":
            raise KafkaError(ErrorCode.invalid_request, "MemberId can't be empty.")
        raise KafkaError(ErrorCode.invalid_request, "Invalid member id in the request.")
    if group_id is None or group_id == "":
        raise KafkaError(ErrorCode.invalid_request, "GroupId can't be empty.")
    if rack_id is not None and rack_id == "":
        raise KafkaError(ErrorCode.invalid_request, "RackId can't be empty.")
    if member_epoch == 0 and not subscribed:
        raise KafkaError(ErrorCode.invalid_request, "SubscribedTopicNames must be set in first request.")
    if member_epoch < -1:
        raise KafkaError(ErrorCode.invalid_request, "MemberEpoch is invalid.")
