"""Kafka's online migration between classic and KIP-848 consumer groups, with confluent-kafka
consumers of both protocols in one group: a consumer-protocol member joining a running classic group
upgrades it (the classic members stay, rebalanced through JoinGroup/SyncGroup/Heartbeat), the last
consumer-protocol member leaving downgrades it back to a classic group; no record is lost or
consumed twice across either move while every member commits what it takes."""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, KafkaException, Producer, TopicPartition

from sharebroker.testing import wait_for
from sharebroker.testing.plugin import Broker
from tests.brokers import module_broker
from tests.integration import rawkafka as rk
from tests.integration.clients import admin, consumer_conf, create_topic, produce_sync, producer_conf
from tests.integration.test_consumer_groups import ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS, code, heartbeat_req
from tests.integration.test_consumer_groups import join_as_new_member, join_req
from tests.integration.test_consumer_groups import sync_req as _sync_req
from tests.integration.test_consumer_protocol import FAST, Member, hb_request

TIMEOUT = 45.0
GROUP_ID_NOT_FOUND = 69
UNSUPPORTED_VERSION = 35
CLASSIC = {"group.protocol": "classic", "session.timeout.ms": 6000, "heartbeat.interval.ms": 300}


@pytest.fixture(scope="module")
def mbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from module_broker(tmp_path_factory, "group-migration", FAST)


def new_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class ClassicMember(Member):
    """The same committing poller, on the classic protocol (JoinGroup/SyncGroup)."""

    def __init__(self, bootstrap: str, group: str, topics: list[str], **extra: Any) -> None:
        super().__init__(bootstrap, group, topics, **{**CLASSIC, **extra})


def group_type(bootstrap: str, group: str) -> Any:
    client = admin(bootstrap)  # held while the future runs: a collected client never answers
    return client.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15).type


def covers(members: list[Member], partitions: int) -> bool:
    """Every member owns something, and together they own each partition exactly once."""
    owned = [m.assignment() for m in members]
    return all(owned) and sum(len(o) for o in owned) == partitions and len(set().union(*owned)) == partitions


def consumer_group_describe(bootstrap: str, group: str) -> Any:
    with rk.RawClient(bootstrap) as raw:
        return raw.request(rk.req_cls(69, 1)(group_ids=(group,), include_authorized_operations=False)).groups[0]


def balanced_and_stable(bootstrap: str, group: str, members: list[Member], partitions: int) -> bool:
    """The coordinator calls the group Stable, every member is at the group epoch, and each client
    holds its equal share (the classic ones through SyncGroup)."""
    desc = consumer_group_describe(bootstrap, group)
    share = partitions // len(members)
    return (desc.group_state == "Stable" and all(m.member_epoch == desc.group_epoch for m in desc.members)
            and covers(members, partitions) and all(len(m.assignment()) == share for m in members))


@pytest.mark.parametrize(("strategy", "classic_first"), [("range,roundrobin", True), ("cooperative-sticky", False)],
                         ids=["eager-classic-group-upgraded", "cooperative-members-join-a-consumer-group"])
def test_classic_and_consumer_members_in_one_group_then_downgraded(mbroker: Broker, strategy: str,
                                                                   classic_first: bool) -> None:
    """Eager classic members upgraded by a consumer-protocol member joining their group; or
    cooperative classic members joining a consumer group (librdkafka's cooperative-sticky leaves
    assignor user data in its assignments, so Kafka refuses to upgrade such a group: see below).
    Either way the consumer member's leaving downgrades the group to a classic one."""
    topic, group = new_name("t"), new_name("mig")
    partitions = 6
    create_topic(mbroker.bootstrap, topic, partitions=partitions)
    producer = Producer(producer_conf(mbroker.bootstrap))
    produced = 0

    def produce(n: int, wave: str) -> None:
        nonlocal produced
        produce_sync(producer, topic, [{"key": f"k{i}".encode(), "value": f"{wave}-{i}".encode()} for i in range(n)])
        produced += n

    def new_classic() -> list[ClassicMember]:
        return [ClassicMember(mbroker.bootstrap, group, [topic], **{"partition.assignment.strategy": strategy})
                for _ in range(2)]

    classic: list[ClassicMember] = []
    modern: Member | None = None
    everyone: list[Member] = []

    def consumed() -> int:
        return sum(len(m.records) for m in everyone)

    try:
        if classic_first:
            classic = new_classic()
            everyone += classic
            wait_for(lambda: covers(classic, partitions), TIMEOUT, message="two classic members share the partitions")
            assert group_type(mbroker.bootstrap, group) == ConsumerGroupType.CLASSIC
        else:
            modern = Member(mbroker.bootstrap, group, [topic])
            everyone.append(modern)
            wait_for(lambda: len(modern.assignment()) == partitions, TIMEOUT, message="the consumer member owns all")
            assert group_type(mbroker.bootstrap, group) == ConsumerGroupType.CONSUMER
        produce(300, "first")
        wait_for(lambda: consumed() >= produced, TIMEOUT, message="the first members consume")

        if classic_first:
            modern = Member(mbroker.bootstrap, group, [topic])
            everyone.append(modern)
        else:
            classic = new_classic()
            everyone += classic
        produce(300, "joining")  # records arrive while the group changes
        wait_for(lambda: group_type(mbroker.bootstrap, group) == ConsumerGroupType.CONSUMER, TIMEOUT,
                 message="the group is a consumer group")
        assert modern is not None
        wait_for(lambda: balanced_and_stable(mbroker.bootstrap, group, [*classic, modern], partitions), TIMEOUT,
                 message="classic and consumer members share the partitions evenly")
        desc = consumer_group_describe(mbroker.bootstrap, group)
        assert sorted(int(m.member_type) for m in desc.members) == [0, 0, 1]  # two classic, one consumer member
        produce(300, "mixed")
        wait_for(lambda: consumed() >= produced, TIMEOUT, message="the mixed group consumes")

        modern.stop()  # LeaveGroup by heartbeat: the last consumer-protocol member goes
        wait_for(lambda: group_type(mbroker.bootstrap, group) == ConsumerGroupType.CLASSIC, TIMEOUT,
                 message="the group is downgraded to a classic group")
        produce(300, "downgraded")
        wait_for(lambda: covers(classic, partitions) and all(len(m.assignment()) == partitions // 2 for m in classic),
                 TIMEOUT, message="the classic members share everything again")
        wait_for(lambda: consumed() >= produced, TIMEOUT, message="the classic group consumes again")
    finally:
        for m in everyone:
            if not m._stop.is_set():
                m.stop()
    seen = [(t, p, o) for m in everyone for t, p, o, _ in m.records]
    assert len(seen) == produced and len(set(seen)) == produced  # nothing lost, nothing twice
    c = Consumer(consumer_conf(mbroker.bootstrap, **{"group.id": new_name("reader")}))
    committed_by = Consumer(consumer_conf(mbroker.bootstrap, **{"group.id": group}))
    try:
        committed = committed_by.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=15)
    finally:
        committed_by.close()
        c.close()
    ends: dict[int, int] = {}
    for _, p, o in seen:
        ends[p] = max(ends.get(p, -1), o + 1)
    assert {tp.partition: tp.offset for tp in committed} == ends


def test_upgrade_refused_while_assignments_carry_assignor_user_data(mbroker: Broker) -> None:
    """Kafka 4 (KAFKA-18134) will not upgrade a classic group whose assignments carry assignor user
    data the server-side assignors would drop: librdkafka's cooperative-sticky writes some once the
    group has rebalanced. The consumer member is refused; the classic group carries on."""
    topic, group = new_name("t"), new_name("mig")
    create_topic(mbroker.bootstrap, topic, partitions=4)
    sticky = {"partition.assignment.strategy": "cooperative-sticky"}
    first = ClassicMember(mbroker.bootstrap, group, [topic], **sticky)
    second: ClassicMember | None = None
    try:
        wait_for(lambda: len(first.assignment()) == 4, TIMEOUT, message="the first member owns all")
        second = ClassicMember(mbroker.bootstrap, group, [topic], **sticky)
        wait_for(lambda: covers([first, second], 4), TIMEOUT, message="a second generation shares them")
        with rk.RawClient(mbroker.bootstrap) as raw:
            resp = raw.request(hb_request(group, uuid.uuid4().hex, 0, topics=(topic,), rebalance_ms=5000, owned=()))
            assert (int(resp.error_code), resp.error_message) == (
                UNSUPPORTED_VERSION, "userData from a custom assignor would be lost")
        assert group_type(mbroker.bootstrap, group) == ConsumerGroupType.CLASSIC
        assert covers([first, second], 4)
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_upgrade_refused_when_the_migration_policy_forbids_it(make_broker: Any) -> None:
    b = make_broker({**FAST, "group.consumer.migration.policy": "downgrade"})
    topic, group = new_name("t"), new_name("mig")
    create_topic(b.bootstrap, topic, partitions=2)
    classic = ClassicMember(b.bootstrap, group, [topic])
    try:
        wait_for(lambda: len(classic.assignment()) == 2, TIMEOUT, message="a classic member owns the partitions")
        with rk.RawClient(b.bootstrap) as raw:
            resp = raw.request(hb_request(group, uuid.uuid4().hex, 0, topics=(topic,), rebalance_ms=5000, owned=()))
            assert (int(resp.error_code), resp.error_message) == (
                GROUP_ID_NOT_FOUND, f"Cannot upgrade classic group {group} to consumer group because online upgrade "
                                    "is disabled.")
        assert group_type(b.bootstrap, group) == ConsumerGroupType.CLASSIC
        assert len(classic.assignment()) == 2
    finally:
        classic.stop()


def test_kafka_python_and_aiokafka_members_stay_through_an_upgrade_and_a_downgrade(mbroker: Broker) -> None:
    """The pure-Python clients speak only the classic protocol: they keep consuming, with their
    share of the partitions, while a confluent-kafka member of the consumer protocol comes and goes."""
    from tests.integration.test_consumer_groups import CLIENTS, Runner

    topic, group = new_name("t"), new_name("mig")
    partitions = 6
    create_topic(mbroker.bootstrap, topic, partitions=partitions)
    producer = Producer(producer_conf(mbroker.bootstrap))
    values: list[bytes] = []

    def produce(wave: str) -> None:
        batch = [f"{wave}-{i}".encode() for i in range(120)]
        produce_sync(producer, topic, [{"value": v} for v in batch])
        values.extend(batch)

    runners = [Runner(lambda name=name: CLIENTS[name](mbroker.bootstrap, group, topic))  # type: ignore[misc]
               for name in ("kafka-python", "aiokafka")]
    for r in runners:
        r.start()
    modern: Member | None = None

    def shares(each: int) -> bool:
        for r in runners:
            r.check()
        owned = [r.assigned for r in runners]
        return all(len(o) == each for o in owned) and len(set().union(*owned)) == each * len(owned)

    def consumed() -> set[bytes]:
        got = {v for r in runners for v in r.values()}
        return got | ({v for *_, v in modern.records} if modern is not None else set())

    try:
        wait_for(lambda: shares(3), TIMEOUT, message="the two classic members share the partitions")
        produce("classic")
        modern = Member(mbroker.bootstrap, group, [topic])
        wait_for(lambda: group_type(mbroker.bootstrap, group) == ConsumerGroupType.CONSUMER, TIMEOUT,
                 message="the group is upgraded")
        wait_for(lambda: shares(2) and len(modern.assignment()) == 2
                 and consumer_group_describe(mbroker.bootstrap, group).group_state == "Stable", TIMEOUT,
                 message="kafka-python, aiokafka and the consumer member own two partitions each")
        produce("mixed")
        wait_for(lambda: consumed() >= set(values), TIMEOUT, message="the mixed group consumes everything")
        modern.stop()
        wait_for(lambda: group_type(mbroker.bootstrap, group) == ConsumerGroupType.CLASSIC, TIMEOUT,
                 message="the group is downgraded")
        wait_for(lambda: shares(3), TIMEOUT, message="the classic members share everything again")
        produce("downgraded")
        wait_for(lambda: consumed() >= set(values), TIMEOUT, message="the classic group consumes everything")
    finally:
        if modern is not None and not modern._stop.is_set():
            modern.stop()
        for r in runners:
            r.stop()


def _kafka_string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def subscription_v0(topic: str) -> bytes:
    """ConsumerProtocolSubscription v0 for one topic, no user data."""
    return struct.pack(">hi", 0, 1) + _kafka_string(topic) + struct.pack(">i", -1)


def assignment_v0(topic: str, partitions: list[int]) -> bytes:
    """ConsumerProtocolAssignment v0, no user data."""
    if not partitions:
        return struct.pack(">hii", 0, 0, -1)
    return (struct.pack(">hi", 0, 1) + _kafka_string(topic) + struct.pack(f">i{len(partitions)}i", len(partitions),
                                                                            *partitions) + struct.pack(">i", -1))


def test_a_commit_refused_by_a_rebalance_does_not_lose_the_record_of_a_partition_kept(mbroker: Broker) -> None:
    """The sequence behind the flaky downgrade test, driven step by step: a cooperative classic
    member (librdkafka) is back in JoinGroup for a rebalance and keeps fetching the partition it
    owns; it takes a record and commits it with its generation, and that OffsetCommit waits on its
    connection behind its parked JoinGroup (Kafka too serves one request per connection at a time).
    The join completes first, so the commit carries the generation before: ILLEGAL_GENERATION, as
    Kafka answers. The member keeps the partition (incremental rebalance), and its position is past
    the record: the record must be taken again and committed, not assumed to go to another member."""
    topic, group = new_name("t"), new_name("coop")
    create_topic(mbroker.bootstrap, topic, partitions=1)
    producer = Producer(producer_conf(mbroker.bootstrap))
    protocols = (("cooperative-sticky", subscription_v0(topic)),)
    join = {"protocols": protocols, "session": 60000, "rebalance": 60000}
    join_states: list[str] = []  # the member's, from its statistics

    def sync_req(*args: Any) -> Any:
        return _sync_req(*args, protocol_name="cooperative-sticky")

    def stats(text: str) -> None:
        join_states.append(json.loads(text).get("cgrp", {}).get("join_state", ""))

    with rk.RawClient(mbroker.bootstrap, timeout=TIMEOUT) as leader, \
            rk.RawClient(mbroker.bootstrap, timeout=TIMEOUT) as newcomer:
        # A raw leader alone at generation 1, then the librdkafka member joins: generation 2, where
        # the leader gives the member the partition.
        first = join_as_new_member(leader, group, **join)
        leader_id = first.member_id
        assert code(leader.request(sync_req(group, leader_id, first.generation_id, {
            leader_id: assignment_v0(topic, [])})).error_code) == 0
        member = ClassicMember(mbroker.bootstrap, group, [topic], stats_cb=stats, **{
            "partition.assignment.strategy": "cooperative-sticky", "statistics.interval.ms": 100})
        try:
            wait_for(lambda: code(leader.request(heartbeat_req(group, leader_id, first.generation_id)).error_code)
                     == REBALANCE_IN_PROGRESS, TIMEOUT, message="the member's join starts a rebalance")
            second = leader.request(join_req(group, leader_id, **join), timeout=TIMEOUT)
            assert second.leader == leader_id and len(second.members) == 2, second
            member_id = next(m.member_id for m in second.members if m.member_id != leader_id)
            assert code(leader.request(sync_req(group, leader_id, second.generation_id, {
                leader_id: assignment_v0(topic, []), member_id: assignment_v0(topic, [0])})).error_code) == 0
            wait_for(lambda: member.assignment() == {(topic, 0)}, TIMEOUT, message="the member owns the partition")

            wait_for(lambda: join_states[-1:] == ["steady"], TIMEOUT, message="the member's join state reported")
            # A newcomer's join starts the next rebalance; the leader holds it open by not rejoining.
            newcomer_id = newcomer.request(join_req(group, **join)).member_id
            parked = newcomer.send(join_req(group, newcomer_id, **join))
            wait_for(lambda: join_states[-1:] == ["wait-join"], TIMEOUT, message="the member back in JoinGroup")
            produce_sync(producer, topic, [{"value": b"taken-during-the-rebalance"}])
            wait_for(lambda: member.taken == [(topic, 0, 0)], TIMEOUT,
                     message="the member took the record (its commit waits behind its JoinGroup)")
            assert member.records == []

            # The leader rejoins: generation 3, and only then is the member's commit served.
            third = leader.request(join_req(group, leader_id, **join), timeout=TIMEOUT)
            assert third.generation_id == second.generation_id + 1
            assert code(leader.request(sync_req(group, leader_id, third.generation_id, {
                leader_id: assignment_v0(topic, []), member_id: assignment_v0(topic, [0]),
                newcomer_id: assignment_v0(topic, [])})).error_code) == 0
            assert code(newcomer.receive(rk.req_cls(11, 5), parked, TIMEOUT).error_code) == 0
            assert code(newcomer.request(sync_req(group, newcomer_id, third.generation_id)).error_code) == 0
            wait_for(lambda: any(isinstance(e, KafkaException) and e.args[0].code() == ILLEGAL_GENERATION
                                 for e in member.errors), TIMEOUT, message="the commit of the old generation refused")
            assert member.assignment() == {(topic, 0)}  # kept through the rebalance

            produce_sync(producer, topic, [{"value": b"after-the-rebalance"}])
            wait_for(lambda: len(member.records) >= 2, TIMEOUT, message="both records taken and committed")
            assert [(o, v) for _, _, o, v in member.records] == [
                (0, b"taken-during-the-rebalance"), (1, b"after-the-rebalance")]
        finally:
            member.stop()
