"""sharebroker settings: one table of Kafka-named settings, loaded from file, environment and flags.

definitions: what a setting is (type, parsing, validators, ConfigError); broker_settings,
topic_settings, group_settings: the tables; listeners; broker_config: BrokerConfig, loading and
cross-checks; topic_config, group_config: effective values and validation of overrides;
auto_offset_reset: share.auto.offset.reset; describe: DescribeConfigs entries; properties: raw input.
"""

from sharebroker.config.auto_offset_reset import (
    ShareAutoOffsetReset,
    parse_iso8601_duration_ms,
    parse_share_auto_offset_reset,
)
from sharebroker.config.broker_config import BrokerConfig
from sharebroker.config.broker_settings import BROKER_CONFIGS
from sharebroker.config.definitions import ConfigDef, ConfigError, ConfigSource, ConfigType, GroupConfigDef, TopicConfigDef
from sharebroker.config.describe import (
    ConfigSynonym,
    DescribedConfig,
    describe_broker_configs,
    describe_group_configs,
    describe_topic_configs,
)
from sharebroker.config.group_config import GroupConfig, group_config, validate_group_config, validate_group_configs
from sharebroker.config.group_settings import GROUP_CONFIGS
from sharebroker.config.listeners import Listener, parse_listeners
from sharebroker.config.properties import env_to_config_name, parse_properties
from sharebroker.config.topic_config import TopicConfig, topic_config, validate_topic_overrides
from sharebroker.config.topic_settings import TOPIC_CONFIGS

__all__ = [
    "BROKER_CONFIGS",
    "GROUP_CONFIGS",
    "TOPIC_CONFIGS",
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
    "env_to_config_name",
    "group_config",
    "parse_iso8601_duration_ms",
    "parse_listeners",
    "parse_properties",
    "parse_share_auto_offset_reset",
    "topic_config",
    "validate_group_config",
    "validate_group_configs",
    "validate_topic_overrides",
]
