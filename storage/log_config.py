"""The settings a partition log obeys, as plain values (storage never reads config/)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

_LONG_MAX = 9223372036854775807


@dataclass(slots=True)
class LogConfig:
    """Kafka topic configs that storage enforces; defaults are Kafka 4.x's."""

    segment_bytes: int = 1073741824  # segment.bytes
    segment_ms: int = 604800000  # segment.ms (7 days)
    segment_index_bytes: int = 10485760  # segment.index.bytes
    index_interval_bytes: int = 4096  # index.interval.bytes
    retention_ms: int = 604800000  # retention.ms, -1 = unlimited
    retention_bytes: int = -1  # retention.bytes, -1 = unlimited
    cleanup_policy: str = "delete"  # cleanup.policy; retention applies only with "delete"
    delete_retention_ms: int = 86400000  # delete.retention.ms: how long the cleaner keeps tombstones
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    max_compaction_lag_ms: int = _LONG_MAX  # max.compaction.lag.ms
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio

    @property
    def max_index_entries(self) -> int:
        return self.segment_index_bytes // 8

    @property
    def max_time_index_entries(self) -> int:
        return self.segment_index_bytes // 12

    @property
    def deletes(self) -> bool:
        return "delete" in _policy_words(self.cleanup_policy)

    @property
    def compacts(self) -> bool:
        return "compact" in self.cleanup_policy  # normalised: "compact", "delete" or both

    @classmethod
    def from_kafka(cls, props: Mapping[str, Any], base: LogConfig | None = None) -> LogConfig:
        """From Kafka topic-config names ("segment.bytes" ...); missing names keep `base`'s value."""
        out = LogConfig() if base is None else LogConfig(*(getattr(base, f.name) for f in fields(cls)))
        for f in fields(cls):
            key = f.name.replace("_", ".")
            if key in props and props[key] is not None:
                setattr(out, f.name, _coerce(f.name, props[key]))
        return out

    @classmethod
    def from_topic_config(cls, tc: Any) -> LogConfig:
        """From any object with these field names as attributes (e.g. config's TopicConfig), or a
        mapping of Kafka names. Absent attributes keep Kafka's defaults."""
        if isinstance(tc, Mapping):
            return cls.from_kafka(tc)
        out = LogConfig()
        for f in fields(cls):
            value = getattr(tc, f.name, None)
            if value is not None:
                setattr(out, f.name, _coerce(f.name, value))
        return out


def _policy_words(policy: Any) -> list[str]:
    if isinstance(policy, str):
        return [w.strip().lower() for w in policy.split(",")]
    return [str(w).strip().lower() for w in policy]


def _coerce(name: str, value: Any) -> Any:
    if name == "cleanup_policy":
        return ",".join(_policy_words(value))
    if name == "min_cleanable_dirty_ratio":
        return float(value)
    return int(value)
