"""What the share-group coordinator writes to `__consumer_offsets` (ShareGroupCoordinator.persist):
only what changed since its last write, so that a steady heartbeat writes nothing and a member's
change writes that member, whatever the group's size; a failed write is written again with the
next one; replaying what was written rebuilds the group."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

import pytest

from sharebroker.broker.groups import records as grec
from sharebroker.broker.groups.coordinator import ShareGroupCoordinator
from sharebroker.broker.groups.share_group import ShareGroup, TopicInfo
from sharebroker.config import BrokerConfig
from tests.unit.share_leader_support import NOW_WALL, ManualClock

TOPIC = TopicInfo("t", uuid.UUID(int=7), 4)


@dataclass
class RecordingLog:
    """The group log's append, recorded; `fail` makes the next append raise as a full disk does."""
    appended: list[list[tuple[bytes, bytes | None]]] = field(default_factory=list)
    fail: bool = False

    async def append(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> None:
        if self.fail:
            self.fail = False
            raise OSError(28, "No space left on device")
        self.appended.append(list(records))


@dataclass
class OneTopic:
    """The coordinator's view of the topics: the one topic, by id."""
    by_name: dict = field(default_factory=lambda: {"t": TOPIC})

    def get_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return TOPIC if topic_id == TOPIC.topic_id else None


def kinds(records: list[tuple[bytes, bytes | None]]) -> list[tuple[str, str | None, bool]]:
    """(record type, member id, tombstone) of each record."""
    names = {grec.GROUP_METADATA: "group", grec.STATE_PARTITIONS: "state", grec.MEMBER_METADATA: "member",
             grec.MEMBER_ASSIGNMENT: "assignment", grec.TARGET_METADATA: "target"}
    out = []
    for key, value in records:
        record_type, strings, _ = grec.decode(key, value)
        out.append((names[record_type], strings[1] if len(strings) > 1 else None, value is None))
    return out


@pytest.fixture
def setup(tmp_path) -> tuple[ShareGroupCoordinator, RecordingLog, ShareGroup]:
    log = RecordingLog()
    c = ShareGroupCoordinator(BrokerConfig.load(None, {}, {}), tmp_path, clock=ManualClock(), topics=OneTopic(),
                              group_log=log, persister=None, groups=None)
    g = c.groups["g"] = ShareGroup("g")
    return c, log, g


def beat(g: ShareGroup, member: str, epoch: int) -> None:
    g.heartbeat(member_id=member, member_epoch=epoch, rack_id=None, subscribed=("t",) if epoch == 0 else None,
                client_id="c", client_host="/127.0.0.1", now_ms=0, session_timeout_ms=45000, max_size=1000)
    g.reconcile({"t": TOPIC})
    g.advance_member(member)


def written(c: ShareGroupCoordinator, log: RecordingLog, g: ShareGroup) -> list[tuple[str, str | None, bool]]:
    before = len(log.appended)
    asyncio.run(c.persist(g))
    return kinds(log.appended[-1]) if len(log.appended) > before else []


def test_only_what_changed_is_written(setup) -> None:
    c, log, g = setup
    beat(g, "m1", 0)
    assert written(c, log, g) == [("group", None, False), ("target", None, False), ("member", "m1", False),
                                  ("assignment", "m1", False)]
    beat(g, "m1", g.members["m1"].epoch)
    assert written(c, log, g) == []  # a steady heartbeat writes nothing
    g.mark_initialized(TOPIC, [0, 1, 2, 3])
    beat(g, "m2", 0)
    assert written(c, log, g) == [("group", None, False), ("state", None, False), ("target", None, False),
                                  ("member", "m2", False),
                                  ("assignment", "m2", False)]  # m1 is behind, but unchanged until it beats
    beat(g, "m1", g.members["m1"].epoch)
    assert written(c, log, g) == [("member", "m1", False), ("assignment", "m1", False)]
    g.remove_member("m2")
    g.reconcile({"t": TOPIC})
    assert written(c, log, g) == [("group", None, False), ("target", None, False), ("member", "m2", True),
                                  ("assignment", "m2", True)]


def test_a_member_that_joined_and_left_between_writes_leaves_no_tombstone(setup) -> None:
    c, log, g = setup
    beat(g, "m1", 0)
    written(c, log, g)
    beat(g, "m2", 0)
    g.remove_member("m2")
    assert written(c, log, g) == [("group", None, False), ("target", None, False)]  # computed for m2's join


def test_a_failed_write_is_written_with_the_next(setup) -> None:
    c, log, g = setup
    beat(g, "m1", 0)
    log.fail = True
    with pytest.raises(OSError):
        asyncio.run(c.persist(g))
    beat(g, "m1", g.members["m1"].epoch)
    assert written(c, log, g) == [("group", None, False), ("target", None, False), ("member", "m1", False),
                                  ("assignment", "m1", False)]


def test_replaying_the_writes_rebuilds_the_group(setup, tmp_path) -> None:
    c, log, g = setup
    g.mark_initialized(TOPIC, [0, 1, 2, 3])
    for m in ("m1", "m2", "m3"):
        beat(g, m, 0)
        written(c, log, g)
    for m in ("m1", "m2", "m3"):
        beat(g, m, g.members[m].epoch)
        written(c, log, g)
    g.remove_member("m2")
    g.reconcile({"t": TOPIC})
    written(c, log, g)
    beat(g, "m1", g.members["m1"].epoch)
    written(c, log, g)
    fresh = ShareGroupCoordinator(BrokerConfig.load(None, {}, {}), tmp_path, clock=ManualClock(), topics=OneTopic(),
                                  group_log=None, persister=None, groups=None)
    for batch in log.appended:
        for key, value in batch:
            fresh._replay(key, value)
    again = fresh.groups["g"]
    assert again.epoch == g.epoch and again.initialized == g.initialized
    assert {m: (x.epoch, x.previous_epoch, x.assignment, x.subscribed) for m, x in again.members.items()} == \
        {m: (x.epoch, x.previous_epoch, x.assignment, x.subscribed) for m, x in g.members.items()}
    again.restore({"t": TOPIC})
    assert again.subscribed_topic_names() == {"t"} and again.take_changes() == (set(), set(), False)


def test_the_target_record_says_when_the_target_was_computed(setup) -> None:
    """AssignmentTimestamp is the wall-clock time of the computation (as Kafka 4.3+), read back on
    this process's monotonic clock; an emptied group writes 0, as a new group has no computation."""
    c, log, g = setup
    clock = c.clock
    g.heartbeat(member_id="m1", member_epoch=0, rack_id=None, subscribed=("t",), client_id="c",
                client_host="/127.0.0.1", now_ms=clock.mono, session_timeout_ms=45000, max_size=1000)
    g.reconcile({"t": TOPIC}, now_ms=clock.mono - 250, interval_ms=1000)  # computed 250 ms ago
    written(c, log, g)
    (target,) = [r for r in log.appended[-1] if grec.decode(*r)[0] == grec.TARGET_METADATA]
    assert grec.decode(*target)[2] == {"assignment_epoch": g.assignment_epoch, "assignment_timestamp_ms": NOW_WALL - 250}
    g.remove_member("m1")
    assert written(c, log, g) == [("group", None, False), ("target", None, False), ("member", "m1", True),
                                  ("assignment", "m1", True)]
    (target,) = [r for r in log.appended[-1] if grec.decode(*r)[0] == grec.TARGET_METADATA]
    assert grec.decode(*target)[2] == {"assignment_epoch": g.epoch, "assignment_timestamp_ms": 0}
