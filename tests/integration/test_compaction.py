"""Log compaction with real clients: the cleaner keeps the latest record per key at its original
offset, removes tombstones after delete.retention.ms, shrinks the segment files, resumes from its
checkpoint after a restart, and never brings back records of aborted transactions."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from sharebroker.broker.groups.records import offsets_partition
from sharebroker.protocol.record_batch import parse_batches
from sharebroker.testing import wait_for
from tests.integration.clients import consumer_conf, create_topic, produce_sync, producer_conf
from tests.integration.compaction_helpers import (
    CLEANER,
    COMPACTED,
    ROUND_MS,
    compacted_view,
    latest,
    log_bytes,
    make_compacted,
    produce_round,
    read_partition,
)
from tests.integration.share_helpers import FAST_SHARE_BROKER, new_group, poll_until, set_earliest, share_consumer

pytestmark = pytest.mark.needs_own_broker("sets log.cleaner.* and reads the data directory of brokers of its own")


def _checkpoint(data_dir: Path, topic: str) -> int | None:
    path = data_dir / "cleaner-offset-checkpoint"
    if not path.exists():
        return None
    for line in path.read_text().splitlines()[2:]:
        t, p, off = line.split()
        if t == topic and p == "0":
            return int(off)
    return None


def test_compaction_keeps_latest_value_per_key_and_drops_tombstones(make_broker, topic_name) -> None:
    broker = make_broker(CLEANER)
    # Written with the delete policy (nothing cleaned yet, so it can be read whole), then compacted.
    create_topic(broker.bootstrap, topic_name, config={**COMPACTED, "cleanup.policy": "delete"})
    keys = [f"key-{i:04d}".encode() for i in range(300)]
    written = []
    for r in range(5):
        pairs: list[tuple[bytes, bytes | None]] = [(k, f"value-{r}-{k.decode()}".encode() * 4) for k in keys]
        if r == 4:
            pairs = [(k, None) if i % 10 == 0 else (k, v) for i, (k, v) in enumerate(pairs)]
        written.append(produce_round(broker.bootstrap, topic_name, r, pairs))
    state = latest(written)
    before = read_partition(broker.bootstrap, topic_name)
    assert len(before) == 5 * len(keys)
    size_before = log_bytes(broker.data_dir, topic_name)
    # One more round starts a new active segment: the five rounds become cleanable.
    written.append(produce_round(broker.bootstrap, topic_name, 5, [(b"filler", b"0")]))
    state = latest(written)
    make_compacted(broker.bootstrap, topic_name)

    # Tombstones stay for delete.retention.ms after the cleaning that first keeps them.
    wait_for(lambda: read_partition(broker.bootstrap, topic_name) == compacted_view(state, tombstones=True),
             timeout=30, message="the log compacted to the latest record per key")
    assert log_bytes(broker.data_dir, topic_name) < size_before / 3
    # The checkpoint follows the swap: everything below the filler's segment is clean.
    wait_for(lambda: _checkpoint(broker.data_dir, topic_name) == written[4][keys[-1]][0] + 1, timeout=10,
             message="the cleaner checkpoint")
    assert "log cleaned" in broker.log_text()

    # A later cleaning past the delete horizon removes them (each filler round makes the log dirty).
    rounds = iter(range(6, 1000))

    def tombstones_gone() -> bool:
        r = next(rounds)
        written.append(produce_round(broker.bootstrap, topic_name, r, [(b"filler", str(r).encode())]))
        got = read_partition(broker.bootstrap, topic_name)
        return all(v is not None for _o, _k, v in got)

    wait_for(tombstones_gone, timeout=60, interval=0.2, message="tombstones removed after delete.retention.ms")
    state = latest(written)
    got = read_partition(broker.bootstrap, topic_name)
    expected = compacted_view(state, tombstones=False)
    assert [r for r in got if r[1] != b"filler"] == [r for r in expected if r[1] != b"filler"]
    assert not any(k == keys[0] for _o, k, _v in got)  # deleted keys are gone for good
    # Offsets never change: every record is read at the offset it was produced at.
    for off, k, v in got:
        assert state[k] == (off, v) or k == b"filler"


def test_restart_resumes_from_the_cleaner_checkpoint(make_broker, topic_name) -> None:
    broker = make_broker(CLEANER)
    create_topic(broker.bootstrap, topic_name, config={**COMPACTED, "delete.retention.ms": "86400000"})
    keys = [f"k{i}".encode() for i in range(100)]
    written = [produce_round(broker.bootstrap, topic_name, r, [(k, f"{r}".encode()) for k in keys])
               for r in range(3)]
    written.append(produce_round(broker.bootstrap, topic_name, 3, [(b"tail-3", b"t")]))
    first = written[3][b"tail-3"][0]  # everything below the active segment
    wait_for(lambda: _checkpoint(broker.data_dir, topic_name) == first, timeout=30,
             message="the cleaner checkpointed the whole log below the active segment")
    assert broker.stop() == 0
    broker.start()
    # Nothing new is dirty: the restarted cleaner finds the log clean and leaves it.
    assert read_partition(broker.bootstrap, topic_name) == compacted_view(latest(written), tombstones=True)
    assert _checkpoint(broker.data_dir, topic_name) == first
    written.append(produce_round(broker.bootstrap, topic_name, 4, [(k, b"new") for k in keys[:10]]))
    # The active segment is never cleaned: its keys are new ones.
    written.append(produce_round(broker.bootstrap, topic_name, 5, [(b"tail-5", b"t")]))
    wait_for(lambda: read_partition(broker.bootstrap, topic_name) == compacted_view(latest(written), tombstones=True),
             timeout=30, message="the records after the restart compacted too")


def test_aborted_transactions_are_never_resurrected(make_broker, topic_name) -> None:
    broker = make_broker(CLEANER)
    create_topic(broker.bootstrap, topic_name, config={**COMPACTED, "cleanup.policy": "delete"})
    p = Producer(producer_conf(broker.bootstrap, **{"transactional.id": f"tx-{topic_name}", "linger.ms": 5}))
    p.init_transactions(10)

    # Markers carry the broker's clock: data stamped ahead of it (within the hour Kafka allows)
    # starts each transaction's segment, and its marker follows it there.
    start = int(time.time() * 1000)

    def txn(round_no: int, pairs: list[tuple[bytes, bytes]], commit: bool) -> None:
        p.begin_transaction()
        for k, v in pairs:
            p.produce(topic_name, key=k, value=v, timestamp=start + round_no * ROUND_MS)
        p.flush(10)
        if commit:
            p.commit_transaction(10)
        else:
            p.abort_transaction(10)

    txn(0, [(b"a", b"a-committed"), (b"b", b"b-committed")], True)
    txn(1, [(b"a", b"a-aborted"), (b"only-aborted", b"x")], False)
    txn(2, [(b"b", b"b-committed-2")], True)
    txn(3, [(b"c", b"c-aborted")], False)
    txn(4, [(b"tail", b"t")], True)
    uncommitted = {(k, v) for _o, k, v in read_partition(broker.bootstrap, topic_name)}
    assert (b"a", b"a-aborted") in uncommitted  # read_uncommitted sees aborted data until cleaned
    make_compacted(broker.bootstrap, topic_name)

    def cleaned() -> bool:
        return {(k, v) for _o, k, v in read_partition(broker.bootstrap, topic_name)} == {
            (b"a", b"a-committed"), (b"b", b"b-committed-2"), (b"tail", b"t")}

    wait_for(cleaned, timeout=30, message="aborted records removed, committed latest values kept")
    for isolation in ("read_committed", "read_uncommitted"):
        got = {k: v for _o, k, v in read_partition(broker.bootstrap, topic_name, isolation=isolation)}
        assert got == {b"a": b"a-committed", b"b": b"b-committed-2", b"tail": b"t"}, isolation
    # The producer goes on: its sequence and epoch survived the cleaning.
    txn(5, [(b"a", b"a-after")], True)
    got = {k: v for _o, k, v in read_partition(broker.bootstrap, topic_name, isolation="read_committed")}
    assert got[b"a"] == b"a-after"


def test_disabled_cleaner_leaves_the_log_until_enabled(make_broker, topic_name) -> None:
    broker = make_broker({**CLEANER, "log.cleaner.enable": "false"})
    create_topic(broker.bootstrap, topic_name, config={**COMPACTED, "cleanup.policy": "compact,delete"})
    for r in range(4):
        produce_round(broker.bootstrap, topic_name, r, [(b"k", str(r).encode())])
    assert len(read_partition(broker.bootstrap, topic_name)) == 4
    assert not (broker.data_dir / "cleaner-offset-checkpoint").exists()
    assert broker.stop() == 0
    broker.overrides.pop("log.cleaner.enable")
    broker.start()
    # The last round is in the active segment, which is never cleaned.
    wait_for(lambda: read_partition(broker.bootstrap, topic_name) == [(2, b"k", b"2"), (3, b"k", b"3")],
             timeout=30, message="compacted once the cleaner runs")


def test_compressed_batches_are_rewritten_with_their_codec(make_broker, topic_name) -> None:
    broker = make_broker(CLEANER)
    codecs = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
    keys = [f"key-{i:03d}".encode() for i in range(60)]
    expected = {}
    for codec in codecs:
        topic = f"{topic_name}-{codec}"
        create_topic(broker.bootstrap, topic, config=COMPACTED)
        p = Producer(producer_conf(broker.bootstrap, **{"compression.type": codec, "linger.ms": 50}))
        # Later rounds update a third of the keys each: the first round's batches lose some records
        # and keep others, so they are rebuilt.
        written = [produce_round(broker.bootstrap, topic, r, [(k, f"{r}:{k.decode()}".encode() * 10)
                                                              for i, k in enumerate(keys) if r == 0 or i % 3 == r],
                                 producer=p) for r in range(3)]
        written.append(produce_round(broker.bootstrap, topic, 3, [(b"tail", b"t")], producer=p))
        expected[codec] = compacted_view(latest(written), tombstones=True)
    for codec, code in codecs.items():
        topic = f"{topic_name}-{codec}"
        wait_for(lambda t=topic, c=codec: read_partition(broker.bootstrap, t) == expected[c], timeout=30,
                 message=f"the {codec} topic compacted")
        data = (broker.data_dir / f"{topic}-0" / "00000000000000000000.log").read_bytes()
        stored = [h for h in parse_batches(data, verify_crc=True) if h.record_count]
        assert stored and all(h.compression == code for h in stored), codec
        assert any(h.record_count < h.last_offset_delta + 1 for h in stored), "a batch was rebuilt with gaps"


def test_consumer_offsets_are_compacted_and_replay_after_a_restart(make_broker, topic_name) -> None:
    # Segments roll every 200 ms (log.roll.ms is the default segment.ms of every topic, internal ones too).
    broker = make_broker({**CLEANER, "log.roll.ms": 200, "log.cleaner.min.cleanable.ratio": "0.01"})
    create_topic(broker.bootstrap, topic_name)
    group = f"g-{topic_name}"
    offsets_dir = broker.data_dir / f"__consumer_offsets-{offsets_partition(group, 50)}"
    c = Consumer(consumer_conf(broker.bootstrap, **{"group.id": group}))
    commits = iter(range(1, 1_000_000))
    last = [0]

    def commit_until_cleaned() -> bool:
        last[0] = next(commits)
        c.commit(offsets=[TopicPartition(topic_name, 0, last[0])], asynchronous=False)
        return any(e.get("topic") == "__consumer_offsets" and e["records_retained"] < e["records_read"]
                   for e in broker.log_events("log cleaned"))

    wait_for(commit_until_cleaned, timeout=60, interval=0.01, message="__consumer_offsets compacted")
    c.close()
    assert broker.stop() == 0
    broker.start()
    c = Consumer(consumer_conf(broker.bootstrap, **{"group.id": group}))
    try:
        got = c.committed([TopicPartition(topic_name, 0)], timeout=15)
    finally:
        c.close()
    assert got[0].offset == last[0]
    assert len(list(offsets_dir.glob("*.log"))) >= 1


def test_records_without_a_key_are_refused_on_a_compacted_topic(make_broker, topic_name) -> None:
    broker = make_broker(CLEANER)
    create_topic(broker.bootstrap, topic_name, config=COMPACTED)
    p = Producer(producer_conf(broker.bootstrap, **{"compression.type": "lz4"}))
    errors: list[KafkaError] = []
    p.produce(topic_name, value=b"no key", on_delivery=lambda err, _msg: errors.append(err))
    assert p.flush(15) == 0
    assert len(errors) == 1 and errors[0] is not None and errors[0].code() == KafkaError.INVALID_RECORD, errors
    assert "Compacted topic cannot accept message without key" in broker.log_text()
    accepted = produce_sync(p, topic_name, [{"key": b"k", "value": b"v"}])[0]
    assert not isinstance(accepted, KafkaError) and accepted.offset() == 0


def test_share_consumer_reads_a_compacted_topic(make_broker, topic_name) -> None:
    broker = make_broker({**CLEANER, **FAST_SHARE_BROKER})
    create_topic(broker.bootstrap, topic_name, config=COMPACTED)
    keys = [f"k{i:02d}".encode() for i in range(40)]
    written = [produce_round(broker.bootstrap, topic_name, r, [(k, f"{r}".encode()) for k in keys[r * 10:]])
               for r in range(3)]
    written.append(produce_round(broker.bootstrap, topic_name, 3, [(b"active", b"a")]))
    expected = compacted_view(latest(written), tombstones=True)
    wait_for(lambda: read_partition(broker.bootstrap, topic_name) == expected, timeout=30,
             message="the topic compacted")
    group = new_group()
    set_earliest(broker.bootstrap, group)
    c = share_consumer(broker.bootstrap, group, [topic_name])
    try:
        got = poll_until(c, lambda ms: len(ms) >= len(expected), what="the compacted records")
    finally:
        c.close()
    assert sorted((m.offset(), m.key(), m.value()) for m in got) == expected
