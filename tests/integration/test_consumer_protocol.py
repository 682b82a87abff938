"""KIP-848 consumer groups (`group.protocol=consumer`) end to end: confluent-kafka consumers sharing
a group through ConsumerGroupHeartbeat (disjoint assignments covering every partition, rebalances on
join, leave and session timeout, revocation before reassignment, commits validated by member
epoch), static membership, regex subscriptions, the admin views (ConsumerGroupDescribe, ListGroups,
DeleteGroups) and Kafka's error codes over raw kio frames."""

from __future__ import annotations

import datetime
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition  # noqa: F401

from tests.brokers import module_broker
from tests.integration import rawkafka as rk
from tests.integration.clients import admin, consumer_conf, create_topic, produce_sync, producer_conf
from sharebroker.testing import wait_for
from sharebroker.testing.plugin import Broker

TIMEOUT = 30.0
FAST = {"group.consumer.min.session.timeout.ms": "1000", "group.consumer.session.timeout.ms": "3000",
        "group.consumer.min.heartbeat.interval.ms": "100", "group.consumer.heartbeat.interval.ms": "300",
        "group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}

NONE = 0
UNKNOWN_MEMBER_ID = 25
INVALID_REQUEST = 42
GROUP_ID_NOT_FOUND = 69
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82
FENCED_MEMBER_EPOCH = 110
UNRELEASED_INSTANCE_ID = 111
UNSUPPORTED_ASSIGNOR = 112
STALE_MEMBER_EPOCH = 113
INVALID_REGULAR_EXPRESSION = 128
NON_EMPTY_GROUP = 68
UNSUPPORTED_VERSION = 35


@pytest.fixture(scope="module")
def cbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from module_broker(tmp_path_factory, "consumer-protocol", FAST)


def new_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class Member:
    """A confluent-kafka consumer of the consumer protocol, polled in its own thread; it commits
    each record synchronously after taking it, so a revoked partition is always committed, and
    counts a record in `records` only once its commit succeeded (a refused one is taken again)."""

    def __init__(self, bootstrap: str, group: str, topics: list[str], **extra: Any) -> None:
        conf = consumer_conf(bootstrap, **{"group.id": group, "group.protocol": "consumer", **extra})
        conf.pop("session.timeout.ms", None)  # a broker setting under the consumer protocol
        self.consumer = Consumer(conf)
        self.consumer.subscribe(topics)
        self.records: list[tuple[str, int, int, bytes]] = []
        self.taken: list[tuple[str, int, int]] = []  # every record poll returned, committed or not
        self._owned: set[tuple[str, int]] = set()
        self.errors: list[Any] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self.consumer.poll(0.05)
            owned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
            with self._lock:
                self._owned = owned
            if msg is None:
                continue
            if msg.error():
                self.errors.append(msg.error())
                continue
            with self._lock:
                self.taken.append((msg.topic(), msg.partition(), msg.offset()))
            try:
                self.consumer.commit(message=msg, asynchronous=False)
            except KafkaException as exc:
                # Refused: a rebalance moved the generation or member epoch on while the commit was
                # under way. The record counts only once a commit of it succeeds, so take it again
                # from here: a cooperative or KIP-848 rebalance may well have left the partition
                # with this member, whose position is past the record already. If the partition
                # went to another member, the seek fails and that member reads it from the
                # committed offset.
                self.errors.append(exc)
                self._take_again(msg)
                continue
            with self._lock:
                self.records.append((msg.topic(), msg.partition(), msg.offset(), msg.value()))

    def _take_again(self, msg: Any) -> None:
        try:
            self.consumer.seek(TopicPartition(msg.topic(), msg.partition(), msg.offset()))
        except KafkaException:
            pass  # no longer assigned to this member

    def assignment(self) -> set[tuple[str, int]]:
        with self._lock:
            return set(self._owned)

    def stop(self, *, close: bool = True) -> None:
        self._stop.set()
        self.thread.join(10)
        if close:
            self.consumer.close()


def test_members_split_partitions_and_rebalance_on_join_and_leave(cbroker: Broker) -> None:
    topic, group = new_name("t"), new_name("cg")
    create_topic(cbroker.bootstrap, topic, partitions=6)
    a = Member(cbroker.bootstrap, group, [topic])
    try:
        wait_for(lambda: len(a.assignment()) == 6, TIMEOUT, message="first member owns every partition")
        b = Member(cbroker.bootstrap, group, [topic])
        try:
            def split() -> bool:
                sa, sb = a.assignment(), b.assignment()
                return len(sa) == 3 and len(sb) == 3 and not sa & sb
            wait_for(split, TIMEOUT, message="two members own disjoint halves")
        finally:
            b.stop()
        wait_for(lambda: len(a.assignment()) == 6, TIMEOUT, message="the remaining member owns every partition again")
    finally:
        a.stop()


# ---------------------------------------------------------------------------------------------
# Raw ConsumerGroupHeartbeat frames


def hb_request(group: str, member: str, epoch: int, *, topics: tuple[str, ...] | None = None,
               regex: str | None = None, instance: str | None = None, rebalance_ms: int = -1,
               owned: tuple[tuple[uuid.UUID, tuple[int, ...]], ...] | None = None, assignor: str | None = None,
               version: int = 1) -> Any:
    cls = rk.req_cls(68, version)
    tp = rk._nested(cls, "topic_partitions")
    fields: dict[str, Any] = dict(
        group_id=group, member_id=member, member_epoch=epoch, instance_id=instance, rack_id=None,
        rebalance_timeout=datetime.timedelta(milliseconds=rebalance_ms), subscribed_topic_names=topics, server_assignor=assignor,
        topic_partitions=None if owned is None else tuple(tp(topic_id=t, partitions=ps) for t, ps in owned))
    if version >= 1:
        fields["subscribed_topic_regex"] = regex
    return cls(**fields)


def join(raw: rk.RawClient, group: str, member: str, topics: tuple[str, ...], **kw: Any) -> Any:
    return raw.request(hb_request(group, member, 0, topics=topics, rebalance_ms=5000, owned=(), **kw))


def assign_at_once(bootstrap: str, group: str) -> None:
    """consumer.assignment.interval.ms=0 for `group`: every epoch change computes the target at once
    (Kafka's own exact-epoch tests run so), for the raw tests that follow epochs step by step. The
    interval itself is tested in test_consumer_assignment_interval.py."""
    from tests.integration.share_helpers import set_group_configs
    set_group_configs(bootstrap, group, {"consumer.assignment.interval.ms": "0"})


def owned_of(resp: Any) -> tuple[tuple[uuid.UUID, tuple[int, ...]], ...]:
    return tuple((tp.topic_id, tuple(tp.partitions)) for tp in resp.assignment.topic_partitions)


def test_heartbeat_error_codes(cbroker: Broker) -> None:
    topic, group = new_name("t"), new_name("cg")
    create_topic(cbroker.bootstrap, topic, partitions=2)
    assign_at_once(cbroker.bootstrap, group)
    with rk.RawClient(cbroker.bootstrap) as raw:
        def err(req: Any) -> tuple[int, str | None]:
            resp = raw.request(req)
            return int(resp.error_code), resp.error_message

        assert err(hb_request(group, "", 0, topics=(topic,), rebalance_ms=1000, owned=())) == (
            INVALID_REQUEST, "MemberId can't be empty.")
        assert err(hb_request(group, "m", 0, topics=(topic,), owned=())) == (
            INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request.")
        assert err(hb_request(group, "m", 0, rebalance_ms=1000, owned=())) == (
            INVALID_REQUEST, "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
        assert err(hb_request(group, "m", -3)) == (INVALID_REQUEST, "MemberEpoch is invalid.")
        assert err(hb_request(group, "m", 0, topics=(topic,), rebalance_ms=1000, owned=(), assignor="sticky")) == (
            UNSUPPORTED_ASSIGNOR, "ServerAssignor sticky is not supported. Supported assignors: uniform, range.")
        assert err(hb_request(group, "m", 0, regex="[", rebalance_ms=1000, owned=()))[0] == INVALID_REGULAR_EXPRESSION
        assert err(hb_request(group, "m", 1)) == (GROUP_ID_NOT_FOUND, f"Group {group} not found.")
        # v0: the coordinator names the member
        v0 = raw.request(hb_request(group, "", 0, topics=(topic,), rebalance_ms=5000, owned=(), version=0))
        assert v0.error_code == NONE and v0.member_id and v0.member_epoch == 1
        ok = join(raw, group, "m1", (topic,))
        assert ok.error_code == NONE and ok.member_epoch == 2
        assert err(hb_request(group, "m1", 7, owned=()))[0] == FENCED_MEMBER_EPOCH
        assert err(hb_request(group, "ghost", 2)) == (UNKNOWN_MEMBER_ID, f"Member ghost is not a member of group {group}.")
        assert err(hb_request(group, "s1", 0, topics=(topic,), rebalance_ms=5000, owned=(), instance="i1"))[0] == NONE
        assert err(hb_request(group, "s2", 0, topics=(topic,), rebalance_ms=5000, owned=(), instance="i1"))[0] == \
            UNRELEASED_INSTANCE_ID
        assert err(hb_request(group, "s2", 3, instance="i1"))[0] == FENCED_INSTANCE_ID
        assert err(hb_request(group, "s2", 3, instance="nope"))[0] == UNKNOWN_MEMBER_ID
        # Another kind of group owns the id
        classic = new_name("classic")
        c = Consumer(consumer_conf(cbroker.bootstrap, **{"group.id": classic}))
        c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)  # a simple classic group
        c.close()
        share = new_name("share")
        from tests.integration.share_helpers import heartbeat_request
        assert raw.request(heartbeat_request(share, uuid.uuid4().hex[:22], 0, [topic])).error_code == NONE
        assert err(hb_request(share, "m", 0, topics=(topic,), rebalance_ms=1000, owned=()))[0] == GROUP_ID_NOT_FOUND


def test_a_member_joining_a_new_group_with_no_subscription_moves_it_off_epoch_0(cbroker: Broker) -> None:
    """Kafka's Java consumer subscribed to a pattern that matches nothing yet joins with
    SubscribedTopicNames=[]; Kafka bumps a new group off epoch 0 on any first join, so the member is
    at epoch 1 and its next heartbeat (no rebalance timeout, as the client sends it) is accepted;
    the pattern matching a topic later gets it partitions."""
    topic, group = new_name("t"), new_name("cg")
    assign_at_once(cbroker.bootstrap, group)
    with rk.RawClient(cbroker.bootstrap) as raw:
        first = raw.request(hb_request(group, "m1", 0, topics=(), rebalance_ms=5000, owned=()))
        assert (first.error_code, first.error_message, first.member_epoch) == (NONE, None, 1)
        beat = raw.request(hb_request(group, "m1", first.member_epoch))
        assert (beat.error_code, beat.error_message, beat.member_epoch) == (NONE, None, 1)
        create_topic(cbroker.bootstrap, topic, partitions=2)
        sub = raw.request(hb_request(group, "m1", 1, topics=(topic,), owned=()))
        assert sub.error_code == NONE and sub.member_epoch == 2
        assert sorted(p for _, ps in owned_of(sub) for p in ps) == [0, 1]


def test_group_max_size(make_broker: Any) -> None:
    b = make_broker({**FAST, "group.consumer.max.size": "1"})
    topic, group = new_name("t"), new_name("cg")
    create_topic(b.bootstrap, topic)
    with rk.RawClient(b.bootstrap) as raw:
        assert join(raw, group, "m1", (topic,)).error_code == NONE
        resp = join(raw, group, "m2", (topic,))
        assert (resp.error_code, resp.error_message) == (
            GROUP_MAX_SIZE_REACHED, "The consumer group has reached its maximum capacity of 1 members.")


def test_revocation_before_reassignment_raw(cbroker: Broker) -> None:
    topic, group = new_name("t"), new_name("cg")
    create_topic(cbroker.bootstrap, topic, partitions=4)
    assign_at_once(cbroker.bootstrap, group)
    with rk.RawClient(cbroker.bootstrap) as raw:
        a = join(raw, group, "a", (topic,))
        assert sum(len(tp.partitions) for tp in a.assignment.topic_partitions) == 4
        b = join(raw, group, "b", (topic,))
        assert b.member_epoch == 2 and b.assignment.topic_partitions == ()  # nothing free yet
        a2 = raw.request(hb_request(group, "a", a.member_epoch, owned=owned_of(a)))
        assert a2.member_epoch == a.member_epoch  # must revoke first: same epoch, smaller assignment
        kept = owned_of(a2)
        assert sum(len(p) for _, p in kept) == 2
        b2 = raw.request(hb_request(group, "b", b.member_epoch, owned=()))
        assert b2.assignment is None or b2.assignment.topic_partitions == ()  # still held by a
        a3 = raw.request(hb_request(group, "a", a2.member_epoch, owned=kept))
        assert a3.member_epoch == 2
        b3 = raw.request(hb_request(group, "b", b2.member_epoch, owned=()))
        got = owned_of(b3)
        assert sum(len(p) for _, p in got) == 2
        assert not {p for _, ps in got for p in ps} & {p for _, ps in kept for p in ps}
        # a leaves: b gets everything at the next epoch
        assert raw.request(hb_request(group, "a", -1)).member_epoch == -1
        b4 = raw.request(hb_request(group, "b", b3.member_epoch, owned=got))
        assert b4.member_epoch == 3 and sum(len(p) for _, p in owned_of(b4)) == 4


def test_member_that_stops_heartbeating_is_fenced_by_session_timeout(cbroker: Broker) -> None:
    topic, group = new_name("t"), new_name("cg")
    create_topic(cbroker.bootstrap, topic, partitions=4)
    with rk.RawClient(cbroker.bootstrap) as raw:
        join(raw, group, "crashing", (topic,))  # never heartbeats again, never leaves
    m = Member(cbroker.bootstrap, group, [topic])
    try:
        # The crashed member never revokes: its partitions move once it is fenced (session timeout).
        wait_for(lambda: len(m.assignment()) == 4, TIMEOUT, message="the crashed member's partitions after its session")
    finally:
        m.stop()


def test_static_membership_keeps_assignment_across_restart_of_the_member(cbroker: Broker) -> None:
    topic, group = new_name("t"), new_name("cg")
    create_topic(cbroker.bootstrap, topic, partitions=4)
    assign_at_once(cbroker.bootstrap, group)
    with rk.RawClient(cbroker.bootstrap) as raw:
        s = join(raw, group, "s1", (topic,), instance="inst-1")
        owned = owned_of(s)
        d = join(raw, group, "d1", (topic,))
        for _ in range(2):  # revoke, then move to the new epoch
            s = raw.request(hb_request(group, "s1", s.member_epoch, owned=owned, instance="inst-1"))
            owned = owned_of(s) if s.assignment is not None else owned
        d = raw.request(hb_request(group, "d1", d.member_epoch, owned=()))
        before = sorted(p for _, ps in owned for p in ps)
        assert len(before) == 2
        left = raw.request(hb_request(group, "s1", -2, instance="inst-1"))
        assert (left.error_code, left.member_epoch) == (NONE, -2)
        back = join(raw, group, "s1-new", (topic,), instance="inst-1")
        assert back.error_code == NONE
        assert sorted(p for _, ps in owned_of(back) for p in ps) == before
        desc = raw.request(rk.req_cls(69, 1)(group_ids=(group,), include_authorized_operations=False)).groups[0]
        assert {m.member_id for m in desc.members} == {"s1-new", "d1"}


def test_regex_subscription_picks_up_a_topic_created_later(cbroker: Broker) -> None:
    prefix = new_name("rx")
    group = new_name("cg")
    create_topic(cbroker.bootstrap, f"{prefix}-a", partitions=2)
    m = Member(cbroker.bootstrap, group, [f"^{prefix}-.*"])
    try:
        wait_for(lambda: m.assignment() == {(f"{prefix}-a", 0), (f"{prefix}-a", 1)}, TIMEOUT,
                 message="the regex's first topic")
        create_topic(cbroker.bootstrap, f"{prefix}-b", partitions=1)
        wait_for(lambda: (f"{prefix}-b", 0) in m.assignment(), TIMEOUT, message="the topic created later")
    finally:
        m.stop()


def test_admin_describe_list_and_delete(cbroker: Broker) -> None:
    from confluent_kafka import ConsumerGroupType
    topic, group = new_name("t"), new_name("cg")
    create_topic(cbroker.bootstrap, topic, partitions=3)
    m = Member(cbroker.bootstrap, group, [topic])
    a = admin(cbroker.bootstrap)
    try:
        wait_for(lambda: len(m.assignment()) == 3, TIMEOUT, message="assignment")
        desc = a.describe_consumer_groups([group])[group].result(timeout=15)
        assert desc.type == ConsumerGroupType.CONSUMER
        assert len(desc.members) == 1
        assert {tp.partition for tp in desc.members[0].assignment.topic_partitions} == {0, 1, 2}
        listed = a.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(timeout=15)
        assert group in {g.group_id for g in listed.valid}
        fut = a.delete_consumer_groups([group])[group]
        with pytest.raises(KafkaException) as e:
            fut.result(timeout=15)
        assert e.value.args[0].code() == NON_EMPTY_GROUP
    finally:
        m.stop()
    wait_for(lambda: a.describe_consumer_groups([group])[group].result(timeout=15).members == [], TIMEOUT,
             message="the group empties")
    a.delete_consumer_groups([group])[group].result(timeout=15)
    with rk.RawClient(cbroker.bootstrap) as raw:
        desc = raw.request(rk.req_cls(69, 1)(group_ids=(group,), include_authorized_operations=False)).groups[0]
        assert int(desc.error_code) == GROUP_ID_NOT_FOUND


def test_no_record_lost_or_consumed_twice_while_members_come_and_go(cbroker: Broker) -> None:
    topic, group = new_name("t"), new_name("cg")
    create_topic(cbroker.bootstrap, topic, partitions=6)
    producer = Producer(producer_conf(cbroker.bootstrap))
    n = 600
    members = [Member(cbroker.bootstrap, group, [topic])]
    stopped: list[Member] = []
    try:
        for wave in range(3):
            produce_sync(producer, topic, [{"key": f"k{i}".encode(), "value": f"v{wave}-{i}".encode()}
                                           for i in range(n // 3)])
            if wave == 0:
                members.append(Member(cbroker.bootstrap, group, [topic]))
                members.append(Member(cbroker.bootstrap, group, [topic]))
            elif wave == 1:
                leaving = members.pop(0)
                leaving.stop()
                stopped.append(leaving)

        def consumed() -> int:
            return sum(len(m.records) for m in members + stopped)
        wait_for(lambda: consumed() >= n, TIMEOUT, message=f"{n} records consumed")
    finally:
        for m in members:
            m.stop()
    seen = [(t, p, o) for m in members + stopped for t, p, o, _ in m.records]
    assert len(seen) == n and len(set(seen)) == n
    c = Consumer(consumer_conf(cbroker.bootstrap, **{"group.id": group}))
    committed = c.committed([TopicPartition(topic, p) for p in range(6)], timeout=15)
    c.close()
    ends = {}
    for _, p, o in seen:
        ends[p] = max(ends.get(p, -1), o + 1)
    assert {tp.partition: tp.offset for tp in committed if tp.offset >= 0} == ends


def test_commit_validation_by_member_epoch(cbroker: Broker) -> None:
    topic, group = new_name("t"), new_name("cg")
    create_topic(cbroker.bootstrap, topic, partitions=1)
    with rk.RawClient(cbroker.bootstrap) as raw:
        j = join(raw, group, "m1", (topic,))

        def commit(member: str, epoch: int, version: int = 9) -> int:
            cls = rk.req_cls(8, version)
            t = rk._nested(cls, "topics")
            p = rk._nested(t, "partitions")
            req = cls(**rk._fit(cls, dict(group_id=group, generation_id_or_member_epoch=epoch, member_id=member,
                                          group_instance_id=None, retention_time=-1,
                                          topics=(t(name=topic, partitions=(p(partition_index=0, committed_offset=5,
                                                                                committed_leader_epoch=-1,
                                                                                committed_metadata=None),)),))))
            return int(raw.request(req).topics[0].partitions[0].error_code)

        assert commit("m1", j.member_epoch + 1) == STALE_MEMBER_EPOCH
        assert commit("ghost", j.member_epoch) == UNKNOWN_MEMBER_ID
        assert commit("m1", j.member_epoch, version=8) == UNSUPPORTED_VERSION
        assert commit("m1", j.member_epoch) == NONE
        assert commit("", -1) == UNKNOWN_MEMBER_ID  # a generation-less commit needs an empty group
        raw.request(hb_request(group, "m1", -1))
        assert commit("", -1) == NONE  # the admin may commit for the empty group
        fcls = rk.req_cls(9, 10)
        g = rk._nested(fcls, "groups")
        tt = rk._nested(g, "topics")
        tid = raw.request(rk.metadata_request([topic])).topics[0].topic_id
        resp = raw.request(fcls(groups=(g(group_id=group, member_id=None, member_epoch=-1,
                                          topics=(tt(topic_id=tid, partition_indexes=(0,)),)),),
                                require_stable=False))
        assert resp.groups[0].topics[0].partitions[0].committed_offset == 5


def test_consumer_protocol_disabled_by_rebalance_protocols(make_broker: Any) -> None:
    """group.coordinator.rebalance.protocols=classic, as Kafka: ConsumerGroupHeartbeat and
    ConsumerGroupDescribe are answered UNSUPPORTED_VERSION (librdkafka then fails the consumer
    with its "revert to the classic protocol" error) while classic groups work."""
    b = make_broker({**FAST, "group.coordinator.rebalance.protocols": "classic"})
    topic, group = new_name("t"), new_name("cg")
    create_topic(b.bootstrap, topic)
    with rk.RawClient(b.bootstrap) as raw:
        resp = join(raw, group, "m1", (topic,))
        assert (resp.error_code, resp.error_message) == (UNSUPPORTED_VERSION, None)
        desc = raw.request(rk.req_cls(69, 0)(group_ids=(group,), include_authorized_operations=False))
        assert [(g.group_id, g.error_code) for g in desc.groups] == [(group, UNSUPPORTED_VERSION)]
    errors: list[Any] = []
    conf = consumer_conf(b.bootstrap, **{"group.id": group, "group.protocol": "consumer", "error_cb": errors.append})
    conf.pop("session.timeout.ms")  # a broker setting under the consumer protocol
    c = Consumer(conf)
    try:
        c.subscribe([topic])

        def refused() -> bool:  # librdkafka: a fatal error delivered as a message error
            m = c.poll(0.2)
            if m is not None and m.error() is not None:
                errors.append(m.error())
            return any(e.code() == KafkaError._FATAL and "ConsumerGroupHeartbeat fatal error: Broker: API version not "
                       "supported" in e.str() for e in errors)
        wait_for(refused, TIMEOUT, message="the consumer-protocol consumer told the protocol is unsupported")
    finally:
        c.close()
    produce_sync(Producer(producer_conf(b.bootstrap)), topic, [{"value": b"x"}])
    classic = Consumer(consumer_conf(b.bootstrap, **{"group.id": new_name("classic"), "auto.offset.reset": "earliest"}))
    try:
        classic.subscribe([topic])
        got: list[bytes] = []

        def consumed() -> bool:
            m = classic.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
            return got == [b"x"]
        wait_for(consumed, TIMEOUT, message="a classic consumer of the same broker")
    finally:
        classic.close()


def test_admin_removal_fences_members_of_the_consumer_protocol(cbroker: Broker) -> None:
    """LeaveGroup (Admin removeMembersFromConsumerGroup) on a consumer group fences a member of the
    consumer protocol too, by instance id (member id "") or by member id, echoing the request's ids
    (Kafka's classicGroupLeaveToConsumerGroup); the member then has to join again."""
    topic, group = new_name("t"), new_name("cg")
    create_topic(cbroker.bootstrap, topic, partitions=2)
    from tests.integration.test_consumer_groups import leave_req
    with rk.RawClient(cbroker.bootstrap) as raw, rk.RawClient(cbroker.bootstrap) as admin:
        static = join(raw, group, "s1", (topic,), instance="i1")
        dynamic = join(raw, group, "d1", (topic,))
        assert static.error_code == dynamic.error_code == NONE
        resp = admin.request(leave_req(group, "", instance="i1"))
        assert [(m.member_id, m.group_instance_id, m.error_code) for m in resp.members] == [("", "i1", NONE)]
        resp = admin.request(leave_req(group, "d1"))
        assert [(m.member_id, m.group_instance_id, m.error_code) for m in resp.members] == [("d1", None, NONE)]
        desc = raw.request(rk.req_cls(69, 1)(group_ids=(group,), include_authorized_operations=False)).groups[0]
        assert desc.members == () and desc.group_state == "Empty"
        assert raw.request(hb_request(group, "d1", dynamic.member_epoch)).error_code == UNKNOWN_MEMBER_ID
        resp = admin.request(leave_req(group, "s9", instance="nope"))
        assert [(m.member_id, m.error_code) for m in resp.members] == [("s9", UNKNOWN_MEMBER_ID)]
