"""Chaos harness (issue 10): the real broker killed with SIGKILL and restarted again and again on
one data directory and one port (clients reconnect by themselves) while idempotent producers
(acks=all), explicit-acknowledgement share consumers and a classic consumer group run against it
in threads; then a verifier counts what went wrong.

    python -m tests.chaos.harness --cycles 20 [--seed N] [--fsync] [--no-stress] [--keep]

Every record has a unique value "p<producer>-<n>" and is tracked by value, so a reused offset
cannot hide a loss. Counters; the run exits 1 unless the first four are 0:

- lost: records with a successful delivery report that are not in the log at the offset reported,
  read from offset 0 with a plain consumer after the last restart;
- accepted_then_redelivered: records delivered to the share group again after the broker
  confirmed their ACCEPT (commit_sync result or acknowledgement-commit callback without error),
  ordered by one sequence number shared by all client threads;
- never_delivered: produced records the share group never accepted by the end of the drain (an
  ACCEPT whose answer was lost with a kill counts as accepted when a consumer sent it and
  `__share_group_state` holds it as ACKNOWLEDGED or below the start offset);
- classic_missed: produced records the classic group never received;
- dlq_lost: records whose REJECT the broker confirmed that the group's dead-letter queue topic
  (KIP-1191, `dlq.chaos`) does not hold;
- dlq_duplicated: source records the DLQ topic holds more than once (kills land between
  ARCHIVING and ARCHIVED: each record must still be written exactly once);
- log_duplicates: values stored more than once (0 with idempotent producers).

Flagged when not 0: classic deliveries below an offset the group had committed
(`classic_rewinds`), deliveries whose value differs from the log's (`delivery_mismatch`), offsets
reported for two records (`offset_reused`), deliveries after a confirmed RELEASE whose delivery
count is not higher (`delivery_count_regressed`; some first deliveries are RELEASEd on purpose),
fatal producer errors, stalls (no progress within --progress-timeout of a restart), tracebacks in
the broker log. Informational: archived records, ACCEPTs durable but unconfirmed, the highest
delivery count, failed delivery reports, restart-to-progress times, broker error lines.

The kill timing comes from --seed (printed); thread scheduling makes no two runs identical. Every
other restart (`dlq_crash_points`) also runs the broker with the test-only
SHAREBROKER_TEST_CRASH_POINT set, alternately "dlq-before-write" and "dlq-after-write": it kills
itself with SIGKILL at its first DLQ write, between ARCHIVING and ARCHIVED, without any timing, and
is started again (`crash_point_kills`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import socket
import statistics
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from confluent_kafka import (
    OFFSET_BEGINNING,
    AcknowledgeType,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    ShareConsumer,
    TopicPartition,
)

from tests.integration import rawkafka as rk
from tests.integration.clients import create_topic
from tests.integration.share_helpers import FAST_SHARE_BROKER, set_earliest, topic_id
from sharebroker.testing import BrokerProcess

TOPIC, GROUP, CLASSIC_GROUP, DLQ_TOPIC = "chaos", "chaos-workers", "chaos-readers", "dlq.chaos"
ACKNOWLEDGED, ARCHIVED = 2, 4  # __share_group_state delivery states
OVERRIDES = {**FAST_SHARE_BROKER, "group.share.record.lock.duration.ms": "3000",
             "group.initial.rebalance.delay.ms": "0"}
# Make the rare paths frequent, so that kills land in them: segments roll every second (in the
# topic, `__share_group_state` and `__consumer_offsets`; producer-state snapshots at each roll),
# share-state snapshots every 10 updates, pruning of the state topic every second, and the log
# cleaner compacting `__consumer_offsets` (the classic group's commits) as soon as a tenth is dirty.
STRESS = {"log.roll.ms": "1000", "log.segment.bytes": "1048576",
          "log.cleaner.backoff.ms": "200", "log.cleaner.min.cleanable.ratio": "0.1",
          "share.coordinator.state.topic.segment.bytes": "1048576",
          "share.coordinator.snapshot.update.records.per.snapshot": "10",
          "share.coordinator.state.topic.prune.interval.ms": "1000",
          "share.coordinator.cold.partition.snapshot.interval.ms": "2000"}
CLIENT = {"log_level": 0, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 300,
          "socket.timeout.ms": 5000}
MUST_BE_ZERO = ("lost", "accepted_then_redelivered", "never_delivered", "classic_missed", "dlq_lost", "dlq_duplicated")
SHOULD_BE_ZERO = ("dlq_unexpected", "log_duplicates", "classic_rewinds", "delivery_mismatch", "offset_reused",
                  "delivery_count_regressed", "producer_fatal", "stalls", "broker_tracebacks")

Key = tuple[int, int]  # (partition, offset)


@dataclass
class Options:
    cycles: int = 20
    seed: int | None = None
    partitions: int = 2
    producers: int = 2
    share_consumers: int = 3
    classic_consumers: int = 2
    rate: int = 400                  # records/s per producer
    work_ms: float = 30.0            # a share consumer "works" up to this long on a batch before acking it
    release_ratio: float = 0.03      # first deliveries RELEASEd instead of ACCEPTed (delivered again later)
    reject_ratio: float = 0.03       # first deliveries REJECTed: they go to the group's DLQ topic
    min_produced: int = 150          # progress after each restart before the next kill ...
    min_accepted: int = 100
    max_jitter: float = 1.0          # ... then a random wait of up to this many seconds
    double_kill: float = 0.25        # chance of a second kill 0-300 ms after a restart (during recovery)
    progress_timeout: float = 60.0
    drain_timeout: float = 90.0
    fsync: bool = False
    stress: bool = True              # STRESS overrides on top of OVERRIDES
    dlq_crash_points: bool = True    # every other restart: SIGKILL at the first DLQ write (test-only)


@dataclass
class Summary:
    seed: int = 0
    cycles: int = 0
    kills: int = 0
    produced: int = 0
    accepted: int = 0
    lost: int = 0
    accepted_then_redelivered: int = 0
    never_delivered: int = 0
    classic_missed: int = 0
    rejected: int = 0
    dlq_records: int = 0
    dlq_lost: int = 0
    dlq_duplicated: int = 0
    dlq_unexpected: int = 0
    log_duplicates: int = 0
    classic_rewinds: int = 0
    offset_reused: int = 0
    delivery_mismatch: int = 0
    archived: int = 0
    accepts_durable_unconfirmed: int = 0
    share_deliveries: int = 0
    released: int = 0
    delivery_count_regressed: int = 0
    max_delivery_count: int = 0
    produce_failed: int = 0
    producer_fatal: int = 0
    stalls: int = 0
    crash_point_kills: int = 0
    max_recovery_s: float = 0.0
    median_recovery_s: float = 0.0
    broker_error_lines: int = 0
    broker_tracebacks: int = 0
    seconds: float = 0.0
    examples: dict[str, list[Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    ROWS = (("cycles", "kill -9 / restart cycles"), ("kills", "kills (with kills during recovery)"),
            ("produced", "records acknowledged to producers"), ("accepted", "records with a confirmed ACCEPT"),
            ("lost", "lost acknowledged records (must be 0)"),
            ("accepted_then_redelivered", "accepted, then delivered again (must be 0)"),
            ("never_delivered", "never accepted by the share group (must be 0)"),
            ("classic_missed", "never read by the classic group (must be 0)"),
            ("rejected", "confirmed REJECTs"), ("dlq_records", "records on the DLQ topic"),
            ("dlq_lost", "confirmed REJECT, not on the DLQ (must be 0)"),
            ("dlq_duplicated", "records on the DLQ twice (must be 0)"),
            ("dlq_unexpected", "DLQ records never rejected nor at the limit"),
            ("log_duplicates", "duplicate values in the log"),
            ("classic_rewinds", "classic deliveries below a committed offset"),
            ("delivery_mismatch", "deliveries whose value differs from the log"),
            ("offset_reused", "offsets acknowledged to two records"),
            ("archived", "archived at the delivery limit"),
            ("accepts_durable_unconfirmed", "ACCEPTs durable, answer lost"),
            ("share_deliveries", "share deliveries (all)"),
            ("released", "confirmed RELEASEs"),
            ("delivery_count_regressed", "redelivered after a RELEASE, count not higher"),
            ("max_delivery_count", "highest delivery count seen"),
            ("produce_failed", "failed delivery reports"), ("producer_fatal", "fatal producer errors"),
            ("stalls", "restarts without progress in time"),
            ("crash_point_kills", "kills at a DLQ crash point"),
            ("max_recovery_s", "longest restart-to-progress (s)"),
            ("median_recovery_s", "median restart-to-progress (s)"),
            ("broker_error_lines", "broker log lines at level error"),
            ("broker_tracebacks", "tracebacks in the broker log"), ("seconds", "wall time (s)"))

    def failed(self) -> list[str]:
        return [k for k in MUST_BE_ZERO if getattr(self, k)]

    def suspicious(self) -> list[str]:
        return [k for k in SHOULD_BE_ZERO if getattr(self, k)]

    def table(self) -> str:
        lines = [f"chaos run, seed {self.seed}"]
        for key, label in self.ROWS:
            value = getattr(self, key)
            value = f"{value:.1f}" if isinstance(value, float) else f"{value:,}"
            lines.append(f"  {label:<46} {key:<28} {value:>9}")
        return "\n".join(lines)


class Load:
    """Producers, share consumers and classic consumers in threads. Records are identified by
    value (offsets could be reused by a broker that lost the tail of a log). Every event that must
    be ordered across threads (a delivery, a confirmation, a commit) takes a number from one
    sequence; itertools.count is atomic under the GIL."""

    def __init__(self, bootstrap: str, opts: Options) -> None:
        self.bootstrap, self.opts = bootstrap, opts
        self.seq = itertools.count()
        self.lock = threading.Lock()
        self.produced: dict[bytes, Key] = {}                 # value -> where its delivery report put it
        self.produced_at: dict[Key, bytes] = {}
        self.offset_reused: list[tuple[Key, bytes, bytes]] = []  # two acknowledged records at one offset
        self.next_n = [0] * opts.producers                   # survives a producer replaced after a fatal error
        self.produce_errors: Counter[str] = Counter()
        self.producer_fatal = 0
        self.deliveries: list[tuple[int, Key, bytes, int, int]] = []  # (seq, key, value, count, consumer)
        self.ack_sent: set[bytes] = set()                    # values whose ACCEPT went to a commit
        self.confirmed: dict[bytes, int] = {}                # value -> seq of its first confirmed ACCEPT
        self.released: dict[tuple[bytes, int], int] = {}     # confirmed RELEASE: (value, delivery count) -> seq
        self.reject_sent: set[bytes] = set()                 # values whose REJECT went to a commit
        self.rejected: dict[bytes, int] = {}                 # value -> seq of its confirmed REJECT
        self.ack_failures: Counter[str] = Counter()
        self.classic: list[tuple[int, Key, bytes]] = []      # (seq, key, value)
        self.classic_seen: set[bytes] = set()
        self.classic_commits: list[tuple[int, Key]] = []     # (seq, (partition, next offset))
        self.client_errors: Counter[str] = Counter()
        self.stop_producing = threading.Event()
        self.stop_consuming = threading.Event()
        self.producer_threads: list[threading.Thread] = []
        self.consumer_threads: list[threading.Thread] = []

    def start(self) -> None:
        o = self.opts
        self.producer_threads = [threading.Thread(target=self._guard(self._produce, i), name=f"producer-{i}",
                                                  daemon=True) for i in range(o.producers)]
        self.consumer_threads = [threading.Thread(target=self._guard(self._share, i), name=f"share-{i}", daemon=True)
                                 for i in range(o.share_consumers)]
        self.consumer_threads += [threading.Thread(target=self._guard(self._classic, i), name=f"classic-{i}",
                                                   daemon=True) for i in range(o.classic_consumers)]
        for t in self.producer_threads + self.consumer_threads:
            t.start()

    def stop(self) -> None:
        self.stop_producing.set()
        self.stop_consuming.set()

    def _guard(self, body: Callable[[int], None], index: int) -> Callable[[], None]:
        def run() -> None:
            while True:  # a client that died (fatal error, exception) is replaced
                try:
                    body(index)
                    return
                except Exception as exc:  # noqa: BLE001 - counted, the load goes on
                    self._note(f"{body.__name__}: {type(exc).__name__}: {exc}")
                    time.sleep(0.2)
        return run

    def _note(self, what: str) -> None:
        with self.lock:
            self.client_errors[what[:160]] += 1

    def _error_cb(self, err: KafkaError) -> None:
        self._note(f"error_cb {err.name()}{' fatal' if err.fatal() else ''}")

    # -- producers: idempotent, acks=all, paced, partitions in turn; values p<index>-<n>
    def _produce(self, index: int) -> None:
        while not self.stop_producing.is_set():
            fatal = threading.Event()

            def on_error(err: KafkaError, fatal: threading.Event = fatal) -> None:
                self._error_cb(err)
                if err.fatal():
                    fatal.set()

            p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                          "linger.ms": 5, "message.timeout.ms": 120000, "request.timeout.ms": 5000,
                          "error_cb": on_error, **CLIENT})

            def on_delivery(err: KafkaError | None, msg: Any) -> None:
                with self.lock:
                    if err is not None:
                        self.produce_errors[err.name()] += 1
                        return
                    key, value = (msg.partition(), msg.offset()), msg.value()
                    old = self.produced_at.get(key)
                    if old is not None and old != value:
                        self.offset_reused.append((key, old, value))
                    self.produced_at[key] = value
                    self.produced[value] = key

            t0, sent = time.monotonic(), 0
            try:
                while not self.stop_producing.is_set() and not fatal.is_set():
                    if sent > (time.monotonic() - t0) * self.opts.rate:
                        p.poll(0.01)
                        continue
                    n = self.next_n[index]
                    try:
                        p.produce(TOPIC, f"p{index}-{n:08d}".encode(), partition=n % self.opts.partitions,
                                  on_delivery=on_delivery)
                        self.next_n[index] += 1
                        sent += 1
                    except BufferError:
                        p.poll(0.05)
                    p.poll(0)
            except KafkaException as exc:
                if not (exc.args and isinstance(exc.args[0], KafkaError) and exc.args[0].fatal()):
                    raise
                self._note(f"producer {index} fatal: {exc.args[0].name()}")
                fatal.set()
            if fatal.is_set():  # e.g. a fatal idempotence error: what is queued fails, a new producer goes on
                with self.lock:
                    self.producer_fatal += 1
                try:
                    p.purge()
                    p.flush(5)
                except KafkaException:
                    pass
                continue
            left = p.flush(150)
            if left:
                self._note(f"producer {index}: {left} records undelivered at the end")

    # -- share consumers: explicit mode; ACCEPT, or RELEASE a first delivery now and then; commit_sync
    # after each poll
    def _share(self, index: int) -> None:
        c = ShareConsumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP, "client.id": f"w{index}",
                           "share.acknowledgement.mode": "explicit", "error_cb": self._error_cb, **CLIENT})
        # acknowledged here: offset -> (value, type, delivery count); the callback gives offsets only
        pending: dict[Key, tuple[bytes, AcknowledgeType, int]] = {}

        def confirm(key: Key, s: int) -> None:
            value, kind, count = pending[key]
            if kind == AcknowledgeType.ACCEPT:
                self.confirmed.setdefault(value, s)
            elif kind == AcknowledgeType.REJECT:
                self.rejected.setdefault(value, s)
            else:
                self.released.setdefault((value, count), s)

        def on_commit(offsets: dict[Any, Any], exc: Any) -> None:  # also acks sent with a later poll
            s = next(self.seq)
            with self.lock:
                if exc is not None:
                    self.ack_failures[f"callback {exc}"[:120]] += 1
                    return
                for tp, offs in offsets.items():
                    if tp.topic == TOPIC and getattr(tp, "error", None) is None:
                        for o in offs:
                            if (tp.partition, o) in pending:
                                confirm((tp.partition, o), s)

        c.set_acknowledgement_commit_callback(on_commit)
        c.subscribe([TOPIC])
        try:
            while not self.stop_consuming.is_set():
                try:
                    msgs = list(c.poll(0.5))
                except KafkaException as exc:
                    self._note(f"share poll: {exc}")
                    continue
                s = next(self.seq)
                held = []
                with self.lock:
                    for m in msgs:
                        if m.error() is not None:
                            self.client_errors[f"share message error {m.error().name()}"] += 1
                            if m.error().fatal():
                                raise KafkaException(m.error())
                            continue
                        self.deliveries.append((s, (m.partition(), m.offset()), m.value(), m.delivery_count(),
                                                index))
                        held.append(m)
                if held and self.opts.work_ms:  # records stay acquired for a while: kills catch them in flight
                    time.sleep(random.uniform(0, self.opts.work_ms) / 1000)
                acked = []
                for m in held:
                    draw = random.random()
                    kind = AcknowledgeType.ACCEPT
                    if m.delivery_count() == 1 and draw < self.opts.release_ratio:
                        kind = AcknowledgeType.RELEASE
                    elif m.delivery_count() == 1 and draw < self.opts.release_ratio + self.opts.reject_ratio:
                        kind = AcknowledgeType.REJECT
                    try:
                        c.acknowledge(m, kind)
                        acked.append(m)
                    except Exception as exc:  # noqa: BLE001 - no longer in flight (session reset)
                        self._note(f"acknowledge: {type(exc).__name__}")
                        continue
                    with self.lock:
                        pending[(m.partition(), m.offset())] = (m.value(), kind, m.delivery_count())
                        if kind == AcknowledgeType.ACCEPT:
                            self.ack_sent.add(m.value())
                        elif kind == AcknowledgeType.REJECT:
                            self.reject_sent.add(m.value())
                if not acked:
                    continue
                try:
                    result = c.commit_sync(10)
                except KafkaException as exc:
                    self._note(f"commit_sync raised {exc.args[0].name() if exc.args else exc}")
                    continue
                s = next(self.seq)
                ok = {tp.partition for tp, exc in result.items()
                      if tp.topic == TOPIC and exc is None and getattr(tp, "error", None) is None}
                with self.lock:
                    for _tp, exc in result.items():
                        if exc is not None:
                            err = exc.args[0] if exc.args else exc
                            self.ack_failures[f"commit_sync {getattr(err, 'name', lambda err=err: err)()}"] += 1
                    for m in acked:
                        if m.partition() in ok:
                            confirm((m.partition(), m.offset()), s)
        finally:
            try:
                c.close()
            except Exception:  # noqa: BLE001 - the broker may be down
                pass

    # -- classic consumers: one group, manual synchronous commits after each batch
    def _classic(self, index: int) -> None:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": CLASSIC_GROUP, "client.id": f"r{index}",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": 6000,
                      "heartbeat.interval.ms": 1000, "fetch.wait.max.ms": 200, "error_cb": self._error_cb, **CLIENT})
        c.subscribe([TOPIC])
        try:
            while not self.stop_consuming.is_set():
                msgs = c.consume(500, 0.5)
                s = next(self.seq)
                nxt: dict[int, int] = {}
                with self.lock:
                    for m in msgs:
                        if m.error() is not None:
                            if m.error().code() != KafkaError._PARTITION_EOF:
                                self.client_errors[f"classic message error {m.error().name()}"] += 1
                            continue
                        self.classic.append((s, (m.partition(), m.offset()), m.value()))
                        self.classic_seen.add(m.value())
                        nxt[m.partition()] = max(nxt.get(m.partition(), 0), m.offset() + 1)
                if not nxt:
                    continue
                try:
                    done = c.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in nxt.items()],
                                    asynchronous=False)
                except KafkaException as exc:
                    self._note(f"classic commit raised {exc.args[0].name() if exc.args else exc}")
                    continue
                s = next(self.seq)
                with self.lock:
                    for tp in done or []:
                        if tp.error is None:
                            self.classic_commits.append((s, (tp.partition, tp.offset)))
        finally:
            try:
                c.close()
            except Exception:  # noqa: BLE001
                pass

    def progress(self) -> tuple[int, int, int]:
        with self.lock:
            return len(self.produced), len(self.confirmed), len(self.classic_seen)


# --------------------------------------------------------------------------------------------
# Reading back what the broker kept


def _read_partition(bootstrap: str, topic: str, p: int, group: str) -> tuple[int, int, list[Any], bool]:
    """(log start, high watermark, every record from offset 0 to the high watermark, whether the
    end was reached within 60 s) of one partition, with a plain consumer."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{group}-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "enable.partition.eof": True, **CLIENT})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        records: list[Any] = []
        if high <= 0:
            return low, high, records, True
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF and m.offset() >= high:
                    return low, high, records, True
                continue
            records.append(m)
        return low, high, records, False
    finally:
        c.close()


def read_log(bootstrap: str, partitions: int) -> tuple[dict[Key, bytes], list[str]]:
    """Every record of the topic from offset 0 to the high watermark, with a plain consumer."""
    out: dict[Key, bytes] = {}
    notes: list[str] = []
    for p in range(partitions):
        low, high, records, complete = _read_partition(bootstrap, TOPIC, p, "chaos-verify")
        if low != 0:
            notes.append(f"partition {p}: log start offset {low}, not 0")
        for m in records:
            out[(p, m.offset())] = m.value()
        if not complete:
            notes.append(f"partition {p}: read {len(records)} records, high watermark {high}: timed out")
    return out, notes


def read_dlq(bootstrap: str, partitions: int) -> Counter[Key]:
    """How many times the DLQ topic holds each source record (by its __dlq.errors.* headers)."""
    counts: Counter[Key] = Counter()
    for p in range(partitions):
        for m in _read_partition(bootstrap, DLQ_TOPIC, p, "chaos-dlq")[2]:
            h = dict(m.headers() or [])
            if h.get("__dlq.errors.group") == GROUP.encode() and h.get("__dlq.errors.topic") == TOPIC.encode():
                counts[(int(h["__dlq.errors.partition"]), int(h["__dlq.errors.offset"]))] += 1
    return counts


def share_state(bootstrap: str, partitions: int) -> tuple[set[Key], set[Key]]:
    """(acknowledged, archived) per `__share_group_state` records of GROUP: offsets any snapshot
    or update holds in that state, and everything below the highest start offset persisted
    (counted as acknowledged: an acknowledgement that completes the prefix is persisted as the
    start offset it moves to, as Kafka does)."""
    from sharebroker.broker.share_state import records as staterec

    tid = topic_id(bootstrap, TOPIC)
    acked: set[Key] = set()
    archived: set[Key] = set()
    start: dict[int, int] = defaultdict(int)
    with rk.RawClient(bootstrap) as raw:
        meta = raw.request(rk.metadata_request(["__share_group_state"], version=12))
        (t,) = meta.topics
        if int(t.error_code) != 0:
            return acked, archived
        for sp in t.partitions:
            for batch in _state_batches(raw, sp.partition_index):
                for r in batch.records():
                    if r.key is None or r.value is None:
                        continue
                    kind, g, key_tid, p = staterec.decode_key(r.key)
                    if g != GROUP or key_tid != tid:
                        continue
                    value = staterec.decode_snapshot(r.value) if kind == staterec.SNAPSHOT else \
                        staterec.decode_update(r.value)
                    for sb in value.batches:
                        target = acked if sb.delivery_state == ACKNOWLEDGED else \
                            archived if sb.delivery_state == ARCHIVED else None
                        if target is not None:
                            target.update((p, o) for o in range(sb.first_offset, sb.last_offset + 1))
                    start[p] = max(start[p], value.start_offset)
    for p in range(partitions):
        acked.update((p, o) for o in range(start[p]) if (p, o) not in archived)
    return acked, archived


def _state_batches(raw: rk.RawClient, partition: int) -> list[Any]:
    """Every batch of one `__share_group_state` partition from its log start offset (pruning moves
    it, also while this reads: then it starts again)."""
    for _ in range(5):
        probe = rk.fetch(raw, "__share_group_state", partition, 0)
        start = probe.log_start_offset if int(probe.error_code) == 1 else 0  # OFFSET_OUT_OF_RANGE
        try:
            return rk.fetch_all_batches(raw, "__share_group_state", partition, start)
        except AssertionError:
            continue
    raise RuntimeError(f"__share_group_state partition {partition}: could not read it from its start")


def broker_log_problems(broker: BrokerProcess) -> tuple[int, int, list[str]]:
    errors, samples = 0, []
    text = broker.log_text()
    for line in text.splitlines():
        if '"level": "error"' not in line and '"level": "critical"' not in line:
            continue
        errors += 1
        if len(samples) < 5:
            try:
                rec = json.loads(line)
                samples.append(f"{rec.get('event')}: {rec.get('error') or rec.get('message') or ''}"[:200])
            except ValueError:
                samples.append(line[:200])
    return errors, text.count("Traceback"), samples


# --------------------------------------------------------------------------------------------
# The run


def run(cycles: int, workdir: Path, *, opts: Options | None = None, log: Callable[[str], None] = print) -> Summary:
    opts = opts or Options()
    opts.cycles = cycles
    seed = opts.seed if opts.seed is not None else random.randrange(1 << 31)
    rng = random.Random(seed)
    summary = Summary(seed=seed)
    t0 = time.monotonic()
    overrides = {**OVERRIDES, **(STRESS if opts.stress else {})}
    broker = _first_start(BrokerProcess(workdir / "data", overrides, fsync=opts.fsync))
    load: Load | None = None
    recoveries: list[float] = []
    try:
        create_topic(broker.bootstrap, TOPIC, opts.partitions)
        create_topic(broker.bootstrap, DLQ_TOPIC, opts.partitions, {"errors.deadletterqueue.group.enable": "true"})
        # Delivery limit at its maximum: a record acquired at several kills in a row is not archived.
        set_earliest(broker.bootstrap, GROUP, share_delivery_count_limit="10",
                     errors_deadletterqueue_topic_name=DLQ_TOPIC)
        load = Load(broker.bootstrap, opts)
        load.start()
        ready_at = time.monotonic()
        for cycle in range(cycles):
            was = load.progress()

            def moved(was: tuple = was) -> bool:
                now = load.progress()
                return now[0] >= was[0] + opts.min_produced and now[1] >= was[1] + opts.min_accepted

            recovery = 0.0
            if _wait(moved, opts.progress_timeout):
                recovery = time.monotonic() - ready_at
                if cycle:
                    recoveries.append(recovery)
            else:
                summary.stalls += 1
                log(f"cycle {cycle + 1}: no progress {opts.progress_timeout:.0f}s after the restart "
                    f"(produced, accepted, classic = {load.progress()}, before {was})")
            time.sleep(rng.uniform(0, opts.max_jitter))
            broker.kill()
            summary.kills += 1
            _restart(broker)
            if rng.random() < opts.double_kill:
                time.sleep(rng.uniform(0, 0.3))
                broker.kill()
                summary.kills += 1
                _restart(broker)
            if opts.dlq_crash_points and cycle % 2 == 0:
                point = CRASH_POINTS[(cycle // 2) % len(CRASH_POINTS)]
                if _crash_at(broker, point, opts.progress_timeout):
                    summary.crash_point_kills += 1
                else:
                    log(f"cycle {cycle + 1}: no DLQ write reached {point} in time")
            ready_at = time.monotonic()
            summary.cycles += 1
            produced, accepted, classic = load.progress()
            log(f"{time.monotonic() - t0:6.1f}s cycle {cycle + 1}/{cycles}: produced {produced}, accepted {accepted}, "
                f"classic {classic}, kills {summary.kills}, progress after {recovery:.2f}s, "
                f"restart {broker.start_seconds:.2f}s")
        # Drain: no more produce; the consumers go on until everything is accepted and read.
        load.stop_producing.set()
        for t in load.producer_threads:
            t.join(160)
        durable: set[bytes] = set()
        in_dlq: set[bytes] = set()
        last_check = last_dlq_check = 0.0
        deadline = time.monotonic() + opts.drain_timeout
        while time.monotonic() < deadline:
            with load.lock:
                share_left = [k for k in load.produced if k not in load.confirmed and k not in load.rejected
                              and k not in durable]
                classic_left = [k for k in load.produced if k not in load.classic_seen]
                all_sent = all(k in load.ack_sent or k in load.reject_sent for k in share_left)
                dlq_left = [k for k in load.rejected if k not in in_dlq]
            if dlq_left and time.monotonic() - last_dlq_check > 2:
                last_dlq_check = time.monotonic()
                try:
                    where = read_dlq(broker.bootstrap, opts.partitions)
                except Exception as exc:  # noqa: BLE001 - read again at the end
                    log(f"reading {DLQ_TOPIC}: {type(exc).__name__}: {exc}")
                    where = Counter()
                with load.lock:
                    in_dlq = {v for v, k in load.produced.items() if k in where}
                continue
            if not share_left and not classic_left and not dlq_left:
                break
            if share_left and all_sent and time.monotonic() - last_check > 2:
                last_check = time.monotonic()
                try:
                    acked, _ = share_state(broker.bootstrap, opts.partitions)
                except Exception as exc:  # noqa: BLE001 - read again at the end
                    log(f"reading __share_group_state: {type(exc).__name__}: {exc}")
                    acked = set()
                with load.lock:
                    durable = {v for v, k in load.produced.items()
                               if k in acked and (v in load.ack_sent or v in load.reject_sent)}
            time.sleep(0.2)
        load.stop_consuming.set()
        for t in load.consumer_threads:
            t.join(30)
        stored, notes = read_log(broker.bootstrap, opts.partitions)
        acked, archived = share_state(broker.bootstrap, opts.partitions)
        dlq = read_dlq(broker.bootstrap, opts.partitions)
        summary.notes += notes
    finally:
        if load is not None:
            load.stop()
        broker.kill()
    summary.broker_error_lines, summary.broker_tracebacks, samples = broker_log_problems(broker)
    if samples:
        summary.notes.append(f"broker errors: {samples}")
    _verify(load, stored, acked, archived, summary)
    _verify_dlq(load, dlq, summary)
    if recoveries:
        summary.max_recovery_s = max(recoveries)
        summary.median_recovery_s = statistics.median(recoveries)
    summary.seconds = time.monotonic() - t0
    return summary


def _first_start(broker: BrokerProcess) -> BrokerProcess:
    """Start on a free port below the ephemeral range, the same for every restart: no other
    process's port-0 bind and no client's outgoing connection (a self-connect while the broker is
    down) can take it in between."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for port in random.sample(range(max(1024, low - 12000), low), 20):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        broker.port = port
        try:
            return broker.start()
        except RuntimeError:
            broker.kill()
    broker.port = 0
    return broker.start()


def _restart(broker: BrokerProcess) -> None:
    for attempt in range(3):
        try:
            broker.start()
            return
        except RuntimeError:
            broker.kill()
            if attempt == 2:
                raise
            time.sleep(0.5)


CRASH_POINT_ENV = "SHAREBROKER_TEST_CRASH_POINT"
CRASH_POINTS = ("dlq-before-write", "dlq-after-write")


def _crash_at(broker: BrokerProcess, point: str, timeout: float) -> bool:
    """Restart the broker with the test-only crash point set; it SIGKILLs itself at its next DLQ
    write (the consumers reject records all the time). Then start it normally again. Whether it
    died at the point (else it is killed here)."""
    broker.kill()
    os.environ[CRASH_POINT_ENV] = point
    try:
        _restart(broker)
    finally:
        del os.environ[CRASH_POINT_ENV]
    died = _wait(lambda: not broker.alive(), timeout)
    broker.kill()
    _restart(broker)
    return died


def _wait(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _verify(load: Load, stored: dict[Key, bytes], acked: set[Key], archived: set[Key], s: Summary) -> None:
    with load.lock:
        produced = dict(load.produced)
        confirmed = dict(load.confirmed)
        deliveries = list(load.deliveries)
        released = sorted((seq, v, count) for (v, count), seq in load.released.items())
        ack_sent = set(load.ack_sent)
        rejected = dict(load.rejected)
        reject_sent = set(load.reject_sent)
        classic = list(load.classic)
        classic_seen = set(load.classic_seen)
        commits = sorted(load.classic_commits)
        s.produce_failed = sum(load.produce_errors.values())
        s.producer_fatal = load.producer_fatal
        produce_errors = dict(load.produce_errors)
        client_errors = load.client_errors.most_common(8)
        ack_failures = dict(load.ack_failures)
        offset_reused = list(load.offset_reused)
    where: dict[bytes, list[Key]] = defaultdict(list)
    for k, v in stored.items():
        where[v].append(k)
    lost = sorted((k, v) for v, k in produced.items() if stored.get(k) != v)
    redelivered = sorted({v for seq, _, v, *_ in deliveries if v in confirmed and seq > confirmed[v]})
    # An ACCEPT whose answer was lost with a kill: a consumer sent it and the state topic has it.
    durable_unconfirmed = {v for v, k in produced.items() if v not in confirmed and v in ack_sent and k in acked}
    # A REJECT is the group's last word on a record too (it goes to the DLQ): not "never delivered".
    never = sorted((k, v) for v, k in produced.items() if v not in confirmed and v not in durable_unconfirmed
                   and v not in rejected and not (v in reject_sent and (k in acked or k in archived)))
    delivered = {v for _, _, v, *_ in deliveries}
    # A confirmed RELEASE is persisted with its delivery count: every later delivery counts higher.
    releases: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for seq, v, count in released:
        releases[v].append((seq, count))
    regressions = sorted({v for seq, _, v, count, _ in deliveries
                          if any(rs < seq and count <= rc for rs, rc in releases.get(v, ()))})
    # classic: a delivery below the highest offset the group had committed (successfully) before it
    high: dict[int, int] = {}
    rewinds: set[Key] = set()
    ci = 0
    for seq, key, _ in sorted(classic):
        while ci < len(commits) and commits[ci][0] < seq:
            p, nxt = commits[ci][1]
            high[p] = max(high.get(p, 0), nxt)
            ci += 1
        if key[1] < high.get(key[0], 0):
            rewinds.add(key)
    mismatch = sorted({k for _, k, v, *_ in deliveries if stored.get(k) != v} |
                      {k for _, k, v in classic if stored.get(k) != v})
    dupes = {v: ks for v, ks in where.items() if len(ks) > 1}
    s.produced, s.accepted = len(produced), len(confirmed)
    s.lost, s.accepted_then_redelivered = len(lost), len(redelivered)
    s.never_delivered = len(never)
    s.classic_missed = sum(1 for v in produced if v not in classic_seen)
    s.log_duplicates = sum(len(ks) - 1 for ks in dupes.values())
    s.classic_rewinds, s.delivery_mismatch = len(rewinds), len(mismatch)
    s.offset_reused = len(offset_reused)
    s.archived = sum(1 for k, _ in never if k in archived)
    s.accepts_durable_unconfirmed = len(durable_unconfirmed)
    s.share_deliveries = len(deliveries)
    s.released = len(released)
    s.delivery_count_regressed = len(regressions)
    s.max_delivery_count = max((c for *_, c, _ in deliveries), default=0)
    history: dict[bytes, list[tuple[int, Key, int, int]]] = defaultdict(list)
    for seq, k, v, count, who in deliveries:
        history[v].append((seq, k, count, who))
    s.examples = {
        "lost": [(k, v, stored.get(k), where.get(v)) for k, v in lost[:10]],
        "accepted_then_redelivered": [(v, confirmed[v], history[v]) for v in redelivered[:10]],
        "never_delivered": [(k, v, "delivered" if v in delivered else "never delivered",
                             "archived" if k in archived else "", history.get(v, [])[:5]) for k, v in never[:10]],
        "classic_missed": sorted((k, v) for v, k in produced.items() if v not in classic_seen)[:10],
        "log_duplicates": list(dupes.items())[:10],
        "classic_rewinds": sorted(rewinds)[:10],
        "delivery_mismatch": mismatch[:10],
        "offset_reused": offset_reused[:10],
        "delivery_count_regressed": [(v, releases[v], history[v]) for v in regressions[:10]],
    }
    s.notes += [f"produce errors: {produce_errors}" if produce_errors else "",
                f"acknowledgement failures: {ack_failures}" if ack_failures else "",
                f"client errors (most common): {client_errors}" if client_errors else ""]
    s.notes = [n for n in s.notes if n]


def _verify_dlq(load: Load, dlq: Counter[Key], s: Summary) -> None:
    """Every confirmed REJECT on the DLQ exactly once; nothing else there but rejects whose answer a
    kill lost and records that reached the delivery limit."""
    with load.lock:
        produced = dict(load.produced)
        rejected = dict(load.rejected)
        reject_sent = set(load.reject_sent)
        top_count: dict[bytes, int] = {}
        for _seq, _k, v, count, _who in load.deliveries:
            top_count[v] = max(top_count.get(v, 0), count)
    lost = sorted(produced[v] for v in rejected if v in produced and dlq[produced[v]] == 0)
    dupes = sorted((k, n) for k, n in dlq.items() if n > 1)
    by_key = {k: v for v, k in produced.items()}
    unexpected = sorted(k for k in dlq if (v := by_key.get(k)) is None
                        or (v not in reject_sent and top_count.get(v, 0) < 10))
    s.rejected, s.dlq_records = len(rejected), sum(dlq.values())
    s.dlq_lost, s.dlq_duplicated, s.dlq_unexpected = len(lost), sum(n - 1 for _k, n in dupes), len(unexpected)
    s.examples.update({"dlq_lost": lost[:10], "dlq_duplicated": dupes[:10], "dlq_unexpected": unexpected[:10]})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="kill -9 chaos run against sharebroker")
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--seed", type=int, default=None, help="seed of the kill timing (printed with the summary)")
    ap.add_argument("--fsync", action="store_true", help="run the broker with --fsync")
    ap.add_argument("--rate", type=int, default=Options.rate, help="records/s per producer")
    ap.add_argument("--no-stress", action="store_true", help="default segment, snapshot and prune settings")
    ap.add_argument("--keep", action="store_true", help="keep the data directory and broker log")
    ap.add_argument("--quiet", action="store_true", help="no line per cycle")
    args = ap.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="sharebroker-chaos-"))
    opts = Options(seed=args.seed, fsync=args.fsync, rate=args.rate, stress=not args.no_stress)
    try:
        s = run(args.cycles, workdir, opts=opts, log=(lambda _l: None) if args.quiet else print)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(s.table())
    for name, items in s.examples.items():
        if items:
            print(f"  examples {name}: {items}")
    for note in s.notes:
        print(f"  {note}")
    if args.keep:
        print(f"  data directory and broker log kept in {workdir}")
    if s.suspicious():
        print(f"ATTENTION: {', '.join(s.suspicious())} not 0")
    if s.failed():
        print(f"FAILED: {', '.join(s.failed())} (reproduce with --seed {s.seed})")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
