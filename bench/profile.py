"""Profile the broker under one workload with py-spy and print where its time goes.

    python -m bench.profile produce        # workload 3's producer: 1 KB records, acks=all, linger 5 ms
    python -m bench.profile small          # 1-record Produce requests, 64 in flight: cost per request
    python -m bench.profile share          # 4 ShareConsumers draining a 200k backlog
    python -m bench.profile jobs           # the job queue: 8 workers, max.poll.records=1, one ack per job

Starts a fresh broker subprocess, attaches `py-spy record` to it (py-spy comes with the `bench`
extra), runs the workload from separate processes, then prints the broker's CPU use and the
functions with the most samples, by own time and including callees. The raw samples stay in
bench/out/profile-<workload>.txt (ignored by git) for other views (e.g. `py-spy`'s flame graphs)."""

from __future__ import annotations

import argparse
import collections
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import clients, job_queue
from bench.cpu import user_and_kernel_seconds
from bench.run import PARTITIONS, SHARE_TOPIC, create_topic, run_for_result, share_drain
from sharebroker.testing import BrokerProcess

RESULTS = Path(__file__).parent / "out"  # ad-hoc output, ignored by git


def _small_requests(bootstrap: str, topic: str, n: int) -> None:
    from tests.integration import rawkafka as rk

    with rk.RawClient(bootstrap, timeout=60) as c:
        frames = []
        for i in range(n):
            c._corr += 1
            req = rk.produce_request(topic, i % PARTITIONS, rk.encode_batch([rk.Rec(b"x" * 100)]), acks=1)
            frames.append(rk.encode_request(req, c._corr))
        sent = 0
        for i in range(n):
            while sent < min(n, i + 64):
                c.send_bytes(frames[sent])
                sent += 1
            c.recv_frame()


def _workload(name: str, bootstrap: str, records: int) -> str:
    """Run it; return what was done, for the per-unit CPU figure."""
    if name == "produce":
        create_topic(bootstrap, "profile", PARTITIONS)
        run_for_result(clients.produce_timed, bootstrap, "profile", records, 1024)
        return f"{records:,} records of 1 KB"
    if name == "small":
        create_topic(bootstrap, "profile", PARTITIONS)
        _small_requests(bootstrap, "profile", records)
        return f"{records:,} requests"
    if name == "jobs":
        create_topic(bootstrap, job_queue.TOPIC, 1, share_group=job_queue.GROUP)
        run_for_result(job_queue.produce_jobs, bootstrap, records)
        job_queue.drain(bootstrap, records, 8)
        return f"{records:,} jobs acknowledged one by one"
    create_topic(bootstrap, SHARE_TOPIC, PARTITIONS, share_group="profile-group")
    run_for_result(clients.produce_backlog, bootstrap, SHARE_TOPIC, records, 100, PARTITIONS)
    share_drain(bootstrap, records, 4, "profile-group", timeout=120)
    return f"{records:,} records produced and share-consumed"


def record(pid: int, raw: Path, rate: int) -> subprocess.Popen[bytes]:
    """py-spy recording process `pid` into `raw` (collapsed stacks), `rate` samples a second, until
    sent SIGINT. With --gil: only samples taken while the process holds the interpreter lock. uvloop
    lets go of it while it waits in epoll, and py-spy does not see that wait as idle: without the
    flag about 40% of a job queue's samples were idle waits charged to the event loop (`perf` on
    the same workload: uvloop's own code 1.5% of the CPU, the kernel 21%, the interpreter 73%)."""
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if spy is None:
        sys.exit("py-spy is not installed: pip install -e '.[bench]'")
    raw.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([spy, "record", "--gil", "--format", "raw", "--rate", str(rate), "--output", str(raw),
                             "--pid", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def summarize(raw: Path, top: int = 25) -> list[str]:
    own: collections.Counter[str] = collections.Counter()
    total_incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        own[frames[-1]] += n
        for f in set(frames):
            total_incl[f] += n
    if not total:
        return ["no samples"]
    out = [f"{total} samples", "", "own time:"]
    out += [f"  {c / total * 100:5.1f}%  {f}" for f, c in own.most_common(top)]
    out += ["", "including callees:"]
    out += [f"  {c / total * 100:5.1f}%  {f}" for f, c in total_incl.most_common(top + 8)]
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload", choices=["produce", "small", "share", "jobs"])
    ap.add_argument("--records", type=int, help="default: 600k (produce), 20k (small), 200k (share)")
    ap.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    args = ap.parse_args(argv)
    records = args.records or {"produce": 600_000, "small": 20_000, "share": 200_000, "jobs": 10_000}[args.workload]
    raw = RESULTS / f"profile-{args.workload}.txt"
    with tempfile.TemporaryDirectory(prefix="sharebroker-profile-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data").start()
        try:
            recorder = record(broker.proc.pid, raw, args.rate)
            time.sleep(1.0)  # py-spy attaches
            (user0, sys0), t0 = user_and_kernel_seconds(broker.proc.pid), time.perf_counter()
            done = _workload(args.workload, broker.bootstrap, records)
            (user1, sys1), wall = user_and_kernel_seconds(broker.proc.pid), time.perf_counter() - t0
            user, kernel = user1 - user0, sys1 - sys0
            cpu = user + kernel
            recorder.send_signal(signal.SIGINT)
            recorder.wait(30)
        finally:
            broker.stop()
    unit = {"small": "request", "jobs": "job"}.get(args.workload, "record")
    print(f"{args.workload}: {done} in {wall:.2f} s; broker CPU {cpu:.2f} s "
          f"({cpu / wall:.2f} cores, {cpu / records * 1e6:.1f} µs per {unit}, {kernel / cpu:.0%} of it in the "
          "kernel; py-spy adds some)")
    print("The samples below are the broker's Python (and the C it calls holding the interpreter lock);\n"
          "system calls that let go of the lock (file writes, fsync) are in the kernel's share above.")
    print("\n".join(summarize(raw)))


if __name__ == "__main__":
    main()
