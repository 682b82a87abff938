"""A KIP-848 consumer group survives a broker restart (graceful and SIGKILL): its epochs, members
and assignments are replayed from `__consumer_offsets`, its committed offsets too, and a member
that does not come back is fenced by the session timeout."""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Any

import pytest

from tests.integration import rawkafka as rk
from tests.integration.clients import create_topic
from sharebroker.testing import wait_for

FAST = {"group.consumer.min.session.timeout.ms": "1000", "group.consumer.session.timeout.ms": "2000",
        "group.consumer.min.heartbeat.interval.ms": "100", "group.consumer.heartbeat.interval.ms": "300"}


def hb(group: str, member: str, epoch: int, **kw: Any) -> Any:
    cls = rk.req_cls(68, 1)
    tp = rk._nested(cls, "topic_partitions")
    owned = kw.pop("owned", None)
    return cls(group_id=group, member_id=member, member_epoch=epoch, instance_id=None, rack_id=None,
               rebalance_timeout=datetime.timedelta(milliseconds=kw.pop("rebalance_ms", -1)),
               subscribed_topic_names=kw.pop("topics", None), subscribed_topic_regex=None, server_assignor=None,
               topic_partitions=None if owned is None else tuple(tp(topic_id=t, partitions=p) for t, p in owned))


def describe(raw: rk.RawClient, group: str) -> Any:
    return raw.request(rk.req_cls(69, 1)(group_ids=(group,), include_authorized_operations=False)).groups[0]


def restart(b: Any, kill: bool) -> None:
    """The broker killed (-9) and started again, or stopped cleanly and started again."""
    if kill:
        b.kill()
        b.start()
    else:
        b.restart()


@pytest.mark.parametrize("kill", [False, True])
def test_group_and_offsets_survive_restart(make_broker: Any, kill: bool) -> None:
    b = make_broker(FAST)
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"cg-{uuid.uuid4().hex[:8]}"
    create_topic(b.bootstrap, topic, partitions=2)
    with rk.RawClient(b.bootstrap) as raw:
        j = raw.request(hb(group, "m1", 0, topics=(topic,), rebalance_ms=5000, owned=()))
        assert j.error_code == 0
        owned = tuple((t.topic_id, tuple(t.partitions)) for t in j.assignment.topic_partitions)
        cls = rk.req_cls(8, 9)
        t_cls, p_cls = rk._nested(cls, "topics"), rk._nested(rk._nested(cls, "topics"), "partitions")
        commit = raw.request(cls(group_id=group, generation_id_or_member_epoch=j.member_epoch, member_id="m1",
                                 group_instance_id=None, topics=(t_cls(name=topic, partitions=(
                                     p_cls(partition_index=1, committed_offset=42, committed_leader_epoch=-1,
                                           committed_metadata="x"),)),)))
        assert commit.topics[0].partitions[0].error_code == 0
        before = describe(raw, group)
    restart(b, kill)
    with rk.RawClient(b.bootstrap) as raw:
        after = describe(raw, group)
        assert (after.group_epoch, after.assignment_epoch, after.group_state) == (
            before.group_epoch, before.assignment_epoch, before.group_state)
        assert [(m.member_id, m.member_epoch) for m in after.members] == [("m1", j.member_epoch)]
        again = raw.request(hb(group, "m1", j.member_epoch, owned=owned))
        assert (again.error_code, again.member_epoch) == (0, j.member_epoch)
        fcls = rk.req_cls(9, 9)
        g = rk._nested(fcls, "groups")
        fetched = raw.request(fcls(groups=(g(group_id=group, member_id="m1", member_epoch=j.member_epoch,
                                             topics=None),), require_stable=True))
        rows = {p.partition_index: p.committed_offset for t in fetched.groups[0].topics for p in t.partitions}
        assert rows == {1: 42}
        # Without heartbeats the member is fenced by its session timeout; the group stays, empty.
        wait_for(lambda: describe(raw, group).group_state == "Empty", 20, message="member fenced")


@pytest.mark.parametrize("kill", [False, True])
def test_the_assignment_interval_runs_on_across_a_restart(make_broker: Any, kill: bool) -> None:
    """As Kafka 4.3+, which keeps AssignmentTimestamp in the ConsumerGroupTargetAssignmentMetadata
    record: a target held back by consumer.assignment.interval.ms before a restart is still held
    after it, until the interval since the last computation has passed, and then computed by the
    coordinator without waiting for a heartbeat."""
    interval_ms = 12000
    b = make_broker({**FAST, "group.consumer.session.timeout.ms": "40000",
                     "group.consumer.assignment.interval.ms": str(interval_ms)})
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"cg-{uuid.uuid4().hex[:8]}"
    create_topic(b.bootstrap, topic, partitions=2)
    with rk.RawClient(b.bootstrap) as raw:
        sent_a = time.monotonic()
        a = raw.request(hb(group, "a", 0, topics=(topic,), rebalance_ms=5000, owned=()))
        assert (a.error_code, a.member_epoch) == (0, 1)
        bj = raw.request(hb(group, "b", 0, topics=(topic,), rebalance_ms=5000, owned=()))
        assert (bj.error_code, bj.member_epoch) == (0, 1)  # the interval holds epoch 2's target back
        d = describe(raw, group)
        assert (d.group_state, d.group_epoch, d.assignment_epoch) == ("Assigning", 2, 1), d
    restart(b, kill)
    with rk.RawClient(b.bootstrap) as raw:
        d = describe(raw, group)
        assert (d.group_state, d.group_epoch, d.assignment_epoch) == ("Assigning", 2, 1), d

        def computed() -> bool:
            g = describe(raw, group)
            return g.assignment_epoch == g.group_epoch == 2
        wait_for(computed, interval_ms / 1000 + 30, interval=0.1, message="the pending target after the interval")
        assert time.monotonic() - sent_a >= interval_ms / 1000
        targets = [{p for tp in m.target_assignment.topic_partitions for p in tp.partitions}
                   for m in describe(raw, group).members]
        assert sorted(map(sorted, targets)) == [[0], [1]]
