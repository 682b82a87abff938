"""Admin APIs through confluent_kafka.admin.AdminClient: topics, partitions, configs, cluster,
and Kafka's error codes for every refusal."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewPartitions,
                                   NewTopic, ResourceType)

from kio.schema.errors import ErrorCode

from tests.integration import rawkafka as rk
from sharebroker.testing import wait_for
from tests.integration.clients import admin, consumer_conf, produce_sync, producer_conf
from sharebroker.protocol.codec import build

TIMEOUT = 15


def _error_code(fut) -> int:
    with pytest.raises(KafkaException) as info:
        fut.result(timeout=TIMEOUT)
    err = info.value.args[0]
    assert isinstance(err, KafkaError), err
    return err.code()


def _src(entry: ConfigEntry) -> int:
    return getattr(entry.source, "value", entry.source)


def _uuid_of(cuuid) -> uuid.UUID:
    msb = cuuid.get_most_significant_bits() & (2**64 - 1)
    lsb = cuuid.get_least_significant_bits() & (2**64 - 1)
    return uuid.UUID(int=(msb << 64) | lsb)


def _topic_id(a, name: str) -> uuid.UUID:
    desc = a.describe_topics(TopicCollection([name]), request_timeout=10)[name].result(timeout=TIMEOUT)
    return _uuid_of(desc.topic_id)


def _describe(a, rtype: ResourceType, name: str) -> dict[str, ConfigEntry]:
    (fut,) = a.describe_configs([ConfigResource(rtype, name)], request_timeout=10).values()
    return fut.result(timeout=TIMEOUT)


def _incremental(a, rtype: ResourceType, name: str, *entries: tuple[str, str | None, AlterConfigOpType]):
    res = ConfigResource(rtype, name, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=op) for k, v, op in entries])
    (fut,) = a.incremental_alter_configs([res], request_timeout=10).values()
    return fut


def _create(a, *topics: NewTopic):
    futs = a.create_topics(list(topics), request_timeout=10)
    return [futs[t.topic] for t in topics]


# ---------------------------------------------------------------------------------------------


def test_create_topic_metadata_and_configs(broker, topic_name):
    a = admin(broker.bootstrap)
    (fut,) = _create(a, NewTopic(topic_name, num_partitions=3, replication_factor=1,
                                 config={"retention.ms": "12345"}))
    assert fut.result(timeout=TIMEOUT) is None

    md = a.list_topics(topic=topic_name, timeout=10)
    tmd = md.topics[topic_name]
    assert tmd.error is None, tmd.error
    assert sorted(tmd.partitions) == [0, 1, 2]
    for pmd in tmd.partitions.values():
        assert pmd.error is None
        assert pmd.leader == 1 and list(pmd.replicas) == [1] and list(pmd.isrs) == [1]
    assert [b.id for b in md.brokers.values()] == [1]

    tid = _topic_id(a, topic_name)
    assert tid.int != 0
    # Metadata v12 over the wire carries the same non-zero topic id
    with rk.RawClient(broker.bootstrap) as raw:
        resp = raw.request(rk.metadata_request([topic_name], version=12))
    (t,) = resp.topics
    assert int(t.error_code) == 0 and t.name == topic_name
    assert t.topic_id == tid
    assert len(t.partitions) == 3

    desc = a.describe_topics(TopicCollection([topic_name]), request_timeout=10)[topic_name].result(timeout=TIMEOUT)
    assert len(desc.partitions) == 3 and desc.name == topic_name

    configs = _describe(a, ResourceType.TOPIC, topic_name)
    assert configs["retention.ms"].value == "12345"
    assert _src(configs["retention.ms"]) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not configs["retention.ms"].is_default
    assert configs["cleanup.policy"].value == "delete"
    assert _src(configs["cleanup.policy"]) == ConfigSource.DEFAULT_CONFIG.value
    assert configs["cleanup.policy"].is_default
    assert configs["max.message.bytes"].value == "1048588"
    assert configs["segment.bytes"].value == "1073741824"

    # SET then DELETE
    assert _incremental(a, ResourceType.TOPIC, topic_name,
                        ("retention.ms", "54321", AlterConfigOpType.SET),
                        ("cleanup.policy", "compact", AlterConfigOpType.SET)).result(timeout=TIMEOUT) is None
    configs = _describe(a, ResourceType.TOPIC, topic_name)
    assert configs["retention.ms"].value == "54321"
    assert configs["cleanup.policy"].value == "compact"
    assert _src(configs["cleanup.policy"]) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert _incremental(a, ResourceType.TOPIC, topic_name,
                        ("retention.ms", None, AlterConfigOpType.DELETE),
                        ("cleanup.policy", None, AlterConfigOpType.DELETE)).result(timeout=TIMEOUT) is None
    configs = _describe(a, ResourceType.TOPIC, topic_name)
    assert configs["retention.ms"].value == "604800000"
    assert _src(configs["retention.ms"]) == ConfigSource.DEFAULT_CONFIG.value
    assert configs["cleanup.policy"].value == "delete"


def _metadata_by_id(raw, entries: list[tuple[uuid.UUID | None, str | None]], version: int = 12):
    cls = rk.req_cls(3, version)
    topic_cls = rk._nested(cls, "topics")
    return raw.request(cls(topics=tuple(topic_cls(topic_id=tid, name=name) for tid, name in entries),
                           allow_auto_topic_creation=True, include_topic_authorized_operations=False))


def test_metadata_by_topic_id_ignores_the_name_java_sends(broker, topic_name):
    """Kafka's Java client asks Metadata v12+ by id with name "" (not null); Kafka resolves the id
    and ignores names as soon as one entry has an id. Unknown ids: UNKNOWN_TOPIC_ID, listed first."""
    a = admin(broker.bootstrap)
    (fut,) = _create(a, NewTopic(topic_name, num_partitions=2, replication_factor=1))
    fut.result(timeout=TIMEOUT)
    tid = _topic_id(a, topic_name)
    unknown = uuid.uuid4()
    with rk.RawClient(broker.bootstrap) as raw:
        for version in (12, 13):
            resp = _metadata_by_id(raw, [(tid, ""), (unknown, ""), (tid, None)], version)
            assert [(int(t.error_code), t.name, t.topic_id) for t in resp.topics] == [
                (ErrorCode.unknown_topic_id.value, None, unknown), (0, topic_name, tid)]
            assert len(resp.topics[1].partitions) == 2
        # an entry by name beside one by id: the request is by id (the name is neither looked up nor created)
        resp = _metadata_by_id(raw, [(tid, ""), (None, topic_name + "-other")])
        assert [(int(t.error_code), t.name) for t in resp.topics] == [(0, topic_name)]
        # ids before v12 are refused as Kafka refuses them
        resp = _metadata_by_id(raw, [(tid, topic_name)], version=11)
        assert [int(t.error_code) for t in resp.topics] == [ErrorCode.invalid_request.value]
    assert topic_name + "-other" not in a.list_topics(timeout=10).topics


def test_metadata_for_an_illegal_topic_name_is_invalid_topic_without_auto_creation(broker):
    """Kafka validates a missing topic's name in Metadata whether or not the request may create it;
    Java's share consumer asks without auto-creation and throws InvalidTopicException from poll."""
    with rk.RawClient(broker.bootstrap) as raw:
        for allow_auto in (False, True):
            resp = raw.request(rk.metadata_request(["topic abc", "no-such-topic-here"], allow_auto=allow_auto))
            codes = {t.name: int(t.error_code) for t in resp.topics}
            assert codes["topic abc"] == ErrorCode.invalid_topic_exception.value
            if not allow_auto:
                assert codes["no-such-topic-here"] == ErrorCode.unknown_topic_or_partition.value


@pytest.mark.needs_own_broker("changes broker-wide settings")
def test_alter_broker_configs(make_broker):
    b = make_broker()
    a = admin(b.bootstrap)
    assert _incremental(a, ResourceType.BROKER, "1",
                        ("log.retention.ms", "3600000", AlterConfigOpType.SET)).result(timeout=TIMEOUT) is None
    configs = _describe(a, ResourceType.BROKER, "1")
    assert configs["log.retention.ms"].value == "3600000"
    assert _src(configs["log.retention.ms"]) == ConfigSource.DYNAMIC_BROKER_CONFIG.value

    # A read-only broker setting cannot be changed at runtime.
    code = _error_code(_incremental(a, ResourceType.BROKER, "1", ("log.dirs", "/elsewhere", AlterConfigOpType.SET)))
    assert code in (KafkaError.INVALID_CONFIG, KafkaError.INVALID_REQUEST), KafkaError(code).str()
    configs = _describe(a, ResourceType.BROKER, "1")
    assert configs["log.dirs"].value != "/elsewhere"
    assert configs["log.dirs"].is_read_only


@pytest.mark.needs_own_broker("changes broker-wide settings and restarts")
def test_a_broker_config_name_the_broker_does_not_know_is_kept_as_kafka_keeps_it(make_broker):
    """Kafka accepts a dynamic broker config under any name (a plugin may read it) and describes it
    as sensitive, with no value; sharebroker refused it (INVALID_CONFIG). Through confluent-kafka's
    AdminClient: set, described, kept over a restart, deleted (the cluster default, which this
    client cannot name, in test_cli_configs)."""
    b = make_broker()
    a = admin(b.bootstrap)
    assert _incremental(a, ResourceType.BROKER, "1", ("some.config", "some.config.value", AlterConfigOpType.SET),
                        ("log.retention.ms", "3600000", AlterConfigOpType.SET)).result(timeout=TIMEOUT) is None
    for _ in range(2):
        node = _describe(a, ResourceType.BROKER, "1")
        some = node["some.config"]
        assert some.value is None and some.is_sensitive and some.is_read_only
        assert _src(some) == ConfigSource.DYNAMIC_BROKER_CONFIG.value
        assert node["log.retention.ms"].value == "3600000"
        b.restart()
        a = admin(b.bootstrap)
    assert _incremental(a, ResourceType.BROKER, "1", ("some.config", None, AlterConfigOpType.DELETE)
                        ).result(timeout=TIMEOUT) is None
    assert "some.config" not in _describe(a, ResourceType.BROKER, "1")


@pytest.mark.parametrize("new_topic, expected", [
    (lambda n: NewTopic(n, num_partitions=0, replication_factor=1), KafkaError.INVALID_PARTITIONS),
    (lambda n: NewTopic(n, num_partitions=1, replication_factor=3), KafkaError.INVALID_REPLICATION_FACTOR),
    (lambda n: NewTopic(n, num_partitions=1, replication_factor=1, config={"no.such.config": "1"}),
     KafkaError.INVALID_CONFIG),
    (lambda n: NewTopic(n, num_partitions=1, replication_factor=1, config={"retention.ms": "soon"}),
     KafkaError.INVALID_CONFIG),
    (lambda n: NewTopic(n, num_partitions=1, replication_factor=1, config={"cleanup.policy": "shred"}),
     KafkaError.INVALID_CONFIG),
    (lambda n: NewTopic("bad name!", num_partitions=1, replication_factor=1), KafkaError.TOPIC_EXCEPTION),
    (lambda n: NewTopic("x" * 250, num_partitions=1, replication_factor=1), KafkaError.TOPIC_EXCEPTION),
], ids=["zero-partitions", "replication-3", "unknown-config", "bad-config-value", "bad-enum-value",
        "illegal-name", "name-too-long"])
def test_create_topic_errors(broker, topic_name, new_topic, expected):
    a = admin(broker.bootstrap)
    nt = new_topic(topic_name)
    (fut,) = _create(a, nt)
    code = _error_code(fut)
    assert code == expected, f"got {KafkaError(code).str()} ({code}), expected {expected}"
    # and nothing was created
    assert nt.topic not in a.list_topics(timeout=10).topics


def test_admin_errors_on_existing_and_unknown_topics(broker, topic_name):
    a = admin(broker.bootstrap)
    (fut,) = _create(a, NewTopic(topic_name, num_partitions=3, replication_factor=1))
    fut.result(timeout=TIMEOUT)

    (fut,) = _create(a, NewTopic(topic_name, num_partitions=1, replication_factor=1))
    assert _error_code(fut) == KafkaError.TOPIC_ALREADY_EXISTS
    assert len(a.list_topics(topic=topic_name, timeout=10).topics[topic_name].partitions) == 3

    unknown = f"unknown-{uuid.uuid4().hex[:8]}"
    (fut,) = a.delete_topics([unknown], request_timeout=10).values()
    assert _error_code(fut) == KafkaError.UNKNOWN_TOPIC_OR_PART

    (fut,) = a.create_partitions([NewPartitions(topic_name, 2)], request_timeout=10).values()
    assert _error_code(fut) == KafkaError.INVALID_PARTITIONS
    (fut,) = a.create_partitions([NewPartitions(topic_name, 3)], request_timeout=10).values()
    assert _error_code(fut) == KafkaError.INVALID_PARTITIONS  # same count: also refused in Kafka
    (fut,) = a.create_partitions([NewPartitions(unknown, 4)], request_timeout=10).values()
    assert _error_code(fut) == KafkaError.UNKNOWN_TOPIC_OR_PART

    (fut,) = a.describe_configs([ConfigResource(ResourceType.TOPIC, unknown)], request_timeout=10).values()
    assert _error_code(fut) == KafkaError.UNKNOWN_TOPIC_OR_PART

    fut = _incremental(a, ResourceType.TOPIC, topic_name, ("no.such.config", "1", AlterConfigOpType.SET))
    assert _error_code(fut) == KafkaError.INVALID_CONFIG
    fut = _incremental(a, ResourceType.TOPIC, topic_name, ("retention.ms", "never", AlterConfigOpType.SET))
    assert _error_code(fut) == KafkaError.INVALID_CONFIG
    assert "retention.ms" not in {k for k, e in _describe(a, ResourceType.TOPIC, topic_name).items()
                                  if _src(e) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}


def test_topic_name_refusals_and_unknown_topic_configs_answer_as_kafka(broker):
    """Kafka 4.2's Topic.validate words for a name no topic may have (CreateTopics and
    DescribeConfigs check the name first), and DescribeConfigs of an unknown topic answered
    UNKNOWN_TOPIC_OR_PARTITION without a message, as Kafka's ConfigHelper does."""
    a = admin(broker.bootstrap)
    (fut,) = _create(a, NewTopic("bad name!", num_partitions=1, replication_factor=1))
    with pytest.raises(KafkaException) as info:
        fut.result(timeout=TIMEOUT)
    assert info.value.args[0].str() == ("Topic name is invalid: 'bad name!' contains one or more characters other "
                                        "than ASCII alphanumerics, '.', '_' and '-'")
    request = build(rk.req_cls(32, 4), {
        "resources": [{"resource_type": 2, "resource_name": n, "configuration_keys": None}
                      for n in ("a b", "..", "x" * 250, f"unknown-{uuid.uuid4().hex[:8]}")],
        "include_synonyms": False, "include_documentation": False})
    with rk.RawClient(broker.bootstrap) as raw:
        results = raw.request(request).results
    assert [(int(r.error_code), r.error_message) for r in results] == [
        (17, "Topic name is invalid: 'a b' contains one or more characters other than ASCII alphanumerics, '.', "
             "'_' and '-'"),
        (17, "Topic name is invalid: '..' is not allowed"),
        (17, f"Topic name is invalid: the length of '{'x' * 250}' is longer than the max allowed length 249"),
        (3, None),
    ]


def test_broker_resource_names_answer_as_kafka(broker):
    """A BROKER resource is "" or this node's id as Java's toInt reads it ("01" is node 1); other
    names are INVALID_REQUEST with ConfigHelper's words (DescribeConfigs) and ConfigAdminManager's
    (IncrementalAlterConfigs)."""
    names = ["x", "2", "01"]
    with rk.RawClient(broker.bootstrap) as raw:
        described = raw.request(build(rk.req_cls(32, 4), {
            "resources": [{"resource_type": 4, "resource_name": n, "configuration_keys": ["message.max.bytes"]}
                          for n in names],
            "include_synonyms": False, "include_documentation": False})).results
        altered = raw.request(build(rk.req_cls(44, 1), {
            "resources": [{"resource_type": 4, "resource_name": n, "configs": [
                {"name": "log.flush.interval.ms", "config_operation": 1, "value": None}]} for n in names[:2]],
            "validate_only": True})).responses
    assert [(int(r.error_code), r.error_message) for r in described] == [
        (42, "Broker id must be an integer, but it is: x"),
        (42, "Unexpected broker id, expected 1 or empty string, but received 2"),
        (0, None)]
    assert [c.name for c in described[2].configs] == ["message.max.bytes"]
    assert [(int(r.error_code), r.error_message) for r in altered] == [
        (42, "Node id must be an integer, but it is: x"),
        (42, "Unexpected broker id, expected 1, but received 2")]


@pytest.mark.needs_own_broker("lists every group with configs and every topic of its broker")
def test_list_config_resources(make_broker, topic_name):
    """ListConfigResources (KIP-1142) as Kafka 4.2 answers it: v1 lists the groups that have
    configs, this broker (BROKER and BROKER_LOGGER) and the topics; no types means every type; a
    type the version does not know is UNSUPPORTED_VERSION; v0 (ListClientMetricsResources) lists
    client-metrics resources, of which there are none."""
    b = make_broker().bootstrap
    a = admin(b)
    _create(a, NewTopic(topic_name, num_partitions=1, replication_factor=1))[0].result(timeout=TIMEOUT)
    group = f"cfg-{uuid.uuid4().hex[:8]}"
    _incremental(a, ResourceType.GROUP, group, ("share.auto.offset.reset", "earliest", AlterConfigOpType.SET)
                 ).result(timeout=TIMEOUT)

    def listed(version: int, types: list[int]) -> tuple[int, list[tuple[str, int]]]:
        with rk.RawClient(b) as raw:
            resp = raw.request(build(rk.req_cls(74, version), {"resource_types": types}))
        return int(resp.error_code), [(r.resource_name, int(getattr(r, "resource_type", 16)))
                                      for r in resp.config_resources]

    assert listed(1, [32]) == (0, [(group, 32)])
    assert listed(1, [4, 8]) == (0, [("1", 8), ("1", 4)])
    code, every = listed(1, [])
    assert code == 0 and every[:3] == [(group, 32), ("1", 8), ("1", 4)]
    assert (topic_name, 2) in every and all(t == 2 for _, t in every[3:])
    assert listed(1, [16]) == (0, [])
    assert listed(1, [64]) == (35, [])  # UNSUPPORTED_VERSION
    assert listed(0, []) == (0, [])
    # a group whose configs are all deleted is no longer listed
    _incremental(a, ResourceType.GROUP, group, ("share.auto.offset.reset", None, AlterConfigOpType.DELETE)
                 ).result(timeout=TIMEOUT)
    assert listed(1, [32]) == (0, [])


def test_create_partitions_then_produce_to_new_partition(broker, topic_name):
    a = admin(broker.bootstrap)
    (fut,) = _create(a, NewTopic(topic_name, num_partitions=3, replication_factor=1))
    fut.result(timeout=TIMEOUT)
    tid = _topic_id(a, topic_name)
    (fut,) = a.create_partitions([NewPartitions(topic_name, 5)], request_timeout=10).values()
    assert fut.result(timeout=TIMEOUT) is None
    assert sorted(a.list_topics(topic=topic_name, timeout=10).topics[topic_name].partitions) == [0, 1, 2, 3, 4]
    assert _topic_id(a, topic_name) == tid  # same topic

    p = Producer(producer_conf(broker.bootstrap))
    (msg,) = produce_sync(p, topic_name, [{"partition": 4, "value": b"in-p4"}])
    assert (msg.partition(), msg.offset()) == (4, 0)
    with rk.RawClient(broker.bootstrap) as raw:
        values = [r.value for r in rk.records_of(rk.fetch_all_batches(raw, topic_name, 4))]
    assert values == [b"in-p4"]


def test_delete_topic_and_recreate(make_broker, topic_name):
    b = make_broker({"auto.create.topics.enable": "false"})
    a = admin(b.bootstrap)
    (fut,) = _create(a, NewTopic(topic_name, num_partitions=2, replication_factor=1))
    fut.result(timeout=TIMEOUT)
    old_id = _topic_id(a, topic_name)
    p = Producer(producer_conf(b.bootstrap))
    produce_sync(p, topic_name, [{"partition": i % 2, "value": b"v%d" % i} for i in range(10)])

    (fut,) = a.delete_topics([topic_name], request_timeout=10).values()
    assert fut.result(timeout=TIMEOUT) is None
    assert topic_name not in a.list_topics(timeout=10).topics

    # Produce to the deleted topic: UNKNOWN_TOPIC_OR_PARTITION over the wire ...
    with rk.RawClient(b.bootstrap) as raw:
        pr = rk.produce(raw, topic_name, 0, rk.encode_batch([rk.Rec(b"late")]))
        assert int(pr.error_code) == KafkaError.UNKNOWN_TOPIC_OR_PART, pr
        md = raw.request(rk.metadata_request([topic_name], version=12, allow_auto=True))
        assert int(md.topics[0].error_code) == KafkaError.UNKNOWN_TOPIC_OR_PART
    # ... and through a client (auto-creation is disabled, so it is not re-created)
    p2 = Producer(producer_conf(b.bootstrap, **{"topic.metadata.propagation.max.ms": 1000,
                                                "message.timeout.ms": 8000}))
    errors: list[KafkaError] = []
    p2.produce(topic_name, b"late", partition=0, on_delivery=lambda err, msg: errors.append(err))
    assert p2.flush(15) == 0
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC), errors[0]
    assert topic_name not in a.list_topics(timeout=10).topics

    # Re-creating gives a new topic id and empty partitions.
    (fut,) = _create(a, NewTopic(topic_name, num_partitions=2, replication_factor=1))
    fut.result(timeout=TIMEOUT)
    new_id = _topic_id(a, topic_name)
    assert new_id.int != 0 and new_id != old_id
    c = Consumer(consumer_conf(b.bootstrap))
    try:
        for part in (0, 1):
            assert c.get_watermark_offsets(TopicPartition(topic_name, part), timeout=5) == (0, 0)
    finally:
        c.close()
    # the new topic works
    (msg,) = produce_sync(Producer(producer_conf(b.bootstrap)), topic_name, [{"partition": 1, "value": b"new"}])
    assert msg.offset() == 0


def test_auto_topic_creation_uses_num_partitions(make_broker, topic_name):
    b = make_broker({"num.partitions": "3"})
    p = Producer(producer_conf(b.bootstrap))
    (msg,) = produce_sync(p, topic_name, [{"value": b"auto"}])
    assert msg.error() is None
    md = admin(b.bootstrap).list_topics(topic=topic_name, timeout=10)
    assert md.topics[topic_name].error is None
    assert sorted(md.topics[topic_name].partitions) == [0, 1, 2]


def test_no_auto_creation_when_disabled(make_broker, topic_name):
    b = make_broker({"auto.create.topics.enable": "false"})
    with rk.RawClient(b.bootstrap) as raw:
        md = raw.request(rk.metadata_request([topic_name], version=12, allow_auto=True))
    assert int(md.topics[0].error_code) == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert topic_name not in admin(b.bootstrap).list_topics(timeout=10).topics


def test_describe_cluster_single_node_and_stable_cluster_id(make_broker):
    b = make_broker()
    a = admin(b.bootstrap)
    res = a.describe_cluster(request_timeout=10).result(timeout=TIMEOUT)
    assert [n.id for n in res.nodes] == [1]
    node = res.nodes[0]
    assert (node.host, node.port) == (b.host, b.port)
    assert res.controller is not None and res.controller.id == 1
    assert res.cluster_id
    first_id = res.cluster_id

    b.restart()
    a2 = admin(b.bootstrap)
    res2 = a2.describe_cluster(request_timeout=10).result(timeout=TIMEOUT)
    assert res2.cluster_id == first_id
    assert [n.id for n in res2.nodes] == [1]
    # Metadata agrees with DescribeCluster
    md = a2.list_topics(timeout=10)
    assert md.cluster_id == first_id and md.controller_id == 1


def test_broker_rack_is_reported_to_clients(make_broker):
    b = make_broker({"broker.rack": "rack-a"})
    with rk.RawClient(b.bootstrap) as raw:
        (node,) = raw.request(rk.metadata_request([])).brokers
        cls = rk.req_cls(60, 0)
        (described,) = raw.request(cls(**rk._fit(cls, {"include_cluster_authorized_operations": False}))).brokers
    assert node.rack == "rack-a" and described.rack == "rack-a"


def test_log_initial_task_delay_runs_the_first_retention_check_early(make_broker, topic_name):
    """log.initial.task.delay.ms: the first retention check comes that long after start-up, then
    every log.retention.check.interval.ms (an hour here): a restart with expired data cuts it at once."""
    b = make_broker({"log.initial.task.delay.ms": 0, "log.retention.check.interval.ms": 3_600_000})
    a = admin(b.bootstrap)
    (fut,) = _create(a, NewTopic(topic_name, num_partitions=1, replication_factor=1,
                                 config={"segment.ms": "1", "retention.ms": "100"}))
    fut.result(timeout=TIMEOUT)
    p = Producer(producer_conf(b.bootstrap, **{"linger.ms": 0}))
    for i in range(3):  # separate appends: each rolls the expired segment before it
        produce_sync(p, topic_name, [{"partition": 0, "value": b"r%d" % i}])
    p.flush(10)
    b.restart()
    c = Consumer(consumer_conf(b.bootstrap))
    try:
        wait_for(lambda: c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=5)[0] > 0, TIMEOUT,
                 message="retention at start-up to move the log start offset")
    finally:
        c.close()
