"""Durable share-partition state (`__share_group_state`, share-groups-spec §5.3, §5.8, §10, §16)
across broker restarts and crashes, through confluent_kafka.ShareConsumer (librdkafka 2.16):

- a graceful restart between two consume phases keeps ACCEPTed and REJECTed records final,
  RELEASEd records available with their delivery count, the group config, and the persisted
  start offset / state epoch;
- delivery counts of records whose acquisition lock expired survive a restart, and records
  archived at the delivery count limit stay archived;
- kill -9 under a producer and three explicit-mode consumers (fsync broker): every produced
  record is accepted at least once and no record whose acceptance was confirmed to the client
  is ever delivered again;
- the state topic stays bounded under a long acknowledgement workload (snapshots and pruning),
  and is replayed at start-up; a state-topic segment size below the topic minimum is either
  refused or works;
- the share group's assignment interval runs on across a restart and a kill -9, from the time of
  its last target computation kept in its ShareGroupTargetAssignmentMetadata record."""

from __future__ import annotations

import contextlib
import itertools
import struct
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, KafkaError, KafkaException, Producer
from confluent_kafka.admin import ConfigSource

from tests.integration import rawkafka as rk
from tests.integration.clients import create_topic, producer_conf
from tests.integration.share_helpers import (
    FAST_SHARE_BROKER,
    ShareMember,
    commit_errors,
    describe_group_configs,
    describe_share_group,
    new_group,
    poll_for,
    poll_until,
    produce_values,
    raw_produce,
    set_earliest,
    set_group_configs,
    share_consumer,
    topic_id,
)
from sharebroker.testing import BrokerProcess, wait_for

TIMEOUT = 20.0
AVAILABLE, ACKNOWLEDGED, ARCHIVED = 0, 2, 4


# --------------------------------------------------------------------------------------------
# Helpers


def _close_quietly(*consumers: Any) -> None:
    for c in consumers:
        try:
            c.close()
        except Exception:  # noqa: BLE001, S110 - the broker may be down; nothing to check here
            pass


def _share_setup(broker: BrokerProcess, topic: str, **group_configs: str) -> tuple[str, str, uuid.UUID]:
    """`topic` created and a new share group reading it from the earliest offset (plus
    `group_configs`): (bootstrap, group, topic id)."""
    b = broker.bootstrap
    create_topic(b, topic)
    group = new_group()
    set_earliest(b, group, **group_configs)
    return b, group, topic_id(b, topic)


@contextlib.contextmanager
def _member(bootstrap: str, group: str, topic: str, **conf: Any) -> Iterator[Any]:
    """An explicit-mode share consumer of `topic`, closed quietly on the way out."""
    c = share_consumer(bootstrap, group, [topic], explicit=True, **conf)
    try:
        yield c
    finally:
        _close_quietly(c)


def _acknowledging(c: Any, topic: str, kind: AcknowledgeType = AcknowledgeType.ACCEPT) -> Callable[[list[Any]], None]:
    """An on_batch callback: acknowledge every record of the batch as `kind`, then commit_sync."""
    def on_batch(batch: list[Any]) -> None:
        for m in batch:
            c.acknowledge(m, kind)
        commit_ok(c, topic)
    return on_batch


def _state_call(bootstrap: str, api_key: int, version: int, group: str, tid: uuid.UUID, **fields: Any) -> Any:
    cls = rk.req_cls(api_key, version)
    tcls = rk._nested(cls, "topics")
    pcls = rk._nested(tcls, "partitions")
    req = cls(group_id=group, topics=(tcls(topic_id=tid, partitions=(pcls(**fields),)),))
    with rk.RawClient(bootstrap) as raw:
        resp = raw.request(req)
    (result,) = resp.results
    (p,) = result.partitions
    return p


def state_summary(bootstrap: str, group: str, tid: uuid.UUID, partition: int = 0) -> Any:
    """ReadShareGroupStateSummary (87 v1) of one share partition."""
    p = _state_call(bootstrap, 87, 1, group, tid, partition=partition, leader_epoch=0)
    assert int(p.error_code) == 0, p
    return p


def state_batches(bootstrap: str, group: str, tid: uuid.UUID, partition: int = 0) -> tuple[int, list[tuple]]:
    """(start offset, [(first, last, state, count)]) from ReadShareGroupState (84) with the stored
    leader epoch (so the read never fences or moves anything)."""
    leader_epoch = max(state_summary(bootstrap, group, tid, partition).leader_epoch, 0)
    p = _state_call(bootstrap, 84, 0, group, tid, partition=partition, leader_epoch=leader_epoch)
    assert int(p.error_code) == 0, p
    return p.start_offset, [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                            for b in p.state_batches]




def commit_ok(consumer: Any, topic: str, partition: int = 0) -> None:
    result = commit_errors(consumer.commit_sync(10))
    assert result == {(topic, partition): None}, f"commit_sync failed: {result}"


def offsets_counts(msgs: list[Any]) -> list[tuple[int, int]]:
    return sorted((m.offset(), m.delivery_count()) for m in msgs)


# --------------------------------------------------------------------------------------------
# 1. graceful restart between consume phases


def test_acknowledgements_survive_a_graceful_restart(make_broker, topic_name):
    broker = make_broker(FAST_SHARE_BROKER)
    b, group, tid = _share_setup(broker, topic_name)
    raw_produce(b, topic_name, [[f"r-{i}".encode() for i in range(100)]])  # one log batch, 0..99

    # phase 1: ACCEPT 0-29, RELEASE 30-39, REJECT 40-49, keep 50-99 acquired and unacknowledged
    with _member(b, group, topic_name, log_level=0) as c1:  # closed while the broker is down
        got = poll_until(c1, lambda g: len(g) > 0, TIMEOUT, what="the first poll")
        # acquisition is log-batch aligned: the one batch comes in one poll (we may not poll again
        # without acknowledging everything, and 50-99 must stay unacknowledged)
        assert offsets_counts(got) == [(o, 1) for o in range(100)], offsets_counts(got)
        for m in got:
            if m.offset() < 30:
                c1.acknowledge(m, AcknowledgeType.ACCEPT)
            elif m.offset() < 40:
                c1.acknowledge(m, AcknowledgeType.RELEASE)
            elif m.offset() < 50:
                c1.acknowledge(m, AcknowledgeType.REJECT)
        commit_ok(c1, topic_name)
        before = state_summary(b, group, tid)
        assert before.start_offset in (0, 30), before  # SPSO is persisted lazily, with the next write
        assert before.state_epoch >= 0, before

        assert broker.stop() == 0  # SIGTERM with c1's share session open and 50-99 acquired
    broker.start()

    after = state_summary(b, group, tid)
    assert after.state_epoch == before.state_epoch, (before, after)
    # the acknowledged prefix 0-29 is behind the start offset; the shutdown's release of 50-99
    # (if any) carried the lazily persisted SPSO 30
    assert after.start_offset in (before.start_offset, 30) and after.start_offset >= before.start_offset, \
        (before, after)
    start, batches = state_batches(b, group, tid)
    below_50 = [x for x in batches if x[0] < 50]
    expected_below_50 = [(30, 39, AVAILABLE, 1), (40, 49, ARCHIVED, 1)]
    if start == 0:
        expected_below_50.insert(0, (0, 29, ACKNOWLEDGED, 1))
    assert below_50 == expected_below_50, batches
    # 50-99 were never acknowledged: either absent (a persister gap) or released with count 1
    assert [x for x in batches if x[0] >= 50] in ([], [(50, 99, AVAILABLE, 1)]), batches

    # the group config survived
    entries = describe_group_configs(b, group)
    entry = entries["share.auto.offset.reset"]
    assert (entry.value, getattr(entry.source, "value", entry.source)) == \
        ("earliest", ConfigSource.GROUP_CONFIG.value), (entry.value, entry.source)

    # phase 2: a fresh member gets exactly 30-39 (second delivery) and 50-99, never 0-29 / 40-49
    expected = set(range(30, 40)) | set(range(50, 100))
    with _member(b, group, topic_name) as c2:
        accept = _acknowledging(c2, topic_name)
        got = poll_until(c2, lambda g: {m.offset() for m in g} >= expected, TIMEOUT, on_batch=accept,
                         what="offsets 30-39 and 50-99")
        got += poll_for(c2, 1.5, on_batch=accept)
    pairs = offsets_counts(got)
    offsets = [o for o, _ in pairs]
    assert offsets == sorted(expected), f"redelivered or missing: {pairs}"
    assert [c for o, c in pairs if o < 40] == [2] * 10, pairs
    assert {c for o, c in pairs if o >= 50} <= {1, 2}, pairs
    assert [m.value() for m in sorted(got, key=lambda m: m.offset())][:10] == [f"r-{i}".encode() for i in range(30, 40)]
    assert "Traceback" not in broker.log_text(), broker.log_text()[-4000:]


def test_expired_delivery_counts_and_archived_records_survive_restarts(make_broker, topic_name):
    lock_ms = 1000
    broker = make_broker({**FAST_SHARE_BROKER, "group.share.min.record.lock.duration.ms": str(lock_ms),
                          "group.share.record.lock.duration.ms": str(lock_ms),
                          "group.share.delivery.count.limit": "3"})
    b, group, tid = _share_setup(broker, topic_name)
    raw_produce(b, topic_name, [[f"x-{i}".encode() for i in range(20)]])  # one log batch, 0..19

    # round 1: acquire 0-19 and let the lock expire; the expiry is persisted with count 1
    with _member(b, group, topic_name, log_level=0) as c1:  # closed while the broker is down
        got = poll_until(c1, lambda g: len(g) > 0, TIMEOUT, what="the first poll")
        assert offsets_counts(got) == [(o, 1) for o in range(20)]
        wait_for(lambda: state_batches(b, group, tid)[1] == [(0, 19, AVAILABLE, 1)], TIMEOUT, interval=0.1,
                 message="the expired acquisition persisted as AVAILABLE with delivery count 1")
        assert broker.stop() == 0
    broker.start()
    # later rounds must not race a 1 s lock: give this group a long one (group level)
    set_group_configs(b, group, {"share.record.lock.duration.ms": "30000"})

    # round 2: the expired records come back with count 2; RELEASE 0-9, REJECT 10-14, ACCEPT 15-19,
    # then RELEASE 0-9 a second time at count 3 = the delivery count limit -> archived
    with _member(b, group, topic_name, log_level=0) as c2:  # closed while the broker is down
        got = poll_until(c2, lambda g: len(g) > 0, TIMEOUT, what="the records after the restart")
        assert offsets_counts(got) == [(o, 2) for o in range(20)], "expiry delivery counts lost in the restart"
        for m in got:
            kind = (AcknowledgeType.RELEASE if m.offset() < 10 else
                    AcknowledgeType.REJECT if m.offset() < 15 else AcknowledgeType.ACCEPT)
            c2.acknowledge(m, kind)
        commit_ok(c2, topic_name)
        # a record on its last attempt is delivered alone (delivery throttling near the limit, §5.4)
        release = _acknowledging(c2, topic_name, AcknowledgeType.RELEASE)
        again = poll_until(c2, lambda g: len(g) >= 10, TIMEOUT, on_batch=release, what="the released records")
        again += poll_for(c2, 1.0, on_batch=release)
        assert offsets_counts(again) == [(o, 3) for o in range(10)], offsets_counts(again)
        wait_for(lambda: all(s in (ACKNOWLEDGED, ARCHIVED) for *_, s, _c in state_batches(b, group, tid)[1]),
                 TIMEOUT, interval=0.1, message="0-19 persisted as terminal")
        start, batches = state_batches(b, group, tid)  # the start offset moves lazily
        per_offset = {o: (st, cnt) for first, last, st, cnt in batches for o in range(first, last + 1)}
        expected = {o: (ARCHIVED, 3) if o < 10 else (ARCHIVED, 2) if o < 15 else (ACKNOWLEDGED, 2)
                    for o in range(start, 20)}
        assert per_offset == expected, (start, batches)
        assert broker.stop() == 0
    broker.start()

    # round 3: nothing of 0-19 is delivered again; a new record is
    produce_values(b, topic_name, [b"after-restarts"])
    with _member(b, group, topic_name) as c3:
        accept = _acknowledging(c3, topic_name)
        got = poll_until(c3, lambda g: any(m.offset() == 20 for m in g), TIMEOUT, on_batch=accept,
                         what="the record produced after the restarts")
        got += poll_for(c3, 1.5, on_batch=accept)
    assert [(m.offset(), m.delivery_count(), m.value()) for m in got] == [(20, 1, b"after-restarts")], \
        [(m.offset(), m.delivery_count()) for m in got]
    # 0-19 are behind the persisted start offset (20, or 21 once a later write carries the new SPSO)
    assert state_summary(b, group, tid).start_offset in (20, 21)
    assert "Traceback" not in broker.log_text(), broker.log_text()[-4000:]


# --------------------------------------------------------------------------------------------
# 2. kill -9 under load


class CrashLoad:
    """A producer and three explicit-mode share consumers in threads. Every event gets a global
    sequence number so deliveries and confirmations can be ordered across threads."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.seq = itertools.count()
        self.lock = threading.Lock()
        self.produced: dict[int, bytes] = {}                # offset -> value, acknowledged by the broker
        self.produce_errors = 0
        self.deliveries: list[tuple[int, int, bytes, int, int]] = []  # (seq, offset, value, count, consumer)
        self.confirmed: dict[int, int] = {}                 # offset -> seq of its first confirmation
        self.commit_failures = 0
        self.commits: list[tuple[int, int, list[int], Any]] = []  # (seq, consumer, offsets, outcome)
        self.marks: list[tuple[int, str]] = []                     # (seq, "kill"/"started")
        self.errors: list[str] = []
        self.stop_producing = threading.Event()
        self.stop_consuming = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        self.threads = [threading.Thread(target=self._produce, name="producer", daemon=True)]
        self.threads += [threading.Thread(target=self._consume, args=(i,), name=f"consumer-{i}", daemon=True)
                         for i in range(3)]
        for t in self.threads:
            t.start()

    # -- producer: acks=all, paced at ~2000 records/s, retries across restarts
    def _produce(self) -> None:
        p = Producer(producer_conf(self.bootstrap, **{
            "acks": "all", "linger.ms": 5, "message.timeout.ms": 60000, "request.timeout.ms": 5000,
            "reconnect.backoff.max.ms": 500, "enable.idempotence": False, "log_level": 0}))
        n = 0

        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            with self.lock:
                if err is None:
                    self.produced[msg.offset()] = msg.value()
                else:
                    self.produce_errors += 1

        t0 = time.monotonic()
        while not self.stop_producing.is_set():
            if n > (time.monotonic() - t0) * 2000:
                p.poll(0.005)
                continue
            try:
                p.produce(self.topic, value=f"crash-{n:08d}".encode(), partition=0, on_delivery=on_delivery)
                n += 1
            except BufferError:
                p.poll(0.05)
            p.poll(0)
        p.flush(60)

    # -- consumers: ACCEPT everything, commit_sync after each poll
    def _consume(self, i: int) -> None:
        c = share_consumer(self.bootstrap, self.group, [self.topic], explicit=True,
                           **{"client.id": f"crash-{i}", "reconnect.backoff.max.ms": 500, "log_level": 0})

        def on_commit(offsets: Any, exc: Any) -> None:  # acks sent outside commit_sync count too
            s = next(self.seq)
            if exc is not None:
                with self.lock:
                    self.commits.append((s, i, sorted(o for offs in offsets.values() for o in offs),
                                         f"callback: {exc}"))
                return
            with self.lock:
                for offs in offsets.values():
                    for o in offs:
                        self.confirmed.setdefault(o, s)

        c.set_acknowledgement_commit_callback(on_commit)
        try:
            while not self.stop_consuming.is_set():
                try:
                    msgs = list(c.poll(0.5))
                except KafkaException as exc:
                    self.errors.append(f"poll: {exc}")
                    continue
                s = next(self.seq)
                held: list[Any] = []
                with self.lock:
                    for m in msgs:
                        if m.error() is not None:
                            self.errors.append(f"message error: {m.error()}")
                            continue
                        self.deliveries.append((s, m.offset(), m.value(), m.delivery_count(), i))
                        held.append(m)
                for m in held:
                    try:
                        c.acknowledge(m, AcknowledgeType.ACCEPT)
                    except Exception as exc:  # noqa: BLE001 - no longer in flight (session reset): not confirmed
                        self.errors.append(f"acknowledge {m.offset()}: {exc}")
                if not held:
                    continue
                try:
                    result = c.commit_sync(10)
                except KafkaException as exc:
                    with self.lock:
                        self.commit_failures += 1
                        self.commits.append((next(self.seq), i, [m.offset() for m in held], f"raised {exc}"))
                    self.errors.append(f"commit_sync: {exc}")
                    continue
                s = next(self.seq)
                codes = commit_errors(result)
                with self.lock:
                    self.commits.append((s, i, [m.offset() for m in held], codes))
                    if codes.get((self.topic, 0), "missing") is None:
                        for m in held:
                            self.confirmed.setdefault(m.offset(), s)
                    else:
                        self.commit_failures += 1
        finally:
            _close_quietly(c)

    def counts(self) -> tuple[int, int]:
        """(records produced, records confirmed accepted)"""
        with self.lock:
            return len(self.produced), len(self.confirmed)

    def progressed(self, was: tuple[int, int], step: int) -> bool:
        produced, confirmed = self.counts()
        return produced >= was[0] + step and confirmed >= was[1] + step


def acknowledged_in_state_log(bootstrap: str, group: str, tid: uuid.UUID, partition: int = 0) -> set[int]:
    """Offsets that any ShareSnapshot/ShareUpdate record of the share partition on
    `__share_group_state` (read with Fetch) carries as ACKNOWLEDGED, or puts below its start
    offset (an acknowledgement that completes the prefix is persisted as the start offset it
    moves to, as Kafka does)."""
    from sharebroker.broker.share_state import records as staterec  # Kafka's record formats

    out: set[int] = set()
    start = 0
    with rk.RawClient(bootstrap) as raw:
        meta = raw.request(rk.metadata_request(["__share_group_state"], version=12))
        (t,) = meta.topics
        assert int(t.error_code) == 0, t
        for p in t.partitions:
            for batch in rk.fetch_all_batches(raw, "__share_group_state", p.partition_index):
                for r in batch.records():
                    if r.key is None or r.value is None:
                        continue
                    kind, g, key_tid, key_partition = staterec.decode_key(r.key)
                    if (g, key_tid, key_partition) != (group, tid, partition):
                        continue
                    value = staterec.decode_snapshot(r.value) if kind == staterec.SNAPSHOT else \
                        staterec.decode_update(r.value)
                    for sb in value.batches:
                        if sb.delivery_state == ACKNOWLEDGED:
                            out.update(range(sb.first_offset, sb.last_offset + 1))
                    start = max(start, value.start_offset)
    out.update(range(start))
    return out


def _crash_diagnostics(load: CrashLoad, broker: BrokerProcess) -> str:
    with load.lock:
        missing = sorted(o for o in load.produced if o not in load.confirmed)
        seen = defaultdict(list)
        for seq, o, _v, count, who in load.deliveries:
            seen[o].append((seq, count, who))
        covering = [(sq, who, (offs[0], offs[-1]), out) for sq, who, offs, out in load.commits
                    if set(offs) & set(missing)]
        lines = [(f"produced={len(load.produced)} confirmed={len(load.confirmed)} missing={len(missing)} "
                  f"first missing={missing[:20]} last missing={missing[-5:]}"),
                 f"deliveries of missing: {[(o, seen.get(o)) for o in missing[:10]]}",
                 f"commits covering missing offsets: {covering[:10]}",
                 f"kills/restarts (seq): {load.marks}",
                 f"client errors (last 10 of {len(load.errors)}): {load.errors[-10:]}"]
    try:
        tid = topic_id(load.bootstrap, load.topic)
        start, batches = state_batches(load.bootstrap, load.group, tid)
        lines.append(f"persisted start offset {start}, batches {batches[:20]}")
    except Exception as exc:  # noqa: BLE001 - diagnostics only
        lines.append(f"persisted state unavailable: {exc}")
    tail = [ln for ln in broker.log_text().splitlines()
            if "connection opened" not in ln and "connection closed" not in ln][-15:]
    lines.append("broker log tail:\n" + "\n".join(tail))
    return "\n".join(lines)


@pytest.mark.slow
def test_kill_under_share_load_never_redelivers_confirmed_records(make_broker, topic_name):
    broker = make_broker(FAST_SHARE_BROKER, fsync=True)
    # a short lock bounds how long records acquired by a dead session stay locked
    b, group, tid = _share_setup(broker, topic_name, **{"share.record.lock.duration.ms": "5000"})

    load = CrashLoad(b, topic_name, group)
    load.start()
    kills = 0
    try:
        for _ in range(5):
            was = load.counts()
            wait_for(lambda was=was: load.progressed(was, 1000), 30, interval=0.05,
                     message=f"produce and confirm progress before kill {kills + 1} (was {was}, "
                             f"now {load.counts()}, errors {load.errors[-5:]})")
            load.marks.append((next(load.seq), "kill"))
            broker.kill()
            kills += 1
            broker.start()
            load.marks.append((next(load.seq), "started"))
        was = load.counts()
        wait_for(lambda: load.progressed(was, 1000), 30, interval=0.05, message="progress after the last restart")
        load.stop_producing.set()
        load.threads[0].join(70)
        assert not load.threads[0].is_alive(), "the producer did not finish flushing"

        # drained: every produced record was confirmed to a client, or lies below the persisted
        # share-partition start offset (terminal: its ACCEPT reached the broker, but the answer was
        # lost when the broker was killed; checked against the state log below)
        def drained() -> bool:
            spso = state_summary(b, group, tid).start_offset
            with load.lock:
                return all(o in load.confirmed or o < spso for o in load.produced)
        try:
            wait_for(drained, 60, interval=0.2, message="every produced record accepted")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{_crash_diagnostics(load, broker)}") from None
    finally:
        load.stop_producing.set()
        load.stop_consuming.set()
        for t in load.threads:
            t.join(30)

    with load.lock:
        produced = dict(load.produced)
        confirmed = dict(load.confirmed)
        deliveries = list(load.deliveries)
    assert kills >= 5
    # what the broker durably recorded as ACKNOWLEDGED, from every record of __share_group_state
    # (the topic is not pruned within this test: the default prune interval is 5 minutes)
    in_log = acknowledged_in_state_log(b, group, tid)
    lost_answers = sorted(o for o in produced if o not in confirmed)
    never_accepted = [o for o in lost_answers if o not in in_log]
    assert not never_accepted, (
        f"{len(never_accepted)} produced records were never accepted (not confirmed to a client, not "
        f"ACKNOWLEDGED in __share_group_state), e.g. {never_accepted[:10]}\n{_crash_diagnostics(load, broker)}")
    not_durable = sorted(o for o in confirmed if o in produced and o not in in_log)
    assert not not_durable, f"confirmed acceptances missing from __share_group_state: {not_durable[:10]}"

    by_offset: dict[int, list[tuple[int, int, bytes, int, int]]] = defaultdict(list)
    for d in deliveries:
        by_offset[d[1]].append(d)
    violations = [(o, confirmed[o], d) for o, ds in by_offset.items() if o in confirmed
                  for d in ds if d[0] > confirmed[o]]
    changed = sorted(o for o, v in produced.items() if any(d[2] != v for d in by_offset.get(o, ())))
    redelivered = sum(1 for ds in by_offset.values() if len(ds) > 1)
    print(f"\nkills={kills} produced={len(produced)} produce_errors={load.produce_errors} "
          f"accepted_but_answer_lost={len(lost_answers)} "
          f"delivered={len(deliveries)} distinct={len(by_offset)} delivered_more_than_once={redelivered} "
          f"commit_failures={load.commit_failures} violations={len(violations)} client_errors={len(load.errors)}")
    assert not changed, f"offsets whose value changed across crashes (acknowledged data lost): {changed[:10]}"
    assert not violations, (
        f"{len(violations)} deliveries of records after their acceptance was confirmed "
        f"(offset, confirm seq, (seq, offset, value, delivery count, consumer)): {violations[:10]}")
    replays = broker.log_events("share state replayed")
    assert len(replays) >= kills, "the share state was not replayed at every restart"


# --------------------------------------------------------------------------------------------
# 3. the state topic stays bounded


def _checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """Kafka's offset checkpoint text format: `0`, count, `topic partition offset` lines."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    return {(t, int(p)): int(o) for t, p, o in (ln.split() for ln in lines[2:] if len(ln.split()) == 3)}


def state_topic_figures(broker: BrokerProcess) -> dict[str, int]:
    """From the data directory: bytes of all `__share_group_state` .log files, bytes of the record
    batches at or above each partition's log start offset (`log-start-offset-checkpoint`),
    records ever written (log end offsets) and records above the log start."""
    data_dir = Path(broker.data_dir)
    starts = _checkpoint(data_dir / "log-start-offset-checkpoint")
    figures = {"log_bytes": 0, "live_bytes": 0, "written": 0, "live_records": 0}
    for d in data_dir.glob("__share_group_state-*"):
        start = starts.get(("__share_group_state", int(d.name.rsplit("-", 1)[1])), 0)
        end = 0
        for f in sorted(d.glob("*.log")):
            data = f.read_bytes()
            figures["log_bytes"] += len(data)
            pos = 0
            while pos + 27 <= len(data):  # record batch v2 headers: base offset, length, ..., last offset delta
                base, length = struct.unpack_from(">qi", data, pos)
                if length <= 0 or pos + 12 + length > len(data):
                    break
                last = base + struct.unpack_from(">i", data, pos + 23)[0]
                end = max(end, last + 1)
                if last >= start:
                    figures["live_bytes"] += 12 + length
                pos += 12 + length
        figures["written"] += end
        figures["live_records"] += max(0, end - start)
    return figures


def test_state_topic_stays_bounded_and_is_replayed(make_broker, topic_name):
    n, chunk = 20_000, 10
    broker = make_broker({**FAST_SHARE_BROKER,
                          "share.coordinator.state.topic.prune.interval.ms": "1000",
                          "share.coordinator.cold.partition.snapshot.interval.ms": "1000",
                          "share.coordinator.snapshot.update.records.per.snapshot": "10"})
    b, group, tid = _share_setup(broker, topic_name)
    p = Producer(producer_conf(b, **{"linger.ms": 20, "batch.num.messages": 2000, "log_level": 0}))
    acked = [0]

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        assert err is None, err
        acked[0] += 1
    for i in range(n):
        while True:
            try:
                p.produce(topic_name, value=b"b%07d" % i, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(30) == 0 and acked[0] == n

    # ACCEPT everything in acknowledgement batches of `chunk` records: one state write each
    commits = 0
    seen: set[int] = set()
    with _member(b, group, topic_name) as c:
        deadline = time.monotonic() + 120
        while len(seen) < n:
            assert time.monotonic() < deadline, f"consumed {len(seen)} of {n}"
            msgs = list(c.poll(0.5))
            assert all(m.error() is None for m in msgs), [m.error() for m in msgs if m.error()]
            offs = [m.offset() for m in msgs]
            assert not seen.intersection(offs), "a record was delivered twice"
            seen.update(offs)
            for k in range(0, len(msgs), chunk):
                for m in msgs[k:k + chunk]:
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
                commit_ok(c, topic_name)
                commits += 1
    assert commits >= n // chunk

    # after the workload: a cold snapshot of the key, then a prune moves the log start of its
    # state partition to that snapshot, the last record
    def pruned_to_the_end() -> dict[str, int] | None:
        f = state_topic_figures(broker)
        return f if f["written"] > commits and f["live_records"] <= 2 else None
    figures = wait_for(pruned_to_the_end, 15, interval=0.2,
                       message=f"a prune past {commits} state writes (now {state_topic_figures(broker)})")
    assert broker.log_events("share state pruned"), "no prune was logged"
    assert figures["live_bytes"] <= 4096, figures
    s = state_summary(b, group, tid)  # SPSO is persisted lazily: n, or n - chunk with the last chunk
    assert n - chunk <= s.start_offset <= n, s

    assert broker.stop() == 0
    broker.start()
    (replay,) = broker.log_events("share state replayed")[-1:]
    print(f"\ncommits={commits} state={figures} replayed={replay['records']} replay_ms={replay['replay_ms']}")
    assert 1 <= replay["records"] <= 50, f"replayed {replay['records']} records after {commits} state writes"

    # the state is right after the replay: nothing is delivered again; new records are
    assert n - chunk <= state_summary(b, group, tid).start_offset <= n
    produce_values(b, topic_name, [b"new-0", b"new-1"])
    with _member(b, group, topic_name) as c:
        accept = _acknowledging(c, topic_name)
        got = poll_until(c, lambda g: len(g) >= 2, TIMEOUT, on_batch=accept, what="the two new records")
        got += poll_for(c, 1.0, on_batch=accept)
    assert offsets_counts(got) == [(n, 1), (n + 1, 1)], offsets_counts(got)[:20]
    assert "Traceback" not in broker.log_text(), broker.log_text()[-4000:]


def test_small_state_topic_segments_are_refused_or_work(make_broker, topic_name):
    """`share.coordinator.state.topic.segment.bytes` below the topic-level minimum of
    `segment.bytes` (1 MiB): the broker must either refuse the setting at start-up or still
    serve share groups (small segments are what lets pruning free disk space). It must not
    accept it and then hang every share-state write."""
    overrides = {**FAST_SHARE_BROKER, "share.coordinator.state.topic.segment.bytes": "65536"}
    try:
        broker = make_broker(overrides)
    except RuntimeError as exc:  # refused at start-up: acceptable
        assert "segment.bytes" in str(exc), exc
        return
    b, group, _tid = _share_setup(broker, topic_name)
    produce_values(b, topic_name, [b"one", b"two"])
    with _member(b, group, topic_name) as c:
        got = poll_until(c, lambda g: len(g) >= 2, 15, on_batch=_acknowledging(c, topic_name),
                         what="records of a share group on a broker with small state segments")
    assert offsets_counts(got) == [(0, 1), (1, 1)]
    assert "Traceback" not in broker.log_text(), broker.log_text()[-4000:]


# --------------------------------------------------------------------------------------------
# 4. the assignment interval across a restart


@pytest.mark.parametrize("kill", [False, True])
def test_the_assignment_interval_runs_on_across_a_restart(make_broker, topic_name, kill):
    """As Kafka 4.3+, which keeps AssignmentTimestamp in the ShareGroupTargetAssignmentMetadata
    record: a target held back by share.assignment.interval.ms before a restart (graceful or
    kill -9) is still held after it, a heartbeat answered from the last target, until the interval
    since the last computation has passed; the coordinator then computes it without a heartbeat."""
    interval_ms = 15000
    broker = make_broker(FAST_SHARE_BROKER)
    b = broker.bootstrap
    create_topic(b, topic_name, partitions=2)
    tid = topic_id(b, topic_name)
    group = new_group()
    # members that stay quiet through the interval and the restart must not expire meanwhile
    set_group_configs(b, group, {"share.assignment.interval.ms": str(interval_ms), "share.session.timeout.ms": "40000"})
    with ShareMember(b, group, "member-a") as a, ShareMember(b, group, "member-b") as m:
        sent_a = time.monotonic()
        r = a.heartbeat(0, [topic_name])
        assert r.error_code == 0 and a.assignment == {tid: [0, 1]}, r  # the first target: at once
        first = r.member_epoch
        r = m.heartbeat(0, [topic_name])
        assert (r.error_code, r.member_epoch) == (0, first), r  # the interval holds the next target back
        before = describe_share_group(b, group)
        assert before.assignment_epoch == first < before.group_epoch, before
    if kill:
        broker.kill()
        broker.start()
    else:
        broker.restart()
    with ShareMember(b, group, "member-a") as a, ShareMember(b, group, "member-b") as m:
        # B's heartbeat would compute the pending target if the interval started again at zero
        r = m.heartbeat(first, None)
        assert (r.error_code, r.member_epoch, r.assignment) == (0, first, None), r
        d = describe_share_group(b, group)
        assert (d.group_epoch, d.assignment_epoch) == (before.group_epoch, first), d

        def computed() -> bool:
            g = describe_share_group(b, group)
            return g.assignment_epoch == g.group_epoch
        wait_for(computed, interval_ms / 1000 + 30, interval=0.1, message="the pending target after the interval")
        assert time.monotonic() - sent_a >= interval_ms / 1000
        ra, rb = a.heartbeat(first, None), m.heartbeat(first, None)
        assert ra.member_epoch == rb.member_epoch == before.group_epoch, (ra, rb)
        assert sorted(a.assignment[tid] + m.assignment[tid]) == [0, 1], (a.assignment, m.assignment)
