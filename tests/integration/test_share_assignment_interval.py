"""share.assignment.interval.ms (Kafka 4.3+, KIP-1099's group.share.assignment.interval.ms): a share
group's target assignment is computed at most once per interval. Until the interval since the last
computation has passed, a heartbeat is answered from the last target at its epoch (a member that
joins meanwhile gets that epoch and no partitions); the pending target is then computed by the
coordinator without waiting for a heartbeat, and members take it at their next one. Raw
ShareGroupHeartbeat frames, as no client shows epochs; the group config goes through the
AdminClient."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from sharebroker.protocol.codec import build
from sharebroker.testing import wait_for
from sharebroker.testing.plugin import Broker
from tests.brokers import module_broker
from tests.integration import rawkafka as rk
from tests.integration.clients import admin, create_topic
from tests.integration.share_helpers import (
    FAST_SHARE_BROKER,
    ShareMember,
    code,
    describe_share_group,
    new_group,
    poll_once,
    produce_values,
    set_earliest,
    set_group_configs,
    share_consumer,
    topic_id,
)

TIMEOUT = 20.0
INTERVAL_MS = 8000  # long enough that the steps inside it run well within it on a loaded machine


@pytest.fixture(scope="module")
def ibroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    # FAST_SHARE_BROKER sets the broker-wide interval to 0; the groups here override it.
    yield from module_broker(tmp_path_factory, "share-interval", FAST_SHARE_BROKER)


@pytest.fixture
def members() -> Iterator[list[ShareMember]]:
    made: list[ShareMember] = []
    yield made
    for m in made:
        m.close()


def _member(bootstrap: str, group: str, made: list[ShareMember], member_id: str) -> ShareMember:
    m = ShareMember(bootstrap, group, member_id)
    made.append(m)
    return m


def test_a_member_joining_within_the_interval_waits_for_the_next_target(ibroker, members, topic_name):
    create_topic(ibroker.bootstrap, topic_name, partitions=2)
    tid = topic_id(ibroker.bootstrap, topic_name)
    group = new_group()
    # members that stay quiet through the interval must not expire meanwhile
    set_group_configs(ibroker.bootstrap, group, {"share.assignment.interval.ms": str(INTERVAL_MS),
                                                 "share.session.timeout.ms": "30000"})
    a = _member(ibroker.bootstrap, group, members, "member-a")
    b = _member(ibroker.bootstrap, group, members, "member-b")

    # The group's first target is computed at once (there is none before it): A's join answer
    # carries both partitions.
    sent_a = time.monotonic()
    r = a.heartbeat(0, [topic_name])
    assert code(r.error_code) == 0, r
    assert a.assignment == {tid: [0, 1]}, r
    first_epoch = r.member_epoch

    # B joins inside the interval: the group epoch moves, the target does not. B is answered at
    # the last target's epoch with no partitions (a join always carries its assignment).
    r = b.heartbeat(0, [topic_name])
    assert code(r.error_code) == 0, r
    assert r.member_epoch == first_epoch, r
    assert r.assignment is not None and list(r.assignment.topic_partitions) == [], r
    g = describe_share_group(ibroker.bootstrap, group)
    assert g.assignment_epoch == first_epoch < g.group_epoch, g

    # A's heartbeat at its current epoch: same epoch, no assignment sent (nothing changed for it).
    r = a.heartbeat(first_epoch, None)
    assert code(r.error_code) == 0, r
    assert (r.member_epoch, r.assignment) == (first_epoch, None), r
    r = b.heartbeat(first_epoch, None)
    assert (r.member_epoch, r.assignment) == (first_epoch, None), r

    # Once the interval has passed the coordinator computes the target itself (no heartbeat
    # needed): ShareGroupDescribe shows the assignment epoch caught up with the group epoch.
    def caught_up() -> bool:
        d = describe_share_group(ibroker.bootstrap, group)
        return d.assignment_epoch == d.group_epoch
    wait_for(caught_up, TIMEOUT, interval=0.1, message="the target computed after the interval")
    assert time.monotonic() - sent_a >= INTERVAL_MS / 1000  # never before the interval
    new_epoch = describe_share_group(ibroker.bootstrap, group).assignment_epoch
    assert new_epoch > first_epoch

    # Each member takes it at its next heartbeat: the new epoch and, as it changed, the assignment.
    ra = a.heartbeat(first_epoch, None)
    rb = b.heartbeat(first_epoch, None)
    assert (ra.member_epoch, rb.member_epoch) == (new_epoch, new_epoch), (ra, rb)
    assert ra.assignment is not None and rb.assignment is not None, (ra, rb)
    assert sorted(a.assignment[tid] + b.assignment[tid]) == [0, 1], (a.assignment, b.assignment)
    assert len(a.assignment[tid]) == len(b.assignment[tid]) == 1
    # and then nothing more is sent while nothing changes
    r = a.heartbeat(new_epoch, None)
    assert (r.member_epoch, r.assignment) == (new_epoch, None), r


def test_with_a_zero_interval_every_epoch_change_is_assigned_at_once(ibroker, members, topic_name):
    create_topic(ibroker.bootstrap, topic_name, partitions=2)
    tid = topic_id(ibroker.bootstrap, topic_name)
    group = new_group()
    set_group_configs(ibroker.bootstrap, group, {"share.assignment.interval.ms": "0"})
    a = _member(ibroker.bootstrap, group, members, "member-a")
    b = _member(ibroker.bootstrap, group, members, "member-b")
    assert code(a.heartbeat(0, [topic_name]).error_code) == 0
    r = b.heartbeat(0, [topic_name])
    assert code(r.error_code) == 0, r
    assert len(b.assignment[tid]) == 1, r  # computed for B's own join
    g = describe_share_group(ibroker.bootstrap, group)
    assert g.assignment_epoch == g.group_epoch == r.member_epoch, g


def test_the_interval_after_an_idle_period_does_not_delay_a_join(ibroker, members, topic_name):
    """A join into a group whose last target is older than the interval is assigned in its own
    answer, as Kafka computes it on that heartbeat."""
    create_topic(ibroker.bootstrap, topic_name, partitions=2)
    tid = topic_id(ibroker.bootstrap, topic_name)
    group = new_group()
    set_group_configs(ibroker.bootstrap, group, {"share.assignment.interval.ms": "500"})
    a = _member(ibroker.bootstrap, group, members, "member-a")
    b = _member(ibroker.bootstrap, group, members, "member-b")
    assert code(a.heartbeat(0, [topic_name]).error_code) == 0
    assert a.assignment == {tid: [0, 1]}
    # Counted from A's answer, which left after its target was computed (from before A's request
    # the broker could take longer than the wait under load and the interval not yet be over).
    answered = time.monotonic()
    wait_for(lambda: time.monotonic() - answered > 0.6, TIMEOUT, message="the interval to pass")
    r = b.heartbeat(0, [topic_name])
    assert code(r.error_code) == 0, r
    assert len(b.assignment.get(tid, [])) == 1, r


def test_share_consumers_joining_together_are_balanced_with_kafkas_default_interval(ibroker, topic_name):
    """Real clients (librdkafka's ShareConsumer) with the 1 s default: members that join within
    one interval start from the last target and are balanced at a later heartbeat; every record
    is delivered once."""
    create_topic(ibroker.bootstrap, topic_name, partitions=3)
    group = new_group()
    set_earliest(ibroker.bootstrap, group, share_assignment_interval_ms="1000")
    consumers = [share_consumer(ibroker.bootstrap, group, [topic_name]) for _ in range(3)]
    try:
        def balanced() -> bool:
            for c in consumers:
                poll_once(c, 0.05)  # the clients heartbeat from their own threads; this drives the joins
            g = describe_share_group(ibroker.bootstrap, group)
            parts = sorted(sorted(p for tp in m.assignment.topic_partitions for p in tp.partitions) for m in g.members)
            return parts == [[0], [1], [2]] and g.assignment_epoch == g.group_epoch
        wait_for(balanced, TIMEOUT, interval=0.1, message="three members with one partition each")
        sent = [f"r-{i}".encode() for i in range(60)]
        produce_values(ibroker.bootstrap, topic_name, sent)
        got: list[bytes] = []

        def drained() -> bool:
            for c in consumers:
                got.extend(m.value() for m in poll_once(c, 0.1))
            return len(got) >= len(sent)
        wait_for(drained, TIMEOUT, interval=0.0, message="every record delivered")
        assert sorted(got) == sorted(sent)
    finally:
        for c in consumers:
            c.close()


def _alter_group(bootstrap: str, group: str, name: str, value: str) -> None:
    a = admin(bootstrap)
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
    (fut,) = a.incremental_alter_configs([res], request_timeout=10).values()
    fut.result(timeout=15)


@pytest.mark.parametrize("value, fragment", [
    ("15001", "share.assignment.interval.ms must be less than or equal to group.share.max.assignment.interval.ms"),
    ("-1", "share.assignment.interval.ms"),
    ("soon", "share.assignment.interval.ms"),
])
def test_group_config_out_of_the_broker_bounds_is_invalid_config(ibroker, value, fragment):
    """Refused when set, as Kafka's GroupConfig.validate, through IncrementalAlterConfigs and the
    legacy AlterConfigs alike (a value stored before the bounds narrowed is capped instead: see
    test_values_outside_bounds_narrowed_by_a_restart_are_capped)."""
    group = new_group()
    with pytest.raises(KafkaException) as err:
        _alter_group(ibroker.bootstrap, group, "share.assignment.interval.ms", value)
    e = err.value.args[0]
    assert e.code() == KafkaError.INVALID_CONFIG, e
    assert fragment in e.str(), e
    with rk.RawClient(ibroker.bootstrap) as raw:  # the legacy AlterConfigs (the client's is deprecated)
        (r,) = raw.request(build(rk.req_cls(33, 2), {"resources": [{"resource_type": 32, "resource_name": group, "configs": [
            {"name": "share.assignment.interval.ms", "value": value}]}], "validate_only": False})).responses
    assert r.error_code == KafkaError.INVALID_CONFIG and fragment in r.error_message, r
    _alter_group(ibroker.bootstrap, group, "share.assignment.interval.ms", "15000")  # the bound itself is allowed


def _alter_broker(bootstrap: str, configs: dict[str, str | None]) -> None:
    """IncrementalAlterConfigs on this broker (node 1): SET, or DELETE for None."""
    a = admin(bootstrap)
    res = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry(n, v, incremental_operation=AlterConfigOpType.SET if v is not None else AlterConfigOpType.DELETE)
        for n, v in configs.items()])
    (fut,) = a.incremental_alter_configs([res], request_timeout=10).values()
    fut.result(timeout=15)


def _broker_config_error(bootstrap: str, configs: dict[str, str | None]) -> KafkaError:
    with pytest.raises(KafkaException) as err:
        _alter_broker(bootstrap, configs)
    return err.value.args[0]


def test_a_dynamic_broker_interval_outside_its_bounds_is_invalid_request(ibroker):
    """group.share.assignment.interval.ms is dynamic, its bounds are not. Kafka checks a change by
    building the whole broker config, whose start-up check refuses the value, and answers a broker
    config that fails its checks with INVALID_REQUEST (ConfigAdminManager, KAFKA-13609)."""
    e = _broker_config_error(ibroker.bootstrap, {"group.share.assignment.interval.ms": "15001"})
    assert e.code() == KafkaError.INVALID_REQUEST, e
    assert "group.share.assignment.interval.ms must be less than or equal to group.share.max.assignment.interval.ms" \
        in e.str(), e


def _describe(bootstrap: str, resource: ConfigResource) -> dict[str, Any]:
    a = admin(bootstrap)
    (fut,) = a.describe_configs([resource], request_timeout=10).values()
    return fut.result(timeout=15)


@pytest.mark.needs_own_broker("restarts its broker with other bounds")
def test_values_outside_bounds_narrowed_by_a_restart_are_capped(make_broker):
    """As Kafka when bounds narrow after values were stored: a dynamic broker interval is capped into
    them with a warning as the stored dynamic configs are applied (the others stay in force), and a
    group's stored interval takes effect capped with a warning (GroupConfig.evaluate). The stored
    values stay as set, and are checked as they are when a config of theirs changes next: as in
    Kafka, until they are set within the bounds such a change is refused."""
    broker = make_broker(FAST_SHARE_BROKER)
    b = broker.bootstrap
    group = new_group()
    _alter_broker(b, {"group.share.assignment.interval.ms": "12000", "group.consumer.assignment.interval.ms": "700"})
    set_group_configs(b, group, {"share.assignment.interval.ms": "14000"})
    broker.stop()
    broker.overrides["group.share.max.assignment.interval.ms"] = "5000"
    broker.start()

    (capped,) = broker.log_events("dynamic broker config capped to its bounds")
    assert (capped["config"], capped["value"], capped["effective"]) == ("group.share.assignment.interval.ms", 12000, 5000)
    described = _describe(b, ConfigResource(ResourceType.BROKER, "1"))
    assert described["group.share.assignment.interval.ms"].value == "5000"
    assert described["group.consumer.assignment.interval.ms"].value == "700"  # the rest of the dynamic configs
    warned = [e for e in broker.log_events("group config capped to the broker's bounds") if e["group"] == group]
    assert [(e["config"], e["value"], e["effective"]) for e in warned][:1] == [("share.assignment.interval.ms", 14000, 5000)]
    assert _describe(b, ConfigResource(ResourceType.GROUP, group))["share.assignment.interval.ms"].value == "14000"

    e = _broker_config_error(b, {"group.consumer.assignment.interval.ms": "800"})
    assert e.code() == KafkaError.INVALID_REQUEST, e
    assert "group.share.assignment.interval.ms must be less than or equal to" in e.str(), e
    with pytest.raises(KafkaException) as err:
        set_group_configs(b, group, {"share.session.timeout.ms": "5000"})
    assert err.value.args[0].code() == KafkaError.INVALID_CONFIG, err.value
    assert "share.assignment.interval.ms must be less than or equal to" in err.value.args[0].str()

    _alter_broker(b, {"group.share.assignment.interval.ms": "4000"})
    _alter_broker(b, {"group.consumer.assignment.interval.ms": "800"})
    set_group_configs(b, group, {"share.assignment.interval.ms": "4500", "share.session.timeout.ms": "5000"})
