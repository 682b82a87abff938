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
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import clients, job_queue
from bench.cpu import cpu_seconds as _cpu_seconds
from bench.run import PARTITIONS, SHARE_TOPIC, create_topic, run_for_result, share_drain
from sharebroker.testing import BrokerProcess

GROUP = "bench-share-group"
SCRAPE_EVERY_S = 1.0  # --scrape-every
VIEW_EVERY_S = 1.0  # --view-every: the live view's poll (GET /api/view), as view.js does
AA = False  # --aa


def _scrape(port: int, path: str = "/metrics") -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        return conn.getresponse().read().decode()
    finally:
        conn.close()


@contextmanager
def broker(metrics: bool) -> Iterator[tuple[BrokerProcess, int | None]]:
    """A fresh broker subprocess, with metrics on an ephemeral port or without; (broker, port).
    With --aa, the "on" broker is one without metrics too: the method's own bias."""
    metrics = metrics and not AA
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


@contextmanager
def cpu_trace(pid: int, every_s: float = 0.01) -> Iterator[Callable[[float, float], float]]:
    """Samples the process's CPU time every `every_s` while the block runs; yields a function
    giving the CPU seconds it used between two `time.perf_counter()` instants (the clients'
    marks of the first and the last record), interpolated between samples. So the figure covers
    the drain itself, not the group join or the polls of an idle broker before it."""
    samples: list[tuple[float, float]] = []
    stop = threading.Event()

    def loop() -> None:
        while True:
            samples.append((time.perf_counter(), _cpu_seconds(pid)))
            if stop.wait(every_s):
                samples.append((time.perf_counter(), _cpu_seconds(pid)))
                return

    def at(t: float) -> float:
        for (t0, c0), (t1, c1) in zip(samples, samples[1:]):
            if t0 <= t <= t1:
                return c0 + (c1 - c0) * ((t - t0) / (t1 - t0) if t1 > t0 else 0.0)
        return samples[0][1] if t < samples[0][0] else samples[-1][1]

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield lambda start, end: at(end) - at(start)
    finally:
        stop.set()
        thread.join()


def _durations(took: dict[str, list[float]]) -> dict[str, Any]:
    scrapes, views = took["/metrics"], took["/api/view"]
    return {"scrapes": len(scrapes), "scrape_ms": statistics.median(scrapes) * 1000 if scrapes else None,
            "view_polls": len(views), "view_ms": statistics.median(views) * 1000 if views else None}


def _metric(text: str, line_start: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(line_start))


def backlog_run(metrics: bool, n: int, ready: Callable[[], object] = lambda: None) -> dict[str, Any]:
    with broker(metrics) as (b, port):
        create_topic(b.bootstrap, SHARE_TOPIC, PARTITIONS, share_group=GROUP)
        run_for_result(clients.produce_backlog, b.bootstrap, SHARE_TOPIC, n, 100, PARTITIONS)
        ready()
        with cpu_trace(b.proc.pid) as cpu_between, scraping(port) as took:
            res = share_drain(b.bootstrap, n, 4, GROUP)
        cpu = cpu_between(res["first_at"], res["last_at"])
        out = {"rate": res["rate"], "cpu_us_per_record": cpu / n * 1e6, **_durations(took)}
        if port is not None:  # the counters did count: every record in
            text = _scrape(port)
            out["messagesin"] = _metric(text, "kafka_server_brokertopicmetrics_messagesin_total{")
            out["requests"] = _metric(text, "kafka_network_requestmetrics_requests_total{")
            out["idle_scrape_ms"] = _idle_scrape_ms(port)
            out["view_poll_cpu_ms"] = _poll_cpu_ms(b.proc.pid, port, "/api/view")
            out["scrape_cpu_ms"] = _poll_cpu_ms(b.proc.pid, port, "/metrics")
            out["drain_cpu_s"] = cpu
        return out


def _poll_cpu_ms(pid: int, port: int, path: str, n: int = 20) -> float:
    """Broker CPU (ms) one GET of path costs, over n back-to-back requests on the broker as the
    drain left it (its groups, share partitions and ranges still loaded)."""
    cpu0 = _cpu_seconds(pid)
    for _ in range(n):
        _scrape(port, path)
    return (_cpu_seconds(pid) - cpu0) / n * 1000


def _idle_scrape_ms(port: int, n: int = 5) -> float:
    """A scrape of the idle broker, round trip (ms, median of n): what each scrape costs it."""
    took = []
    for _ in range(n):
        t0 = time.perf_counter()
        _scrape(port)
        took.append(time.perf_counter() - t0)
    return statistics.median(took) * 1000


def jobs_run(metrics: bool, n: int, ready: Callable[[], object] = lambda: None) -> dict[str, Any]:
    with broker(metrics) as (b, port):
        create_topic(b.bootstrap, job_queue.TOPIC, 1, share_group=job_queue.GROUP)
        run_for_result(job_queue.produce_jobs, b.bootstrap, n)
        ready()
        with cpu_trace(b.proc.pid) as cpu_between, scraping(port) as took:
            res = job_queue.drain(b.bootstrap, n, 1)
        cpu = cpu_between(res["first_at"], res["last_at"])
        out = {"rate": res["jobs_per_s"], "cpu_us_per_record": cpu / n * 1e6, **_durations(took)}
        if port is not None:
            text = _scrape(port)
            out["accepted"] = _metric(text, 'kafka_server_sharegroupmetrics_recordacknowledgements_total{ackType="Accept"}')
            out["requests"] = _metric(text, "kafka_network_requestmetrics_requests_total{")
            out["idle_scrape_ms"] = _idle_scrape_ms(port)
            out["view_poll_cpu_ms"] = _poll_cpu_ms(b.proc.pid, port, "/api/view")
            out["scrape_cpu_ms"] = _poll_cpu_ms(b.proc.pid, port, "/metrics")
            out["drain_cpu_s"] = cpu
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
        r.request((0, 11), (clock() - started) * 1000, errors)
    return (clock() - t0) / n * 1e6


def at_size(topics: int, groups: int) -> dict[str, Any]:
    """The endpoint's fixed costs on a broker with `topics` two-partition topics
    and `groups` classic and `groups` share groups (bench.groups' idle groups): the broker's idle
    CPU with the endpoint on (its lag sampler walks every group every 5 s), and the broker CPU of
    one /api/view poll and one /metrics scrape."""
    from bench.groups import populate
    from bench.partitions import Wire, create_topics

    with broker(True) as (b, port):
        assert port is not None
        wire = Wire(b.bootstrap)
        create_topics(wire, [f"size-{i:04d}" for i in range(topics)], 2)
        create_topics(wire, ["groups-bench"], 1)
        populate(wire, groups)
        wire.close()
        pid = b.proc.pid
        _scrape(port, "/api/view")  # the first poll warms what later ones reuse
        cpu0, idle_s = _cpu_seconds(pid), 15.0
        time.sleep(idle_s)
        idle_pct = (_cpu_seconds(pid) - cpu0) / idle_s * 100
        out = {"topics": topics, "partitions": 2 * topics + 1, "groups": 2 * groups, "idle_cpu_pct": idle_pct,
               "view_poll_cpu_ms": _poll_cpu_ms(pid, port, "/api/view", 10),
               "page_cpu_ms": _poll_cpu_ms(pid, port, "/", 10),
               "scrape_cpu_ms": _poll_cpu_ms(pid, port, "/metrics", 10)}
        print(f"at size ({out['partitions']} partitions, {out['groups']} groups): idle broker CPU with the endpoint "
              f"on {idle_pct:.2f}% of a core; one /api/view poll {out['view_poll_cpu_ms']:.1f} ms of broker CPU, "
              f"the page {out['page_cpu_ms']:.1f} ms, one scrape {out['scrape_cpu_ms']:.1f} ms", flush=True)
        return out


def event_cost_us(n: int = 100_000) -> float:
    """µs the live view adds to a share partition's acquisition or acknowledgement while it is on:
    the leader remembering one range event in its bounded history (in-process, as hook_cost_us)."""
    from collections import deque
    from types import SimpleNamespace

    from sharebroker.broker.clock import LoopClock
    from sharebroker.broker.share.leader import HISTORY_EVENTS, SharePartitionLeader

    leader = SimpleNamespace(clock=LoopClock(), history=deque(maxlen=HISTORY_EVENTS), trace=False)
    t0 = time.perf_counter()
    for i in range(n):
        SharePartitionLeader._event(leader, "accept", "member", i, i, 1)  # type: ignore[arg-type]
    return (time.perf_counter() - t0) / n * 1e6


def compare(name: str, fn: Callable[..., dict[str, Any]], n: int, runs: int, together: bool) -> dict[str, Any]:
    by_mode: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    for r in range(runs):
        if together:
            # Both brokers at once, each drained by its own clients, the drains started together
            # once both backlogs are written: whatever else the machine does falls on both alike.
            barrier = threading.Barrier(2)
            with ThreadPoolExecutor(2) as pool:
                futures = {mode: pool.submit(fn, mode == "on", n, barrier.wait) for mode in ("off", "on")}
                done = [(mode, futures[mode].result()) for mode in ("off", "on")]
        else:
            # One after the other, alternating which goes first, so a slow spell of the machine
            # is shared out evenly.
            done = [(mode, fn(mode == "on", n)) for mode in (("off", "on") if r % 2 == 0 else ("on", "off"))]
        for mode, res in done:
            by_mode[mode].append(res)
            extra = {k: v for k, v in res.items() if k not in ("rate", "cpu_us_per_record")}
            print(f"  {name:<8} metrics {mode:<3} run {r + 1}: {res['rate']:>10,.0f} /s  "
                  f"broker CPU {res['cpu_us_per_record']:6.2f} µs/record  {extra}", flush=True)
    summary: dict[str, Any] = {"runs": by_mode}
    for key in ("rate", "cpu_us_per_record"):
        off = statistics.median(x[key] for x in by_mode["off"])
        on = statistics.median(x[key] for x in by_mode["on"])
        # Each run's on/off pair ran together (or back to back): the median of their ratios is the
        # least noisy figure.
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
    ap.add_argument("--runs", type=int, default=5, help="runs per mode and workload")
    ap.add_argument("--backlog", type=int, default=1_000_000, help="records of the backlog drain (0 skips it)")
    ap.add_argument("--jobs", type=int, default=5000, help="jobs of the job-queue drain (0 skips it)")
    ap.add_argument("--scrape-every", type=float, default=1.0, help="seconds between scrapes (0: none)")
    ap.add_argument("--view-every", type=float, default=1.0, help="seconds between polls of the live view (0: none)")
    ap.add_argument("--one-at-a-time", dest="together", action="store_false",
                    help="run the off and on brokers one after the other instead of at the same time")
    ap.add_argument("--at-size", default="500,1000",
                    help="TOPICS,GROUPS: the endpoint's fixed costs on a broker that large ('' to skip)")
    ap.add_argument("--aa", action="store_true",
                    help="an A/A run: the 'on' broker without metrics too, for the method's own bias")
    ap.add_argument("--out", type=Path, default=None, help="write metrics_overhead.json into this folder")
    args = ap.parse_args(argv)
    global SCRAPE_EVERY_S, VIEW_EVERY_S, AA
    AA = args.aa
    SCRAPE_EVERY_S = args.scrape_every
    VIEW_EVERY_S = args.view_every
    results: dict[str, Any] = {}
    if args.backlog:
        results["backlog"] = compare("backlog", backlog_run, args.backlog, args.runs, args.together)
    if args.jobs:
        results["jobs"] = compare("jobs", jobs_run, args.jobs, args.runs, args.together)
    results["hook_cost_us_per_request"] = hook = hook_cost_us()
    if args.at_size:
        topics, groups = (int(x) for x in args.at_size.split(","))
        results["at_size"] = at_size(topics, groups)
    results["view_event_cost_us"] = event = event_cost_us()
    print(f"per-request hook cost with metrics on: {hook:.2f} µs; per range event the view keeps: {event:.2f} µs",
          flush=True)
    for name, res in results.items():
        if not isinstance(res, dict) or "runs" not in res:
            continue
        on = [run for run in res["runs"]["on"] if run.get("requests")]
        n = args.backlog if name == "backlog" else args.jobs
        if on:
            per_record = statistics.median(run["requests"] for run in on) / n
            res["requests_per_record"] = per_record
            print(f"{name}: {per_record:.4f} requests per record, so about {hook * per_record:.3f} µs of hooks per "
                  f"record against {res['cpu_us_per_record']['off']:.2f} µs of broker CPU per record "
                  f"({hook * per_record / res['cpu_us_per_record']['off'] * 100:.2f}%)", flush=True)
        if on and on[0].get("view_poll_cpu_ms") is not None:
            view_ms = statistics.median(run["view_poll_cpu_ms"] for run in on)
            scrape_ms = statistics.median(run["scrape_cpu_ms"] for run in on)
            # The broker's CPU rate while it drained (a fraction of one core), against what the
            # polls take per second of it: the fixed cost of an open tab and a scraper.
            busy = statistics.median(run["drain_cpu_s"] / (n / run["rate"]) for run in on)
            per_s = (view_ms / VIEW_EVERY_S if VIEW_EVERY_S > 0 else 0.0) + \
                (scrape_ms / SCRAPE_EVERY_S if SCRAPE_EVERY_S > 0 else 0.0)
            res["view_poll_cpu_ms"], res["scrape_cpu_ms"], res["busy_cores"] = view_ms, scrape_ms, busy
            print(f"{name}: one /api/view poll costs the broker {view_ms:.2f} ms of CPU, one scrape "
                  f"{scrape_ms:.2f} ms; at one poll per {VIEW_EVERY_S:g} s and one scrape per {SCRAPE_EVERY_S:g} s "
                  f"that is {per_s / 10:.2f}% of a core, against the {busy * 100:.0f}% of a core the broker used "
                  f"while draining ({per_s / 1000 / busy * 100:.2f}% of its CPU)", flush=True)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "metrics_overhead.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
