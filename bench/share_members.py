"""Members of one share group: what a heartbeat costs as the group grows, and how long a join
storm takes to settle.

A topic of 12 partitions and one share group. N members (raw ShareGroupHeartbeat v1 frames, one
connection each, spread over worker processes running an event loop each) all join at once, then
heartbeat at the interval the broker gives them. Per member count:

  settled        from the first join to the last change of any member's epoch or assignment
  after storm    from the answer to the last join to that last change
  heartbeat      p50 / p99 / max latency (send to answer) of the heartbeats sent once settled
  gen lag p99    how late the generator sent a heartbeat against when it was due (client pacing)
  loop lag p99   how late each generator process's event loop ran a 5 ms timer: both lags are the
                 generator's own, and an answer's measured latency carries the second
  broker CPU per steady heartbeat, from /proc/<pid>/stat
  rq wait        ms per second the broker spent runnable but waiting for a core (/proc/<pid>/schedstat),
                 in the steady window: on a shared machine, stalls no broker code runs in

Pacing (--pacing): `client` (the default) paces each member as KafkaShareConsumer does: the next
heartbeat is due one interval after the previous send, never while one is in flight, and at once
after an answer that changed its assignment (the client acknowledges it). `legacy` is this bench's
first method: one coroutine per member that sleeps an interval after each answer.

    python -m bench.share_members [--members 10 100 500 1000] [--steady 15] [--workers 10] [--pacing client]"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import multiprocessing
import socket
import os
import random
import signal
import subprocess
import statistics
import struct
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from kio.index import load_request_schema

from bench.cpu import ticks_cpu_seconds
from sharebroker.protocol.client import ResponseStream, decode_response, encode_request
from sharebroker.testing import running_broker

TOPIC = "bench-members"
PARTITIONS = 12
GROUP = "bench-members-group"
_HB = load_request_schema(76, 1)
_I32 = struct.Struct(">i")


def _runqueue_wait_seconds(pid: int) -> float:
    """Time the broker's main thread spent runnable but waiting for a core (/proc/<pid>/schedstat):
    on a shared machine, the part of a latency no broker code is running in."""
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[1]) / 1e9


async def _member(host: str, port: int, member_id: str, start: asyncio.Future[tuple[float, float]],
                  changes: list[float], joined: list[float], latencies: list[tuple[float, float]]) -> None:
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
        if corr == 1:
            joined.append(now)
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


class _PacedMember(asyncio.Protocol):
    """One member paced as KafkaShareConsumer's heartbeat manager: the next heartbeat is due one
    interval after the previous one was sent (its timer is reset at send) and never while one is
    in flight, and at once after an answer that changed the assignment (the client acknowledges
    it). Records (due, sent, answered) per heartbeat, with `sent - due` the generator's own lag."""

    def __init__(self, member_id: str, stop_at: float, changes: list[float], joined: list[float],
                 beats: list[tuple[float, float, float]]) -> None:
        self.member_id, self.stop_at = member_id, stop_at
        self.changes, self.joined, self.beats = changes, joined, beats
        self.beats_sent = 0
        self.stream = ResponseStream()
        self.transport: asyncio.Transport | None = None
        self.epoch, self.assignment = 0, None
        self.frame = b""
        self.due = self.sent = 0.0
        self.interval = 5.0
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _encode(self) -> None:
        self.frame = encode_request(_HB(group_id=GROUP, member_id=self.member_id, member_epoch=self.epoch, rack_id=None,
                                        subscribed_topic_names=(TOPIC,) if self.epoch == 0 else None), 1, "bench")

    def send_at(self, due: float) -> None:
        self.due = due
        asyncio.get_running_loop().call_at(due, self._send)

    def _send(self) -> None:
        now = time.monotonic()
        if now >= self.stop_at:
            self.transport.close()  # type: ignore[union-attr]
            if not self.done.done():
                self.done.set_result(None)
            return
        if not self.frame:
            self._encode()
        self.sent = now
        self.transport.write(self.frame)  # type: ignore[union-attr]

    def data_received(self, data: bytes) -> None:
        answered = time.monotonic()
        self.stream.feed(data)
        while (frame := self.stream.next_frame()) is not None:
            if not self.beats_sent:
                self.joined.append(answered)
            self.beats_sent += 1
            self.beats.append((self.due, self.sent, answered))
            _, resp = decode_response(frame, 76, 1)
            if resp.error_code != 0:
                self.done.set_exception(RuntimeError(f"{self.member_id}: {resp.error_code} {resp.error_message}"))
                return
            got = None if resp.assignment is None else tuple(sorted((str(t.topic_id), tuple(t.partitions))
                                                                    for t in resp.assignment.topic_partitions))
            changed_assignment = got is not None and got != self.assignment
            if resp.member_epoch != self.epoch or changed_assignment:
                self.changes.append(answered)
            if resp.member_epoch != self.epoch:
                self.epoch = resp.member_epoch
                self._encode()
            if got is not None:
                self.assignment = got
            self.interval = resp.heartbeat_interval.total_seconds()
            # acknowledge a new assignment at once, else one interval after the last send
            self.send_at(answered if changed_assignment else max(answered, self.sent + self.interval))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def _loop_lag(stop_at: float, lags: list[float]) -> None:
    """How late this worker's event loop runs a 5 ms timer: the generator's own scheduling delay,
    which an answer's measured latency also carries."""
    while time.monotonic() < stop_at:
        due = time.monotonic() + 0.005
        await asyncio.sleep(0.005)
        lags.append(time.monotonic() - due)


def _worker(bootstrap: str, member_ids: list[str], pacing: str, spread: float, ready: Any, go: Any, out: Any) -> None:
    """Members of one process: connected, then told (start, stop) times once every process is.
    With `spread`, each member joins at a random moment within that many seconds of the start."""
    rng = random.Random(member_ids[0] if member_ids else 0)
    offsets = [rng.random() for _ in member_ids]
    host, port = bootstrap.rsplit(":", 1)
    changes: list[float] = []
    joined: list[float] = []  # when each member's join was answered
    latencies: list[tuple[float, float]] = []
    beats: list[tuple[float, float, float]] = []
    lags: list[float] = []

    async def run() -> None:
        loop = asyncio.get_running_loop()
        if pacing == "legacy":
            start: asyncio.Future[tuple[float, float]] = loop.create_future()
            members = [asyncio.ensure_future(_member(host, int(port), m, start, changes, joined, latencies)) for m in member_ids]
            await asyncio.sleep(0.5)  # the connections open
            ready.put(len(member_ids))
            times = await loop.run_in_executor(None, go.get)
            start.set_result(times)
            await asyncio.gather(*members, _loop_lag(times[1], lags))
            return
        paced: list[_PacedMember] = []
        for m in member_ids:
            _, member = await loop.create_connection(lambda m=m: _PacedMember(m, 0.0, changes, joined, beats), host, int(port))
            paced.append(member)
        ready.put(len(member_ids))
        start_at, stop_at = await loop.run_in_executor(None, go.get)
        lag = asyncio.ensure_future(_loop_lag(stop_at, lags))
        for i, member in enumerate(paced):
            member.stop_at = stop_at
            member.send_at(start_at + spread * offsets[i])
        await asyncio.gather(*(member.done for member in paced))
        await lag
    asyncio.run(run())
    if pacing != "legacy":
        latencies = [(sent, answered - sent) for _, sent, answered in beats]
    out.put((changes, joined, latencies, [(sent, sent - due) for due, sent, _ in beats], lags))


def _py_spy(pid: int, out: Path) -> subprocess.Popen[bytes]:
    from bench.profile import record

    return record(pid, out, 1000)


def run_one(members: int, workers: int, steady_s: float, settle_limit_s: float,
            profile: Path | None = None, pacing: str = "client", spread: float = 0.0,
            settings: dict[str, str] | None = None) -> dict[str, Any]:
    overrides: dict[str, object] = {"group.share.max.size": 1000, "offsets.topic.num.partitions": 1, **(settings or {})}
    with running_broker(overrides) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})  # kept: futures die with it
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        ctx = multiprocessing.get_context("spawn")
        out, ready, go = ctx.Queue(), ctx.Queue(), ctx.Queue()
        ids = [f"m{i:05d}-{os.urandom(6).hex()}" for i in range(members)]
        procs = [ctx.Process(target=_worker, args=(broker.bootstrap, ids[w::workers], pacing, spread, ready, go, out))
                 for w in range(min(workers, members))]
        for p in procs:
            p.start()
        for _ in procs:
            ready.get(timeout=120)
        start_at = time.monotonic() + 0.2  # every member joins at once
        stop_at = start_at + settle_limit_s + steady_s
        for _ in procs:
            go.put((start_at, stop_at))
        cpu_marks: list[tuple[float, float, float]] = []
        spy: subprocess.Popen[bytes] | None = None
        while time.monotonic() < stop_at:
            cpu_marks.append((time.monotonic(), ticks_cpu_seconds(broker.proc.pid), _runqueue_wait_seconds(broker.proc.pid)))
            if profile is not None and spy is None and time.monotonic() > start_at + settle_limit_s:
                spy = _py_spy(broker.proc.pid, profile)  # the steady heartbeats only
            time.sleep(0.5)
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(30)
        results = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(30)
    changes = [t for r in results for t in r[0]]
    joined = [t for r in results for t in r[1]]
    latencies = [x for r in results for x in r[2]]
    send_lags = [x for r in results for x in r[3]]
    loop_lags = sorted(x for r in results for x in r[4])
    settled_at = max(changes) if changes else start_at
    steady = sorted(lat for sent, lat in latencies if sent > settled_at + 0.5)
    steady_send_lag = sorted(lag for sent, lag in send_lags if sent > settled_at + 0.5)
    in_window = [m for m in cpu_marks if m[0] > settled_at + 0.5]
    cpu_per_hb = wait_share = float("nan")
    if len(in_window) >= 2:
        (t0, cpu0, wait0), (t1, cpu1, wait1) = in_window[0], in_window[-1]
        cpu_per_hb = (cpu1 - cpu0) / max(1, sum(1 for s, _ in latencies if t0 <= s <= t1))
        wait_share = (wait1 - wait0) / (t1 - t0)

    def pct(values: list[float], q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))] * 1000 if values else float("nan")
    return {"members": members, "settled_s": settled_at - start_at,
            "after_storm_s": settled_at - max(joined) if joined else float("nan"),
            "steady_heartbeats": len(steady),
            "p50_ms": pct(steady, 0.50), "p99_ms": pct(steady, 0.99), "max_ms": steady[-1] * 1000 if steady else float("nan"),
            "mean_ms": statistics.fmean(steady) * 1000 if steady else float("nan"),
            "send_lag_p99_ms": pct(steady_send_lag, 0.99), "loop_lag_p99_ms": pct(loop_lags, 0.99),
            "cpu_us_per_heartbeat": cpu_per_hb * 1e6, "runqueue_wait_ms_per_s": wait_share * 1000}


async def _coordinator_costs(members: int, rounds: int) -> dict[str, float]:
    """The share coordinator alone, in-process (no sockets, no event-loop I/O): CPU µs per join,
    the one target computation for all members, the heartbeat that moves a member onto it, and a
    steady heartbeat with its answer encoded; per operation, from process CPU time."""
    import tempfile
    import types

    from sharebroker.broker.apis.share_group_heartbeat import encode_response
    from sharebroker.broker.server import Broker
    from sharebroker.broker.structured_log import configure_logging
    from sharebroker.config import BrokerConfig

    configure_logging(level="warning")  # a log line per join would be most of a join's cost here

    def beat(member: str, epoch: int) -> types.SimpleNamespace:
        return types.SimpleNamespace(group_id=GROUP, member_id=member, member_epoch=epoch, rack_id=None,
                                     subscribed_topic_names=(TOPIC,) if epoch == 0 else None)
    conn = types.SimpleNamespace(client_id="bench", client_host="/127.0.0.1")
    with tempfile.TemporaryDirectory(prefix="sharebroker-members-") as tmp:
        broker = Broker(BrokerConfig.load(None, {}, {"log.dirs": tmp, "listeners": "PLAINTEXT://127.0.0.1:0",
                                                     "group.share.max.size": "1000"}))
        await broker.start()
        try:
            broker.topics.create(TOPIC, PARTITIONS, {}, int(time.time() * 1000))
            coordinator = broker.share_groups
            ids = [f"m{i:05d}" for i in range(members)]
            epochs: dict[str, int] = {}
            # the first join initializes the share partitions (__share_group_state writes): not counted
            epochs[ids[0]] = (await coordinator.heartbeat(beat(ids[0], 0), conn)).member_epoch  # type: ignore[arg-type]
            c0 = time.process_time()
            for m in ids[1:]:
                epochs[m] = (await coordinator.heartbeat(beat(m, 0), conn)).member_epoch  # type: ignore[arg-type]
            join_us = (time.process_time() - c0) / max(1, members - 1) * 1e6
            group = coordinator.groups[GROUP]
            c0 = time.process_time()
            group.compute_target(coordinator._topic_infos(group.subscribed_topic_names()), coordinator.clock.monotonic_ms())
            target_ms = (time.process_time() - c0) * 1000
            c0 = time.process_time()
            for m in ids:
                epochs[m] = (await coordinator.heartbeat(beat(m, epochs[m]), conn)).member_epoch  # type: ignore[arg-type]
            move_us = (time.process_time() - c0) / members * 1e6
            requests = {m: beat(m, epochs[m]) for m in ids}
            c0 = time.process_time()
            for _ in range(rounds):
                for m in ids:
                    a = await coordinator.heartbeat(requests[m], conn)  # type: ignore[arg-type]
                    encode_response(1, 0, None, a.member_id, a.member_epoch, a.heartbeat_interval_ms, a.assignment)
            steady_us = (time.process_time() - c0) / (rounds * members) * 1e6
        finally:
            await broker.stop()
    return {"join_us": join_us, "target_ms": target_ms, "move_us": move_us, "steady_us": steady_us}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, nargs="+", default=[10, 100, 500, 1000])
    ap.add_argument("--workers", type=int, default=10)
    ap.add_argument("--steady", type=float, default=15.0, help="seconds of steady heartbeats measured")
    ap.add_argument("--settle-limit", type=float, default=45.0, help="seconds allowed for the join storm")
    ap.add_argument("--profile", action="store_true",
                    help="py-spy the broker during the steady heartbeats; samples in bench/out/profile-members-N.txt")
    ap.add_argument("--pacing", choices=["client", "legacy"], default="client",
                    help="client: as KafkaShareConsumer (due one interval after the last send, an immediate "
                         "acknowledging heartbeat after a new assignment), one asyncio Protocol per member; legacy: "
                         "the first version of this bench (sleep one interval after each answer, stream reader)")
    ap.add_argument("--spread", type=float, default=0.0,
                    help="client pacing: members join at random moments within this many seconds (0: all at once)")
    ap.add_argument("--coordinator", action="store_true",
                    help="only the share coordinator, in-process: CPU per join, per target computation, per heartbeat")
    ap.add_argument("-o", "--override", action="append", default=[], metavar="NAME=VALUE",
                    help="a broker setting, e.g. -o group.share.assignment.interval.ms=0")
    args = ap.parse_args(argv)
    settings = dict(o.split("=", 1) for o in args.override)
    if args.coordinator:
        print(f"share coordinator in-process, {datetime.date.today()}, {PARTITIONS} partitions (CPU time)")
        print(f"{'members':>8} {'join µs':>8} {'target ms':>10} {'new-epoch beat µs':>18} {'steady beat µs':>15}")
        for n in args.members:
            c = asyncio.run(_coordinator_costs(n, max(1, 20_000 // n)))
            print(f"{n:>8} {c['join_us']:>8.1f} {c['target_ms']:>10.2f} {c['move_us']:>18.1f} {c['steady_us']:>15.1f}",
                  flush=True)
        return
    print(f"share group members, {datetime.date.today()}, {PARTITIONS} partitions, heartbeat interval 5 s, "
          f"{args.workers} generator processes, {args.pacing} pacing, joins spread over {args.spread:g} s"
          + "".join(f", {k}={v}" for k, v in settings.items()))
    print(f"{'members':>8} {'settled s':>10} {'after storm s':>13} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
          f"{'gen lag p99':>11} {'loop lag p99':>12} {'CPU µs/hb':>10} {'rq wait ms/s':>12} {'beats':>6}")
    for n in args.members:
        raw = Path(__file__).parent / "out" / f"profile-members-{n}.txt" if args.profile else None
        r = run_one(n, args.workers, args.steady, args.settle_limit, raw, args.pacing, args.spread, settings)
        print(f"{r['members']:>8} {r['settled_s']:>10.2f} {r['after_storm_s']:>13.2f} {r['p50_ms']:>8.2f} "
              f"{r['p99_ms']:>8.2f} {r['max_ms']:>8.2f} {r['send_lag_p99_ms']:>11.2f} {r['loop_lag_p99_ms']:>12.2f} "
              f"{r['cpu_us_per_heartbeat']:>10.0f} {r['runqueue_wait_ms_per_s']:>12.0f} {r['steady_heartbeats']:>6}",
              flush=True)
        if raw is not None:
            from bench.profile import summarize
            print("\n".join(summarize(raw)), flush=True)


if __name__ == "__main__":
    main()
