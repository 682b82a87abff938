"""1 worker process against 2 (worker.processes, experimental; README "More than one core"), side
by side in one run, each on a fresh broker:

- job queue: 4 partitions, jobs produced one per batch, 8 explicit-acknowledgement ShareConsumers
  (own processes) that ACCEPT each job, with max.poll.records=1 and =100;
- share consume of a backlog: 4 partitions, 100-byte records, 4 implicit-acknowledgement
  ShareConsumers (bench.run's workload 1 drain);
- start-up (to the ready file) and resident memory (supervisor and workers summed) idle and after.

Besides the rates, each run reports the broker's CPU seconds over the timed phase (every broker
process summed) per job or record: on a shared machine the rate follows whatever else runs, the
CPU a job costs much less so.

    python -m bench.workers [--workers 1,2] [--jobs 4000] [--jobs100 40000] [--backlog 100000] [--runs 3] [--out DIR]

Each figure is the median of --runs runs (min–max beside it), the worker counts alternating run by run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from bench import clients
from bench import job_queue as bench_job_queue
from bench.run import PARTITIONS, SHARE_TOPIC, create_topic, rss_mb, run_for_result, share_drain
from sharebroker.testing import BrokerProcess

JOBS = bench_job_queue.TOPIC
GROUP = bench_job_queue.GROUP


def _pids(root: int) -> list[int]:
    """The broker's processes: the one started, and its children (the workers)."""
    pids = [root]
    try:
        for task in os.listdir(f"/proc/{root}/task"):
            pids += [int(c) for c in Path(f"/proc/{root}/task/{task}/children").read_text().split()]
    except OSError:
        pass
    return pids


def cpu_seconds(root: int) -> float:
    total = 0.0
    for pid in _pids(root):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def rss_total_mb(root: int) -> float:
    return sum(rss_mb(pid) for pid in _pids(root))


def pss_total_mb(root: int) -> float:
    """Proportional set size summed: pages the forked workers share with the supervisor count once."""
    total = 0
    for pid in _pids(root):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1])
    return total / 1024


@contextmanager
def fresh_broker(workers: int) -> Iterator[BrokerProcess]:
    tmp = Path(tempfile.mkdtemp(prefix="sharebroker-bench-workers-"))
    broker = BrokerProcess(tmp / "data", {"worker.processes": workers})
    try:
        yield broker.start(timeout=60)
    finally:
        try:
            broker.stop()
        except Exception:  # noqa: BLE001
            broker.kill()
        if "Traceback" in broker.log_text():
            print("  [broker log has a Traceback; last lines]\n" + broker.log_text()[-1500:])
        shutil.rmtree(tmp, ignore_errors=True)


def job_queue(workers: int, n: int, consumers: int, max_poll: int) -> dict[str, Any]:
    with fresh_broker(workers) as b:
        create_topic(b.bootstrap, JOBS, PARTITIONS, share_group=GROUP)
        run_for_result(partial(bench_job_queue.produce_jobs, partitions=PARTITIONS), b.bootstrap, n)
        cpu0 = cpu_seconds(b.proc.pid)
        res = bench_job_queue.drain(b.bootstrap, n, consumers, max_poll=max_poll, partitions=PARTITIONS)
        cpu = cpu_seconds(b.proc.pid) - cpu0
        return {"jobs": n, "consumers": consumers, "max_poll_records": max_poll, "jobs_per_s": round(res["jobs_per_s"]),
                "seconds": round(res["seconds"], 2), "redelivered": res["redelivered"], "broker_cpu_s": round(cpu, 2),
                "cpu_us_per_job": round(cpu / n * 1e6, 1), "rss_mb": round(rss_total_mb(b.proc.pid), 1)}


def share_backlog(workers: int, n: int) -> dict[str, Any]:
    with fresh_broker(workers) as b:
        create_topic(b.bootstrap, SHARE_TOPIC, PARTITIONS, share_group="bench-share-group")
        run_for_result(clients.produce_backlog, b.bootstrap, SHARE_TOPIC, n, 100, PARTITIONS)
        cpu0 = cpu_seconds(b.proc.pid)
        res = share_drain(b.bootstrap, n, 4, "bench-share-group")
        cpu = cpu_seconds(b.proc.pid) - cpu0
        return {"records": n, "records_per_s": round(res["rate"]), "seconds": round(res["seconds"], 2),
                "redelivered": res["redelivered"], "broker_cpu_s": round(cpu, 2),
                "cpu_us_per_record": round(cpu / n * 1e6, 2), "rss_mb": round(rss_total_mb(b.proc.pid), 1)}


def start_up(workers: int, runs: int = 3) -> dict[str, Any]:
    starts, restarts, rss, pss = [], [], [], []
    for _ in range(runs):
        with fresh_broker(workers) as b:
            starts.append(b.start_seconds)
            time.sleep(0.5)
            rss.append(rss_total_mb(b.proc.pid))
            pss.append(pss_total_mb(b.proc.pid))
            b.restart()
            restarts.append(b.start_seconds)

    def median(values: list[float]) -> float:
        return round(sorted(values)[len(values) // 2], 3)

    return {"start_s": median(starts), "restart_s": median(restarts), "idle_rss_mb": median(rss),
            "idle_pss_mb": median(pss), "processes": workers + (1 if workers > 1 else 0)}


def _median_run(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The run with the median `key`, with the range of `key` and of the CPU figures over all runs."""
    ordered = sorted(runs, key=lambda r: r[key])
    out = dict(ordered[len(ordered) // 2])
    out["runs"] = runs
    out[f"{key}_range"] = (ordered[0][key], ordered[-1][key])
    cpu = next(k for k in ("cpu_us_per_job", "cpu_us_per_record") if k in out)
    out[f"{cpu}_range"] = (min(r[cpu] for r in runs), max(r[cpu] for r in runs))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--jobs", type=int, default=4000, help="jobs drained with max.poll.records=1")
    ap.add_argument("--jobs100", type=int, default=40000, help="jobs drained with max.poll.records=100")
    ap.add_argument("--backlog", type=int, default=100_000, help="records of the share-consume backlog")
    ap.add_argument("--consumers", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="write workers.json into this folder")
    args = ap.parse_args(argv)
    counts = [int(w) for w in args.workers.split(",")]
    results: dict[str, Any] = {"load_avg": os.getloadavg(), "cpus": os.cpu_count(), "by_workers": {}}
    for w in counts:
        r = results["by_workers"][str(w)] = {"start_up": start_up(w)}
        su = r["start_up"]
        print(f"workers={w}: start-up {su['start_s']:.2f} s (restart {su['restart_s']:.2f} s), idle RSS "
              f"{su['idle_rss_mb']:.0f} MB, PSS {su['idle_pss_mb']:.0f} MB ({su['processes']} processes)", flush=True)
    for label, n, max_poll in (("job_queue_mpr1", args.jobs, 1), ("job_queue_mpr100", args.jobs100, 100)):
        runs: dict[int, list[dict[str, Any]]] = {w: [] for w in counts}
        for _ in range(args.runs):
            for w in counts:
                runs[w].append(job_queue(w, n, args.consumers, max_poll))
        for w in counts:
            res = results["by_workers"][str(w)][label] = _median_run(runs[w], "jobs_per_s")
            lo, hi = res["jobs_per_s_range"]
            clo, chi = res["cpu_us_per_job_range"]
            print(f"workers={w}: job queue max.poll.records={max_poll:<3} {res['jobs_per_s']:>8,} jobs/s ({lo:,}–{hi:,}; "
                  f"{n:,} jobs, {args.consumers} consumers, redelivered {res['redelivered']}), "
                  f"broker CPU {res['cpu_us_per_job']} µs/job ({clo}–{chi}), RSS {res['rss_mb']:.0f} MB", flush=True)
    runs = {w: [] for w in counts}
    for _ in range(args.runs):
        for w in counts:
            runs[w].append(share_backlog(w, args.backlog))
    for w in counts:
        res = results["by_workers"][str(w)]["share_backlog"] = _median_run(runs[w], "records_per_s")
        lo, hi = res["records_per_s_range"]
        clo, chi = res["cpu_us_per_record_range"]
        print(f"workers={w}: share consume of {args.backlog:,} records {res['records_per_s']:>9,} rec/s ({lo:,}–{hi:,}), "
              f"broker CPU {res['cpu_us_per_record']} µs/record ({clo}–{chi}), RSS {res['rss_mb']:.0f} MB", flush=True)
    results["load_avg_after"] = os.getloadavg()
    print(f"load average before {results['load_avg'][0]:.1f}, after {results['load_avg_after'][0]:.1f} "
          f"on {results['cpus']} CPUs (shared: figures are under contention)")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "workers.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
