"""`python -m bench.inprocess`: what a broker setting costs per request, resolved to the
microsecond. Two brokers run in this process on one event loop, one with the setting and one
without, and the same one-record job-queue requests go to them in turn (a ShareFetch that
acknowledges the job it got last and acquires the next, then the Produce of the job after), through the broker's real connection
code: frames are fed to its FrameProtocol and its answers taken from a transport that keeps
them, so no socket, no other process and no scheduler sits between the two. Each request is
timed; the median of the per-request differences (with, minus without; the order alternates) is
the setting's cost to a typical request, and the difference of the means its cost on average (the
rare costly requests included, such as a metrics fold or a garbage collection, which the median
leaves out and CPU time does not); an A/A run of two identical brokers shows the method's own bias.

    python -m bench.inprocess [--requests 12000] [--with metrics.listener=127.0.0.1:0] [--aa]

Over TCP (bench.request_cpu, bench.metrics_overhead) the same cost is larger and blurred: each
request wakes a sleeping process whose caches other work has cooled. This bench gives the part
the broker's Python code adds."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import gc
import shutil
import statistics
import tempfile
import time
import uuid
from typing import Any

import uvloop
from kio.index import load_request_schema

from bench import request_cpu as rc
from sharebroker.broker.connection import Connection
from sharebroker.broker.frames import FrameProtocol
from sharebroker.broker.server import Broker
from sharebroker.config import BrokerConfig
from sharebroker.protocol.client import ResponseStream, decode_response, encode_request

WARM_UP = 1000  # requests of each broker left out of the figures
PRODUCE_VERSION = 9


class _KeepingTransport:
    """What a FrameProtocol needs of a transport; written answers go to `sink`."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 0) if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def write(self, data: Any) -> None:
        self.sink(bytes(data))

    def writelines(self, parts: list[Any]) -> None:
        self.sink(b"".join(bytes(p) for p in parts))

    def close(self) -> None:
        pass


class InProcessClient:
    """One client connection served by the broker's Connection, without a socket."""

    def __init__(self, broker: Broker) -> None:
        self.stream = ResponseStream()
        self._waiter: asyncio.Future[bytes] | None = None
        self.protocol = FrameProtocol(100 << 20, lambda _: None)
        self.protocol.connection_made(_KeepingTransport(self._answered))  # type: ignore[arg-type]
        self.task = asyncio.get_running_loop().create_task(Connection(broker, self.protocol, "PLAINTEXT").serve())
        self.correlation_id = 0

    def _answered(self, data: bytes) -> None:
        self.stream.feed(data)
        frame = self.stream.next_frame()
        if frame is not None and self._waiter is not None:
            self._waiter.set_result(frame)

    async def send_frame(self, frame: bytes, api_key: int, version: int) -> Any:
        self._waiter = asyncio.get_running_loop().create_future()
        buf = self.protocol.get_buffer(len(frame))
        buf[:len(frame)] = frame
        self.protocol.buffer_updated(len(frame))
        _, resp = decode_response(await self._waiter, api_key, version)
        return resp

    async def request(self, req: Any) -> Any:
        self.correlation_id += 1
        return await self.send_frame(encode_request(req, self.correlation_id, "bench"), type(req).__api_key__,
                                     type(req).__version__)


async def job_queue_broker(overrides: dict[str, str], n: int, data_dir: str
                           ) -> tuple[Broker, InProcessClient, list[bytes], list[bytes]]:
    """A started broker with its first one-record job, a share member holding the partition, the
    n ShareFetch frames that take the jobs one by one (each acknowledging the one before), and the
    n Produce frames of the jobs after the first (each produced after the ShareFetch before it)."""
    broker = Broker(BrokerConfig.load(None, {}, {"log.dirs": data_dir, "listeners": "PLAINTEXT://127.0.0.1:0",
                                                 **overrides}))
    await broker.start()
    client, coordinator = InProcessClient(broker), InProcessClient(broker)
    create = load_request_schema(19, 7)
    topic = rc._nested(create, "topics")
    resp = await client.request(create(topics=(topic(name=rc.TOPIC, num_partitions=1, replication_factor=1,
                                                     assignments=(), configs=()),),
                                       timeout=datetime.timedelta(seconds=30), validate_only=False))
    topic_id = resp.topics[0].topic_id
    member, epoch = str(uuid.uuid4()), 0
    heartbeat = load_request_schema(76, 1)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        resp = await coordinator.request(heartbeat(group_id=rc.GROUP, member_id=member, member_epoch=epoch,
                                                   rack_id=None, subscribed_topic_names=(rc.TOPIC,)))
        epoch = resp.member_epoch
        if resp.assignment is not None and resp.assignment.topic_partitions:
            break
        await asyncio.sleep(0.05)
    else:
        raise RuntimeError("no assignment within 30 s")
    await client.request(rc.share_fetch(member, 0, topic_id, None, 1, max_wait_ms=0))  # the session, at offset 0
    produces, version = rc.produce_frames(n + 1, 100)
    assert version == PRODUCE_VERSION
    await client.send_frame(produces[0], 0, PRODUCE_VERSION)
    fetches = [encode_request(rc.share_fetch(member, i + 1, topic_id, i - 1 if i else None, 1), i + 1, "bench")
               for i in range(n)]
    return broker, client, fetches, produces[1:]


async def compare(settings: dict[str, str], n: int, aa: bool) -> dict[str, float]:
    """Per-request µs of the brokers without and with `settings` (both without for an A/A run)."""
    dirs = [tempfile.mkdtemp(prefix="sharebroker-inprocess-") for _ in range(2)]
    try:
        without = await job_queue_broker({}, n, dirs[0])
        with_ = await job_queue_broker({} if aa else settings, n, dirs[1])
        gc.freeze()  # as the broker's own run() does once started
        took: dict[str, list[float]] = {"without": [], "with": []}
        produced: dict[str, list[float]] = {"without": [], "with": []}
        clock = time.perf_counter
        for i in range(n):
            order = (("without", without), ("with", with_)) if i % 2 else (("with", with_), ("without", without))
            for name, (_, client, fetches, _) in order:
                t0 = clock()
                resp = await client.send_frame(fetches[i], 78, 1)
                took[name].append(clock() - t0)
                p = resp.responses[0].partitions[0]
                if [(a.first_offset, a.last_offset) for a in p.acquired_records] != [(i, i)]:
                    raise RuntimeError(f"job {i} not acquired: {p}")
            for name, (_, client, _, produces) in order:  # the next job
                t0 = clock()
                await client.send_frame(produces[i], 0, PRODUCE_VERSION)
                produced[name].append(clock() - t0)
        for broker, _, _, _ in (without, with_):
            await broker.stop()
    finally:
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
    a, b = took["without"][WARM_UP:], took["with"][WARM_UP:]
    pa, pb = produced["without"][WARM_UP:], produced["with"][WARM_UP:]
    us = 1e6
    return {"without_us": statistics.median(a) * us, "with_us": statistics.median(b) * us,
            "paired_diff_us": statistics.median(y - x for x, y in zip(a, b)) * us,
            "produce_without_us": statistics.median(pa) * us, "produce_with_us": statistics.median(pb) * us,
            "produce_paired_diff_us": statistics.median(y - x for x, y in zip(pa, pb)) * us,
            # everything, the rare costly requests included (a metrics fold, a collection): what CPU time sees
            "job_mean_without_us": (statistics.fmean(a) + statistics.fmean(pa)) * us,
            "job_mean_diff_us": (statistics.fmean(b) - statistics.fmean(a) + statistics.fmean(pb) - statistics.fmean(pa)) * us}


def _spread(values: list[float], unit: str) -> str:
    return f"{statistics.median(values):+.2f}{unit} (min {min(values):+.2f}, max {max(values):+.2f})"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=12000, help=f"ShareFetch requests per broker (> {WARM_UP})")
    ap.add_argument("--with", dest="settings", action="append", default=[], metavar="NAME=VALUE",
                    help="the setting to measure (default metrics.listener=127.0.0.1:0)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--aa", action="store_true", help="also run with both brokers alike, for the method's bias")
    args = ap.parse_args(argv)
    settings = dict(s.split("=", 1) for s in args.settings) or {"metrics.listener": "127.0.0.1:0"}
    label = ", ".join(f"{k}={v}" for k, v in settings.items())
    modes = [False, True] if args.aa else [False]
    for aa in modes:
        diffs, produce_diffs, job_diffs, shares = [], [], [], []
        for run in range(args.runs):
            res = uvloop.run(compare(settings, args.requests, aa))
            diffs.append(res["paired_diff_us"])
            produce_diffs.append(res["produce_paired_diff_us"])
            job_diffs.append(res["job_mean_diff_us"])
            shares.append(res["job_mean_diff_us"] / res["job_mean_without_us"] * 100)
            print(f"  {'A/A' if aa else label} run {run + 1}: one-ack ShareFetch {res['without_us']:.1f} µs without, "
                  f"{res['with_us']:.1f} µs with, median paired difference {res['paired_diff_us']:+.2f} µs; "
                  f"one-record Produce {res['produce_without_us']:.1f} / {res['produce_with_us']:.1f} µs, "
                  f"{res['produce_paired_diff_us']:+.2f} µs; a job's mean {res['job_mean_without_us']:.1f} µs without, "
                  f"{res['job_mean_diff_us']:+.2f} µs with", flush=True)
        what = "A/A (both without)" if aa else label
        print(f"{what}, median of {args.runs} runs: the typical request (median of paired differences) "
              f"ShareFetch {_spread(diffs, ' µs')}, Produce {_spread(produce_diffs, ' µs')}; "
              f"a job on average (means, rare costly requests included) {_spread(job_diffs, ' µs')}, "
              f"{_spread(shares, '%')}", flush=True)


if __name__ == "__main__":
    main()
