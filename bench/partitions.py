"""Many partitions under a small open-file limit (issue 24): for each partition count, a fresh
broker whose RLIMIT_NOFILE is set in the child process (`--ulimit`, soft = hard), 100 topics of
N/100 partitions created in CreateTopics batches while another client sends Metadata (no topics)
back to back (its round trips while the partitions are made: how long creation holds the event
loop), one record produced to each of a sample of partitions, Metadata(all) latency, a clean
restart, the sample fetched back, and the broker's RSS and open descriptors (/proc/<pid>/fd) along
the way.

    python -m bench.partitions --partitions 1000 10000 100000 [--ulimit 4096] [--sample 1000]"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kio.index import load_request_schema

from sharebroker.protocol.client import ResponseStream, decode_response, encode_request
from sharebroker.protocol.record_batch import encode_batch
from sharebroker.testing import BrokerProcess

TOPICS = 100
CLIENT = "bench-partitions"


class Wire:
    """One blocking connection: a request out, its response in."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=600)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.stream = ResponseStream()
        self.correlation = 0

    def request(self, req: Any) -> Any:
        self.correlation += 1
        self.sock.sendall(encode_request(req, self.correlation, CLIENT))
        while (frame := self.stream.next_frame()) is None:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            self.stream.feed(chunk)
        return decode_response(frame, type(req).__api_key__, type(req).__version__)[1]

    def close(self) -> None:
        self.sock.close()


def _nested(api_key: int, version: int, name: str) -> Any:
    return getattr(sys.modules[load_request_schema(api_key, version).__module__], name)


def create_topics(wire: Wire, names: list[str], partitions: int) -> None:
    cls, tcls = load_request_schema(19, 7), _nested(19, 7, "CreatableTopic")
    req = cls(topics=tuple(tcls(name=n, num_partitions=partitions, replication_factor=1, assignments=(), configs=())
                           for n in names), timeout=datetime.timedelta(seconds=600), validate_only=False)
    errors = [(t.name, int(t.error_code), t.error_message) for t in wire.request(req).topics if int(t.error_code)]
    if errors:
        raise RuntimeError(f"CreateTopics failed: {errors[:3]}")


def produce(wire: Wire, sample: list[tuple[str, int]]) -> None:
    cls = load_request_schema(0, 9)
    pcls, tcls = _nested(0, 9, "PartitionProduceData"), _nested(0, 9, "TopicProduceData")
    batch = bytes(encode_batch([(None, b"x" * 100)], timestamp_ms=int(time.time() * 1000)))
    by_topic: dict[str, list[int]] = {}
    for t, p in sample:
        by_topic.setdefault(t, []).append(p)
    req = cls(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=60),
              topic_data=tuple(tcls(name=t, partition_data=tuple(pcls(index=p, records=batch) for p in ps))
                               for t, ps in by_topic.items()))
    resp = wire.request(req)
    errors = [int(p.error_code) for t in resp.responses for p in t.partition_responses if int(p.error_code)]
    if errors:
        raise RuntimeError(f"Produce failed for {len(errors)} partitions: {sorted(set(errors))}")


def fetched(wire: Wire, sample: list[tuple[str, int]]) -> int:
    """How many of the sampled partitions return their record from offset 0."""
    cls = load_request_schema(1, 12)
    pcls, tcls = _nested(1, 12, "FetchPartition"), _nested(1, 12, "FetchTopic")
    by_topic: dict[str, list[int]] = {}
    for t, p in sample:
        by_topic.setdefault(t, []).append(p)
    req = cls(cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=64 << 20,
              isolation_level=0, session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=(),
              topics=tuple(tcls(topic=t, partitions=tuple(
                  pcls(partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                       log_start_offset=-1, partition_max_bytes=1 << 20) for p in ps)) for t, ps in by_topic.items()))
    resp = wire.request(req)
    return sum(1 for t in resp.responses for p in t.partitions if int(p.error_code) == 0 and p.records)


def metadata_ms(wire: Wire, runs: int) -> tuple[float, float, int]:
    """p50 and p99 of Metadata(all topics) round trips (until the whole answer is received; the
    client's decoding is left out), and the partitions the last answer listed."""
    cls = load_request_schema(3, 12)
    req = cls(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    times = []
    frame = b""
    for _ in range(runs):
        wire.correlation += 1
        t0 = time.perf_counter()
        wire.sock.sendall(encode_request(req, wire.correlation, CLIENT))
        while (got := wire.stream.next_frame()) is None:
            chunk = wire.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            wire.stream.feed(chunk)
        times.append((time.perf_counter() - t0) * 1000)
        frame = got
    listed = sum(len(t.partitions) for t in decode_response(frame, 3, 12)[1].topics)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.99))], listed


class BusyClient:
    """Another client meanwhile: Metadata for no topics, one in flight, back to back, on a thread
    of its own, until stopped; the round trips it measured."""

    def __init__(self, bootstrap: str) -> None:
        self._wire = Wire(bootstrap)
        self._stop = threading.Event()
        self.round_trips_ms: list[float] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        cls = load_request_schema(3, 12)
        req = cls(topics=[], allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        while not self._stop.is_set():
            t0 = time.perf_counter()
            self._wire.request(req)
            self.round_trips_ms.append((time.perf_counter() - t0) * 1000)

    def stop(self) -> list[float]:
        self._stop.set()
        self._thread.join()
        self._wire.close()
        return self.round_trips_ms


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def run(partitions: int, ulimit: int, sample_size: int, metadata_runs: int, overrides: dict[str, str]) -> dict[str, Any]:
    per_topic = max(1, partitions // TOPICS)
    names = [f"t{i:03d}" for i in range(min(TOPICS, partitions))]
    out: dict[str, Any] = {"partitions": per_topic * len(names), "ulimit": ulimit}
    rng = random.Random(24)
    sample = sorted(rng.sample([(n, p) for n in names for p in range(per_topic)], min(sample_size, partitions)))
    with tempfile.TemporaryDirectory(prefix="bench-partitions-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data", overrides, open_files=(ulimit, ulimit))
        broker.start(timeout=600)
        try:
            assert broker.proc is not None
            wire = Wire(broker.bootstrap)
            batch = max(1, 10_000 // per_topic)  # about 10,000 partitions per CreateTopics
            busy = BusyClient(broker.bootstrap)
            t0 = time.perf_counter()
            try:
                for i in range(0, len(names), batch):
                    create_topics(wire, names[i:i + batch], per_topic)
                out["create_s"] = time.perf_counter() - t0
            finally:
                waits = sorted(busy.stop())
            if waits:
                out["busy_p50_ms"], out["busy_max_ms"] = statistics.median(waits), waits[-1]
            t0 = time.perf_counter()
            produce(wire, sample)
            out["produce_s"] = time.perf_counter() - t0
            out["metadata_p50_ms"], out["metadata_p99_ms"], listed = metadata_ms(wire, metadata_runs)
            assert listed >= out["partitions"], (listed, out["partitions"])
            out["rss_mb"], out["fds"] = rss_mb(broker.proc.pid), open_fds(broker.proc.pid)
            wire.close()
            t0 = time.perf_counter()
            broker.stop(timeout=600)
            out["stop_s"] = time.perf_counter() - t0
            broker.start(timeout=600)
            out["restart_s"] = broker.start_seconds
            wire = Wire(broker.bootstrap)
            out["after_restart_metadata_p50_ms"] = metadata_ms(wire, metadata_runs)[0]
            out["fetched"] = fetched(wire, sample)
            out["sample"] = len(sample)
            out["after_restart_rss_mb"], out["after_restart_fds"] = rss_mb(broker.proc.pid), open_fds(broker.proc.pid)
            wire.close()
        except Exception as exc:  # a count that does not fit: say so and go on to the next
            out["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        finally:
            broker.kill()
    return out


def _fmt(r: dict[str, Any], key: str, spec: str) -> str:
    return format(r[key], spec) if key in r else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--ulimit", type=int, default=4096, help="soft and hard RLIMIT_NOFILE of the broker")
    parser.add_argument("--sample", type=int, default=1000, help="partitions produced to and fetched back")
    parser.add_argument("--metadata-runs", type=int, default=20)
    parser.add_argument("-o", "--override", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args()
    overrides = dict(o.split("=", 1) for o in args.override)
    print("| partitions | ulimit -n | create s | another client's round trip while creating p50 / max ms "
          "| Metadata(all) p50 / p99 ms | restart s | Metadata after restart p50 ms | fetched | RSS MB (after restart) "
          "| open fds (after restart) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in args.partitions:
        r = run(n, args.ulimit, args.sample, args.metadata_runs, overrides)
        print(f"| {r['partitions']:,} | {r['ulimit']} | {_fmt(r, 'create_s', '.1f')} | "
              f"{_fmt(r, 'busy_p50_ms', '.1f')} / {_fmt(r, 'busy_max_ms', '.0f')} | "
              f"{_fmt(r, 'metadata_p50_ms', '.1f')} / {_fmt(r, 'metadata_p99_ms', '.1f')} | {_fmt(r, 'restart_s', '.2f')} "
              f"| {_fmt(r, 'after_restart_metadata_p50_ms', '.1f')} | "
              f"{r.get('fetched', '-')}/{r.get('sample', '-')} | {_fmt(r, 'rss_mb', '.0f')} "
              f"({_fmt(r, 'after_restart_rss_mb', '.0f')}) | {r.get('fds', '-')} ({r.get('after_restart_fds', '-')}) |"
              + (f" {r['error']}" if "error" in r else ""), flush=True)


if __name__ == "__main__":
    main()
