"""`sharebroker`: Spark's Kafka source and sink as a Python data source, with Spark's options and
row schema, so a job moves between this broker and an Apache Kafka cluster by changing only
`format("sharebroker")` to `format("kafka")`.

The source reads offset ranges: the driver side plans `[start, end)` per partition from the
admin ListOffsets API, tasks read their range with an `assign`ed consumer. Ranges are replayable,
so a streaming query writing into a checkpointed file sink is exactly-once: the checkpoint holds
the offsets, nothing is committed to the broker."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from sharebroker.pipeline.kafka_client import Planner, data_loss, read_range, spark_schema
from sharebroker.pipeline.options import (
    EARLIEST,
    OffsetRange,
    Offsets,
    OptionError,
    SourceOptions,
    bool_option,
    offsets_from_dict,
    offsets_to_json,
    rate_limit,
    split_ranges,
)


class RangePartition(InputPartition):
    def __init__(self, rng: OffsetRange) -> None:
        super().__init__(rng)
        self.range = rng


class KafkaDataSource(DataSource):
    """format("sharebroker"): batch and streaming reads by offset range, batch and streaming writes."""

    @classmethod
    def name(cls) -> str:
        return "sharebroker"

    def schema(self) -> str:
        return spark_schema(bool_option(self.options, "includeHeaders", False))

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaBatchReader(SourceOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(SourceOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from sharebroker.pipeline.sink import KafkaBatchWriter, SinkOptions
        return KafkaBatchWriter(SinkOptions.parse(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from sharebroker.pipeline.sink import KafkaStreamWriter, SinkOptions
        return KafkaStreamWriter(SinkOptions.parse(self.options, schema))


def _read(opts: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    assert isinstance(partition, RangePartition)
    yield from read_range(opts.client, opts.group_id, partition.range, include_headers=opts.include_headers,
                          fail_on_data_loss=opts.fail_on_data_loss, poll_timeout_ms=opts.poll_timeout_ms)


class KafkaBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        planner = Planner(self.opts.client)
        tps = planner.partitions(self.opts.subscription)
        start = planner.resolve(self.opts.starting, tps, what="startingOffsets")
        assert self.opts.ending is not None
        end = planner.resolve(self.opts.ending, tps, what="endingOffsets")
        ranges = []
        for tp in tps:
            if start[tp] > end[tp]:
                raise OptionError(f"The starting offset {start[tp]} of {tp[0]}-{tp[1]} is greater than its ending "
                                  f"offset {end[tp]}")
            ranges.append(OffsetRange(tp[0], tp[1], start[tp], end[tp]))
        return [RangePartition(r) for r in split_ranges(ranges, self.opts.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from _read(self.opts, partition)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are Spark's Kafka offset JSON, {"topic": {"0": 42}}. All driver-side calls run in
    one long-lived process per query run, so the planner and the availableNow target live here."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._planner: Planner | None = None
        self._target: Offsets | None = None  # availableNow: never read past this
        self._latest: Offsets = {}

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.opts.client)
        return self._planner

    def initialOffset(self) -> dict:
        tps = self.planner.partitions(self.opts.subscription)
        return offsets_to_json(self.planner.resolve(self.opts.starting, tps, what="startingOffsets"))

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._fetch_latest()

    def _fetch_latest(self) -> Offsets:
        return self.planner.latest(self.planner.partitions(self.opts.subscription))

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = offsets_from_dict(start)
        latest = dict(self._target) if self._target is not None else self._fetch_latest()
        self._latest = latest
        gone = [tp for tp in begin if tp not in latest]
        if gone and self.opts.fail_on_data_loss:
            raise data_loss(f"Partitions {sorted(gone)} are gone")
        new = [tp for tp in latest if tp not in begin]
        if new:  # partitions added since: read them from the start, as Spark does
            begin.update(self.planner.earliest(new))
        for tp, offset in latest.items():
            if offset < begin[tp]:
                if self.opts.fail_on_data_loss:
                    raise data_loss(f"Partition {tp[0]}-{tp[1]}'s offset was changed from {begin[tp]} to {offset}")
                begin[tp] = offset
        end = rate_limit(begin, latest, limit.max_rows) if isinstance(limit, ReadMaxRows) else latest
        return offsets_to_json(end)

    def reportLatestOffset(self) -> dict | None:
        return offsets_to_json(self._latest) if self._latest else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, stop = offsets_from_dict(start), offsets_from_dict(end)
        new = [tp for tp in stop if tp not in begin]
        if new:
            begin.update(self.planner.list_offsets({tp: EARLIEST for tp in new}))
        ranges = [OffsetRange(tp[0], tp[1], min(begin[tp], stop[tp]), stop[tp]) for tp in sorted(stop)]
        return [RangePartition(r) for r in split_ranges(ranges, self.opts.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from _read(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: the checkpoint is the source of truth, the broker keeps no position."""

    def stop(self) -> None:
        self._planner = None

