"""The benchmark runner behind `python -m bench` / `make bench`.

Every workload runs against a fresh `sharebroker serve` subprocess (sharebroker.testing.BrokerProcess)
with real confluent-kafka clients, each in its own process (multiprocessing, spawn). Only the
consume or produce phase is timed; set-up (topic creation, backlog production, process start,
group join) is not. Each figure is the median of `--runs` runs (at least 3) with min and max.

    python -m bench [--quick] [--runs N] [--only w1,w2,...] [--out DIR | --save]

The workloads: peer_disk, peer_mock, peer_mock_produce (the raw disk and librdkafka's mock cluster
as yardsticks); w1 share consume of a backlog, w2 share consume live (p50/p99), w3 produce, w4
classic fetch, w6 start-up (w5, memory, comes from w1's runs); and issue 24's counts: w7 the job
queue (1/8 consumers x max.poll.records 1/10/100, the mock cluster beside), w8 one share group of
1 to 1,000 members, w9 1 to 10,000 idle groups of each kind, w10 0 to 10,000 idle connections,
w11 1 to 100,000 partitions under ulimit -n 4096 (100,000 once), w12 the long run (bench.soak: 30
minutes, once; 2 with --quick), w13 1 against 2 worker processes (bench.workers).

A full run takes about 80 minutes on an otherwise quiet 2-core machine (w1-w6 with the peers about
5, w7 about 8, w8 about 13, w9-w10 about 5, w11 about 8, w12 31, w13 about 7); --quick about 25
(estimates from the workloads' sizes and --quick runs; more under load).

Results go to bench/out/ (ignored by git) or --out DIR: latest.json, latest.md and the charts
(throughput_vs_backlog, latency_percentiles, job_queue, members, groups, connections, partitions,
soak, workers; each drawn when its workloads ran). The committed figures in bench/results/ (which
the README quotes) change only with --save, from a full run of every workload.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import platform
import shutil
import statistics
import tempfile
import time
import traceback
from pathlib import Path
from collections.abc import Callable, Iterator
from typing import Any

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from bench import clients, startup
from sharebroker.testing import BrokerProcess

CTX = mp.get_context("spawn")
RESULTS = Path(__file__).parent / "results"  # committed: refreshed only with --save
SCRATCH = Path(__file__).parent / "out"  # ad-hoc runs (in .gitignore)
SHARE_TOPIC = "bench-share"
PARTITIONS = 4

SCALES = {
    "quick": {"backlogs": [10_000, 100_000], "mock_backlogs": [5_000, 20_000], "produce_records": 100_000,
              "classic_records": 100_000, "live_seconds": 5.0, "big_log_mb": 100, "disk_mib": 256,
              "jobs": 2_000, "members": [100, 1000], "groups": [1, 1000], "connections": [0, 100, 1000],
              "partitions": [1, 1000], "soak_minutes": 2.0, "soak_interval_s": 10.0,
              "workers": {"jobs": 500, "jobs100": 5_000, "backlog": 20_000}},
    "full": {"backlogs": [10_000, 100_000, 1_000_000], "mock_backlogs": [5_000, 10_000, 50_000],
             "produce_records": 1_000_000, "classic_records": 1_000_000, "live_seconds": 20.0, "big_log_mb": 1024,
             "disk_mib": 1024, "jobs": 10_000, "members": [1, 10, 100, 1000], "groups": [1, 1000, 10_000],
             "connections": [0, 1, 100, 1000, 10_000], "partitions": [1, 1000, 10_000, 100_000],
             "soak_minutes": 30.0, "soak_interval_s": 30.0,
             "workers": {"jobs": 2_000, "jobs100": 20_000, "backlog": 100_000}},
}


# --------------------------------------------------------------------------------------------
# helpers


def summarize(values: list[float]) -> dict[str, Any]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def child(target: Callable, *args: Any) -> Any:
    p = CTX.Process(target=target, args=args, daemon=True)
    p.start()
    return p


def run_for_result(target: Callable, *args: Any, timeout: float = 600) -> dict[str, Any]:
    """Run target(*args, queue) in a child process and return what it put on the queue."""
    q = CTX.Queue()
    p = child(target, *args, q)
    try:
        r = q.get(timeout=timeout)
    except Exception:
        p.terminate()
        raise RuntimeError(f"{target.__name__} gave no result in {timeout:.0f} s") from None
    p.join(30)
    if p.is_alive():
        p.terminate()
    if "error" in r:
        raise RuntimeError(r["error"])
    return r


def reap(procs: list, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.1, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.terminate()
            p.join(5)


def create_topic(bootstrap: str, topic: str, partitions: int, share_group: str | None = None) -> None:
    a = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    a.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)
    if share_group:
        res = ConfigResource(ResourceType.GROUP, share_group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        for fut in a.incremental_alter_configs([res]).values():
            fut.result(30)


class FreshBroker:
    """A broker subprocess on a fresh data directory, removed afterwards."""

    def __init__(self, fsync: bool = False, keep: Path | None = None) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="sharebroker-bench-", dir=keep))
        self.broker = BrokerProcess(self.tmp / "data", fsync=fsync)

    def __enter__(self) -> BrokerProcess:
        return self.broker.start()

    def __exit__(self, *exc: Any) -> None:
        try:
            self.broker.stop()
        except Exception:  # noqa: BLE001
            self.broker.kill()
        log = self.broker.log_text()
        if "Traceback" in log:
            print("  [broker log has a Traceback; last lines]\n" + log[-1500:])
        shutil.rmtree(self.tmp, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# share consume with a backlog (workload 1; also the mock peer)


def share_drain(bootstrap: str, n: int, consumers: int, group: str, timeout: float = 300) -> dict[str, Any]:
    per_partition = -(-n // PARTITIONS) + 1
    bitmaps = [CTX.RawArray("B", per_partition) for _ in range(PARTITIONS)]
    counters = CTX.RawArray("q", 4)
    marks = CTX.RawArray("d", 2)
    lock = CTX.Lock()
    stop = CTX.Event()
    procs = [child(clients.share_drain, bootstrap, SHARE_TOPIC, group, i, n, per_partition, bitmaps, counters, marks,
                   lock, stop) for i in range(consumers)]
    t_start = time.perf_counter()
    ok = stop.wait(timeout)
    stop.set()
    reap(procs)
    if not ok or marks[1] == 0.0:
        raise RuntimeError(f"share drain timed out after {timeout:.0f} s: distinct {counters[0]}/{n}, "
                           f"deliveries {counters[1]}, errors {counters[3]}")
    return {"rate": n / (marks[1] - marks[0]), "rate_from_start": n / (marks[1] - t_start),
            "seconds": marks[1] - marks[0], "join_seconds": marks[0] - t_start, "first_at": marks[0], "last_at": marks[1],
            "deliveries": counters[1], "redelivered": counters[2], "errors": counters[3]}


def w1_share_backlog(scale: dict, runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {"by_backlog": {}}
    rss_idle, rss_after = [], {}
    for n in scale["backlogs"]:
        rates, rates_start, extra = [], [], []
        rss_after[n] = []
        for r in range(runs):
            with FreshBroker() as b:
                pid = b.proc.pid
                time.sleep(0.5)
                rss_idle.append(rss_mb(pid))
                create_topic(b.bootstrap, SHARE_TOPIC, PARTITIONS, share_group="bench-share-group")
                run_for_result(clients.produce_backlog, b.bootstrap, SHARE_TOPIC, n, 100, PARTITIONS)
                res = share_drain(b.bootstrap, n, 4, "bench-share-group")
                rss_after[n].append(rss_mb(pid))
            rates.append(res["rate"])
            rates_start.append(res["rate_from_start"])
            extra.append({k: res[k] for k in ("seconds", "join_seconds", "deliveries", "redelivered", "errors")})
            print(f"  w1 backlog {n:>9,} run {r + 1}: {res['rate']:>10,.0f} rec/s "
                  f"(from consumer start {res['rate_from_start']:,.0f}; redelivered {res['redelivered']})", flush=True)
        out["by_backlog"][str(n)] = {"records_per_s": summarize(rates), "records_per_s_from_start": summarize(rates_start),
                                     "details": extra}
    out["rss_idle_mb"] = summarize(rss_idle)
    out["rss_after_mb"] = {str(n): summarize(v) for n, v in rss_after.items()}
    return out


@contextlib.contextmanager
def mock_cluster(topic: str) -> Iterator[str]:
    """librdkafka's mock cluster in its own process with `topic` created; yields its bootstrap."""
    q, stop = CTX.Queue(), CTX.Event()
    mock = child(clients.mock_cluster, topic, PARTITIONS, q, stop)
    try:
        info = q.get(timeout=30)
        if "error" in info:
            raise RuntimeError(info["error"])
        yield info["bootstrap"]
    finally:
        stop.set()
        reap([mock], 10)


def peer_mock(scale: dict, runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {"by_backlog": {}}
    for n in scale["mock_backlogs"]:
        rates, rates_start = [], []
        for r in range(runs):
            with mock_cluster(SHARE_TOPIC) as bootstrap:
                run_for_result(clients.produce_backlog, bootstrap, SHARE_TOPIC, n, 100, PARTITIONS)
                res = share_drain(bootstrap, n, 4, "bench-share-group", timeout=120)
            rates.append(res["rate"])
            rates_start.append(res["rate_from_start"])
            print(f"  mock backlog {n:>7,} run {r + 1}: {res['rate']:>10,.0f} rec/s", flush=True)
        out["by_backlog"][str(n)] = {"records_per_s": summarize(rates), "records_per_s_from_start": summarize(rates_start)}
    best = max(out["by_backlog"].items(), key=lambda kv: kv[1]["records_per_s"]["median"])
    out["best"] = {"backlog": int(best[0]), **best[1]["records_per_s"]}
    return out


def peer_mock_produce(scale: dict, runs: int, size: int = 1024) -> dict[str, Any]:
    """Workload 3's producer against the mock cluster: what one confluent-kafka producer process
    reaches on this machine when the broker costs next to nothing (the client's ceiling)."""
    n = scale["produce_records"]
    mbs = []
    for r in range(runs):
        with mock_cluster("bench-produce") as bootstrap:
            res = run_for_result(clients.produce_timed, bootstrap, "bench-produce", n, size)
        mbs.append(n * size / res["elapsed"] / 1e6)
        print(f"  mock produce run {r + 1}: {mbs[-1]:.1f} MB/s", flush=True)
    return {"record_bytes": size, "records": n, "mb_per_s": summarize(mbs)}


# --------------------------------------------------------------------------------------------
# the other workloads


def paced_latencies(bootstrap: str, topic: str, consumers: list[tuple[Callable, tuple]], rate: int,
                    warmup_s: float, seconds: float, linger_ms: int, settle_s: float, complete: bool = True
                    ) -> tuple[list[float], dict[str, Any], list[dict[str, Any]]]:
    """Start the consumer processes (each `target(*args, stop, received, out)`, putting a dict with
    "latencies_ms" of the records sent after the warm-up), produce `rate` records a second for
    `warmup_s` + `seconds` (clients.live_producer), wait up to `settle_s` for them all to be
    received, and return the sorted latencies, the producer's result (with "expected", the records
    measured) and the consumers' results. Records still missing then are an error, unless not
    `complete` (a peer that falls behind the rate is a result, not a failure)."""
    stop, received, q = CTX.Event(), CTX.Value("q", 0), CTX.Queue()
    procs = [child(target, *args, stop, received, q) for target, args in consumers]
    time.sleep(1.0)  # let the consumers join before the paced producer starts
    prod = run_for_result(clients.live_producer, bootstrap, topic, rate, warmup_s, seconds, 100, linger_ms,
                          timeout=seconds + 60)
    deadline = time.monotonic() + settle_s
    while received.value < prod["produced"] and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    results = [q.get(timeout=30) for _ in procs]
    reap(procs)
    errs = [x["error"] for x in results if "error" in x]
    if errs:
        raise RuntimeError("; ".join(errs))
    lat = sorted(v for x in results for v in x["latencies_ms"])
    expected = prod["expected"] = prod["produced"] - prod["warmup_records"]
    if complete and len(lat) < expected:
        raise RuntimeError(f"{topic}: {len(lat)}/{expected} measured records")
    return lat, prod, results


def percentiles(lat: list[float]) -> tuple[float, float, float]:
    """p50, p99 and max of sorted latencies."""
    return lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))], lat[-1]


def w2_share_live(scale: dict, runs: int, rate: int = 5000, warmup_s: float = 2.0, linger_ms: int = 5) -> dict[str, Any]:
    p50, p99, pmax, achieved = [], [], [], []
    for r in range(runs):
        with FreshBroker() as b:
            create_topic(b.bootstrap, "bench-live", PARTITIONS, share_group="bench-live-group")
            consumers = [(clients.live_consumer, (b.bootstrap, "bench-live", "bench-live-group", i,
                                                  int(rate * warmup_s))) for i in range(2)]
            lat, prod, _ = paced_latencies(b.bootstrap, "bench-live", consumers, rate, warmup_s,
                                           scale["live_seconds"], linger_ms, 10)
        for figures, value in zip((p50, p99, pmax), percentiles(lat)):
            figures.append(value)
        achieved.append(prod["achieved_rate"])
        print(f"  w2 run {r + 1}: p50 {p50[-1]:.2f} ms, p99 {p99[-1]:.2f} ms, max {pmax[-1]:.2f} ms "
              f"({len(lat):,} records, producer at {prod['achieved_rate']:,.0f}/s)", flush=True)
    return {"target_rate": rate, "producer_linger_ms": linger_ms, "warmup_s": warmup_s, "p50_ms": summarize(p50),
            "p99_ms": summarize(p99), "max_ms": summarize(pmax), "achieved_rate": summarize(achieved)}


def w2_share_live_linger0(scale: dict, runs: int) -> dict[str, Any]:
    """Workload 2 with a producer that does not linger: about one request per record, so the
    broker's cost per request rather than per byte is what is measured."""
    return w2_share_live(scale, runs, linger_ms=0)


def w3_produce(scale: dict, runs: int, size: int = 1024) -> dict[str, Any]:
    n = scale["produce_records"]
    out: dict[str, Any] = {"record_bytes": size, "records": n}
    for mode, fsync in (("default", False), ("fsync", True)):
        mbs, rps = [], []
        for r in range(runs):
            with FreshBroker(fsync=fsync) as b:
                create_topic(b.bootstrap, "bench-produce", PARTITIONS)
                res = run_for_result(clients.produce_timed, b.bootstrap, "bench-produce", n, size)
            mbs.append(n * size / res["elapsed"] / 1e6)
            rps.append(n / res["elapsed"])
            print(f"  w3 {mode} run {r + 1}: {mbs[-1]:.1f} MB/s, {rps[-1]:,.0f} rec/s", flush=True)
        out[mode] = {"mb_per_s": summarize(mbs), "records_per_s": summarize(rps)}
    return out


def w4_classic(scale: dict, runs: int) -> dict[str, Any]:
    n = scale["classic_records"]
    rates = []
    for r in range(runs):
        with FreshBroker() as b:
            create_topic(b.bootstrap, "bench-classic", PARTITIONS)
            run_for_result(clients.produce_backlog, b.bootstrap, "bench-classic", n, 100, PARTITIONS)
            res = run_for_result(clients.classic_drain, b.bootstrap, "bench-classic", PARTITIONS, n)
        rates.append(n / res["elapsed"])
        print(f"  w4 run {r + 1}: {rates[-1]:,.0f} rec/s", flush=True)
    return {"records": n, "records_per_s": summarize(rates)}


def w6_startup(scale: dict, runs: int) -> dict[str, Any]:
    empty = startup.measure(runs)
    fixture = startup.measure_fixture(runs)
    out: dict[str, Any] = {"empty_s": {"median": empty["median_s"], "min": empty["min_s"], "max": empty["max_s"]},
                           "fixture_s": {"median": fixture["median_s"], "min": fixture["min_s"], "max": fixture["max_s"]}}
    mb = scale["big_log_mb"]
    n_big = mb * 1024 * 1024 // 1024
    backlog = scale["backlogs"][-1]
    fb = FreshBroker()
    try:
        b = fb.broker.start()
        create_topic(b.bootstrap, "bench-biglog", PARTITIONS)
        run_for_result(clients.produce_backlog, b.bootstrap, "bench-biglog", n_big, 1024, PARTITIONS)
        # plus the share state of workload 1: a drained backlog through a share group
        create_topic(b.bootstrap, SHARE_TOPIC, PARTITIONS, share_group="bench-share-group")
        run_for_result(clients.produce_backlog, b.bootstrap, SHARE_TOPIC, backlog, 100, PARTITIONS)
        share_drain(b.bootstrap, backlog, 4, "bench-share-group")
        times = []
        for r in range(runs):
            if b.stop() != 0:
                raise RuntimeError("broker exit code not 0")
            b.start(timeout=120)
            times.append(b.start_seconds)
            print(f"  w6 restart with {mb} MB of log run {r + 1}: {times[-1] * 1000:.0f} ms", flush=True)
        log_bytes = sum(f.stat().st_size for f in b.data_dir.rglob("*.log"))
    finally:
        fb.__exit__(None, None, None)
    out["big_log_s"] = summarize(times)
    out["big_log_bytes"] = log_bytes
    out["share_backlog_drained"] = backlog
    return out


def peer_disk(scale: dict, runs: int) -> dict[str, Any]:
    """Raw sequential append: 1 MiB writes to a temp file on the broker's file system, one fsync."""
    mib = scale["disk_mib"]
    block = os.urandom(1 << 20)
    rates = []
    for _ in range(runs):
        fd, path = tempfile.mkstemp(prefix="bench-disk-")
        try:
            t0 = time.perf_counter()
            for _ in range(mib):
                os.write(fd, block)
            os.fsync(fd)
            rates.append(mib * (1 << 20) / (time.perf_counter() - t0) / 1e6)
        finally:
            os.close(fd)
            os.unlink(path)
        print(f"  disk append {mib} MiB: {rates[-1]:.0f} MB/s", flush=True)
    return {"mib": mib, "mb_per_s": summarize(rates)}


# --------------------------------------------------------------------------------------------
# counts (issue 24): job queue, members, groups, connections, partitions


def w7_jobs(scale: dict, runs: int) -> dict[str, Any]:
    """The job queue, explicit ACCEPT per job: 1 and 8 consumers x max.poll.records 1/10/100,
    sharebroker and the mock cluster side by side in each run."""
    from bench import job_queue

    out: dict[str, Any] = {}
    n = scale["jobs"]
    for consumers in (1, 8):
        for max_poll in (1, 10, 100):
            key = f"{consumers}x{max_poll}"
            ours, mock = [], []
            for _ in range(runs):
                ours.append(job_queue.run_sharebroker(n, consumers, max_poll))
                mock.append(job_queue.run_mock(n, consumers, max_poll))
            r = out[key] = {"consumers": consumers, "max_poll_records": max_poll, "jobs": n,
                            "jobs_per_s": summarize([x["jobs_per_s"] for x in ours]),
                            "mock_jobs_per_s": summarize([x["jobs_per_s"] for x in mock])}
            # CPU per job: the server's process and the consumers' own (bench.job_queue)
            for prefix, res in (("", ours), ("mock_", mock)):
                for field in ("server_cpu_us_per_job", "client_cpu_us_per_job"):
                    r[prefix + field] = summarize([x[field] for x in res])
            print(f"  jobs {key}: {r['jobs_per_s']['median']:,.0f}/s "
                  f"(mock {r['mock_jobs_per_s']['median']:,.0f}/s); CPU µs/job: broker "
                  f"{r['server_cpu_us_per_job']['median']:,.0f}, its clients {r['client_cpu_us_per_job']['median']:,.0f}; "
                  f"mock {r['mock_server_cpu_us_per_job']['median']:,.0f}, its clients "
                  f"{r['mock_client_cpu_us_per_job']['median']:,.0f}", flush=True)
    return out


def w7_job_latency(scale: dict, runs: int) -> dict[str, Any]:
    """The job queue's produce-to-acknowledged latency at 5,000 jobs/s (bench.job_latency: one
    job per record, 4 explicit-ack ShareConsumers, commit_sync after each poll), the mock beside."""
    from bench import job_latency

    return job_latency.run(5000, scale["live_seconds"], 4, 100, runs)


def w8_members(scale: dict, runs: int) -> dict[str, Any]:
    """One share group of N members (raw heartbeats): settle time after a join storm, steady
    heartbeat latency and CPU per heartbeat."""
    from bench import share_members

    out: dict[str, Any] = {}
    for n in scale["members"]:
        # members paced as KafkaShareConsumer, from 4 generator processes (see bench.share_members)
        got = [share_members.run_one(n, 4, 10.0, 45.0) for _ in range(runs)]
        out[str(n)] = {k: summarize([g[k] for g in got]) for k in ("settled_s", "after_storm_s", "p50_ms", "p99_ms",
                                                                    "cpu_us_per_heartbeat", "runqueue_wait_ms_per_s")}
        print(f"  members {n}: settled {out[str(n)]['settled_s']['median']:.1f} s, "
              f"p99 {out[str(n)]['p99_ms']['median']:.1f} ms", flush=True)
    return out


def w9_groups(scale: dict, runs: int) -> dict[str, Any]:
    """N idle classic and N idle share groups: the broker's idle CPU, RSS, an active group's
    latencies beside them, restart."""
    from bench import groups

    out: dict[str, Any] = {}
    for n in scale["groups"]:
        got = [groups.run(n, 5.0) for _ in range(runs)]
        out[str(n)] = {k: summarize([g[k] for g in got]) for k in ("idle_cpu_pct", "rss_mb", "hb_p99", "commit_p99",
                                                                    "restart_s")}
        print(f"  groups {n}: idle CPU {out[str(n)]['idle_cpu_pct']['median']:.1f}%, "
              f"restart {out[str(n)]['restart_s']['median']:.2f} s", flush=True)
    return out


def w10_connections(scale: dict, runs: int) -> dict[str, Any]:
    """Idle connections: broker memory (RSS, and per connection) and an active client's produce latency."""
    from bench import connections

    out: dict[str, Any] = {}
    for _ in range(runs):
        for row in connections.measure(scale["connections"], 2000):
            entry = out.setdefault(str(row["idle"]), {"rss_mb": [], "kb_per_conn": [], "p50_ms": [], "p99_ms": []})
            for k in entry:
                entry[k].append(row[k])
    got = {n: {k: summarize(v) for k, v in e.items()} for n, e in out.items()}
    for n, r in got.items():
        print(f"  connections {int(n):>6,}: RSS {r['rss_mb']['median']:.1f} MB, {r['kb_per_conn']['median']:.1f} KB each, "
              f"produce p99 {r['p99_ms']['median']:.2f} ms", flush=True)
    return got


def w11_partitions(scale: dict, runs: int) -> dict[str, Any]:
    """Partitions under ulimit -n 4096: creation (and another client's round trips meanwhile),
    Metadata(all), RSS and descriptors after creation and after a restart, the restart itself.
    100,000 partitions run once (each run is minutes)."""
    from bench import partitions

    out: dict[str, Any] = {}
    keys = ("create_s", "busy_p50_ms", "busy_max_ms", "metadata_p50_ms", "metadata_p99_ms", "rss_mb", "fds", "restart_s",
            "after_restart_rss_mb", "after_restart_fds")
    for n in scale["partitions"]:
        got = [partitions.run(n, 4096, min(1000, n), 20, {}) for _ in range(1 if n >= 100_000 else runs)]
        out[str(n)] = {k: summarize([g[k] for g in got if k in g]) for k in keys if any(k in g for g in got)}
        if errors := [g["error"] for g in got if "error" in g]:
            out[str(n)]["errors"] = errors
        print(f"  partitions {n}: " + ", ".join(f"{k} {v['median']:.1f}" for k, v in out[str(n)].items()
                                                 if k != "errors") + "".join(f"; {e}" for e in errors), flush=True)
    return out


def w12_soak(scale: dict, runs: int) -> dict[str, Any]:
    """The long run (bench.soak): produce at 500 records/s, a classic group, two explicit-ack share
    consumers accepting, releasing and rejecting, for 30 minutes (2 with --quick), once: its figures
    are the first minute beside the last, and the samples over time."""
    from bench import soak

    res = soak.run(scale["soak_minutes"], 500, scale["soak_interval_s"], show=False)
    rows = res["rows"]
    start = [r for r in rows if r["min"] <= 1][-1:] or rows[:1]  # the sample at the end of the first minute
    first, last = start[0], rows[-1]
    out: dict[str, Any] = {k: res[k] for k in ("minutes", "rate", "interval_s", "delivered", "rows")}
    for key, name in (("rss", "rss_mb"), ("fds", "fds"), ("state", "share_state_mb"), ("offsets", "consumer_offsets_mb"),
                      ("index", "index_mb")):
        out[name] = {"start": first[key], "end": last[key], "change": last[key] - first[key],
                     "start_min": first["min"], "end_min": last["min"]}
    out["p99_ms"] = {"start": res["first_minute_p99_ms"], "end": res["last_minute_p99_ms"],
                     "change": res["last_minute_p99_ms"] - res["first_minute_p99_ms"]}
    print(f"  soak {res['minutes']:g} min at {res['rate']}/s ({res['delivered']:,} delivered): "
          + ", ".join(f"{k} {out[k]['start']:.1f} -> {out[k]['end']:.1f}"
                      for k in ("rss_mb", "fds", "share_state_mb", "consumer_offsets_mb", "p99_ms")), flush=True)
    return out


def w13_workers(scale: dict, runs: int) -> dict[str, Any]:
    """1 worker process against 2 (worker.processes, experimental; bench.workers): the job queue
    (4 partitions, 8 consumers, max.poll.records 1 and 100), share consume of a backlog, start-up
    and idle memory; the worker counts alternate run by run, each run on a fresh broker. Beside
    each rate, the broker's CPU (all its processes) per job or record."""
    from bench import workers

    sizes = scale["workers"]
    counts = (1, 2)
    out: dict[str, Any] = {"sizes": sizes, "by_workers": {str(w): {} for w in counts}}
    starts: dict[int, list[dict[str, Any]]] = {w: [] for w in counts}
    for _ in range(runs):
        for w in counts:
            starts[w].append(workers.start_up(w, runs=1))
    for w in counts:
        out["by_workers"][str(w)]["start_up"] = {k: summarize([s[k] for s in starts[w]])
                                                 for k in ("start_s", "restart_s", "idle_rss_mb", "idle_pss_mb")}
    phases = (("job_queue_mpr1", "jobs_per_s", "cpu_us_per_job", lambda w: workers.job_queue(w, sizes["jobs"], 8, 1)),
              ("job_queue_mpr100", "jobs_per_s", "cpu_us_per_job",
               lambda w: workers.job_queue(w, sizes["jobs100"], 8, 100)),
              ("share_backlog", "records_per_s", "cpu_us_per_record",
               lambda w: workers.share_backlog(w, sizes["backlog"])))
    for label, rate, cpu, measure in phases:
        got: dict[int, list[dict[str, Any]]] = {w: [] for w in counts}
        for _ in range(runs):
            for w in counts:
                got[w].append(measure(w))
        for w in counts:
            out["by_workers"][str(w)][label] = {"rate": summarize([g[rate] for g in got[w]]),
                                                "cpu_us": summarize([g[cpu] for g in got[w]]),
                                                "rss_mb": summarize([g["rss_mb"] for g in got[w]]),
                                                "unit": rate}
        print(f"  workers {label}: " + "; ".join(
            f"{w}: {out['by_workers'][str(w)][label]['rate']['median']:,.0f} {rate.replace('_per_s', '/s')}, "
            f"{out['by_workers'][str(w)][label]['cpu_us']['median']:.1f} µs CPU each" for w in counts), flush=True)
    for w in counts:
        su = out["by_workers"][str(w)]["start_up"]
        print(f"  workers {w}: start-up {su['start_s']['median']:.2f} s, idle RSS {su['idle_rss_mb']['median']:.0f} MB "
              f"(PSS {su['idle_pss_mb']['median']:.0f} MB)", flush=True)
    return out


WORKLOADS: dict[str, Callable[[dict, int], dict[str, Any]]] = {
    "peer_disk": peer_disk,
    "peer_mock": peer_mock,
    "peer_mock_produce": peer_mock_produce,
    "w1_share_backlog": w1_share_backlog,
    "w2_share_live": w2_share_live,
    "w2_share_live_linger0": w2_share_live_linger0,
    "w3_produce": w3_produce,
    "w4_classic": w4_classic,
    "w6_startup": w6_startup,
    "w7_jobs": w7_jobs,
    "w7_job_latency": w7_job_latency,
    "w8_members": w8_members,
    "w9_groups": w9_groups,
    "w10_connections": w10_connections,
    "w11_partitions": w11_partitions,
    "w12_soak": w12_soak,
    "w13_workers": w13_workers,
}


def output_dir(ap: argparse.ArgumentParser, args: argparse.Namespace) -> Path:
    """bench/out unless --out; bench/results only with --save, and only for a full run."""
    if not args.save:
        return args.out or SCRATCH
    if args.out is not None:
        ap.error("--save writes bench/results; it does not take --out")
    if args.quick or args.only:
        ap.error("--save refreshes the committed figures from a full run of every workload: "
                 "drop --quick and --only")
    return RESULTS


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="reduced scale (about 25 minutes for every workload)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated subset of: " + ", ".join(WORKLOADS))
    ap.add_argument("--out", type=Path, help="where the results go (default: bench/out, ignored by git)")
    ap.add_argument("--save", action="store_true",
                    help="refresh the committed figures in bench/results (a full run of every workload)")
    return ap


def main(argv: list[str] | None = None) -> None:
    from bench import report

    ap = build_parser()
    args = ap.parse_args(argv)
    out = output_dir(ap, args)
    runs = max(3, args.runs)
    mode = "quick" if args.quick else "full"
    scale = SCALES[mode]
    chosen = [w for w in WORKLOADS if not args.only or w in args.only.split(",")]
    results: dict[str, Any] = {
        "mode": mode, "runs": runs, "scale": scale, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "workloads": {}, "errors": {}}
    t0 = time.perf_counter()
    for name in chosen:
        print(f"== {name}", flush=True)
        w0 = time.perf_counter()
        try:
            results["workloads"][name] = WORKLOADS[name](scale, runs)
        except Exception as e:  # noqa: BLE001 - a failed workload is reported, the others still run
            results["errors"][name] = f"{type(e).__name__}: {e}"
            print(f"  FAILED: {e}\n{traceback.format_exc()}", flush=True)
        print(f"  ({time.perf_counter() - w0:.0f} s)", flush=True)
    results["wall_seconds"] = time.perf_counter() - t0
    report.write(results, out)
