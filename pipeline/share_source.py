"""`sharegroup`: a streaming source that reads a topic through a share group (KIP-932), so that
tasks can outnumber partitions and several queries (or other consumers) can share one queue.

Share groups hand out records under a time-limited lock to the member that polled them, and only
that member can acknowledge them; Spark's tasks are short-lived and its batch commit happens on the
driver after they end. So the one member is the query's streaming-source runner (one long-lived
process per query run, where latestOffset/partitions/commit/stop are called):

- `latestOffset` first ACCEPTs the records of the batch Spark has committed (Spark asks for the
  next batch's end only once the previous batch is in the checkpoint's commit log), then fetches
  once and spools what it got to `<checkpointLocation>/sharegroup/batch-<seq>.arrow`; the offset is
  `{"group": ..., "seq": <seq>}`;
- from that fetch until the ACCEPT, a timer renews the batch's locks (RENEW, KIP-1222) every third
  of the lock, however long Spark takes to plan, run and commit it (share_member.py);
- tasks read slices of spool files, so a replayed batch (after a crash) reads the same records;
- on stop, a batch whose commit is in the checkpoint is ACCEPTed, any other is RELEASEd.

This is at-least-once: a batch that failed is replayed from the spool while the broker delivers
its released records again. Rows carry `deliveryCount`; de-duplicate on (topic, partition, offset).
Where locks cannot be renewed (`share.renew.acknowledge.enable=false`, or a broker without
KIP-1222) the source says so when it starts, and a batch committed after its records' lock ran out
fails the query with a message naming the batch, how long it took and the settings."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from sharebroker.cli.share_consumer import ACCEPT, RELEASE
from sharebroker.pipeline.kafka_client import arrow_schema, spark_schema
from sharebroker.pipeline.options import OptionError, bool_option, client_settings, positive_int_option
from sharebroker.pipeline.share_member import LOCK_SETTING, HeldBatch, SourceMember

SPOOL_DIR = "sharegroup"
DEFAULT_MAX_RECORDS = 10_000
# The kafka.* settings the member takes: it is sharebroker's wire client, not librdkafka.
MEMBER_SETTINGS = ("bootstrap.servers", "client.id", "security.protocol")


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
        for key, value in client.items():
            if key not in MEMBER_SETTINGS or (key == "security.protocol" and value.upper() != "PLAINTEXT"):
                raise OptionError(
                    f"Kafka option 'kafka.{key}={value}' is not supported by the share-group source: its member is "
                    "sharebroker's own wire client, which renews record locks (confluent-kafka's ShareConsumer "
                    "cannot), and it takes only kafka.bootstrap.servers, kafka.group.id and kafka.client.id, over "
                    "PLAINTEXT")
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


def _batch_seq(checkpoint: Path, batch_id: str, group: str) -> int | None:
    """The spool sequence number that Spark batch `batch_id`'s offset-log entry ends at."""
    try:
        lines = (checkpoint / "offsets" / batch_id).read_text().splitlines()
    except OSError:
        return None
    for line in lines[2:]:  # "v1", the batch metadata, then one offset per source
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and doc.get("group") == group and isinstance(doc.get("seq"), int):
            return int(doc["seq"])
    return None


def committed_batch_seqs(checkpoint: Path, group: str) -> set[int]:
    """The spool sequence numbers of the micro-batches in the checkpoint's commit log."""
    commits = checkpoint / "commits"
    if not commits.is_dir():
        return set()
    seqs = (_batch_seq(checkpoint, entry.name, group) for entry in commits.iterdir() if entry.name.isdigit())
    return {seq for seq in seqs if seq is not None}


def spark_batch_id(checkpoint: Path, group: str, seq: int) -> int | None:
    """The Spark batch that ends at spool batch `seq`, from the checkpoint's offset log."""
    offsets = checkpoint / "offsets"
    if not offsets.is_dir():
        return None
    ids = sorted((int(e.name) for e in offsets.iterdir() if e.name.isdigit()), reverse=True)
    return next((i for i in ids if _batch_seq(checkpoint, str(i), group) == seq), None)


class ShareGroupStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: ShareOptions) -> None:
        self.opts = opts
        self.spool = opts.checkpoint / SPOOL_DIR
        self._member: SourceMember | None = None
        self._target: dict[tuple[str, int], int] | None = None  # availableNow: log end offsets at the start

    # -- the member, in the streaming-source runner process

    @property
    def member(self) -> SourceMember:
        if self._member is None:
            member = SourceMember(self.opts.client["bootstrap.servers"], self.opts.group_id, self.opts.topics,
                                  max_records=self.opts.max_records, lock_ms=self.opts.lock_duration_ms,
                                  client_id=self.opts.client.get("client.id", "sharebroker-pipeline"))
            member.start()
            self._member = member
        return self._member

    @property
    def _held(self) -> HeldBatch | None:
        return self._member.held if self._member is not None else None

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

    def _settle(self, ack: int) -> None:
        """Acknowledge the held batch (which stops renewing its locks)."""
        if self._member is None:
            return
        held, refused = self._member.settle(ack)
        if held is not None and refused and ack == ACCEPT:
            raise LockExpiredError(self._refusal(held, refused, time.monotonic()))

    def _refusal(self, held: HeldBatch, refused: Mapping[tuple[str, int], str], now: float) -> str:
        """What ran long (or what else lost the records), and the settings involved."""
        member = self._member
        assert member is not None
        batch = spark_batch_id(self.opts.checkpoint, self.opts.group_id, held.seq)
        which = f"micro-batch {batch}" if batch is not None else f"the micro-batch of spool batch {held.seq}"
        since_lock = now - held.locked_since
        why = "; ".join(f"{t}-{p}: {text.rstrip('.')}" for (t, p), text in sorted(refused.items()))
        lines = [f"The broker refused the acknowledgement of {which} of share group '{self.opts.group_id}' "
                 f"({held.count} records, spool batch {held.seq}): {why}.",
                 f"Spark committed that batch {now - held.acquired_at:.1f} s after its records were acquired; "
                 f"the record lock is {member.lock_ms} ms ({LOCK_SETTING})."]
        if member.cannot_renew:
            lines.append(f"The locks could not be renewed: {member.cannot_renew}. {member.renewal_advice()}")
        elif held.failures:
            lines.append(f"Renewing the locks failed: {'; '.join(held.failures[:3])}.")
        elif since_lock * 1000 > member.lock_ms:
            lines.append(f"They were last renewed {since_lock:.1f} s before the commit ({held.renewals} renewals): "
                         "the source's renewal timer fell behind (an overloaded driver?).")
        else:
            lines.append("Their locks had not run out: the member lost them (its session or connection ended, or "
                         "the group fenced it).")
        lines.append("Those records go back to the group and will be delivered again: de-duplicate on "
                     "(topic, partition, offset).")
        return " ".join(lines)

    def _drop_spool(self, upto: int) -> None:
        """Spool files of committed batches (Spark never replays them), this run's or a dead one's."""
        for path in self.spool.glob("batch-*.arrow"):
            seq = path.stem.removeprefix("batch-")
            if seq.isdigit() and int(seq) <= upto:
                path.unlink(missing_ok=True)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        done = int(start.get("seq", 0))
        held = self._held
        if held is not None:
            if held.seq > done:  # planned but not run yet: the same end again
                return self._offset(held.seq)
            self._settle(ACCEPT)  # Spark committed it before asking for the next end
        self._drop_spool(done)
        # One ShareFetch is one batch: its records' locks start when it is sent, and the member
        # renews them from then until the batch is acknowledged.
        member = self.member
        records = member.poll(self.opts.poll_timeout_ms)
        if self._target is not None and not records:
            deadline = time.monotonic() + max(60.0, 2 * member.lock_ms / 1000)
            while not records and not self._target_reached() and time.monotonic() < deadline:
                records = member.poll(self.opts.poll_timeout_ms)
        if not records:
            return self._offset(done)
        acquired_at = member.acquired_at
        rows: dict[str, list] = {name: [] for name in _spool_schema(self.opts.include_headers).names}
        for r in records:
            rows["key"].append(r.key)
            rows["value"].append(r.value)
            rows["topic"].append(r.topic)
            rows["partition"].append(r.partition)
            rows["offset"].append(r.offset)
            rows["timestamp"].append(r.timestamp * 1000)
            rows["timestampType"].append(r.timestamp_type)
            rows["deliveryCount"].append(r.delivery_count)
            if self.opts.include_headers:
                rows["headers"].append([{"key": k, "value": v} for k, v in r.headers])
        seq = done + 1
        member.hold(seq, records, acquired_at)  # renewed from here on, while the spool is written too
        self._write_spool(seq, rows)
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
        held = self._held
        if held is not None and held.seq <= done:
            self._settle(ACCEPT)
        self._drop_spool(done)

    def stop(self) -> None:
        try:
            held = self._held
            if held is not None:
                committed = held.seq in committed_batch_seqs(self.opts.checkpoint, self.opts.group_id)
                self._settle(ACCEPT if committed else RELEASE)
                if committed:
                    self._drop_spool(held.seq)
        finally:
            if self._member is not None:
                self._member.close()
                self._member = None


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
