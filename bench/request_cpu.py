"""`python -m bench.request_cpu`: the broker's CPU per request on the two paths of a one-record
job queue, over real TCP from a raw-frame client (one request in flight, as a consumer with
max.poll.records=1 and a producer with linger.ms=0 send them):

  produce   a Produce (v9, acks=1) of one 100-byte record in its own batch
  fetch     a ShareFetch (v1) that acknowledges (ACCEPT) the job it got last and acquires the next
            one (MaxRecords=1), on a backlog of one-record batches

Broker CPU comes from /proc/<pid>/stat (user + system, 10 ms ticks) over many thousands of
requests, after 500 of each kind to warm up; the client's own work is not in it. Each figure is the median of --runs runs on a
fresh broker (min–max beside it).

With --baseline DIR (a checkout of another commit, e.g. made with `git archive REV | tar -x -C
DIR`) the broker of that tree runs too, alternating with this one, so a change is measured
before and after in one run:

    python -m bench.request_cpu [--requests 20000] [--runs 3] [--baseline /tmp/base]

With --interleave the brokers run at the same time and take the requests in turn (one request
to each broker, one in flight at a time, in a random order each time), each broker's CPU read to the
nanosecond: whatever else the machine does between two requests falls on all of them alike. Run
after run on this machine a broker's CPU per request swings by ±20%, so a difference of a few
percent is only seen this way (or in-process, bench.inprocess)."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import http.client
import os
import random
import signal
import socket
import statistics
import struct
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kio.index import load_request_schema

from bench.cpu import cpu_seconds

from sharebroker.protocol.client import ResponseStream, decode_response, encode_request
from sharebroker.protocol.record_batch import encode_batch
from sharebroker.testing.process import BrokerProcess

TOPIC = "jobs"
GROUP = "bench-jobs"
ACCEPT = 1
_SIZE = struct.Struct(">i")
_HEARTBEAT_EVERY_S = 2.0
WARM_UP = 500  # requests of each kind before the measurement starts (first-use imports, caches)


def cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of the process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _per_request_us(before: tuple[float, float], after: tuple[float, float], n: int) -> tuple[float, float]:
    """(total, system) µs of broker CPU per request."""
    user, system = after[0] - before[0], after[1] - before[1]
    return (user + system) / n * 1e6, system / n * 1e6


class Raw:
    """One blocking TCP connection; one request in flight."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.corr = 0
        self.stream = ResponseStream()

    def send_frame(self, frame: bytes, api_key: int, version: int) -> Any:
        """Send an encoded frame whose correlation id is self.corr; the decoded response."""
        self.sock.sendall(frame)
        while True:
            got = self.stream.next_frame()
            if got is not None:
                corr, resp = decode_response(got, api_key, version)
                assert corr == self.corr, (corr, self.corr)
                return resp
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("broker closed the connection")
            self.stream.feed(data)

    def request(self, req: Any) -> Any:
        self.corr += 1
        return self.send_frame(encode_request(req, self.corr, "bench"), type(req).__api_key__, type(req).__version__)

    def close(self) -> None:
        self.sock.close()


def _nested(cls: type, name: str) -> type:
    import typing
    hint = typing.get_type_hints(cls)[name]
    return typing.get_args(hint)[0]


def create_topic(raw: Raw) -> uuid.UUID:
    cls = load_request_schema(19, 7)
    tcls = _nested(cls, "topics")
    resp = raw.request(cls(topics=(tcls(name=TOPIC, num_partitions=1, replication_factor=1, assignments=(),
                                        configs=()),), timeout=datetime.timedelta(seconds=30), validate_only=False))
    (t,) = resp.topics
    assert int(t.error_code) == 0, t
    return t.topic_id


def join(raw: Raw, member: str) -> int:
    """Join the share group with raw heartbeats until the partition is assigned; the epoch."""
    hb = load_request_schema(76, 1)
    epoch = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        resp = raw.request(hb(group_id=GROUP, member_id=member, member_epoch=epoch, rack_id=None,
                              subscribed_topic_names=(TOPIC,) if epoch == 0 else None))
        assert int(resp.error_code) == 0, resp
        epoch = resp.member_epoch
        if resp.assignment is not None and resp.assignment.topic_partitions:
            return epoch
        time.sleep(0.05)
    raise RuntimeError("no assignment within 30 s")


def heartbeat(raw: Raw, member: str, epoch: int) -> int:
    resp = raw.request(load_request_schema(76, 1)(group_id=GROUP, member_id=member, member_epoch=epoch,
                                                  rack_id=None, subscribed_topic_names=None))
    assert int(resp.error_code) == 0, resp
    return int(resp.member_epoch)


def produce_frames(n: int, value_size: int) -> tuple[list[bytes], int]:
    """n Produce v9 frames (correlation ids 1..n) of one record each, and the version."""
    cls = load_request_schema(0, 9)
    tcls = _nested(cls, "topic_data")
    pcls = _nested(tcls, "partition_data")
    batch = bytes(encode_batch([(None, b"j" * value_size)], timestamp_ms=int(time.time() * 1000)))
    req = cls(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=30), topic_data=(
        tcls(name=TOPIC, partition_data=(pcls(index=0, records=batch),)),))
    template = bytearray(encode_request(req, 0, "bench"))
    frames = []
    for corr in range(1, n + 1):
        _SIZE.pack_into(template, 8, corr)  # size, api key, version, then the correlation id
        frames.append(bytes(template))
    return frames, 9


def run_produce(raw: Raw, pid: int, n: int, value_size: int) -> tuple[float, float]:
    frames, version = produce_frames(n, value_size)
    raw.corr = 0
    cpu0 = cpu_times(pid)
    for i, frame in enumerate(frames):
        if i == WARM_UP:
            cpu0 = cpu_times(pid)
        raw.corr += 1
        resp = raw.send_frame(frame, 0, version)
        code = resp.responses[0].partition_responses[0].error_code
        assert int(code) == 0, resp
    return _per_request_us(cpu0, cpu_times(pid), n - WARM_UP)


def share_fetch(member: str, epoch: int, topic_id: uuid.UUID, ack: int | None, version: int,
                max_wait_ms: int = 500) -> Any:
    cls = load_request_schema(78, version)
    tcls = _nested(cls, "topics")
    pcls = _nested(tcls, "partitions")
    bcls = _nested(pcls, "acknowledgement_batches")
    batches = () if ack is None else (bcls(first_offset=ack, last_offset=ack, acknowledge_types=(ACCEPT,)),)
    kwargs: dict[str, Any] = dict(
        group_id=GROUP, member_id=member, share_session_epoch=epoch,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1, max_bytes=52428800, max_records=1,
        batch_size=1, topics=(tcls(topic_id=topic_id, partitions=(pcls(partition_index=0,
                                                                        acknowledgement_batches=batches),)),),
        forgotten_topics_data=())
    if version >= 2:
        kwargs.update(share_acquire_mode=0, is_renew_ack=False)
    return cls(**kwargs)


def run_fetch(raw: Raw, hb_raw: Raw, pid: int, member: str, member_epoch: int, topic_id: uuid.UUID, n: int,
              version: int) -> tuple[float, float]:
    """n ShareFetch requests, each acknowledging the previous job and acquiring the next."""
    # Encoded ahead of time, so the client's encoding does not hold the broker up on two cores.
    frames = []
    for i in range(n):
        frames.append(encode_request(share_fetch(member, i + 1, topic_id, i - 1 if i else None, version), i + 1,
                                     "bench"))
    raw.corr = 0
    next_heartbeat = time.monotonic() + _HEARTBEAT_EVERY_S
    cpu0 = cpu_times(pid)
    for i, frame in enumerate(frames):
        if i == WARM_UP:
            cpu0 = cpu_times(pid)
        raw.corr = i + 1
        resp = raw.send_frame(frame, 78, version)
        assert int(resp.error_code) == 0, resp
        p = resp.responses[0].partitions[0]
        assert int(p.error_code) == 0 and int(p.acknowledge_error_code) == 0, p
        got = [(a.first_offset, a.last_offset) for a in p.acquired_records]
        assert got == [(i, i)], (i, got)
        if time.monotonic() > next_heartbeat:  # stay a member; a few requests in a run
            member_epoch = heartbeat(hb_raw, member, member_epoch)
            next_heartbeat = time.monotonic() + _HEARTBEAT_EVERY_S
    return _per_request_us(cpu0, cpu_times(pid), n - WARM_UP)


@contextlib.contextmanager
def profiled(pid: int, name: str | None, rate: int = 500) -> Iterator[None]:
    """py-spy on the broker while the block runs (with `name`): raw stacks in bench/out/NAME.txt,
    summarized on stdout."""
    if name is None:
        yield
        return
    from bench.profile import RESULTS, record, summarize

    raw = RESULTS / f"{name}.txt"
    recorder = record(pid, raw, rate)
    time.sleep(1.0)  # py-spy attaches
    try:
        yield
    finally:
        recorder.send_signal(signal.SIGINT)
        recorder.wait(30)
    print(f"--- {name}")
    print("\n".join(summarize(raw, top=40)))


@contextlib.contextmanager
def _broker(tree: Path | None, overrides: dict[str, str]) -> Iterator[BrokerProcess]:
    env_before = os.environ.get("PYTHONPATH")
    with tempfile.TemporaryDirectory(prefix="sharebroker-reqcpu-") as tmp:
        if tree is not None:
            os.environ["PYTHONPATH"] = str(tree)
        try:
            broker = BrokerProcess(Path(tmp) / "data", overrides).start()
        finally:
            if env_before is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = env_before
        try:
            yield broker
        finally:
            broker.stop()


def _set_up(broker: BrokerProcess, version: int) -> tuple[Raw, Raw, uuid.UUID, str, int]:
    """The job topic, a share member holding its partition and its share session: (connection,
    heartbeat connection, topic id, member id, member epoch)."""
    raw, hb_raw = Raw(broker.bootstrap), Raw(broker.bootstrap)
    topic_id = create_topic(raw)
    member = str(uuid.uuid4())
    member_epoch = join(hb_raw, member)
    # The session opens before the jobs exist: the share partition starts at offset 0.
    opened = raw.request(share_fetch(member, 0, topic_id, None, version, max_wait_ms=0))
    assert int(opened.error_code) == 0, opened
    return raw, hb_raw, topic_id, member, member_epoch


def one_run(tree: Path | None, n: int, value_size: int, version: int, profile: bool = False,
            overrides: dict[str, str] | None = None) -> dict[str, float]:
    with _broker(tree, overrides or {}) as broker:
        assert broker.proc is not None
        pid = broker.proc.pid
        raw, hb_raw, topic_id, member, member_epoch = _set_up(broker, version)
        with profiled(pid, "request-cpu-produce" if profile else None):
            produce_us, produce_sys = run_produce(raw, pid, n, value_size)
        member_epoch = heartbeat(hb_raw, member, member_epoch)
        with profiled(pid, "request-cpu-fetch" if profile else None):
            fetch_us, fetch_sys = run_fetch(raw, hb_raw, pid, member, member_epoch, topic_id, n, version)
        raw.close()
        hb_raw.close()
        if "Traceback" in broker.log_text():
            print("  [broker log has a Traceback]\n" + broker.log_text()[-1500:])
        return {"produce_us": produce_us, "fetch_us": fetch_us, "produce_sys_us": produce_sys,
                "fetch_sys_us": fetch_sys}


class _JobQueue:
    """One broker of an interleaved run: its connections, share member and encoded requests."""

    def __init__(self, broker: BrokerProcess, n: int, value_size: int, version: int) -> None:
        assert broker.proc is not None
        self.broker, self.pid, self.version = broker, broker.proc.pid, version
        self.raw, self.hb_raw, self.topic_id, self.member, self.member_epoch = _set_up(broker, version)
        self.produces, self.produce_version = produce_frames(n, value_size)
        self.fetches = [encode_request(share_fetch(self.member, i + 1, self.topic_id, i - 1 if i else None, version),
                                       i + 1, "bench") for i in range(n)]
        # produce_us, fetch_us: broker CPU per request; produce_rtt_us, fetch_rtt_us: mean round trips
        self.result: dict[str, float] = {}

    def produce(self, i: int) -> None:
        self.raw.corr = i + 1
        resp = self.raw.send_frame(self.produces[i], 0, self.produce_version)
        assert int(resp.responses[0].partition_responses[0].error_code) == 0, resp

    def fetch(self, i: int) -> None:
        self.raw.corr = i + 1
        resp = self.raw.send_frame(self.fetches[i], 78, self.version)
        p = resp.responses[0].partitions[0]
        assert int(resp.error_code) == 0 and int(p.error_code) == 0 and int(p.acknowledge_error_code) == 0, resp
        assert [(a.first_offset, a.last_offset) for a in p.acquired_records] == [(i, i)], (i, p)

    def close(self) -> None:
        self.raw.close()
        self.hb_raw.close()


@contextlib.contextmanager
def _viewing(brokers: list[BrokerProcess], every_s: float) -> Iterator[None]:
    """GET /api/view of each broker with a metrics listener every `every_s` seconds while the block
    runs."""
    ports = [int(b.log_events("metrics listener started")[0]["port"]) for b in brokers
             if b.overrides.get("metrics.listener")]
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(every_s):
            for port in ports:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                try:
                    conn.request("GET", "/api/view")
                    conn.getresponse().read()
                finally:
                    conn.close()

    thread = threading.Thread(target=poll, daemon=True)
    if ports and every_s > 0:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        if thread.is_alive():
            thread.join()


def interleaved_run(configs: list[tuple[Path | None, dict[str, str]]], n: int, value_size: int,
                    version: int, view_every_s: float = 0.0) -> list[dict[str, float]]:
    """Per config, broker CPU µs per Produce and per ShareFetch and their mean round trips (µs), all
    brokers taking the requests in turn; brokers with metrics.listener have their live view polled
    every `view_every_s` (0: never)."""
    with contextlib.ExitStack() as stack:
        # Started in a random order: a broker started later came out 1.5-2% cheaper in A/A runs.
        starts = random.sample(range(len(configs)), len(configs))
        started = {i: _JobQueue(stack.enter_context(_broker(*configs[i])), n, value_size, version) for i in starts}
        queues = [started[i] for i in range(len(configs))]
        for q in queues:
            stack.callback(q.close)
        stack.enter_context(_viewing([q.broker for q in queues], view_every_s))
        for phase in ("produce", "fetch"):
            order = list(queues)
            shuffled = random.shuffle  # an order per request, a new one each run: a broker's place in it costs
            start = {q.pid: 0.0 for q in queues}
            waited = {q.pid: 0.0 for q in queues}  # round trips, the client's send and decode included
            clock = time.perf_counter
            next_heartbeat = time.monotonic() + _HEARTBEAT_EVERY_S
            for i in range(n):
                if i == WARM_UP:
                    start = {q.pid: cpu_seconds(q.pid) for q in queues}
                    waited = dict.fromkeys(waited, 0.0)
                shuffled(order)  # (the one after itself finds its caches warm)
                for q in order:
                    t0 = clock()
                    getattr(q, phase)(i)
                    waited[q.pid] += clock() - t0
                if phase == "fetch" and time.monotonic() > next_heartbeat:
                    for q in queues:  # stay members; a few requests in a run
                        q.member_epoch = heartbeat(q.hb_raw, q.member, q.member_epoch)
                    next_heartbeat = time.monotonic() + _HEARTBEAT_EVERY_S
            for q in queues:
                q.result[f"{phase}_us"] = (cpu_seconds(q.pid) - start[q.pid]) / (n - WARM_UP) * 1e6
                q.result[f"{phase}_rtt_us"] = waited[q.pid] / (n - WARM_UP) * 1e6
        for q in queues:
            if "Traceback" in q.broker.log_text():
                print("  [broker log has a Traceback]\n" + q.broker.log_text()[-1500:])
        return [q.result for q in queues]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=20_000, help="Produce and ShareFetch requests per run (> 500)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--share-fetch-version", type=int, default=1, choices=(1, 2))
    ap.add_argument("--baseline", type=Path, default=None, help="a tree of another commit to run beside this one")
    ap.add_argument("--with", dest="with_settings", action="append", default=[], metavar="NAME=VALUE",
                    help="also run this tree with these broker settings, alternating (e.g. metrics.listener=127.0.0.1:0)")
    ap.add_argument("--interleave", action="store_true",
                    help="run the brokers at the same time, taking the requests in turn (see above)")
    ap.add_argument("--view-every", type=float, default=0.0,
                    help="with --interleave: poll the live view (/api/view) of a broker with metrics.listener "
                         "every this many seconds, as an open browser tab does (0: never)")
    ap.add_argument("--aa", action="store_true", help="also run this tree a second time as it is: the method's bias")
    ap.add_argument("--profile", action="store_true",
                    help="one run of this tree under py-spy; prints where each path's time goes")
    args = ap.parse_args(argv)
    if args.profile:
        res = one_run(None, args.requests, args.value_size, args.share_fetch_version, profile=True)
        print(f"Produce {res['produce_us']:.1f} µs, ShareFetch+ack {res['fetch_us']:.1f} µs (py-spy adds some)")
        return
    trees: list[tuple[str, Path | None, dict[str, str]]] = [("this tree", None, {})]
    if args.baseline is not None:
        trees.insert(0, (f"baseline {args.baseline}", args.baseline.resolve(), {}))
    if args.with_settings:
        settings = dict(s.split("=", 1) for s in args.with_settings)
        trees.append((f"this tree with {', '.join(args.with_settings)}", None, settings))
    if args.aa:
        trees.append(("this tree again (A/A)", None, {}))
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in trees}
    if args.interleave:
        _interleaved(trees, results, args)
        return
    for run in range(args.runs):
        for name, tree, overrides in trees:
            res = one_run(tree, args.requests, args.value_size, args.share_fetch_version, overrides=overrides)
            results[name].append(res)
            print(f"run {run + 1} {name}: Produce {res['produce_us']:.1f} µs ({res['produce_sys_us']:.1f} in the "
                  f"kernel), ShareFetch+ack {res['fetch_us']:.1f} µs ({res['fetch_sys_us']:.1f} in the kernel)",
                  flush=True)
    print(f"\nbroker CPU per request, µs (median of {args.runs}, min–max; {args.requests:,} requests per run)")
    print("| broker | one-record Produce | of it in the kernel | ShareFetch with one acknowledgement | of it in the kernel |")
    print("|---|---|---|---|---|")
    for name, runs in results.items():
        cells = []
        for field in ("produce_us", "produce_sys_us", "fetch_us", "fetch_sys_us"):
            vals = [r[field] for r in runs]
            cells.append(f"{statistics.median(vals):.0f} ({min(vals):.0f}–{max(vals):.0f})")
        print(f"| {name} | {' | '.join(cells)} |")


def _interleaved(trees: list[tuple[str, Path | None, dict[str, str]]], results: dict[str, list[dict[str, float]]],
                 args: argparse.Namespace) -> None:
    for run in range(args.runs):
        got = interleaved_run([(tree, overrides) for _, tree, overrides in trees], args.requests, args.value_size,
                              args.share_fetch_version, args.view_every)
        for (name, _, _), res in zip(trees, got):
            results[name].append(res)
        print(f"run {run + 1}: " + "; ".join(f"{name} Produce {res['produce_us']:.1f} µs, ShareFetch+ack "
                                              f"{res['fetch_us']:.1f} µs" for (name, _, _), res in zip(trees, got)),
              flush=True)
    # The reference each broker is compared with, run by run: the first broker, or with --aa (and
    # no baseline) the mean of this tree's two plain brokers, which is steadier than either.
    if args.aa and args.baseline is None:
        reference = [trees[0][0], "this tree again (A/A)"]
        label = "this tree (mean of its two plain brokers)"
    else:
        reference = [trees[0][0]]
        label = trees[0][0]
    print(f"\nbroker CPU per request, µs, brokers interleaved (median of {args.runs}, min–max; "
          f"{args.requests:,} requests per run); the job is one of each, against {label} run by run")
    print("(rate: jobs/s of one client doing one job after another, a Produce and a ShareFetch, from the mean round trips)")
    print(f"| broker | one-record Produce | ShareFetch with one acknowledgement | a job | a job against {label} "
          f"| rate | rate against {label} |")
    print("|---|---|---|---|---|---|---|")

    def spread(values: list[float], spec: str, unit: str = "") -> str:
        return (f"{format(statistics.median(values), spec)}{unit} ({format(min(values), spec)} to "
                f"{format(max(values), spec)})")

    def job_us(r: dict[str, float]) -> float:
        return r["produce_us"] + r["fetch_us"]

    def rate(r: dict[str, float]) -> float:
        return 1e6 / (r["produce_rtt_us"] + r["fetch_rtt_us"])

    runs_of_reference = list(zip(*(results[name] for name in reference)))
    base_jobs = [statistics.fmean(job_us(r) for r in per_run) for per_run in runs_of_reference]
    base_rates = [statistics.fmean(rate(r) for r in per_run) for per_run in runs_of_reference]
    for name, runs in results.items():
        jobs = [job_us(r) for r in runs]
        rates = [rate(r) for r in runs]
        cells = [spread([r["produce_us"] for r in runs], ".1f"), spread([r["fetch_us"] for r in runs], ".1f"),
                 spread(jobs, ".1f"), spread([(job / b - 1) * 100 for job, b in zip(jobs, base_jobs)], "+.1f", "%"),
                 spread(rates, ",.0f"), spread([(r / b - 1) * 100 for r, b in zip(rates, base_rates)], "+.1f", "%")]
        print(f"| {name} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
