"""Transactions across a restart and a kill -9: transactional ids, epochs and open transactions
come back from `__transaction_state` and the partitions' producer state, the last stable offset
stays held by an open transaction, and a new producer instance aborts it."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from sharebroker.testing import wait_for
from tests.integration import rawkafka as rk
from tests.integration.clients import create_topic, produce_sync, producer_conf
from tests.integration.test_transactions import (
    ABORT_MARKER,
    NONE,
    READ_COMMITTED,
    TRANSACTIONAL_ID_NOT_FOUND,
    _java_hash,
    add_partitions,
    confluent_read,
    describe_txn,
    end_txn,
    fetch_raw,
    init_ok,
    kafka_python_read,
    marker_kind,
    offsets,
    produce_raw,
    txn_batch,
    txn_id,
    txn_producer,
)


def _txn_state_partition(transactional_id: str, partitions: int = 50) -> int:
    h = _java_hash(transactional_id)
    return (0 if h == -(2**31) else abs(h)) % partitions


def test_restart_keeps_transactional_ids_and_committed_records(make_broker, topic_name):
    broker = make_broker()
    create_topic(broker.bootstrap, topic_name, partitions=2)
    tid = txn_id("restart")
    while _java_hash(tid) >= 0:  # a negative hashCode: where abs and a sign-bit mask part ways
        tid = txn_id("restart")
    p = txn_producer(broker.bootstrap, tid)
    p.init_transactions(15)
    p.begin_transaction()
    p.produce(topic_name, value=b"kept-0", partition=0)
    p.produce(topic_name, value=b"kept-1", partition=1)
    p.commit_transaction(15)
    p.begin_transaction()
    p.produce(topic_name, value=b"dropped-0", partition=0)
    assert p.flush(15) == 0  # else librdkafka purges it unsent and aborts without the broker
    p.abort_transaction(15)
    before = describe_txn(broker.bootstrap, tid)
    assert before.transaction_state == "CompleteAbort"
    del p
    # on disk as Kafka lays it out: __transaction_state-<abs(hashCode) % 50>
    state_dir = broker.data_dir / f"__transaction_state-{_txn_state_partition(tid)}"
    assert sum(f.stat().st_size for f in state_dir.glob("*.log")) > 0

    broker.restart()
    after_restart = describe_txn(broker.bootstrap, tid)
    assert (after_restart.transaction_state, after_restart.producer_id, after_restart.producer_epoch,
            after_restart.transaction_timeout_ms) == ("CompleteAbort", before.producer_id, before.producer_epoch,
                                                      before.transaction_timeout_ms)
    # p0: kept-0, C, dropped-0, A; p1: kept-1, C
    assert offsets(broker.bootstrap, topic_name, 0) == (4, 4)
    assert offsets(broker.bootstrap, topic_name, 1) == (2, 2)

    q = txn_producer(broker.bootstrap, tid)
    q.init_transactions(15)
    bumped = describe_txn(broker.bootstrap, tid)
    assert (bumped.transaction_state, bumped.producer_id, bumped.producer_epoch) == (
        "Empty", before.producer_id, before.producer_epoch + 1)
    q.begin_transaction()
    q.produce(topic_name, value=b"after-0", partition=0)
    q.commit_transaction(15)

    with rk.RawClient(broker.bootstrap) as raw:
        f = fetch_raw(raw, topic_name, 0, 0, READ_COMMITTED)
        assert [(a.producer_id, a.first_offset) for a in f.aborted_transactions or ()] == [(before.producer_id, 2)]
    expected = {0: [b"kept-0", b"after-0"], 1: [b"kept-1"]}
    assert confluent_read(broker.bootstrap, topic_name, [0, 1], "read_committed") == expected
    assert kafka_python_read(broker.bootstrap, topic_name, {0: 6, 1: 2}) == expected


@pytest.mark.parametrize("fsync", [False, True], ids=["page-cache", "fsync"])
def test_kill_with_an_open_transaction(make_broker, topic_name, fsync):
    broker = make_broker(fsync=fsync)
    create_topic(broker.bootstrap, topic_name, partitions=2)
    tid = txn_id("killed")
    with rk.RawClient(broker.bootstrap) as raw:
        # a committed transaction first, then one left open on both partitions
        pid, epoch = init_ok(raw, tid)
        assert set(add_partitions(raw, tid, pid, epoch, {topic_name: [0]}).values()) == {NONE}
        assert int(produce_raw(raw, topic_name, 0, txn_batch(pid, epoch, 0, [b"c-0", b"c-1"]), tid).error_code) == NONE
        assert end_txn(raw, tid, pid, epoch, True) == NONE
        assert set(add_partitions(raw, tid, pid, epoch, {topic_name: [0, 1]}).values()) == {NONE}
        r = produce_raw(raw, topic_name, 0, txn_batch(pid, epoch, 2, [b"open-0", b"open-1"]), tid)
        assert (int(r.error_code), r.base_offset) == (NONE, 3), r
        r = produce_raw(raw, topic_name, 1, txn_batch(pid, epoch, 0, [b"open-2"]), tid)
        assert (int(r.error_code), r.base_offset) == (NONE, 0), r
    open_state = describe_txn(broker.bootstrap, tid)
    assert open_state.transaction_state == "Ongoing"
    assert offsets(broker.bootstrap, topic_name, 0) == (3, 5)
    assert offsets(broker.bootstrap, topic_name, 1) == (0, 1)

    broker.kill()
    broker.start()

    state = describe_txn(broker.bootstrap, tid)
    assert (state.transaction_state, state.producer_id, state.producer_epoch) == ("Ongoing", pid, epoch)
    assert [(t.topic, sorted(t.partitions)) for t in state.topics] == [(topic_name, [0, 1])]
    assert state.transaction_start_time_ms == open_state.transaction_start_time_ms
    assert offsets(broker.bootstrap, topic_name, 0) == (3, 5)
    assert offsets(broker.bootstrap, topic_name, 1) == (0, 1)
    with rk.RawClient(broker.bootstrap) as raw:
        f = fetch_raw(raw, topic_name, 0, 0, READ_COMMITTED)
        assert (f.last_stable_offset, f.high_watermark) == (3, 5)
        assert max(b.last_offset for b in rk.parse_batches(f.records)) < 3

    p = txn_producer(broker.bootstrap, tid)
    p.init_transactions(15)  # aborts the transaction left open by the crash
    assert offsets(broker.bootstrap, topic_name, 0) == (6, 6)
    assert offsets(broker.bootstrap, topic_name, 1) == (2, 2)
    state = describe_txn(broker.bootstrap, tid)
    assert (state.transaction_state, state.producer_epoch) == ("Empty", epoch + 2)
    with rk.RawClient(broker.bootstrap) as raw:
        for partition, (first, marker_at) in ((0, (3, 5)), (1, (0, 1))):
            markers = [b for b in rk.fetch_all_batches(raw, topic_name, partition) if b.is_control]
            assert (markers[-1].base_offset, marker_kind(markers[-1]), markers[-1].producer_epoch) == (
                marker_at, ABORT_MARKER, epoch + 1)
            f = fetch_raw(raw, topic_name, partition, 0, READ_COMMITTED)
            assert [(a.producer_id, a.first_offset) for a in f.aborted_transactions or ()] == [(pid, first)]
    expected = {0: [b"c-0", b"c-1"], 1: []}
    assert confluent_read(broker.bootstrap, topic_name, [0, 1], "read_committed") == expected
    assert kafka_python_read(broker.bootstrap, topic_name, {0: 6, 1: 2}) == expected

    # and the state after the abort survives another crash
    broker.kill()
    broker.start()
    assert offsets(broker.bootstrap, topic_name, 0) == (6, 6)
    assert offsets(broker.bootstrap, topic_name, 1) == (2, 2)
    assert describe_txn(broker.bootstrap, tid).producer_epoch == epoch + 2
    assert confluent_read(broker.bootstrap, topic_name, [0, 1], "read_committed") == expected


def test_open_and_aborted_transactions_survive_segment_rolls_and_a_kill(make_broker, topic_name):
    """The producer state snapshot taken when a segment rolls carries the open transaction (the
    LSO) and the aborted ones (what read_committed fetches list) past a crash."""
    broker = make_broker()
    create_topic(broker.bootstrap, topic_name, config={"segment.bytes": "1048576"})
    tid = txn_id("rolled")
    plain = Producer(producer_conf(broker.bootstrap, **{"linger.ms": 0}))
    big = [{"value": b"f" * 100_000, "partition": 0} for _ in range(12)]  # 1.2 MB: at least one roll
    with rk.RawClient(broker.bootstrap) as raw:
        pid, epoch = init_ok(raw, tid)
        assert set(add_partitions(raw, tid, pid, epoch, {topic_name: [0]}).values()) == {NONE}
        r = produce_raw(raw, topic_name, 0, txn_batch(pid, epoch, 0, [b"open-0", b"open-1"]), tid)
        assert (int(r.error_code), r.base_offset) == (NONE, 0), r
    produce_sync(plain, topic_name, big)
    assert offsets(broker.bootstrap, topic_name) == (0, 14)

    broker.kill()
    broker.start()
    assert offsets(broker.bootstrap, topic_name) == (0, 14)
    assert describe_txn(broker.bootstrap, tid).transaction_state == "Ongoing"

    p = txn_producer(broker.bootstrap, tid)
    p.init_transactions(15)  # abort marker at 14
    assert offsets(broker.bootstrap, topic_name) == (15, 15)
    plain = Producer(producer_conf(broker.bootstrap, **{"linger.ms": 0}))
    produce_sync(plain, topic_name, big)  # another roll: the snapshot now holds the aborted transaction
    assert offsets(broker.bootstrap, topic_name) == (27, 27)
    assert len(list((broker.data_dir / f"{topic_name}-0").glob("*.log"))) >= 3  # the rolls happened

    broker.kill()
    broker.start()
    assert offsets(broker.bootstrap, topic_name) == (27, 27)
    with rk.RawClient(broker.bootstrap) as raw:
        f = fetch_raw(raw, topic_name, 0, 0, READ_COMMITTED, max_bytes=1024)
        assert [(a.producer_id, a.first_offset) for a in f.aborted_transactions or ()] == [(pid, 0)]
    got = confluent_read(broker.bootstrap, topic_name, [0], "read_committed")
    assert len(got[0]) == 24 and set(got[0]) == {b"f" * 100_000}


def test_idle_transactional_ids_expire_and_stay_expired(make_broker, topic_name):
    broker = make_broker({"transactional.id.expiration.ms": 1000,
                          "transaction.remove.expired.transaction.cleanup.interval.ms": 200})
    create_topic(broker.bootstrap, topic_name)
    idle, busy = txn_id("idle"), txn_id("busy")
    with rk.RawClient(broker.bootstrap) as raw:
        idle_pid, _ = init_ok(raw, idle)
        pid, epoch = init_ok(raw, busy)
        assert set(add_partitions(raw, busy, pid, epoch, {topic_name: [0]}).values()) == {NONE}
    wait_for(lambda: describe_txn(broker.bootstrap, idle).error_code == TRANSACTIONAL_ID_NOT_FOUND, 10, 0.05,
             "the idle transactional id to expire")
    # an id with an open transaction is never expired
    assert describe_txn(broker.bootstrap, busy).transaction_state == "Ongoing"
    broker.restart()
    assert describe_txn(broker.bootstrap, idle).error_code == TRANSACTIONAL_ID_NOT_FOUND
    assert describe_txn(broker.bootstrap, busy).transaction_state == "Ongoing"
    # the expired id starts over with a new producer id
    with rk.RawClient(broker.bootstrap) as raw:
        new_pid, new_epoch = init_ok(raw, idle)
    assert new_pid != idle_pid and new_epoch == 0


def _txnindex_entries(partition_dir) -> list[tuple[int, int, int]]:
    """(producer id, first offset, marker offset) of every `.txnindex` entry, in segment order."""
    import struct

    out = []
    for path in sorted(partition_dir.glob("*.txnindex")):
        data = path.read_bytes()
        assert len(data) % 34 == 0, path
        for pos in range(0, len(data), 34):
            version, pid, first, last, lso = struct.unpack_from(">hqqqq", data, pos)
            assert version == 0 and lso > last
            out.append((pid, first, last))
    return out


def test_aborted_transactions_are_in_kafkas_txnindex_and_rebuilt_from_the_log(make_broker, topic_name):
    """Each abort marker's segment gets a `.txnindex` entry (Kafka's format); read_committed fetches
    list them after a kill -9 without the producer snapshot, and a lost index is rebuilt from the log."""
    broker = make_broker()
    create_topic(broker.bootstrap, topic_name)
    p = txn_producer(broker.bootstrap, txn_id("indexed"))
    p.init_transactions(15)
    for outcome in ("abort", "commit", "abort"):
        p.begin_transaction()
        for i in range(3):
            p.produce(topic_name, f"{outcome}-{i}".encode(), partition=0)
        p.flush(10)
        if outcome == "abort":
            p.abort_transaction(15)
        else:
            p.commit_transaction(15)
    with rk.RawClient(broker.bootstrap) as raw:
        f = fetch_raw(raw, topic_name, 0, 0, READ_COMMITTED)
        listed = [(a.producer_id, a.first_offset) for a in f.aborted_transactions or ()]
    partition_dir = broker.data_dir / f"{topic_name}-0"
    entries = _txnindex_entries(partition_dir)
    pid = listed[0][0]
    assert [(e[0], e[1]) for e in entries] == listed == [(pid, 0), (pid, 8)]
    assert [e[2] for e in entries] == [3, 11]  # the abort markers' offsets

    broker.kill()
    (partition_dir / "producer-state.json").unlink(missing_ok=True)
    for index in partition_dir.glob("*.txnindex"):
        index.unlink()  # lost: the log still has the markers
    broker.start()
    assert _txnindex_entries(partition_dir) == entries
    with rk.RawClient(broker.bootstrap) as raw:
        f = fetch_raw(raw, topic_name, 0, 0, READ_COMMITTED)
        assert [(a.producer_id, a.first_offset) for a in f.aborted_transactions or ()] == listed
    got = confluent_read(broker.bootstrap, topic_name, [0], "read_committed")
    assert got[0] == [b"commit-0", b"commit-1", b"commit-2"]
