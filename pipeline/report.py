"""`sharebroker pipeline report`: queue analytics over a broker data directory, read from its
files. Spark parses the segments, one task per segment, into Parquet tables:

- `records/` (partitioned by topic): every record of the user topics, control batches skipped;
- `segments/`: per segment its offsets, counts, time span and whether it ends torn;
- `share_state/` and `share_state_ranges/`: every `__share_group_state` record (start offset over
  time) and the offset ranges it carries (delivery state and count);
- `consumer_offsets/`: classic groups' offset commits.

From those it computes lag per share group and partition (log end - start offset, after replaying
the state the way the broker does), lag per classic group, the delivery-count histogram, the
archived ("poison") records with a preview of their payload, and throughput over time, and writes
`report.md` with `throughput.png`, `delivery_counts.png` and `lag.png`."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from pipeline.analytics import (
    ARCHIVED,
    OFFSET_COLUMNS,
    OFFSETS_TOPIC,
    RANGE_COLUMNS,
    RECORD_COLUMNS,
    SHARE_STATE_TOPIC,
    STATE_COLUMNS,
    Segment,
    consumer_offset_rows,
    group_start_policy,
    list_segments,
    max_delivery_counts,
    replay_state,
    segment_records,
    share_state_rows,
    summarize_segment,
    topic_names,
)

PREVIEW_BYTES = 64

RECORDS_SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                            ("timestamp", pa.int64()), ("timestamp_type", pa.int8()), ("key", pa.binary()),
                            ("value", pa.binary()), ("headers", pa.int32()), ("producer_id", pa.int64()),
                            ("compression", pa.int8())])
SEGMENTS_SCHEMA = pa.schema([("path", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
                             ("base_offset", pa.int64()), ("next_offset", pa.int64()), ("bytes", pa.int64()),
                             ("batches", pa.int64()), ("records", pa.int64()), ("control_batches", pa.int64()),
                             ("first_timestamp", pa.int64()), ("last_timestamp", pa.int64()),
                             ("torn", pa.string())])
STATE_SCHEMA = pa.schema([("group", pa.string()), ("topic_id", pa.string()), ("partition", pa.int32()),
                          ("state_partition", pa.int32()), ("log_offset", pa.int64()),
                          ("log_timestamp", pa.int64()), ("record_type", pa.string()),
                          ("snapshot_epoch", pa.int32()), ("state_epoch", pa.int32()), ("leader_epoch", pa.int32()),
                          ("start_offset", pa.int64()), ("delivery_complete_count", pa.int32())])
RANGES_SCHEMA = pa.schema([("group", pa.string()), ("topic_id", pa.string()), ("partition", pa.int32()),
                           ("state_partition", pa.int32()), ("log_offset", pa.int64()), ("first_offset", pa.int64()),
                           ("last_offset", pa.int64()), ("delivery_state", pa.int8()), ("delivery_count", pa.int16())])
OFFSETS_SCHEMA = pa.schema([("group", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
                            ("offset", pa.int64()), ("commit_timestamp", pa.int64()), ("log_offset", pa.int64()),
                            ("log_timestamp", pa.int64())])
assert tuple(RECORDS_SCHEMA.names) == RECORD_COLUMNS and tuple(STATE_SCHEMA.names) == STATE_COLUMNS
assert tuple(RANGES_SCHEMA.names) == RANGE_COLUMNS and tuple(OFFSETS_SCHEMA.names) == OFFSET_COLUMNS

GroupPartition = tuple[str, str, int]  # group, topic, partition


@dataclass
class ReportSummary:
    records: dict[tuple[str, int], int] = field(default_factory=dict)  # (topic, partition) -> records
    log_end: dict[tuple[str, int], int] = field(default_factory=dict)
    share_start: dict[GroupPartition, int] = field(default_factory=dict)
    share_lag: dict[GroupPartition, int] = field(default_factory=dict)
    classic_lag: dict[GroupPartition, int] = field(default_factory=dict)
    delivery_counts: dict[str, dict[int, int]] = field(default_factory=dict)  # group -> count -> records
    archived: list[tuple[str, str, int, int, str]] = field(default_factory=list)  # group, topic, p, offset, preview
    throughput: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # topic -> (second, records)
    torn_segments: list[str] = field(default_factory=list)


def _segment_rows(segments: list[Segment]) -> list[tuple]:
    return [(s.path, s.topic, s.partition, s.base_offset, s.size, s.topic_id or "") for s in segments]


_SEGMENT_DF_SCHEMA = ("path string, topic string, partition int, base_offset long, size long, topic_id string")


def _segments_of(batches: Iterator[pa.RecordBatch]) -> Iterator[Segment]:
    for b in batches:
        for row in b.to_pylist():
            yield Segment(row["path"], row["topic"], row["partition"], row["base_offset"], row["size"],
                          row["topic_id"] or None)


def _records_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for seg in _segments_of(batches):
        for cols in segment_records(seg):
            yield pa.RecordBatch.from_pydict(cols, schema=RECORDS_SCHEMA)


def _summary_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for seg in _segments_of(batches):
        s = summarize_segment(seg)
        yield pa.RecordBatch.from_pylist([{
            "path": seg.path, "topic": seg.topic, "partition": seg.partition, "base_offset": seg.base_offset,
            "next_offset": s.next_offset, "bytes": seg.size, "batches": s.batches, "records": s.records,
            "control_batches": s.control_batches, "first_timestamp": s.first_timestamp,
            "last_timestamp": s.last_timestamp, "torn": s.torn}], schema=SEGMENTS_SCHEMA)


def _state_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for seg in _segments_of(batches):
        state, _ranges = share_state_rows(seg)
        yield pa.RecordBatch.from_pydict(state, schema=STATE_SCHEMA)


def _ranges_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for seg in _segments_of(batches):
        _state, ranges = share_state_rows(seg)
        yield pa.RecordBatch.from_pydict(ranges, schema=RANGES_SCHEMA)


def _offsets_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for seg in _segments_of(batches):
        yield pa.RecordBatch.from_pydict(consumer_offset_rows(seg), schema=OFFSETS_SCHEMA)


def preview(payload: bytes | None) -> str:
    """The first bytes of a payload, printable (other bytes as \\xNN)."""
    if payload is None:
        return "null"
    head = payload[:PREVIEW_BYTES]
    text = "".join(chr(b) if 32 <= b < 127 else f"\\x{b:02x}" for b in head)
    return text + ("…" if len(payload) > PREVIEW_BYTES else "")


def run_report(spark: SparkSession, data_dir: Path, output_dir: Path, *,
               progress: Callable[[str], None] | None = None) -> ReportSummary:
    say = progress or (lambda _text: None)
    data_dir, output_dir = Path(data_dir).resolve(), Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    segments = list_segments(data_dir)
    names = topic_names(data_dir)
    policies = group_start_policy(data_dir)
    user = [s for s in segments if not s.topic.startswith("__")]
    state_segs = [s for s in segments if s.topic == SHARE_STATE_TOPIC]
    offset_segs = [s for s in segments if s.topic == OFFSETS_TOPIC]
    say(f"{len(user)} segments of {len({(s.topic, s.partition) for s in user})} partitions, "
        f"{len(state_segs)} share-state and {len(offset_segs)} consumer-offsets segments")

    def frame(segs: list[Segment]) -> DataFrame:
        # One task per segment: the unit the parsing is distributed by.
        return spark.createDataFrame(_segment_rows(segs), _SEGMENT_DF_SCHEMA).repartition(max(1, len(segs)))

    def ddl(schema: pa.Schema) -> str:
        from pyspark.sql.pandas.types import from_arrow_schema
        return from_arrow_schema(schema).simpleString()

    say("parsing segments -> records/")
    frame(user).mapInArrow(_records_task, ddl(RECORDS_SCHEMA)).write.mode("overwrite") \
        .partitionBy("topic").parquet(str(output_dir / "records"))
    seg_rows = frame(segments).mapInArrow(_summary_task, ddl(SEGMENTS_SCHEMA)).collect()
    spark.createDataFrame(seg_rows, ddl(SEGMENTS_SCHEMA)).write.mode("overwrite").parquet(str(output_dir / "segments"))
    say("parsing __share_group_state -> share_state/, share_state_ranges/")
    state_df = frame(state_segs).mapInArrow(_state_task, ddl(STATE_SCHEMA))
    ranges_df = frame(state_segs).mapInArrow(_ranges_task, ddl(RANGES_SCHEMA))
    state_df.write.mode("overwrite").parquet(str(output_dir / "share_state"))
    ranges_df.write.mode("overwrite").parquet(str(output_dir / "share_state_ranges"))
    say("parsing __consumer_offsets -> consumer_offsets/")
    offsets_df = frame(offset_segs).mapInArrow(_offsets_task, ddl(OFFSETS_SCHEMA))
    offsets_df.write.mode("overwrite").parquet(str(output_dir / "consumer_offsets"))

    summary = ReportSummary()
    log_start: dict[tuple[str, int], int] = {}
    for r in seg_rows:
        if r.topic.startswith("__"):
            continue
        tp = (r.topic, r.partition)
        log_start[tp] = min(log_start.get(tp, r.base_offset), r.base_offset)
        summary.records[tp] = summary.records.get(tp, 0) + r.records
        summary.log_end[tp] = max(summary.log_end.get(tp, 0), r.next_offset)
        if r.torn:
            summary.torn_segments.append(f"{r.path}: {r.torn}")

    say("replaying share-group state")
    state_rows = [r.asDict() for r in spark.read.parquet(str(output_dir / "share_state")).collect()]
    range_rows = [r.asDict() for r in spark.read.parquet(str(output_dir / "share_state_ranges")).collect()]
    final = replay_state(state_rows, range_rows)
    history: dict[tuple[str, str, int], list[tuple[int, int, int]]] = defaultdict(list)
    archived_ranges: dict[tuple[str, str, int], list[tuple[int, int]]] = defaultdict(list)
    first_start: dict[tuple[str, str, int], int] = {}
    for st_row in sorted(state_rows, key=lambda x: (x["state_partition"], x["log_offset"])):
        k = (st_row["group"], st_row["topic_id"], st_row["partition"])
        if st_row["start_offset"] >= 0 and k not in first_start:
            first_start[k] = st_row["start_offset"]
    for rg in range_rows:
        k = (rg["group"], rg["topic_id"], rg["partition"])
        history[k].append((rg["first_offset"], rg["last_offset"], rg["delivery_count"]))
        if rg["delivery_state"] == ARCHIVED:
            archived_ranges[k].append((rg["first_offset"], rg["last_offset"]))

    histogram: dict[str, Counter[int]] = defaultdict(Counter)
    for (group, tid, partition), st in sorted(final.items()):
        topic = names.get(tid)
        if st.deleted or topic is None or st.start_offset < 0:
            continue
        gp = (group, topic, partition)
        end = summary.log_end.get((topic, partition), st.start_offset)
        summary.share_start[gp] = st.start_offset
        summary.share_lag[gp] = max(0, end - st.start_offset)
        # Delivery counts: what the state recorded, and 1 for records consumed in order below the
        # start offset that no range ever mentioned. Where the group began: the first start offset
        # persisted, or the log start when the group reads from the earliest offset (the leader
        # persists the start offset it initialized with only with its first acknowledgement).
        counted = max_delivery_counts(history[(group, tid, partition)])
        begin = first_start.get((group, tid, partition), st.start_offset)
        if policies.get(group) == "earliest":
            begin = min(begin, log_start.get((topic, partition), begin))
        seen = 0
        for f, l_, c in counted:
            lo, hi = max(f, begin), min(l_, end - 1)
            if hi >= lo:
                histogram[group][c] += hi - lo + 1
                if lo < st.start_offset:
                    seen += min(hi, st.start_offset - 1) - lo + 1
        plain = max(0, st.start_offset - begin) - seen
        if plain:
            histogram[group][1] += plain
    summary.delivery_counts = {g: dict(sorted(c.items())) for g, c in histogram.items()}

    wanted: set[tuple[str, int, int]] = set()
    archived_by_offset: dict[tuple[str, int, int], list[str]] = defaultdict(list)
    for (group, tid, partition), spans in archived_ranges.items():
        topic = names.get(tid)
        if topic is None:
            continue
        for f, l_ in {(f, l_) for f, l_ in spans}:
            for off in range(f, l_ + 1):
                if group not in archived_by_offset[(topic, partition, off)]:
                    archived_by_offset[(topic, partition, off)].append(group)
                    wanted.add((topic, partition, off))
    if wanted:
        say(f"joining {len(wanted)} archived records to their payloads")
        keys = spark.createDataFrame(sorted(wanted), "topic string, partition int, offset long")
        records = spark.read.parquet(str(output_dir / "records"))
        payloads = {(r.topic, r.partition, r.offset): bytes(r.value) if r.value is not None else None
                    for r in records.join(keys, ["topic", "partition", "offset"]).collect()}
        for (topic, partition, off), groups in sorted(archived_by_offset.items()):
            for group in groups:
                summary.archived.append((group, topic, partition, off,
                                         preview(payloads[(topic, partition, off)])
                                         if (topic, partition, off) in payloads else "(not in the log)"))

    say("throughput over time")
    records = spark.read.parquet(str(output_dir / "records"))
    if user:
        per_second = (records.selectExpr("topic", "CAST(floor(timestamp / 1000) AS LONG) AS second")
                      .groupBy("topic", "second").count().collect())
        by_topic: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for r in per_second:
            by_topic[r.topic].append((r.second, r["count"]))
        summary.throughput = {t: sorted(v) for t, v in by_topic.items()}

    classic: dict[GroupPartition, int] = {}
    for r in sorted(spark.read.parquet(str(output_dir / "consumer_offsets")).collect(), key=lambda x: x.log_offset):
        gp = (r.group, r.topic, r.partition)
        if r.offset < 0:
            classic.pop(gp, None)
        else:
            classic[gp] = r.offset
    summary.classic_lag = {gp: max(0, summary.log_end.get((gp[1], gp[2]), off) - off) for gp, off in classic.items()}

    say("writing report.md and charts")
    _charts(summary, output_dir)
    (output_dir / "report.md").write_text(_markdown(summary, data_dir))
    return summary


def _table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _markdown(s: ReportSummary, data_dir: Path) -> str:
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts = [f"# Queue report: {data_dir}\n\nMade {when} by `sharebroker pipeline report` from the files "
             "themselves. Tables are next to this file as Parquet.\n"]
    parts.append("## Topics\n\n" + _table(["topic", "partition", "records", "log end offset"],
                 [[t, p, s.records.get((t, p), 0), s.log_end[(t, p)]] for t, p in sorted(s.log_end)]))
    if s.torn_segments:
        parts.append("Segments ending in a torn batch (a live broker's active segment, or a crash):\n\n"
                     + "".join(f"- {t}\n" for t in s.torn_segments))
    parts.append("## Share groups: lag\n\nLag = log end offset - share-partition start offset.\n\n"
                 + (_table(["group", "topic", "partition", "start offset", "lag"],
                           [[g, t, p, s.share_start[(g, t, p)], lag] for (g, t, p), lag in sorted(s.share_lag.items())])
                    if s.share_lag else "No share groups.\n") + "\n![lag](lag.png)\n")
    parts.append("## Share groups: delivery counts\n\nRecords by the highest delivery count they reached.\n\n"
                 + (_table(["group", "delivery count", "records"],
                           [[g, c, n] for g, counts in sorted(s.delivery_counts.items()) for c, n in counts.items()])
                    if s.delivery_counts else "None.\n") + "\n![delivery counts](delivery_counts.png)\n")
    parts.append("## Archived (poison) records\n\n"
                 + (_table(["group", "topic", "partition", "offset", "payload preview"],
                           [list(a) for a in s.archived[:200]]) if s.archived else "None.\n")
                 + (f"\n({len(s.archived) - 200} more in share_state_ranges/)\n" if len(s.archived) > 200 else ""))
    parts.append("## Classic consumer groups: lag\n\n"
                 + (_table(["group", "topic", "partition", "lag"],
                           [[g, t, p, lag] for (g, t, p), lag in sorted(s.classic_lag.items())])
                    if s.classic_lag else "No committed offsets.\n"))
    total = sum(n for series in s.throughput.values() for _, n in series)
    parts.append(f"## Throughput\n\n{total} records by their timestamps, per second.\n\n![throughput](throughput.png)\n")
    return "\n".join(parts)


def _charts(s: ReportSummary, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.5))
    for topic, series in sorted(s.throughput.items()):
        start = series[0][0]
        ax.plot([sec - start for sec, _ in series], [n for _, n in series], label=topic, marker=".")
    ax.set_xlabel("seconds since the topic's first record")
    ax.set_ylabel("records/s")
    ax.set_title("Throughput")
    if s.throughput:
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 3.5))
    groups = sorted(s.delivery_counts)
    counts = sorted({c for g in groups for c in s.delivery_counts[g]})
    width = 0.8 / max(1, len(groups))
    for i, g in enumerate(groups):
        ax.bar([c + i * width for c in counts], [s.delivery_counts[g].get(c, 0) for c in counts], width, label=g)
    ax.set_xlabel("delivery count")
    ax.set_ylabel("records")
    ax.set_title("Delivery counts")
    if groups:
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out / "delivery_counts.png", dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 3.5))
    labels = [f"{g}\n{t}-{p}" for g, t, p in sorted(s.share_lag)]
    ax.bar(range(len(labels)), [s.share_lag[k] for k in sorted(s.share_lag)])
    ax.set_xticks(range(len(labels)), labels, fontsize="x-small")
    ax.set_ylabel("records")
    ax.set_title("Share-group lag per partition")
    fig.tight_layout()
    fig.savefig(out / "lag.png", dpi=100)
    plt.close(fig)
