"""Share-state durability benchmark: 1,000,000 records of 100 bytes through 4 implicit-mode
share consumers on a 4-partition topic, then the size of `__share_group_state` after pruning
and the time to replay it at start-up.

    python -m bench.share_state [--records N] [--consumers K] [--interval-ms MS]

Broker settings are the defaults except the share coordinator's prune and cold-snapshot
intervals (5 s here, 5 min by default) so that one prune cycle fits in the run."""

from __future__ import annotations

import argparse
import struct
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Producer

from bench import clients
from bench.run import create_topic
from sharebroker.testing import BrokerProcess

STATE_TOPIC = "__share_group_state"
TOPIC = "bench-share"
GROUP = "bench-share-group"


# --------------------------------------------------------------------------------------------
# broker log and data directory




def _ts(rec: dict[str, Any]) -> float:
    return datetime.fromisoformat(rec["timestamp"]).timestamp()


def read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """Kafka's offset checkpoint text format: `0`, count, `topic partition offset` lines."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    out = {}
    for ln in lines[2:]:
        parts = ln.split()
        if len(parts) == 3:
            out[(parts[0], int(parts[1]))] = int(parts[2])
    return out


def _batches(log_file: Path):
    """(base offset, last offset, size) of every record batch in a segment file."""
    data = log_file.read_bytes()
    pos = 0
    while pos + 27 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        if length <= 0 or pos + 12 + length > len(data):
            break
        (last_delta,) = struct.unpack_from(">i", data, pos + 23)
        yield base, base + last_delta, 12 + length
        pos += 12 + length


def state_topic_figures(data_dir: Path) -> dict[str, int]:
    """Bytes of all `__share_group_state` .log files, bytes of the batches at or above each
    partition's log start offset (from `log-start-offset-checkpoint`), records ever written
    (sum of log end offsets) and records still live (above the log start)."""
    starts = read_checkpoint(data_dir / "log-start-offset-checkpoint")
    total = live = written = live_records = segments = 0
    for d in sorted(data_dir.glob(f"{STATE_TOPIC}-*")):
        if not d.is_dir():
            continue
        partition = int(d.name.rsplit("-", 1)[1])
        start = starts.get((STATE_TOPIC, partition), 0)
        end = 0
        for f in sorted(d.glob("*.log")):
            segments += 1
            total += f.stat().st_size
            for _base, last, size in _batches(f):
                end = max(end, last + 1)
                if last >= start:
                    live += size
        written += end
        live_records += max(0, end - start)
    return {"log_bytes": total, "live_bytes": live, "records_written": written, "live_records": live_records,
            "segments": segments}


# --------------------------------------------------------------------------------------------
# clients


def produce(bootstrap: str, n: int, size: int) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                  "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000,
                  "queue.buffering.max.kbytes": 1_048_576, "acks": 1, "log_level": 3})
    failed = [0]

    def on_delivery(err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            failed[0] += 1
    payload = bytearray(size)
    t0 = time.perf_counter()
    for i in range(n):
        struct.pack_into(">q", payload, 0, i)
        clients.produce_when_room(p, TOPIC, bytes(payload), 0.01, partition=i % 4, on_delivery=on_delivery)
        if i % 10000 == 0:
            p.poll(0)
    left = p.flush(120)
    elapsed = time.perf_counter() - t0
    if left or failed[0]:
        raise SystemExit(f"produce failed: {left} undelivered, {failed[0]} errors")
    return elapsed


def consume(bootstrap: str, n: int, consumers: int, partitions: int, timeout: float) -> dict[str, Any]:
    """Implicit-mode consumers in threads (librdkafka does the I/O in its own threads) until
    every (partition, offset) has been delivered; then a final commit_sync accepts the last
    poll's records."""
    per_partition = -(-n // partitions)
    seen = [bytearray(per_partition + 1) for _ in range(partitions)]
    lock = threading.Lock()
    counters = {"distinct": 0, "deliveries": 0, "redelivered": 0}
    marks: dict[str, float] = {}
    done = threading.Event()
    errors: list[str] = []

    def run(i: int) -> None:
        with clients.share_consumer(bootstrap, GROUP, f"bench-{i}", TOPIC) as c:
            for msgs in clients.polls(c, done, 0.5):
                with lock:
                    marks.setdefault("first", time.perf_counter())
                    for m in msgs:
                        if m.error() is not None:
                            errors.append(str(m.error()))
                            continue
                        counters["deliveries"] += 1
                        bits = seen[m.partition()]
                        o = m.offset()
                        if bits[o]:
                            counters["redelivered"] += 1
                        else:
                            bits[o] = 1
                            counters["distinct"] += 1
                    if counters["distinct"] >= n and not done.is_set():
                        marks["done"] = time.perf_counter()
                        done.set()
            c.commit_sync(30)  # implicit mode: accept what the last poll returned

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(consumers)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    while not done.wait(0.05):
        if time.monotonic() > deadline:
            done.set()
            for t in threads:
                t.join(30)
            raise SystemExit(f"consume timed out: {counters}, errors {errors[:5]}")
    for t in threads:
        t.join(60)
    return {**counters, "elapsed": marks["done"] - t0, "elapsed_from_first": marks["done"] - marks["first"],
            "errors": len(errors)}


# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--consumers", type=int, default=4)
    ap.add_argument("--interval-ms", type=int, default=5000, help="prune and cold-snapshot interval")
    ap.add_argument("--consume-timeout", type=float, default=240.0)
    args = ap.parse_args(argv)
    interval = args.interval_ms

    with tempfile.TemporaryDirectory(prefix="bench-share-state-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data", {
            "share.coordinator.state.topic.prune.interval.ms": str(interval),
            "share.coordinator.cold.partition.snapshot.interval.ms": str(interval)})
        broker.start()
        try:
            b = broker.bootstrap
            create_topic(b, TOPIC, 4, share_group=GROUP)
            t_prod = produce(b, args.records, args.size)
            print(f"produce: {args.records:,} x {args.size} B to 4 partitions in {t_prod:.1f} s "
                  f"({args.records / t_prod:,.0f} records/s)", flush=True)

            r = consume(b, args.records, args.consumers, 4, args.consume_timeout)
            print(f"consume: {r['distinct']:,} records with {args.consumers} implicit-mode share consumers in "
                  f"{r['elapsed']:.1f} s ({r['distinct'] / r['elapsed']:,.0f} records/s; "
                  f"{r['distinct'] / r['elapsed_from_first']:,.0f} records/s from the first delivery); "
                  f"deliveries {r['deliveries']:,}, redelivered {r['redelivered']:,}, errors {r['errors']}",
                  flush=True)
            t_end = time.time()
            before = state_topic_figures(broker.data_dir)

            # wait for the steady state: a prune after the workload, and then (once the cold
            # interval has passed and the keys got fresh snapshots) one live record per key
            deadline = time.monotonic() + 3 * interval / 1000 + 10
            pruned: list[dict[str, Any]] = []
            after = before
            while time.monotonic() < deadline:
                pruned = [e for e in broker.log_events("share state pruned") if _ts(e) >= t_end]
                after = state_topic_figures(broker.data_dir)
                if after["live_records"] <= 4:
                    break
                time.sleep(0.25)
            waited = time.time() - t_end
            print(f"__share_group_state right after consuming: {before['records_written']:,} records written, "
                  f"{before['log_bytes']:,} B in .log files ({before['segments']} segments)")
            print(f"__share_group_state {waited:.1f} s later{' (no prune seen!)' if not pruned else ''}: "
                  f"{after['log_bytes']:,} B in .log files, {after['live_bytes']:,} B live above the log start, "
                  f"{after['live_records']:,} live records of {after['records_written']:,} written", flush=True)

            assert broker.stop() == 0
            broker.start()
            replay = broker.log_events("share state replayed")[-1]
            print(f"restart: share state replayed {replay['records']:,} records "
                  f"({replay.get('share_partitions', '?')} share partitions) in {replay['replay_ms']} ms; "
                  f"broker ready in {broker.start_seconds * 1000:.0f} ms", flush=True)
        finally:
            broker.stop()
            if "Traceback" in broker.log_text():
                print("broker log has a Traceback:", file=sys.stderr)
                print(broker.log_text()[-3000:], file=sys.stderr)


if __name__ == "__main__":
    main()
