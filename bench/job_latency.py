"""Job-queue latency (issue 24): jobs produced at a steady rate (default 5,000 jobs/s, one job per
record, `linger.ms=0`) into a 4-partition topic, taken by explicit-acknowledgement ShareConsumers
that ACCEPT each job and commit the acknowledgements at once (`commit_sync` after every poll). A
job's latency is from its `produce()` call to the return of the `commit_sync` that acknowledged it:
produce-to-acknowledged, the broker having written the acknowledgement to `__share_group_state`.
sharebroker and librdkafka's mock cluster run the same workload in one invocation.

    python -m bench.job_latency [--rate 5000] [--seconds 10] [--consumers 4] [--max-poll-records 100]
                                [--runs 3] [--peers sharebroker,mock] [--out DIR]

Jobs of the first two seconds are a warm-up and left out. Results are printed and, with --out DIR,
written as JSON there (never into the tree by default).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from bench import clients
from bench.run import CTX, FreshBroker, child, create_topic, paced_latencies, percentiles, reap, summarize

TOPIC = "jobs-latency"
GROUP = "latency-workers"
PARTITIONS = 4
SETTLE_S = 30.0  # how long after the last produce the jobs may take to be acknowledged
WARMUP_S = 2.0


def acking_consumer(bootstrap: str, index: int, max_poll: int, warmup_records: int, stop, received, out) -> None:
    """Explicit-ack worker: ACCEPT each job of a poll, then commit_sync; the latency of each job
    measured after the warm-up is noted when the commit returns."""
    lat: list[float] = []
    failed = 0
    try:
        with clients.share_consumer(bootstrap, GROUP, f"latency-{index}", TOPIC,
                                    **{"share.acknowledgement.mode": "explicit", "max.poll.records": max_poll}) as c:
            for msgs in clients.polls(c, stop, 0.05):
                sent: list[int] = []
                for m in msgs:
                    if m.error() is not None:
                        continue
                    c.acknowledge(m)
                    seq, at = clients.LIVE_HEADER.unpack_from(m.value())
                    if seq >= warmup_records:
                        sent.append(at)
                try:
                    c.commit_sync(10)
                except Exception:  # noqa: BLE001 - counted: an acknowledgement the broker refused
                    failed += 1
                    continue
                done = time.monotonic_ns()
                lat.extend((done - at) / 1e6 for at in sent)
                with received.get_lock():
                    received.value += len(msgs)
        out.put({"latencies_ms": lat, "failed_commits": failed})
    except Exception as e:  # noqa: BLE001 - reported to the runner
        out.put({"error": f"latency consumer {index}: {e!r}", "latencies_ms": lat, "failed_commits": failed})


def _measure(bootstrap: str, rate: int, seconds: float, consumers: int, max_poll: int) -> dict[str, Any]:
    warmup_records = int(rate * WARMUP_S)
    lat, prod, results = paced_latencies(
        bootstrap, TOPIC, [(acking_consumer, (bootstrap, i, max_poll, warmup_records)) for i in range(consumers)],
        rate, WARMUP_S, seconds, 0, SETTLE_S, complete=False)
    p50, p99, pmax = percentiles(lat)
    # A peer slower than the rate leaves jobs unacknowledged at the deadline: its percentiles are of
    # those it did acknowledge, so they flatter it; the fraction says how far behind it fell.
    return {"jobs": len(lat), "achieved_rate": prod["achieved_rate"], "p50_ms": p50, "p99_ms": p99, "max_ms": pmax,
            "acknowledged": len(lat) / prod["expected"], "failed_commits": sum(r["failed_commits"] for r in results)}


def run_sharebroker(rate: int, seconds: float, consumers: int, max_poll: int) -> dict[str, Any]:
    with FreshBroker() as b:
        create_topic(b.bootstrap, TOPIC, PARTITIONS, share_group=GROUP)
        return _measure(b.bootstrap, rate, seconds, consumers, max_poll)


def run_mock(rate: int, seconds: float, consumers: int, max_poll: int) -> dict[str, Any]:
    q, stop = CTX.Queue(), CTX.Event()
    mock = child(clients.mock_cluster, TOPIC, PARTITIONS, q, stop)
    try:
        info = q.get(timeout=30)
        if "error" in info:
            raise RuntimeError(info["error"])
        return _measure(info["bootstrap"], rate, seconds, consumers, max_poll)
    finally:
        stop.set()
        reap([mock], 10)


def run(rate: int, seconds: float, consumers: int, max_poll: int, runs: int,
        peers: tuple[str, ...] = ("sharebroker", "mock")) -> dict[str, Any]:
    """Each peer `runs` times, alternating; medians with min and max."""
    got: dict[str, list[dict[str, Any]]] = {p: [] for p in peers}
    for r in range(runs):
        for peer in peers:
            res = (run_sharebroker if peer == "sharebroker" else run_mock)(rate, seconds, consumers, max_poll)
            got[peer].append(res)
            behind = "" if res["acknowledged"] >= 1 else (
                f"; FELL BEHIND: {res['acknowledged']:.1%} acknowledged within {SETTLE_S:.0f} s of the last produce")
            print(f"  job latency, {peer} run {r + 1}: p50 {res['p50_ms']:.2f} ms, p99 {res['p99_ms']:.2f} ms, "
                  f"max {res['max_ms']:.1f} ms ({res['jobs']:,} jobs, producer at {res['achieved_rate']:,.0f}/s, "
                  f"{res['failed_commits']} failed commits{behind})", flush=True)
    return {"rate": rate, "seconds": seconds, "consumers": consumers, "max_poll_records": max_poll,
            **{peer: {k: summarize([x[k] for x in got[peer]])
                      for k in ("p50_ms", "p99_ms", "max_ms", "achieved_rate", "acknowledged")}
               for peer in peers}}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=int, default=5000, help="jobs per second")
    ap.add_argument("--seconds", type=float, default=10.0, help="measured seconds (after a 2 s warm-up)")
    ap.add_argument("--consumers", type=int, default=4)
    ap.add_argument("--max-poll-records", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--peers", default="sharebroker,mock")
    ap.add_argument("--out", type=Path, default=None, help="write job_latency.json into this folder")
    args = ap.parse_args(argv)
    res = run(args.rate, args.seconds, args.consumers, args.max_poll_records, args.runs,
              tuple(args.peers.split(",")))
    for peer in args.peers.split(","):
        s = res[peer]
        print(f"{peer}: produce-to-acknowledged p50 {s['p50_ms']['median']:.2f} ms, p99 {s['p99_ms']['median']:.2f} ms "
              f"({s['p99_ms']['min']:.2f}–{s['p99_ms']['max']:.2f}), max {s['max_ms']['median']:.1f} ms at "
              f"{s['achieved_rate']['median']:,.0f} jobs/s", flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "job_latency.json").write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
