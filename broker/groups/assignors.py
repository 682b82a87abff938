"""Server-side assignors of consumer groups (KIP-848): `uniform` (Kafka's default) and `range`.
Pure functions from the members' subscriptions, the topic metadata and the previous target
assignment to the new target assignment.

`uniform` follows the contract of Kafka's UniformAssignor: every subscribed partition is assigned
to exactly one subscribed member, partition counts differ by at most one between members that can
take the same partitions, and as many partitions as balance allows stay where they were. Its exact
choice among equally good assignments may differ from Kafka's. `range` follows Kafka's
RangeAssignor: per topic, members sorted by instance id (static members) or member id take
consecutive ranges, the first ones one partition more."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from sharebroker.broker.groups.share_group import Assignment, TopicInfo

UNIFORM, RANGE = "uniform", "range"
ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": UNIFORM,
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": RANGE,
}


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    member_id: str
    instance_id: str | None
    topics: frozenset[str]  # resolved names (explicit names and regex matches)


Partition = tuple[uuid.UUID, int]


def assignor_name(configured: str) -> str:
    """`group.consumer.assignors` entries may be Kafka's class names or the short names."""
    return ASSIGNOR_CLASSES.get(configured, configured)


def assign(assignor: str, members: list[MemberSubscription], topics: Mapping[str, TopicInfo],
           previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
    if assignor == RANGE:
        return _range(members, topics)
    return _uniform(members, topics, previous)


def _freeze(owned: dict[str, set[Partition]]) -> dict[str, Assignment]:
    out: dict[str, Assignment] = {}
    for member_id, parts in owned.items():
        by_topic: dict[uuid.UUID, set[int]] = {}
        for tid, p in parts:
            by_topic.setdefault(tid, set()).add(p)
        out[member_id] = {tid: frozenset(ps) for tid, ps in by_topic.items()}
    return out


def _range(members: list[MemberSubscription], topics: Mapping[str, TopicInfo]) -> dict[str, Assignment]:
    owned: dict[str, set[Partition]] = {m.member_id: set() for m in members}
    for name in sorted({t for m in members for t in m.topics}):
        info = topics.get(name)
        if info is None:
            continue
        subscribers = sorted((m for m in members if name in m.topics),
                             key=lambda m: (m.instance_id is None, m.instance_id or m.member_id))
        quota, extra = divmod(info.partitions, len(subscribers))
        start = 0
        for i, m in enumerate(subscribers):
            count = quota + (1 if i < extra else 0)
            owned[m.member_id].update((info.topic_id, p) for p in range(start, start + count))
            start += count
    return _freeze(owned)


def _uniform(members: list[MemberSubscription], topics: Mapping[str, TopicInfo],
             previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
    ids = sorted(m.member_id for m in members)
    by_id = {m.member_id: m for m in members}
    name_of = {info.topic_id: name for name, info in topics.items()}
    # Which members may own each partition.
    partitions: list[Partition] = []
    eligible: dict[Partition, list[str]] = {}
    for name in sorted({t for m in members for t in m.topics}):
        info = topics.get(name)
        if info is None:
            continue
        subscribers = [i for i in ids if name in by_id[i].topics]
        for p in range(info.partitions):
            partitions.append((info.topic_id, p))
            eligible[(info.topic_id, p)] = subscribers
    owned: dict[str, set[Partition]] = {i: set() for i in ids}
    owner: dict[Partition, str] = {}
    # Stickiness: keep what each member had and may still own.
    for i in ids:
        for tid, parts in previous.get(i, {}).items():
            topic_name = name_of.get(tid)
            if topic_name is None or topic_name not in by_id[i].topics:
                continue
            for p in parts:
                key = (tid, p)
                if key in eligible and key not in owner:
                    owner[key] = i
                    owned[i].add(key)
    homogeneous = len({by_id[i].topics for i in ids}) <= 1
    if homogeneous and ids:
        # Quotas: floor(P/M) each, one more for P%M members, preferring those that hold more.
        quota, extra = divmod(len(partitions), len(ids))
        ranked = sorted(ids, key=lambda i: (-len(owned[i]), i))
        limit = {i: quota + (1 if n < extra else 0) for n, i in enumerate(ranked)}
        for i in ids:
            if len(owned[i]) > limit[i]:
                for key in sorted(owned[i])[limit[i]:]:
                    owned[i].discard(key)
                    del owner[key]
    # Unassigned partitions go to the eligible member that holds the fewest.
    for key in partitions:
        if key in owner:
            continue
        candidates = eligible[key]
        if not candidates:
            continue
        target = min(candidates, key=lambda i: (len(owned[i]), i))
        owner[key] = target
        owned[target].add(key)
    # Balance: move partitions from a member to an eligible one holding at least two fewer.
    moved = True
    while moved:
        moved = False
        for key in partitions:
            current = owner.get(key)
            if current is None:
                continue
            target = min(eligible[key], key=lambda i: (len(owned[i]), i))
            if len(owned[current]) - len(owned[target]) > 1:
                owned[current].discard(key)
                owned[target].add(key)
                owner[key] = target
                moved = True
    return _freeze(owned)
