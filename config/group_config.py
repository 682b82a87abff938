"""A group's effective settings (share, consumer and streams groups): its overrides within the broker's
min/max bounds, else the broker synonyms; and the validation of IncrementalAlterConfigs on a GROUP."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from sharebroker.config.auto_offset_reset import ShareAutoOffsetReset, parse_share_auto_offset_reset
from sharebroker.config.broker_config import BrokerConfig
from sharebroker.config.definitions import ConfigError, GroupConfigDef, require
from sharebroker.config.group_settings import GROUP_CONFIGS

__all__ = ["GroupConfig", "group_config", "group_default", "validate_group_config", "validate_group_configs"]


@dataclass(frozen=True)
class GroupConfig:
    """Effective typed settings of one group (override clamped to broker bounds, else broker synonym)."""

    consumer_session_timeout_ms: int
    consumer_heartbeat_interval_ms: int
    consumer_assignment_interval_ms: int
    share_session_timeout_ms: int
    share_heartbeat_interval_ms: int
    share_record_lock_duration_ms: int
    share_delivery_count_limit: int
    share_partition_max_record_locks: int
    share_auto_offset_reset: str
    share_isolation_level: str
    share_renew_acknowledge_enable: bool
    share_record_trace_enable: bool
    share_assignment_interval_ms: int
    errors_deadletterqueue_topic_name: str
    errors_deadletterqueue_copy_record_enable: bool
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


def group_default(broker: BrokerConfig, definition: GroupConfigDef) -> Any:
    """The typed value of a group setting that the group does not override."""
    return broker.value(definition.synonym) if definition.synonym else definition.default


def _unknown_group_config(name: str) -> ConfigError:
    return ConfigError(name, f"Unknown group config name: {name}")


def _check_group_bounds(broker: BrokerConfig, definition: GroupConfigDef, value: Any) -> None:
    name = definition.name
    if definition.min_config is not None:
        low = broker.value(definition.min_config)
        require(value >= low, name, f"{name} must be greater than or equal to {definition.min_config} "
                                    f"({name}={value}, {definition.min_config}={low})")
    if definition.max_config is not None:
        high = broker.value(definition.max_config)
        require(value <= high, name, f"{name} must be less than or equal to {definition.max_config} "
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
    values = {name: group_default(broker, d) for name, d in GROUP_CONFIGS.items()}
    for name, raw in present.items():
        values[name] = validate_group_config(broker, name, raw)
    for kind in ("consumer", "share", "streams"):
        session, heartbeat = f"{kind}.session.timeout.ms", f"{kind}.heartbeat.interval.ms"
        require(values[session] > values[heartbeat], session,
                f"{session} must be greater than {heartbeat} ({session}={values[session]}, {heartbeat}={values[heartbeat]})")


def group_config(broker: BrokerConfig, overrides: Mapping[str, str],
                 on_capped: Callable[[str, Any, Any], None] | None = None) -> GroupConfig:
    """Effective group settings. Overridden numbers are capped into the broker's current min/max, as
    Kafka's GroupConfig.evaluate does when bounds changed after a group value was stored (a value
    outside them is refused when set); `on_capped(name, stored, effective)` is told of each, for
    Kafka's warning. Unknown names are ignored."""
    values: dict[str, Any] = {}
    for name, definition in GROUP_CONFIGS.items():
        raw = overrides.get(name)
        if raw is None:
            values[definition.attribute] = group_default(broker, definition)
            continue
        stored = value = definition.parse(raw)
        if definition.min_config is not None:
            value = max(value, broker.value(definition.min_config))
        if definition.max_config is not None:
            value = min(value, broker.value(definition.max_config))
        if value != stored and on_capped is not None:
            on_capped(name, stored, value)
        values[definition.attribute] = value
    return GroupConfig(**values)
