"""The Kafka clients the data sources run: planning (partitions and offsets, through the admin
ListOffsets API) in the driver-side processes, and reading one offset range in a task with a plain
`assign`ed consumer. Clients are made inside the process that uses them: they hold sockets and
threads and cannot be pickled."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition as KafkaTopicPartition
from confluent_kafka._types import HeadersType
from confluent_kafka.admin import AdminClient, OffsetSpec as KafkaOffsetSpec

from sharebroker.pipeline.options import EARLIEST, LATEST, OffsetRange, Offsets, OffsetSpec, OptionError, Subscription, TopicPartition

ROWS_PER_BATCH = 10_000  # Arrow batches handed to Spark (Spark's own cap is 10,000 rows)
_HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
TIMESTAMP_TYPES = {1: 0, 2: 1}  # librdkafka CREATE_TIME / LOG_APPEND_TIME -> Kafka's 0 / 1


class DataLossError(RuntimeError):
    """Offsets the query needs are gone from the log (retention, truncation, a deleted topic)."""


def data_loss(message: str) -> DataLossError:
    return DataLossError(
        f"{message}. Some data may have been lost because they are not available in Kafka any more; either the "
        "data was aged out by Kafka or the topic may have been deleted before all the data in the topic was "
        "processed. If you don't want your query to fail on such cases, set the source option "
        "'failOnDataLoss' to 'false'.")


def arrow_schema(include_headers: bool, extra: Iterable[tuple[str, pa.DataType]] = ()) -> pa.Schema:
    """The Arrow form of Spark's Kafka source schema (Spark's timestamp is microseconds, UTC)."""
    fields = [("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
              ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32())]
    if include_headers:
        fields.append(("headers", _HEADERS_TYPE))
    fields.extend(extra)
    return pa.schema(fields)


def spark_schema(include_headers: bool, extra: str = "") -> str:
    ddl = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
           "timestampType int")
    if include_headers:
        ddl += ", headers array<struct<key: string, value: binary>>"
    return ddl + (", " + extra if extra else "")


class Planner:
    """Topic partitions and their offsets, one admin client per process."""

    def __init__(self, client: Mapping[str, str], timeout_s: float = 30.0) -> None:
        self._admin = AdminClient(dict(client))
        self._timeout = timeout_s

    def partition_counts(self) -> dict[str, int]:
        meta = self._admin.list_topics(timeout=self._timeout)
        return {name: len(t.partitions) for name, t in meta.topics.items() if t.error is None}

    def partitions(self, subscription: Subscription) -> list[TopicPartition]:
        counts = self.partition_counts()
        if subscription.assigned:
            missing = [tp for tp in subscription.assigned if tp[1] >= counts.get(tp[0], 0)]
            if missing:
                raise OptionError(f"assigned partitions do not exist: {sorted(missing)}")
        return subscription.select(counts)

    def list_offsets(self, wanted: Mapping[TopicPartition, int]) -> Offsets:
        """Offsets for EARLIEST, LATEST or a timestamp (the first offset at or after it; -1 when
        there is none) per partition, in one round of ListOffsets requests."""
        if not wanted:
            return {}
        specs = {}
        for (topic, partition), what in wanted.items():
            spec = (KafkaOffsetSpec.earliest() if what == EARLIEST else
                    KafkaOffsetSpec.latest() if what == LATEST else KafkaOffsetSpec.for_timestamp(what))
            specs[KafkaTopicPartition(topic, partition)] = spec
        futures = self._admin.list_offsets(specs, request_timeout=self._timeout)
        return {(tp.topic, tp.partition): fut.result().offset for tp, fut in futures.items()}

    def earliest(self, tps: Iterable[TopicPartition]) -> Offsets:
        return self.list_offsets({tp: EARLIEST for tp in tps})

    def latest(self, tps: Iterable[TopicPartition]) -> Offsets:
        return self.list_offsets({tp: LATEST for tp in tps})

    def resolve(self, spec: OffsetSpec, tps: list[TopicPartition], *, what: str) -> Offsets:
        """Concrete offsets for `spec` over the partitions `tps`."""
        if spec.by_timestamp:
            stamps = ({tp: spec.global_timestamp for tp in tps} if spec.global_timestamp is not None
                      else dict(spec.timestamps or {}))
            _check_named(stamps, tps, what)
            found = self.list_offsets(stamps)
            missing = [tp for tp, off in found.items() if off < 0]
            if missing:
                if spec.timestamp_strategy == "error":
                    tp = missing[0]
                    raise OptionError(f"No offset matched from request of topic-partition {tp[0]}-{tp[1]} and "
                                      f"timestamp {stamps[tp]}. Set '{what}ByTimestampStrategy' to 'latest' to "
                                      "read from the latest offset instead.")
                found.update(self.latest(missing))
            return found
        if spec.offsets:
            _check_named(spec.offsets, tps, what)
            wanted = dict(spec.offsets)
        else:
            wanted = {tp: spec.default for tp in tps}
        symbolic = {tp: o for tp, o in wanted.items() if o in (EARLIEST, LATEST)}
        out = {tp: o for tp, o in wanted.items() if o >= 0}
        out.update(self.list_offsets(symbolic))
        return out


def _check_named(named: Mapping[TopicPartition, int], tps: list[TopicPartition], what: str) -> None:
    """Spark's rule: specific offsets or timestamps must name exactly the partitions read."""
    if set(named) != set(tps):
        raise OptionError(f"If {what} contains specific offsets, you must specify all TopicPartitions. Use -1 for "
                          f"latest, -2 for earliest. Specified: {sorted(named)}; assigned: {sorted(tps)}")


def consumer_settings(client: Mapping[str, str], group_id: str) -> dict[str, object]:
    conf: dict[str, object] = {
        "group.id": group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
        "fetch.max.bytes": 64 * 1024 * 1024,
        "max.partition.fetch.bytes": 8 * 1024 * 1024,
        "queued.max.messages.kbytes": 256 * 1024,
    }
    conf.update(client)
    return conf


def header_structs(headers: HeadersType | None) -> list[dict[str, object]]:
    """A consumed record's headers (librdkafka gives a list of pairs) as Arrow struct values."""
    if not headers:
        return []
    pairs = headers.items() if isinstance(headers, dict) else headers
    return [{"key": k, "value": v} for k, v in pairs]


def read_range(client: Mapping[str, str], group_id: str, rng: OffsetRange, *, include_headers: bool,
               fail_on_data_loss: bool, poll_timeout_ms: int) -> Iterator[pa.RecordBatch]:
    """The records of [rng.start, rng.end) as Arrow batches. Offsets missing inside the range
    (control records, compaction) are skipped, as Spark does; offsets the log no longer has are
    data loss."""
    schema = arrow_schema(include_headers)
    consumer = Consumer(consumer_settings(client, group_id))
    tp = KafkaTopicPartition(rng.topic, rng.partition)
    try:
        low, high = consumer.get_watermark_offsets(tp, timeout=poll_timeout_ms / 1000, cached=False)
        start, end = rng.start, rng.end
        if start < low:
            if fail_on_data_loss:
                raise data_loss(f"Cannot fetch offset {start} of {rng.topic}-{rng.partition}: the log starts at {low}")
            start = low
        if high < end:
            if fail_on_data_loss:
                raise data_loss(f"Cannot fetch offsets up to {end} of {rng.topic}-{rng.partition}: the log ends at {high}")
            end = high
        if start >= end:
            return
        consumer.assign([KafkaTopicPartition(rng.topic, rng.partition, start)])
        next_offset = start
        timeout_s = poll_timeout_ms / 1000
        topic, partition = pa.scalar(rng.topic, pa.string()), pa.scalar(rng.partition, pa.int32())
        while next_offset < end:
            messages = consumer.consume(num_messages=min(ROWS_PER_BATCH, end - next_offset), timeout=timeout_s)
            if not messages:
                raise TimeoutError(f"Cannot fetch record for offset {next_offset} of {rng.topic}-{rng.partition} "
                                   f"in {poll_timeout_ms} milliseconds (kafkaConsumer.pollTimeoutMs)")
            # Column by column in comprehensions: the per-record cost is the method calls alone.
            if any(m.error() is not None for m in messages):
                for m in messages:
                    err = m.error()
                    if err is None:
                        continue
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(err)
                    if (m.offset() or 0) >= end:  # the rest of the range holds no records
                        next_offset = end
                messages = [m for m in messages if m.error() is None]
            offsets: list[int] = [m.offset() for m in messages]  # type: ignore[misc]  # never None for records
            if offsets and offsets[-1] >= end:
                cut = bisect.bisect_left(offsets, end)
                messages, offsets = messages[:cut], offsets[:cut]
                next_offset = end
            if not messages:
                continue
            next_offset = max(next_offset, offsets[-1] + 1)
            n = len(messages)
            stamps = [m.timestamp() for m in messages]
            kinds = pa.array([t[0] for t in stamps], pa.int32())
            arrays = [pa.array([m.key() for m in messages], pa.binary()),
                      pa.array([m.value() for m in messages], pa.binary()),
                      pa.repeat(topic, n), pa.repeat(partition, n), pa.array(offsets, pa.int64()),
                      pc.multiply(pa.array([t[1] for t in stamps], pa.int64()), 1000).cast(
                          pa.timestamp("us", tz="UTC")),
                      pc.subtract(kinds, 1)]  # librdkafka's CREATE_TIME 1 / LOG_APPEND_TIME 2 -> 0 / 1
            if include_headers:
                arrays.append(pa.array([header_structs(m.headers()) for m in messages], _HEADERS_TYPE))
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)
    finally:
        consumer.close()
