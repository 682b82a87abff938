"""The plain job-queue workload (issue 10): jobs produced one at a time (linger.ms=0, one record
per batch) into a single-partition topic, then drained by explicit-acknowledgement ShareConsumers
with max.poll.records=1 that ACCEPT every job. Run against sharebroker and librdkafka's mock
cluster in the same run, at several backlog sizes, so the figure that matters is visible: the rate
must not fall as the backlog grows.

    python -m bench.job_queue [--backlogs 2000,5000,10000] [--consumers 1] [--wide 8:20000]

Only the drain is timed (first delivery to last distinct job). Beside the rate each run gives
the CPU a job costs: the server's (the broker's or the mock's process, from the first delivery
to the last job) and the consumers' own (each consumer process, librdkafka's threads
included, from its first delivery to the end), which says whether the clients themselves could
go faster on this machine. Results are printed and, with --out DIR, written as JSON there (never
into the tree by default).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from bench.cpu import cpu_seconds, ticks_cpu_seconds
from bench import clients
from bench.run import CTX, FreshBroker, child, create_topic, reap, run_for_result

TOPIC = "jobs"
GROUP = "workers"


def produce_jobs(bootstrap: str, n: int, out, partitions: int = 1) -> None:
    """Untimed set-up: n jobs round-robin over the partitions, each its own batch (linger.ms=0,
    batch.num.messages=1)."""
    try:
        failed = [0]
        p = clients.make_producer(bootstrap, failed, **{"linger.ms": 0, "batch.num.messages": 1, "acks": 1})
        for i in range(n):
            clients.produce_when_room(p, TOPIC, b"job-%d" % i, 0.005, partition=i % partitions)
            if i % 1000 == 0:
                p.poll(0)
        left = p.flush(300)
        out.put({"error": f"{left} undelivered, {failed[0]} failed"} if left or failed[0] else {"ok": True})
    except Exception as e:  # noqa: BLE001 - reported to the runner
        out.put({"error": f"produce jobs: {e!r}"})


def worker(bootstrap: str, index: int, n: int, per_partition: int, bitmaps, counters, marks, lock, stop,
           max_poll: int = 1, cpu=None) -> None:
    """One explicit-ack worker: poll up to `max_poll` jobs, ACCEPT each. bitmaps = a job seen, per
    partition and offset; counters = [distinct, deliveries, redelivered]; marks = [first delivery,
    drained]; cpu[0] += this process's CPU seconds from its first delivery to the end."""
    cpu_from = None
    with clients.share_consumer(bootstrap, GROUP, f"worker-{index}", TOPIC,
                                **{"share.acknowledgement.mode": "explicit", "max.poll.records": max_poll}) as c:
        for msgs in clients.polls(c, stop, 0.2):
            if cpu_from is None and msgs:
                cpu_from = time.process_time()  # every thread of the process: librdkafka's too
            now = time.perf_counter()
            for m in msgs:
                if m.error() is None:
                    c.acknowledge(m)
            with lock:
                if marks[0] == 0.0:
                    marks[0] = now
                for m in msgs:
                    if m.error() is not None:
                        continue
                    counters[1] += 1
                    part, off = m.partition(), m.offset()
                    if part < len(bitmaps) and off < per_partition and not bitmaps[part][off]:
                        bitmaps[part][off] = 1
                        counters[0] += 1
                    else:
                        counters[2] += 1
                if counters[0] >= n and marks[1] == 0.0:
                    marks[1] = time.perf_counter()
                    stop.set()
        if cpu is not None and cpu_from is not None:
            used = time.process_time() - cpu_from
            with lock:
                cpu[0] += used
        clients.commit_quietly(c)


def drain(bootstrap: str, n: int, consumers: int, timeout: float = 600, max_poll: int = 1,
          partitions: int = 1, server_pid: int | None = None) -> dict[str, Any]:
    """Drain n jobs with `consumers` workers; with `server_pid`, also that process's CPU per job
    from the first delivery to the last job (read within a millisecond of each)."""
    per_partition = -(-n // partitions) + 1
    bitmaps = [CTX.RawArray("B", per_partition) for _ in range(partitions)]
    counters = CTX.RawArray("q", 3)
    marks = CTX.RawArray("d", 2)
    cpu = CTX.RawArray("d", 1)
    lock, stop = CTX.Lock(), CTX.Event()
    procs = [child(worker, bootstrap, i, n, per_partition, bitmaps, counters, marks, lock, stop, max_poll, cpu)
             for i in range(consumers)]
    server_from = 0.0
    if server_pid is not None:
        deadline = time.monotonic() + timeout
        while marks[0] == 0.0 and not stop.is_set() and time.monotonic() < deadline:
            time.sleep(0.001)
        server_from = cpu_seconds(server_pid)
    ok = stop.wait(timeout)
    server_used = cpu_seconds(server_pid) - server_from if server_pid is not None else None
    stop.set()
    reap(procs)
    if not ok or marks[1] == 0.0:
        raise RuntimeError(f"drain timed out: {counters[0]}/{n} jobs")
    secs = marks[1] - marks[0]
    return {"jobs": n, "consumers": consumers, "max_poll_records": max_poll, "seconds": round(secs, 3), "jobs_per_s": round(n / secs, 1),
            "first_at": marks[0], "last_at": marks[1],
            "deliveries": counters[1], "redelivered": counters[2],
            "client_cpu_us_per_job": round(cpu[0] / n * 1e6, 1),
            **({"server_cpu_us_per_job": round(server_used / n * 1e6, 1)} if server_used is not None else {})}


def run_sharebroker(n: int, consumers: int, max_poll: int = 1) -> dict[str, Any]:
    with FreshBroker() as b:
        create_topic(b.bootstrap, TOPIC, 1, share_group=GROUP)
        run_for_result(produce_jobs, b.bootstrap, n)
        res = drain(b.bootstrap, n, consumers, max_poll=max_poll, server_pid=b.proc.pid)
        res["broker_cpu_s"] = round(ticks_cpu_seconds(b.proc.pid), 2)
        return res


def run_mock(n: int, consumers: int, max_poll: int = 1) -> dict[str, Any]:
    q, stop = CTX.Queue(), CTX.Event()
    mock = child(clients.mock_cluster, TOPIC, 1, q, stop)
    try:
        info = q.get(timeout=30)
        if "error" in info:
            raise RuntimeError(info["error"])
        run_for_result(produce_jobs, info["bootstrap"], n)
        return drain(info["bootstrap"], n, consumers, max_poll=max_poll, server_pid=info["pid"])
    finally:
        stop.set()
        reap([mock], 10)



def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backlogs", default="2000,5000,10000", help="jobs per run with --consumers workers")
    ap.add_argument("--consumers", type=int, default=1)
    ap.add_argument("--wide", default="8:20000", help="CONSUMERS:JOBS for the many-workers run ('' to skip)")
    ap.add_argument("--peers", default="sharebroker,mock")
    ap.add_argument("--max-poll-records", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="write results.json into this folder")
    args = ap.parse_args(argv)
    runs = [(args.consumers, int(n)) for n in args.backlogs.split(",") if n]
    if args.wide:
        k, n = args.wide.split(":")
        runs.append((int(k), int(n)))
    peers = {"sharebroker": run_sharebroker, "mock": run_mock}
    results: list[dict[str, Any]] = []
    print(f"{'peer':<12} {'workers':>7} {'jobs':>7} {'jobs/s':>9} {'seconds':>8} {'redeliv':>7} "
          f"{'server µs/job':>13} {'clients µs/job':>14}  broker CPU s")
    for consumers, n in runs:
        for name in args.peers.split(","):
            res = peers[name](n, consumers, args.max_poll_records)
            res["peer"] = name
            results.append(res)
            print(f"{name:<12} {consumers:>7} {n:>7} {res['jobs_per_s']:>9,.0f} {res['seconds']:>8.2f} "
                  f"{res['redelivered']:>7} {res['server_cpu_us_per_job']:>13,.0f} {res['client_cpu_us_per_job']:>14,.0f}"
                  f"  {res.get('broker_cpu_s', '')}", flush=True)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "job_queue.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
