"""Chaos harness (issue 10): the real broker killed with SIGKILL and restarted again and again on
one data directory while idempotent producers (acks=all), explicit-acknowledgement share consumers
and a classic consumer group run against it; then a verifier counts what went wrong.

    python -m tests.chaos.harness --cycles 20      # `make chaos`; prints the summary table

Counters (the first three must be 0):
- lost: records whose produce was acknowledged but that are not in the log after the last restart;
- accepted_then_redelivered: deliveries of a record after the broker confirmed its ACCEPT;
- never_delivered: produced records the share group never accepted once it drained (an ACCEPT made
  durable whose answer was lost with a kill counts as accepted: it is in `__share_group_state`);
- classic_missed: produced records the classic group never received (at least once);
- log_duplicates: values stored more than once (0 with idempotent producers).
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import AcknowledgeType, Consumer, KafkaException, Producer, ShareConsumer

from tests.integration.clients import create_topic
from tests.integration.share_helpers import FAST_SHARE_BROKER, commit_errors, set_earliest, topic_id
from tests.recovery.test_share_durability import acknowledged_in_state_log
from tests.support.broker_process import BrokerProcess, wait_for

TOPIC, GROUP, CLASSIC_GROUP = "chaos", "chaos-workers", "chaos-readers"
OVERRIDES = {**FAST_SHARE_BROKER, "group.share.record.lock.duration.ms": "3000"}
QUIET = {"log_level": 0, "reconnect.backoff.max.ms": 300, "socket.timeout.ms": 5000}


@dataclass
class Summary:
    cycles: int = 0
    produced: int = 0
    accepted: int = 0
    lost: int = 0
    accepted_then_redelivered: int = 0
    never_delivered: int = 0
    classic_missed: int = 0
    log_duplicates: int = 0
    seconds: float = 0.0
    examples: dict[str, list[Any]] = field(default_factory=dict)

    def table(self) -> str:
        rows = [(k, getattr(self, k)) for k in ("cycles", "produced", "accepted", "lost", "accepted_then_redelivered",
                                                  "never_delivered", "classic_missed", "log_duplicates")]
        rows.append(("seconds", f"{self.seconds:.0f}"))
        return "\n".join(f"{k:<27} {v:>10}" for k, v in rows)


class Load:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.seq = itertools.count()
        self.lock = threading.Lock()
        self.produced: dict[int, bytes] = {}       # offset -> value, acknowledged to the producer
        self.deliveries: list[tuple[int, int, int]] = []  # (seq, offset, delivery count)
        self.confirmed: dict[int, int] = {}        # offset -> seq of its first confirmed ACCEPT
        self.classic_seen: set[int] = set()
        self.stop_producing = threading.Event()
        self.stop_consuming = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        self.threads = [threading.Thread(target=self._produce, args=(i,), daemon=True) for i in range(2)]
        self.threads += [threading.Thread(target=self._share, args=(i,), daemon=True) for i in range(2)]
        self.threads.append(threading.Thread(target=self._classic, daemon=True))
        for t in self.threads:
            t.start()

    def _produce(self, index: int) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 2, "message.timeout.ms": 120000, **QUIET})

        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                with self.lock:
                    self.produced[msg.offset()] = msg.value()

        t0, n = time.monotonic(), 0
        while not self.stop_producing.is_set():
            if n > (time.monotonic() - t0) * 500:  # ~500 records/s per producer
                p.poll(0.01)
                continue
            try:
                p.produce(TOPIC, f"p{index}-{n:08d}".encode(), partition=0, on_delivery=on_delivery)
                n += 1
            except BufferError:
                p.poll(0.05)
            p.poll(0)
        p.flush(120)

    def _share(self, index: int) -> None:
        c = ShareConsumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP, "client.id": f"w{index}",
                           "share.acknowledgement.mode": "explicit", **QUIET})
        c.subscribe([TOPIC])
        try:
            while not self.stop_consuming.is_set():
                try:
                    msgs = [m for m in c.poll(0.5) if m.error() is None]
                except KafkaException:
                    continue
                if not msgs:
                    continue
                s = next(self.seq)
                with self.lock:
                    self.deliveries += [(s, m.offset(), m.delivery_count()) for m in msgs]
                held = []
                for m in msgs:
                    try:
                        c.acknowledge(m, AcknowledgeType.ACCEPT)
                        held.append(m)
                    except Exception:  # noqa: BLE001 - no longer held (session reset): not confirmed
                        pass
                try:
                    result = c.commit_sync(10)
                except KafkaException:
                    continue
                s = next(self.seq)
                if commit_errors(result).get((TOPIC, 0), "missing") is None:
                    with self.lock:
                        for m in held:
                            self.confirmed.setdefault(m.offset(), s)
        finally:
            try:
                c.close()
            except Exception:  # noqa: BLE001
                pass

    def _classic(self) -> None:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": CLASSIC_GROUP, "auto.offset.reset": "earliest",
                      "enable.auto.commit": True, "auto.commit.interval.ms": 200, **QUIET})
        c.subscribe([TOPIC])
        try:
            while not self.stop_consuming.is_set():
                m = c.poll(0.5)
                if m is not None and m.error() is None:
                    with self.lock:
                        self.classic_seen.add(m.offset())
        finally:
            try:
                c.close()
            except Exception:  # noqa: BLE001
                pass

    def progress(self) -> tuple[int, int]:
        with self.lock:
            return len(self.produced), len(self.confirmed)


def _read_log(bootstrap: str) -> list[tuple[int, bytes]]:
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-verify", "enable.auto.commit": False,
                  "log_level": 0})
    c.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    _, high = c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 60
    while (not out or out[-1][0] < high - 1) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            out.append((m.offset(), m.value()))
    c.close()
    return out


def run(cycles: int, workdir: Path, *, log=print) -> Summary:
    t0 = time.monotonic()
    broker = BrokerProcess(workdir / "data", OVERRIDES).start()
    summary = Summary()
    try:
        create_topic(broker.bootstrap, TOPIC, 1)
        set_earliest(broker.bootstrap, GROUP)
        load = Load(broker.bootstrap)
        load.start()
        for cycle in range(cycles):
            was = load.progress()
            wait_for(lambda: load.progress()[0] >= was[0] + 200 and load.progress()[1] >= was[1] + 100,
                     60, 0.05, f"progress before kill {cycle + 1}")
            broker.kill()
            broker.start()
            summary.cycles += 1
            log(f"cycle {cycle + 1}/{cycles}: produced {load.progress()[0]}, accepted {load.progress()[1]}")
        load.stop_producing.set()
        for t in load.threads[:2]:
            t.join(150)

        def drained() -> bool:
            with load.lock:
                return all(o in load.confirmed for o in load.produced) and \
                    all(o in load.classic_seen for o in load.produced)
        try:
            wait_for(drained, 90, 0.2, "every produced record accepted and read by the classic group")
        except AssertionError:
            pass  # counted below
        load.stop_consuming.set()
        for t in load.threads[2:]:
            t.join(30)
        stored = _read_log(broker.bootstrap)
        # An ACCEPT the broker made durable whose answer was lost with a kill is not a failure:
        # it is in the state log (ACKNOWLEDGED, or below the persisted start offset).
        durable_acks = acknowledged_in_state_log(broker.bootstrap, GROUP, topic_id(broker.bootstrap, TOPIC))
    finally:
        broker.kill()
    stored_offsets = {o for o, _ in stored}
    values = [v for _, v in stored]
    with load.lock:
        lost = sorted(o for o in load.produced if o not in stored_offsets)
        redelivered = sorted({o for s, o, _ in load.deliveries if o in load.confirmed and s > load.confirmed[o]})
        never = sorted(o for o in load.produced if o not in load.confirmed and o not in durable_acks)
        missed = sorted(o for o in load.produced if o not in load.classic_seen)
        summary.produced, summary.accepted = len(load.produced), len(load.confirmed)
    summary.lost, summary.accepted_then_redelivered = len(lost), len(redelivered)
    summary.never_delivered, summary.classic_missed = len(never), len(missed)
    summary.log_duplicates = len(values) - len(set(values))
    summary.examples = {"lost": lost[:10], "accepted_then_redelivered": redelivered[:10],
                        "never_delivered": never[:10], "classic_missed": missed[:10]}
    summary.seconds = time.monotonic() - t0
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="kill -9 chaos run against sharebroker")
    ap.add_argument("--cycles", type=int, default=20)
    args = ap.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="sharebroker-chaos-"))
    try:
        s = run(args.cycles, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(s.table())
    bad = {k: v for k, v in s.examples.items() if v}
    if bad:
        print("examples:", bad)
    return 0 if s.lost == s.accepted_then_redelivered == s.never_delivered == s.classic_missed == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
