"""Every sharebroker setting in one table, with Apache Kafka 4.2's names, types, defaults and ranges.

Three tables: broker settings (``BROKER_CONFIGS``), topic-level settings (``TOPIC_CONFIGS``, each
falling back to a broker synonym) and group-level settings (``GROUP_CONFIGS``, share/consumer/streams
groups, bounded by broker min/max settings). ``BrokerConfig.load`` reads defaults < properties file
< ``KAFKA_*`` environment < CLI overrides and validates everything at start; ``alter`` applies
dynamic (IncrementalAlterConfigs) changes on top. The describe_* functions build DescribeConfigs
entries with Kafka's sources and synonyms.

Error messages follow Kafka's ConfigDef wording ("Invalid value 0 for configuration num.partitions:
Value must be at least 1") so clients see what a Kafka broker would say.
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, NamedTuple

from sharebroker.config.properties import PropertiesError, kafka_env, load_properties

__all__ = [
    "BROKER_CONFIGS",
    "GROUP_CONFIGS",
    "TOPIC_CONFIGS",
    "AtLeast",
    "Between",
    "BrokerConfig",
    "ConfigDef",
    "ConfigError",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "DescribedConfig",
    "GroupConfig",
    "GroupConfigDef",
    "Listener",
    "ShareAutoOffsetReset",
    "TopicConfig",
    "TopicConfigDef",
    "describe_broker_configs",
    "describe_group_configs",
    "describe_topic_configs",
    "group_config",
    "parse_iso8601_duration_ms",
    "parse_listeners",
    "parse_share_auto_offset_reset",
    "topic_config",
    "validate_group_config",
    "validate_group_configs",
    "validate_topic_overrides",
]

SHORT_MAX = (1 << 15) - 1
INT_MAX = (1 << 31) - 1
LONG_MAX = (1 << 63) - 1
_BOUNDS = {
    "short": (-(1 << 15), SHORT_MAX),
    "int": (-(1 << 31), INT_MAX),
    "long": (-(1 << 63), LONG_MAX),
}
MS_PER_MINUTE = 60_000
MS_PER_HOUR = 3_600_000


class ConfigSource(enum.IntEnum):
    """DescribeConfigs ConfigSource ids, as on the wire."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1  # the admin client calls it DYNAMIC_TOPIC_CONFIG
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class ConfigType(enum.IntEnum):
    """DescribeConfigs ConfigType ids (v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


_TYPES = frozenset(t.name.lower() for t in ConfigType if t is not ConfigType.UNKNOWN)


class ConfigError(ValueError):
    """An invalid or unknown setting. ``str(error)`` is the Kafka-style message; ``name`` the setting."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name
        self.message = message

    @classmethod
    def invalid(cls, name: str, value: Any, reason: str | None = None) -> ConfigError:
        text = f"Invalid value {_display(value)} for configuration {name}"
        return cls(name, f"{text}: {reason}" if reason else text)


def _display(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


# ---------------------------------------------------------------------------------------------
# Typed parsing (Kafka ConfigDef.parseType rules) and validators
# ---------------------------------------------------------------------------------------------

_INTEGER_RE = re.compile(r"[+-]?[0-9]+")
_DOUBLE_RE = re.compile(r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?")
_LIST_SPLIT = re.compile(r"\s*,\s*")


def _parse_typed(name: str, type_: str, raw: str) -> Any:
    """Parse a raw string to the Python value for ``type_``; lists become tuples."""
    text = raw.strip()
    if type_ == "boolean":
        low = text.lower()
        if low == "true":
            return True
        if low == "false":
            return False
        raise ConfigError.invalid(name, text, "Expected value to be either true or false")
    if type_ in _BOUNDS:
        if _INTEGER_RE.fullmatch(text):
            value = int(text)
            low_bound, high_bound = _BOUNDS[type_]
            if low_bound <= value <= high_bound:
                return value
        raise ConfigError.invalid(name, text, f"Not a number of type {type_.upper()}")
    if type_ == "double":
        if _DOUBLE_RE.fullmatch(text):
            return float(text.rstrip("fFdD").replace("Infinity", "inf"))
        raise ConfigError.invalid(name, text, "Not a number of type DOUBLE")
    if type_ == "list":
        return () if text == "" else tuple(_LIST_SPLIT.split(text))
    return text  # string, password, class


class AtLeast:
    """Kafka ``Range.atLeast``."""

    def __init__(self, low: int | float) -> None:
        self.low = low

    def __call__(self, name: str, value: Any) -> None:
        if value < self.low:
            raise ConfigError.invalid(name, value, f"Value must be at least {self.low}")

    def describe(self) -> str:
        return f"[{self.low},...]"


class Between:
    """Kafka ``Range.between`` (inclusive)."""

    def __init__(self, low: int | float, high: int | float) -> None:
        self.low = low
        self.high = high

    def __call__(self, name: str, value: Any) -> None:
        if value < self.low:
            raise ConfigError.invalid(name, value, f"Value must be at least {self.low}")
        if value > self.high:
            raise ConfigError.invalid(name, value, f"Value must be no more than {self.high}")

    def describe(self) -> str:
        return f"[{self.low},...,{self.high}]"


class OneOf:
    """Kafka ``ValidString.in`` (case-sensitive)."""

    def __init__(self, *values: str) -> None:
        self.values = values

    def __call__(self, name: str, value: Any) -> None:
        if value not in self.values:
            raise ConfigError.invalid(name, value, f"String must be one of: {', '.join(self.values)}")

    def describe(self) -> str:
        return f"[{', '.join(self.values)}]"


class ListOf:
    """Kafka ``ValidList.in``: every element must be one of ``values`` (an empty list is allowed)."""

    def __init__(self, *values: str) -> None:
        self.values = values

    def __call__(self, name: str, value: Any) -> None:
        for item in value:
            if item not in self.values:
                raise ConfigError.invalid(name, item, f"String must be one of: {', '.join(self.values)}")

    def describe(self) -> str:
        return f"[{', '.join(self.values)}]"


class _Check:
    """A validator from a predicate, with a Kafka-style reason and range text."""

    def __init__(self, ok: Callable[[Any], bool], reason: str, text: str) -> None:
        self.ok = ok
        self.reason = reason
        self.text = text

    def __call__(self, name: str, value: Any) -> None:
        if not self.ok(value):
            raise ConfigError.invalid(name, value, self.reason)

    def describe(self) -> str:
        return self.text


Validator = Callable[[str, Any], None]


# ---------------------------------------------------------------------------------------------
# Definitions
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigDef:
    """One setting: Kafka name, type, typed default (None = no default), doc, validator."""

    name: str
    type: str
    default: Any
    doc: str
    validator: Validator | None = None
    dynamic: bool = False

    def __post_init__(self) -> None:
        if self.type not in _TYPES:
            raise ValueError(f"{self.name}: unknown config type {self.type!r}")
        if isinstance(self.default, list):
            object.__setattr__(self, "default", tuple(self.default))

    def parse(self, raw: str) -> Any:
        """Raw string -> validated typed value (lists as tuples); raises ConfigError."""
        value = _parse_typed(self.name, self.type, raw)
        if self.validator is not None:
            self.validator(self.name, value)
        return value

    def describe_range(self) -> str:
        describe = getattr(self.validator, "describe", None)
        return describe() if describe is not None else ""

    @property
    def config_type(self) -> int:
        return int(ConfigType[self.type.upper()])

    @property
    def is_sensitive(self) -> bool:
        return self.type == "password"

    def to_string(self, value: Any) -> str | None:
        """Kafka's ``ConfigDef.convertToString``; None stays None."""
        if value is None:
            return None
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (list, tuple)):
            return ",".join(str(v) for v in value)
        if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
            return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
        return str(value)


@dataclass(frozen=True)
class TopicConfigDef(ConfigDef):
    """A topic-level setting; ``synonyms`` are the broker settings it falls back to, with the factor
    that converts each to the topic unit (e.g. log.retention.hours x 3600000 -> retention.ms)."""

    synonyms: tuple[tuple[str, int], ...] = ()

    @property
    def synonym(self) -> str | None:
        return self.synonyms[0][0] if self.synonyms else None

    @property
    def attribute(self) -> str:
        return self.name.replace(".", "_")


@dataclass(frozen=True)
class GroupConfigDef(ConfigDef):
    """A group-level setting; its default is the broker ``synonym``, its value must lie within the
    broker settings ``min_config`` / ``max_config`` when those are named."""

    synonym: str | None = None
    min_config: str | None = None
    max_config: str | None = None

    @property
    def attribute(self) -> str:
        return self.name.replace(".", "_")


def _gzip_level(value: int) -> bool:
    return value == -1 or 1 <= value <= 9


_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_CLEANUP_POLICIES = ("compact", "delete")
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_SIMPLE_ASSIGNOR_NAMES = ("simple", "org.apache.kafka.coordinator.group.assignor.SimpleAssignor")
_COMPAT = " Accepted for compatibility with Kafka configuration files; sharebroker is a single process and ignores it."


def _listeners_syntax(name: str, value: str) -> None:
    parse_listeners(value, name)


def _protocol_map_syntax(name: str, value: str) -> None:
    _parse_protocol_map(value, name)


def _non_empty_entries(name: str, value: tuple[str, ...]) -> None:
    if any(item == "" for item in value):
        raise ConfigError.invalid(name, value, "Empty directory names are not allowed")


def _share_assignors(name: str, value: tuple[str, ...]) -> None:
    for item in value:
        if item not in _SIMPLE_ASSIGNOR_NAMES:
            raise ConfigError.invalid(name, item, "sharebroker supports only the built-in share group assignor: simple")


def _broker_defs() -> list[ConfigDef]:
    d = ConfigDef
    return [
        # -- node, cluster, listeners -------------------------------------------------------------
        d("node.id", "int", 1, "The id of this node (broker.id is accepted as a synonym). sharebroker defaults to 1.",
          AtLeast(0)),
        d("broker.id", "int", -1, "Legacy name of node.id; if set, it must equal node.id."),
        d("cluster.id", "string", None, "sharebroker only: a fixed cluster id to report. When unset the broker uses "
          "the id stored in its log directory, creating one on first start."),
        d("process.roles", "list", (), "The roles of this node (broker, controller)." + _COMPAT, ListOf("broker", "controller")),
        d("controller.quorum.voters", "list", (), "KRaft controller voters." + _COMPAT),
        d("controller.quorum.bootstrap.servers", "list", (), "KRaft controller bootstrap servers." + _COMPAT),
        d("controller.listener.names", "string", None, "Comma-separated names of controller listeners; listeners with "
          "these names are not served by sharebroker (it has no separate controller)."),
        d("listeners", "string", "PLAINTEXT://127.0.0.1:9092", "Comma-separated listener URIs NAME://host:port. An empty "
          "host binds all interfaces; port 0 picks a free port. sharebroker serves PLAINTEXT listeners only.",
          _listeners_syntax),
        d("advertised.listeners", "string", None, "Listener URIs given to clients in metadata; defaults to listeners. "
          "An empty host or port 0 is replaced by the broker with the bound address.", _listeners_syntax),
        d("listener.security.protocol.map", "string", "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
          "Map from listener name to security protocol, NAME:PROTOCOL pairs separated by commas.", _protocol_map_syntax),
        d("inter.broker.listener.name", "string", None, "Listener used between brokers." + _COMPAT),
        d("num.network.threads", "int", 3, "Network threads." + _COMPAT, AtLeast(1)),
        d("num.io.threads", "int", 8, "Request handler threads." + _COMPAT, AtLeast(1)),
        d("socket.send.buffer.bytes", "int", 102400, "SO_SNDBUF for client sockets; -1 uses the OS default."),
        d("socket.receive.buffer.bytes", "int", 102400, "SO_RCVBUF for client sockets; -1 uses the OS default."),
        d("socket.request.max.bytes", "int", 104857600, "Largest request frame accepted.", AtLeast(1)),
        d("connections.max.idle.ms", "long", 600000, "Idle connections are closed after this many milliseconds."),
        d("queued.max.request.bytes", "long", -1, "Bytes that partly received and queued large requests of all "
          "connections may hold together before no more is read from them (-1: no bound)."),
        d("max.connections", "int", 2147483647, "Most client connections open at once; a new connection above it "
          "is closed at once.", AtLeast(0)),
        d("max.connections.per.ip", "int", 2147483647, "Most connections from one IP address; a new connection "
          "above it is closed at once.", AtLeast(0)),
        d("max.connections.per.ip.overrides", "string", "", "Per-IP (or host name) limits overriding "
          "max.connections.per.ip, as ip:limit pairs separated by commas."),
        d("fetch.max.bytes", "int", 57671680, "Most bytes returned by one Fetch or ShareFetch response.", AtLeast(1024)),
        d("max.incremental.fetch.session.cache.slots", "int", 1000, "Most incremental fetch sessions kept.", AtLeast(0)),
        # -- logs ----------------------------------------------------------------------------------
        d("log.dirs", "list", None, "Directory holding the log data (sharebroker supports exactly one). Defaults to log.dir.",
          _non_empty_entries),
        d("log.dir", "list", ("/tmp/kafka-logs",), "Log directory used when log.dirs is not set.", _non_empty_entries),
        d("num.partitions", "int", 1, "Default number of partitions for auto-created topics and for CreateTopics "
          "with NumPartitions -1.", AtLeast(1)),
        d("default.replication.factor", "int", 1, "Default replication factor (a single node stores one replica)."),
        d("auto.create.topics.enable", "boolean", True, "Create a topic when a client asks for metadata of an unknown topic."),
        d("delete.topic.enable", "boolean", True, "Allow DeleteTopics."),
        d("num.recovery.threads.per.data.dir", "int", 2, "Log recovery threads." + _COMPAT, AtLeast(1)),
        d("log.segment.bytes", "int", 1073741824, "Maximum size of one log segment file.", AtLeast(1048576), dynamic=True),
        d("log.roll.ms", "long", None, "Roll a new segment after this many milliseconds; if unset log.roll.hours is used.",
          dynamic=True),
        d("log.roll.hours", "int", 168, "Roll a new segment after this many hours (used when log.roll.ms is unset).",
          AtLeast(1), dynamic=True),
        d("log.roll.jitter.ms", "long", None, "Most jitter subtracted from the roll time; if unset log.roll.jitter.hours is used."),
        d("log.roll.jitter.hours", "int", 0, "Most jitter subtracted from the roll time, in hours.", AtLeast(0)),
        d("log.retention.ms", "long", None, "Delete segments older than this many milliseconds; -1 keeps them forever. "
          "Takes precedence over log.retention.minutes and log.retention.hours.", dynamic=True),
        d("log.retention.minutes", "int", None, "Retention in minutes, used when log.retention.ms is unset.", dynamic=True),
        d("log.retention.hours", "int", 168, "Retention in hours, used when log.retention.ms and log.retention.minutes "
          "are unset.", dynamic=True),
        d("log.retention.bytes", "long", -1, "Delete old segments once a partition is larger than this; -1 means no size limit.",
          dynamic=True),
        d("log.retention.check.interval.ms", "long", 300000, "How often retention is checked.", AtLeast(1)),
        d("log.cleanup.policy", "list", ("delete",), "Default cleanup policy: delete and/or compact.",
          ListOf(*_CLEANUP_POLICIES), dynamic=True),
        d("log.index.size.max.bytes", "int", 10485760, "Maximum size of an offset index file.", AtLeast(4)),
        d("log.index.interval.bytes", "int", 4096, "Bytes of log between offset index entries.", AtLeast(0)),
        d("log.flush.interval.messages", "long", LONG_MAX, "fsync a partition after this many appended messages "
          "(1 = fsync before acknowledging every append).", AtLeast(1), dynamic=True),
        d("log.flush.interval.ms", "long", None, "fsync a partition whose oldest unflushed message is this old; if unset "
          "log.flush.scheduler.interval.ms is used.", dynamic=True),
        d("log.flush.scheduler.interval.ms", "long", LONG_MAX, "How often the time-based flush check runs; also the "
          "flush interval when log.flush.interval.ms is unset."),
        d("log.flush.offset.checkpoint.interval.ms", "int", 60000, "How often the recovery point is checkpointed.", AtLeast(0)),
        d("log.segment.delete.delay.ms", "long", 60000, "Delay before a deleted segment's files are removed.", AtLeast(0)),
        d("log.preallocate", "boolean", False, "Preallocate segment files."),
        d("log.message.timestamp.type", "string", "CreateTime", "Use the producer's timestamp (CreateTime) or the "
          "broker's append time (LogAppendTime).", OneOf(*_TIMESTAMP_TYPES)),
        d("log.message.timestamp.before.max.ms", "long", LONG_MAX, "With CreateTime, reject records whose timestamp is "
          "more than this many ms before the broker's clock.", AtLeast(0)),
        d("log.message.timestamp.after.max.ms", "long", 3600000, "With CreateTime, reject records whose timestamp is "
          "more than this many ms after the broker's clock.", AtLeast(0)),
        d("log.cleaner.delete.retention.ms", "long", 86400000, "How long delete tombstones are kept in compacted topics.",
          AtLeast(0)),
        d("log.cleaner.min.compaction.lag.ms", "long", 0, "Minimum age of a record before it may be compacted.", AtLeast(0)),
        d("log.cleaner.max.compaction.lag.ms", "long", LONG_MAX, "Maximum time a record stays ineligible for compaction.",
          AtLeast(1)),
        d("log.cleaner.min.cleanable.ratio", "double", 0.5, "Minimum dirty ratio before a log is compacted.", Between(0, 1)),
        d("message.max.bytes", "int", 1048588, "Largest record batch accepted (after compression).", AtLeast(0), dynamic=True),
        d("compression.type", "string", "producer", "Compression of stored batches; 'producer' keeps what the producer sent.",
          OneOf(*_COMPRESSION_TYPES)),
        d("compression.gzip.level", "int", -1, "gzip level when compression.type is gzip.",
          _Check(_gzip_level, "Value must be between 1 and 9, or -1", "[1,...,9] or -1")),
        d("compression.lz4.level", "int", 9, "lz4 level when compression.type is lz4.", Between(1, 17)),
        d("compression.zstd.level", "int", 3, "zstd level when compression.type is zstd.", Between(-131072, 22)),
        d("min.insync.replicas", "int", 1, "Replicas that must acknowledge an acks=all produce.", AtLeast(1)),
        d("unclean.leader.election.enable", "boolean", False, "Allow out-of-sync replicas to become leader."),
        # -- classic, consumer and streams groups, offsets -----------------------------------------
        d("group.initial.rebalance.delay.ms", "int", 3000, "Delay before the first rebalance of a new classic group."),
        d("group.min.session.timeout.ms", "int", 6000, "Smallest session timeout a classic group member may ask for."),
        d("group.max.session.timeout.ms", "int", 1800000, "Largest session timeout a classic group member may ask for."),
        d("group.max.size", "int", INT_MAX, "Most members in a classic group.", AtLeast(1)),
        d("group.consumer.session.timeout.ms", "int", 45000, "Session timeout of consumer-protocol group members.", AtLeast(1)),
        d("group.consumer.min.session.timeout.ms", "int", 45000, "Lower bound for consumer.session.timeout.ms.", AtLeast(1)),
        d("group.consumer.max.session.timeout.ms", "int", 60000, "Upper bound for consumer.session.timeout.ms.", AtLeast(1)),
        d("group.consumer.heartbeat.interval.ms", "int", 5000, "Heartbeat interval of consumer-protocol group members.",
          AtLeast(1)),
        d("group.consumer.min.heartbeat.interval.ms", "int", 5000, "Lower bound for consumer.heartbeat.interval.ms.", AtLeast(1)),
        d("group.consumer.max.heartbeat.interval.ms", "int", 15000, "Upper bound for consumer.heartbeat.interval.ms.", AtLeast(1)),
        d("group.streams.session.timeout.ms", "int", 45000, "Session timeout of streams group members.", AtLeast(1)),
        d("group.streams.min.session.timeout.ms", "int", 45000, "Lower bound for streams.session.timeout.ms.", AtLeast(1)),
        d("group.streams.max.session.timeout.ms", "int", 60000, "Upper bound for streams.session.timeout.ms.", AtLeast(1)),
        d("group.streams.heartbeat.interval.ms", "int", 5000, "Heartbeat interval of streams group members.", AtLeast(1)),
        d("group.streams.min.heartbeat.interval.ms", "int", 5000, "Lower bound for streams.heartbeat.interval.ms.", AtLeast(1)),
        d("group.streams.max.heartbeat.interval.ms", "int", 15000, "Upper bound for streams.heartbeat.interval.ms.", AtLeast(1)),
        d("group.streams.num.standby.replicas", "int", 0, "Standby replicas per streams task.", AtLeast(0)),
        d("group.streams.max.standby.replicas", "int", 2, "Upper bound for streams.num.standby.replicas.", AtLeast(0)),
        d("group.streams.initial.rebalance.delay.ms", "int", 3000, "Delay before the first rebalance of a new streams group.",
          AtLeast(0)),
        d("offsets.topic.num.partitions", "int", 50, "Partitions of __consumer_offsets.", AtLeast(1)),
        d("offsets.topic.replication.factor", "short", 3, "Replication factor of __consumer_offsets." + _COMPAT, AtLeast(1)),
        d("offsets.topic.segment.bytes", "int", 104857600, "Segment size of __consumer_offsets.", AtLeast(1)),
        d("offsets.retention.minutes", "int", 10080, "How long committed offsets of an empty group are kept.", AtLeast(1)),
        d("offsets.retention.check.interval.ms", "long", 600000, "How often stale offsets are looked for.", AtLeast(1)),
        d("offsets.commit.timeout.ms", "int", 5000, "How long a coordinator write may wait.", AtLeast(1)),
        d("offset.metadata.max.bytes", "int", 4096, "Largest metadata string of a committed offset."),
        # -- producers and transactions ------------------------------------------------------------
        d("producer.id.expiration.ms", "int", 86400000, "Forget an idle producer id's state after this long.", AtLeast(1)),
        d("transactional.id.expiration.ms", "int", 604800000, "Expire an idle transactional id after this long.", AtLeast(1)),
        d("transaction.max.timeout.ms", "int", 900000, "Largest transaction timeout a producer may ask for.", AtLeast(1)),
        d("transaction.state.log.num.partitions", "int", 50, "Partitions of __transaction_state.", AtLeast(1)),
        d("transaction.state.log.replication.factor", "short", 3, "Replication factor of __transaction_state." + _COMPAT,
          AtLeast(1)),
        d("transaction.state.log.min.isr", "int", 2, "min.insync.replicas of __transaction_state." + _COMPAT, AtLeast(1)),
        # -- share groups --------------------------------------------------------------------------
        d("group.share.max.size", "int", 200, "Most members in one share group.", Between(1, 1000)),
        d("group.share.session.timeout.ms", "int", 45000, "Session timeout of share group members; default of "
          "share.session.timeout.ms.", AtLeast(1)),
        d("group.share.min.session.timeout.ms", "int", 45000, "Lower bound for share.session.timeout.ms.", AtLeast(1)),
        d("group.share.max.session.timeout.ms", "int", 60000, "Upper bound for share.session.timeout.ms.", AtLeast(1)),
        d("group.share.heartbeat.interval.ms", "int", 5000, "Heartbeat interval of share group members; default of "
          "share.heartbeat.interval.ms.", AtLeast(1)),
        d("group.share.min.heartbeat.interval.ms", "int", 5000, "Lower bound for share.heartbeat.interval.ms.", AtLeast(1)),
        d("group.share.max.heartbeat.interval.ms", "int", 15000, "Upper bound for share.heartbeat.interval.ms.", AtLeast(1)),
        d("group.share.assignors", "list", ("simple",), "Server-side share group assignor; exactly one entry, and only the "
          "built-in 'simple' assignor is available.", _share_assignors),
        d("group.share.assignment.interval.ms", "int", 1000, "Minimum time between assignment updates of a share group; "
          "default of share.assignment.interval.ms.", AtLeast(0), dynamic=True),
        d("group.share.min.assignment.interval.ms", "int", 0, "Lower bound for share.assignment.interval.ms.", AtLeast(0)),
        d("group.share.max.assignment.interval.ms", "int", 15000, "Upper bound for share.assignment.interval.ms.", AtLeast(0)),
        d("group.share.initialize.retry.interval.ms", "int", 30000, "Wait before retrying a failed share-partition state "
          "initialization (at least offsets.commit.timeout.ms).", AtLeast(1)),
        d("group.share.record.lock.duration.ms", "int", 30000, "How long an acquired record stays locked to one consumer; "
          "default of share.record.lock.duration.ms.", Between(1000, 3600000)),
        d("group.share.min.record.lock.duration.ms", "int", 15000, "Lower bound for share.record.lock.duration.ms.",
          Between(1000, 30000)),
        d("group.share.max.record.lock.duration.ms", "int", 60000, "Upper bound for share.record.lock.duration.ms.",
          Between(30000, 3600000)),
        d("group.share.delivery.count.limit", "int", 5, "Deliveries after which a record is archived; default of "
          "share.delivery.count.limit.", Between(2, 10)),
        d("group.share.min.delivery.count.limit", "int", 2, "Lower bound for share.delivery.count.limit.", Between(2, 5)),
        d("group.share.max.delivery.count.limit", "int", 10, "Upper bound for share.delivery.count.limit.", Between(5, 25)),
        d("group.share.partition.max.record.locks", "int", 2000, "Most in-flight (acquired or available) records per share "
          "partition; default of share.partition.max.record.locks.", Between(100, 10000)),
        d("group.share.min.partition.max.record.locks", "int", 100, "Lower bound for share.partition.max.record.locks.",
          Between(100, 10000)),
        d("group.share.max.partition.max.record.locks", "int", 4000, "Upper bound for share.partition.max.record.locks.",
          Between(100, 10000)),
        d("group.share.max.share.sessions", "int", 2000, "Most share sessions cached by this broker.", AtLeast(1)),
        d("share.fetch.purgatory.purge.interval.requests", "int", 1000, "Purge interval (in requests) of waiting ShareFetch "
          "requests."),
        # -- share coordinator ---------------------------------------------------------------------
        d("share.coordinator.state.topic.num.partitions", "int", 50, "Partitions of __share_group_state.", AtLeast(1)),
        d("share.coordinator.state.topic.replication.factor", "short", 3, "Replication factor of __share_group_state; "
          "a single node keeps one copy whatever this says.", AtLeast(1)),
        d("share.coordinator.state.topic.min.isr", "short", 2, "min.insync.replicas of __share_group_state." + _COMPAT,
          AtLeast(1)),
        # Kafka declares at least 1, but the topic it creates must pass segment.bytes' own minimum
        # of 1 MiB; refusing it at start-up beats a state topic that can never be created.
        d("share.coordinator.state.topic.segment.bytes", "int", 104857600, "Segment size of __share_group_state "
          "(at least 1048576, the minimum of segment.bytes).", AtLeast(1048576)),
        d("share.coordinator.threads", "int", 1, "Share coordinator threads." + _COMPAT, AtLeast(1)),
        d("share.coordinator.snapshot.update.records.per.snapshot", "int", 500, "Update records written for a share "
          "partition between two snapshots.", Between(0, 500)),
        d("share.coordinator.write.timeout.ms", "int", 5000, "How long a share-state write may wait.", AtLeast(1)),
        d("share.coordinator.load.buffer.size", "int", 5242880, "Read batch size when loading share state.", AtLeast(1)),
        d("share.coordinator.append.linger.ms", "int", -1, "How long share-state writes wait to be batched; -1 adapts to load.",
          AtLeast(-1)),
        d("share.coordinator.state.topic.prune.interval.ms", "int", 300000, "How often records below the latest snapshots "
          "are pruned from __share_group_state.", AtLeast(1)),
        d("share.coordinator.cold.partition.snapshot.interval.ms", "int", 300000, "Snapshot share partitions with no "
          "recent update this often, so older records can be pruned.", AtLeast(1)),
    ]


def _topic_defs() -> list[TopicConfigDef]:
    t = TopicConfigDef
    return [
        t("cleanup.policy", "list", ("delete",), "delete and/or compact.", ListOf(*_CLEANUP_POLICIES),
          synonyms=(("log.cleanup.policy", 1),)),
        t("compression.type", "string", "producer", "Compression of stored batches; 'producer' keeps the producer's.",
          OneOf(*_COMPRESSION_TYPES), synonyms=(("compression.type", 1),)),
        t("compression.gzip.level", "int", -1, "gzip level.",
          _Check(_gzip_level, "Value must be between 1 and 9, or -1", "[1,...,9] or -1"),
          synonyms=(("compression.gzip.level", 1),)),
        t("compression.lz4.level", "int", 9, "lz4 level.", Between(1, 17), synonyms=(("compression.lz4.level", 1),)),
        t("compression.zstd.level", "int", 3, "zstd level.", Between(-131072, 22), synonyms=(("compression.zstd.level", 1),)),
        t("delete.retention.ms", "long", 86400000, "How long tombstones are kept in a compacted topic.", AtLeast(0),
          synonyms=(("log.cleaner.delete.retention.ms", 1),)),
        t("file.delete.delay.ms", "long", 60000, "Delay before a deleted segment's files are removed.", AtLeast(0),
          synonyms=(("log.segment.delete.delay.ms", 1),)),
        t("flush.messages", "long", LONG_MAX, "fsync after this many appended messages.", AtLeast(1),
          synonyms=(("log.flush.interval.messages", 1),)),
        t("flush.ms", "long", LONG_MAX, "fsync once the oldest unflushed message is this old.", AtLeast(0),
          synonyms=(("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1))),
        t("index.interval.bytes", "int", 4096, "Bytes of log between offset index entries.", AtLeast(0),
          synonyms=(("log.index.interval.bytes", 1),)),
        t("max.compaction.lag.ms", "long", LONG_MAX, "Maximum time a record stays ineligible for compaction.", AtLeast(1),
          synonyms=(("log.cleaner.max.compaction.lag.ms", 1),)),
        t("max.message.bytes", "int", 1048588, "Largest record batch accepted.", AtLeast(0),
          synonyms=(("message.max.bytes", 1),)),
        t("message.timestamp.after.max.ms", "long", 3600000, "With CreateTime, most ms a timestamp may be ahead of the broker.",
          AtLeast(0), synonyms=(("log.message.timestamp.after.max.ms", 1),)),
        t("message.timestamp.before.max.ms", "long", LONG_MAX, "With CreateTime, most ms a timestamp may be behind the broker.",
          AtLeast(0), synonyms=(("log.message.timestamp.before.max.ms", 1),)),
        t("message.timestamp.type", "string", "CreateTime", "CreateTime or LogAppendTime.", OneOf(*_TIMESTAMP_TYPES),
          synonyms=(("log.message.timestamp.type", 1),)),
        t("min.cleanable.dirty.ratio", "double", 0.5, "Minimum dirty ratio before compaction.", Between(0, 1),
          synonyms=(("log.cleaner.min.cleanable.ratio", 1),)),
        t("min.compaction.lag.ms", "long", 0, "Minimum age of a record before it may be compacted.", AtLeast(0),
          synonyms=(("log.cleaner.min.compaction.lag.ms", 1),)),
        t("min.insync.replicas", "int", 1, "Replicas that must acknowledge an acks=all produce.", AtLeast(1),
          synonyms=(("min.insync.replicas", 1),)),
        t("preallocate", "boolean", False, "Preallocate segment files.", synonyms=(("log.preallocate", 1),)),
        t("retention.bytes", "long", -1, "Partition size above which old segments are deleted; -1 means no limit.",
          synonyms=(("log.retention.bytes", 1),)),
        t("retention.ms", "long", 604800000, "Age after which segments are deleted; -1 means forever.", AtLeast(-1),
          synonyms=(("log.retention.ms", 1), ("log.retention.minutes", MS_PER_MINUTE), ("log.retention.hours", MS_PER_HOUR))),
        t("segment.bytes", "int", 1073741824, "Maximum size of one segment file.", AtLeast(1048576),
          synonyms=(("log.segment.bytes", 1),)),
        t("segment.index.bytes", "int", 10485760, "Maximum size of an offset index file.", AtLeast(4),
          synonyms=(("log.index.size.max.bytes", 1),)),
        t("segment.jitter.ms", "long", 0, "Most jitter subtracted from segment.ms.", AtLeast(0),
          synonyms=(("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", MS_PER_HOUR))),
        t("segment.ms", "long", 604800000, "Roll a new segment after this many milliseconds.", AtLeast(1),
          synonyms=(("log.roll.ms", 1), ("log.roll.hours", MS_PER_HOUR))),
        t("unclean.leader.election.enable", "boolean", False, "Allow out-of-sync replicas to become leader.",
          synonyms=(("unclean.leader.election.enable", 1),)),
    ]


def _validate_auto_offset_reset(name: str, value: str) -> None:
    try:
        parse_share_auto_offset_reset(value)
    except ValueError as exc:
        raise ConfigError.invalid(name, value, "The value must be either 'earliest', 'latest' or of the format "
                                  f"'by_duration:<PnDTnHnMn.nS.>' ({exc})") from None


def _group_defs() -> list[GroupConfigDef]:
    g = GroupConfigDef
    return [
        g("consumer.session.timeout.ms", "int", 45000, "Session timeout of this consumer group's members.", AtLeast(1),
          synonym="group.consumer.session.timeout.ms", min_config="group.consumer.min.session.timeout.ms",
          max_config="group.consumer.max.session.timeout.ms"),
        g("consumer.heartbeat.interval.ms", "int", 5000, "Heartbeat interval of this consumer group's members.", AtLeast(1),
          synonym="group.consumer.heartbeat.interval.ms", min_config="group.consumer.min.heartbeat.interval.ms",
          max_config="group.consumer.max.heartbeat.interval.ms"),
        g("share.session.timeout.ms", "int", 45000, "Session timeout of this share group's members.", AtLeast(1),
          synonym="group.share.session.timeout.ms", min_config="group.share.min.session.timeout.ms",
          max_config="group.share.max.session.timeout.ms"),
        g("share.heartbeat.interval.ms", "int", 5000, "Heartbeat interval of this share group's members.", AtLeast(1),
          synonym="group.share.heartbeat.interval.ms", min_config="group.share.min.heartbeat.interval.ms",
          max_config="group.share.max.heartbeat.interval.ms"),
        g("share.record.lock.duration.ms", "int", 30000, "Acquisition lock duration for this share group.", AtLeast(1000),
          synonym="group.share.record.lock.duration.ms", min_config="group.share.min.record.lock.duration.ms",
          max_config="group.share.max.record.lock.duration.ms"),
        g("share.delivery.count.limit", "int", 5, "Deliveries after which a record of this share group is archived.",
          AtLeast(2), synonym="group.share.delivery.count.limit", min_config="group.share.min.delivery.count.limit",
          max_config="group.share.max.delivery.count.limit"),
        g("share.partition.max.record.locks", "int", 2000, "Most in-flight records per share partition of this group.",
          AtLeast(100), synonym="group.share.partition.max.record.locks",
          min_config="group.share.min.partition.max.record.locks", max_config="group.share.max.partition.max.record.locks"),
        g("share.auto.offset.reset", "string", "latest", "Where a share partition starts when it has no state: earliest, "
          "latest, or by_duration:<ISO-8601 duration> (records newer than now minus the duration).",
          _validate_auto_offset_reset),
        g("share.isolation.level", "string", "read_uncommitted", "read_committed delivers only committed transactional "
          "records; read_uncommitted delivers all.", OneOf("read_committed", "read_uncommitted")),
        g("share.renew.acknowledge.enable", "boolean", True, "Whether consumers of this group may renew acquisition locks."),
        g("share.assignment.interval.ms", "int", 1000, "Minimum time between assignment updates of this share group.",
          AtLeast(0), synonym="group.share.assignment.interval.ms", min_config="group.share.min.assignment.interval.ms",
          max_config="group.share.max.assignment.interval.ms"),
        g("streams.session.timeout.ms", "int", 45000, "Session timeout of this streams group's members.", AtLeast(1),
          synonym="group.streams.session.timeout.ms", min_config="group.streams.min.session.timeout.ms",
          max_config="group.streams.max.session.timeout.ms"),
        g("streams.heartbeat.interval.ms", "int", 5000, "Heartbeat interval of this streams group's members.", AtLeast(1),
          synonym="group.streams.heartbeat.interval.ms", min_config="group.streams.min.heartbeat.interval.ms",
          max_config="group.streams.max.heartbeat.interval.ms"),
        g("streams.num.standby.replicas", "int", 0, "Standby replicas per task of this streams group.", AtLeast(0),
          synonym="group.streams.num.standby.replicas", max_config="group.streams.max.standby.replicas"),
        g("streams.initial.rebalance.delay.ms", "int", 3000, "Delay before the first rebalance of this streams group.",
          AtLeast(0), synonym="group.streams.initial.rebalance.delay.ms"),
    ]


BROKER_CONFIGS: dict[str, ConfigDef] = {c.name: c for c in _broker_defs()}
TOPIC_CONFIGS: dict[str, TopicConfigDef] = {c.name: c for c in _topic_defs()}
GROUP_CONFIGS: dict[str, GroupConfigDef] = {c.name: c for c in _group_defs()}

# Broker names that resolve together (Kafka's brokerConfigSynonyms), most specific first.
_BROKER_SYNONYM_GROUPS: dict[str, tuple[str, ...]] = {}
for _group in (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
):
    for _name in _group:
        _BROKER_SYNONYM_GROUPS[_name] = _group
_BROKER_SYNONYM_GROUPS["log.flush.interval.ms"] = ("log.flush.interval.ms", "log.flush.scheduler.interval.ms")


# ---------------------------------------------------------------------------------------------
# ISO-8601 durations and share.auto.offset.reset
# ---------------------------------------------------------------------------------------------

# java.time.Duration.parse: PnDTnHnMn.nS, each part optionally signed, case-insensitive.
_DURATION_RE = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?"
    r"(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE,
)


def _duration_nanos(text: str) -> int:
    match = _DURATION_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"Text cannot be parsed to a Duration: {text!r}")
    sign, days, time_part, hours, minutes, seconds, fraction = match.groups()
    if days is None and hours is None and minutes is None and seconds is None:
        raise ValueError(f"Text cannot be parsed to a Duration: {text!r}")
    if time_part is not None and time_part.upper() == "T":
        raise ValueError(f"Text cannot be parsed to a Duration: {text!r} (T without a time part)")
    whole = int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes or 0) * 60 + int(seconds or 0)
    nanos = whole * 1_000_000_000
    if fraction:
        part = int(fraction.ljust(9, "0"))
        nanos += -part if seconds is not None and seconds.startswith("-") else part
    return -nanos if sign == "-" else nanos


def parse_iso8601_duration_ms(text: str) -> int:
    """Non-negative ISO-8601 duration (``PnDTnHnMn.nS``, java.time.Duration syntax) in whole milliseconds.

    Raises ValueError for bad syntax or a negative duration.
    """
    nanos = _duration_nanos(text)
    if nanos < 0:
        raise ValueError("Negative duration is not supported in by_duration offset reset strategy.")
    millis = nanos // 1_000_000
    if millis > LONG_MAX:
        raise ValueError(f"Duration too large: {text!r}")
    return millis


EARLIEST_TIMESTAMP = -2  # ListOffsets sentinels
LATEST_TIMESTAMP = -1


@dataclass(frozen=True)
class ShareAutoOffsetReset:
    """A parsed share.auto.offset.reset: ``earliest``, ``latest`` or ``by_duration`` with ``duration_ms``."""

    strategy: str
    duration_ms: int | None = None

    def timestamp(self, now_ms: int) -> int:
        """The ListOffsets timestamp to look up: -2 earliest, -1 latest, else now minus the duration."""
        if self.strategy == "earliest":
            return EARLIEST_TIMESTAMP
        if self.strategy == "latest":
            return LATEST_TIMESTAMP
        assert self.duration_ms is not None
        return now_ms - self.duration_ms


def parse_share_auto_offset_reset(value: str) -> ShareAutoOffsetReset:
    """Parse share.auto.offset.reset (case-sensitive, as in Kafka); ValueError says what is wrong."""
    if value in ("earliest", "latest"):
        return ShareAutoOffsetReset(value)
    if value == "by_duration":
        raise ValueError("<:duration> part is missing in by_duration auto offset reset strategy.")
    if value.startswith("by_duration:"):
        return ShareAutoOffsetReset("by_duration", parse_iso8601_duration_ms(value[len("by_duration:"):]))
    raise ValueError(f"Unknown auto offset reset strategy: {value}")


# ---------------------------------------------------------------------------------------------
# Listeners
# ---------------------------------------------------------------------------------------------

_LISTENER_RE = re.compile(r"(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)")


@dataclass(frozen=True)
class Listener:
    """One endpoint. ``host`` "" means all interfaces (or, advertised, "the address the broker picks")."""

    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def parse_listeners(value: str, config_name: str = "listeners") -> list[Listener]:
    """Parse ``NAME://host:port,...`` (IPv6 hosts in brackets); names are upper-cased like Kafka's."""
    result: list[Listener] = []
    for item in _LIST_SPLIT.split(value.strip()) if value.strip() else []:
        match = _LISTENER_RE.fullmatch(item)
        if match is None or not match.group(1):
            raise ConfigError.invalid(config_name, value, f"Unable to parse {item} to a broker endpoint")
        port = int(match.group(3))
        if not 0 <= port <= 65535:
            raise ConfigError.invalid(config_name, value, f"Port {port} of {item} must be between 0 and 65535")
        result.append(Listener(match.group(1).upper(), match.group(2), port))
    return result


def _parse_protocol_map(value: str, config_name: str) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for item in _LIST_SPLIT.split(value.strip()) if value.strip() else []:
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or not name.strip() or protocol not in _SECURITY_PROTOCOLS:
            raise ConfigError.invalid(config_name, value, f"Map entry {item} must be LISTENER_NAME:PROTOCOL with PROTOCOL "
                                      f"one of {', '.join(_SECURITY_PROTOCOLS)}")
        mapping[name.strip().upper()] = protocol
    return mapping


def _controller_names(get: Callable[[str], Any]) -> set[str]:
    raw = get("controller.listener.names")
    return {n.upper() for n in _LIST_SPLIT.split(raw.strip()) if n} if raw and raw.strip() else set()


def _resolve_listeners(get: Callable[[str], Any]) -> list[Listener]:
    protocols = _parse_protocol_map(get("listener.security.protocol.map"), "listener.security.protocol.map")
    controllers = _controller_names(get)
    raw = get("listeners")
    parsed = parse_listeners(raw, "listeners")
    names = [listener.name for listener in parsed]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError.invalid("listeners", raw, f"Each listener must have a different name; repeated: {', '.join(duplicates)}")
    served: list[Listener] = []
    for listener in parsed:
        if listener.name in controllers:
            continue
        protocol = protocols.get(listener.name)
        if protocol is None:
            raise ConfigError.invalid("listeners", raw, f"No security protocol defined for listener {listener.name} "
                                      "in listener.security.protocol.map")
        if protocol != "PLAINTEXT":
            raise ConfigError.invalid("listeners", raw, f"sharebroker supports only PLAINTEXT listeners; "
                                      f"{listener.name} uses {protocol}")
        served.append(Listener(listener.name, listener.host, listener.port, protocol))
    if not served:
        raise ConfigError.invalid("listeners", raw, "At least one non-controller listener is required")
    ports = [(listener.host, listener.port) for listener in served if listener.port != 0]
    if len(ports) != len(set(ports)):
        raise ConfigError.invalid("listeners", raw, "Each listener must have a different host:port")
    return served


def _resolve_advertised(get: Callable[[str], Any], listeners: list[Listener]) -> list[Listener]:
    raw = get("advertised.listeners")
    if raw is None or not raw.strip():
        return list(listeners)
    known = {listener.name: listener for listener in listeners}
    controllers = _controller_names(get)
    result: list[Listener] = []
    for adv in parse_listeners(raw, "advertised.listeners"):
        if adv.name in controllers:
            continue
        if adv.name not in known:
            raise ConfigError.invalid("advertised.listeners", raw, f"Listener {adv.name} is not defined in listeners; "
                                      f"advertised listener names must be among: {', '.join(known)}")
        if adv.host in ("0.0.0.0", "::"):
            raise ConfigError.invalid("advertised.listeners", raw, f"advertised.listeners cannot use the nonroutable "
                                      f"meta-address {adv.host}. Use a routable IP address.")
        result.append(Listener(adv.name, adv.host, adv.port, known[adv.name].security_protocol))
    if not result:
        return list(listeners)
    return result


# ---------------------------------------------------------------------------------------------
# Cross-setting rules (checked at load and on every dynamic change)
# ---------------------------------------------------------------------------------------------


def _fallback(get: Callable[[str], Any], chain: Iterable[tuple[str, int]]) -> Any:
    """First non-null value along a synonym chain, converted to the first name's unit."""
    for name, factor in chain:
        value = get(name)
        if value is not None:
            return value * factor if factor != 1 else value
    return None


def _retention_ms(get: Callable[[str], Any]) -> int:
    millis = _fallback(get, TOPIC_CONFIGS["retention.ms"].synonyms)
    return -1 if millis < 0 else millis  # any negative setting means "keep forever"


def _log_dir(get: Callable[[str], Any]) -> Path:
    name = "log.dirs" if get("log.dirs") is not None else "log.dir"
    dirs = get(name)
    if len(dirs) != 1:
        found = ", ".join(dirs) if dirs else "none"
        raise ConfigError(name, f"{name}: sharebroker supports exactly one log directory (found: {found})")
    return Path(dirs[0])


def _require(ok: bool, name: str, message: str) -> None:
    if not ok:
        raise ConfigError(name, message)


def _ordered(get: Callable[[str], Any], low: str, high: str, strict: bool = False) -> None:
    """``low <= high`` (or ``<``), in Kafka's words plus the values."""
    lv, hv = get(low), get(high)
    detail = f" ({low}={lv}, {high}={hv})"
    if strict:
        _require(lv < hv, low, f"{low} must be less than {high}{detail}")
    else:
        _require(lv <= hv, high, f"{high} must be greater than or equal to {low}{detail}")


def _within(get: Callable[[str], Any], name: str, low: str | None, high: str | None) -> None:
    value = get(name)
    if low is not None and high is not None:
        _ordered(get, low, high)
    if low is not None:
        _require(value >= get(low), name, f"{name} must be greater than or equal to {low} ({name}={value}, {low}={get(low)})")
    if high is not None:
        _require(value <= get(high), name, f"{name} must be less than or equal to {high} ({name}={value}, {high}={get(high)})")


def _cross_check(get: Callable[[str], Any], explicit: Callable[[str], bool]) -> None:
    if explicit("broker.id") and explicit("node.id") and get("broker.id") != get("node.id"):
        raise ConfigError("node.id", f"You must set `node.id` to the same value as `broker.id` "
                                     f"(node.id={get('node.id')}, broker.id={get('broker.id')}).")
    _resolve_advertised(get, _resolve_listeners(get))
    _log_dir(get)
    retention = _retention_ms(get)
    _require(retention >= 1 or retention == -1, "log.retention.ms",
             f"log.retention.ms must be unlimited (-1) or, equal or greater than 1 (effective value {retention})")
    roll = _fallback(get, TOPIC_CONFIGS["segment.ms"].synonyms)
    _require(roll >= 1, "log.roll.ms", f"log.roll.ms must be greater than or equal to 1 (effective value {roll})")
    jitter = _fallback(get, TOPIC_CONFIGS["segment.jitter.ms"].synonyms)
    _require(jitter >= 0, "log.roll.jitter.ms", f"log.roll.jitter.ms must be greater than or equal to 0 (effective value {jitter})")
    flush_ms = _fallback(get, TOPIC_CONFIGS["flush.ms"].synonyms)
    _require(flush_ms >= 0, "log.flush.interval.ms", f"log.flush.interval.ms must be greater than or equal to 0 "
                                                     f"(effective value {flush_ms})")
    for kind in ("consumer", "share", "streams"):
        prefix = f"group.{kind}"
        _within(get, f"{prefix}.heartbeat.interval.ms", f"{prefix}.min.heartbeat.interval.ms",
                f"{prefix}.max.heartbeat.interval.ms")
        _within(get, f"{prefix}.session.timeout.ms", f"{prefix}.min.session.timeout.ms", f"{prefix}.max.session.timeout.ms")
        _ordered(get, f"{prefix}.heartbeat.interval.ms", f"{prefix}.session.timeout.ms", strict=True)
    _within(get, "group.streams.num.standby.replicas", None, "group.streams.max.standby.replicas")
    _within(get, "group.share.assignment.interval.ms", "group.share.min.assignment.interval.ms",
            "group.share.max.assignment.interval.ms")
    _within(get, "group.share.record.lock.duration.ms", "group.share.min.record.lock.duration.ms",
            "group.share.max.record.lock.duration.ms")
    _within(get, "group.share.delivery.count.limit", "group.share.min.delivery.count.limit",
            "group.share.max.delivery.count.limit")
    _within(get, "group.share.partition.max.record.locks", "group.share.min.partition.max.record.locks",
            "group.share.max.partition.max.record.locks")
    _ordered(get, "group.share.max.size", "group.share.max.share.sessions")
    assignors = get("group.share.assignors")
    _require(len(assignors) == 1, "group.share.assignors",
             f"group.share.assignors must contain exactly one assignor, but found {len(assignors)}")


# ---------------------------------------------------------------------------------------------
# Broker configuration
# ---------------------------------------------------------------------------------------------


class ConfigSynonym(NamedTuple):
    name: str
    value: str | None
    source: int


@dataclass
class DescribedConfig:
    """One DescribeConfigs result entry."""

    name: str
    value: str | None
    source: int
    read_only: bool
    is_sensitive: bool
    config_type: int
    synonyms: list[ConfigSynonym] = field(default_factory=list)
    documentation: str | None = None



class BrokerConfig:
    """The broker's settings: defaults < static (file, env, overrides) < dynamic default < dynamic per-broker.

    Typed values come from ``broker[name]``; list settings are returned as Python lists.
    """

    def __init__(self, static: Mapping[str, Any] | None = None, *, origins: Mapping[str, str] | None = None,
                 unknown: Iterable[str] = ()) -> None:
        """``static`` holds already-typed values; prefer ``BrokerConfig.load``."""
        self._static: dict[str, Any] = {}
        for name, value in (static or {}).items():
            _definition(name)
            self._static[name] = tuple(value) if isinstance(value, list) else value
        self._dynamic_default: dict[str, Any] = {}
        self._dynamic_broker: dict[str, Any] = {}
        self._origins: dict[str, str] = dict(origins or {})
        self.unknown: list[str] = list(unknown)
        _cross_check(self._get, self.is_explicit)

    # -- loading ---------------------------------------------------------------------------------

    @classmethod
    def load(cls, properties_file: str | Path | None = None, env: Mapping[str, str] | None = None,
             overrides: Mapping[str, str] | None = None) -> BrokerConfig:
        """defaults < properties file < KAFKA_* environment < overrides; ``env`` None means os.environ.

        Unknown keys in the file or overrides are collected in ``unknown`` (Kafka only warns);
        unknown KAFKA_* variables are ignored. Any invalid value raises ConfigError.
        """
        raw: dict[str, str] = {}
        origins: dict[str, str] = {}
        unknown: list[str] = []

        def take(name: str, value: str, origin: str) -> None:
            if name in BROKER_CONFIGS:
                raw[name] = value
                origins[name] = origin
            elif name not in unknown:
                unknown.append(name)

        if properties_file is not None:
            try:
                props = load_properties(properties_file)
            except OSError as exc:
                raise ConfigError(str(properties_file), f"Cannot read properties file {properties_file}: "
                                                        f"{exc.strerror or exc}") from exc
            except PropertiesError as exc:
                raise ConfigError(str(properties_file), f"Cannot parse properties file {properties_file}: {exc}") from exc
            for name, value in props.items():
                take(name, value, f"file {properties_file}")
        for name, (value, variable) in kafka_env(os.environ if env is None else env).items():
            if name in BROKER_CONFIGS:
                take(name, value, f"environment variable {variable}")
        for name, value in (overrides or {}).items():
            take(name, value, "override")

        static = {name: BROKER_CONFIGS[name].parse(value) for name, value in raw.items()}
        if "broker.id" in static and "node.id" not in static:
            # broker.id is the legacy name of node.id.
            static["node.id"] = static["broker.id"]
            BROKER_CONFIGS["node.id"].parse(str(static["node.id"]))
            origins["node.id"] = origins["broker.id"]
        return cls(static, origins=origins, unknown=unknown)

    def copy(self) -> BrokerConfig:
        """An independent copy (e.g. to validate a change without applying it)."""
        clone = object.__new__(BrokerConfig)
        clone._static = dict(self._static)
        clone._dynamic_default = dict(self._dynamic_default)
        clone._dynamic_broker = dict(self._dynamic_broker)
        clone._origins = dict(self._origins)
        clone.unknown = list(self.unknown)
        return clone

    # -- reading -----------------------------------------------------------------------------------

    def _get(self, name: str) -> Any:
        for layer in (self._dynamic_broker, self._dynamic_default, self._static):
            if name in layer:
                return layer[name]
        return _definition(name).default

    def __getitem__(self, name: str) -> Any:
        value = self._get(name)
        return list(value) if isinstance(value, tuple) else value

    def __contains__(self, name: object) -> bool:
        return name in BROKER_CONFIGS

    def source(self, name: str) -> int:
        """ConfigSource of ``name``'s current value."""
        _definition(name)
        if name in self._dynamic_broker:
            return ConfigSource.DYNAMIC_BROKER_CONFIG
        if name in self._dynamic_default:
            return ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        if name in self._static:
            return ConfigSource.STATIC_BROKER_CONFIG
        return ConfigSource.DEFAULT_CONFIG

    def origin(self, name: str) -> str:
        """Where the value came from, for logs: "default", "file ...", "environment variable ...", "override", "dynamic"."""
        if name in self._dynamic_broker or name in self._dynamic_default:
            return "dynamic"
        return self._origins.get(name, "default") if name in self._static else "default"

    def is_explicit(self, name: str) -> bool:
        return name in self._static or name in self._dynamic_default or name in self._dynamic_broker

    def items(self) -> Iterable[tuple[str, Any]]:
        return [(name, self[name]) for name in sorted(BROKER_CONFIGS)]

    def value_string(self, name: str) -> str | None:
        return _definition(name).to_string(self._get(name))

    def dynamic_values(self, per_broker: bool | None = None) -> dict[str, str]:
        """Dynamic overrides as strings (both layers merged, per-broker winning, when ``per_broker`` is None)."""
        if per_broker is None:
            merged = {**self._dynamic_default, **self._dynamic_broker}
        else:
            merged = dict(self._dynamic_broker if per_broker else self._dynamic_default)
        return {name: _definition(name).to_string(value) or "" for name, value in sorted(merged.items())}

    # -- dynamic changes ---------------------------------------------------------------------------

    def alter(self, name: str, raw_value: str | None, *, per_broker: bool = False) -> None:
        """Set (or with None remove) a dynamic value: the cluster default, or this node's with ``per_broker``."""
        self.alter_many({name: raw_value}, per_broker=per_broker)

    def alter_many(self, changes: Mapping[str, str | None], *, per_broker: bool = False,
                   validate_only: bool = False) -> None:
        """Apply several dynamic changes atomically after validating each value and the result as a whole."""
        unknown = [name for name in changes if name not in BROKER_CONFIGS]
        if unknown:
            raise ConfigError(unknown[0], f"Unknown broker config name: {unknown[0]}")
        static_only = sorted(name for name in changes if not BROKER_CONFIGS[name].dynamic)
        if static_only:
            raise ConfigError(static_only[0], f"Cannot update these configs dynamically: Set({', '.join(static_only)})")
        layer = dict(self._dynamic_broker if per_broker else self._dynamic_default)
        for name, raw in changes.items():
            if raw is None:
                layer.pop(name, None)
            else:
                layer[name] = BROKER_CONFIGS[name].parse(raw)
        candidate = self.copy()
        if per_broker:
            candidate._dynamic_broker = layer
        else:
            candidate._dynamic_default = layer
        _cross_check(candidate._get, candidate.is_explicit)
        if not validate_only:
            if per_broker:
                self._dynamic_broker = layer
            else:
                self._dynamic_default = layer

    # -- convenience -------------------------------------------------------------------------------

    @property
    def node_id(self) -> int:
        return self._get("node.id")

    @property
    def listeners(self) -> list[Listener]:
        """Listeners this broker serves (controller listeners excluded)."""
        return _resolve_listeners(self._get)

    @property
    def advertised_listeners(self) -> list[Listener]:
        """What clients are told; falls back to ``listeners``. Host "" / port 0 are for the broker to fill in."""
        return _resolve_advertised(self._get, self.listeners)

    @property
    def log_dir(self) -> Path:
        return _log_dir(self._get)

    @property
    def log_retention_ms(self) -> int:
        """Effective retention from log.retention.ms / .minutes / .hours; -1 = unlimited."""
        return _retention_ms(self._get)

    @property
    def log_flush_interval_ms(self) -> int:
        """log.flush.interval.ms, or log.flush.scheduler.interval.ms when unset (as Kafka)."""
        return _fallback(self._get, TOPIC_CONFIGS["flush.ms"].synonyms)

    # -- describe helpers --------------------------------------------------------------------------

    def _synonym_entries(self, names: Iterable[str]) -> list[ConfigSynonym]:
        """Kafka's order: every dynamic per-broker value, then dynamic default, static, then defaults."""
        names = tuple(names)
        entries: list[ConfigSynonym] = []
        for source, layer in ((ConfigSource.DYNAMIC_BROKER_CONFIG, self._dynamic_broker),
                              (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, self._dynamic_default),
                              (ConfigSource.STATIC_BROKER_CONFIG, self._static)):
            for name in names:
                if name in layer:
                    entries.append(_synonym(name, layer[name], source))
        for name in names:
            default = BROKER_CONFIGS[name].default
            if default is not None:
                entries.append(_synonym(name, default, ConfigSource.DEFAULT_CONFIG))
        return entries

    def __repr__(self) -> str:
        explicit = ", ".join(f"{n}={self.value_string(n)}" for n in sorted(self._static))
        return f"BrokerConfig({explicit})"


def _definition(name: str) -> ConfigDef:
    try:
        return BROKER_CONFIGS[name]
    except KeyError:
        raise KeyError(f"Unknown broker config name: {name}") from None


def _synonym(name: str, value: Any, source: int) -> ConfigSynonym:
    definition = BROKER_CONFIGS[name]
    text = None if definition.is_sensitive else definition.to_string(value)
    return ConfigSynonym(name, text, int(source))


def describe_broker_configs(broker: BrokerConfig, *, per_broker: bool = True) -> list[DescribedConfig]:
    """DescribeConfigs for a BROKER resource: this node (all settings) or, with ``per_broker=False``,
    the cluster default resource "" (only the dynamic defaults that are set, as Kafka)."""
    names = sorted(BROKER_CONFIGS) if per_broker else sorted(broker._dynamic_default)
    result: list[DescribedConfig] = []
    for name in names:
        definition = BROKER_CONFIGS[name]
        entries = broker._synonym_entries(_BROKER_SYNONYM_GROUPS.get(name, (name,)))
        # Names listed before this one in its group do not describe it (log.retention.ms for .hours).
        while entries and entries[0].name != name:
            entries.pop(0)
        if per_broker:
            value = broker._get(name)
        else:
            entries = [e for e in entries if e.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
            value = broker._dynamic_default[name]
        result.append(DescribedConfig(
            name=name,
            value=None if definition.is_sensitive else definition.to_string(value),
            source=entries[0].source if entries else int(ConfigSource.DEFAULT_CONFIG),
            read_only=not definition.dynamic,
            is_sensitive=definition.is_sensitive,
            config_type=definition.config_type,
            synonyms=entries,
            documentation=definition.doc,
        ))
    return result


# ---------------------------------------------------------------------------------------------
# Topic configuration
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicConfig:
    """Effective typed settings of one topic (override, else broker synonym, else default)."""

    cleanup_policy: tuple[str, ...]
    compression_type: str
    compression_gzip_level: int
    compression_lz4_level: int
    compression_zstd_level: int
    delete_retention_ms: int
    file_delete_delay_ms: int
    flush_messages: int
    flush_ms: int
    index_interval_bytes: int
    max_compaction_lag_ms: int
    max_message_bytes: int
    message_timestamp_after_max_ms: int
    message_timestamp_before_max_ms: int
    message_timestamp_type: str
    min_cleanable_dirty_ratio: float
    min_compaction_lag_ms: int
    min_insync_replicas: int
    preallocate: bool
    retention_bytes: int
    retention_ms: int
    segment_bytes: int
    segment_index_bytes: int
    segment_jitter_ms: int
    segment_ms: int
    unclean_leader_election_enable: bool

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"


assert {f.name for f in fields(TopicConfig)} == {d.attribute for d in TOPIC_CONFIGS.values()}


def _topic_broker_value(broker: BrokerConfig, definition: TopicConfigDef) -> Any:
    if definition.name == "retention.ms":
        return broker.log_retention_ms
    value = _fallback(broker._get, definition.synonyms)
    return definition.default if value is None else value


def _topic_values(broker: BrokerConfig | None, overrides: Mapping[str, str | None]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name, definition in TOPIC_CONFIGS.items():
        raw = overrides.get(name)
        if raw is not None:
            values[name] = definition.parse(raw)
        elif broker is not None:
            values[name] = _topic_broker_value(broker, definition)
        else:
            values[name] = definition.default
    return values


def topic_config(broker: BrokerConfig, overrides: Mapping[str, str]) -> TopicConfig:
    """Effective settings of a topic. Names not in TOPIC_CONFIGS are ignored here (validate_topic_overrides
    is the gate that rejects them); an invalid stored value raises ConfigError."""
    values = _topic_values(broker, overrides)
    return TopicConfig(**{TOPIC_CONFIGS[name].attribute: value for name, value in values.items()})


def validate_topic_overrides(overrides: Mapping[str, str | None], *,
                             broker: BrokerConfig | None = None) -> dict[str, str]:
    """Check topic-level overrides (CreateTopics, AlterConfigs); returns them in canonical string form.

    A null value is rejected as Kafka does. With ``broker``, cross-checks use its synonym values for
    settings not overridden.
    """
    result: dict[str, str] = {}
    for name, raw in overrides.items():
        definition = TOPIC_CONFIGS.get(name)
        if definition is None:
            raise ConfigError(name, f"Unknown topic config name: {name}")
        if raw is None:
            raise ConfigError(name, f"Null value not supported for topic configs: {name}")
        result[name] = definition.to_string(definition.parse(raw)) or ""
    values = _topic_values(broker, result)
    low, high = values["min.compaction.lag.ms"], values["max.compaction.lag.ms"]
    if low > high:
        raise ConfigError("min.compaction.lag.ms", f"conflict topic config setting min.compaction.lag.ms ({low}) > "
                                                   f"max.compaction.lag.ms ({high})")
    return result


def describe_topic_configs(broker: BrokerConfig, overrides: Mapping[str, str]) -> list[DescribedConfig]:
    """DescribeConfigs for a TOPIC: every topic setting with value, source and synonyms
    (topic override first, then the broker synonyms that are set, then their defaults)."""
    values = _topic_values(broker, overrides)
    result: list[DescribedConfig] = []
    for name in sorted(TOPIC_CONFIGS):
        definition = TOPIC_CONFIGS[name]
        text = None if definition.is_sensitive else definition.to_string(values[name])
        entries: list[ConfigSynonym] = []
        if overrides.get(name) is not None:
            entries.append(ConfigSynonym(name, text, int(ConfigSource.TOPIC_CONFIG)))
        entries += broker._synonym_entries(n for n, _ in definition.synonyms)
        result.append(DescribedConfig(
            name=name,
            value=text,
            source=entries[0].source if entries else int(ConfigSource.DEFAULT_CONFIG),
            read_only=False,
            is_sensitive=definition.is_sensitive,
            config_type=definition.config_type,
            synonyms=entries,
            documentation=definition.doc,
        ))
    return result


# ---------------------------------------------------------------------------------------------
# Group configuration
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupConfig:
    """Effective typed settings of one group (override clamped to broker bounds, else broker synonym)."""

    consumer_session_timeout_ms: int
    consumer_heartbeat_interval_ms: int
    share_session_timeout_ms: int
    share_heartbeat_interval_ms: int
    share_record_lock_duration_ms: int
    share_delivery_count_limit: int
    share_partition_max_record_locks: int
    share_auto_offset_reset: str
    share_isolation_level: str
    share_renew_acknowledge_enable: bool
    share_assignment_interval_ms: int
    streams_session_timeout_ms: int
    streams_heartbeat_interval_ms: int
    streams_num_standby_replicas: int
    streams_initial_rebalance_delay_ms: int

    @property
    def share_auto_offset_reset_strategy(self) -> ShareAutoOffsetReset:
        return parse_share_auto_offset_reset(self.share_auto_offset_reset)

    @property
    def share_read_committed(self) -> bool:
        return self.share_isolation_level == "read_committed"


assert {f.name for f in fields(GroupConfig)} == {d.attribute for d in GROUP_CONFIGS.values()}


def _group_default(broker: BrokerConfig, definition: GroupConfigDef) -> Any:
    return broker._get(definition.synonym) if definition.synonym else definition.default


def _unknown_group_config(name: str) -> ConfigError:
    return ConfigError(name, f"Unknown group config name: {name}")


def _check_group_bounds(broker: BrokerConfig, definition: GroupConfigDef, value: Any) -> None:
    name = definition.name
    if definition.min_config is not None:
        low = broker._get(definition.min_config)
        _require(value >= low, name, f"{name} must be greater than or equal to {definition.min_config} "
                                     f"({name}={value}, {definition.min_config}={low})")
    if definition.max_config is not None:
        high = broker._get(definition.max_config)
        _require(value <= high, name, f"{name} must be less than or equal to {definition.max_config} "
                                      f"({name}={value}, {definition.max_config}={high})")


def validate_group_config(broker: BrokerConfig, name: str, raw: str) -> Any:
    """Parse one group-level value and check it against the broker's min/max bounds."""
    definition = GROUP_CONFIGS.get(name)
    if definition is None:
        raise _unknown_group_config(name)
    value = definition.parse(raw)
    _check_group_bounds(broker, definition, value)
    return value


def validate_group_configs(broker: BrokerConfig, configs: Mapping[str, str | None]) -> None:
    """Validate a group's complete set of overrides (after applying SET/DELETE): names, values,
    broker bounds, then session timeout > heartbeat interval with broker defaults filled in."""
    present = {name: raw for name, raw in configs.items() if raw is not None}
    for name in configs:
        if name not in GROUP_CONFIGS:
            raise _unknown_group_config(name)
    values = {name: _group_default(broker, d) for name, d in GROUP_CONFIGS.items()}
    for name, raw in present.items():
        values[name] = validate_group_config(broker, name, raw)
    for kind in ("consumer", "share", "streams"):
        session, heartbeat = f"{kind}.session.timeout.ms", f"{kind}.heartbeat.interval.ms"
        _require(values[session] > values[heartbeat], session,
                 f"{session} must be greater than {heartbeat} ({session}={values[session]}, {heartbeat}={values[heartbeat]})")


def group_config(broker: BrokerConfig, overrides: Mapping[str, str]) -> GroupConfig:
    """Effective group settings. Overridden numbers are clamped into the broker's current min/max (as
    Kafka does when bounds change after a group value was stored); unknown names are ignored."""
    values: dict[str, Any] = {}
    for name, definition in GROUP_CONFIGS.items():
        raw = overrides.get(name)
        if raw is None:
            values[definition.attribute] = _group_default(broker, definition)
            continue
        value = definition.parse(raw)
        if definition.min_config is not None:
            value = max(value, broker._get(definition.min_config))
        if definition.max_config is not None:
            value = min(value, broker._get(definition.max_config))
        values[definition.attribute] = value
    return GroupConfig(**values)


def describe_group_configs(broker: BrokerConfig, overrides: Mapping[str, str]) -> list[DescribedConfig]:
    """DescribeConfigs for a GROUP: every group setting; source GROUP_CONFIG when overridden, else the
    broker synonym's source, else DEFAULT_CONFIG. Synonyms: the group value, then the broker synonym."""
    result: list[DescribedConfig] = []
    for name in sorted(GROUP_CONFIGS):
        definition = GROUP_CONFIGS[name]
        raw = overrides.get(name)
        entries: list[ConfigSynonym] = []
        if raw is not None:
            text = definition.to_string(definition.parse(raw))
            entries.append(ConfigSynonym(name, text, int(ConfigSource.GROUP_CONFIG)))
        else:
            text = definition.to_string(_group_default(broker, definition))
        if definition.synonym is not None:
            entries += broker._synonym_entries((definition.synonym,))
        result.append(DescribedConfig(
            name=name,
            value=None if definition.is_sensitive else text,
            source=entries[0].source if entries else int(ConfigSource.DEFAULT_CONFIG),
            read_only=False,
            is_sensitive=definition.is_sensitive,
            config_type=definition.config_type,
            synonyms=entries,
            documentation=definition.doc,
        ))
    return result
