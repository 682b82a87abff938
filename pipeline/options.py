"""Spark's Kafka source and sink options, parsed and checked the way Spark does, and the pure
planning arithmetic (offset JSON, rate limiting, range splitting). Nothing here needs a JVM or a
broker, so all of it is tested directly.

Offsets JSON is Spark's: `{"topic": {"0": 23, "1": -1}}` with -2 for earliest and -1 for latest;
`assign` is `{"topic": [0, 1]}`."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

EARLIEST, LATEST = -2, -1

TopicPartition = tuple[str, int]
Offsets = dict[TopicPartition, int]

# Client settings Spark's Kafka source refuses, because the source manages them itself.
_REFUSED_SOURCE = {
    "auto.offset.reset": "Set the source option 'startingOffsets' instead to specify where to start.",
    "enable.auto.commit": "The source commits nothing to Kafka: the checkpoint is the source of truth.",
    "key.deserializer": "Keys are always read as bytes; cast them with DataFrame operations.",
    "value.deserializer": "Values are always read as bytes; cast them with DataFrame operations.",
    "interceptor.classes": "Interceptors are not supported: the source reads raw records.",
}
_REFUSED_SINK = {
    "key.serializer": "Keys are written as bytes; cast the 'key' column to string or binary.",
    "value.serializer": "Values are written as bytes; cast the 'value' column to string or binary.",
}


class OptionError(ValueError):
    """An option Spark's Kafka source or sink would refuse, with its reason."""


@dataclass(frozen=True)
class OffsetRange:
    """Records [start, end) of one topic partition, read by one task."""
    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def client_settings(options: Mapping[str, str], *, sink: bool = False) -> dict[str, str]:
    """The `kafka.*` options without their prefix, as librdkafka settings."""
    refused = _REFUSED_SINK if sink else _REFUSED_SOURCE
    out: dict[str, str] = {}
    for name, value in options.items():
        if not name.lower().startswith("kafka."):
            continue
        key = name[len("kafka."):]
        if key in refused:
            raise OptionError(f"Kafka option '{key}' is not supported. {refused[key]}")
        out[key] = value
    if not out.get("bootstrap.servers"):
        raise OptionError("Option 'kafka.bootstrap.servers' must be specified for configuring Kafka consumer"
                          if not sink else "Option 'kafka.bootstrap.servers' must be specified for configuring Kafka producer")
    return out


def _option(options: Mapping[str, str], name: str) -> str | None:
    """Spark's data source options are case-insensitive."""
    lowered = name.lower()
    for key, value in options.items():
        if key.lower() == lowered:
            return value
    return None


def bool_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = _option(options, name)
    if value is None:
        return default
    if value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise OptionError(f"Option '{name}' must be true or false, not {value!r}")


def positive_int_option(options: Mapping[str, str], name: str) -> int | None:
    value = _option(options, name)
    if value is None:
        return None
    try:
        n = int(value)
    except ValueError:
        raise OptionError(f"Option '{name}' must be a positive integer, not {value!r}") from None
    if n <= 0:
        raise OptionError(f"Option '{name}' must be a positive integer, not {value!r}")
    return n


@dataclass(frozen=True)
class Subscription:
    """Exactly one of subscribe, subscribePattern and assign."""
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            return not topic.startswith("__") and re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics

    def select(self, partition_counts: Mapping[str, int]) -> list[TopicPartition]:
        """The partitions to read, given every topic's partition count."""
        if self.assigned:
            return sorted(self.assigned)
        return sorted((t, p) for t, n in partition_counts.items() if self.matches(t) for p in range(n))


def parse_subscription(options: Mapping[str, str]) -> Subscription:
    given = {name: _option(options, name) for name in ("subscribe", "subscribePattern", "assign")}
    present = [name for name, value in given.items() if value is not None]
    if len(present) != 1:
        raise OptionError("One of the following options must be specified for Kafka source: subscribe, "
                          "subscribePattern, assign. See the docs for more details."
                          if not present else
                          f"Only one of the following options can be specified for Kafka source: {', '.join(present)}")
    if given["subscribe"] is not None:
        topics = tuple(t.strip() for t in given["subscribe"].split(",") if t.strip())
        if not topics:
            raise OptionError("No topics to subscribe to as specified value for option 'subscribe' is "
                              f"'{given['subscribe']}'")
        return Subscription(topics=topics)
    if given["subscribePattern"] is not None:
        pattern = given["subscribePattern"].strip()
        if not pattern:
            raise OptionError("Pattern to subscribe is empty as specified value for option 'subscribePattern' is ''")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"Option 'subscribePattern' is not a valid pattern: {exc}") from None
        return Subscription(pattern=pattern)
    try:
        doc = json.loads(given["assign"] or "")
        assigned = tuple((str(t), int(p)) for t, parts in doc.items() for p in parts)
    except (ValueError, AttributeError, TypeError):
        raise OptionError("Expected e.g. {\"topicA\":[0,1],\"topicB\":[0,1]}, got "
                          f"{given['assign']}") from None
    if not assigned:
        raise OptionError("Option 'assign' names no partition")
    return Subscription(assigned=assigned)


@dataclass(frozen=True)
class OffsetSpec:
    """startingOffsets / endingOffsets: 'earliest', 'latest', per-partition offsets, or timestamps."""
    default: int  # EARLIEST or LATEST for partitions not named
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    timestamps: Mapping[TopicPartition, int] | None = None
    global_timestamp: int | None = None
    timestamp_strategy: str = "error"

    @property
    def by_timestamp(self) -> bool:
        return self.timestamps is not None or self.global_timestamp is not None


def offsets_from_json(text: str) -> Offsets:
    try:
        doc = json.loads(text)
        return {(str(t), int(p)): int(o) for t, parts in doc.items() for p, o in parts.items()}
    except (ValueError, AttributeError, TypeError):
        raise OptionError("Expected e.g. {\"topicA\":{\"0\":23,\"1\":-1},\"topicB\":{\"0\":-2}}, got "
                          f"{text}") from None


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Spark's offset JSON as a dict (the streaming offset Spark checkpoints)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def offsets_from_dict(doc: Mapping[str, Mapping[str, int]]) -> Offsets:
    return {(t, int(p)): int(o) for t, parts in doc.items() for p, o in parts.items()}


def parse_offset_spec(options: Mapping[str, str], which: str, *, streaming: bool) -> OffsetSpec:
    """`which` is 'starting' or 'ending'. Timestamps take precedence over offsets, as in Spark."""
    name = f"{which}Offsets"
    strategy = (_option(options, f"{which}OffsetsByTimestampStrategy") or "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(f"Option '{which}OffsetsByTimestampStrategy' must be 'error' or 'latest', not {strategy!r}")
    default = EARLIEST if which == "starting" and not streaming else LATEST
    global_ts = _option(options, f"{which}Timestamp")
    by_ts = _option(options, f"{which}OffsetsByTimestamp")
    if global_ts is not None:
        try:
            return OffsetSpec(default, global_timestamp=int(global_ts), timestamp_strategy=strategy)
        except ValueError:
            raise OptionError(f"Option '{which}Timestamp' must be a timestamp in milliseconds, not {global_ts!r}") from None
    if by_ts is not None:
        return OffsetSpec(default, timestamps=offsets_from_json(by_ts), timestamp_strategy=strategy)
    value = _option(options, name)
    if value is None:
        return OffsetSpec(default)
    word = value.strip().lower()
    if word == "earliest":
        if which == "ending":
            raise OptionError("Ending offset not valid in batch queries: endingOffsets must not be 'earliest'")
        return OffsetSpec(EARLIEST)
    if word == "latest":
        if which == "starting" and not streaming:
            raise OptionError("Starting offset can't be latest for batch queries on Kafka")
        return OffsetSpec(LATEST)
    offsets = offsets_from_json(value)
    for tp, offset in offsets.items():
        if which == "ending" and offset == EARLIEST:
            raise OptionError(f"Ending offset not valid in batch queries: {tp[0]}-{tp[1]} is earliest (-2)")
        if which == "starting" and offset == LATEST and not streaming:
            raise OptionError(f"Starting offset can't be latest for batch queries: {tp[0]}-{tp[1]} is latest (-1)")
        if offset < EARLIEST:
            raise OptionError(f"Offset {offset} for {tp[0]}-{tp[1]} is not valid")
    return OffsetSpec(default, offsets=offsets)


@dataclass(frozen=True)
class SourceOptions:
    client: Mapping[str, str]
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec | None  # batch only
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    fail_on_data_loss: bool
    include_headers: bool
    poll_timeout_ms: int
    group_id: str

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
        client = client_settings(options)
        if streaming and (_option(options, "endingOffsets") or _option(options, "endingOffsetsByTimestamp")
                          or _option(options, "endingTimestamp")):
            raise OptionError("Ending offset not valid in streaming queries: endingOffsets is for batch queries only")
        for name in ("minOffsetsPerTrigger", "maxTriggerDelay", "maxRecordsPerPartition"):
            if _option(options, name) is not None:
                raise OptionError(f"Option '{name}' of Spark's Kafka source is not supported by format('sharebroker')")
        group_prefix = _option(options, "groupIdPrefix") or "spark-kafka-source"
        group_id = client.pop("group.id", None) or f"{group_prefix}-{uuid.uuid4()}"
        return cls(
            client=client,
            subscription=parse_subscription(options),
            starting=parse_offset_spec(options, "starting", streaming=streaming),
            ending=None if streaming else parse_offset_spec(options, "ending", streaming=False),
            max_offsets_per_trigger=positive_int_option(options, "maxOffsetsPerTrigger"),
            min_partitions=positive_int_option(options, "minPartitions"),
            fail_on_data_loss=bool_option(options, "failOnDataLoss", True),
            include_headers=bool_option(options, "includeHeaders", False),
            poll_timeout_ms=positive_int_option(options, "kafkaConsumer.pollTimeoutMs") or 120_000,
            group_id=group_id,
        )


def rate_limit(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               limit: int) -> Offsets:
    """Spark's maxOffsetsPerTrigger: `limit` records shared between partitions in proportion to
    what each has waiting, never starving a small one, never past its latest offset."""
    sizes = {tp: latest[tp] - start.get(tp, latest[tp]) for tp in latest}
    total = sum(s for s in sizes.values() if s > 0)
    if total <= limit:
        return dict(latest)
    out: Offsets = {}
    for tp, end in latest.items():
        begin = start.get(tp, end)
        size = sizes[tp]
        if size <= 0:
            out[tp] = end
            continue
        share = limit * (size / total)
        step = int(share) if share >= 1 else 1  # floor, but at least one record
        out[tp] = min(end, begin + step)
    return out


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Spark's KafkaOffsetRangeCalculator: drop empty ranges; with minPartitions above the number
    of ranges, cut each range into pieces close to total/minPartitions records."""
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or min_partitions <= len(ranges):
        return ranges
    total = sum(r.size for r in ranges)
    ideal = total / min_partitions
    out: list[OffsetRange] = []
    for r in ranges:
        pieces = max(1, round(r.size / ideal))
        for i in range(pieces):
            lo = r.start + r.size * i // pieces
            hi = r.start + r.size * (i + 1) // pieces
            if hi > lo:
                out.append(OffsetRange(r.topic, r.partition, lo, hi))
    return out
