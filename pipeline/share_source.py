"""`sharegroup`: a streaming source that reads a topic through a share group (KIP-932), so that
tasks can outnumber partitions and several queries (or other consumers) can share one queue.

Share groups hand out records under a time-limited lock to the member that polled them, and only
that member can acknowledge them; Spark's tasks are short-lived and its batch commit happens on the
driver after they end. So the one member is the query's streaming-source runner (one long-lived
process per query run, where latestOffset/partitions/commit/stop are called):

- `latestOffset` first ACCEPTs the records of the batch Spark has committed (Spark asks for the
  next batch's end only once the previous batch is in the checkpoint's commit log), then polls once
  and spools what it got to `<checkpointLocation>/sharegroup/batch-<seq>.arrow`; the offset is
  `{"group": ..., "seq": <seq>}`;
- tasks read slices of spool files, so a replayed batch (after a crash) reads the same records;
- on stop, a batch whose commit is in the checkpoint is ACCEPTed, any other is RELEASEd.

This is at-least-once: a batch that failed is replayed from the spool while the broker delivers
its released records again. Rows carry `deliveryCount`; de-duplicate on (topic, partition, offset).
Every batch must finish inside the group's record lock (`share.record.lock.duration.ms`, 30 s by
default): a batch that does not fails the query with a message saying so."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from confluent_kafka import AcknowledgeType, KafkaError, KafkaException, ShareConsumer
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from sharebroker.pipeline.kafka_client import TIMESTAMP_TYPES, arrow_schema, header_structs, spark_schema
from sharebroker.pipeline.options import OptionError, bool_option, client_settings, positive_int_option

SPOOL_DIR = "sharegroup"
DEFAULT_MAX_RECORDS = 10_000
DEFAULT_LOCK_MS = 30_000


class LockExpiredError(RuntimeError):
    """A micro-batch outlived the record lock: its records went back to the group."""


@dataclass(frozen=True)
class ShareOptions:
    client: Mapping[str, str]
    group_id: str
    topics: tuple[str, ...]
    checkpoint: Path
    max_records: int
    min_partitions: int | None
    include_headers: bool
    poll_timeout_ms: int
    lock_duration_ms: int | None  # None: ask the broker

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ShareOptions:
        opts = {k.lower(): v for k, v in options.items()}
        client = client_settings(options)
        group = client.pop("group.id", None)
        if not group:
            raise OptionError("Option 'kafka.group.id' must name the share group to read through")
        if "subscribepattern" in opts or "assign" in opts:
            raise OptionError("A share group subscribes to topic names: use the option 'subscribe'")
        topics = tuple(t.strip() for t in opts.get("subscribe", "").split(",") if t.strip())
        if not topics:
            raise OptionError("Option 'subscribe' must name the topics to read")
        checkpoint = opts.get("checkpointlocation")
        if not checkpoint:
            raise OptionError("Option 'checkpointLocation' must be the query's checkpoint location: the source "
                              "spools each micro-batch there, so that a replayed batch reads the same records")
        return cls(client=client, group_id=group, topics=topics, checkpoint=Path(checkpoint),
                   max_records=positive_int_option(options, "maxRecordsPerTrigger") or DEFAULT_MAX_RECORDS,
                   min_partitions=positive_int_option(options, "minPartitions"),
                   include_headers=bool_option(options, "includeHeaders", False),
                   poll_timeout_ms=positive_int_option(options, "pollTimeoutMs") or 1000,
                   lock_duration_ms=positive_int_option(options, "lockDurationMs"))


class ShareGroupDataSource(DataSource):
    """format("sharegroup"): streaming reads through a share group, at-least-once."""

    @classmethod
    def name(cls) -> str:
        return "sharegroup"

    def schema(self) -> str:
        return spark_schema(bool_option(self.options, "includeHeaders", False), "deliveryCount int")

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return ShareGroupStreamReader(ShareOptions.parse(self.options))


class SpoolSlice(InputPartition):
    def __init__(self, path: str, first_row: int, end_row: int) -> None:
        super().__init__((path, first_row, end_row))
        self.path, self.first_row, self.end_row = path, first_row, end_row


def _spool_schema(include_headers: bool) -> pa.Schema:
    return arrow_schema(include_headers, [("deliveryCount", pa.int32())])


def committed_batch_seqs(checkpoint: Path, group: str) -> set[int]:
    """The spool sequence numbers of the micro-batches in the checkpoint's commit log."""
    seqs: set[int] = set()
    commits = checkpoint / "commits"
    if not commits.is_dir():
        return seqs
    for entry in commits.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            lines = (checkpoint / "offsets" / entry.name).read_text().splitlines()
        except OSError:
            continue
        for line in lines[2:]:  # "v1", the batch metadata, then one offset per source
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict) and doc.get("group") == group and isinstance(doc.get("seq"), int):
                seqs.add(doc["seq"])
    return seqs


class ShareGroupStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: ShareOptions) -> None:
        self.opts = opts
        self.spool = opts.checkpoint / SPOOL_DIR
        self._consumer: ShareConsumer | None = None
        self._pending: tuple[int, list[tuple[str, int, int]], float] | None = None  # seq, records, polled at
        self._lock_ms: int | None = opts.lock_duration_ms
        self._target: dict[tuple[str, int], int] | None = None  # availableNow: log end offsets at the start

    # -- the member, in the streaming-source runner process

    @property
    def consumer(self) -> ShareConsumer:
        if self._consumer is None:
            conf: dict[str, object] = {"group.id": self.opts.group_id, "share.acknowledgement.mode": "explicit",
                                       "max.poll.records": self.opts.max_records}
            conf.update(self.opts.client)
            self._consumer = ShareConsumer(conf)
            self._consumer.subscribe(list(self.opts.topics))
        return self._consumer

    def _offset(self, seq: int) -> dict:
        return {"group": self.opts.group_id, "seq": seq}

    def initialOffset(self) -> dict:
        return self._offset(0)

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.opts.max_records)

    def prepareForTriggerAvailableNow(self) -> None:
        """availableNow on a queue: everything in the log now. The query ends once the group's
        start offset has passed today's log end on every partition (an empty poll alone proves
        nothing: a member that just joined has no assignment yet, and other members may hold
        records that come back when their locks expire)."""
        from sharebroker.pipeline.kafka_client import Planner

        planner = Planner(self.opts.client)
        counts = planner.partition_counts()
        self._target = planner.latest([(t, p) for t in self.opts.topics for p in range(counts.get(t, 0))])

    def _target_reached(self) -> bool:
        assert self._target is not None
        starts = share_group_start_offsets(self.opts.client["bootstrap.servers"], self.opts.group_id)
        return all(end == 0 or starts.get(tp, -1) >= end for tp, end in self._target.items())

    def _lock_duration_ms(self) -> int:
        if self._lock_ms is None:
            self._lock_ms = _group_lock_duration(self.opts.client, self.opts.group_id)
        return self._lock_ms

    def _settle(self, ack: AcknowledgeType) -> None:
        """Acknowledge the pending batch and drop its spool file."""
        if self._pending is None:
            return
        seq, records, polled_at = self._pending
        elapsed_ms = (time.monotonic() - polled_at) * 1000
        lock_ms = self._lock_duration_ms()
        if ack == AcknowledgeType.ACCEPT and elapsed_ms > lock_ms:
            self._pending = None
            raise LockExpiredError(
                f"Micro-batch {seq} of share group '{self.opts.group_id}' took {elapsed_ms:.0f} ms from acquisition to "
                f"commit, longer than the record lock duration of {lock_ms} ms: its {len(records)} records were "
                "released to the group and will be delivered again. Use a trigger interval and "
                "maxRecordsPerTrigger that let a batch finish inside the lock, or raise the group's "
                "share.record.lock.duration.ms (kafka-configs --entity-type groups).")
        for topic, partition, offset in records:
            self.consumer.acknowledge_offset(topic, partition, offset, ack)
        results = self.consumer.commit_sync()
        self._pending = None
        failed = {f"{tp.topic}-{tp.partition}": str(err) for tp, err in (results or {}).items() if err is not None}
        if failed and ack == AcknowledgeType.ACCEPT:
            raise LockExpiredError(
                f"The broker refused the acknowledgement of micro-batch {seq} of share group "
                f"'{self.opts.group_id}' ({failed}); the records' locks had expired or moved to another member. "
                f"They will be delivered again. A batch must finish inside the lock of {lock_ms} ms.")

    def _drop_spool(self, upto: int) -> None:
        """Spool files of committed batches (Spark never replays them), this run's or a dead one's."""
        for path in self.spool.glob("batch-*.arrow"):
            seq = path.stem.removeprefix("batch-")
            if seq.isdigit() and int(seq) <= upto:
                path.unlink(missing_ok=True)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        done = int(start.get("seq", 0))
        if self._pending is not None:
            if self._pending[0] > done:  # planned but not run yet: the same end again
                return self._offset(self._pending[0])
            self._settle(AcknowledgeType.ACCEPT)  # Spark committed it before asking for the next end
        self._drop_spool(done)
        # One poll is one batch: in explicit mode a whole poll is acknowledged before the next, and
        # max.poll.records (maxRecordsPerTrigger) bounds it.
        messages = self.consumer.poll(timeout=self.opts.poll_timeout_ms / 1000)
        if self._target is not None and not messages:
            deadline = time.monotonic() + max(60.0, 2 * self._lock_duration_ms() / 1000)
            while not messages and not self._target_reached() and time.monotonic() < deadline:
                messages = self.consumer.poll(timeout=self.opts.poll_timeout_ms / 1000)
        polled_at = time.monotonic()
        rows: dict[str, list] = {name: [] for name in _spool_schema(self.opts.include_headers).names}
        for m in messages:
            err = m.error()
            if err is not None:
                if err.code() in (KafkaError._PARTITION_EOF, KafkaError._TIMED_OUT):
                    continue
                raise KafkaException(err)
            ts_type, ts = m.timestamp()
            rows["key"].append(m.key())
            rows["value"].append(m.value())
            rows["topic"].append(m.topic())
            rows["partition"].append(m.partition())
            rows["offset"].append(m.offset())
            rows["timestamp"].append(ts * 1000)
            rows["timestampType"].append(TIMESTAMP_TYPES.get(ts_type, -1))
            rows["deliveryCount"].append(m.delivery_count())
            if self.opts.include_headers:
                rows["headers"].append(header_structs(m.headers()))
        if not rows["offset"]:
            return self._offset(done)
        seq = done + 1
        self._write_spool(seq, rows)
        self._pending = (seq, list(zip(rows["topic"], rows["partition"], rows["offset"])), polled_at)
        return self._offset(seq)

    def _write_spool(self, seq: int, rows: dict[str, list]) -> None:
        """The batch's records, durable before Spark records the batch's end in its offset log."""
        schema = _spool_schema(self.opts.include_headers)
        batch = pa.RecordBatch.from_pydict(rows, schema=schema)
        self.spool.mkdir(parents=True, exist_ok=True)
        path = self.spool / f"batch-{seq}.arrow"
        tmp = path.with_suffix(".tmp")
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            writer.write_batch(batch)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        out: list[InputPartition] = []
        for seq in range(int(start.get("seq", 0)) + 1, int(end.get("seq", 0)) + 1):
            path = self.spool / f"batch-{seq}.arrow"
            if not path.exists():
                raise FileNotFoundError(f"{path} is missing: a micro-batch of share group '{self.opts.group_id}' "
                                        "cannot be replayed without its spool file")
            with pa.memory_map(str(path)) as source:
                rows = pa.ipc.open_file(source).read_all().num_rows
            slices = max(1, min(rows, self.opts.min_partitions or 1))
            for i in range(slices):
                lo, hi = rows * i // slices, rows * (i + 1) // slices
                if hi > lo:
                    out.append(SpoolSlice(str(path), lo, hi))
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SpoolSlice)
        with pa.memory_map(partition.path) as source:
            table = pa.ipc.open_file(source).read_all()
        part = table.slice(partition.first_row, partition.end_row - partition.first_row)
        for batch in part.to_batches(max_chunksize=10_000):
            yield batch

    def commit(self, end: dict) -> None:
        done = int(end.get("seq", 0))
        if self._pending is not None and self._pending[0] <= done:
            self._settle(AcknowledgeType.ACCEPT)
        self._drop_spool(done)

    def stop(self) -> None:
        try:
            if self._pending is not None:
                seq = self._pending[0]
                committed = seq in committed_batch_seqs(self.opts.checkpoint, self.opts.group_id)
                self._settle(AcknowledgeType.ACCEPT if committed else AcknowledgeType.RELEASE)
                if committed:
                    self._drop_spool(seq)
        finally:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None


def share_group_start_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """The group's share-partition start offsets (DescribeShareGroupOffsets); -1 where a partition
    is not initialized."""
    from sharebroker.cli.wire import Client, KafkaApiError, code_of

    with Client(bootstrap, timeout_ms=10_000, client_id="sharebroker-pipeline") as client:
        _node, conn = client.coordinator_conn(group)
        resp = conn.request(90, {"groups": [{"group_id": group, "topics": None}]})
    (g,) = resp.groups
    if code_of(g.error_code):
        raise KafkaApiError(g.error_code, g.error_message, f"Cannot describe the offsets of share group '{group}': ")
    return {(t.topic_name, int(p.partition_index)): int(p.start_offset) if not code_of(p.error_code) else -1
            for t in g.topics for p in t.partitions}


def _group_lock_duration(client: Mapping[str, str], group_id: str) -> int:
    """The group's share.record.lock.duration.ms, else the broker's
    group.share.record.lock.duration.ms, else Kafka's default."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient(dict(client))
    group_type = getattr(ResourceType, "GROUP", None)
    if group_type is not None:
        try:
            res = ConfigResource(group_type, group_id)
            entries = admin.describe_configs([res], request_timeout=10)[res].result()
            entry = entries.get("share.record.lock.duration.ms")
            if entry is not None and entry.value:
                return int(entry.value)
        except (KafkaException, ValueError, TypeError):
            pass
    try:
        meta = admin.list_topics(timeout=10)
        res = ConfigResource(ResourceType.BROKER, str(next(iter(meta.brokers))))
        entries = admin.describe_configs([res], request_timeout=10)[res].result()
        entry = entries.get("group.share.record.lock.duration.ms")
        if entry is not None and entry.value:
            return int(entry.value)
    except (KafkaException, ValueError, TypeError, StopIteration):
        pass
    return DEFAULT_LOCK_MS
