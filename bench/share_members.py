"""Members of one share group: what a heartbeat costs as the group grows, and how long a join
storm takes to settle.

A topic of 12 partitions and one share group. N members (raw ShareGroupHeartbeat v1 frames, one
connection each, spread over worker processes running an event loop each) all join at once, then
heartbeat at the interval the broker gives them, as KafkaShareConsumer does. Per member count:

  settled    from the first join to the last change of any member's epoch or assignment
  heartbeat  p50 / p99 / max latency of the heartbeats sent after the group settled (steady state)
  broker CPU per steady heartbeat, from /proc/<pid>/stat

    python -m bench.share_members [--members 10 100 500 1000] [--steady 15] [--workers 10]"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import statistics
import struct
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from kio.index import load_request_schema

from sharebroker.protocol.client import ResponseStream, decode_response, encode_request
from sharebroker.testing import running_broker

TOPIC = "bench-members"
PARTITIONS = 12
GROUP = "bench-members-group"
_HB = load_request_schema(76, 1)
_I32 = struct.Struct(">i")


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _member(host: str, port: int, member_id: str, start: asyncio.Future[tuple[float, float]],
                  changes: list[float], latencies: list[tuple[float, float]]) -> None:
    """One member: connect, wait for the storm, join, then heartbeat at the broker's interval
    until the end; records the time of every epoch or assignment change and (send time, latency)
    of every heartbeat."""
    reader, writer = await asyncio.open_connection(host, port)
    stream = ResponseStream()
    epoch, assignment, corr = 0, None, 0
    start_at, stop_at = await start
    await asyncio.sleep(max(0.0, start_at - time.monotonic()))
    while time.monotonic() < stop_at:
        corr += 1
        req = _HB(group_id=GROUP, member_id=member_id, member_epoch=epoch, rack_id=None,
                  subscribed_topic_names=(TOPIC,) if epoch == 0 else None)
        sent = time.monotonic()
        writer.write(encode_request(req, corr, "bench"))
        while (frame := stream.next_frame()) is None:
            chunk = await reader.read(65536)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            stream.feed(chunk)
        now = time.monotonic()
        _, resp = decode_response(frame, 76, 1)
        if resp.error_code != 0:
            raise RuntimeError(f"heartbeat of {member_id}: {resp.error_code} {resp.error_message}")
        latencies.append((sent, now - sent))
        got = None if resp.assignment is None else tuple(sorted((str(t.topic_id), tuple(t.partitions))
                                                                for t in resp.assignment.topic_partitions))
        if resp.member_epoch != epoch or (got is not None and got != assignment):
            changes.append(now)
        epoch = resp.member_epoch
        if got is not None:
            assignment = got
        interval = resp.heartbeat_interval.total_seconds()
        await asyncio.sleep(max(0.0, min(interval, stop_at - time.monotonic())))
    writer.close()


def _worker(bootstrap: str, member_ids: list[str], ready: Any, go: Any, out: Any) -> None:
    """Members of one process: connected, then told (start, stop) times once every process is."""
    host, port = bootstrap.rsplit(":", 1)
    changes: list[float] = []
    latencies: list[tuple[float, float]] = []

    async def run() -> None:
        loop = asyncio.get_running_loop()
        start: asyncio.Future[tuple[float, float]] = loop.create_future()
        members = [asyncio.ensure_future(_member(host, int(port), m, start, changes, latencies)) for m in member_ids]
        await asyncio.sleep(0.5)  # the connections open
        ready.put(len(member_ids))
        start.set_result(await loop.run_in_executor(None, go.get))
        await asyncio.gather(*members)
    asyncio.run(run())
    out.put((changes, latencies))


def _py_spy(pid: int, out: Path) -> subprocess.Popen[bytes]:
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if spy is None:
        sys.exit("py-spy is not installed: pip install -e '.[bench]'")
    out.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([spy, "record", "--format", "raw", "--rate", "1000", "--output", str(out), "--pid", str(pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_one(members: int, workers: int, steady_s: float, settle_limit_s: float,
            profile: Path | None = None) -> dict[str, Any]:
    overrides = {"group.share.max.size": 1000, "offsets.topic.num.partitions": 1}
    with running_broker(overrides) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})  # kept: futures die with it
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        ctx = multiprocessing.get_context("spawn")
        out, ready, go = ctx.Queue(), ctx.Queue(), ctx.Queue()
        ids = [f"m{i:05d}-{os.urandom(6).hex()}" for i in range(members)]
        procs = [ctx.Process(target=_worker, args=(broker.bootstrap, ids[w::workers], ready, go, out))
                 for w in range(min(workers, members))]
        for p in procs:
            p.start()
        for _ in procs:
            ready.get(timeout=120)
        start_at = time.monotonic() + 0.2  # every member joins at once
        stop_at = start_at + settle_limit_s + steady_s
        for _ in procs:
            go.put((start_at, stop_at))
        cpu_marks: list[tuple[float, float]] = []
        spy: subprocess.Popen[bytes] | None = None
        while time.monotonic() < stop_at:
            cpu_marks.append((time.monotonic(), _cpu_seconds(broker.proc.pid)))
            if profile is not None and spy is None and time.monotonic() > start_at + settle_limit_s:
                spy = _py_spy(broker.proc.pid, profile)  # the steady heartbeats only
            time.sleep(0.5)
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(30)
        results = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(30)
    changes = [t for c, _ in results for t in c]
    latencies = [x for _, lat in results for x in lat]
    settled_at = max(changes) if changes else start_at
    steady = sorted(lat for sent, lat in latencies if sent > settled_at + 0.5)
    in_window = [(t, c) for t, c in cpu_marks if t > settled_at + 0.5]
    cpu_per_hb = ((in_window[-1][1] - in_window[0][1]) / max(1, sum(1 for s, _ in latencies
                                                                    if in_window[0][0] <= s <= in_window[-1][0]))
                  if len(in_window) >= 2 else float("nan"))

    def pct(q: float) -> float:
        return steady[min(len(steady) - 1, int(q * len(steady)))] * 1000 if steady else float("nan")
    return {"members": members, "settled_s": settled_at - start_at, "steady_heartbeats": len(steady),
            "p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": steady[-1] * 1000 if steady else float("nan"),
            "mean_ms": statistics.fmean(steady) * 1000 if steady else float("nan"),
            "cpu_us_per_heartbeat": cpu_per_hb * 1e6}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, nargs="+", default=[10, 100, 500, 1000])
    ap.add_argument("--workers", type=int, default=10)
    ap.add_argument("--steady", type=float, default=15.0, help="seconds of steady heartbeats measured")
    ap.add_argument("--settle-limit", type=float, default=45.0, help="seconds allowed for the join storm")
    ap.add_argument("--profile", action="store_true",
                    help="py-spy the broker during the steady heartbeats; samples in bench/out/profile-members-N.txt")
    args = ap.parse_args(argv)
    print(f"share group members, {datetime.date.today()}, {PARTITIONS} partitions, heartbeat interval 5 s")
    print(f"{'members':>8} {'settled s':>10} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'CPU µs/hb':>10} {'beats':>6}")
    for n in args.members:
        raw = Path(__file__).parent / "out" / f"profile-members-{n}.txt" if args.profile else None
        r = run_one(n, args.workers, args.steady, args.settle_limit, raw)
        print(f"{r['members']:>8} {r['settled_s']:>10.2f} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['max_ms']:>8.2f} "
              f"{r['cpu_us_per_heartbeat']:>10.0f} {r['steady_heartbeats']:>6}", flush=True)
        if raw is not None:
            from bench.profile import summarize
            print("\n".join(summarize(raw)), flush=True)


if __name__ == "__main__":
    main()
