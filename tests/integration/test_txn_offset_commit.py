"""Consume-transform-produce (exactly once): TxnOffsetCommit writes a transactional producer's
consumer offsets into `__consumer_offsets` with its transaction; they count when the commit marker
lands there, vanish on abort, survive a crash either way, and read as unstable while pending."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from sharebroker.testing import wait_for
from tests.integration import rawkafka as rk
from tests.integration.clients import consume_from_beginning, consumer_conf, create_topic, producer_conf
from tests.integration.test_transactions import init_ok

UNSTABLE_OFFSET_COMMIT, INVALID_TXN_STATE, TRANSACTION_ABORTABLE = 88, 48, 120


def _committed(bootstrap: str, group: str, topic: str) -> int:
    c = Consumer(consumer_conf(bootstrap, **{"group.id": group}))
    try:
        (tp,) = c.committed([TopicPartition(topic, 0)], 10)
        return tp.offset
    finally:
        c.close()


def _ctp_round(consumer: Consumer, producer: Producer, out: str, want: int, *, commit: bool) -> list[bytes]:
    """Consume `want` records, produce them transformed and send the offsets, then end the
    transaction; returns the values consumed."""
    got: list = []
    deadline = time.monotonic() + 15
    while len(got) < want:
        assert time.monotonic() < deadline, f"consumed {len(got)} of {want}"
        got += [m for m in consumer.consume(want - len(got), 0.5) if m.error() is None]
    producer.begin_transaction()
    for m in got:
        producer.produce(out, value=m.value().upper(), partition=0)
    producer.send_offsets_to_transaction(consumer.position(consumer.assignment()), consumer.consumer_group_metadata(),
                                         10)
    if commit:
        producer.commit_transaction(10)
    else:
        producer.abort_transaction(10)
    return [m.value() for m in got]


def test_consume_transform_produce_commits_offsets_with_the_transaction(broker) -> None:
    src, out = f"in-{uuid.uuid4().hex[:6]}", f"out-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, src)
    create_topic(broker.bootstrap, out)
    group = f"ctp-{uuid.uuid4().hex[:6]}"
    feed = Producer(producer_conf(broker.bootstrap))
    for i in range(12):
        feed.produce(src, value=b"v%d" % i, partition=0)
    feed.flush(10)
    consumer = Consumer(consumer_conf(broker.bootstrap, **{"group.id": group, "isolation.level": "read_committed"}))
    consumer.subscribe([src])
    producer = Producer(producer_conf(broker.bootstrap, **{"transactional.id": f"ctp-{uuid.uuid4().hex[:6]}"}))
    producer.init_transactions(10)
    try:
        first = _ctp_round(consumer, producer, out, 4, commit=True)
        assert _committed(broker.bootstrap, group, src) == 4
        _ctp_round(consumer, producer, out, 4, commit=False)
        assert _committed(broker.bootstrap, group, src) == 4  # the aborted transaction's offsets never count
    finally:
        consumer.close()
    # A new member of the group resumes where the committed transaction left off.
    again = Consumer(consumer_conf(broker.bootstrap, **{"group.id": group, "isolation.level": "read_committed"}))
    again.subscribe([src])
    try:
        second = _ctp_round(again, producer, out, 8, commit=True)
    finally:
        again.close()
    assert second == [b"v%d" % i for i in range(4, 12)]
    assert _committed(broker.bootstrap, group, src) == 12
    results = consume_from_beginning(broker.bootstrap, out, 12, **{"isolation.level": "read_committed"})
    assert [m.value() for m in results] == [v.upper() for v in first + second]


def _txn_offset_commit(raw: rk.RawClient, version: int, tid: str, group: str, pid: int, epoch: int, topic: str,
                       offset: int) -> int:
    cls = rk.req_cls(28, version)
    tcls = rk._nested(cls, "topics")
    pcls = rk._nested(tcls, "partitions")
    part = pcls(**rk._fit(pcls, {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
                                 "committed_metadata": ""}))
    req = cls(**rk._fit(cls, {"transactional_id": tid, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
                              "generation_id": -1, "member_id": "", "group_instance_id": None,
                              "topics": (tcls(name=topic, partitions=(part,)),)}))
    (t,) = raw.request(req).topics
    return int(t.partitions[0].error_code)


def _add_offsets(raw: rk.RawClient, tid: str, pid: int, epoch: int, group: str) -> int:
    cls = rk.req_cls(25, 3)
    return int(raw.request(cls(transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group)).error_code)


def _offset_fetch(raw: rk.RawClient, group: str, topic: str, *, require_stable: bool) -> tuple[int, int]:
    cls = rk.req_cls(9, 7)
    tcls = rk._nested(cls, "topics")
    resp = raw.request(cls(group_id=group, topics=(tcls(name=topic, partition_indexes=(0,)),),
                           require_stable=require_stable))
    (p,) = resp.topics[0].partitions
    return p.committed_offset, int(p.error_code)


def test_raw_txn_offset_commit_needs_add_offsets_and_reads_unstable_until_committed(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name)
    tid, group = f"tx-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    with rk.RawClient(broker.bootstrap) as raw:
        pid, epoch = init_ok(raw, tid)
        # Without AddOffsetsToTxn the group's offsets partition is not in the transaction.
        assert _txn_offset_commit(raw, 3, tid, group, pid, epoch, topic_name, 7) == INVALID_TXN_STATE
        assert _txn_offset_commit(raw, 5, tid, group, pid, epoch, topic_name, 7) == TRANSACTION_ABORTABLE
        assert _add_offsets(raw, tid, pid, epoch, group) == 0
        assert _txn_offset_commit(raw, 3, tid, group, pid, epoch, topic_name, 7) == 0
        assert _offset_fetch(raw, group, topic_name, require_stable=True) == (-1, UNSTABLE_OFFSET_COMMIT)
        assert _offset_fetch(raw, group, topic_name, require_stable=False) == (-1, 0)
        end = rk.req_cls(26, 3)
        assert int(raw.request(end(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                   committed=True)).error_code) == 0
        wait_for(lambda: _offset_fetch(raw, group, topic_name, require_stable=True) == (7, 0), 10,
                 message="the offset to be committed with the transaction")


def test_pending_and_committed_transactional_offsets_survive_a_crash(make_broker, topic_name) -> None:
    broker = make_broker()
    create_topic(broker.bootstrap, topic_name)
    done_tid, open_tid = f"tx-{uuid.uuid4().hex[:6]}", f"tx-{uuid.uuid4().hex[:6]}"
    done_group, open_group = f"g-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    with rk.RawClient(broker.bootstrap) as raw:
        for tid, group, offset in ((done_tid, done_group, 5), (open_tid, open_group, 9)):
            pid, epoch = init_ok(raw, tid)
            assert _add_offsets(raw, tid, pid, epoch, group) == 0
            assert _txn_offset_commit(raw, 3, tid, group, pid, epoch, topic_name, offset) == 0
            if tid == done_tid:
                end = rk.req_cls(26, 3)
                assert int(raw.request(end(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                           committed=True)).error_code) == 0
        wait_for(lambda: _offset_fetch(raw, done_group, topic_name, require_stable=True) == (5, 0), 10,
                 message="the first transaction's offset")
    broker.kill()
    broker.start()
    with rk.RawClient(broker.bootstrap) as raw:
        assert _offset_fetch(raw, done_group, topic_name, require_stable=True) == (5, 0)
        # The open transaction's offset is still pending after the crash ...
        assert _offset_fetch(raw, open_group, topic_name, require_stable=True) == (-1, UNSTABLE_OFFSET_COMMIT)
        # ... until its producer's successor aborts it.
        init_ok(raw, open_tid)
        wait_for(lambda: _offset_fetch(raw, open_group, topic_name, require_stable=True) == (-1, 0), 10,
                 message="the open transaction's offset to be dropped by the abort")

