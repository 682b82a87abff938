"""The Spark pipeline (issue 12), two figures from one run against a fresh broker:

1. export: N records of 100 bytes (4 partitions) to Parquet with `format("sharebroker")` on
   local[*], records/s excluding Spark's start-up, side by side with a plain confluent-kafka
   consumer reading the same records (assign from the beginning, every value touched);
2. streaming latency: a producer at --rate records/s for --seconds, a query with a processing-time
   trigger of 1 s; per record, the time from its CreateTime to the end of the micro-batch that
   wrote it to Parquet (p50, p99).

    python -m bench.pipeline [--records 1000000] [--rate 10000] [--seconds 30] [--out DIR]

Targets (issue 12): export >= 0.5x the plain consumer; p99 < 2 s at 10k records/s."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import multiprocessing
import queue
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from bench.clients import QUIET, produce_backlog
from bench.run import FreshBroker, create_topic

TOPIC, LIVE_TOPIC, PARTITIONS = "export", "live", 4


def plain_consumer(bootstrap: str, n: int) -> float:
    """Seconds for a plain consumer to read n records and touch each value."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-plain", "enable.auto.commit": False,
                  "fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 8 << 20, **QUIET})
    c.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    seen, total_bytes = 0, 0
    started = time.perf_counter()
    while seen < n:
        for m in c.consume(10_000, timeout=5):
            if m.error() is None:
                total_bytes += len(m.value())
                seen += 1
    took = time.perf_counter() - started
    c.close()
    assert total_bytes == 100 * n
    return took


def spark_export(spark: Any, bootstrap: str, n: int, out: Path, *, whole_topic: bool = True) -> float:
    """Seconds to export the topic (or its first n records) to Parquet."""
    ending = "latest" if whole_topic else json.dumps({TOPIC: {str(p): n // PARTITIONS for p in range(PARTITIONS)}})
    started = time.perf_counter()
    (spark.read.format("sharebroker").option("kafka.bootstrap.servers", bootstrap).option("subscribe", TOPIC)
     .option("endingOffsets", ending).load().write.mode("overwrite").parquet(str(out)))
    took = time.perf_counter() - started
    rows = spark.read.parquet(str(out)).count()
    assert rows == n, f"exported {rows} of {n}"
    return took


def load(bootstrap: str, rate: int, seconds: float) -> None:
    """Produce `rate` records/s for `seconds`."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **QUIET})
    sent, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        due = int((time.monotonic() - started) * rate)
        while sent < due:
            p.produce(LIVE_TOPIC, b"y" * 100, partition=sent % PARTITIONS)
            sent += 1
        p.poll(0)
        time.sleep(0.002)  # pacing the load generator, not waiting for a result
    p.flush(30)


def streaming_latency(spark: Any, bootstrap: str, rate: int, seconds: float, work: Path) -> dict[str, float]:
    latencies: list[float] = []
    batches: list[float] = []

    def sink(df: Any, batch_id: int) -> None:
        df.persist()  # read from the broker once; the timestamps below come from the cache
        df.write.mode("append").parquet(str(work / "live"))
        done_ms = time.time() * 1000
        stamps = [r[0] for r in df.selectExpr("CAST(unix_millis(timestamp) AS LONG)").collect()]
        df.unpersist()
        latencies.extend((done_ms - ts) / 1000 for ts in stamps)
        batches.append(len(stamps))

    query = (spark.readStream.format("sharebroker").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", LIVE_TOPIC).option("startingOffsets", "latest").load()
             .writeStream.foreachBatch(sink).option("checkpointLocation", str(work / "checkpoint"))
             .trigger(processingTime="1 second").start())
    # Let the query's first (slow, JVM warm-up) batch pass before the timed load starts.
    deadline = time.monotonic() + 120
    while query.lastProgress is None and time.monotonic() < deadline:
        query.awaitTermination(0.2)
    # The load runs in its own process, so that it does not compete with the driver for the GIL.
    loader = multiprocessing.get_context("spawn").Process(target=load, args=(bootstrap, rate, seconds))
    loader.start()
    loader.join()
    deadline = time.monotonic() + 30
    while query.status["isDataAvailable"] and time.monotonic() < deadline:
        query.awaitTermination(0.5)
    query.stop()
    latencies.sort()
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 100 else [float("nan")] * 99
    return {"records": len(latencies), "batches": len(batches), "p50_s": q[49], "p99_s": q[98],
            "max_s": latencies[-1] if latencies else float("nan")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--rate", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = ap.parse_args()

    from sharebroker.pipeline.session import get_session

    with FreshBroker() as broker, tempfile.TemporaryDirectory(prefix="sharebroker-bench-pipeline-") as tmp:
        work = Path(tmp)
        create_topic(broker.bootstrap, TOPIC, PARTITIONS)
        create_topic(broker.bootstrap, LIVE_TOPIC, PARTITIONS)
        t = time.perf_counter()
        done: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        produce_backlog(broker.bootstrap, TOPIC, args.records, 100, PARTITIONS, done)
        result = done.get()
        if "error" in result:
            raise SystemExit(result["error"])
        print(f"produced {args.records:,} records of 100 bytes in {time.perf_counter() - t:.1f} s")

        plain_s = plain_consumer(broker.bootstrap, args.records)
        t = time.perf_counter()
        spark = get_session(args.master, "bench-pipeline")
        spark.sparkContext.setLogLevel("ERROR")
        startup_s = time.perf_counter() - t
        spark_export(spark, broker.bootstrap, 10_000, work / "warm-up", whole_topic=False)  # Python workers, JIT
        export_s = spark_export(spark, broker.bootstrap, args.records, work / "export")
        plain_rate, export_rate = args.records / plain_s, args.records / export_s
        print(f"\nexport of {args.records:,} records to Parquet ({args.master}, {os.cpu_count()} cores)")
        print(f"  plain confluent-kafka consumer  {plain_rate:>12,.0f} records/s  ({plain_s:.1f} s)")
        print(f"  sharebroker Spark source        {export_rate:>12,.0f} records/s  ({export_s:.1f} s; "
              f"Spark start-up {startup_s:.1f} s not counted)")
        print(f"  ratio                           {export_rate / plain_rate:>12.2f}x  (target >= 0.5x)")

        lat = streaming_latency(spark, broker.bootstrap, args.rate, args.seconds, work)
        print(f"\nstreaming, processing-time trigger 1 s, {args.rate:,} records/s for {args.seconds:.0f} s")
        print(f"  {lat['records']:,} records in {lat['batches']} micro-batches; end-to-end latency "
              f"p50 {lat['p50_s']:.2f} s, p99 {lat['p99_s']:.2f} s, max {lat['max_s']:.2f} s (target p99 < 2 s)")
        spark.stop()
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "pipeline.json").write_text(json.dumps({
                "records": args.records, "plain_records_per_s": plain_rate, "export_records_per_s": export_rate,
                "ratio": export_rate / plain_rate, "spark_startup_s": startup_s, "streaming": lat}, indent=2))


if __name__ == "__main__":
    main()
