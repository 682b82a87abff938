"""`sharebroker pipeline report`: queue analytics over a broker data directory, read from its
files (pipeline/analytics.py parses them). One Spark job reads every segment exactly once: a
Python data source (pipeline/report_scan.py) whose input partitions are groups of segments of
about equal bytes, a few per core; each task decodes its records into Arrow columns with numpy
(pipeline/columnar.py), writes them itself as `records/`, and hands the driver the small tables
below as Arrow. The driver then replays the share-group state and writes the rest with pyarrow:
after the scan, nothing is read twice and no Spark job runs again. Local paths: local[*] on the
broker host, or a copy of the directory on shared storage. Tables, as Parquet under the output
directory:

- `records/` (by topic: `records/topic=<topic>/`, a file per topic and task): every record of the
  user topics, control batches skipped;
- `segments/`: per segment its offsets, counts, time span, CRC errors and torn tail;
- `share_state/` and `share_state_ranges/`: every `__share_group_state` record (start offset
  over time) and the offset ranges it carries (delivery state and count);
- `consumer_offsets/`: classic groups' offset commits;
- `archived/`: the archived ("poison") records joined back to `records/`;
- `throughput/`: records per topic and time bucket, by record timestamp.

From those it computes lag per share group and partition (log end - start offset, the state
replayed as the broker replays it), lag per classic group, the delivery-count histogram, the
archived records with a payload preview, and throughput over time, and writes `report.md` with
`throughput.png`, `delivery_counts.png` and `lag.png`."""

from __future__ import annotations

import heapq
import shutil
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from sharebroker.pipeline.analytics import (
    BATCH_FIELDS,
    INTERNAL_TOPICS,
    OFFSET_COLUMNS,
    SHARE_STATE_TOPIC,
    RANGE_COLUMNS,
    RECORD_COLUMNS,
    STATE_COLUMNS,
    Segment,
    committed_offsets,
    consumption_begin,
    delivery_count_histogram,
    group_start_policy,
    list_segments,
    log_start_offsets,
    replay_state,
    split_segments,
    state_counts,
    summarize_segment,
    topic_names,
)
from sharebroker.pipeline.report_source import ScanTasks
from sharebroker.pipeline.report_scan import (
    BATCH_TYPE,
    Archived,
    OFFSETS_SCHEMA,
    RECORDS_SCHEMA,
    SEGMENTS_SCHEMA,
    STATE_SCHEMA,
    TABLES,
    ipc_table,
    read_share_state,
    summary_row,
)

PREVIEW_BYTES = 64
TASKS_PER_CORE = 3  # input partitions per core for the segment scan
SEGMENT_COST_BYTES = 256 * 1024  # what opening a segment costs, in bytes read, when balancing tasks
TOP_LINES = 8  # lines of the throughput chart and bar groups of the delivery-count chart (the rest summed)
TOP = 15  # rows of each "top" table of the summary, and bars or lines of each chart (the rest aggregated)
LONG_TABLE = 25  # tables longer than this go into a collapsed <details> section
ARCHIVED_LISTED = 1000  # archived records kept in the summary and report.md; all are in archived/
SERIES_ROWS = 120  # throughput buckets listed in report.md; all are in throughput/

# What `sharebroker pipeline report` starts its Spark session with (a --conf overrides it): the
# driver JVM with the client compiler only and the serial collector. The report is one short job,
# and C2's compilations cost more CPU than they save in it (measured: the JVM's CPU for a report
# halves, 8.8 -> 4.3 s on the first, 0.8-1.1 -> 0.5 s on later ones).
REPORT_CONF = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}

# The parsers' column dicts go into these schemas by name: keep the two in step.
assert tuple(RECORDS_SCHEMA.names) == RECORD_COLUMNS and tuple(STATE_SCHEMA.names) == STATE_COLUMNS
assert tuple(OFFSETS_SCHEMA.names) == OFFSET_COLUMNS and tuple(BATCH_TYPE.names) == BATCH_FIELDS

THROUGHPUT_SCHEMA = pa.schema([("topic", pa.string()), ("bucket_start", pa.int64()), ("count", pa.int64())])

TopicPartition = tuple[str, int]
GroupPartition = tuple[str, str, int]  # group, topic, partition


class ArchivedRecord(NamedTuple):
    group: str
    topic: str
    partition: int
    offset: int
    delivery_count: int
    timestamp: int
    preview: str  # the first PREVIEW_BYTES of the value, printable


@dataclass
class ReportSummary:
    """What report.md shows, as numbers."""
    segments: int = 0
    log_bytes: int = 0  # of every segment
    records: dict[TopicPartition, int] = field(default_factory=dict)  # user topics only
    log_start: dict[TopicPartition, int] = field(default_factory=dict)
    log_end: dict[TopicPartition, int] = field(default_factory=dict)  # last offset + 1, control batches included
    torn_segments: list[tuple[str, str]] = field(default_factory=list)  # (path, why the walk stopped)
    crc_errors: dict[str, int] = field(default_factory=dict)  # path -> whole batches skipped
    share_start: dict[GroupPartition, int] = field(default_factory=dict)
    share_lag: dict[GroupPartition, int] = field(default_factory=dict)  # log end - start offset
    # Kafka's DescribeShareGroupOffsets lag: also minus the records completed above the start offset.
    share_remaining: dict[GroupPartition, int] = field(default_factory=dict)
    share_states: dict[GroupPartition, dict[str, int]] = field(default_factory=dict)  # at/after the start
    delivery_counts: dict[str, dict[int, int]] = field(default_factory=dict)  # group -> count -> records
    archived: list[ArchivedRecord] = field(default_factory=list)  # in the log, first ARCHIVED_LISTED
    archived_total: int = 0  # archived offsets the state recorded, inside the log's offsets
    classic_committed: dict[GroupPartition, int] = field(default_factory=dict)
    classic_lag: dict[GroupPartition, int] = field(default_factory=dict)  # log end - committed offset
    throughput_bucket_s: int = 1
    throughput: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # topic -> (bucket start s, records)
    # The scan job: its wall time, and per task its segments, bytes, start (epoch s), wall and CPU s.
    scan_s: float = 0.0
    # The warm-up job (_WarmUp): its wall time, and how long the scan still waited for it.
    warm_up_s: float = 0.0
    warm_up_wait_s: float = 0.0
    scan_tasks: list[dict[str, Any]] = field(default_factory=list)


def pack_tasks(segments: Sequence[Segment], tasks: int) -> list[list[Segment]]:
    """The segments in `tasks` groups of about equal bytes: a Spark task and its Python worker
    cost tens of milliseconds, so hundreds of small segments each in a task of its own spent more
    time starting tasks than reading logs. A topic's segments stay in one task unless the topic is
    bigger than a task's share (each task then writes few topics' files); the largest go first,
    each into the lightest task. Empty groups are dropped."""
    tasks = max(1, min(len(segments), tasks))
    share = sum(s.size + SEGMENT_COST_BYTES for s in segments) / tasks
    by_topic: dict[str, list[Segment]] = defaultdict(list)
    for seg in segments:
        by_topic[seg.topic].append(seg)
    units: list[list[Segment]] = []
    for segs in by_topic.values():
        if sum(s.size + SEGMENT_COST_BYTES for s in segs) > share:
            units.extend([s] for s in segs)
        else:
            units.append(segs)
    bins: list[list[Segment]] = [[] for _ in range(tasks)]
    heap = [(0, i) for i in range(tasks)]
    for unit in sorted(units, key=lambda u: -sum(s.size for s in u)):
        size, i = heapq.heappop(heap)
        bins[i].extend(unit)
        heapq.heappush(heap, (size + sum(s.size + SEGMENT_COST_BYTES for s in unit), i))
    return [b for b in bins if b]


def _write_table(table: pa.Table, directory: Path) -> None:
    """A small table as one Parquet file in `directory`, replacing what was there."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    pq.write_table(table, directory / "part-00000.parquet")


def _scan(spark: SparkSession, segments: list[Segment], output_dir: Path, archived: Archived) -> dict[str, pa.Table]:
    """The one Spark job: every segment read once, records/ written by the tasks, the small tables
    (report_scan.TABLES) back to the driver."""
    tasks = pack_tasks(segments, spark.sparkContext.defaultParallelism * TASKS_PER_CORE)
    rows = _run_scan(spark, tasks, output_dir, archived) if tasks else []
    parts: dict[str, list[pa.Table]] = defaultdict(list)
    for name, payload in rows:
        parts[name].append(ipc_table(payload))
    return {name: pa.concat_tables(parts[name]) if parts[name] else schema.empty_table()
            for name, schema in TABLES.items()}


def _run_scan(spark: SparkSession, tasks: Sequence[Sequence[Segment]], output_dir: Path,
              archived: Archived) -> list[tuple[str, bytes]]:
    """One partition per task (a group of segments); the (table name, Arrow IPC) pairs they return."""
    plan = [(i, [[s.path, s.topic, s.partition, s.base_offset, s.size, s.topic_id] for s in t])
            for i, t in enumerate(tasks)]
    scan = ScanTasks(str(output_dir), {key: [tuple(r) for r in ranges] for key, ranges in archived.items()})
    return spark.sparkContext.parallelize(plan, len(plan)).mapPartitions(scan).collect()


class _WarmUp(threading.Thread):
    """The scan's job run once over no segments, one empty task per core, while the driver lists
    the directory and replays `__share_group_state`. A session's first Python job costs seconds the
    later ones do not: the JVM loading and compiling its classes, Spark starting the executors'
    Python workers, each worker importing pyarrow, numpy and the scan. Paid here, in parallel with
    the driver's own work, the scan then finds them running (`spark.python.worker.reuse`, Spark's
    default) and its tasks start at once. Its error, if any, is left to the scan to raise with the
    segments in hand."""

    def __init__(self, spark: SparkSession, output_dir: Path) -> None:
        super().__init__(name="spark-warm-up", daemon=True)
        self.spark, self.output_dir = spark, output_dir
        self.seconds = 0.0

    def run(self) -> None:
        started = time.perf_counter()
        try:
            _run_scan(self.spark, [[] for _ in range(self.spark.sparkContext.defaultParallelism)], self.output_dir, {})
        except Exception:  # noqa: BLE001 - the scan itself fails the same way, and says so
            pass
        finally:
            self.seconds = time.perf_counter() - started


def preview(payload: bytes | None) -> str:
    """The first PREVIEW_BYTES of a payload, printable ASCII: other bytes as \\xNN, '…' when cut."""
    if payload is None:
        return "null"
    head = payload[:PREVIEW_BYTES]
    # Backslash and backtick escaped too: the preview goes into a Markdown code span.
    text = "".join(chr(b) if 32 <= b < 127 and b not in (0x5C, 0x60) else f"\\x{b:02x}" for b in head)
    return text + ("…" if len(payload) > PREVIEW_BYTES else "")


def _bucket_seconds(first_ms: int, last_ms: int) -> int:
    """Seconds for up to a quarter of an hour of records, minutes up to a few days, then hours:
    a chart of a few hundred to a thousand points."""
    span_s = max(0, last_ms - first_ms) / 1000
    return 1 if span_s <= 900 else 60 if span_s <= 3 * 86400 else 3600


def run_report(spark: SparkSession, data_dir: Path, output_dir: Path, *,
               progress: Callable[[str], None] | None = None,
               throughput_bucket_s: int | None = None, warm_up: bool = True) -> ReportSummary:
    """Parse `data_dir` into Parquet tables under `output_dir`, compute the queue metrics and write
    report.md with its charts. Nothing is written to `data_dir`; a live broker's may be read.
    `throughput_bucket_s` fixes the throughput bucket (default: from the records' time span).
    `warm_up=False` skips the warm-up job (_WarmUp): for measuring what it saves."""
    say = progress or (lambda _text: None)
    data_dir, output_dir = Path(data_dir).resolve(), Path(output_dir).resolve()
    output_dir.mkdir(parents=True, exist_ok=True)
    warm = _WarmUp(spark, output_dir)  # Spark's first Python job's start-up, meanwhile
    # Without worker reuse the warm-up's workers exit with its tasks: it would only cost.
    warm_up = warm_up and spark.sparkContext.getConf().get("spark.python.worker.reuse", "true").lower() == "true"
    if warm_up:
        warm.start()
    segments = list_segments(data_dir)
    kinds = split_segments(segments)
    names = topic_names(data_dir, segments)
    policies = group_start_policy(data_dir)
    starts = log_start_offsets(data_dir, segments)
    summary = ReportSummary(segments=len(segments), log_bytes=sum(s.size for s in segments))
    say(f"{len(kinds.user)} segments of {len({(s.topic, s.partition) for s in kinds.user})} partitions, "
        f"{len(kinds.share_state)} __share_group_state and {len(kinds.consumer_offsets)} __consumer_offsets segments")
    # matplotlib takes a second or two to import: done meanwhile, while the driver waits for Spark.
    charts_ready = threading.Thread(target=_import_pyplot, daemon=True)
    charts_ready.start()

    # -- share-group state, replayed first: it names the archived records the scan picks out --
    say("reading __share_group_state -> share_state/, share_state_ranges/; replaying it")
    state, state_summaries = read_share_state([s for s in kinds.share_state if s.size > 0], names)
    _write_table(state.drop_columns(["batches"]).append_column(
        pa.field("ranges", pa.int32()), pc.list_value_length(state.column("batches")).cast(pa.int32())),
        output_dir / "share_state")
    keys = list(RANGE_COLUMNS[:6])  # what identifies a range's record: group .. log offset
    per_range = pc.list_parent_indices(state.column("batches"))
    ranges = pc.list_flatten(state.column("batches"))
    _write_table(pa.Table.from_arrays(
        [state.column(k).take(per_range) for k in keys] + [pc.struct_field(ranges, f) for f in BATCH_FIELDS],
        names=list(RANGE_COLUMNS)), output_dir / "share_state_ranges")
    replayed = sorted(replay_state(state.to_pylist()).items(), key=lambda kv: str(kv[0]))
    # A deleted group or topic has no lag and nothing to deliver any more.
    live = [(group, st.topic, partition, st) for (group, _tid, partition), st in replayed
            if not st.deleted and st.topic is not None]
    archived: dict[tuple[str, int], list[tuple[int, int, str, int]]] = defaultdict(list)
    for group, topic, partition, st in live:
        archived[(topic, partition)] += [(f, l_, group, count) for f, l_, count in st.archived]

    # -- the one pass over the other segments ------------------------------------------------
    say("reading every other segment once -> records/ (by topic), segments/, consumer_offsets/, archived/")
    shutil.rmtree(output_dir / "records", ignore_errors=True)
    # Empty segments (every internal partition has one) hold nothing: no task for them.
    waited = time.perf_counter()
    if warm_up:
        warm.join()  # its Python workers are then idle: the scan's tasks take them
    scan_start = time.perf_counter()
    summary.warm_up_s, summary.warm_up_wait_s = warm.seconds, scan_start - waited
    tables = _scan(spark, [s for s in segments if s.size > 0 and s.topic != SHARE_STATE_TOPIC], output_dir,
                   archived)
    summary.scan_s = time.perf_counter() - scan_start
    summary.scan_tasks = tables["tasks"].sort_by("task").to_pylist()
    say("writing segments/, consumer_offsets/, archived/; lag, delivery counts")
    seg_table = pa.concat_tables([tables["segments"], pa.Table.from_pylist(
        state_summaries + [summary_row(s, summarize_segment(s)) for s in segments if s.size == 0], SEGMENTS_SCHEMA)])
    _write_table(seg_table, output_dir / "segments")
    _write_table(tables["consumer_offsets"], output_dir / "consumer_offsets")
    first_ts = last_ts = -1
    for r in sorted(seg_table.to_pylist(), key=lambda x: (x["topic"], x["partition"], x["base_offset"])):
        if r["torn"]:
            summary.torn_segments.append((r["path"], r["torn"]))
        if r["crc_errors"]:
            summary.crc_errors[r["path"]] = r["crc_errors"]
        if r["topic"] not in INTERNAL_TOPICS:
            tp = (r["topic"], r["partition"])
            summary.records[tp] = summary.records.get(tp, 0) + r["records"]
            summary.log_end[tp] = max(summary.log_end.get(tp, 0), r["next_offset"])
            summary.log_start[tp] = starts[tp]
            if r["first_timestamp"] >= 0:
                first_ts = r["first_timestamp"] if first_ts < 0 else min(first_ts, r["first_timestamp"])
                last_ts = max(last_ts, r["last_timestamp"])

    histogram: dict[str, Counter[int]] = defaultdict(Counter)
    for group, topic, partition, st in live:
        if (topic, partition) not in summary.log_end:
            continue  # the topic is gone
        tp, gp = (topic, partition), (group, topic, partition)
        end, log_start = summary.log_end[tp], summary.log_start[tp]
        if st.start_offset >= 0:
            summary.share_start[gp] = st.start_offset
            summary.share_lag[gp] = max(0, end - st.start_offset)
            if st.delivery_complete_count >= 0:
                summary.share_remaining[gp] = max(0, end - st.start_offset - st.delivery_complete_count)
            summary.share_states[gp] = state_counts(st, end)
        begin = consumption_begin(st, policies.get(group, "latest"), log_start)
        histogram[group].update(delivery_count_histogram(st, begin, end))
        for f, l_, _count in st.archived:
            lo, hi = max(f, log_start), min(l_, end - 1)
            summary.archived_total += max(0, hi - lo + 1)
    summary.delivery_counts = {g: dict(sorted(c.items())) for g, c in sorted(histogram.items()) if c}

    # The scan's archived records, within the log (DeleteRecords may have moved its start past some).
    poison = tables["archived"]
    if poison.num_rows:
        log_start_of = pa.array([summary.log_start.get((t, p), 0) for t, p in
                                 zip(poison.column("topic").to_pylist(), poison.column("partition").to_pylist())])
        poison = poison.filter(pc.greater_equal(poison.column("offset"), log_start_of))
    poison = poison.sort_by([("group", "ascending"), ("topic", "ascending"), ("partition", "ascending"),
                             ("offset", "ascending")])
    _write_table(poison, output_dir / "archived")
    summary.archived = [ArchivedRecord(r["group"], r["topic"], r["partition"], r["offset"], r["delivery_count"],
                                       r["timestamp"], preview(r["value"]))
                        for r in poison.slice(0, ARCHIVED_LISTED).to_pylist()]

    # -- classic groups ------------------------------------------------------------------------
    for gp, off in sorted(committed_offsets(tables["consumer_offsets"].to_pylist()).items()):
        if (gp[1], gp[2]) in summary.log_end:  # a commit for a topic that is gone has no lag
            summary.classic_committed[gp] = off
            summary.classic_lag[gp] = max(0, summary.log_end[(gp[1], gp[2])] - off)

    # -- throughput ----------------------------------------------------------------------------
    bucket = throughput_bucket_s or _bucket_seconds(first_ts, last_ts)
    summary.throughput_bucket_s = bucket
    say(f"throughput per {bucket} s -> throughput/")
    seconds = tables["seconds"]
    buckets = pa.table({"topic": seconds.column("topic"),
                        "bucket_start": pc.multiply(pc.divide(seconds.column("second"), bucket), bucket),
                        "count": seconds.column("count")})
    throughput = buckets.group_by(["topic", "bucket_start"]).aggregate([("count", "sum")]) \
        .rename_columns(["topic", "bucket_start", "count"]).sort_by([("topic", "ascending"), ("bucket_start", "ascending")])
    _write_table(throughput.cast(THROUGHPUT_SCHEMA), output_dir / "throughput")
    series: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for topic, start, count in zip(*(throughput.column(c).to_pylist() for c in ("topic", "bucket_start", "count"))):
        series[topic].append((start, count))
    summary.throughput = dict(sorted(series.items()))

    say("writing report.md, charts, share_lag/ and classic_lag/")
    _lag_tables(summary, output_dir)
    charts_ready.join()
    _charts(summary, output_dir)
    (output_dir / "report.md").write_text(_markdown(summary, data_dir))
    return summary


def _import_pyplot() -> None:
    import matplotlib
    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot  # noqa: F401


# -- report.md ------------------------------------------------------------------------------------


def _table(header: list[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _folded(title: str, body: str, rows: int) -> str:
    """A long table in a collapsed <details> section (GitHub and most Markdown viewers fold it);
    a short one as it is."""
    if rows <= LONG_TABLE:
        return body
    return f"<details><summary>{title} ({rows} rows)</summary>\n\n{body}\n</details>\n"


def _utc(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _top(items: Mapping[Any, int], n: int = TOP) -> list[tuple[Any, int]]:
    """The n largest non-zero values, largest first (ties by key)."""
    return sorted(((k, v) for k, v in items.items() if v > 0), key=lambda kv: (-kv[1], kv[0]))[:n]


def _redelivered(s: ReportSummary) -> dict[str, int]:
    """Per share group, records delivered more than once (the delivery-count histogram above 1)."""
    return {g: sum(n for c, n in counts.items() if c > 1) for g, counts in s.delivery_counts.items()}


def _summary_section(s: ReportSummary) -> str:
    share_groups = {g for g, _, _ in s.share_lag}
    classic_groups = {g for g, _, _ in s.classic_lag}
    group_lag: Counter[str] = Counter()
    for (g, _t, _p), n in s.share_remaining.items():
        group_lag[g] += n
    archived_by_group: Counter[str] = Counter()
    for (g, _t, _p), states in s.share_states.items():
        archived_by_group[g] += states.get("archived", 0)
    redelivered = _redelivered(s)
    out = [f"## Summary\n\n{len(s.log_end)} partitions of {len({t for t, _ in s.log_end})} user topics, "
           f"{sum(s.records.values())} records in {s.segments} segments; {len(share_groups)} share groups, "
           f"{len(classic_groups)} classic groups with committed offsets; share-group lag "
           f"{sum(s.share_remaining.values())} records in all, {sum(redelivered.values())} records redelivered, "
           f"{s.archived_total} archived. The largest of each below (at most {TOP} rows; the full tables follow, "
           "and every table is in the Parquet output).\n"]
    if s.torn_segments or s.crc_errors:
        out.append(f"{len(s.torn_segments)} segments end in a torn batch, {sum(s.crc_errors.values())} batches "
                   "failed their CRC (see Topics).\n")
    top_parts = _top(s.share_remaining)
    if top_parts:
        out.append("### Share partitions with the most lag\n\n" + _table(
            ["group", "topic", "partition", "remaining", "start offset"],
            [[g, t, p, n, s.share_start[(g, t, p)]] for (g, t, p), n in top_parts]))
    top_groups = _top(group_lag)
    if top_groups:
        out.append("### Share groups with the most lag\n\n" + _table(
            ["group", "remaining (all partitions)"], [[g, n] for g, n in top_groups]))
    top_redelivered = _top(redelivered)
    if top_redelivered:
        out.append("### Share groups with the most redeliveries\n\n" + _table(
            ["group", "records delivered more than once", "highest delivery count"],
            [[g, n, max(s.delivery_counts[g])] for g, n in top_redelivered]))
    top_archived = _top(archived_by_group)
    if top_archived:
        out.append("### Share groups with the most archived records\n\n" + _table(
            ["group", "archived at/after the start offset"], [[g, n] for g, n in top_archived]))
    top_classic = _top(s.classic_lag)
    if top_classic:
        out.append("### Classic groups' partitions with the most lag\n\n" + _table(
            ["group", "topic", "partition", "lag"], [[g, t, p, n] for (g, t, p), n in top_classic]))
    return "\n".join(out)


def _markdown(s: ReportSummary, data_dir: Path) -> str:
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = [f"# Queue report: {data_dir}\n\nMade {when} by `sharebroker pipeline report` from the files "
           f"themselves ({s.segments} segments). The tables are next to this file as Parquet "
           "(`records/`, `segments/`, `share_state/`, `share_state_ranges/`, `share_lag/`, `consumer_offsets/`, "
           "`classic_lag/`, `archived/`, `throughput/`).\n", _summary_section(s)]
    topic_rows = [[t, p, s.records[(t, p)], s.log_start[(t, p)], s.log_end[(t, p)]] for t, p in sorted(s.log_end)]
    out.append("## Topics\n\n" + (_folded("All partitions", _table(
        ["topic", "partition", "records", "log start offset", "log end offset"], topic_rows), len(topic_rows))
        if s.log_end else "No user topics.\n"))
    if s.torn_segments:
        out.append(_folded("Segments ending in a torn batch", "Segments ending in a torn batch (a live broker's "
                           "active segment, or a crash); read up to the last whole batch:\n\n"
                           + "".join(f"- `{p}`: {why}\n" for p, why in s.torn_segments), len(s.torn_segments)))
    if s.crc_errors:
        out.append(_folded("Batches skipped for a CRC mismatch", "Whole batches skipped for a CRC mismatch:\n\n"
                           + "".join(f"- `{p}`: {n}\n" for p, n in sorted(s.crc_errors.items())), len(s.crc_errors)))

    lag_rows = [[g, t, p, s.share_start[(g, t, p)], lag, s.share_remaining.get((g, t, p), "?"),
                 *(s.share_states[(g, t, p)].get(k, 0) for k in ("available", "acknowledged", "archived", "unrecorded"))]
                for (g, t, p), lag in sorted(s.share_lag.items())]
    out.append("## Share groups: lag\n\nLag = log end offset - share-partition start offset. Remaining = lag - "
               "records already completed above the start offset (Kafka's DescribeShareGroupOffsets lag). The "
               "state columns count records at/after the start offset by their persisted state; unrecorded = "
               "not delivered yet, or acquired when the broker stopped. The chart shows the partitions with the "
               f"most lag ({TOP} at most, the rest summed in one bar).\n\n![lag](lag.png)\n\n"
               + (_folded("Every share partition", _table(
                   ["group", "topic", "partition", "start offset", "lag", "remaining", "available",
                    "acknowledged", "archived", "unrecorded"], lag_rows), len(lag_rows))
                  if s.share_lag else "No share groups.\n"))
    hist_rows = [[g, c, n] for g, counts in s.delivery_counts.items() for c, n in counts.items()]
    out.append("## Share groups: delivery counts\n\nRecords by the highest delivery count the share-group state "
               "recorded for them. Records completed in order below the start offset count once: the state "
               "keeps no ranges below the start offset, nor acquisitions (a record redelivered and then "
               "accepted by the write that moved the start offset past it shows its last persisted count).\n\n"
               "![delivery counts](delivery_counts.png)\n\n"
               + (_folded("Every group", _table(["group", "delivery count", "records"], hist_rows), len(hist_rows))
                  if s.delivery_counts else "None.\n"))
    archived_rows = [[a.group, a.topic, a.partition, a.offset, a.delivery_count,
                      _utc(a.timestamp // 1000) if a.timestamp >= 0 else "-", f"`{a.preview}`"] for a in s.archived]
    out.append(f"## Archived (poison) records\n\n{s.archived_total} archived offsets in the logs"
               + (f"; the first {len(s.archived)} found in records/ below (all in archived/)" if s.archived else "")
               + ".\n\n"
               + (_folded("Archived records", _table(
                   ["group", "topic", "partition", "offset", "delivery count", "timestamp", "payload preview"],
                   archived_rows), len(archived_rows)) if s.archived else ""))
    classic_rows = [[g, t, p, s.classic_committed[(g, t, p)], lag] for (g, t, p), lag in sorted(s.classic_lag.items())]
    out.append("## Classic consumer groups: lag\n\n"
               + (_folded("Every committed partition", _table(["group", "topic", "partition", "committed offset", "lag"],
                                                               classic_rows), len(classic_rows))
                  if s.classic_lag else "No committed offsets.\n"))
    rows = []
    for topic, series in sorted(s.throughput.items(), key=lambda kv: -sum(c for _, c in kv[1])):
        n = sum(c for _, c in series)
        span = series[-1][0] - series[0][0] + s.throughput_bucket_s
        rows.append([topic, _utc(series[0][0]), _utc(series[-1][0] + s.throughput_bucket_s), n,
                     max(c for _, c in series), f"{n / span:.1f}"])
    out.append(f"## Throughput\n\nBy record timestamp, in buckets of {s.throughput_bucket_s} s; the chart shows "
               f"the {TOP_LINES} busiest topics and the others summed.\n\n![throughput](throughput.png)\n\n"
               + (_folded("Every topic, busiest first", _table(
                   ["topic", "from (UTC)", "to (UTC)", "records", "peak per bucket", "mean per second"], rows), len(rows))
                  if rows else "No records.\n"))
    points = [(t, b, c) for t, series in s.throughput.items() for b, c in series]
    if points:
        shown = points[:SERIES_ROWS]
        out.append(_folded("Buckets", _table(["topic", "bucket start (UTC)", "records"],
                                             [[t, _utc(b), c] for t, b, c in shown])
                           + (f"\n({len(points) - SERIES_ROWS} more buckets in throughput/)\n"
                              if len(points) > SERIES_ROWS else ""), len(shown)))
    return "\n".join(out)


def _lag_tables(s: ReportSummary, out: Path) -> None:
    """share_lag/ and classic_lag/: the lag tables of report.md in full, as Parquet."""
    import pyarrow.parquet as pq

    share = pa.Table.from_pylist(
        [{"group": g, "topic": t, "partition": p, "start_offset": s.share_start[(g, t, p)], "lag": lag,
          "remaining": s.share_remaining.get((g, t, p)), **{f"{k}_records": s.share_states[(g, t, p)].get(k, 0)
                                                            for k in ("available", "acknowledged", "archived",
                                                                      "unrecorded")}}
         for (g, t, p), lag in sorted(s.share_lag.items())],
        schema=pa.schema([("group", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
                          ("start_offset", pa.int64()), ("lag", pa.int64()), ("remaining", pa.int64()),
                          ("available_records", pa.int64()), ("acknowledged_records", pa.int64()),
                          ("archived_records", pa.int64()), ("unrecorded_records", pa.int64())]))
    classic = pa.Table.from_pylist(
        [{"group": g, "topic": t, "partition": p, "committed_offset": s.classic_committed[(g, t, p)], "lag": lag}
         for (g, t, p), lag in sorted(s.classic_lag.items())],
        schema=pa.schema([("group", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
                          ("committed_offset", pa.int64()), ("lag", pa.int64())]))
    for name, tbl in (("share_lag", share), ("classic_lag", classic)):
        shutil.rmtree(out / name, ignore_errors=True)
        (out / name).mkdir()
        pq.write_table(tbl, out / name / "part-00000.parquet")


def _charts(s: ReportSummary, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    # Throughput: the busiest TOP_LINES topics and the rest summed, the legend beside the plot.
    fig, ax = plt.subplots(figsize=(10, 4))
    bucket = s.throughput_bucket_s
    origin = min((series[0][0] for series in s.throughput.values()), default=0)
    unit, per = (("minutes", 60) if bucket < 3600 else ("hours", 3600)) if bucket >= 60 else ("seconds", 1)
    ranked = sorted(s.throughput.items(), key=lambda kv: (-sum(c for _, c in kv[1]), kv[0]))
    lines: list[tuple[str, dict[int, int]]] = [(t, dict(series)) for t, series in ranked[:TOP_LINES]]
    if len(ranked) > TOP_LINES:
        rest: Counter[int] = Counter()
        for _t, series in ranked[TOP_LINES:]:
            for b, c in series:
                rest[b] += c
        lines.append((f"{len(ranked) - TOP_LINES} other topics", dict(rest)))
    for label, per_bucket in lines:
        first, last = min(per_bucket), max(per_bucket)
        # Empty buckets drawn as zero (a line would bridge a pause), and a closing step at the end.
        starts = range(first, last + 2 * bucket, bucket) if (last - first) // bucket < 100_000 \
            else sorted(per_bucket) + [last + bucket]
        ax.plot([(b - origin) / per for b in starts], [per_bucket.get(b, 0) / bucket for b in starts],
                drawstyle="steps-post", label=label, linewidth=1)
    ax.set_xlabel(f"{unit} since {_utc(origin)} UTC" if s.throughput else "time")
    ax.set_ylabel("records/s")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Throughput by record timestamp ({bucket} s buckets)")
    if lines:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.savefig(out / "throughput.png", dpi=100, bbox_inches="tight")
    plt.close(fig)

    # Delivery counts: the TOP_LINES groups with the most redeliveries, the others summed.
    fig, ax = plt.subplots(figsize=(10, 4))
    redelivered = _redelivered(s)
    ranked_groups = sorted(s.delivery_counts, key=lambda g: (-redelivered.get(g, 0), g))
    series_by_label: list[tuple[str, dict[int, int]]] = [(g, s.delivery_counts[g]) for g in ranked_groups[:TOP_LINES]]
    if len(ranked_groups) > TOP_LINES:
        others: Counter[int] = Counter()
        for g in ranked_groups[TOP_LINES:]:
            others.update(s.delivery_counts[g])
        series_by_label.append((f"{len(ranked_groups) - TOP_LINES} other groups", dict(others)))
    counts = sorted({c for _, d in series_by_label for c in d})
    width = 0.8 / max(1, len(series_by_label))
    for i, (label, d) in enumerate(series_by_label):
        ax.bar([c + i * width for c in counts], [d.get(c, 0) for c in counts], width, label=label)
    ax.set_xticks([c + 0.4 - width / 2 for c in counts], [str(c) for c in counts])
    ax.set_xlabel("highest delivery count")
    ax.set_ylabel("records")
    ax.set_yscale("log" if series_by_label and max(max(d.values()) for _, d in series_by_label) > 1000 else "linear")
    ax.set_title("Delivery counts")
    if series_by_label:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.savefig(out / "delivery_counts.png", dpi=100, bbox_inches="tight")
    plt.close(fig)

    # Lag: the TOP partitions with the most lag (share: remaining, classic: lag), the rest in one bar.
    lags = [(f"{g} {t}-{p} (share)", n, "tab:blue") for (g, t, p), n in s.share_remaining.items()]
    lags += [(f"{g} {t}-{p} (classic)", n, "tab:orange") for (g, t, p), n in s.classic_lag.items()]
    lags.sort(key=lambda x: (-x[1], x[0]))
    bars = lags[:TOP]
    if len(lags) > TOP:
        bars.append((f"{len(lags) - TOP} other partitions (sum)", sum(n for _, n, _ in lags[TOP:]), "tab:gray"))
    fig, ax = plt.subplots(figsize=(10, max(2.5, 0.3 * len(bars) + 1.2)))
    ax.barh(range(len(bars)), [lag for _, lag, _ in bars], color=[colour for _, _, colour in bars])
    if len(lags) > TOP and lags[0][1] > 0:
        # The summed bar would flatten the others: the axis follows the largest partition, and the
        # sum is written on its (cut) bar.
        limit = lags[0][1] * 1.25
        ax.set_xlim(0, limit)
        ax.text(limit * 0.98, len(bars) - 1, f"{bars[-1][1]:,}", ha="right", va="center", fontsize="small",
                color="white")
    ax.set_yticks(range(len(bars)), [label for label, _, _ in bars], fontsize="x-small")
    ax.invert_yaxis()
    ax.set_xlabel("records")
    ax.set_title(f"Lag per group and partition (the {min(TOP, len(lags))} largest"
                 + (", the rest summed)" if len(lags) > TOP else ")"))
    fig.tight_layout()
    fig.savefig(out / "lag.png", dpi=100)
    plt.close(fig)
