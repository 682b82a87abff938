"""Idempotent producers: client round trips, and sequence/epoch checks driven over raw frames."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from tests.integration import rawkafka as rk
from tests.integration.clients import create_topic, produce_sync, producer_conf

NONE, OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH = 0, 45, 47


def _assert_sequences_contiguous(batches: list[rk.Batch]) -> None:
    """Idempotent batches: one producer id, sequences continue across batches."""
    assert batches
    assert len({(b.producer_id, b.producer_epoch) for b in batches}) == 1, \
        {(b.producer_id, b.producer_epoch) for b in batches}
    assert batches[0].producer_id >= 0 and batches[0].producer_epoch >= 0
    seq = batches[0].base_sequence
    for b in batches:
        assert b.base_sequence == seq, (b.base_offset, b.base_sequence, seq)
        seq += b.record_count


def test_confluent_idempotent_producer_writes_each_record_once_in_order(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    n = 300
    p = Producer(producer_conf(broker.bootstrap, **{"enable.idempotence": True, "acks": "all", "linger.ms": 2,
                                                    "batch.num.messages": 37}))
    delivered = produce_sync(p, topic_name, [{"partition": 0, "value": b"i-%d" % i} for i in range(n)])
    assert [m.offset() for m in delivered] == list(range(n))
    with rk.RawClient(broker.bootstrap) as raw:
        batches = rk.fetch_all_batches(raw, topic_name, 0)
        hw = rk.fetch(raw, topic_name, 0, 0).high_watermark
    records = rk.records_of(batches)
    assert [r.value for r in records] == [b"i-%d" % i for i in range(n)]
    assert [r.offset for r in records] == list(range(n))
    assert hw == n
    _assert_sequences_contiguous(batches)


def test_kafka_python_idempotent_producer_stores_each_record_once(broker, topic_name):
    from kafka import KafkaProducer

    create_topic(broker.bootstrap, topic_name)
    n = 500
    prod = KafkaProducer(bootstrap_servers=broker.bootstrap, request_timeout_ms=5000, max_block_ms=10000,
                         linger_ms=2, batch_size=2048)
    try:
        futures = [prod.send(topic_name, value=b"kp-%d" % i, partition=0) for i in range(n)]
        prod.flush(timeout=15)
        metas = [f.get(timeout=10) for f in futures]
    finally:
        prod.close(timeout=5)
    assert [m.offset for m in metas] == list(range(n))
    with rk.RawClient(broker.bootstrap) as raw:
        batches = rk.fetch_all_batches(raw, topic_name, 0)
        hw = rk.fetch(raw, topic_name, 0, 0).high_watermark
    assert [r.value for r in rk.records_of(batches)] == [b"kp-%d" % i for i in range(n)]
    assert hw == n
    _assert_sequences_contiguous(batches)  # kafka-python 3 is idempotent by default


def _batch(pid: int, epoch: int, seq: int, values: list[bytes]) -> bytes:
    return rk.encode_batch([rk.Rec(v) for v in values], producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def _hw(raw: rk.RawClient, topic: str) -> int:
    return rk.fetch(raw, topic, 0, 0).high_watermark


def test_raw_retry_is_deduplicated_and_sequences_checked(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    with rk.RawClient(broker.bootstrap) as raw:
        ip = raw.request(rk.init_producer_id_request(version=4))
        assert int(ip.error_code) == NONE, ip
        pid, epoch = ip.producer_id, ip.producer_epoch
        assert pid >= 0 and epoch >= 0

        b1 = _batch(pid, epoch, 0, [b"a", b"b", b"c"])
        r = rk.produce(raw, topic_name, 0, b1)
        assert (int(r.error_code), r.base_offset) == (NONE, 0), r
        # the same batch again (a retry): acknowledged with the original offset, not appended
        r = rk.produce(raw, topic_name, 0, b1)
        assert (int(r.error_code), r.base_offset) == (NONE, 0), r
        assert _hw(raw, topic_name) == 3

        b2 = _batch(pid, epoch, 3, [b"d", b"e"])
        r = rk.produce(raw, topic_name, 0, b2)
        assert (int(r.error_code), r.base_offset) == (NONE, 3), r
        # an older batch among the last five is still recognised as a duplicate
        r = rk.produce(raw, topic_name, 0, b1)
        assert (int(r.error_code), r.base_offset) == (NONE, 0), r
        r = rk.produce(raw, topic_name, 0, b2)
        assert (int(r.error_code), r.base_offset) == (NONE, 3), r
        assert _hw(raw, topic_name) == 5

        # a gap in the sequence is refused and nothing is appended
        r = rk.produce(raw, topic_name, 0, _batch(pid, epoch, 10, [b"gap"]))
        assert int(r.error_code) == OUT_OF_ORDER_SEQUENCE_NUMBER, r
        assert _hw(raw, topic_name) == 5

        # the connection is still fine and the next in-order batch is accepted
        r = rk.produce(raw, topic_name, 0, _batch(pid, epoch, 5, [b"f"]))
        assert (int(r.error_code), r.base_offset) == (NONE, 5), r

        batches = rk.fetch_all_batches(raw, topic_name, 0)
    assert [r.value for r in rk.records_of(batches)] == [b"a", b"b", b"c", b"d", b"e", b"f"]
    assert [b.base_offset for b in batches] == [0, 3, 5]


@pytest.mark.parametrize("init_version", [3, 4])
def test_raw_old_epoch_is_fenced_after_bump(broker, topic_name, init_version):
    create_topic(broker.bootstrap, topic_name)
    with rk.RawClient(broker.bootstrap) as raw:
        ip = raw.request(rk.init_producer_id_request(version=init_version))
        assert int(ip.error_code) == NONE, ip
        pid, epoch = ip.producer_id, ip.producer_epoch
        r = rk.produce(raw, topic_name, 0, _batch(pid, epoch, 0, [b"e0-a", b"e0-b"]))
        assert (int(r.error_code), r.base_offset) == (NONE, 0), r

        # Bump the epoch with InitProducerId carrying the current id and epoch (KIP-360).
        bump = raw.request(rk.init_producer_id_request(producer_id=pid, producer_epoch=epoch, version=init_version))
        assert int(bump.error_code) == NONE, bump
        if bump.producer_id == pid:
            new_epoch = bump.producer_epoch
            assert new_epoch > epoch, bump
        else:
            # Kafka hands an idempotent (non-transactional) producer a fresh id instead; the
            # client then bumps its epoch locally, which is what we do here.
            new_epoch = epoch + 1
        r = rk.produce(raw, topic_name, 0, _batch(pid, new_epoch, 0, [b"e1-a"]))
        assert (int(r.error_code), r.base_offset) == (NONE, 2), r

        # The old epoch is now fenced, whatever its sequence.
        r = rk.produce(raw, topic_name, 0, _batch(pid, epoch, 2, [b"zombie"]))
        assert int(r.error_code) == INVALID_PRODUCER_EPOCH, r
        assert _hw(raw, topic_name) == 3
        # A new epoch must start at sequence 0.
        r = rk.produce(raw, topic_name, 0, _batch(pid, new_epoch + 1, 5, [b"bad-start"]))
        assert int(r.error_code) == OUT_OF_ORDER_SEQUENCE_NUMBER, r
        assert _hw(raw, topic_name) == 3
        values = [x.value for x in rk.records_of(rk.fetch_all_batches(raw, topic_name, 0))]
    assert values == [b"e0-a", b"e0-b", b"e1-a"]
