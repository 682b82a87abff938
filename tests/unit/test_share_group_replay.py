"""Replaying share-group records from `__consumer_offsets` (ShareGroupCoordinator._replay): records
with a value create their group, tombstones only remove, and the tombstones of a deleted group never
bring it back, whatever order they come in (Kafka ignores a tombstone whose group is gone)."""

from __future__ import annotations

import uuid
from itertools import permutations

import pytest

from sharebroker.broker.groups import records as grec
from sharebroker.broker.groups.coordinator import ShareGroupCoordinator
from sharebroker.broker.groups.share_group import ShareMember
from sharebroker.config import BrokerConfig

TOPIC = uuid.UUID(int=7)


def replaying_coordinator(tmp_path) -> ShareGroupCoordinator:
    """Replay touches none of the coordinator's collaborators: it only rebuilds groups from records."""
    return ShareGroupCoordinator(BrokerConfig.load(None, {}, {}), tmp_path, clock=None, topics=None, group_log=None,
                                 persister=None, groups=None)


@pytest.fixture
def coordinator(tmp_path) -> ShareGroupCoordinator:
    return replaying_coordinator(tmp_path)


def member(member_id: str) -> ShareMember:
    m = ShareMember(member_id)
    m.epoch, m.previous_epoch, m.subscribed, m.assignment = 3, 2, ("t",), {TOPIC: frozenset({0, 1})}
    return m


def live_records(group_id: str, members: list[str]) -> list[tuple[bytes, bytes | None]]:
    out = [grec.group_metadata(group_id, 3), grec.state_partitions(group_id, {TOPIC: {0, 1}}, {TOPIC: "t"})]
    for m in members:
        out += [grec.member_metadata(group_id, member(m)), grec.member_assignment(group_id, member(m))]
    return out


def deletion_tombstones(group_id: str, members: list[str]) -> list[tuple[bytes, None]]:
    out: list[tuple[bytes, None]] = []
    for m in members:
        out += grec.member_tombstones(group_id, m)
    return out + grec.group_tombstones(group_id)


def replay(c: ShareGroupCoordinator, records: list[tuple[bytes, bytes | None]]) -> None:
    for key, value in records:
        c._replay(key, value)


def test_live_records_rebuild_the_group(coordinator):
    replay(coordinator, live_records("g", ["m1", "m2"]))
    g = coordinator.groups["g"]
    assert g.epoch == 3 and g.initialized == {TOPIC: {0, 1}} and g.known_topics == {"t": TOPIC}
    assert sorted(g.members) == ["m1", "m2"] and g.members["m1"].assignment == {TOPIC: frozenset({0, 1})}


def test_a_deleted_group_stays_deleted_whatever_the_tombstone_order(tmp_path):
    tombstones = deletion_tombstones("g", ["m1", "m2"])
    assert len(tombstones) == 6
    for order in permutations(tombstones):
        c = replaying_coordinator(tmp_path)
        replay(c, live_records("g", ["m1", "m2"]) + list(order))
        assert c.groups == {}, [grec.decode(*r)[0] for r in order]


def test_tombstones_of_an_unknown_group_create_nothing(coordinator):
    replay(coordinator, deletion_tombstones("never", ["m1"]))
    assert coordinator.groups == {}


def test_a_group_created_again_after_its_deletion_is_kept(coordinator):
    replay(coordinator, live_records("g", ["m1"]) + deletion_tombstones("g", ["m1"]) + live_records("g", []))
    assert list(coordinator.groups) == ["g"] and coordinator.groups["g"].members == {}


def test_member_and_state_tombstones_of_a_live_group_remove_only_those(coordinator):
    state_tombstone = [r for r in grec.group_tombstones("g") if grec.decode(*r)[0] == grec.STATE_PARTITIONS]
    replay(coordinator, live_records("g", ["m1", "m2"]) + grec.member_tombstones("g", "m1") + state_tombstone)
    g = coordinator.groups["g"]
    assert list(g.members) == ["m2"] and g.initialized == {} and g.known_topics == {} and g.epoch == 3
