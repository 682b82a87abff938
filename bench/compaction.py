"""The log cleaner: how fast it compacts, and what it costs produce latency while it runs.

One fresh broker. A topic is filled with keyed records (each key updated `--updates` times, 100-byte
values, uncompressed) while its policy is `delete`, then switched to `compact`: the cleaner
compacts it in its cleaner process. Printed: MB of log cleaned per second (the segments rewritten,
over the cleaner process's CPU time, over its wall time, and over the round's wall time including the
swap), and the p50 /
p99 / max latency of acks=1 produces of 100-byte records at `--rate` per second to another topic,
measured for the same length of time with no cleaning and while the cleaner works.

    python -m bench.compaction [--mb 64] [--updates 5] [--rate 1000] [--io-max-bytes-per-second N]"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from sharebroker.testing import running_broker

QUIET = {"log_level": 3}


def _fill(bootstrap: str, topic: str, megabytes: int, updates: int) -> int:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 65536,
                  "queue.buffering.max.messages": 1_000_000, **QUIET})
    records = megabytes * 1_000_000 // 125  # 100-byte values, ~10-byte keys, record and batch overhead
    keys = max(records // updates, 1)
    ts = int(time.time() * 1000) - 60_000
    for i in range(records):
        key = f"key-{i % keys:08d}".encode()
        while True:
            try:
                p.produce(topic, key=key, value=(b"%09d" % i) * 10 + b"0123456789", timestamp=ts)
                break
            except BufferError:
                p.poll(0.01)
    # A later timestamp than segment.ms after the fill: the fill's last segment stops being active.
    p.produce(topic, key=b"roll", value=b"r", timestamp=ts + 30_000)
    p.flush(60)
    return records


def _latencies(bootstrap: str, topic: str, rate: int, until: Callable[[], bool]) -> list[float]:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1, **QUIET})
    out: list[float] = []

    def report(sent: float) -> Callable[[Any, Any], None]:
        return lambda err, _msg: out.append(time.perf_counter() - sent) if err is None else None

    interval = 1.0 / rate
    due = time.perf_counter()
    value = b"v" * 100
    while not until():
        now = time.perf_counter()
        while now >= due:
            p.produce(topic, value=value, on_delivery=report(now))
            due += interval
        p.poll(min(max(due - time.perf_counter(), 0), 0.001))
    p.flush(30)
    return out


def _cleaned(broker: Any, topic: str) -> list[dict[str, Any]]:
    return [e for e in broker.log_events("log cleaned") if e.get("topic") == topic]


def _every(period: float, check: Callable[[], bool]) -> Callable[[], bool]:
    """`check`, asked at most every `period` seconds (reading the broker's log is not free)."""
    state = [0.0, False]

    def limited() -> bool:
        now = time.perf_counter()
        if now - state[0] >= period:
            state[0], state[1] = now, check()
        return bool(state[1])
    return limited


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000 if s else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=64, help="size of the log to compact")
    parser.add_argument("--updates", type=int, default=5, help="records per key")
    parser.add_argument("--rate", type=int, default=1000, help="latency probe: produces per second")
    parser.add_argument("--io-max-bytes-per-second", type=float, default=None,
                        help="log.cleaner.io.max.bytes.per.second (default: unlimited)")
    args = parser.parse_args()
    overrides: dict[str, object] = {"log.cleaner.backoff.ms": 100}
    if args.io_max_bytes_per_second is not None:
        overrides["log.cleaner.io.max.bytes.per.second"] = args.io_max_bytes_per_second
    with running_broker(overrides) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
        futures = admin.create_topics([
            NewTopic("bench-compacted", 1, 1, config={"cleanup.policy": "delete", "segment.ms": "10000",
                                                      "segment.bytes": str(64 << 20), "min.cleanable.dirty.ratio": "0.01"}),
            NewTopic("bench-latency", 1, 1)])
        for f in futures.values():
            f.result(15)
        # The cleaner process starts with the first log worth cleaning: a small one first, so that
        # the start (a Python interpreter) is not in the figures.
        warm = admin.create_topics([NewTopic("bench-warmup", 1, 1, config={
            "cleanup.policy": "compact", "segment.ms": "10000", "min.cleanable.dirty.ratio": "0.01"})])
        warm["bench-warmup"].result(15)
        _fill(broker.bootstrap, "bench-warmup", 1, args.updates)
        deadline = time.monotonic() + 60
        while not _cleaned(broker, "bench-warmup") and time.monotonic() < deadline:
            time.sleep(0.05)
        t0 = time.perf_counter()
        records = _fill(broker.bootstrap, "bench-compacted", args.mb, args.updates)
        fill_s = time.perf_counter() - t0
        size = sum(f.stat().st_size for f in (broker.data_dir / "bench-compacted-0").glob("*.log"))

        # Latency while the cleaner works, then for as long again without it.
        resource = ConfigResource("topic", "bench-compacted", incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
        # Done when the cleaner checkpoints the topic (a small file: parsing the broker's log here
        # would cost the latency probe's own process the time it measures).
        checkpoint = broker.data_dir / "cleaner-offset-checkpoint"
        cleaned = _every(0.05, lambda: checkpoint.exists() and "bench-compacted 0 " in checkpoint.read_text())
        admin.incremental_alter_configs([resource])[resource].result(15)
        started = time.perf_counter()
        during = _latencies(broker.bootstrap, "bench-latency", args.rate, cleaned)
        wall = time.perf_counter() - started
        stop_at = time.perf_counter() + wall
        baseline = _latencies(broker.bootstrap, "bench-latency", args.rate, lambda: time.perf_counter() >= stop_at)
        event = _cleaned(broker, "bench-compacted")[0]
        after = sum(f.stat().st_size for f in (broker.data_dir / "bench-compacted-0").glob("*.log"))
    mb = event["bytes_read"] / 1e6
    print(f"log: {records:,} records, {size / 1e6:.1f} MB in {fill_s:.1f} s; compacted to {after / 1e6:.1f} MB "
          f"({event['map_keys']:,} keys)")
    cpu = event["worker_cpu_seconds"]
    print(f"cleaner: {mb:.1f} MB cleaned (+{event['map_bytes_read'] / 1e6:.1f} MB read for the key map): "
          f"{mb / cpu:.1f} MB per CPU second of the cleaner process ({cpu:.2f} s); wall time "
          f"{event['worker_seconds']:.2f} s in the cleaner = {mb / event['worker_seconds']:.1f} MB/s, "
          f"{event['seconds']:.2f} s with the swap = {mb / event['seconds']:.1f} MB/s")
    print(f"{'produce latency (acks=1)':28} {'records':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for name, lat in (("no cleaning", baseline), ("while the cleaner runs", during)):
        print(f"{name:28} {len(lat):8} {_pct(lat, 0.5):8.2f} {_pct(lat, 0.99):8.2f} {_pct(lat, 1.0):8.2f}")


if __name__ == "__main__":
    main()
