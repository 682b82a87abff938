"""The group-level settings (``GROUP_CONFIGS``) of share, consumer and streams groups: each defaults
to a broker synonym and must lie within the broker's min/max settings."""

from __future__ import annotations

from sharebroker.config.auto_offset_reset import parse_share_auto_offset_reset
from sharebroker.config.definitions import AtLeast, ConfigError, GroupConfigDef, OneOf

__all__ = ["GROUP_CONFIGS"]


def _validate_auto_offset_reset(name: str, value: str) -> None:
    try:
        parse_share_auto_offset_reset(value)
    except ValueError as exc:
        raise ConfigError.invalid(name, value, "The value must be either 'earliest', 'latest' or of the format "
                                  f"'by_duration:<PnDTnHnMn.nS.>' ({exc})") from None


def _validate_dlq_topic_name(name: str, value: str) -> None:
    if value.startswith("__"):  # internal topic names
        raise ConfigError(name, f"{name}: DLQ topic name must not start with '__'")


def _group_defs() -> list[GroupConfigDef]:
    g = GroupConfigDef
    return [
        g("consumer.session.timeout.ms", "int", 45000, "Session timeout of this consumer group's members.", AtLeast(1),
          synonym="group.consumer.session.timeout.ms", min_config="group.consumer.min.session.timeout.ms",
          max_config="group.consumer.max.session.timeout.ms"),
        g("consumer.heartbeat.interval.ms", "int", 5000, "Heartbeat interval of this consumer group's members.", AtLeast(1),
          synonym="group.consumer.heartbeat.interval.ms", min_config="group.consumer.min.heartbeat.interval.ms",
          max_config="group.consumer.max.heartbeat.interval.ms"),
        g("consumer.assignment.interval.ms", "int", 1000, "Minimum time between assignment updates of this consumer "
          "group.", AtLeast(0), synonym="group.consumer.assignment.interval.ms",
          min_config="group.consumer.min.assignment.interval.ms", max_config="group.consumer.max.assignment.interval.ms"),
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
        g("share.record.trace.enable", "boolean", False, "sharebroker only (no Kafka group config has this name): "
          "one structured log line (logger sharebroker.share.trace) for each acquisition, acknowledgement, release, "
          "lock expiry and archive of this share group's records. Takes effect at once."),
        g("share.assignment.interval.ms", "int", 1000, "Minimum time between assignment updates of this share group.",
          AtLeast(0), synonym="group.share.assignment.interval.ms", min_config="group.share.min.assignment.interval.ms",
          max_config="group.share.max.assignment.interval.ms"),
        g("errors.deadletterqueue.topic.name", "string", "", "The topic this share group's rejected records and records "
          "past share.delivery.count.limit are written to (KIP-1191); empty (the default) means no dead-letter queue.",
          _validate_dlq_topic_name),
        g("errors.deadletterqueue.copy.record.enable", "boolean", False, "Whether a dead-letter record carries the "
          "original record's key and value, or only the __dlq.errors.* context headers."),
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


GROUP_CONFIGS: dict[str, GroupConfigDef] = {c.name: c for c in _group_defs()}
