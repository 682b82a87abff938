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
from tests.unit.share_leader_support import NOW_WALL, ManualClock

TOPIC = uuid.UUID(int=7)


def replaying_coordinator(tmp_path) -> ShareGroupCoordinator:
    """Replay touches none of the coordinator's collaborators: it only rebuilds groups from records."""
    return ShareGroupCoordinator(BrokerConfig.load(None, {}, {}), tmp_path, clock=ManualClock(), topics=None,
                                 group_log=None, persister=None, groups=None)


@pytest.fixture
def coordinator(tmp_path) -> ShareGroupCoordinator:
    return replaying_coordinator(tmp_path)


def member(member_id: str) -> ShareMember:
    m = ShareMember(member_id)
    m.epoch, m.previous_epoch, m.subscribed, m.assignment = 3, 2, ("t",), {TOPIC: frozenset({0, 1})}
    return m


def live_records(group_id: str, members: list[str]) -> list[tuple[bytes, bytes | None]]:
    out = [grec.group_metadata(group_id, 3), grec.state_partitions(group_id, {TOPIC: {0, 1}}, {TOPIC: "t"}),
           grec.target_metadata(group_id, 3, NOW_WALL - 500)]
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
    assert len(tombstones) == 7
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


def test_the_target_metadata_record_restores_the_last_computation_time(coordinator):
    """AssignmentTimestamp (wall clock) comes back on this process's monotonic clock, as long ago
    as it was; a record without it (before Kafka 4.3, or an emptied group's 0) or its tombstone
    leaves no time, so the next target may be computed at once."""
    clock = coordinator.clock
    replay(coordinator, live_records("g", ["m1"]))
    assert coordinator.groups["g"].assignment_time_ms == clock.mono - 500
    replay(coordinator, [grec.target_metadata("g", 3, NOW_WALL + 60_000)])  # ahead of the wall clock: now
    assert coordinator.groups["g"].assignment_time_ms == clock.mono
    replay(coordinator, [grec.target_metadata("g", 4)])
    assert coordinator.groups["g"].assignment_time_ms is None
    replay(coordinator, [grec.target_metadata("g", 4, NOW_WALL - 500)])
    replay(coordinator, [r for r in grec.group_tombstones("g") if grec.decode(*r)[0] == grec.TARGET_METADATA])
    g = coordinator.groups["g"]
    assert g.assignment_time_ms is None and list(g.members) == ["m1"]


def test_a_record_without_the_assignment_timestamp_reads_as_unknown():
    """The value an older broker wrote (AssignmentEpoch, no tagged fields) still loads."""
    key, value = grec.target_metadata("g", 5)
    assert value == bytes([0, 0, 0, 0, 0, 5, 0])  # version 0, epoch 5, no tags
    assert grec.decode(key, value) == (grec.TARGET_METADATA, ["g"], {"assignment_epoch": 5, "assignment_timestamp_ms": 0})
