"""Share-group dead-letter queues (KIP-1191, Kafka 4.4's ShareConsumerDLQTest in substance) through
confluent_kafka's ShareConsumer with explicit acknowledgement: rejected records and records released
past share.delivery.count.limit land on the group's DLQ topic exactly once, with Kafka's
``__dlq.errors.*`` headers (and the original record when copying is on); each misconfiguration
archives the records with one log line naming why; max.message.bytes splits and trims DLQ writes;
the DLQ follows the share.version feature."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, AcknowledgeType, Consumer, Producer, TopicPartition

from sharebroker.testing import BrokerProcess, wait_for
from sharebroker.testing.plugin import Broker
from tests.brokers import module_broker
from tests.integration import rawkafka as rk
from tests.integration.clients import admin, create_topic, producer_conf, produce_sync
from tests.integration.share_helpers import (
    FAST_SHARE_BROKER,
    new_group,
    poll_for,
    poll_once,
    set_earliest,
    set_group_configs,
    share_consumer,
)

TIMEOUT = 30.0
DLQ_ENABLED = {"errors.deadletterqueue.group.enable": "true"}


@pytest.fixture(scope="module")
def sbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from module_broker(tmp_path_factory, "dlq-broker", FAST_SHARE_BROKER)


# ---- helpers ------------------------------------------------------------------------------------


def produce(bootstrap: str, topic: str, n: int, *, partition: int = 0, value: bytes | None = None,
            headers: list[tuple[str, bytes]] | None = None, timestamp: int | None = None) -> None:
    items: list[dict[str, Any]] = []
    for i in range(n):
        item: dict[str, Any] = {"key": f"key-{i}".encode(), "value": value if value is not None else f"value-{i}".encode(),
                                "partition": partition}
        if headers:
            item["headers"] = headers
        if timestamp is not None:
            item["timestamp"] = timestamp
        items.append(item)
    produce_sync(Producer(producer_conf(bootstrap)), topic, items)


def acknowledge_until(bootstrap: str, group: str, topic: str, action: Any, done: Any, *,
                      timeout: float = TIMEOUT) -> list[tuple[int, int]]:
    """Poll with an explicit-ack ShareConsumer, acknowledge each record with action(record) and
    commit, until done(acknowledged so far); returns (partition, offset) acknowledged."""
    seen: list[tuple[int, int]] = []
    c = share_consumer(bootstrap, group, [topic], explicit=True)
    try:
        deadline = time.monotonic() + timeout
        while not done(seen):
            assert time.monotonic() < deadline, f"timed out; acknowledged {seen}"
            msgs = poll_once(c, 0.5)
            for m in msgs:
                c.acknowledge(m, action(m))
                seen.append((m.partition(), m.offset()))
            if msgs:
                c.commit_sync()
    finally:
        with contextlib.suppress(Exception):
            c.close()
    return seen


def reject_all(bootstrap: str, group: str, topic: str, n: int) -> None:
    acknowledge_until(bootstrap, group, topic, lambda m: AcknowledgeType.REJECT, lambda seen: len(seen) >= n)


def end_offset(bootstrap: str, topic: str, partition: int = 0) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "dlq-reader", "log_level": 3})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
    finally:
        c.close()


def read_dlq(bootstrap: str, topic: str, n: int, partition: int = 0, timeout: float = TIMEOUT) -> list[Any]:
    """Exactly n records of the DLQ partition: wait for n, then the end offset must be n."""
    wait_for(lambda: end_offset(bootstrap, topic, partition) >= n, timeout, message=f"{n} records on {topic}-{partition}")
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": new_group("dlq-read"), "log_level": 3,
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        got: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(got) < n:
            assert time.monotonic() < deadline, f"read {len(got)} of {n} from {topic}"
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m)
    finally:
        c.close()
    assert end_offset(bootstrap, topic, partition) == n, "more DLQ records than expected"
    return got


def hdrs(msg: Any) -> dict[str, bytes]:
    return {k: v for k, v in (msg.headers() or [])}


def source_offsets(msgs: Sequence[Any]) -> list[int]:
    return sorted(int(hdrs(m)["__dlq.errors.offset"]) for m in msgs)


def setup(bootstrap: str, *, dlq_partitions: int = 1, source_partitions: int = 1, dlq_config: dict[str, str] | None = None,
          group_configs: dict[str, str] | None = None, create_dlq: bool = True) -> tuple[str, str, str]:
    group = new_group("dlqg")
    source = new_group("src")
    dlq = "dlq." + new_group("t")
    create_topic(bootstrap, source, source_partitions)
    if create_dlq:
        create_topic(bootstrap, dlq, dlq_partitions, DLQ_ENABLED if dlq_config is None else dlq_config)
    set_earliest(bootstrap, group)
    set_group_configs(bootstrap, group, {"errors.deadletterqueue.topic.name": dlq, **(group_configs or {})})
    return group, source, dlq


def assert_not_redelivered(bootstrap: str, group: str, topic: str) -> None:
    c = share_consumer(bootstrap, group, [topic], explicit=True)
    try:
        assert poll_for(c, 2.0) == []
    finally:
        c.close()


def log_lines(broker: Broker, event: str) -> list[dict[str, Any]]:
    if not isinstance(broker, BrokerProcess):
        pytest.skip("needs the broker's log")
    return broker.log_events(event)


# ---- the core path ------------------------------------------------------------------------------


def test_rejected_records_written_to_dlq_with_headers_only(sbroker: Broker) -> None:
    bs = sbroker.bootstrap
    group, source, dlq = setup(bs)
    produce(bs, source, 5)
    reject_all(bs, group, source, 5)
    msgs = read_dlq(bs, dlq, 5)
    assert source_offsets(msgs) == [0, 1, 2, 3, 4]
    for m in msgs:
        assert m.key() is None and m.value() is None
        h = hdrs(m)
        assert h["__dlq.errors.group"] == group.encode()
        assert h["__dlq.errors.topic"] == source.encode()
        assert h["__dlq.errors.partition"] == b"0"
        assert h["__dlq.errors.delivery.count"] == b"1"
        assert h["__dlq.errors.message"] == b"Offset rejected by client."
    assert_not_redelivered(bs, group, source)


def test_copy_record_enabled_copies_key_value_headers_and_timestamp(sbroker: Broker) -> None:
    bs = sbroker.bootstrap
    group, source, dlq = setup(bs, group_configs={"errors.deadletterqueue.copy.record.enable": "true"})
    ts = int(time.time() * 1000) - 60_000
    produce(bs, source, 3, headers=[("trace", b"abc")], timestamp=ts)
    reject_all(bs, group, source, 3)
    msgs = read_dlq(bs, dlq, 3)
    by_offset = {int(hdrs(m)["__dlq.errors.offset"]): m for m in msgs}
    for i in range(3):
        m = by_offset[i]
        assert m.key() == f"key-{i}".encode() and m.value() == f"value-{i}".encode()
        assert hdrs(m)["trace"] == b"abc"
        assert m.timestamp()[1] == ts


def test_released_records_past_the_delivery_limit_go_to_dlq(sbroker: Broker) -> None:
    bs = sbroker.bootstrap
    group, source, dlq = setup(bs, group_configs={"share.delivery.count.limit": "2"})
    produce(bs, source, 5)
    acknowledge_until(bs, group, source, lambda m: AcknowledgeType.RELEASE,
                      lambda seen: end_offset(bs, dlq) >= 5)
    msgs = read_dlq(bs, dlq, 5)
    assert source_offsets(msgs) == [0, 1, 2, 3, 4]
    for m in msgs:
        assert hdrs(m)["__dlq.errors.delivery.count"] == b"2"
        assert hdrs(m)["__dlq.errors.message"] == b"Offset delivery count exceeded the threshold."


def test_interleaved_accept_release_reject_ranges_each_dlq_offset_once(sbroker: Broker) -> None:
    bs = sbroker.bootstrap
    group, source, dlq = setup(bs, group_configs={"share.delivery.count.limit": "2"})
    n = 12
    produce(bs, source, n)
    action = {0: AcknowledgeType.REJECT, 1: AcknowledgeType.RELEASE, 2: AcknowledgeType.ACCEPT}
    expected = [o for o in range(n) if o % 3 != 2]
    acknowledge_until(bs, group, source, lambda m: action[m.offset() % 3],
                      lambda seen: end_offset(bs, dlq) >= len(expected))
    msgs = read_dlq(bs, dlq, len(expected))
    assert source_offsets(msgs) == expected


def test_dlq_partition_is_source_partition_modulo_dlq_partitions(sbroker: Broker) -> None:
    bs = sbroker.bootstrap
    group, source, dlq = setup(bs, source_partitions=3, dlq_partitions=2)
    for p in range(3):
        produce(bs, source, 2, partition=p)
    reject_all(bs, group, source, 6)
    p0 = read_dlq(bs, dlq, 4, partition=0)  # source partitions 0 and 2
    p1 = read_dlq(bs, dlq, 2, partition=1)  # source partition 1
    assert sorted(hdrs(m)["__dlq.errors.partition"] for m in p0) == [b"0", b"0", b"2", b"2"]
    assert sorted(hdrs(m)["__dlq.errors.partition"] for m in p1) == [b"1", b"1"]


def test_dlq_turned_off_by_an_empty_topic_name(sbroker: Broker) -> None:
    bs = sbroker.bootstrap
    group, source, dlq = setup(bs)
    produce(bs, source, 3)
    reject_all(bs, group, source, 3)
    read_dlq(bs, dlq, 3)
    set_group_configs(bs, group, {"errors.deadletterqueue.topic.name": ""})
    produce(bs, source, 3)
    reject_all(bs, group, source, 3)
    assert_not_redelivered(bs, group, source)
    assert end_offset(bs, dlq) == 3


def test_dlq_topic_name_must_not_start_with_two_underscores(sbroker: Broker) -> None:
    a = admin(sbroker.bootstrap)
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
    res = ConfigResource(ResourceType.GROUP, new_group("dlqg"), incremental_configs=[
        ConfigEntry("errors.deadletterqueue.topic.name", "__dlq", incremental_operation=AlterConfigOpType.SET)])
    (fut,) = a.incremental_alter_configs([res], request_timeout=10).values()
    with pytest.raises(Exception) as info:
        fut.result(timeout=15)
    assert "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'" in str(info.value)


# ---- misconfiguration: archived, one log line naming why ----------------------------------------


@pytest.mark.parametrize("case", ["missing-topic", "not-enabled", "wrong-prefix"])
def test_misconfigured_dlq_archives_with_one_log_line(sbroker: Broker, case: str) -> None:
    bs = sbroker.bootstrap
    if case == "missing-topic":
        group, source, dlq = setup(bs, create_dlq=False)
        why = "DLQ topic does not exist and auto create is disabled on cluster"
    elif case == "not-enabled":
        group, source, dlq = setup(bs, dlq_config={})
        why = "DLQ is not enabled on configured DLQ topic"
    else:
        group, source, _ = setup(bs)
        dlq = "queue-of-the-dead-" + new_group("x")
        create_topic(bs, dlq, 1, DLQ_ENABLED)
        set_group_configs(bs, group, {"share.auto.offset.reset": "earliest", "errors.deadletterqueue.topic.name": dlq})
        why = "does not comply with the DLQ topic prefix"
    produce(bs, source, 3)
    reject_all(bs, group, source, 3)
    assert_not_redelivered(bs, group, source)
    if case == "missing-topic":
        assert dlq not in admin(bs).list_topics(timeout=10).topics
    else:
        assert end_offset(bs, dlq) == 0
    lines = [e for e in log_lines(sbroker, "DLQ write skipped, records archived") if e.get("group") == group]
    assert len(lines) >= 1 and all(why in e["reason"] for e in lines), lines
    assert sum(1 for e in lines) == len({e["offsets"] for e in lines})  # one line per round, never per record


# ---- max.message.bytes ---------------------------------------------------------------------------


def dlq_batches(bootstrap: str, topic: str) -> list[Any]:
    with rk.RawClient(bootstrap) as raw:
        return rk.fetch_all_batches(raw, topic, 0)


def test_dlq_writes_split_to_respect_max_message_bytes_changed_at_run_time(sbroker: Broker) -> None:
    bs = sbroker.bootstrap
    limit = 100_000
    group, source, dlq = setup(bs, dlq_config={**DLQ_ENABLED, "max.message.bytes": str(limit)},
                               group_configs={"errors.deadletterqueue.copy.record.enable": "true"})
    payload = b"x" * (limit - 2_000)
    produce(bs, source, 3, value=payload)
    reject_all(bs, group, source, 3)
    msgs = read_dlq(bs, dlq, 3)
    assert all(m.value() == payload for m in msgs)
    assert len(dlq_batches(bs, dlq)) == 3  # one record per DLQ write: two never fit

    a = admin(bs)
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
    res = ConfigResource(ResourceType.TOPIC, dlq, incremental_configs=[
        ConfigEntry("max.message.bytes", str(limit * 6), incremental_operation=AlterConfigOpType.SET)])
    (fut,) = a.incremental_alter_configs([res], request_timeout=10).values()
    fut.result(timeout=15)
    produce(bs, source, 3, value=payload)
    reject_all(bs, group, source, 3)
    msgs = read_dlq(bs, dlq, 6)
    assert source_offsets(msgs) == [0, 1, 2, 3, 4, 5]
    assert len(dlq_batches(bs, dlq)) == 4  # the second three in one write


def test_copied_record_too_big_for_the_dlq_topic_is_written_with_headers_only(sbroker: Broker) -> None:
    bs = sbroker.bootstrap
    limit = 20_000
    group, source, dlq = setup(bs, dlq_config={**DLQ_ENABLED, "max.message.bytes": str(limit)},
                               group_configs={"errors.deadletterqueue.copy.record.enable": "true"})
    produce(bs, source, 2, value=b"y" * (limit + 1_000))
    reject_all(bs, group, source, 2)
    msgs = read_dlq(bs, dlq, 2)
    assert all(m.key() is None and m.value() is None for m in msgs)
    assert source_offsets(msgs) == [0, 1]


# ---- the share.version feature -------------------------------------------------------------------


def update_feature(bootstrap: str, level: int, upgrade_type: int) -> Any:
    cls = rk.req_cls(57, 1)
    ucls = rk._nested(cls, "feature_updates")
    with rk.RawClient(bootstrap) as raw:
        return raw.request(cls(feature_updates=(ucls(feature="share.version", max_version_level=level,
                                                     upgrade_type=upgrade_type),), validate_only=False))


def finalized_share_version(bootstrap: str) -> int:
    with rk.RawClient(bootstrap) as raw:
        resp = raw.request(rk.api_versions_request(3))
    (f,) = [f for f in resp.finalized_features if f.name == "share.version"]
    return int(f.max_version_level)


@pytest.mark.needs_own_broker("downgrades share.version")
def test_share_version_1_turns_the_dlq_off_and_2_back_on(make_broker: Any) -> None:
    broker = make_broker(FAST_SHARE_BROKER)
    bs = broker.bootstrap
    assert finalized_share_version(bs) == 2  # a new data directory: Kafka 4.4's default
    refused = update_feature(bs, 1, 1)
    (r,) = refused.results
    assert int(r.error_code) == 95  # INVALID_UPDATE_VERSION
    assert "Can't downgrade the version of this feature without setting the upgrade type" in r.error_message
    (r,) = update_feature(bs, 1, 2).results
    assert int(r.error_code) == 0, r
    assert finalized_share_version(bs) == 1
    group, source, dlq = setup(bs)
    produce(bs, source, 2)
    reject_all(bs, group, source, 2)
    assert_not_redelivered(bs, group, source)
    assert end_offset(bs, dlq) == 0
    broker.restart()  # durable
    assert finalized_share_version(bs) == 1
    (r,) = update_feature(bs, 2, 1).results
    assert int(r.error_code) == 0, r
    produce(bs, source, 2)
    reject_all(bs, group, source, 2)
    assert source_offsets(read_dlq(bs, dlq, 2)) == [2, 3]


@pytest.mark.needs_own_broker("turns DLQ auto-creation on")
def test_auto_created_dlq_topic(make_broker: Any) -> None:
    broker = make_broker({**FAST_SHARE_BROKER, "errors.deadletterqueue.auto.create.topics.enable": "true"})
    bs = broker.bootstrap
    group, source, dlq = setup(bs, create_dlq=False)
    produce(bs, source, 4)
    reject_all(bs, group, source, 4)
    assert source_offsets(read_dlq(bs, dlq, 4)) == [0, 1, 2, 3]
    a = admin(bs)
    from confluent_kafka.admin import ConfigResource, ResourceType
    (fut,) = a.describe_configs([ConfigResource(ResourceType.TOPIC, dlq)], request_timeout=10).values()
    assert fut.result(timeout=15)["errors.deadletterqueue.group.enable"].value == "true"


@pytest.mark.needs_own_broker("kills its broker at a crash point")
@pytest.mark.parametrize("point", ["dlq-before-write", "dlq-after-write"])
def test_kill_between_archiving_and_archived_writes_each_record_once(
        tmp_path: Any, point: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHAREBROKER_TEST_CRASH_POINT", point)
    broker = BrokerProcess(tmp_path / "data", FAST_SHARE_BROKER).start()
    try:
        bs = broker.bootstrap
        group, source, dlq = setup(bs)
        produce(bs, source, 5)
        c = share_consumer(bs, group, [source], explicit=True)
        got: list[Any] = []
        deadline = time.monotonic() + TIMEOUT
        while len(got) < 5:
            assert time.monotonic() < deadline
            got += poll_once(c, 0.5)
        for m in got:
            c.acknowledge(m, AcknowledgeType.REJECT)
        with contextlib.suppress(Exception):
            c.commit_sync()  # answered before the crash point, or lost with the process
        wait_for(lambda: not broker.alive(), TIMEOUT, message="the broker to kill itself at the crash point")
        with contextlib.suppress(Exception):
            c.close()
        monkeypatch.delenv("SHAREBROKER_TEST_CRASH_POINT")
        broker.start()
        # A fetch loads the share partition, whose leader finishes the interrupted DLQ flow.
        assert_not_redelivered(bs, group, source)
        msgs = read_dlq(bs, dlq, 5)
        assert source_offsets(msgs) == [0, 1, 2, 3, 4]  # none lost, none twice
    finally:
        broker.kill()


@pytest.mark.needs_own_broker("changes the DLQ cluster configs")
def test_dlq_cluster_configs_are_dynamic_and_validated(make_broker: Any) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    broker = make_broker(FAST_SHARE_BROKER)
    bs = broker.bootstrap
    a = admin(bs)

    def alter(name: str, value: str) -> None:
        res = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
        (fut,) = a.incremental_alter_configs([res], request_timeout=10).values()
        fut.result(timeout=15)

    with pytest.raises(Exception) as info:
        alter("errors.deadletterqueue.auto.create.topics.enable", "maybe")
    assert ("Invalid value maybe for configuration errors.deadletterqueue.auto.create.topics.enable: "
            "Expected value to be either true or false") in str(info.value)
    # Any name once the prefix is "" (cluster-wide, as kafka-configs.sh --entity-default sets it),
    # and a missing topic created once auto-creation is on.
    from tests.integration.test_cli import cli, ok
    ok(cli("configs", "--bootstrap-server", bs, "--broker-defaults", "--alter", "--add-config",
           "errors.deadletterqueue.topic.name.prefix="))
    alter("errors.deadletterqueue.auto.create.topics.enable", "true")
    group, source, _ = setup(bs, create_dlq=False)
    graveyard = new_group("graveyard")
    set_group_configs(bs, group, {"errors.deadletterqueue.topic.name": graveyard})
    produce(bs, source, 2)
    reject_all(bs, group, source, 2)
    assert source_offsets(read_dlq(bs, graveyard, 2)) == [0, 1]
