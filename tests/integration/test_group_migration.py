"""Kafka's online migration between classic and KIP-848 consumer groups, with confluent-kafka
consumers of both protocols in one group: a consumer-protocol member joining a running classic group
upgrades it (the classic members stay, rebalanced through JoinGroup/SyncGroup/Heartbeat), the last
consumer-protocol member leaving downgrades it back to a classic group; no record is lost or
consumed twice across either move while every member commits what it takes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, Producer, TopicPartition

from sharebroker.testing import wait_for
from sharebroker.testing.plugin import Broker
from tests.brokers import module_broker
from tests.integration import rawkafka as rk
from tests.integration.clients import admin, consumer_conf, create_topic, produce_sync, producer_conf
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
