"""`sharebroker pipeline export | import | report`: Spark jobs over the broker (local[*] unless
--master says otherwise). pyspark is imported only when a pipeline command runs, so the rest of
the CLI works without the [spark] extra."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

FORMATS = ("parquet", "json", "csv")


def _say(text: str) -> None:
    print(f"pipeline: {text}", file=sys.stderr, flush=True)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pipeline", help="Spark jobs: export a topic to files, import files, report on a data dir",
                       description="Spark jobs over the broker (pip install 'sharebroker[spark]'; needs Java 17+).")
    jobs = p.add_subparsers(dest="job", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--master", help="Spark master (default $SPARK_MASTER or local[*])")
        q.add_argument("--conf", action="append", default=[], metavar="NAME=VALUE", help="a Spark setting, repeatable")

    def client(q: argparse.ArgumentParser) -> None:
        q.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
        q.add_argument("--topic", required=True)
        q.add_argument("--option", "-o", action="append", default=[], metavar="NAME=VALUE",
                       help="a source/sink option as in Spark's Kafka connector (e.g. kafka.security.protocol=SSL)")

    e = jobs.add_parser("export", help="topic -> Parquet/JSON/CSV files (batch, or --follow streaming)")
    client(e)
    e.add_argument("--output", required=True, type=Path, metavar="DIR")
    e.add_argument("--format", choices=FORMATS, default="parquet")
    e.add_argument("--starting-offsets", default="earliest", help="earliest, latest or Spark's offsets JSON")
    e.add_argument("--ending-offsets", default="latest", help="batch only: latest or Spark's offsets JSON")
    e.add_argument("--min-partitions", type=int, help="split partitions' ranges into at least this many tasks")
    e.add_argument("--follow", action="store_true", help="keep exporting new records (Structured Streaming)")
    e.add_argument("--checkpoint", type=Path, metavar="DIR", help="--follow: the query's checkpoint (required)")
    e.add_argument("--trigger-seconds", type=float, default=1.0, help="--follow: micro-batch interval")
    e.add_argument("--max-offsets-per-trigger", type=int, help="--follow: records per micro-batch at most")
    e.add_argument("--available-now", action="store_true",
                   help="--follow: export what is there now in micro-batches, then stop")
    common(e)
    e.set_defaults(handler=run_export)

    i = jobs.add_parser("import", help="files -> topic")
    client(i)
    i.add_argument("--input", required=True, type=Path, metavar="PATH", help="a file or directory")
    i.add_argument("--format", choices=FORMATS, help="default: from the file extension")
    i.add_argument("--keep-partitions", action="store_true",
                   help="write each row to the partition in its 'partition' column (default: the partitioner)")
    common(i)
    i.set_defaults(handler=run_import)

    r = jobs.add_parser("report", help="broker data dir -> Parquet tables, report.md and charts")
    r.add_argument("--data-dir", required=True, type=Path, metavar="DIR")
    r.add_argument("--output", required=True, type=Path, metavar="DIR")
    common(r)
    r.set_defaults(handler=run_report)


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"sharebroker pipeline: {what} expects NAME=VALUE, got {item!r}")
        name, value = item.split("=", 1)
        out[name.strip()] = value.strip()
    return out


def _session(args: argparse.Namespace, name: str, defaults: dict[str, str] | None = None) -> SparkSession:
    from sharebroker.pipeline.session import get_session

    _say("starting Spark")
    started = time.monotonic()
    spark = get_session(args.master, f"sharebroker-pipeline-{name}", {**(defaults or {}), **_pairs(args.conf, "--conf")})
    spark.sparkContext.setLogLevel("ERROR")
    _say(f"Spark {spark.version} on {spark.sparkContext.master} ready in {time.monotonic() - started:.1f} s")
    return spark


class _StageProgress:
    """Prints the running stages' task counts while a batch job runs."""

    def __init__(self, spark: SparkSession, interval_s: float = 1.0) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _StageProgress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        last = ""
        while not self._stop.wait(self._interval):
            parts = []
            for stage_id in self._tracker.getActiveStageIds():
                info = self._tracker.getStageInfo(stage_id)
                if info is not None:
                    parts.append(f"stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} tasks")
            line = ", ".join(parts)
            if line and line != last:
                _say(line)
                last = line


def _source_options(args: argparse.Namespace) -> dict[str, str]:
    return {"kafka.bootstrap.servers": args.bootstrap_server, **_pairs(args.option, "--option")}


def _for_files(df: DataFrame, fmt: str) -> DataFrame:
    """Parquet keeps key and value as bytes; JSON and CSV get them as UTF-8 text (CSV has no
    binary type, and base64 in JSON helps nobody reading it)."""
    if fmt == "parquet":
        return df
    from pyspark.sql import functions as F

    return df.withColumn("key", F.col("key").cast("string")).withColumn("value", F.col("value").cast("string"))


def run_export(args: argparse.Namespace) -> int:
    if args.follow and args.checkpoint is None:
        _say("--follow needs --checkpoint DIR (the query's progress is kept there)")
        return 2
    spark = _session(args, "export")
    try:
        options = {**_source_options(args), "subscribe": args.topic, "startingOffsets": args.starting_offsets}
        if args.min_partitions:
            options["minPartitions"] = str(args.min_partitions)
        if not args.follow:
            options["endingOffsets"] = args.ending_offsets
            df = _for_files(spark.read.format("sharebroker").options(**options).load(), args.format)
            started = time.monotonic()
            with _StageProgress(spark):
                df.write.mode("append").format(args.format).save(str(args.output))
            _say(f"exported topic {args.topic} to {args.output} ({args.format}) in {time.monotonic() - started:.1f} s")
            return 0
        if args.max_offsets_per_trigger:
            options["maxOffsetsPerTrigger"] = str(args.max_offsets_per_trigger)
        df = _for_files(spark.readStream.format("sharebroker").options(**options).load(), args.format)
        writer = (df.writeStream.format(args.format).option("path", str(args.output))
                  .option("checkpointLocation", str(args.checkpoint)))
        writer = (writer.trigger(availableNow=True) if args.available_now
                  else writer.trigger(processingTime=f"{args.trigger_seconds} seconds"))
        query = writer.start()
        _say(f"following topic {args.topic} into {args.output} (checkpoint {args.checkpoint}); Ctrl-C stops")
        return _watch(query)
    finally:
        spark.stop()


def _watch(query: StreamingQuery, on_progress: Callable[[dict], None] | None = None) -> int:
    """Print each micro-batch's progress until the query ends (or Ctrl-C stops it)."""
    seen = -1
    try:
        while query.isActive:
            query.awaitTermination(1)
            for progress in query.recentProgress:
                if progress["batchId"] > seen and progress["numInputRows"] > 0:
                    seen = progress["batchId"]
                    _say(f"batch {progress['batchId']}: {progress['numInputRows']} records "
                         f"({progress.get('processedRowsPerSecond', 0):.0f} records/s)")
                    if on_progress:
                        on_progress(progress)
    except KeyboardInterrupt:
        _say("stopping")
        query.stop()
        return 0
    exc = query.exception()
    if exc is not None:
        _say(f"the query failed: {exc}")
        return 1
    _say("done")
    return 0


def run_import(args: argparse.Namespace) -> int:
    fmt = args.format or _format_of(args.input)
    if fmt is None:
        _say(f"cannot tell the format of {args.input}: pass --format parquet|json|csv")
        return 2
    spark = _session(args, "import")
    try:
        reader = spark.read.format(fmt)
        if fmt == "csv":
            reader = reader.option("header", "true")
        df = reader.load(str(args.input))
        if "value" not in df.columns:
            _say(f"{args.input} has no 'value' column (columns: {', '.join(df.columns)})")
            return 2
        wanted = ("key", "value", "partition", "headers") if args.keep_partitions else ("key", "value", "headers")
        keep = [c for c in wanted if c in df.columns]
        df = df.select(*keep)
        rows = df.count()
        started = time.monotonic()
        with _StageProgress(spark):
            (df.write.mode("append").format("sharebroker").options(**_source_options(args))
             .option("topic", args.topic).save())
        _say(f"imported {rows} records from {args.input} into topic {args.topic} in "
             f"{time.monotonic() - started:.1f} s")
        return 0
    finally:
        spark.stop()


def _format_of(path: Path) -> str | None:
    candidates = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for p in candidates:
        for fmt in FORMATS:
            if p.name.endswith(f".{fmt}") or (fmt == "json" and p.name.endswith(".jsonl")):
                return fmt
    return None


def run_report(args: argparse.Namespace) -> int:
    if not args.data_dir.is_dir():
        _say(f"{args.data_dir} is not a directory")
        return 2
    from sharebroker.pipeline.report import REPORT_CONF
    from sharebroker.pipeline.report import run_report as report

    spark = _session(args, "report", REPORT_CONF)
    try:
        started = time.monotonic()
        s = report(spark, args.data_dir, args.output, progress=_say)
        took = time.monotonic() - started
        _say(f"report written to {args.output / 'report.md'} in {took:.1f} s after Spark started "
             f"({s.log_bytes / 1e6 / took:.1f} MB/s of log)")
        return 0
    finally:
        spark.stop()
