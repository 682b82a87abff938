"""The broker's configuration: ``BrokerConfig.load`` reads defaults < properties file < ``KAFKA_*``
environment < CLI overrides and validates every value and the cross-setting rules at start; ``alter``
applies dynamic (IncrementalAlterConfigs) changes on top, under the same rules."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from sharebroker.config.broker_settings import BROKER_CONFIGS
from sharebroker.config.definitions import ConfigDef, ConfigError, ConfigSource, SettingLookup, require
from sharebroker.config.listeners import Listener, resolve_advertised, resolve_listeners
from sharebroker.config.properties import PropertiesError, kafka_env, load_properties
from sharebroker.config.security_settings import is_listener_setting, validate_listener_settings
from sharebroker.config.topic_settings import TOPIC_CONFIGS

__all__ = ["BrokerConfig", "resolve_synonyms"]


# ---------------------------------------------------------------------------------------------
# Cross-setting rules (checked at load and on every dynamic change)
# ---------------------------------------------------------------------------------------------


def resolve_synonyms(get: SettingLookup, chain: Iterable[tuple[str, int]]) -> Any:
    """First non-null value along a synonym chain, converted to the first name's unit."""
    for name, factor in chain:
        value = get(name)
        if value is not None:
            return value * factor if factor != 1 else value
    return None


def _retention_ms(get: SettingLookup) -> int:
    millis = resolve_synonyms(get, TOPIC_CONFIGS["retention.ms"].synonyms)
    return -1 if millis < 0 else millis  # any negative setting means "keep forever"


def _log_dir(get: SettingLookup) -> Path:
    name = "log.dirs" if get("log.dirs") is not None else "log.dir"
    dirs = get(name)
    if len(dirs) != 1:
        found = ", ".join(dirs) if dirs else "none"
        raise ConfigError(name, f"{name}: sharebroker supports exactly one log directory (found: {found})")
    return Path(dirs[0])


def _ordered(get: SettingLookup, low: str, high: str, strict: bool = False) -> None:
    """``low <= high`` (or ``<``), in Kafka's words plus the values."""
    lv, hv = get(low), get(high)
    detail = f" ({low}={lv}, {high}={hv})"
    if strict:
        require(lv < hv, low, f"{low} must be less than {high}{detail}")
    else:
        require(lv <= hv, high, f"{high} must be greater than or equal to {low}{detail}")


def _within(get: SettingLookup, name: str, low: str | None, high: str | None) -> None:
    value = get(name)
    if low is not None and high is not None:
        _ordered(get, low, high)
    if low is not None:
        require(value >= get(low), name, f"{name} must be greater than or equal to {low} ({name}={value}, {low}={get(low)})")
    if high is not None:
        require(value <= get(high), name, f"{name} must be less than or equal to {high} ({name}={value}, {high}={get(high)})")


def _cross_check(get: SettingLookup, explicit: Callable[[str], bool]) -> None:
    if explicit("broker.id") and explicit("node.id") and get("broker.id") != get("node.id"):
        raise ConfigError("node.id", f"You must set `node.id` to the same value as `broker.id` "
                                     f"(node.id={get('node.id')}, broker.id={get('broker.id')}).")
    resolve_advertised(get, resolve_listeners(get))
    _log_dir(get)
    retention = _retention_ms(get)
    require(retention >= 1 or retention == -1, "log.retention.ms",
            f"log.retention.ms must be unlimited (-1) or, equal or greater than 1 (effective value {retention})")
    roll = resolve_synonyms(get, TOPIC_CONFIGS["segment.ms"].synonyms)
    require(roll >= 1, "log.roll.ms", f"log.roll.ms must be greater than or equal to 1 (effective value {roll})")
    jitter = resolve_synonyms(get, TOPIC_CONFIGS["segment.jitter.ms"].synonyms)
    require(jitter >= 0, "log.roll.jitter.ms", f"log.roll.jitter.ms must be greater than or equal to 0 (effective value {jitter})")
    flush_ms = resolve_synonyms(get, TOPIC_CONFIGS["flush.ms"].synonyms)
    require(flush_ms >= 0, "log.flush.interval.ms", f"log.flush.interval.ms must be greater than or equal to 0 "
                                                    f"(effective value {flush_ms})")
    for kind in ("consumer", "share", "streams"):
        prefix = f"group.{kind}"
        _within(get, f"{prefix}.heartbeat.interval.ms", f"{prefix}.min.heartbeat.interval.ms",
                f"{prefix}.max.heartbeat.interval.ms")
        _within(get, f"{prefix}.session.timeout.ms", f"{prefix}.min.session.timeout.ms", f"{prefix}.max.session.timeout.ms")
        _ordered(get, f"{prefix}.heartbeat.interval.ms", f"{prefix}.session.timeout.ms", strict=True)
    _within(get, "group.streams.num.standby.replicas", None, "group.streams.max.standby.replicas")
    _within(get, "group.consumer.assignment.interval.ms", "group.consumer.min.assignment.interval.ms",
            "group.consumer.max.assignment.interval.ms")
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
    require(len(assignors) == 1, "group.share.assignors",
            f"group.share.assignors must contain exactly one assignor, but found {len(assignors)}")


# Dynamic settings that Kafka caps into their bounds (static settings) with a warning when it
# applies the stored dynamic configs (GroupCoordinatorConfig.clampDynamicConfigs), so that bounds
# narrowed by a restart leave the rest of the dynamic configs in force; a change is still checked
# against the bounds with the stored values as they are, and refused outside them.
CAPPED_DYNAMIC: dict[str, tuple[str, str]] = {
    "group.consumer.assignment.interval.ms": ("group.consumer.min.assignment.interval.ms",
                                              "group.consumer.max.assignment.interval.ms"),
    "group.share.assignment.interval.ms": ("group.share.min.assignment.interval.ms",
                                           "group.share.max.assignment.interval.ms"),
}


# ---------------------------------------------------------------------------------------------
# Broker configuration
# ---------------------------------------------------------------------------------------------


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
        # Dynamic configs under names this broker does not know (a plugin's, say), as Kafka keeps
        # them: stored and persisted as given, described as sensitive (no value), used by nothing.
        self._custom_default: dict[str, str] = {}
        self._custom_broker: dict[str, str] = {}
        self._origins: dict[str, str] = dict(origins or {})
        self.unknown: list[str] = list(unknown)
        # listener.name.<listener>.<security setting> overrides, raw (see security_settings).
        self.listener_settings: dict[str, str] = {}
        _cross_check(self.value, self.is_explicit)

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
        listener_settings: dict[str, str] = {}

        def take(name: str, value: str, origin: str) -> None:
            if name in BROKER_CONFIGS:
                raw[name] = value
                origins[name] = origin
            elif is_listener_setting(name):
                listener_settings[name] = value
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
            if name in BROKER_CONFIGS or is_listener_setting(name):
                take(name, value, f"environment variable {variable}")
        for name, value in (overrides or {}).items():
            take(name, value, "override")

        static = {name: BROKER_CONFIGS[name].parse(value) for name, value in raw.items()}
        if "broker.id" in static and "node.id" not in static:
            # broker.id is the legacy name of node.id.
            static["node.id"] = static["broker.id"]
            BROKER_CONFIGS["node.id"].parse(str(static["node.id"]))
            origins["node.id"] = origins["broker.id"]
        validate_listener_settings(listener_settings)
        config = cls(static, origins=origins, unknown=unknown)
        config.listener_settings = listener_settings
        return config

    def copy(self) -> BrokerConfig:
        """An independent copy (e.g. to validate a change without applying it)."""
        clone = object.__new__(BrokerConfig)
        clone._static = dict(self._static)
        clone._dynamic_default = dict(self._dynamic_default)
        clone._dynamic_broker = dict(self._dynamic_broker)
        clone._custom_default = dict(self._custom_default)
        clone._custom_broker = dict(self._custom_broker)
        clone._origins = dict(self._origins)
        clone.unknown = list(self.unknown)
        clone.listener_settings = dict(self.listener_settings)
        return clone

    # -- reading -----------------------------------------------------------------------------------

    def value(self, name: str) -> Any:
        """The effective typed value; unlike ``broker[name]``, list settings stay tuples. A dynamic
        value of `CAPPED_DYNAMIC` is capped into its bounds."""
        for layer in (self._dynamic_broker, self._dynamic_default):
            if name in layer:
                value = layer[name]
                return self._capped(name, value) if name in CAPPED_DYNAMIC else value
        if name in self._static:
            return self._static[name]
        return _definition(name).default

    def _stored_value(self, name: str) -> Any:
        """The value as set, a dynamic one outside its bounds included: what a change is checked with."""
        for layer in (self._dynamic_broker, self._dynamic_default, self._static):
            if name in layer:
                return layer[name]
        return _definition(name).default

    def _capped(self, name: str, value: Any) -> Any:
        low, high = (self.value(bound) for bound in CAPPED_DYNAMIC[name])
        return low if value < low else high if value > high else value

    def capped(self) -> list[tuple[str, Any, Any]]:
        """(name, stored value, effective value) of each dynamic value capped into its bounds."""
        out = []
        for name in CAPPED_DYNAMIC:
            stored, effective = self._stored_value(name), self.value(name)
            if stored != effective:
                out.append((name, stored, effective))
        return out

    def __getitem__(self, name: str) -> Any:
        value = self.value(name)
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

    def layers(self) -> tuple[tuple[ConfigSource, Mapping[str, Any]], ...]:
        """The explicitly set typed values by source, most specific first; defaults are not a layer."""
        return ((ConfigSource.DYNAMIC_BROKER_CONFIG, self._dynamic_broker),
                (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, self._dynamic_default),
                (ConfigSource.STATIC_BROKER_CONFIG, self._static))

    def is_explicit(self, name: str) -> bool:
        return name in self._static or name in self._dynamic_default or name in self._dynamic_broker

    def items(self) -> Iterable[tuple[str, Any]]:
        return [(name, self[name]) for name in sorted(BROKER_CONFIGS)]

    def value_string(self, name: str) -> str | None:
        return _definition(name).to_string(self.value(name))

    def dynamic_values(self, per_broker: bool | None = None) -> dict[str, str]:
        """Dynamic overrides as strings, custom names included (both layers merged, per-broker
        winning, when ``per_broker`` is None)."""
        if per_broker is None:
            merged = {**self._dynamic_default, **self._dynamic_broker}
            custom = {**self._custom_default, **self._custom_broker}
        else:
            merged = dict(self._dynamic_broker if per_broker else self._dynamic_default)
            custom = dict(self._custom_broker if per_broker else self._custom_default)
        values = {name: _definition(name).to_string(value) or "" for name, value in merged.items()}
        return dict(sorted({**values, **custom}.items()))

    def custom_configs(self) -> tuple[tuple[ConfigSource, Mapping[str, str]], ...]:
        """The configs set under names this broker does not know, by source, most specific first:
        this node's and the cluster default's dynamic ones (values as given), and the names of the
        static ones (server.properties, overrides), whose values are not kept."""
        return ((ConfigSource.DYNAMIC_BROKER_CONFIG, self._custom_broker),
                (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, self._custom_default),
                (ConfigSource.STATIC_BROKER_CONFIG, dict.fromkeys(self.unknown, "")))

    # -- dynamic changes ---------------------------------------------------------------------------

    def alter(self, name: str, raw_value: str | None, *, per_broker: bool = False) -> None:
        """Set (or with None remove) a dynamic value: the cluster default, or this node's with ``per_broker``."""
        self.alter_many({name: raw_value}, per_broker=per_broker)

    def alter_many(self, changes: Mapping[str, str | None], *, per_broker: bool = False,
                   validate_only: bool = False, stored: bool = False) -> None:
        """Apply several dynamic changes atomically after validating each value and the result as a
        whole. As Kafka, a change is refused if a value is outside its bounds, even one of
        `CAPPED_DYNAMIC`; values `stored` earlier (applied at start-up) are capped instead. A name
        this broker does not know is kept as given (Kafka keeps it: a plugin may read it), except a
        per-listener security setting, which this broker cannot change while it runs."""
        listener = [name for name in changes if name not in BROKER_CONFIGS and is_listener_setting(name)]
        if listener:
            raise ConfigError(listener[0], f"Cannot update these configs dynamically: Set({', '.join(listener)})")
        custom_changes = {name: raw for name, raw in changes.items() if name not in BROKER_CONFIGS}
        changes = {name: raw for name, raw in changes.items() if name in BROKER_CONFIGS}
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
        _cross_check(candidate.value if stored else candidate._stored_value, candidate.is_explicit)
        if not validate_only:
            if per_broker:
                self._dynamic_broker = layer
            else:
                self._dynamic_default = layer
            custom = self._custom_broker if per_broker else self._custom_default
            for name, raw in custom_changes.items():
                if raw is None:
                    custom.pop(name, None)
                else:
                    custom[name] = raw

    # -- convenience -------------------------------------------------------------------------------

    @property
    def node_id(self) -> int:
        return self.value("node.id")

    @property
    def listeners(self) -> list[Listener]:
        """Listeners this broker serves (controller listeners excluded)."""
        return resolve_listeners(self.value)

    @property
    def advertised_listeners(self) -> list[Listener]:
        """What clients are told; falls back to ``listeners``. Host "" / port 0 are for the broker to fill in."""
        return resolve_advertised(self.value, self.listeners)

    @property
    def log_dir(self) -> Path:
        return _log_dir(self.value)

    @property
    def log_retention_ms(self) -> int:
        """Effective retention from log.retention.ms / .minutes / .hours; -1 = unlimited."""
        return _retention_ms(self.value)

    @property
    def log_flush_interval_ms(self) -> int:
        """log.flush.interval.ms, or log.flush.scheduler.interval.ms when unset (as Kafka)."""
        return resolve_synonyms(self.value, TOPIC_CONFIGS["flush.ms"].synonyms)

    def __repr__(self) -> str:
        explicit = ", ".join(f"{n}={self.value_string(n)}" for n in sorted(self._static))
        return f"BrokerConfig({explicit})"


def _definition(name: str) -> ConfigDef:
    try:
        return BROKER_CONFIGS[name]
    except KeyError:
        raise KeyError(f"Unknown broker config name: {name}") from None

