"""Share-group administration over the wire: DescribeShareGroupOffsets (90), AlterShareGroupOffsets
(91), DeleteShareGroupOffsets (92) and DeleteGroups (42), with real ShareConsumers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import AcknowledgeType

from tests.integration.clients import create_topic
from tests.integration.rawkafka import RawClient, req_cls
from tests.integration.share_helpers import (
    FAST_SHARE_BROKER, list_groups, new_group, poll_until, produce_values, set_earliest, share_consumer,
)
from tests.brokers import module_broker
from sharebroker.testing.plugin import Broker
from sharebroker.testing import wait_for

NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_GROUP_ID, NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND = 0, 3, 24, 68, 69


@pytest.fixture(scope="module")
def abroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from module_broker(tmp_path_factory, "share-admin", FAST_SHARE_BROKER)


def _request(bootstrap: str, req):
    with RawClient(bootstrap) as raw:
        return raw.request(req)


def describe_offsets(bootstrap: str, group: str, topics=None):
    cls = req_cls(90, 1)
    mod = __import__(cls.__module__, fromlist=["x"])
    tlist = None if topics is None else tuple(
        mod.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=tuple(ps)) for t, ps in topics)
    req = cls(groups=(mod.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=tlist),))
    (g,) = _request(bootstrap, req).groups
    return g


def alter_offsets(bootstrap: str, group: str, topic: str, offsets: dict[int, int]):
    cls = req_cls(91, 0)
    mod = __import__(cls.__module__, fromlist=["x"])
    parts = tuple(mod.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=o) for p, o in offsets.items())
    req = cls(group_id=group, topics=(mod.AlterShareGroupOffsetsRequestTopic(topic_name=topic, partitions=parts),))
    return _request(bootstrap, req)


def delete_offsets(bootstrap: str, group: str, topics: list[str]):
    cls = req_cls(92, 0)
    mod = __import__(cls.__module__, fromlist=["x"])
    req = cls(group_id=group, topics=tuple(mod.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics))
    return _request(bootstrap, req)


def delete_groups(bootstrap: str, groups: list[str]):
    return {r.group_id: int(r.error_code) for r in _request(bootstrap, req_cls(42, 2)(groups_names=tuple(groups))).results}


def _offsets(g) -> dict[int, tuple[int, int]]:
    (t,) = g.topics
    return {p.partition_index: (p.start_offset, p.lag) for p in t.partitions}


def test_describe_offsets_start_offset_and_lag_follow_acknowledgements(abroker, topic_name):
    create_topic(abroker.bootstrap, topic_name)
    group = new_group()
    set_earliest(abroker.bootstrap, group)
    produce_values(abroker.bootstrap, topic_name, [f"r{i}".encode() for i in range(20)], partition=0)
    c = share_consumer(abroker.bootstrap, group, [topic_name], explicit=True)
    try:
        got = poll_until(c, lambda ms: len(ms) >= 20)
        for m in got:  # accept the first 5, release the rest
            c.acknowledge(m, AcknowledgeType.ACCEPT if m.offset() < 5 else AcknowledgeType.RELEASE)
        c.commit_sync()
        g = wait_for(lambda: (lambda d: d if _offsets(d).get(0, (-1, -1))[0] >= 0 else None)(
            describe_offsets(abroker.bootstrap, group)), 10, message="persisted start offset")
        assert int(g.error_code) == NONE
        # As in Kafka 4.2 the acknowledgement's write carries the start offset it moves to (5),
        # and the 15 released records remain to be received
        assert _offsets(g)[0] == (5, 15)
        # an explicit, unknown topic is listed without offsets and without an error
        g2 = describe_offsets(abroker.bootstrap, group, [("no-such-topic", [0])])
        (t,) = g2.topics
        assert t.topic_id is None and [(p.start_offset, int(p.error_code)) for p in t.partitions] == [(-1, NONE)]
    finally:
        c.close()


def test_alter_offsets_needs_an_empty_group_and_rewinds_it(abroker, topic_name):
    create_topic(abroker.bootstrap, topic_name)
    group = new_group()
    set_earliest(abroker.bootstrap, group)
    produce_values(abroker.bootstrap, topic_name, [f"a{i}".encode() for i in range(10)], partition=0)
    c = share_consumer(abroker.bootstrap, group, [topic_name])
    try:
        poll_until(c, lambda ms: len(ms) >= 10)
        poll_until(c, lambda ms: True)  # implicit acks go out with this poll
        # with a member present the reset is refused
        assert int(alter_offsets(abroker.bootstrap, group, topic_name, {0: 0}).error_code) == NON_EMPTY_GROUP
    finally:
        c.close()
    wait_for(lambda: not [g for g in list_groups(abroker.bootstrap) if g.group_id == group and g.group_state != "Empty"],
             10, message="group empty after close")
    resp = alter_offsets(abroker.bootstrap, group, topic_name, {0: 0, 7: 0})
    assert int(resp.error_code) == NONE
    (t,) = resp.responses
    assert {p.partition_index: int(p.error_code) for p in t.partitions} == {0: NONE, 7: UNKNOWN_TOPIC_OR_PARTITION}
    assert _offsets(describe_offsets(abroker.bootstrap, group))[0][0] == 0
    c2 = share_consumer(abroker.bootstrap, group, [topic_name])
    try:
        again = poll_until(c2, lambda ms: len(ms) >= 10)
        assert sorted(m.offset() for m in again) == list(range(10))
        assert all(m.delivery_count() == 1 for m in again)  # in-flight state was discarded
    finally:
        c2.close()
    assert int(alter_offsets(abroker.bootstrap, "", topic_name, {0: 0}).error_code) == INVALID_GROUP_ID


def test_delete_offsets_then_delete_group(abroker, topic_name):
    create_topic(abroker.bootstrap, topic_name)
    group = new_group()
    set_earliest(abroker.bootstrap, group)
    produce_values(abroker.bootstrap, topic_name, [b"x"], partition=0)
    c = share_consumer(abroker.bootstrap, group, [topic_name])
    try:
        poll_until(c, lambda ms: len(ms) >= 1)
        assert int(delete_offsets(abroker.bootstrap, group, [topic_name]).error_code) == NON_EMPTY_GROUP
        assert delete_groups(abroker.bootstrap, [group]) == {group: NON_EMPTY_GROUP}
    finally:
        c.close()
    wait_for(lambda: not [g for g in list_groups(abroker.bootstrap) if g.group_id == group and g.group_state != "Empty"],
             10, message="group empty after close")
    resp = delete_offsets(abroker.bootstrap, group, [topic_name, "no-such-topic"])
    assert int(resp.error_code) == NONE
    assert {r.topic_name: int(r.error_code) for r in resp.responses} == {topic_name: NONE,
                                                                        "no-such-topic": UNKNOWN_TOPIC_OR_PARTITION}
    assert describe_offsets(abroker.bootstrap, group).topics == ()
    resp = delete_offsets(abroker.bootstrap, group, [topic_name])  # nothing left to delete
    assert {r.topic_name: int(r.error_code) for r in resp.responses} == {topic_name: UNKNOWN_TOPIC_OR_PARTITION}
    assert delete_groups(abroker.bootstrap, [group, "never-seen"]) == {group: NONE, "never-seen": GROUP_ID_NOT_FOUND}
    assert group not in {g.group_id for g in list_groups(abroker.bootstrap)}
    assert int(delete_offsets(abroker.bootstrap, group, [topic_name]).error_code) == GROUP_ID_NOT_FOUND
