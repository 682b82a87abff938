"""`sharebroker configs` (kafka-configs.sh) as a subprocess against a broker subprocess: each entity
type set, described (with and without --all) and deleted, bad names and values refused with
kafka-configs.sh's messages and exit codes, a group config set by the tool changing what a real
ShareConsumer receives, and a dynamic broker setting taking effect without a restart. Nothing
waits on a sleep, only on conditions with deadlines."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, Producer

from tests.integration.clients import producer_conf
from tests.integration.share_helpers import (
    FAST_SHARE_BROKER,
    new_group,
    poll_for,
    poll_once,
    poll_until,
    produce_values,
    share_consumer,
    values,
)
from tests.integration.test_cli import check_all, cli, closed_port, fails, ok

TIMEOUT = 20.0


def configs(bootstrap: str, *args: str):
    return cli("configs", "--bootstrap-server", bootstrap, *args)


def executing(bootstrap: str, *args: str) -> str:
    """The first line kafka-configs.sh prints for an exception: the command line it ran."""
    return f"Error while executing config command with args '--bootstrap-server {bootstrap} {' '.join(args)}'"


# ---------------------------------------------------------------------------------------------
# topics


def test_topic_configs_set_describe_delete(broker, topic_name, tmp_path):
    b, t = broker.bootstrap, topic_name
    ok(cli("topics", "--bootstrap-server", b, "--create", "--topic", t))
    r = ok(configs(b, "--entity-type", "topics", "--entity-name", t, "--alter",
                   "--add-config", "retention.ms=3600000,cleanup.policy=[delete,compact]"))
    assert r.stdout == f"Completed updating config for topic {t}.\n"
    assert ok(configs(b, "--topic", t, "--describe")).stdout == (
        f"Dynamic configs for topic {t} are:\n"
        "  cleanup.policy=delete,compact sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=delete,compact, "
        "DEFAULT_CONFIG:log.cleanup.policy=delete}\n"
        "  retention.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000, "
        "DEFAULT_CONFIG:log.retention.hours=168}\n")

    every = ok(configs(b, "--topic", t, "--describe", "--all")).stdout.splitlines()
    assert every[0] == f"All configs for topic {t} are:"
    assert "  segment.bytes=1073741824 sensitive=false synonyms={DEFAULT_CONFIG:log.segment.bytes=1073741824}" in every
    assert "  max.message.bytes=1048588 sensitive=false synonyms={DEFAULT_CONFIG:message.max.bytes=1048588}" in every
    names = [line.split("=", 1)[0].strip() for line in every[1:]]
    assert names == sorted(names) and "retention.ms" in names and len(names) > 20

    # --add-config-file, and --delete-config (repeatable, comma-separated)
    props = tmp_path / "topic.properties"
    props.write_text("# more\nmax.message.bytes=2000000\nsegment.ms = 600000\n")
    ok(configs(b, "--topic", t, "--alter", "--add-config-file", str(props)))
    fails(configs(b, "--topic", t, "--alter", "--delete-config", "retention.ms,no.such.override"), 1,
          "Invalid config(s): no.such.override")
    r = ok(configs(b, "--topic", t, "--alter", "--delete-config", "retention.ms,segment.ms", "--delete-config",
                   "cleanup.policy"))
    assert r.stdout == f"Completed updating config for topic {t}.\n"
    assert ok(configs(b, "--topic", t, "--describe")).stdout == (
        f"Dynamic configs for topic {t} are:\n"
        "  max.message.bytes=2000000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:max.message.bytes=2000000, "
        "DEFAULT_CONFIG:message.max.bytes=1048588}\n")

    # every topic (no name) includes this one
    assert f"Dynamic configs for topic {t} are:" in ok(configs(b, "--entity-type", "topics", "--describe")).stdout


def test_topic_bad_names_and_values_are_refused(broker, topic_name):
    b, t = broker.bootstrap, topic_name
    ok(cli("topics", "--bootstrap-server", b, "--create", "--topic", t))
    r = ok(configs(b, "--topic", f"no-{t}", "--describe"))
    assert r.stdout == f"The topic 'no-{t}' doesn't exist and doesn't have dynamic config.\n"
    r = fails(configs(b, "--topic", f"no-{t}", "--describe", "--all"), 1,
              executing(b, "--topic", f"no-{t}", "--describe", "--all"),
              "java.util.concurrent.ExecutionException: org.apache.kafka.common.errors.UnknownTopicOrPartitionException: "
              "This server does not host this topic-partition.")
    assert r.stdout == f"All configs for topic no-{t} are:\n"
    bad_value = ["--topic", t, "--alter", "--add-config", "retention.ms=soon"]
    fails(configs(b, *bad_value), 1, executing(b, *bad_value),
          "java.util.concurrent.ExecutionException: org.apache.kafka.common.errors.InvalidConfigurationException: "
          "Invalid value soon for configuration retention.ms: Not a number of type LONG")
    fails(configs(b, "--topic", t, "--alter", "--add-config", "no.such.config=1"), 1,
          "InvalidConfigurationException: Unknown topic config name: no.such.config")
    fails(configs(b, "--topic", f"no-{t}", "--alter", "--add-config", "retention.ms=1"), 1,
          "UnknownTopicOrPartitionException: This server does not host this topic-partition.")
    fails(configs(b, "--topic", "a b", "--describe"), 1, executing(b, "--topic", "a b", "--describe"),
          "\norg.apache.kafka.common.errors.InvalidTopicException: Topic name is invalid: 'a b' contains one or more "
          "characters other than ASCII alphanumerics, '.', '_' and '-'")
    # nothing was changed by the refused requests
    assert ok(configs(b, "--topic", t, "--describe")).stdout == f"Dynamic configs for topic {t} are:\n"


# ---------------------------------------------------------------------------------------------
# brokers


def _produce_error(bootstrap: str, topic: str, size: int) -> KafkaError | None:
    """Produce one record of `size` bytes: None when delivered, else the delivery error."""
    result: list[KafkaError | None] = []
    p = Producer(producer_conf(bootstrap, **{"message.timeout.ms": 5000}))
    p.produce(topic, b"x" * size, on_delivery=lambda err, _msg: result.append(err))
    assert p.flush(TIMEOUT) == 0
    return result[0]


@pytest.mark.needs_own_broker("changes broker-wide settings")
def test_a_broker_config_name_the_broker_does_not_know_is_kept_as_the_cluster_default(make_broker):
    """As Kafka: a name it does not know is accepted as a dynamic broker config and described as
    sensitive, so kafka-configs prints its value as null."""
    b = make_broker().bootstrap
    r = ok(configs(b, "--entity-type", "brokers", "--entity-default", "--alter", "--add-config", "plugin.interval=30"))
    assert r.stdout == "Completed updating default config for brokers in the cluster.\n"
    assert ok(configs(b, "--entity-type", "brokers", "--entity-default", "--describe")).stdout == (
        "Default configs for brokers in the cluster are:\n"
        "  plugin.interval=null sensitive=true synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:plugin.interval=null}\n")
    ok(configs(b, "--entity-type", "brokers", "--entity-default", "--alter", "--delete-config", "plugin.interval"))
    assert ok(configs(b, "--entity-type", "brokers", "--entity-default", "--describe")).stdout == (
        "Default configs for brokers in the cluster are:\n")


@pytest.mark.needs_own_broker("changes broker-wide settings")
def test_dynamic_broker_config_takes_effect_without_restart(make_broker, topic_name):
    broker = make_broker()
    b, t = broker.bootstrap, topic_name
    ok(cli("topics", "--bootstrap-server", b, "--create", "--topic", t))
    assert _produce_error(b, t, 5000) is None

    # the cluster default: every topic's max.message.bytes follows message.max.bytes
    r = ok(configs(b, "--entity-type", "brokers", "--entity-default", "--alter", "--add-config", "message.max.bytes=2000"))
    assert r.stdout == "Completed updating default config for brokers in the cluster.\n"
    assert ok(configs(b, "--entity-type", "brokers", "--entity-default", "--describe")).stdout == (
        "Default configs for brokers in the cluster are:\n"
        "  message.max.bytes=2000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=2000}\n")
    err = _produce_error(b, t, 5000)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE, err

    # this broker's own value wins over the default
    r = ok(configs(b, "--broker", "1", "--alter", "--add-config", "message.max.bytes=8000"))
    assert r.stdout == "Completed updating config for broker 1.\n"
    assert ok(configs(b, "--broker", "1", "--describe")).stdout == (
        "Dynamic configs for broker 1 are:\n"
        "  message.max.bytes=8000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:message.max.bytes=8000, "
        "DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=2000, DEFAULT_CONFIG:message.max.bytes=1048588}\n")
    assert _produce_error(b, t, 5000) is None
    every = ok(configs(b, "--broker", "1", "--describe", "--all")).stdout.splitlines()
    assert every[0] == "All configs for broker 1 are:"
    assert "  num.partitions=1 sensitive=false synonyms={DEFAULT_CONFIG:num.partitions=1}" in every
    assert any(line.startswith("  message.max.bytes=8000 ") for line in every)
    # without a name: each broker, then the cluster default
    headers = [line for line in ok(configs(b, "--entity-type", "brokers", "--describe")).stdout.splitlines()
               if not line.startswith("  ")]
    assert headers == ["Dynamic configs for broker 1 are:", "Default configs for brokers in the cluster are:"]

    # a default is not this broker's own dynamic config
    fails(configs(b, "--broker-defaults", "--alter", "--delete-config", "num.partitions"), 1,
          "Invalid config(s): num.partitions")
    ok(configs(b, "--broker", "1", "--alter", "--delete-config", "message.max.bytes"))
    ok(configs(b, "--broker-defaults", "--alter", "--delete-config", "message.max.bytes"))
    assert ok(configs(b, "--broker", "1", "--describe")).stdout == "Dynamic configs for broker 1 are:\n"
    assert _produce_error(b, t, 50_000) is None

    fails(configs(b, "--broker", "1", "--alter", "--add-config", "message.max.bytes=-5"), 1, executing(
        b, "--broker", "1", "--alter", "--add-config", "message.max.bytes=-5"),
        "InvalidRequestException: Invalid value -5 for configuration message.max.bytes: Value must be at least 0")
    # As Kafka's ConfigAdminManager: a broker config that fails its checks is INVALID_REQUEST (KAFKA-13609)
    fails(configs(b, "--broker", "1", "--alter", "--add-config", "log.dirs=/elsewhere"), 1,
          "InvalidRequestException: Cannot update these configs dynamically: Set(log.dirs)")
    assert ok(configs(b, "--broker", "7", "--describe")).stdout == (
        "The broker '7' doesn't exist and doesn't have dynamic config.\n")
    fails(configs(b, "--broker", "one", "--describe"), 1,
          "The entity name for brokers must be a valid integer broker id, but it is: one")


# ---------------------------------------------------------------------------------------------
# groups


def test_group_configs_set_describe_delete_and_refusals(broker):
    b, g = broker.bootstrap, new_group("cfg")
    r = ok(configs(b, "--entity-type", "groups", "--entity-name", g, "--alter",
                   "--add-config", "share.auto.offset.reset=earliest,share.record.lock.duration.ms=40000"))
    assert r.stdout == f"Completed updating config for group {g}.\n"
    assert ok(configs(b, "--group", g, "--describe")).stdout == (
        f"Dynamic configs for group {g} are:\n"
        "  share.auto.offset.reset=earliest sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:share.auto.offset.reset=earliest}\n"
        "  share.record.lock.duration.ms=40000 sensitive=false "
        "synonyms={DYNAMIC_GROUP_CONFIG:share.record.lock.duration.ms=40000}\n")
    every = ok(configs(b, "--group", g, "--describe", "--all")).stdout.splitlines()
    assert every[0] == f"All configs for group {g} are:"
    # As Kafka 4.2: a setting the group does not override is DEFAULT_CONFIG under its own name.
    assert "  share.delivery.count.limit=5 sensitive=false synonyms={DEFAULT_CONFIG:share.delivery.count.limit=5}" in every
    assert "  streams.num.standby.replicas=0 sensitive=false synonyms={DEFAULT_CONFIG:streams.num.standby.replicas=0}" in every
    assert "  share.auto.offset.reset=earliest sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:share.auto.offset.reset=earliest}" \
        in every

    for args, message in [
        (["share.auto.offset.reset=sometimes"], "Invalid value sometimes for configuration share.auto.offset.reset"),
        (["share.record.lock.duration.ms=999"], "Invalid value 999 for configuration share.record.lock.duration.ms"),
        (["share.session.timeout.ms=1"], "share.session.timeout.ms"),
        (["no.such.group.config=1"], "Unknown group config name: no.such.group.config"),
    ]:
        cmd = ["--group", g, "--alter", "--add-config", *args]
        fails(configs(b, *cmd), 1, executing(b, *cmd), "java.util.concurrent.ExecutionException: "
              "org.apache.kafka.common.errors.InvalidConfigurationException: ", message)
    # a group with configs and no members is listed (ListConfigResources); one with neither is not
    assert f"Dynamic configs for group {g} are:\n" in ok(configs(b, "--entity-type", "groups", "--describe")).stdout
    assert ok(configs(b, "--group", f"no-{g}", "--describe")).stdout == (
        f"The group 'no-{g}' doesn't exist and doesn't have dynamic config.\n")
    fails(configs(b, "--group", g, "--alter", "--delete-config", "share.delivery.count.limit"), 1,
          "Invalid config(s): share.delivery.count.limit")
    ok(configs(b, "--group", g, "--alter", "--delete-config", "share.record.lock.duration.ms"))
    assert ok(configs(b, "--group", g, "--describe")).stdout == (
        f"Dynamic configs for group {g} are:\n"
        "  share.auto.offset.reset=earliest sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:share.auto.offset.reset=earliest}\n")


def _first_delivery_after_join(bootstrap: str, consumer, topic: str) -> list:
    """Produce probes until the consumer's group has fetched once and gets one (with latest,
    records produced before that first fetch are skipped, so early probes may be lost)."""
    got: list = []
    deadline = time.monotonic() + TIMEOUT
    i = 0
    while not got:
        assert time.monotonic() < deadline, "nothing delivered to the share consumer"
        produce_values(bootstrap, topic, [f"probe-{i}".encode()])
        i += 1
        got += poll_once(consumer, 0.5)
    return got


def test_group_auto_offset_reset_set_by_the_tool_changes_what_a_share_consumer_gets(make_broker, topic_name):
    broker = make_broker(FAST_SHARE_BROKER)
    b, t = broker.bootstrap, topic_name
    ok(cli("topics", "--bootstrap-server", b, "--create", "--topic", t))
    old = [f"old-{i}".encode() for i in range(5)]
    produce_values(b, t, old)
    earliest, latest = new_group("early"), new_group("late")
    ok(configs(b, "--group", earliest, "--alter", "--add-config", "share.auto.offset.reset=earliest"))
    ok(configs(b, "--group", latest, "--alter", "--add-config", "share.auto.offset.reset=latest"))

    c = share_consumer(b, earliest, [t])
    try:
        got = poll_until(c, lambda g: set(old) <= set(values(g)), TIMEOUT)
    finally:
        c.close()
    assert sorted(values(got)) == sorted(old)

    c = share_consumer(b, latest, [t])
    try:
        got = _first_delivery_after_join(b, c, t)
        new = [f"new-{i}".encode() for i in range(3)]
        produce_values(b, t, new)
        got += poll_until(c, lambda g: set(new) <= set(values(g)), TIMEOUT)
        got += poll_for(c, 0.5)
    finally:
        c.close()
    assert not set(old) & set(values(got)), values(got)

    # the groups now exist, so describing every group lists them
    every = ok(configs(b, "--entity-type", "groups", "--describe")).stdout
    assert f"Dynamic configs for group {earliest} are:\n  share.auto.offset.reset=earliest " in every
    assert f"Dynamic configs for group {latest} are:\n  share.auto.offset.reset=latest " in every


# ---------------------------------------------------------------------------------------------
# clients, users, ips, broker-loggers, client-metrics: what this broker does not serve is said


def test_quota_and_scram_entities(broker):
    b = broker.bootstrap
    # No quotas or SCRAM users exist: describing prints nothing and succeeds, as against a fresh Kafka.
    for args in (["--entity-type", "users", "--describe"], ["--user", "alice", "--describe"],
                 ["--entity-type", "clients", "--describe"], ["--client", "c1", "--describe"],
                 ["--user", "alice", "--client", "c1", "--describe"], ["--user-defaults", "--describe"],
                 ["--ip", "127.0.0.1", "--describe"], ["--entity-type", "ips", "--entity-default", "--describe"]):
        assert ok(configs(b, *args)).stdout == "", args
    # (altering quotas: tests/integration/test_quotas.py, on a broker of its own)
    check_all([
        (["configs", "--bootstrap-server", b, "--client", "c1", "--alter", "--add-config", "consumer_byte_rate=fast"],
         1, ["Cannot parse quota configuration value for consumer_byte_rate: fast"]),
        (["configs", "--bootstrap-server", b, "--client", "c1", "--alter", "--add-config", "retention.ms=1"], 1,
         ["Only quota configs can be added for 'clients' using --bootstrap-server. Unexpected config names: "
          "Set(retention.ms)"]),
        (["configs", "--bootstrap-server", b, "--user", "alice", "--alter", "--delete-config", "retention.ms"], 1,
         ["Only quota and SCRAM credential configs can be deleted for 'users' using --bootstrap-server. Unexpected "
          "config names: ArrayBuffer(retention.ms)"]),
        (["configs", "--bootstrap-server", b, "--client", "c1", "--alter", "--delete-config", "consumer_byte_rate"], 1,
         ["Invalid config(s): consumer_byte_rate"]),
        (["configs", "--bootstrap-server", b, "--user", "alice", "--alter", "--add-config",
          "SCRAM-SHA-512=[iterations=100,password=x]"], 1,
         ["Iterations 100 is less than the minimum 4096 required for SCRAM-SHA-512"]),
        (["configs", "--bootstrap-server", b, "--user", "alice", "--alter", "--add-config", "SCRAM-SHA-256=secret"], 1,
         ["Invalid credential property SCRAM_SHA_256=secret"]),
        (["configs", "--bootstrap-server", b, "--user-defaults", "--alter", "--add-config",
          "SCRAM-SHA-256=[password=x]"], 1,
         ["The use of --entity-default or --user-defaults is not allowed with User SCRAM Credentials"]),
        (["configs", "--bootstrap-server", b, "--ip", "1.2.3.4", "--alter", "--add-config", "consumer_byte_rate=1"], 1,
         ["Only connection quota configs can be added for 'ips' using --bootstrap-server. Unexpected config names: "
          "consumer_byte_rate"]),
        (["configs", "--bootstrap-server", b, "--ip", "no-such-host.invalid", "--describe"], 1,
         ["The entity name for ips must be a valid IP or resolvable host, but it is: no-such-host.invalid"]),
        # broker loggers and client-metrics resources: the broker's DescribeConfigs refuses the types
        (["configs", "--bootstrap-server", b, "--broker-logger", "1", "--describe"], 1,
         ["InvalidRequestException: Unsupported resource type 8 for DescribeConfigs."]),
        (["configs", "--bootstrap-server", b, "--broker-logger", "1", "--alter", "--add-config", "root=DEBUG"], 1,
         ["InvalidRequestException: Unsupported resource type 8 for DescribeConfigs."]),
        (["configs", "--bootstrap-server", b, "--client-metrics", "cm", "--alter", "--add-config", "metrics=org.apache"],
         1, ["InvalidRequestException: Unsupported resource type 16 for DescribeConfigs."]),
    ])
    # ListConfigResources finds no client-metrics resources
    assert ok(configs(b, "--entity-type", "client-metrics", "--describe")).stdout == ""
    assert ok(configs(b, "--client-metrics", "cm", "--describe")).stdout == (
        "The client-metric 'cm' doesn't exist and doesn't have dynamic config.\n")


# ---------------------------------------------------------------------------------------------
# the command line


def test_argument_rules_exit_1_with_kafka_configs_messages(broker):
    c = ["configs", "--bootstrap-server", broker.bootstrap]
    check_all([
        (["configs"], 1, ["This tool helps to manipulate and describe entity config for a topic, client, user, broker, "
                          "ip, client-metrics or group", "usage:"]),
        (["configs", "--bootstrap-server", f"127.0.0.1:{closed_port()}", "--timeout", "1500", "--topic", "t",
          "--describe"], 1, ["Cannot reach any broker within 1500 ms"]),
        ([*c, "--topic", "t"], 1, ["Command must include exactly one action: --describe, --alter", "usage:"]),
        ([*c, "--topic", "t", "--describe", "--alter"], 1, ["Command must include exactly one action"]),
        ([*c, "--topic", "t", "--describe", "--add-config", "a=b"], 1,
         ["Option \"[describe]\" can't be used with option \"[add-config]\""]),
        ([*c, "--topic", "t", "--describe", "--delete-config", "a"], 1,
         ["Option \"[describe]\" can't be used with option \"[delete-config]\""]),
        (["configs", "--topic", "t", "--describe"], 1,
         ["Either --bootstrap-server or --bootstrap-controller must be specified."]),
        ([*c, "--describe"], 1, ["At least one entity type must be specified"]),
        ([*c, "--entity-type", "queues", "--describe"], 1,
         ["Invalid entity type queues, the entity type must be one of topics, clients, users, brokers, ips, "
          "client-metrics, groups, broker-loggers with a --bootstrap-server or --bootstrap-controller argument"]),
        ([*c, "--topic", "t", "--entity-type", "topics", "--describe"], 1, ["Duplicate entity type(s) specified: topics"]),
        ([*c, "--topic", "t", "--group", "g", "--describe"], 1,
         ["Only 'users' and 'clients' entity types may be specified together"]),
        ([*c, "--topic", "t", "--entity-name", "t", "--describe"], 1,
         ["--entity-{type,name,default} should not be used in conjunction with specific entity flags"]),
        ([*c, "--entity-type", "topics", "--entity-default", "--describe"], 1,
         ["--entity-default must not be specified with --describe of topics"]),
        ([*c, "--entity-type", "broker-loggers", "--describe"], 1,
         ["An entity name must be specified with --describe of broker-loggers"]),
        ([*c, "--entity-type", "topics", "--alter", "--add-config", "a=b"], 1,
         ["An entity name must be specified with --alter of topics"]),
        ([*c, "--entity-type", "brokers", "--alter", "--add-config", "a=b"], 1,
         ["An entity-name or default entity must be specified with --alter of users, clients, brokers or ips"]),
        ([*c, "--topic", "t", "--alter"], 1,
         ["At least one of --add-config, --add-config-file, or --delete-config must be specified with --alter"]),
        ([*c, "--topic", "t", "--alter", "--add-config", "a=b", "--add-config-file", "f"], 1,
         ["Only one of --add-config or --add-config-file must be specified"]),
        ([*c, "--topic", "t", "--alter", "--add-config", "a=b=c"], 1,
         ["Invalid entity config: all configs to be added must be in the format \"key=val\" or  \"key=[val1,val2]\" "
          "to group values which contain commas."]),
        ([*c, "--topic", "t", "--alter", "--add-config", "a b=c"], 1, ["Invalid character found for config key: a b"]),
        ([*c, "--entity-type", "brokers", "--entity-name", "b1", "--describe"], 1,
         ["The entity name for brokers must be a valid integer broker id, but it is: b1"]),
        ([*c, "--entity-type", "users", "--entity-type", "clients", "--entity-name", "u", "--alter", "--add-config",
          "consumer_byte_rate=1"], 1, ["An entity name must be specified for every entity type"]),
        ([*c, "--topic", "t", "--describe", "--no-such-option"], 1, ["no-such-option is not a recognized option"]),
        ([*c, "--bootstrap-controller", "localhost:9093", "--topic", "t", "--describe"], 1,
         ["Only one of --bootstrap-server or --bootstrap-controller can be specified"]),
    ])
