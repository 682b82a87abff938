"""A topic's effective settings: its overrides, else the broker synonyms, else Kafka's defaults; and
the validation of overrides that CreateTopics and AlterConfigs ask for."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from sharebroker.config.broker_config import BrokerConfig, resolve_synonyms
from sharebroker.config.definitions import ConfigError, TopicConfigDef
from sharebroker.config.topic_settings import TOPIC_CONFIGS

__all__ = ["TopicConfig", "topic_config", "topic_values", "validate_topic_overrides"]


@dataclass(frozen=True)
class TopicConfig:
    """Effective typed settings of one topic (override, else broker synonym, else default)."""

    cleanup_policy: tuple[str, ...]
    compression_type: str
    compression_gzip_level: int
    compression_lz4_level: int
    compression_zstd_level: int
    delete_retention_ms: int
    errors_deadletterqueue_group_enable: bool
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
    value = resolve_synonyms(broker.value, definition.synonyms)
    return definition.default if value is None else value


def topic_values(broker: BrokerConfig | None, overrides: Mapping[str, str | None]) -> dict[str, Any]:
    """Typed value of every topic setting by Kafka name: the override, else the broker's, else the default."""
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
    values = topic_values(broker, overrides)
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
    values = topic_values(broker, result)
    low, high = values["min.compaction.lag.ms"], values["max.compaction.lag.ms"]
    if low > high:
        raise ConfigError("min.compaction.lag.ms", f"conflict topic config setting min.compaction.lag.ms ({low}) > "
                                                   f"max.compaction.lag.ms ({high})")
    return result
