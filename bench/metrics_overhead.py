"""What the Prometheus metrics and the live view cost: the same share-consume workloads against a
broker without `metrics.listener` and one with it (scraped every second while it works, far more
often than Prometheus' usual 15 s, and its live view's /api/view polled every second, as an open
browser tab does), in alternating runs of one invocation so that the machine's noise falls on both
alike.

    python -m bench.metrics_overhead [--runs 3] [--backlog 200000] [--jobs 2000] [--view-every 1]

Two workloads: a backlog of 100-byte records drained by four implicit-acknowledgement
ShareConsumers (the throughput figure of the README), and the job queue (one job per ShareFetch,
each explicitly ACCEPTed: the most requests and acknowledgements per record, so the per-request
counters weigh most there). For each: records (jobs) per second of the drain, and the broker's CPU
time per record over the drain, which is the broker's own cost whatever the clients do.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import clients, job_queue
from bench.run import PARTITIONS, SHARE_TOPIC, create_topic, run_for_result, share_drain
from sharebroker.testing import BrokerProcess

GROUP = "bench-share-group"
SCRAPE_EVERY_S = 1.0  # --scrape-every
VIEW_EVERY_S = 1.0  # --view-every: the live view's poll (GET /api/view), as view.js does


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _scrape(port: int, path: str = "/metrics") -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        return conn.getresponse().read().decode()
    finally:
        conn.close()


@contextmanager
def broker(metrics: bool) -> Iterator[tuple[BrokerProcess, int | None]]:
    """A fresh broker subprocess, with metrics on an ephemeral port or without; (broker, port)."""
    tmp = Path(tempfile.mkdtemp(prefix="sharebroker-bench-metrics-"))
    b = BrokerProcess(tmp / "data", {"metrics.listener": "127.0.0.1:0"} if metrics else {})
    try:
        b.start()
        port = int(b.log_events("metrics listener started")[0]["port"]) if metrics else None
        yield b, port
    finally:
        try:
            b.stop()
        except Exception:  # noqa: BLE001
            b.kill()
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def scraping(port: int | None) -> Iterator[dict[str, list[float]]]:
    """Scrape /metrics every SCRAPE_EVERY_S and poll the view's /api/view every VIEW_EVERY_S while
    the block runs; yields the durations (s) of each, by path."""
    took: dict[str, list[float]] = {"/metrics": [], "/api/view": []}
    stop = threading.Event()

    def loop(path: str, every_s: float) -> None:
        while not stop.wait(every_s):
            t0 = time.perf_counter()
            _scrape(port, path)  # type: ignore[arg-type]
            took[path].append(time.perf_counter() - t0)

    threads = [threading.Thread(target=loop, args=(path, every), daemon=True)
               for path, every in (("/metrics", SCRAPE_EVERY_S), ("/api/view", VIEW_EVERY_S))
               if port is not None and every > 0]
    for thread in threads:
        thread.start()
    try:
        yield took
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def _durations(took: dict[str, list[float]]) -> dict[str, Any]:
    scrapes, views = took["/metrics"], took["/api/view"]
    return {"scrapes": len(scrapes), "scrape_ms": statistics.median(scrapes) * 1000 if scrapes else None,
            "view_polls": len(views), "view_ms": statistics.median(views) * 1000 if views else None}


def _metric(text: str, line_start: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(line_start))


def backlog_run(metrics: bool, n: int) -> dict[str, Any]:
    with broker(metrics) as (b, port):
        create_topic(b.bootstrap, SHARE_TOPIC, PARTITIONS, share_group=GROUP)
        run_for_result(clients.produce_backlog, b.bootstrap, SHARE_TOPIC, n, 100, PARTITIONS)
        cpu0 = _cpu_seconds(b.proc.pid)
        with scraping(port) as took:
            res = share_drain(b.bootstrap, n, 4, GROUP)
        cpu = _cpu_seconds(b.proc.pid) - cpu0
        out = {"rate": res["rate"], "cpu_us_per_record": cpu / n * 1e6, **_durations(took)}
        if port is not None:  # the counters did count: every record in
            text = _scrape(port)
            out["messagesin"] = _metric(text, "kafka_server_brokertopicmetrics_messagesin_total{")
            out["requests"] = _metric(text, "kafka_network_requestmetrics_requests_total{")
            out["idle_scrape_ms"] = _idle_scrape_ms(port)
        return out


def _idle_scrape_ms(port: int, n: int = 5) -> float:
    """A scrape of the idle broker, round trip (ms, median of n): what each scrape costs it."""
    took = []
    for _ in range(n):
        t0 = time.perf_counter()
        _scrape(port)
        took.append(time.perf_counter() - t0)
    return statistics.median(took) * 1000


def jobs_run(metrics: bool, n: int) -> dict[str, Any]:
    with broker(metrics) as (b, port):
        create_topic(b.bootstrap, job_queue.TOPIC, 1, share_group=job_queue.GROUP)
        run_for_result(job_queue.produce_jobs, b.bootstrap, n)
        cpu0 = _cpu_seconds(b.proc.pid)
        with scraping(port) as took:
            res = job_queue.drain(b.bootstrap, n, 1)
        cpu = _cpu_seconds(b.proc.pid) - cpu0
        out = {"rate": res["jobs_per_s"], "cpu_us_per_record": cpu / n * 1e6, **_durations(took)}
        if port is not None:
            text = _scrape(port)
            out["accepted"] = _metric(text, 'kafka_server_sharegroupmetrics_recordacknowledgements_total{ackType="Accept"}')
            out["requests"] = _metric(text, "kafka_network_requestmetrics_requests_total{")
            out["idle_scrape_ms"] = _idle_scrape_ms(port)
        return out


def hook_cost_us(n: int = 200_000) -> float:
    """µs the connection adds to one request with metrics on: two clock reads, the error codes of
    a one-partition response, and the recorder's count, time and errors (measured in-process; the
    wall-clock runs are too noisy to resolve it)."""
    from kio.schema.errors import ErrorCode

    from sharebroker.broker.metrics import MetricsRecorder, count_errors
    from sharebroker.protocol.codec import build, response_class

    resp = build(response_class(0, 11), {"throttle_time": 0, "responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": ErrorCode.none, "base_offset": 0, "log_start_offset": 0, "record_errors": ()}]}]})
    r = MetricsRecorder()
    clock = time.perf_counter
    t0 = clock()
    for _ in range(n):
        started = clock()
        errors: dict[str, int] = {}
        count_errors(resp, errors)
        r.request(0, 11, (clock() - started) * 1000, errors)
    return (clock() - t0) / n * 1e6


def compare(name: str, fn: Callable[[bool, int], dict[str, Any]], n: int, runs: int) -> dict[str, Any]:
    by_mode: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    for r in range(runs):
        # Alternate which goes first, so a slow spell of the machine is shared out evenly.
        for mode in (("off", "on") if r % 2 == 0 else ("on", "off")):
            res = fn(mode == "on", n)
            by_mode[mode].append(res)
            extra = {k: v for k, v in res.items() if k not in ("rate", "cpu_us_per_record")}
            print(f"  {name:<8} metrics {mode:<3} run {r + 1}: {res['rate']:>10,.0f} /s  "
                  f"broker CPU {res['cpu_us_per_record']:6.2f} µs/record  {extra}", flush=True)
    summary: dict[str, Any] = {"runs": by_mode}
    for key in ("rate", "cpu_us_per_record"):
        off = statistics.median(x[key] for x in by_mode["off"])
        on = statistics.median(x[key] for x in by_mode["on"])
        # Each run's on/off pair ran back to back: the median of their ratios is the least noisy figure.
        paired = statistics.median(a[key] / b[key] for a, b in zip(by_mode["on"], by_mode["off"]))
        summary[key] = {"off": off, "on": on, "on_vs_off": on / off, "paired_on_vs_off": paired}
    print(f"{name}: median rate off {summary['rate']['off']:,.0f}/s, on {summary['rate']['on']:,.0f}/s "
          f"({(summary['rate']['on_vs_off'] - 1) * 100:+.1f}%); broker CPU per record off "
          f"{summary['cpu_us_per_record']['off']:.2f} µs, on {summary['cpu_us_per_record']['on']:.2f} µs "
          f"({(summary['cpu_us_per_record']['on_vs_off'] - 1) * 100:+.1f}%); median of the paired runs' ratios: rate "
          f"{(summary['rate']['paired_on_vs_off'] - 1) * 100:+.1f}%, CPU "
          f"{(summary['cpu_us_per_record']['paired_on_vs_off'] - 1) * 100:+.1f}%", flush=True)
    return summary


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per mode and workload")
    ap.add_argument("--backlog", type=int, default=200_000, help="records of the backlog drain (0 skips it)")
    ap.add_argument("--jobs", type=int, default=2000, help="jobs of the job-queue drain (0 skips it)")
    ap.add_argument("--scrape-every", type=float, default=1.0, help="seconds between scrapes (0: none)")
    ap.add_argument("--view-every", type=float, default=1.0, help="seconds between polls of the live view (0: none)")
    ap.add_argument("--out", type=Path, default=None, help="write metrics_overhead.json into this folder")
    args = ap.parse_args(argv)
    global SCRAPE_EVERY_S, VIEW_EVERY_S
    SCRAPE_EVERY_S = args.scrape_every
    VIEW_EVERY_S = args.view_every
    results: dict[str, Any] = {}
    if args.backlog:
        results["backlog"] = compare("backlog", backlog_run, args.backlog, args.runs)
    if args.jobs:
        results["jobs"] = compare("jobs", jobs_run, args.jobs, args.runs)
    results["hook_cost_us_per_request"] = hook = hook_cost_us()
    print(f"per-request hook cost with metrics on: {hook:.2f} µs", flush=True)
    for name, res in results.items():
        if not isinstance(res, dict):
            continue
        on = [run for run in res["runs"]["on"] if run.get("requests")]
        n = args.backlog if name == "backlog" else args.jobs
        if on:
            per_record = statistics.median(run["requests"] for run in on) / n
            res["requests_per_record"] = per_record
            print(f"{name}: {per_record:.4f} requests per record, so about {hook * per_record:.3f} µs of hooks per "
                  f"record against {res['cpu_us_per_record']['off']:.2f} µs of broker CPU per record "
                  f"({hook * per_record / res['cpu_us_per_record']['off'] * 100:.2f}%)", flush=True)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "metrics_overhead.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
