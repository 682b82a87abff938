"""DescribeConfigs entries for BROKER, TOPIC and GROUP resources: each setting's value, source, synonyms
and documentation, as a Kafka broker reports them.

Synonyms come in Kafka's order: the resource's own value (topic override), then the broker's dynamic
per-broker, dynamic default and static values, then defaults; the first one is the source. A group
setting has one synonym, under its own name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sharebroker.config.broker_config import BrokerConfig
from sharebroker.config.broker_settings import BROKER_CONFIGS, BROKER_SYNONYM_GROUPS
from sharebroker.config.definitions import ConfigDef, ConfigSource
from sharebroker.config.group_config import group_default
from sharebroker.config.group_settings import GROUP_CONFIGS
from sharebroker.config.topic_config import topic_values
from sharebroker.config.topic_settings import TOPIC_CONFIGS

__all__ = ["ConfigSynonym", "DescribedConfig", "describe_broker_configs", "describe_group_configs",
           "describe_topic_configs"]


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


def _synonym(definition: ConfigDef, value: Any, source: ConfigSource) -> ConfigSynonym:
    return ConfigSynonym(definition.name, definition.shown(value), int(source))


def _described(definition: ConfigDef, value: Any, synonyms: list[ConfigSynonym], *, read_only: bool) -> DescribedConfig:
    return DescribedConfig(
        name=definition.name,
        value=definition.shown(value),
        source=synonyms[0].source if synonyms else int(ConfigSource.DEFAULT_CONFIG),
        read_only=read_only,
        is_sensitive=definition.is_sensitive,
        config_type=definition.config_type,
        synonyms=synonyms,
        documentation=definition.doc,
    )


def _broker_synonyms(broker: BrokerConfig, names: Iterable[str]) -> list[ConfigSynonym]:
    """Every set value of ``names``, layer by layer (most specific first), then their defaults."""
    definitions = [BROKER_CONFIGS[name] for name in names]
    entries = [_synonym(d, layer[d.name], source) for source, layer in broker.layers() for d in definitions if d.name in layer]
    entries += [_synonym(d, d.default, ConfigSource.DEFAULT_CONFIG) for d in definitions if d.default is not None]
    return entries


def describe_broker_configs(broker: BrokerConfig, *, per_broker: bool = True) -> list[DescribedConfig]:
    """DescribeConfigs for a BROKER resource: this node (all settings) or, with ``per_broker=False``,
    the cluster default resource "" (only the dynamic defaults that are set, as Kafka)."""
    dynamic_default = dict(broker.layers())[ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
    names = sorted(BROKER_CONFIGS) if per_broker else sorted(dynamic_default)
    result: list[DescribedConfig] = []
    for name in names:
        definition = BROKER_CONFIGS[name]
        entries = _broker_synonyms(broker, BROKER_SYNONYM_GROUPS.get(name, (name,)))
        # Names listed before this one in its group do not describe it (log.retention.ms for .hours).
        while entries and entries[0].name != name:
            entries.pop(0)
        if per_broker:
            value = broker.value(name)
        else:
            entries = [e for e in entries if e.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
            value = dynamic_default[name]
        result.append(_described(definition, value, entries, read_only=not definition.dynamic))
    return result + _described_custom(broker, per_broker=per_broker)


def _described_custom(broker: BrokerConfig, *, per_broker: bool) -> list[DescribedConfig]:
    """The configs set under names this broker does not know, as Kafka describes a name whose type
    it cannot tell: sensitive, so with no value (nor in its synonyms), read-only, of type UNKNOWN
    (0), its source that of the most specific layer holding it. The default resource lists only
    those of the cluster default."""
    layers = broker.custom_configs()
    if not per_broker:
        layers = tuple((source, names) for source, names in layers if source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    described = []
    for name in sorted({name for _, names in layers for name in names}):
        synonyms = [ConfigSynonym(name, None, int(source)) for source, names in layers if name in names]
        described.append(DescribedConfig(name=name, value=None, source=synonyms[0].source, read_only=True,
                                         is_sensitive=True, config_type=0, synonyms=synonyms))
    return described


def _overridden(overrides: Mapping[str, str | None]) -> set[str]:
    return {name for name, raw in overrides.items() if raw is not None}


def describe_topic_configs(broker: BrokerConfig, overrides: Mapping[str, str]) -> list[DescribedConfig]:
    """DescribeConfigs for a TOPIC: every topic setting; source TOPIC_CONFIG when overridden, else that
    of the first broker synonym that is set, else DEFAULT_CONFIG."""
    values, overridden = topic_values(broker, overrides), _overridden(overrides)
    result: list[DescribedConfig] = []
    for name in sorted(TOPIC_CONFIGS):
        definition, value = TOPIC_CONFIGS[name], values[name]
        own = [_synonym(definition, value, ConfigSource.TOPIC_CONFIG)] if name in overridden else []
        result.append(_described(definition, value, own + _broker_synonyms(broker, definition.broker_synonyms),
                                 read_only=False))
    return result


def describe_group_configs(broker: BrokerConfig, overrides: Mapping[str, str]) -> list[DescribedConfig]:
    """DescribeConfigs for a GROUP: every group setting, as Kafka's ConfigHelper describes it, with one
    synonym under the setting's own name: GROUP_CONFIG when the group overrides it, else DEFAULT_CONFIG
    with the value the broker's group.* setting gives (Kafka names no broker synonym for group
    settings). Values are shown as stored, not clamped to the bounds."""
    overridden = _overridden(overrides)
    result: list[DescribedConfig] = []
    for definition in (GROUP_CONFIGS[name] for name in sorted(GROUP_CONFIGS)):
        own = definition.name in overridden
        value = definition.parse(overrides[definition.name]) if own else group_default(broker, definition)
        source = ConfigSource.GROUP_CONFIG if own else ConfigSource.DEFAULT_CONFIG
        result.append(_described(definition, value, [_synonym(definition, value, source)], read_only=False))
    return result
