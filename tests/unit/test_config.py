"""config/: the settings table, loading (file < env < overrides), validation, dynamic changes,
topic/group effective values and DescribeConfigs entries."""

from __future__ import annotations

from pathlib import Path

import pytest

from sharebroker.config import (
    BROKER_CONFIGS,
    GROUP_CONFIGS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    Listener,
    ShareAutoOffsetReset,
    describe_broker_configs,
    describe_group_configs,
    describe_topic_configs,
    env_to_config_name,
    group_config,
    parse_iso8601_duration_ms,
    parse_listeners,
    parse_properties,
    parse_share_auto_offset_reset,
    topic_config,
    validate_group_config,
    validate_group_configs,
    validate_topic_overrides,
)

LONG_MAX = 2**63 - 1


def broker(**overrides: str) -> BrokerConfig:
    """A config from overrides only (no file, no environment); keys use '_' for '.'."""
    return BrokerConfig.load(env={}, overrides={k.replace("_", "."): v for k, v in overrides.items()})


def load(overrides: dict[str, str]) -> BrokerConfig:
    return BrokerConfig.load(env={}, overrides=overrides)


def by_name(entries: list) -> dict:
    return {e.name: e for e in entries}


# ---------------------------------------------------------------------------------------------
# The table itself
# ---------------------------------------------------------------------------------------------


def test_every_default_is_valid_and_round_trips() -> None:
    for table in (BROKER_CONFIGS, TOPIC_CONFIGS, GROUP_CONFIGS):
        for definition in table.values():
            if definition.default is None:
                continue
            text = definition.to_string(definition.default)
            assert definition.parse(text) == definition.default, definition.name


def test_synonyms_and_bounds_name_real_broker_settings() -> None:
    for definition in TOPIC_CONFIGS.values():
        # Kafka 4.4 gives the DLQ flag of a topic no broker-wide synonym
        assert definition.synonyms or definition.name == "errors.deadletterqueue.group.enable", definition.name
        for name, _ in definition.synonyms:
            assert name in BROKER_CONFIGS, (definition.name, name)
    for definition in GROUP_CONFIGS.values():
        for name in (definition.synonym, definition.min_config, definition.max_config):
            assert name is None or name in BROKER_CONFIGS, (definition.name, name)


def test_topic_defaults_equal_effective_values_of_a_default_broker() -> None:
    # Kafka's topic defaults are the broker defaults seen through the synonyms.
    tc = topic_config(broker(), {})
    for definition in TOPIC_CONFIGS.values():
        value = getattr(tc, definition.attribute)
        assert value == definition.default, definition.name


def test_group_defaults_equal_broker_synonym_defaults() -> None:
    for definition in GROUP_CONFIGS.values():
        if definition.synonym:
            assert definition.default == BROKER_CONFIGS[definition.synonym].default, definition.name


@pytest.mark.parametrize("name, value", [
    ("log.segment.bytes", 1073741824),
    ("message.max.bytes", 1048588),
    ("socket.request.max.bytes", 104857600),
    ("fetch.max.bytes", 57671680),
    ("log.index.size.max.bytes", 10485760),
    ("log.retention.hours", 168),
    ("log.retention.check.interval.ms", 300000),
    ("log.flush.interval.messages", LONG_MAX),
    ("log.message.timestamp.after.max.ms", 3600000),
    ("offsets.retention.minutes", 10080),
    ("group.share.record.lock.duration.ms", 30000),
    ("group.share.delivery.count.limit", 5),
    ("group.share.partition.max.record.locks", 2000),
    ("group.share.max.size", 200),
    ("group.share.max.share.sessions", 2000),
    ("share.coordinator.snapshot.update.records.per.snapshot", 500),
    ("share.coordinator.append.linger.ms", -1),
    ("share.coordinator.state.topic.replication.factor", 3),
])
def test_kafka_defaults(name: str, value: object) -> None:
    assert broker()[name] == value


def test_dynamic_set_is_small_and_explicit() -> None:
    dynamic = {name for name, d in BROKER_CONFIGS.items() if d.dynamic}
    assert dynamic == {
        "log.retention.ms", "log.retention.minutes", "log.retention.hours", "log.retention.bytes",
        "log.segment.bytes", "log.roll.ms", "log.roll.hours", "log.flush.interval.messages",
        "log.flush.interval.ms", "message.max.bytes", "log.cleanup.policy", "group.share.assignment.interval.ms",
        "group.consumer.assignment.interval.ms", "log.cleaner.io.max.bytes.per.second", "log.cleaner.backoff.ms",
        "errors.deadletterqueue.auto.create.topics.enable", "errors.deadletterqueue.topic.name.prefix",
    }


def test_config_def_helpers() -> None:
    assert BROKER_CONFIGS["num.partitions"].describe_range() == "[1,...]"
    assert BROKER_CONFIGS["group.share.max.size"].describe_range() == "[1,...,1000]"
    assert BROKER_CONFIGS["log.cleanup.policy"].describe_range() == "[compact, delete]"
    assert BROKER_CONFIGS["cluster.id"].describe_range() == ""
    assert BROKER_CONFIGS["log.cleanup.policy"].config_type == ConfigType.LIST == 7
    assert TOPIC_CONFIGS["retention.ms"].config_type == 5
    assert TOPIC_CONFIGS["segment.bytes"].config_type == 3
    assert TOPIC_CONFIGS["preallocate"].config_type == 1
    assert TOPIC_CONFIGS["compression.type"].config_type == 2
    assert TOPIC_CONFIGS["min.cleanable.dirty.ratio"].config_type == 6
    assert BROKER_CONFIGS["offsets.topic.replication.factor"].config_type == 4
    assert BROKER_CONFIGS["log.cleanup.policy"].parse(" compact ,  delete ") == ("compact", "delete")
    assert TOPIC_CONFIGS["retention.ms"].synonym == "log.retention.ms"


# ---------------------------------------------------------------------------------------------
# Loading: properties file, environment, overrides
# ---------------------------------------------------------------------------------------------


def test_precedence_file_then_env_then_overrides(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text("num.partitions=2\nlog.retention.ms=1000\nmessage.max.bytes=2000\n")
    env = {"KAFKA_NUM_PARTITIONS": "3", "KAFKA_LOG_RETENTION_MS": "5000", "PATH": "/bin"}
    cfg = BrokerConfig.load(props, env=env, overrides={"num.partitions": "4"})
    assert cfg["num.partitions"] == 4          # override beats env and file
    assert cfg["log.retention.ms"] == 5000     # env beats file
    assert cfg["message.max.bytes"] == 2000    # file beats default
    assert cfg["log.segment.bytes"] == 1073741824
    for name in ("num.partitions", "log.retention.ms", "message.max.bytes"):
        assert cfg.source(name) == ConfigSource.STATIC_BROKER_CONFIG == 4
        assert cfg.is_explicit(name)
    assert cfg.source("log.segment.bytes") == ConfigSource.DEFAULT_CONFIG == 5
    assert not cfg.is_explicit("log.segment.bytes")
    assert cfg.origin("num.partitions") == "override"
    assert cfg.origin("log.retention.ms") == "environment variable KAFKA_LOG_RETENTION_MS"
    assert cfg.origin("message.max.bytes") == f"file {props}"
    assert cfg.origin("log.segment.bytes") == "default"


def test_env_none_reads_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_NUM_PARTITIONS", "7")
    assert BrokerConfig.load()["num.partitions"] == 7


@pytest.mark.parametrize("variable, name", [
    ("KAFKA_LOG_RETENTION_MS", "log.retention.ms"),
    ("KAFKA_NODE_ID", "node.id"),
    ("KAFKA_FOO__BAR", "foo_bar"),
    ("KAFKA_FOO___BAR", "foo-bar"),
    ("KAFKA_A___B__C_D", "a-b_c.d"),
    ("KAFKA_LISTENER_NAME_EXTERNAL_SASL__MECH", "listener.name.external.sasl_mech"),
    ("KAFKA_", None),
    ("SHAREBROKER_NUM_PARTITIONS", None),
    ("kafka_num_partitions", None),
])
def test_env_name_mapping(variable: str, name: str | None) -> None:
    assert env_to_config_name(variable) == name


def test_unknown_env_variables_are_ignored_but_known_bad_values_fail() -> None:
    cfg = BrokerConfig.load(env={"KAFKA_HEAP_OPTS": "-Xmx1G", "KAFKA_NOT__A_SETTING": "x"})
    assert cfg.unknown == []
    with pytest.raises(ConfigError) as err:
        BrokerConfig.load(env={"KAFKA_NUM_PARTITIONS": "many"})
    assert err.value.name == "num.partitions"
    assert str(err.value) == "Invalid value many for configuration num.partitions: Not a number of type INT"


def test_unknown_file_and_override_keys_are_collected(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text("num.partitions=2\nnot.a.kafka.setting=1\n")
    cfg = BrokerConfig.load(props, env={}, overrides={"another.unknown": "x"})
    assert cfg.unknown == ["not.a.kafka.setting", "another.unknown"]
    assert cfg["num.partitions"] == 2


def test_missing_properties_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Cannot read properties file"):
        BrokerConfig.load(tmp_path / "absent.properties", env={})


def test_kafka_sample_server_properties_load(tmp_path: Path) -> None:
    # The kind of file Kafka ships: KRaft settings sharebroker accepts but does not need.
    props = tmp_path / "server.properties"
    props.write_text(
        "process.roles=broker,controller\n"
        "node.id=1\n"
        "controller.quorum.bootstrap.servers=localhost:9093\n"
        "listeners=PLAINTEXT://:9092,CONTROLLER://:9093\n"
        "inter.broker.listener.name=PLAINTEXT\n"
        "advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093\n"
        "controller.listener.names=CONTROLLER\n"
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL\n"
        "num.network.threads=3\nnum.io.threads=8\n"
        f"log.dirs={tmp_path / 'data'}\n"
        "num.partitions=1\n"
        "offsets.topic.replication.factor=1\nshare.coordinator.state.topic.replication.factor=1\n"
        "share.coordinator.state.topic.min.isr=1\ntransaction.state.log.replication.factor=1\n"
        "transaction.state.log.min.isr=1\nlog.retention.hours=168\nlog.segment.bytes=1073741824\n"
        "log.retention.check.interval.ms=300000\n"
    )
    cfg = BrokerConfig.load(props, env={})
    assert cfg.unknown == []
    assert cfg.listeners == [Listener("PLAINTEXT", "", 9092)]
    assert cfg.advertised_listeners == [Listener("PLAINTEXT", "localhost", 9092)]
    assert cfg.log_dir == tmp_path / "data"


def test_properties_syntax() -> None:
    text = (
        "# comment\n"
        "   ! another comment \\\n"
        "a=1\n"
        "b: 2\n"
        "c 3\n"
        "  d   =   spaced value  \n"
        "e=first \\\n"
        "     second\\\n"
        "third\n"
        "f=ends with escaped backslash \\\\\n"
        "g=tab\\there\\u0041\n"
        "h\\=key=v\n"
        "i\n"
        "j=1\n"
        "j=2\r\n"
        "k==v\n"
    )
    props = parse_properties(text)
    assert props == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "spaced value  ",
        "e": "first secondthird",
        "f": "ends with escaped backslash \\",
        "g": "tab\thereA",
        "h=key": "v",
        "i": "",
        "j": "2",
        "k": "=v",
    }


def test_file_values_are_trimmed_when_typed(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text("num.partitions = 5   \nlog.cleanup.policy : compact , delete\n")
    cfg = BrokerConfig.load(props, env={})
    assert cfg["num.partitions"] == 5
    assert cfg["log.cleanup.policy"] == ["compact", "delete"]


# ---------------------------------------------------------------------------------------------
# Validation messages
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, value, message", [
    ("num.partitions", "0", "Invalid value 0 for configuration num.partitions: Value must be at least 1"),
    ("log.retention.ms", "abc", "Invalid value abc for configuration log.retention.ms: Not a number of type LONG"),
    ("log.cleanup.policy", "foo",
     "Invalid value foo for configuration log.cleanup.policy: String must be one of: compact, delete"),
    ("log.cleanup.policy", "delete,foo",
     "Invalid value foo for configuration log.cleanup.policy: String must be one of: compact, delete"),
    ("auto.create.topics.enable", "yes",
     "Invalid value yes for configuration auto.create.topics.enable: Expected value to be either true or false"),
    ("group.share.max.size", "1001", "Invalid value 1001 for configuration group.share.max.size: Value must be no more than 1000"),
    ("log.segment.bytes", "1048575",
     "Invalid value 1048575 for configuration log.segment.bytes: Value must be at least 1048576"),
    ("num.partitions", "2147483648", "Invalid value 2147483648 for configuration num.partitions: Not a number of type INT"),
    ("num.partitions", "1_0", "Invalid value 1_0 for configuration num.partitions: Not a number of type INT"),
    ("offsets.topic.replication.factor", "40000",
     "Invalid value 40000 for configuration offsets.topic.replication.factor: Not a number of type SHORT"),
    ("log.message.timestamp.type", "createtime",
     "Invalid value createtime for configuration log.message.timestamp.type: String must be one of: CreateTime, LogAppendTime"),
    ("compression.type", "brotli", "Invalid value brotli for configuration compression.type: "
     "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
    ("log.cleaner.min.cleanable.ratio", "1.5",
     "Invalid value 1.5 for configuration log.cleaner.min.cleanable.ratio: Value must be no more than 1"),
    ("log.cleaner.min.cleanable.ratio", "half",
     "Invalid value half for configuration log.cleaner.min.cleanable.ratio: Not a number of type DOUBLE"),
    ("compression.gzip.level", "0",
     "Invalid value 0 for configuration compression.gzip.level: Value must be between 1 and 9, or -1"),
    ("group.share.record.lock.duration.ms", "999",
     "Invalid value 999 for configuration group.share.record.lock.duration.ms: Value must be at least 1000"),
    ("group.share.delivery.count.limit", "11",
     "Invalid value 11 for configuration group.share.delivery.count.limit: Value must be no more than 10"),
    ("share.coordinator.snapshot.update.records.per.snapshot", "501", "Invalid value 501 for configuration "
     "share.coordinator.snapshot.update.records.per.snapshot: Value must be no more than 500"),
    ("fetch.max.bytes", "1023", "Invalid value 1023 for configuration fetch.max.bytes: Value must be at least 1024"),
    ("node.id", "-1", "Invalid value -1 for configuration node.id: Value must be at least 0"),
    ("group.share.assignors", "uniform", "Invalid value uniform for configuration group.share.assignors: "
     "sharebroker supports only the built-in share group assignor: simple"),
])
def test_invalid_values_name_the_setting_and_range(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load({name: value})
    assert str(err.value) == message
    assert err.value.name == name
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("overrides, name, fragment", [
    ({"group.share.record.lock.duration.ms": "10000"}, "group.share.record.lock.duration.ms",
     "group.share.record.lock.duration.ms must be greater than or equal to group.share.min.record.lock.duration.ms"),
    ({"group.share.record.lock.duration.ms": "61000"}, "group.share.record.lock.duration.ms",
     "group.share.record.lock.duration.ms must be less than or equal to group.share.max.record.lock.duration.ms"),
    ({"group.share.max.delivery.count.limit": "6", "group.share.delivery.count.limit": "8"},
     "group.share.delivery.count.limit",
     "group.share.delivery.count.limit must be less than or equal to group.share.max.delivery.count.limit"),
    ({"group.share.min.session.timeout.ms": "50000"}, "group.share.session.timeout.ms",
     "group.share.session.timeout.ms must be greater than or equal to group.share.min.session.timeout.ms"),
    ({"group.share.min.heartbeat.interval.ms": "20000"}, "group.share.max.heartbeat.interval.ms",
     "group.share.max.heartbeat.interval.ms must be greater than or equal to group.share.min.heartbeat.interval.ms"),
    ({"group.share.max.heartbeat.interval.ms": "60000", "group.share.heartbeat.interval.ms": "50000"},
     "group.share.heartbeat.interval.ms",
     "group.share.heartbeat.interval.ms must be less than group.share.session.timeout.ms"),
    ({"group.consumer.max.heartbeat.interval.ms": "60000", "group.consumer.heartbeat.interval.ms": "45000"},
     "group.consumer.heartbeat.interval.ms",
     "group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms"),
    ({"group.share.partition.max.record.locks": "5000"}, "group.share.partition.max.record.locks",
     "group.share.partition.max.record.locks must be less than or equal to group.share.max.partition.max.record.locks"),
    ({"group.share.max.size": "900", "group.share.max.share.sessions": "800"}, "group.share.max.share.sessions",
     "group.share.max.share.sessions must be greater than or equal to group.share.max.size"),
    ({"group.share.assignment.interval.ms": "20000"}, "group.share.assignment.interval.ms",
     "group.share.assignment.interval.ms must be less than or equal to group.share.max.assignment.interval.ms"),
    ({"group.share.assignors": "simple,simple"}, "group.share.assignors",
     "group.share.assignors must contain exactly one assignor, but found 2"),
    ({"log.retention.ms": "0"}, "log.retention.ms", "log.retention.ms must be unlimited (-1) or, equal or greater than 1"),
    ({"log.retention.minutes": "0"}, "log.retention.ms", "log.retention.ms must be unlimited (-1) or, equal or greater than 1"),
    ({"log.roll.ms": "0"}, "log.roll.ms", "log.roll.ms must be greater than or equal to 1"),
    ({"broker.id": "2", "node.id": "3"}, "node.id", "You must set `node.id` to the same value as `broker.id`"),
])
def test_cross_checks_at_load(overrides: dict[str, str], name: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(overrides)
    assert fragment in str(err.value)
    assert err.value.name == name


def test_cross_check_messages_include_the_values() -> None:
    with pytest.raises(ConfigError) as err:
        load({"group.share.record.lock.duration.ms": "10000"})
    assert "group.share.record.lock.duration.ms=10000" in str(err.value)
    assert "group.share.min.record.lock.duration.ms=15000" in str(err.value)


def test_share_bounds_can_be_widened_together() -> None:
    cfg = load({"group.share.max.record.lock.duration.ms": "120000", "group.share.record.lock.duration.ms": "90000",
                "group.share.max.partition.max.record.locks": "10000", "group.share.partition.max.record.locks": "8000"})
    assert cfg["group.share.record.lock.duration.ms"] == 90000
    assert cfg["group.share.partition.max.record.locks"] == 8000


def test_broker_id_is_a_synonym_of_node_id() -> None:
    cfg = load({"broker.id": "3"})
    assert cfg.node_id == 3
    assert cfg.source("node.id") == ConfigSource.STATIC_BROKER_CONFIG
    assert load({"broker.id": "3", "node.id": "3"}).node_id == 3
    assert broker().node_id == 1


# ---------------------------------------------------------------------------------------------
# Retention / roll / flush fallbacks
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("overrides, expected", [
    ({}, 604800000),
    ({"log.retention.hours": "1"}, 3600000),
    ({"log.retention.minutes": "2", "log.retention.hours": "1"}, 120000),
    ({"log.retention.ms": "5000", "log.retention.minutes": "2", "log.retention.hours": "1"}, 5000),
    ({"log.retention.ms": "-1"}, -1),
    ({"log.retention.hours": "-1"}, -1),
    ({"log.retention.minutes": "-5"}, -1),
])
def test_retention_precedence_ms_minutes_hours(overrides: dict[str, str], expected: int) -> None:
    cfg = load(overrides)
    assert cfg.log_retention_ms == expected
    assert topic_config(cfg, {}).retention_ms == expected


def test_roll_and_flush_fallbacks() -> None:
    assert topic_config(load({"log.roll.hours": "2"}), {}).segment_ms == 7200000
    assert topic_config(load({"log.roll.hours": "2", "log.roll.ms": "1000"}), {}).segment_ms == 1000
    assert topic_config(load({"log.roll.jitter.hours": "1"}), {}).segment_jitter_ms == 3600000
    assert topic_config(broker(), {}).flush_ms == LONG_MAX
    cfg = load({"log.flush.scheduler.interval.ms": "3000"})
    assert cfg.log_flush_interval_ms == 3000
    assert topic_config(cfg, {}).flush_ms == 3000
    cfg = load({"log.flush.scheduler.interval.ms": "3000", "log.flush.interval.ms": "500"})
    assert topic_config(cfg, {}).flush_ms == 500


# ---------------------------------------------------------------------------------------------
# Topic configs
# ---------------------------------------------------------------------------------------------


def test_topic_config_falls_back_to_broker_synonyms() -> None:
    cfg = load({
        "log.segment.bytes": "2097152", "message.max.bytes": "5000", "log.cleanup.policy": "compact,delete",
        "compression.type": "zstd", "log.message.timestamp.type": "LogAppendTime", "log.flush.interval.messages": "1",
        "log.index.interval.bytes": "100", "log.index.size.max.bytes": "2048", "log.retention.bytes": "999",
        "log.segment.delete.delay.ms": "5", "min.insync.replicas": "2", "log.preallocate": "true",
    })
    tc = topic_config(cfg, {})
    assert tc.segment_bytes == 2097152
    assert tc.max_message_bytes == 5000
    assert tc.cleanup_policy == ("compact", "delete") and tc.compact and tc.delete
    assert tc.compression_type == "zstd"
    assert tc.message_timestamp_type == "LogAppendTime" and tc.log_append_time
    assert tc.flush_messages == 1
    assert tc.index_interval_bytes == 100
    assert tc.segment_index_bytes == 2048
    assert tc.retention_bytes == 999
    assert tc.file_delete_delay_ms == 5
    assert tc.min_insync_replicas == 2
    assert tc.preallocate is True


def test_topic_overrides_win_over_broker_values() -> None:
    cfg = load({"log.segment.bytes": "2097152", "log.retention.hours": "1", "log.cleanup.policy": "compact"})
    tc = topic_config(cfg, {"segment.bytes": "3145728", "retention.ms": "-1", "cleanup.policy": "delete"})
    assert tc.segment_bytes == 3145728
    assert tc.retention_ms == -1
    assert tc.cleanup_policy == ("delete",) and not tc.compact
    # Names this version does not know are ignored here; validate_topic_overrides rejects them.
    assert topic_config(cfg, {"some.future.config": "1"}).segment_bytes == 2097152


def test_validate_topic_overrides() -> None:
    assert validate_topic_overrides({"retention.ms": " 1000 ", "cleanup.policy": "compact , delete",
                                     "preallocate": "TRUE"}) == {
        "retention.ms": "1000", "cleanup.policy": "compact,delete", "preallocate": "true"}
    with pytest.raises(ConfigError) as err:
        validate_topic_overrides({"retention.ms": "1", "foo": "1"})
    assert str(err.value) == "Unknown topic config name: foo" and err.value.name == "foo"
    with pytest.raises(ConfigError) as err:
        validate_topic_overrides({"retention.ms": "-2"})
    assert str(err.value) == "Invalid value -2 for configuration retention.ms: Value must be at least -1"
    with pytest.raises(ConfigError) as err:
        validate_topic_overrides({"segment.bytes": "100"})
    assert str(err.value) == "Invalid value 100 for configuration segment.bytes: Value must be at least 1048576"
    with pytest.raises(ConfigError) as err:
        validate_topic_overrides({"cleanup.policy": "compacted"})
    assert str(err.value) == "Invalid value compacted for configuration cleanup.policy: String must be one of: compact, delete"
    with pytest.raises(ConfigError, match="Null value not supported for topic configs: retention.ms"):
        validate_topic_overrides({"retention.ms": None})
    with pytest.raises(ConfigError, match=r"min.compaction.lag.ms \(10\) > max.compaction.lag.ms \(5\)"):
        validate_topic_overrides({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    # The cross-check uses the broker's value for the side that is not overridden.
    with pytest.raises(ConfigError, match="conflict topic config setting"):
        validate_topic_overrides({"min.compaction.lag.ms": "10"}, broker=load({"log.cleaner.max.compaction.lag.ms": "5"}))
    assert validate_topic_overrides({"min.compaction.lag.ms": "10"}) == {"min.compaction.lag.ms": "10"}


def test_describe_topic_configs_sources_and_synonyms() -> None:
    cfg = load({"log.retention.hours": "1", "log.segment.bytes": "2097152"})
    entries = by_name(describe_topic_configs(cfg, {"max.message.bytes": "2000"}))
    assert set(entries) == set(TOPIC_CONFIGS)

    override = entries["max.message.bytes"]
    assert (override.value, override.source, override.read_only, override.is_sensitive) == ("2000", 1, False, False)
    assert override.synonyms == [ConfigSynonym("max.message.bytes", "2000", ConfigSource.TOPIC_CONFIG),
                                 ConfigSynonym("message.max.bytes", "1048588", ConfigSource.DEFAULT_CONFIG)]
    assert override.config_type == ConfigType.INT

    retention = entries["retention.ms"]
    assert retention.value == "3600000"
    assert retention.source == ConfigSource.STATIC_BROKER_CONFIG
    assert retention.synonyms == [ConfigSynonym("log.retention.hours", "1", 4),
                                  ConfigSynonym("log.retention.hours", "168", 5)]

    segment = entries["segment.bytes"]
    assert (segment.value, segment.source) == ("2097152", 4)
    assert segment.synonyms[0] == ConfigSynonym("log.segment.bytes", "2097152", 4)

    default = entries["segment.index.bytes"]
    assert (default.value, default.source) == ("10485760", ConfigSource.DEFAULT_CONFIG)
    assert default.synonyms == [ConfigSynonym("log.index.size.max.bytes", "10485760", 5)]
    assert entries["cleanup.policy"].value == "delete" and entries["cleanup.policy"].config_type == 7
    assert entries["flush.ms"].value == str(LONG_MAX)
    assert entries["flush.ms"].synonyms == [ConfigSynonym("log.flush.scheduler.interval.ms", str(LONG_MAX), 5)]
    assert entries["retention.ms"].documentation


def test_describe_topic_after_dynamic_broker_change() -> None:
    cfg = load({"log.segment.bytes": "2097152"})
    cfg.alter("log.segment.bytes", "4194304")
    entry = by_name(describe_topic_configs(cfg, {}))["segment.bytes"]
    assert entry.value == "4194304"
    assert entry.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG == 3
    assert [s.source for s in entry.synonyms] == [3, 4, 5]


# ---------------------------------------------------------------------------------------------
# Broker describe and dynamic changes
# ---------------------------------------------------------------------------------------------


def test_describe_broker_configs() -> None:
    cfg = load({"num.partitions": "3", "log.retention.ms": "1000"})
    entries = by_name(describe_broker_configs(cfg))
    assert set(entries) == set(BROKER_CONFIGS)
    assert (entries["num.partitions"].value, entries["num.partitions"].source) == ("3", 4)
    assert entries["num.partitions"].read_only is True
    assert entries["num.partitions"].synonyms == [ConfigSynonym("num.partitions", "3", 4),
                                                  ConfigSynonym("num.partitions", "1", 5)]
    assert entries["log.retention.ms"].read_only is False
    assert entries["log.retention.ms"].synonyms == [ConfigSynonym("log.retention.ms", "1000", 4),
                                                    ConfigSynonym("log.retention.hours", "168", 5)]
    # The hours entry describes itself only, not the more specific ms setting.
    assert entries["log.retention.hours"].synonyms == [ConfigSynonym("log.retention.hours", "168", 5)]
    assert (entries["log.retention.minutes"].value, entries["log.retention.minutes"].source) == (None, 5)
    assert entries["log.cleanup.policy"].value == "delete"
    assert entries["auto.create.topics.enable"].value == "true"


def test_alter_dynamic_setting() -> None:
    cfg = load({"log.retention.ms": "1000"})
    cfg.alter("log.retention.ms", "2000")
    assert cfg["log.retention.ms"] == 2000
    assert cfg.source("log.retention.ms") == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    assert topic_config(cfg, {}).retention_ms == 2000
    assert cfg.dynamic_values() == {"log.retention.ms": "2000"}

    cfg.alter("log.retention.ms", "3000", per_broker=True)
    assert cfg["log.retention.ms"] == 3000
    assert cfg.source("log.retention.ms") == ConfigSource.DYNAMIC_BROKER_CONFIG
    entry = by_name(describe_broker_configs(cfg))["log.retention.ms"]
    assert [(s.value, s.source) for s in entry.synonyms] == [("3000", 2), ("2000", 3), ("1000", 4), ("168", 5)]

    cfg.alter("log.retention.ms", None, per_broker=True)
    assert cfg["log.retention.ms"] == 2000
    cfg.alter("log.retention.ms", None)
    assert cfg["log.retention.ms"] == 1000
    assert cfg.source("log.retention.ms") == ConfigSource.STATIC_BROKER_CONFIG
    assert cfg.dynamic_values() == {}

    cfg.alter("log.cleanup.policy", "compact,delete")
    assert cfg["log.cleanup.policy"] == ["compact", "delete"]
    assert cfg.dynamic_values() == {"log.cleanup.policy": "compact,delete"}


def test_alter_rejects_static_unknown_invalid_and_cross_check_failures() -> None:
    cfg = broker()
    with pytest.raises(ConfigError) as err:
        cfg.alter("num.partitions", "3")
    assert str(err.value) == "Cannot update these configs dynamically: Set(num.partitions)"
    with pytest.raises(ConfigError, match=r"Set\(listeners, num.partitions\)"):
        cfg.alter_many({"num.partitions": "3", "listeners": "PLAINTEXT://:1", "log.retention.ms": "5"})
    with pytest.raises(ConfigError, match=r"Cannot update these configs dynamically: Set\(listener.name.ext.ssl.keystore.location\)"):
        cfg.alter("listener.name.ext.ssl.keystore.location", "/k.jks", per_broker=True)
    with pytest.raises(ConfigError, match="Invalid value 10 for configuration log.segment.bytes: Value must be at least 1048576"):
        cfg.alter("log.segment.bytes", "10")
    with pytest.raises(ConfigError, match="log.retention.ms must be unlimited"):
        cfg.alter("log.retention.ms", "0")
    # Nothing was applied by the failed attempts.
    assert cfg["num.partitions"] == 1 and cfg["log.retention.ms"] is None
    assert cfg.dynamic_values() == {}


def test_a_name_the_broker_does_not_know_is_kept_and_described_as_kafka_does() -> None:
    """As Kafka (DynamicBrokerReconfigurationTest adds "some.config" per broker): accepted, kept as
    given in its layer, persisted with the dynamic values, described as sensitive with no value,
    read-only, of type UNKNOWN; removed like any other; a failed change applies none of it."""
    from sharebroker.config import describe_broker_configs

    cfg = BrokerConfig.load(env={}, overrides={"plugin.static.setting": "s"})
    cfg.alter_many({"some.config": "some.config.value", "log.retention.bytes": "100"}, per_broker=True)
    cfg.alter("some.config", "cluster-wide")
    cfg.alter("other.config", "x")
    assert cfg.dynamic_values(True) == {"log.retention.bytes": "100", "some.config": "some.config.value"}
    assert cfg.dynamic_values(False) == {"other.config": "x", "some.config": "cluster-wide"}
    node = {d.name: d for d in describe_broker_configs(cfg, per_broker=True)}
    some = node["some.config"]
    assert (some.value, some.is_sensitive, some.read_only, some.config_type, some.source) == (
        None, True, True, 0, ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert some.synonyms == [("some.config", None, ConfigSource.DYNAMIC_BROKER_CONFIG),
                             ("some.config", None, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]
    assert node["other.config"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    static = node["plugin.static.setting"]
    assert (static.value, static.source, static.is_sensitive) == (None, ConfigSource.STATIC_BROKER_CONFIG, True)
    default = {d.name: d for d in describe_broker_configs(cfg, per_broker=False)}
    assert set(default) == {"other.config", "some.config"}
    assert default["some.config"].synonyms == [("some.config", None, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]

    with pytest.raises(ConfigError):  # atomic: the valid custom name is not kept either
        cfg.alter_many({"third.config": "3", "log.segment.bytes": "10"})
    cfg.alter_many({"fourth.config": "4"}, validate_only=True)
    assert "third.config" not in cfg.dynamic_values(False) and "fourth.config" not in cfg.dynamic_values(False)

    restarted = BrokerConfig.load(env={}, overrides={})  # what start-up replays from the metadata
    restarted.alter_many(cfg.dynamic_values(True), per_broker=True, stored=True)
    restarted.alter_many(cfg.dynamic_values(False), stored=True)
    assert restarted.dynamic_values(True) == cfg.dynamic_values(True)
    assert restarted.dynamic_values(False) == cfg.dynamic_values(False)

    cfg.alter("some.config", None, per_broker=True)
    assert "some.config" not in cfg.dynamic_values(True)
    assert {d.name: d for d in describe_broker_configs(cfg)}["some.config"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG


def test_alter_many_is_atomic_and_validate_only_changes_nothing() -> None:
    cfg = broker()
    with pytest.raises(ConfigError):
        cfg.alter_many({"log.retention.bytes": "100", "log.segment.bytes": "1"})
    assert cfg["log.retention.bytes"] == -1
    cfg.alter_many({"log.retention.bytes": "100"}, validate_only=True)
    assert cfg["log.retention.bytes"] == -1
    cfg.alter_many({"log.retention.bytes": "100", "message.max.bytes": "2000"})
    assert (cfg["log.retention.bytes"], cfg["message.max.bytes"]) == (100, 2000)


def test_copy_is_independent() -> None:
    cfg = broker()
    clone = cfg.copy()
    clone.alter("log.retention.bytes", "5")
    assert clone["log.retention.bytes"] == 5
    assert cfg["log.retention.bytes"] == -1


def test_describe_default_broker_resource_lists_only_dynamic_defaults() -> None:
    cfg = broker()
    assert describe_broker_configs(cfg, per_broker=False) == []
    cfg.alter("message.max.bytes", "2000")
    cfg.alter("log.retention.bytes", "7", per_broker=True)
    entries = describe_broker_configs(cfg, per_broker=False)
    assert [(e.name, e.value, e.source) for e in entries] == [("message.max.bytes", "2000", 3)]
    assert entries[0].synonyms == [ConfigSynonym("message.max.bytes", "2000", 3)]


def test_list_values_are_fresh_lists() -> None:
    cfg = broker()
    policy = cfg["log.cleanup.policy"]
    policy.append("compact")
    assert cfg["log.cleanup.policy"] == ["delete"]


# ---------------------------------------------------------------------------------------------
# Listeners and log dir
# ---------------------------------------------------------------------------------------------


def test_listener_parsing() -> None:
    assert broker().listeners == [Listener("PLAINTEXT", "127.0.0.1", 9092)]
    assert load({"listeners": "PLAINTEXT://:0"}).listeners == [Listener("PLAINTEXT", "", 0)]
    assert load({"listeners": "plaintext://[::1]:9092"}).listeners == [Listener("PLAINTEXT", "::1", 9092)]
    assert str(Listener("PLAINTEXT", "::1", 9092)) == "PLAINTEXT://[::1]:9092"
    cfg = load({"listeners": "PLAINTEXT://127.0.0.1:9092, INTERNAL://0.0.0.0:9093",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT"})
    assert cfg.listeners == [Listener("PLAINTEXT", "127.0.0.1", 9092), Listener("INTERNAL", "0.0.0.0", 9093)]
    assert parse_listeners("A://h:1,B://h:2") == [Listener("A", "h", 1), Listener("B", "h", 2)]
    cfg = load({"listeners": "PLAINTEXT://:9092,SSL://:9093,SASL_SSL://:9094"})
    assert [(l.name, l.security_protocol) for l in cfg.listeners] == [
        ("PLAINTEXT", "PLAINTEXT"), ("SSL", "SSL"), ("SASL_SSL", "SASL_SSL")]


@pytest.mark.parametrize("overrides, fragment", [
    ({"listeners": "localhost:9092"}, "Unable to parse localhost:9092 to a broker endpoint"),
    ({"listeners": "PLAINTEXT://host"}, "Unable to parse PLAINTEXT://host to a broker endpoint"),
    ({"listeners": "PLAINTEXT://host:70000"}, "must be between 0 and 65535"),
    ({"listeners": "EXTERNAL://:9093"}, "No security protocol defined for listener EXTERNAL"),
    ({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"}, "Each listener must have a different name"),
    ({"listeners": ""}, "At least one non-controller listener is required"),
])
def test_bad_listeners(overrides: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(overrides)
    assert fragment in str(err.value)
    assert err.value.name == "listeners"
    assert str(err.value).startswith("Invalid value ")


def test_controller_listeners_are_not_served() -> None:
    cfg = load({"listeners": "PLAINTEXT://:9092,CONTROLLER://:9093", "controller.listener.names": "CONTROLLER",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"})
    assert cfg.listeners == [Listener("PLAINTEXT", "", 9092)]
    assert cfg.advertised_listeners == [Listener("PLAINTEXT", "", 9092)]


def test_advertised_listeners() -> None:
    cfg = load({"listeners": "PLAINTEXT://0.0.0.0:9092", "advertised.listeners": "PLAINTEXT://broker.example:19092"})
    assert cfg.advertised_listeners == [Listener("PLAINTEXT", "broker.example", 19092)]
    assert broker().advertised_listeners == broker().listeners
    with pytest.raises(ConfigError) as err:
        load({"advertised.listeners": "OTHER://h:1"})
    assert err.value.name == "advertised.listeners" and "Listener OTHER is not defined in listeners" in str(err.value)
    with pytest.raises(ConfigError, match="cannot use the nonroutable meta-address 0.0.0.0"):
        load({"advertised.listeners": "PLAINTEXT://0.0.0.0:9092"})
    with pytest.raises(ConfigError, match="Unable to parse nonsense to a broker endpoint"):
        load({"advertised.listeners": "nonsense"})


def test_log_dir(tmp_path: Path) -> None:
    assert broker().log_dir == Path("/tmp/kafka-logs")
    assert load({"log.dir": str(tmp_path / "a")}).log_dir == tmp_path / "a"
    assert load({"log.dir": str(tmp_path / "a"), "log.dirs": str(tmp_path / "b")}).log_dir == tmp_path / "b"
    with pytest.raises(ConfigError) as err:
        load({"log.dirs": "/a,/b"})
    assert str(err.value).startswith("log.dirs: sharebroker supports exactly one log directory")
    assert err.value.name == "log.dirs"
    with pytest.raises(ConfigError) as err:
        load({"log.dir": "/a,/b"})
    assert err.value.name == "log.dir"


# ---------------------------------------------------------------------------------------------
# Group configs
# ---------------------------------------------------------------------------------------------


def test_validate_group_config_bounds_come_from_the_broker() -> None:
    cfg = broker()
    assert validate_group_config(cfg, "share.record.lock.duration.ms", "20000") == 20000
    with pytest.raises(ConfigError) as err:
        validate_group_config(cfg, "share.record.lock.duration.ms", "10000")
    assert str(err.value).startswith("share.record.lock.duration.ms must be greater than or equal to "
                                     "group.share.min.record.lock.duration.ms")
    assert "group.share.min.record.lock.duration.ms=15000" in str(err.value)
    assert err.value.name == "share.record.lock.duration.ms"
    with pytest.raises(ConfigError, match="share.record.lock.duration.ms must be less than or equal to "
                                          "group.share.max.record.lock.duration.ms"):
        validate_group_config(cfg, "share.record.lock.duration.ms", "70000")
    with pytest.raises(ConfigError) as err:
        validate_group_config(cfg, "share.record.lock.duration.ms", "500")
    assert str(err.value) == "Invalid value 500 for configuration share.record.lock.duration.ms: Value must be at least 1000"
    with pytest.raises(ConfigError, match="share.delivery.count.limit must be less than or equal to "
                                          "group.share.max.delivery.count.limit"):
        validate_group_config(cfg, "share.delivery.count.limit", "11")
    with pytest.raises(ConfigError, match="share.partition.max.record.locks must be less than or equal to "
                                          "group.share.max.partition.max.record.locks"):
        validate_group_config(cfg, "share.partition.max.record.locks", "5000")
    with pytest.raises(ConfigError) as err:
        validate_group_config(cfg, "share.nope", "1")
    assert str(err.value) == "Unknown group config name: share.nope"
    with pytest.raises(ConfigError, match="String must be one of: read_committed, read_uncommitted"):
        validate_group_config(cfg, "share.isolation.level", "READ_COMMITTED")
    assert validate_group_config(cfg, "share.renew.acknowledge.enable", "false") is False

    wide = load({"group.share.max.record.lock.duration.ms": "120000"})
    assert validate_group_config(wide, "share.record.lock.duration.ms", "100000") == 100000


def test_validate_group_configs_cross_checks_with_broker_defaults() -> None:
    cfg = broker()
    validate_group_configs(cfg, {"share.heartbeat.interval.ms": "15000", "share.session.timeout.ms": "45000"})
    validate_group_configs(cfg, {"share.auto.offset.reset": None})
    wide = load({"group.share.max.heartbeat.interval.ms": "60000"})
    # Only the heartbeat is set: the broker's session timeout (45000) is what it is compared with.
    with pytest.raises(ConfigError) as err:
        validate_group_configs(wide, {"share.heartbeat.interval.ms": "50000"})
    assert str(err.value).startswith("share.session.timeout.ms must be greater than share.heartbeat.interval.ms")
    assert err.value.name == "share.session.timeout.ms"
    validate_group_configs(wide, {"share.heartbeat.interval.ms": "50000", "share.session.timeout.ms": "55000"})
    with pytest.raises(ConfigError, match="Unknown group config name: bogus"):
        validate_group_configs(cfg, {"share.session.timeout.ms": "50000", "bogus": "1"})


@pytest.mark.parametrize("value", [
    "earliest", "latest", "by_duration:PT1H", "by_duration:P1DT2H3M4.5S", "by_duration:pt0s", "by_duration:P0D",
    "by_duration:-PT-1H",
])
def test_share_auto_offset_reset_accepts(value: str) -> None:
    assert validate_group_config(broker(), "share.auto.offset.reset", value) == value


@pytest.mark.parametrize("value", [
    "LATEST", "none", "", "by_duration", "by_duration:", "by_duration:-PT1H", "by_duration:PT-1S",
    "by_duration:P1W", "by_duration:PT", "by_duration:P", "by_duration:1H", "By_duration:PT1H",
])
def test_share_auto_offset_reset_rejects(value: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate_group_config(broker(), "share.auto.offset.reset", value)
    assert str(err.value).startswith(f"Invalid value {value} for configuration share.auto.offset.reset: The value must "
                                     "be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS.>'")
    assert err.value.name == "share.auto.offset.reset"


@pytest.mark.parametrize("text, millis", [
    ("PT1H", 3_600_000), ("P2D", 172_800_000), ("PT0.5S", 500), ("pt1m", 60_000),
    ("P1DT1H1M1.001S", 90_061_001), ("PT1.123456789S", 1123), ("PT1,5S", 1500), ("P-1DT25H", 3_600_000),
    ("-PT-1H", 3_600_000), ("+PT2S", 2000), ("PT0S", 0),
])
def test_iso8601_duration(text: str, millis: int) -> None:
    assert parse_iso8601_duration_ms(text) == millis


@pytest.mark.parametrize("text", ["-PT1H", "PT-0.001S", "P-1D", "PT", "P", "P1DT", "1H", "PT1.0000000001S", "P1Y",
                                  "PT1H1D"])
def test_iso8601_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_iso8601_duration_ms(text)


def test_share_auto_offset_reset_timestamps() -> None:
    assert parse_share_auto_offset_reset("earliest").timestamp(1_000_000) == -2
    assert parse_share_auto_offset_reset("latest").timestamp(1_000_000) == -1
    strategy = parse_share_auto_offset_reset("by_duration:PT10S")
    assert strategy == ShareAutoOffsetReset("by_duration", 10_000)
    assert strategy.timestamp(1_000_000) == 990_000


def test_group_config_effective_values_and_clamping() -> None:
    cfg = load({"group.share.record.lock.duration.ms": "20000"})
    gc = group_config(cfg, {})
    assert gc.share_record_lock_duration_ms == 20000   # broker synonym
    assert gc.share_auto_offset_reset == "latest" and gc.share_auto_offset_reset_strategy.strategy == "latest"
    gc = group_config(cfg, {"share.record.lock.duration.ms": "40000", "share.auto.offset.reset": "earliest",
                            "share.isolation.level": "read_committed"})
    assert gc.share_record_lock_duration_ms == 40000
    assert gc.share_auto_offset_reset == "earliest" and gc.share_read_committed
    # A value stored under wider bounds is capped to the broker's current bounds.
    assert group_config(cfg, {"share.record.lock.duration.ms": "90000"}).share_record_lock_duration_ms == 60000
    assert group_config(cfg, {"share.record.lock.duration.ms": "1000"}).share_record_lock_duration_ms == 15000
    assert group_config(cfg, {"share.delivery.count.limit": "2"}).share_delivery_count_limit == 2


def test_describe_group_configs() -> None:
    cfg = load({"group.share.heartbeat.interval.ms": "6000"})
    entries = by_name(describe_group_configs(cfg, {"share.record.lock.duration.ms": "20000",
                                                   "share.isolation.level": "read_committed"}))
    assert set(entries) == set(GROUP_CONFIGS)
    assert {"consumer.session.timeout.ms", "consumer.heartbeat.interval.ms", "share.auto.offset.reset"} <= set(entries)

    lock = entries["share.record.lock.duration.ms"]
    assert (lock.value, lock.source, lock.read_only, lock.config_type) == ("20000", ConfigSource.GROUP_CONFIG, False, 3)
    assert lock.synonyms == [ConfigSynonym("share.record.lock.duration.ms", "20000", 8)]

    # As Kafka's ConfigHelper: a setting the group does not override is DEFAULT_CONFIG under its own
    # name, with the value of the broker's group.* setting (the broker setting is not a synonym).
    heartbeat = entries["share.heartbeat.interval.ms"]
    assert (heartbeat.value, heartbeat.source) == ("6000", ConfigSource.DEFAULT_CONFIG)
    assert heartbeat.synonyms == [ConfigSynonym("share.heartbeat.interval.ms", "6000", 5)]

    reset = entries["share.auto.offset.reset"]
    assert (reset.value, reset.source, reset.config_type) == ("latest", 5, 2)
    assert reset.synonyms == [ConfigSynonym("share.auto.offset.reset", "latest", 5)]
    isolation = entries["share.isolation.level"]
    assert (isolation.value, isolation.source) == ("read_committed", 8)
    assert isolation.synonyms == [ConfigSynonym("share.isolation.level", "read_committed", 8)]
    assert entries["share.renew.acknowledge.enable"].config_type == ConfigType.BOOLEAN
    assert entries["consumer.session.timeout.ms"].value == "45000"


# The settings Apache Kafka 4.2's own test harnesses pass (TestUtils.createBrokerConfig,
# KafkaClusterTestKit and the @ClusterConfigProperty keys of its client integration tests).
KAFKA_TEST_HARNESS_SETTINGS = {
    "unstable.feature.versions.enable": "true", "unstable.api.versions.enable": "true",
    "server.max.startup.time.ms": "600000", "broker.id": "1", "node.id": "1", "controller.listener.names": "CONTROLLER",
    "process.roles": "broker", "controller.quorum.voters": "1000@localhost:0", "replica.socket.timeout.ms": "1500",
    "controller.socket.timeout.ms": "1500", "controlled.shutdown.enable": "true", "delete.topic.enable": "true",
    "log.segment.delete.delay.ms": "1000", "log.cleaner.dedupe.buffer.size": "2097152",
    "offsets.topic.replication.factor": "1", "log.initial.task.delay.ms": "100", "offsets.topic.num.partitions": "5",
    "group.initial.rebalance.delay.ms": "0", "broker.rack": "rack-a", "num.network.threads": "2",
    "background.threads": "2", "num.partitions": "1", "default.replication.factor": "1",
    "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector", "metadata.log.dir": "/tmp/meta",
    "auto.leader.rebalance.enable": "false", "log.unclean.leader.election.enable": "false", "log.cleaner.enable": "false",
    "group.coordinator.rebalance.protocols": "classic,consumer,share", "group.coordinator.threads": "1",
    "group.coordinator.append.linger.ms": "0", "group.consumer.regex.refresh.interval.ms": "1000",
    "group.streams.max.size": "10", "offsets.load.buffer.size": "1024", "offsets.topic.compression.codec": "0",
    "share.coordinator.state.topic.compression.codec": "0", "group.share.enable": "true",
    "group.share.persister.class.name": "org.apache.kafka.server.share.persister.DefaultStatePersister",
    "share.coordinator.state.topic.replication.factor": "1", "share.coordinator.state.topic.min.isr": "1",
    "transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1",
}


def test_every_setting_kafka_test_harnesses_pass_is_known() -> None:
    cfg = BrokerConfig.load(env={}, overrides=KAFKA_TEST_HARNESS_SETTINGS)
    assert cfg.unknown == []
    assert list(cfg["group.coordinator.rebalance.protocols"]) == ["classic", "consumer", "share"]
    assert cfg["log.initial.task.delay.ms"] == 100 and cfg["broker.rack"] == "rack-a"
    assert load({"group.share.persister.class.name": ""})["group.share.persister.class.name"] == ""


@pytest.mark.parametrize(("value", "message"), [
    ("consumer", "Disabling the 'classic' protocol is not supported."),
    ("classic,queue", "Invalid value queue for configuration group.coordinator.rebalance.protocols: "
                      "String must be one of: classic, consumer, share, streams"),
])
def test_rebalance_protocols_are_checked_as_kafka_does(value: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load({"group.coordinator.rebalance.protocols": value})
    assert str(err.value) == message


def test_only_kafkas_default_share_persister_is_accepted() -> None:
    with pytest.raises(ConfigError, match="DefaultStatePersister only"):
        load({"group.share.persister.class.name": "com.example.MyPersister"})


def test_share_assignment_interval_defaults_env_and_bounds() -> None:
    """Kafka's group.share.*assignment.interval.ms: 1000 within [0, 15000], set through the
    environment as the Kafka image does, and its start-up checks."""
    cfg = BrokerConfig.load(None, env={}, overrides={})
    assert (cfg["group.share.assignment.interval.ms"], cfg["group.share.min.assignment.interval.ms"],
            cfg["group.share.max.assignment.interval.ms"]) == (1000, 0, 15000)
    cfg = BrokerConfig.load(None, env={"KAFKA_GROUP_SHARE_ASSIGNMENT_INTERVAL_MS": "0"}, overrides={})
    assert cfg["group.share.assignment.interval.ms"] == 0
    with pytest.raises(ConfigError) as err:
        load({"group.share.min.assignment.interval.ms": "2000"})
    assert str(err.value).startswith("group.share.assignment.interval.ms must be greater than or equal to "
                                     "group.share.min.assignment.interval.ms")
    with pytest.raises(ConfigError) as err:
        load({"group.share.min.assignment.interval.ms": "100", "group.share.max.assignment.interval.ms": "50",
              "group.share.assignment.interval.ms": "75"})
    assert str(err.value).startswith("group.share.max.assignment.interval.ms must be greater than or equal to "
                                     "group.share.min.assignment.interval.ms")
    with pytest.raises(ConfigError):
        load({"group.share.assignment.interval.ms": "-1"})


def test_consumer_assignment_interval_defaults_bounds_and_dynamic_changes() -> None:
    """Kafka's group.consumer.*assignment.interval.ms: 1000 within [0, 15000], the start-up
    checks, the dynamic broker default, and the group-level consumer.assignment.interval.ms held
    within the broker's bounds (refused outside them, capped if the bounds narrow later)."""
    cfg = BrokerConfig.load(None, env={}, overrides={})
    assert (cfg["group.consumer.assignment.interval.ms"], cfg["group.consumer.min.assignment.interval.ms"],
            cfg["group.consumer.max.assignment.interval.ms"]) == (1000, 0, 15000)
    assert group_config(cfg, {}).consumer_assignment_interval_ms == 1000
    cfg = BrokerConfig.load(None, env={"KAFKA_GROUP_CONSUMER_ASSIGNMENT_INTERVAL_MS": "0"}, overrides={})
    assert cfg["group.consumer.assignment.interval.ms"] == 0
    with pytest.raises(ConfigError) as err:
        load({"group.consumer.assignment.interval.ms": "20000"})
    assert str(err.value).startswith("group.consumer.assignment.interval.ms must be less than or equal to "
                                     "group.consumer.max.assignment.interval.ms")
    with pytest.raises(ConfigError) as err:
        load({"group.consumer.min.assignment.interval.ms": "2000"})
    assert str(err.value).startswith("group.consumer.assignment.interval.ms must be greater than or equal to "
                                     "group.consumer.min.assignment.interval.ms")
    with pytest.raises(ConfigError) as err:
        load({"group.consumer.min.assignment.interval.ms": "100", "group.consumer.max.assignment.interval.ms": "50",
              "group.consumer.assignment.interval.ms": "75"})
    assert str(err.value).startswith("group.consumer.max.assignment.interval.ms must be greater than or equal to "
                                     "group.consumer.min.assignment.interval.ms")
    with pytest.raises(ConfigError):
        load({"group.consumer.assignment.interval.ms": "-1"})

    # The broker default is dynamic (the bounds are not), and a group without an override follows it.
    cfg = load({"group.consumer.max.assignment.interval.ms": "5000"})
    cfg.alter("group.consumer.assignment.interval.ms", "250")
    assert group_config(cfg, {}).consumer_assignment_interval_ms == 250
    entry = by_name(describe_broker_configs(cfg))["group.consumer.assignment.interval.ms"]
    assert (entry.value, entry.source, entry.read_only) == ("250", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, False)
    assert by_name(describe_broker_configs(cfg))["group.consumer.max.assignment.interval.ms"].read_only
    with pytest.raises(ConfigError) as err:
        cfg.alter("group.consumer.assignment.interval.ms", "6000")
    assert "must be less than or equal to group.consumer.max.assignment.interval.ms" in str(err.value)
    with pytest.raises(ConfigError):
        cfg.alter("group.consumer.max.assignment.interval.ms", "9000")

    assert validate_group_config(cfg, "consumer.assignment.interval.ms", "0") == 0
    assert validate_group_config(cfg, "consumer.assignment.interval.ms", "5000") == 5000
    with pytest.raises(ConfigError) as err:
        validate_group_config(cfg, "consumer.assignment.interval.ms", "5001")
    assert str(err.value).startswith("consumer.assignment.interval.ms must be less than or equal to "
                                     "group.consumer.max.assignment.interval.ms")
    with pytest.raises(ConfigError):
        validate_group_config(cfg, "consumer.assignment.interval.ms", "-1")
    narrow = load({"group.consumer.min.assignment.interval.ms": "100", "group.consumer.max.assignment.interval.ms": "200",
                   "group.consumer.assignment.interval.ms": "150"})
    with pytest.raises(ConfigError) as err:
        validate_group_config(narrow, "consumer.assignment.interval.ms", "50")
    assert str(err.value).startswith("consumer.assignment.interval.ms must be greater than or equal to "
                                     "group.consumer.min.assignment.interval.ms")
    assert group_config(narrow, {"consumer.assignment.interval.ms": "5000"}).consumer_assignment_interval_ms == 200
    assert group_config(narrow, {"consumer.assignment.interval.ms": "0"}).consumer_assignment_interval_ms == 100
    described = by_name(describe_group_configs(narrow, {}))["consumer.assignment.interval.ms"]
    assert (described.value, described.source, described.config_type) == ("150", ConfigSource.DEFAULT_CONFIG, 3)


@pytest.mark.parametrize("kind", ["consumer", "share"])
def test_a_stored_dynamic_assignment_interval_outside_narrowed_bounds_is_capped(kind: str) -> None:
    """As Kafka (GroupCoordinatorConfig.clampDynamicConfigs when it applies the stored dynamic
    configs): a dynamic group.<kind>.assignment.interval.ms that the static bounds, narrowed since
    it was set, no longer allow is capped into them and the rest of the dynamic configs stay in
    force; the stored value is kept as it was set. A change is checked with the stored values as
    they are (Kafka builds the whole config from them), so while one is outside its bounds every
    change of that config is refused until it is set within them or removed."""
    name, low, high = (f"group.{kind}.assignment.interval.ms", f"group.{kind}.min.assignment.interval.ms",
                       f"group.{kind}.max.assignment.interval.ms")
    cfg = load({high: "5000"})
    cfg.alter_many({name: "12000", "log.retention.ms": "60000"}, stored=True)  # as applied at start-up
    assert (cfg[name], cfg["log.retention.ms"]) == (5000, 60000)
    assert cfg.capped() == [(name, 12000, 5000)]
    assert cfg.dynamic_values(False) == {name: "12000", "log.retention.ms": "60000"}
    entry = by_name(describe_broker_configs(cfg))[name]
    assert (entry.value, entry.source) == ("5000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert getattr(group_config(cfg, {}), f"{kind}_assignment_interval_ms") == 5000
    with pytest.raises(ConfigError) as err:
        cfg.alter("log.retention.ms", "70000")
    assert str(err.value).startswith(f"{name} must be less than or equal to {high}")
    cfg.alter(name, "4000")
    assert (cfg[name], cfg.capped()) == (4000, [])
    cfg.alter("log.retention.ms", "70000")

    narrow = load({low: "2000", high: "3000", name: "2500"})
    narrow.alter_many({name: "500"}, per_broker=True, stored=True)
    assert (narrow[name], narrow.capped()) == (2000, [(name, 500, 2000)])
    with pytest.raises(ConfigError) as err:  # the cluster default within bounds: this broker's own 500 is not
        narrow.alter(name, "2600")
    assert str(err.value).startswith(f"{name} must be greater than or equal to {low}")
    narrow.alter(name, None, per_broker=True)
    narrow.alter(name, "2600")
    assert narrow[name] == 2600


def test_a_stored_group_value_outside_narrowed_bounds_is_capped_with_a_warning() -> None:
    """Kafka's GroupConfig.evaluate: a group's stored value that the broker's bounds no longer allow
    takes effect capped into them, and Kafka warns of it; values within them say nothing."""
    narrow = load({"group.share.min.assignment.interval.ms": "100", "group.share.max.assignment.interval.ms": "200",
                   "group.share.assignment.interval.ms": "150"})
    told: list[tuple[str, object, object]] = []
    cfg = group_config(narrow, {"share.assignment.interval.ms": "5000", "consumer.assignment.interval.ms": "0",
                                "share.delivery.count.limit": "3"}, lambda *a: told.append(a))
    assert (cfg.share_assignment_interval_ms, cfg.consumer_assignment_interval_ms) == (200, 0)
    assert told == [("share.assignment.interval.ms", 5000, 200)]
