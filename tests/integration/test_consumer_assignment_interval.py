"""consumer.assignment.interval.ms (Kafka 4.3+; broker default group.consumer.assignment.interval.ms,
1000 ms, within group.consumer.min/max.assignment.interval.ms): a KIP-848 consumer group's target
assignment is computed at most once per interval. A group's first target is computed at once; inside
the interval a join, leave or subscription change only bumps the group epoch, members are reconciled
towards the last target (a joiner gets its epoch and no partitions), and the coordinator computes the
pending target once the interval has passed, without waiting for a heartbeat. Raw
ConsumerGroupHeartbeat frames where epochs matter; confluent-kafka consumers of the consumer
protocol, and kafka-python / aiokafka consumers of the classic protocol joining the consumer group
(they have no KIP-848 support), for what real clients see."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from sharebroker.testing import wait_for
from sharebroker.testing.plugin import Broker
from tests.brokers import module_broker
from tests.integration import rawkafka as rk
from tests.integration.clients import admin, consumer_conf, create_topic, produce_sync, producer_conf
from tests.integration.share_helpers import set_group_configs
from tests.integration.test_consumer_groups import CLIENTS, Runner
from tests.integration.test_consumer_protocol import FAST, Member, hb_request, join, owned_of

TIMEOUT = 30.0
INTERVAL_MS = 8000  # long enough that the steps inside it run well within it on a loaded machine
# Members that stay quiet through an interval, or whose heartbeats come late on a loaded machine, must
# not be fenced meanwhile (FAST's session is 3 s): fencing would move the epochs these tests follow.
QUIET = {"consumer.session.timeout.ms": "30000"}


@pytest.fixture(scope="module")
def ibroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from module_broker(tmp_path_factory, "consumer-interval", FAST)  # Kafka's default interval, 1 s


def new_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def describe(bootstrap: str, group: str) -> Any:
    """ConsumerGroupDescribe (69): group and assignment epochs, each member's current and target
    assignment."""
    # Read timeout as long as the tests' deadlines: a loaded machine has held the broker's answers
    # beyond the RawClient's default 5 s (a FindCoordinator answered after 4.2 s, this after >5 s).
    with rk.RawClient(bootstrap, timeout=TIMEOUT) as raw:
        return raw.request(rk.req_cls(69, 1)(group_ids=(group,), include_authorized_operations=False)).groups[0]


def parts(assignment: Any) -> set[int]:
    return {p for tp in assignment.topic_partitions for p in tp.partitions}


def count(owned: tuple[tuple[uuid.UUID, tuple[int, ...]], ...]) -> int:
    return sum(len(ps) for _, ps in owned)


def caught_up(bootstrap: str, group: str) -> bool:
    d = describe(bootstrap, group)
    return d.assignment_epoch == d.group_epoch


def test_a_member_joining_within_the_interval_waits_for_the_next_target(ibroker: Broker) -> None:
    topic, group = new_name("t"), new_name("cg")
    create_topic(ibroker.bootstrap, topic, partitions=2)
    set_group_configs(ibroker.bootstrap, group, {"consumer.assignment.interval.ms": str(INTERVAL_MS), **QUIET})
    with rk.RawClient(ibroker.bootstrap) as raw:
        # The group's first target is computed at once (there is none before it).
        sent_a = time.monotonic()
        a = join(raw, group, "a", (topic,))
        assert (a.error_code, a.member_epoch, count(owned_of(a))) == (0, 1, 2), a
        # B joins inside the interval: the group epoch moves, the target does not; B is answered at
        # the last target's epoch with no partitions (a join always carries its assignment).
        b = join(raw, group, "b", (topic,))
        assert (b.error_code, b.member_epoch, b.assignment.topic_partitions) == (0, 1, ()), b
        d = describe(ibroker.bootstrap, group)
        assert (d.group_state, d.assignment_epoch, d.group_epoch) == ("Assigning", 1, 2), d
        assert {m.member_id: parts(m.target_assignment) for m in d.members} == {"a": {0, 1}, "b": set()}
        # Heartbeats meanwhile are answered from the last target: nothing moves.
        a2 = raw.request(hb_request(group, "a", 1, owned=owned_of(a)))
        assert (a2.error_code, a2.member_epoch, a2.assignment) == (0, 1, None), a2
        b2 = raw.request(hb_request(group, "b", 1, owned=()))
        assert (b2.error_code, b2.member_epoch, b2.assignment) == (0, 1, None), b2

        # Once the interval has passed the coordinator computes the target itself (no heartbeat
        # needed): ConsumerGroupDescribe shows the assignment epoch caught up with the group epoch.
        wait_for(lambda: caught_up(ibroker.bootstrap, group), INTERVAL_MS / 1000 + TIMEOUT, interval=0.1,
                 message="the target computed after the interval")
        assert time.monotonic() - sent_a >= INTERVAL_MS / 1000  # never before the interval
        d = describe(ibroker.bootstrap, group)
        assert d.assignment_epoch == 2 and d.group_state == "Reconciling", d
        targets = {m.member_id: parts(m.target_assignment) for m in d.members}
        assert len(targets["a"]) == len(targets["b"]) == 1 and targets["a"] | targets["b"] == {0, 1}, targets

        # The members take it at their next heartbeats: A revokes first, then B gets the freed one.
        a3 = raw.request(hb_request(group, "a", 1, owned=owned_of(a)))
        assert a3.member_epoch == 1 and count(owned_of(a3)) == 1, a3  # must revoke before epoch 2
        a4 = raw.request(hb_request(group, "a", 1, owned=owned_of(a3)))
        assert a4.member_epoch == 2, a4
        b3 = raw.request(hb_request(group, "b", 1, owned=()))
        assert b3.member_epoch == 2 and parts(b3.assignment) == targets["b"], b3
        assert describe(ibroker.bootstrap, group).group_state == "Stable"


def test_a_leave_within_the_interval_bumps_the_epoch_and_the_timer_reassigns(ibroker: Broker) -> None:
    """A leave inside the interval: the leaver's partitions stay unassigned until the pending
    target is computed; the remaining member keeps only its own meanwhile. Also: a group config
    change applies to the group's next computation."""
    topic, group = new_name("t"), new_name("cg")
    create_topic(ibroker.bootstrap, topic, partitions=4)
    set_group_configs(ibroker.bootstrap, group, {"consumer.assignment.interval.ms": "0", **QUIET})
    with rk.RawClient(ibroker.bootstrap) as raw:
        a = join(raw, group, "a", (topic,))
        sent_b = time.monotonic()  # the last target is computed for B's join, after this
        b = join(raw, group, "b", (topic,))  # interval 0: assigned in its own join's step
        d = describe(ibroker.bootstrap, group)
        assert d.assignment_epoch == d.group_epoch == b.member_epoch == 2, d
        a = raw.request(hb_request(group, "a", a.member_epoch, owned=owned_of(a)))  # revokes half
        kept = owned_of(a)
        a = raw.request(hb_request(group, "a", a.member_epoch, owned=kept))
        b = raw.request(hb_request(group, "b", b.member_epoch, owned=()))
        assert (a.member_epoch, b.member_epoch, count(kept), count(owned_of(b))) == (2, 2, 2, 2)

        set_group_configs(ibroker.bootstrap, group, {"consumer.assignment.interval.ms": str(INTERVAL_MS), **QUIET})
        assert raw.request(hb_request(group, "b", -1)).member_epoch == -1
        d = describe(ibroker.bootstrap, group)
        assert (d.group_state, d.assignment_epoch, d.group_epoch) == ("Assigning", 2, 3), d
        a2 = raw.request(hb_request(group, "a", 2, owned=kept))
        assert (a2.member_epoch, a2.assignment) == (2, None), a2  # B's partitions are not handed over yet

        wait_for(lambda: caught_up(ibroker.bootstrap, group), INTERVAL_MS / 1000 + TIMEOUT, interval=0.1,
                 message="the target computed after the interval")
        assert time.monotonic() - sent_b >= INTERVAL_MS / 1000  # never before the interval
        a3 = raw.request(hb_request(group, "a", 2, owned=kept))
        assert a3.member_epoch == 3 and parts(a3.assignment) == {0, 1, 2, 3}, a3


def test_with_a_zero_interval_every_epoch_change_is_assigned_at_once(ibroker: Broker) -> None:
    topic, group = new_name("t"), new_name("cg")
    create_topic(ibroker.bootstrap, topic, partitions=2)
    set_group_configs(ibroker.bootstrap, group, {"consumer.assignment.interval.ms": "0"})
    with rk.RawClient(ibroker.bootstrap) as raw:
        assert join(raw, group, "a", (topic,)).member_epoch == 1
        b = join(raw, group, "b", (topic,))
        assert b.member_epoch == 2, b  # computed for B's own join
        d = describe(ibroker.bootstrap, group)
        assert d.assignment_epoch == d.group_epoch == 2, d


def test_a_join_after_an_idle_interval_is_assigned_in_its_own_answer(ibroker: Broker) -> None:
    """Kafka computes on the heartbeat that finds the interval over: a join into a group whose last
    target is older than the interval is not delayed."""
    topic, group = new_name("t"), new_name("cg")
    create_topic(ibroker.bootstrap, topic, partitions=2)
    set_group_configs(ibroker.bootstrap, group, {"consumer.assignment.interval.ms": "500", **QUIET})
    with rk.RawClient(ibroker.bootstrap) as raw:
        a = join(raw, group, "a", (topic,))
        answered = time.monotonic()  # A's answer left after its target was computed
        assert a.member_epoch == 1
        wait_for(lambda: time.monotonic() - answered > 0.6, TIMEOUT, message="the interval to pass")
        b = join(raw, group, "b", (topic,))
        assert b.member_epoch == 2, b
        assert caught_up(ibroker.bootstrap, group)


def test_an_emptied_group_assigns_its_next_member_at_once(ibroker: Broker) -> None:
    """As Kafka's fencing of a group's last members: no interval runs from an emptied group."""
    topic, group = new_name("t"), new_name("cg")
    create_topic(ibroker.bootstrap, topic, partitions=2)
    set_group_configs(ibroker.bootstrap, group, {"consumer.assignment.interval.ms": str(INTERVAL_MS), **QUIET})
    with rk.RawClient(ibroker.bootstrap) as raw:
        assert join(raw, group, "a", (topic,)).member_epoch == 1
        assert raw.request(hb_request(group, "a", -1)).member_epoch == -1
        assert describe(ibroker.bootstrap, group).group_state == "Empty"
        b = join(raw, group, "b", (topic,))
        assert b.member_epoch == 3 and count(owned_of(b)) == 2, b


# ---------------------------------------------------------------------------------------------
# Real clients


def test_consumer_protocol_members_wait_for_the_interval_then_split(ibroker: Broker) -> None:
    """confluent-kafka consumers with group.protocol=consumer: the second member gets nothing while
    the group's interval (here Kafka's maximum, 15 s) holds the target back, the first keeps all;
    shortening the group's interval to Kafka's default lets the next heartbeat compute it."""
    topic, group = new_name("t"), new_name("cg")
    create_topic(ibroker.bootstrap, topic, partitions=6)
    set_group_configs(ibroker.bootstrap, group, {"consumer.assignment.interval.ms": "15000", **QUIET})
    a = Member(ibroker.bootstrap, group, [topic])
    b: Member | None = None
    try:
        wait_for(lambda: len(a.assignment()) == 6, TIMEOUT, message="the first member owns every partition")
        b = Member(ibroker.bootstrap, group, [topic])
        wait_for(lambda: len(describe(ibroker.bootstrap, group).members) == 2, TIMEOUT, message="the second joins")
        d = describe(ibroker.bootstrap, group)
        assert d.group_state == "Assigning" and d.assignment_epoch < d.group_epoch, d
        members = {m.member_id: m for m in d.members}
        assert sorted(len(parts(m.assignment)) for m in members.values()) == [0, 6], d
        assert sorted(len(parts(m.target_assignment)) for m in members.values()) == [0, 6], d
        assert len(a.assignment()) == 6 and b.assignment() == set()

        set_group_configs(ibroker.bootstrap, group, {"consumer.assignment.interval.ms": "1000"})

        def split() -> bool:
            sa, sb = a.assignment(), b.assignment()  # type: ignore[union-attr]
            return len(sa) == 3 and len(sb) == 3 and not sa & sb
        wait_for(split, TIMEOUT, message="two members own disjoint halves")
        assert describe(ibroker.bootstrap, group).group_state == "Stable"
    finally:
        if b is not None:
            b.stop()
        a.stop()


def test_consumer_protocol_members_balance_with_kafkas_default_interval(ibroker: Broker) -> None:
    """Three consumers joining together with the 1 s default: those joining within one interval
    start from the last target and are balanced later; no record is lost or consumed twice."""
    topic, group = new_name("t"), new_name("cg")
    create_topic(ibroker.bootstrap, topic, partitions=6)
    set_group_configs(ibroker.bootstrap, group, QUIET)
    members = [Member(ibroker.bootstrap, group, [topic]) for _ in range(3)]
    try:
        def balanced() -> bool:
            owned = [m.assignment() for m in members]
            return all(len(o) == 2 for o in owned) and len(set().union(*owned)) == 6
        wait_for(balanced, TIMEOUT, message="three members with two partitions each")
        d = describe(ibroker.bootstrap, group)
        assert d.group_state == "Stable" and d.assignment_epoch == d.group_epoch, d
        produce_sync(producer := _producer(ibroker.bootstrap), topic,
                     [{"value": f"r-{i}".encode(), "partition": i % 6} for i in range(60)])
        del producer
        wait_for(lambda: sum(len(m.records) for m in members) >= 60, TIMEOUT, message="every record consumed")
        seen = [(p, o) for m in members for _, p, o, _ in m.records]
        assert len(seen) == 60 and len(set(seen)) == 60
    finally:
        for m in members:
            m.stop()


def _producer(bootstrap: str) -> Any:
    from confluent_kafka import Producer
    return Producer(producer_conf(bootstrap))


def test_a_consumer_that_drops_a_topic_gives_it_up_within_the_interval(ibroker: Broker) -> None:
    """Kafka 4.3+: a subscription change bumps the group epoch, and while the interval holds the new
    target back, the member still gives up the topic it no longer subscribes to at once (its next
    heartbeat revokes it), rather than consuming it until the interval ends."""
    kept, dropped, group = new_name("keep"), new_name("drop"), new_name("cg")
    create_topic(ibroker.bootstrap, kept, partitions=2)
    create_topic(ibroker.bootstrap, dropped, partitions=2)
    set_group_configs(ibroker.bootstrap, group, {"consumer.assignment.interval.ms": "15000", **QUIET})
    conf = consumer_conf(ibroker.bootstrap, **{"group.id": group, "group.protocol": "consumer"})
    conf.pop("session.timeout.ms", None)  # a broker setting under the consumer protocol
    c = Consumer(conf)
    try:
        c.subscribe([kept, dropped])

        def owns(topics: set[str]) -> bool:
            c.poll(0.05)
            return {tp.topic for tp in c.assignment()} == topics and len(c.assignment()) == 2 * len(topics)
        wait_for(lambda: owns({kept, dropped}), TIMEOUT, interval=0.0, message="both topics assigned")
        c.subscribe([kept])
        wait_for(lambda: owns({kept}), TIMEOUT, interval=0.0, message="the dropped topic given up")
        d = describe(ibroker.bootstrap, group)
        assert d.group_state == "Assigning" and d.assignment_epoch < d.group_epoch, d  # the target is still held
        (member,) = d.members
        assert {tp.topic_name for tp in member.assignment.topic_partitions} == {kept}, d
    finally:
        c.close()


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
def test_a_classic_member_joining_a_consumer_group_waits_for_the_interval(ibroker: Broker, client: str) -> None:
    """JoinGroup on a consumer group (a mixed group): the classic member is answered at once, at the
    last target's epoch with nothing to own, while the interval holds the target back; once it is
    computed, Heartbeat tells the classic member to rejoin, and SyncGroup hands it its share."""
    topic, group = new_name("t"), new_name("cg")
    create_topic(ibroker.bootstrap, topic, partitions=6)
    set_group_configs(ibroker.bootstrap, group, {"consumer.assignment.interval.ms": "15000", **QUIET})
    modern = Member(ibroker.bootstrap, group, [topic])
    classic: Runner | None = None
    try:
        wait_for(lambda: len(modern.assignment()) == 6, TIMEOUT, message="the consumer-protocol member owns all")
        classic = Runner(lambda: CLIENTS[client](ibroker.bootstrap, group, topic), commit=False)
        classic.start()

        def classic_joined() -> bool:
            classic.check()  # type: ignore[union-attr]
            return any(m.member_type == 0 for m in describe(ibroker.bootstrap, group).members)
        wait_for(classic_joined, TIMEOUT, message="the classic member joins the consumer group")
        d = describe(ibroker.bootstrap, group)
        assert d.group_state == "Assigning" and d.assignment_epoch < d.group_epoch, d
        joined = next(m for m in d.members if m.member_type == 0)
        assert (joined.member_epoch, parts(joined.assignment), parts(joined.target_assignment)) == (
            d.assignment_epoch, set(), set()), d
        assert len(modern.assignment()) == 6

        set_group_configs(ibroker.bootstrap, group, {"consumer.assignment.interval.ms": "1000"})

        def split() -> bool:
            classic.check()  # type: ignore[union-attr]
            mine, theirs = modern.assignment(), classic.assigned  # type: ignore[union-attr]
            return len(mine) == 3 and len(theirs) == 3 and not {p for _, p in mine} & theirs
        wait_for(split, TIMEOUT, message="the classic and the consumer-protocol member own disjoint halves")
    finally:
        if classic is not None:
            classic.stop()
        modern.stop()


def _alter_group(bootstrap: str, group: str, value: str) -> None:
    a = admin(bootstrap)
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("consumer.assignment.interval.ms", value, incremental_operation=AlterConfigOpType.SET)])
    (fut,) = a.incremental_alter_configs([res], request_timeout=10).values()
    fut.result(timeout=15)


@pytest.mark.parametrize("value, fragment", [
    ("15001", "consumer.assignment.interval.ms must be less than or equal to group.consumer.max.assignment.interval.ms"),
    ("-1", "consumer.assignment.interval.ms"),
    ("soon", "consumer.assignment.interval.ms"),
])
def test_group_config_out_of_the_broker_bounds_is_invalid_config(ibroker: Broker, value: str, fragment: str) -> None:
    group = new_name("cg")
    with pytest.raises(KafkaException) as err:
        _alter_group(ibroker.bootstrap, group, value)
    e = err.value.args[0]
    assert e.code() == KafkaError.INVALID_CONFIG, e
    assert fragment in e.str(), e
    _alter_group(ibroker.bootstrap, group, "15000")  # the bound itself is allowed
    _alter_group(ibroker.bootstrap, group, "0")


def _describe_configs(bootstrap: str, resource: ConfigResource, names: list[str]) -> dict[str, Any]:
    a = admin(bootstrap)
    (fut,) = a.describe_configs([resource], request_timeout=10).values()
    entries = fut.result(timeout=15)
    return {n: entries[n] for n in names}


def test_describe_configs_shows_the_settings(ibroker: Broker) -> None:
    group = new_name("cg")
    broker = _describe_configs(ibroker.bootstrap, ConfigResource(ResourceType.BROKER, "1"), [
        "group.consumer.assignment.interval.ms", "group.consumer.min.assignment.interval.ms",
        "group.consumer.max.assignment.interval.ms"])
    assert {n: (e.value, e.is_read_only) for n, e in broker.items()} == {
        "group.consumer.assignment.interval.ms": ("1000", False),
        "group.consumer.min.assignment.interval.ms": ("0", True),
        "group.consumer.max.assignment.interval.ms": ("15000", True)}
    grp = ConfigResource(ResourceType.GROUP, group)
    entry = _describe_configs(ibroker.bootstrap, grp, ["consumer.assignment.interval.ms"])["consumer.assignment.interval.ms"]
    assert (entry.value, entry.is_default) == ("1000", True)
    _alter_group(ibroker.bootstrap, group, "2500")
    entry = _describe_configs(ibroker.bootstrap, grp, ["consumer.assignment.interval.ms"])["consumer.assignment.interval.ms"]
    assert (entry.value, entry.is_default) == ("2500", False)


@pytest.mark.needs_own_broker("changes a broker-wide setting")
def test_the_dynamic_broker_default_applies_to_groups_without_an_override(make_broker: Any) -> None:
    """group.consumer.assignment.interval.ms is dynamic (its bounds are not): a change through
    IncrementalAlterConfigs (here this broker's) holds the next target of a group without its own
    setting, and setting it to 0 lets the next heartbeat compute the pending target; a value
    outside the bounds is refused, with INVALID_REQUEST as Kafka answers a broker config that fails
    its checks."""
    b = make_broker({**FAST, "group.consumer.session.timeout.ms": "30000", "group.consumer.max.assignment.interval.ms":
                     "12000"})
    topic, group = new_name("t"), new_name("cg")
    create_topic(b.bootstrap, topic, partitions=2)
    a = admin(b.bootstrap)

    def alter_broker(value: str) -> None:
        res = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
            ConfigEntry("group.consumer.assignment.interval.ms", value, incremental_operation=AlterConfigOpType.SET)])
        (fut,) = a.incremental_alter_configs([res], request_timeout=10).values()
        fut.result(timeout=15)

    with pytest.raises(KafkaException) as err:
        alter_broker("12001")
    e = err.value.args[0]
    assert e.code() == KafkaError.INVALID_REQUEST, e
    assert ("group.consumer.assignment.interval.ms must be less than or equal to "
            "group.consumer.max.assignment.interval.ms") in e.str(), e
    alter_broker(str(INTERVAL_MS))
    with rk.RawClient(b.bootstrap) as raw:
        assert join(raw, group, "a", (topic,)).member_epoch == 1
        bj = join(raw, group, "b", (topic,))
        assert (bj.member_epoch, bj.assignment.topic_partitions) == (1, ()), bj
        assert describe(b.bootstrap, group).group_state == "Assigning"
        alter_broker("0")
        a2 = raw.request(hb_request(group, "a", 1))
        assert a2.error_code == 0
        assert caught_up(b.bootstrap, group)  # the heartbeat after the change computed the pending target


def test_a_shorter_interval_set_while_a_target_is_pending_takes_effect_at_once(ibroker: Broker) -> None:
    """The pending target's timer follows a config change: with the group's interval cut from 15 s
    to 0 while a join waits, the coordinator computes the target without waiting for the old due
    time, and without a heartbeat asking."""
    topic, group = new_name("t"), new_name("cg")
    create_topic(ibroker.bootstrap, topic, partitions=2)
    set_group_configs(ibroker.bootstrap, group, {"consumer.assignment.interval.ms": "15000", **QUIET})
    with rk.RawClient(ibroker.bootstrap) as raw:
        assert join(raw, group, "a", (topic,)).error_code == 0
        assert join(raw, group, "b", (topic,)).error_code == 0
        assert not caught_up(ibroker.bootstrap, group)  # b waits for the next target
        changed = time.monotonic()
        set_group_configs(ibroker.bootstrap, group, {"consumer.assignment.interval.ms": "0", **QUIET})
        wait_for(lambda: caught_up(ibroker.bootstrap, group), 12, interval=0.1,
                 message="the pending target computed after the interval was shortened")
        assert time.monotonic() - changed < 12  # well before the old 15 s were up
