"""The long mixed run (issue 24: nothing grows with time). A fresh broker; a producer at a steady
rate into a 4-partition topic; a classic consumer group committing as it goes; two explicit-ack
ShareConsumers that accept most records, release some (they come back) and reject a few. Every
interval the broker's RSS, open descriptors, the size on disk of `__share_group_state` and
`__consumer_offsets`, the size of all offset and time index files (about 20 bytes per 4 KiB of
log; the broker holds only the active segments' in memory, and sealed ones' read back for lookups
within a fixed budget), and the producer's delivery latency in that interval are printed; at the
end, the first sample beside the last.

Without retention settings the log only grows, and the index files with it (not RSS); with the
default 1 GiB segments nothing rolls in a short run, so `-o log.segment.bytes=8388608` makes
sealed segments. To see a bounded disk as well: `-o log.retention.bytes=33554432
-o log.retention.check.interval.ms=30000` (and the state topic's segments, see the README).

    python -m bench.soak [--minutes 30] [--rate 500] [--interval 60] [-o NAME=VALUE ...]"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

from confluent_kafka import AcknowledgeType, Consumer, Producer

from bench import clients
from bench.partitions import open_fds, rss_mb
from bench.run import CTX, FreshBroker, child, create_topic, reap

TOPIC = "soak"
PARTITIONS = 4


def producer(bootstrap: str, rate: int, stop: Any, latencies: Any) -> None:
    """`rate` records a second; each delivery's latency (ms) goes onto the `latencies` queue in
    batches."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **clients.QUIET})
    pending: list[float] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            pending.append((time.time() - float(msg.key())) * 1000)

    interval = 1.0 / rate
    next_at = time.monotonic()
    while not stop.is_set():
        now = time.monotonic()
        if now < next_at:
            p.poll(next_at - now)
            continue
        p.produce(TOPIC, key=repr(time.time()).encode(), value=os.urandom(200), on_delivery=delivered)
        next_at += interval
        if len(pending) >= 200:
            latencies.put(pending)
            pending = []
    p.flush(10)
    latencies.put(pending)


def classic(bootstrap: str, stop: Any) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "soak-classic", "auto.offset.reset": "earliest",
                  "enable.auto.commit": True, "auto.commit.interval.ms": 1000, **clients.QUIET})
    c.subscribe([TOPIC])
    try:
        while not stop.is_set():
            c.poll(0.5)
    finally:
        c.close()


def share(bootstrap: str, index: int, stop: Any) -> None:
    """Accept most, release one in 20 (it is delivered again), reject one in 50."""
    with clients.share_consumer(bootstrap, "soak-share", f"soak-{index}", TOPIC,
                                **{"share.acknowledgement.mode": "explicit"}) as c:
        seen = 0
        for msgs in clients.polls(c, stop, 0.5):
            for m in msgs:
                if m.error() is not None:
                    continue
                seen += 1
                kind = (AcknowledgeType.RELEASE if seen % 20 == 0 else
                        AcknowledgeType.REJECT if seen % 50 == 0 else AcknowledgeType.ACCEPT)
                c.acknowledge(m, kind)


def dir_mb(data: Path, prefix: str) -> float:
    total = 0
    for d in data.glob(f"{prefix}-*"):
        total += sum(f.stat().st_size for f in d.iterdir() if f.is_file())
    return total / 1e6


def index_mb(data: Path) -> float:
    """The offset and time index files of every partition (the active segments' entries are in
    memory as well, less the last few written in groups)."""
    return sum(f.stat().st_size for pattern in ("*/*.index", "*/*.timeindex") for f in data.glob(pattern)) / 1e6


def run(minutes: float, rate: int, interval: float, overrides: dict[str, str] | None = None,
        show: bool = True) -> dict[str, Any]:
    """One long run on a fresh broker: a sample every `interval` seconds (RSS, descriptors, the state
    topics' and indexes' sizes, the producer's delivery latency p50/p99 since the last sample), and
    the latency p99 of the first and of the last minute, each over all of that minute's deliveries
    (the first minute's without its first interval, the clients' start-up, when the interval is
    shorter than a minute)."""
    fresh = FreshBroker()
    fresh.broker.overrides.update(overrides or {})
    rows: list[dict[str, float]] = []
    first_minute: list[float] = []
    last_minute: list[tuple[float, list[float]]] = []  # (sampled at, deliveries) of the samples in reach
    delivered = 0
    with fresh as b:
        create_topic(b.bootstrap, TOPIC, PARTITIONS, share_group="soak-share")
        data = b.data_dir
        stop = CTX.Event()
        latencies = CTX.Queue()
        procs = [child(producer, b.bootstrap, rate, stop, latencies), child(classic, b.bootstrap, stop),
                 child(share, b.bootstrap, 0, stop), child(share, b.bootstrap, 1, stop)]
        if show:
            print(f"{'min':>5} {'RSS MB':>7} {'fds':>5} {'state MB':>8} {'offsets MB':>10} {'index MB':>8} "
                  f"{'p50 ms':>7} {'p99 ms':>7}", flush=True)
        t0 = time.monotonic()
        samples = max(1, round(minutes * 60 / interval))
        try:
            for k in range(1, samples + 1):
                due = k * interval  # on a fixed schedule: the minutes compared do not drift
                time.sleep(max(0.0, t0 + due - time.monotonic()))
                took: list[float] = []
                while not latencies.empty():
                    took.extend(latencies.get())
                took.sort()
                delivered += len(took)
                if due <= 60 and (k > 1 or interval >= 60):  # the first interval has the clients' start-up
                    first_minute.extend(took)
                last_minute = [(t, x) for t, x in last_minute if t > due - 60] + [(due, took)]
                row = {"min": due / 60, "rss": rss_mb(b.proc.pid), "fds": open_fds(b.proc.pid),
                       "state": dir_mb(data, "__share_group_state"), "offsets": dir_mb(data, "__consumer_offsets"),
                       "index": index_mb(data), "delivered": len(took),
                       "p50": statistics.median(took) if took else float("nan"),
                       "p99": _p99(took)}
                rows.append(row)
                if show:
                    print(f"{row['min']:>5.1f} {row['rss']:>7.1f} {row['fds']:>5.0f} {row['state']:>8.2f} "
                          f"{row['offsets']:>10.2f} {row['index']:>8.2f} {row['p50']:>7.1f} {row['p99']:>7.1f}",
                          flush=True)
        finally:
            stop.set()
            reap(procs)
    if not rows or delivered == 0:
        raise RuntimeError("soak: no samples or no deliveries")
    return {"minutes": minutes, "rate": rate, "interval_s": interval, "delivered": delivered, "rows": rows,
            "first_minute_p99_ms": _p99(sorted(first_minute)),
            "last_minute_p99_ms": _p99(sorted(x for _, took in last_minute for x in took))}


def _p99(ordered: list[float]) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else float("nan")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--rate", type=int, default=500, help="records per second")
    ap.add_argument("--interval", type=float, default=60, help="seconds between samples")
    ap.add_argument("-o", "--override", action="append", default=[], metavar="NAME=VALUE",
                    help="a broker setting, e.g. share.coordinator.state.topic.segment.bytes=4194304")
    args = ap.parse_args(argv)
    res = run(args.minutes, args.rate, args.interval, dict(o.split("=", 1) for o in args.override))
    rows = res["rows"]
    if len(rows) >= 2:
        first, last = rows[0], rows[-1]
        print("first vs last: " + ", ".join(f"{k} {first[k]:.1f} -> {last[k]:.1f}"
                                            for k in ("rss", "fds", "state", "offsets", "index", "p99")))
    print(f"delivery p99: first minute {res['first_minute_p99_ms']:.1f} ms, last minute "
          f"{res['last_minute_p99_ms']:.1f} ms ({res['delivered']:,} records delivered)")


if __name__ == "__main__":
    main()
