"""Idle connections (issue 24): a fresh broker, then for each count N that many client connections
opened, each sending ApiVersions once (as a client does on connect) and then left idle; the broker's
RSS growth per connection, and an active client's request latency (one-record Produce, acks=1,
one at a time) with the idle connections open next to the same with none.

    python -m bench.connections [--counts 0 1000 10000] [--requests 3000]"""

from __future__ import annotations

import argparse
import resource
import socket
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.partitions import Wire, _nested, rss_mb
from kio.index import load_request_schema

from sharebroker.protocol.client import encode_request
from sharebroker.protocol.record_batch import encode_batch
from sharebroker.testing import BrokerProcess

TOPIC = "conn-bench"


def _api_versions_frame() -> bytes:
    cls = load_request_schema(18, 3)
    return encode_request(cls(client_software_name="bench", client_software_version="1"), 1, "idle")


def open_idle(bootstrap: str, n: int) -> list[socket.socket]:
    """n connections that each complete one ApiVersions exchange, then stay open and silent."""
    host, port = bootstrap.rsplit(":", 1)
    frame = _api_versions_frame()
    socks: list[socket.socket] = []
    for _ in range(n):
        s = socket.create_connection((host, int(port)), timeout=60)
        s.sendall(frame)
        socks.append(s)
    for s in socks:  # each response: a 4-byte size, then that many bytes
        head = b""
        while len(head) < 4:
            head += s.recv(4 - len(head))
        left = int.from_bytes(head, "big")
        while left:
            left -= len(s.recv(left))
    return socks


def produce_latencies(bootstrap: str, n: int) -> list[float]:
    wire = Wire(bootstrap)
    try:
        cls = load_request_schema(0, 9)
        topic_cls, part_cls = _nested(0, 9, "TopicProduceData"), _nested(0, 9, "PartitionProduceData")
        records = encode_batch([(None, b"x" * 100)], timestamp_ms=int(time.time() * 1000))
        req = cls(transactional_id=None, acks=1, timeout=_ms(5000), topic_data=(topic_cls(
            name=TOPIC, partition_data=(part_cls(index=0, records=records),)),))
        took = []
        for _ in range(n):
            t0 = time.perf_counter()
            wire.request(req)
            took.append((time.perf_counter() - t0) * 1000)
        return took
    finally:
        wire.close()


def _ms(v: int) -> Any:
    import datetime
    return datetime.timedelta(milliseconds=v)


def percentile(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def measure(counts: list[int], requests: int) -> list[dict[str, float]]:
    """A fresh broker; for each count, that many idle connections opened beside an active client."""
    need = max(counts) + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    rows = []
    with tempfile.TemporaryDirectory(prefix="sharebroker-conn-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data").start()
        try:
            wire = Wire(broker.bootstrap)
            create = load_request_schema(19, 7)
            topic_cls = _nested(19, 7, "CreatableTopic")
            wire.request(create(topics=(topic_cls(name=TOPIC, num_partitions=1, replication_factor=-1,
                                                  assignments=(), configs=()),),
                                timeout=_ms(30000), validate_only=False))
            wire.close()
            produce_latencies(broker.bootstrap, 200)  # warm up
            base = rss_mb(broker.proc.pid) * 1024
            for count in counts:
                t0 = time.perf_counter()
                socks = open_idle(broker.bootstrap, count)
                opened = time.perf_counter() - t0
                rss = rss_mb(broker.proc.pid) * 1024
                took = produce_latencies(broker.bootstrap, requests)
                rows.append({"idle": count, "rss_mb": rss / 1024, "kb_per_conn": (rss - base) / count if count else 0.0,
                             "open_s": opened, "p50_ms": statistics.median(took), "p99_ms": percentile(took, 0.99)})
                for s in socks:
                    s.close()
                deadline = time.monotonic() + 30  # the broker notices the closes
                while time.monotonic() < deadline and len(list(Path(f"/proc/{broker.proc.pid}/fd").iterdir())) > 200:
                    time.sleep(0.1)
        finally:
            broker.stop()
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", type=int, nargs="+", default=[0, 1000, 10000])
    ap.add_argument("--requests", type=int, default=3000)
    args = ap.parse_args(argv)
    print(f"{'idle':>7} {'RSS MB':>7} {'KB/conn':>8} {'open s':>7} {'p50 ms':>7} {'p99 ms':>7}")
    for r in measure(args.counts, args.requests):
        print(f"{r['idle']:>7} {r['rss_mb']:>7.1f} {r['kb_per_conn']:>8.1f} {r['open_s']:>7.2f} "
              f"{r['p50_ms']:>7.3f} {r['p99_ms']:>7.3f}")


if __name__ == "__main__":
    main()
