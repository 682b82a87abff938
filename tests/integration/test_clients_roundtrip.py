"""Produce/consume round trips with the three PyPI clients, compression, long polling,
ListOffsets and DeleteRecords, against the real broker subprocess."""

from __future__ import annotations

import asyncio
import datetime
import random
import threading
import time

import pytest
from confluent_kafka import (OFFSET_BEGINNING, TIMESTAMP_CREATE_TIME, Consumer, Producer,
                             TopicPartition)

from tests.integration import rawkafka as rk
from tests.integration.clients import (admin, consume_from_beginning, consume_n, consumer_conf, create_topic,
                                       produce_sync, producer_conf)

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _headers(i: int) -> list[tuple[str, bytes | None]]:
    # several headers, a duplicate key, and a None value
    return [("trace", f"t-{i}".encode()), ("dup", b"first"), ("dup", b"second"), ("nullable", None)]


def _items(n: int, base_ts: int) -> list[dict]:
    items = []
    for i in range(n):
        items.append({"partition": 0, "key": f"key-{i}".encode(),
                      "value": (f"value-{i}-" + "x" * 300).encode(),  # compressible, so codecs really compress
                      "headers": _headers(i), "timestamp": base_ts + i * 7})
    items.append({"partition": 0, "key": None, "value": None, "headers": [], "timestamp": base_ts + n * 7})
    return items


# ---------------------------------------------------------------------------------------------
# confluent-kafka


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_roundtrip_with_compression(broker, topic_name, codec):
    create_topic(broker.bootstrap, topic_name)
    base_ts = int(time.time() * 1000) - 60_000
    items = _items(30, base_ts)
    p = Producer(producer_conf(broker.bootstrap, **{"compression.type": codec, "linger.ms": 50}))
    delivered = produce_sync(p, topic_name, items)
    assert [m.offset() for m in delivered] == list(range(len(items)))

    msgs = consume_from_beginning(broker.bootstrap, topic_name, len(items))
    assert [m.offset() for m in msgs] == list(range(len(items)))
    for item, m in zip(items, msgs):
        assert m.key() == item["key"]
        assert m.value() == item["value"]
        assert (m.headers() or []) == item["headers"]
        assert m.timestamp() == (TIMESTAMP_CREATE_TIME, item["timestamp"])

    # The stored batches are the producer's: its codec, a valid CRC over bytes 21..end, exact
    # millisecond timestamps inside.
    with rk.RawClient(broker.bootstrap) as raw:
        batches = rk.fetch_all_batches(raw, topic_name, 0)
    assert batches, "raw fetch returned no batches"
    assert all(b.magic == 2 for b in batches)
    assert {b.compression for b in batches} == {rk.CODECS[codec]}, [b.attributes for b in batches]
    assert all(b.crc_ok for b in batches), "a stored batch fails its CRC32C"
    records = rk.records_of(batches)
    assert [r.offset for r in records] == list(range(len(items)))
    assert [r.timestamp_ms for r in records] == [it["timestamp"] for it in items]
    assert [r.value for r in records] == [it["value"] for it in items]
    assert [r.headers for r in records] == [it["headers"] for it in items]


@pytest.mark.parametrize("codec", CODECS)
def test_raw_batch_is_stored_and_served_verbatim(broker, topic_name, codec):
    """A batch produced over the wire comes back byte for byte; only base offset and leader
    epoch (outside the CRC) may differ."""
    create_topic(broker.bootstrap, topic_name)
    ts = int(time.time() * 1000)
    with rk.RawClient(broker.bootstrap) as raw:
        first = rk.encode_batch([rk.Rec(b"warm-up", timestamp_ms=ts)])
        assert int(rk.produce(raw, topic_name, 0, first).error_code) == 0
        sent = rk.encode_batch([rk.Rec(b"payload-%d-" % i + b"z" * 500, key=b"k%d" % i,
                                       headers=[("h", b"v"), ("h", None)], timestamp_ms=ts + i)
                                for i in range(10)], compression=rk.CODECS[codec])
        resp = rk.produce(raw, topic_name, 0, sent)
        assert int(resp.error_code) == 0, resp
        assert resp.base_offset == 1
        p = rk.fetch(raw, topic_name, 0, 1)
    got = [b for b in rk.parse_batches(p.records) if b.base_offset == 1]
    assert len(got) == 1, rk.parse_batches(p.records)
    stored = got[0].raw
    assert len(stored) == len(sent)
    assert stored[8:12] == sent[8:12]       # batch length
    assert stored[16:] == sent[16:]         # magic, CRC, attributes, ... records: untouched
    assert got[0].last_offset == 10
    assert p.high_watermark == 11


# ---------------------------------------------------------------------------------------------
# kafka-python


def test_kafka_python_roundtrip(broker, topic_name):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    create_topic(broker.bootstrap, topic_name)
    base_ts = int(time.time() * 1000) - 5_000
    prod = KafkaProducer(bootstrap_servers=broker.bootstrap, request_timeout_ms=5000, max_block_ms=10000,
                         linger_ms=5)
    try:
        futures = [prod.send(topic_name, value=f"v{i}".encode(), key=f"k{i}".encode(), partition=0,
                             headers=[("h1", f"{i}".encode()), ("h1", b"again")], timestamp_ms=base_ts + i)
                   for i in range(50)]
        prod.flush(timeout=10)
        metas = [f.get(timeout=10) for f in futures]
    finally:
        prod.close(timeout=5)
    assert [m.offset for m in metas] == list(range(50))

    cons = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, request_timeout_ms=10000,
                         fetch_max_wait_ms=100, consumer_timeout_ms=10000)
    try:
        tp = KTP(topic_name, 0)
        cons.assign([tp])
        cons.seek_to_beginning(tp)
        got = []
        deadline = time.monotonic() + 15
        while len(got) < 50 and time.monotonic() < deadline:
            for recs in cons.poll(timeout_ms=200).values():
                got.extend(recs)
    finally:
        cons.close()
    assert [r.offset for r in got] == list(range(50))
    for i, r in enumerate(got):
        assert r.key == f"k{i}".encode() and r.value == f"v{i}".encode()
        assert list(r.headers) == [("h1", f"{i}".encode()), ("h1", b"again")]
        assert r.timestamp == base_ts + i and r.timestamp_type == 0


async def test_aiokafka_roundtrip(broker, topic_name):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP

    create_topic(broker.bootstrap, topic_name)
    base_ts = int(time.time() * 1000) - 5_000
    prod = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, request_timeout_ms=5000)
    await asyncio.wait_for(prod.start(), 10)
    try:
        metas = []
        for i in range(30):
            metas.append(await asyncio.wait_for(prod.send_and_wait(
                topic_name, value=f"a{i}".encode(), key=f"k{i}".encode(), partition=0, timestamp_ms=base_ts + i,
                headers=[("x", f"{i}".encode()), ("x", b"2")]), 10))
    finally:
        await prod.stop()
    assert [m.offset for m in metas] == list(range(30))

    cons = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, request_timeout_ms=10000,
                            fetch_max_wait_ms=100)
    await asyncio.wait_for(cons.start(), 10)
    try:
        tp = ATP(topic_name, 0)
        cons.assign([tp])
        await cons.seek_to_beginning(tp)
        got = []
        deadline = time.monotonic() + 15
        while len(got) < 30 and time.monotonic() < deadline:
            for recs in (await cons.getmany(timeout_ms=200)).values():
                got.extend(recs)
    finally:
        await cons.stop()
    assert [r.offset for r in got] == list(range(30))
    for i, r in enumerate(got):
        assert (r.key, r.value) == (f"k{i}".encode(), f"a{i}".encode())
        assert list(r.headers) == [("x", f"{i}".encode()), ("x", b"2")]
        assert r.timestamp == base_ts + i and r.timestamp_type == 0


async def test_cross_client_aiokafka_to_kafka_python_and_confluent(broker, topic_name):
    from aiokafka import AIOKafkaProducer
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    create_topic(broker.bootstrap, topic_name, partitions=2)
    n = 40
    prod = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, request_timeout_ms=5000, linger_ms=2)
    await asyncio.wait_for(prod.start(), 10)
    try:
        futs = [await prod.send(topic_name, value=f"m{i}".encode(), key=f"k{i}".encode(), partition=i % 2)
                for i in range(n)]
        metas = [await asyncio.wait_for(f, 10) for f in futs]
    finally:
        await prod.stop()
    expected = {p: [f"m{i}".encode() for i in range(n) if i % 2 == p] for p in (0, 1)}
    for p in (0, 1):
        assert sorted(m.offset for m in metas if m.partition == p) == list(range(n // 2))

    def kafka_python_read() -> dict[int, list]:
        cons = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             request_timeout_ms=10000, fetch_max_wait_ms=100)
        try:
            tps = [KTP(topic_name, 0), KTP(topic_name, 1)]
            cons.assign(tps)
            cons.seek_to_beginning(*tps)
            out: dict[int, list] = {0: [], 1: []}
            deadline = time.monotonic() + 15
            while sum(map(len, out.values())) < n and time.monotonic() < deadline:
                for tp, recs in cons.poll(timeout_ms=200).items():
                    out[tp.partition].extend(recs)
            return out
        finally:
            cons.close()

    kp = await asyncio.to_thread(kafka_python_read)
    for p in (0, 1):
        assert [r.offset for r in kp[p]] == list(range(n // 2))
        assert [r.value for r in kp[p]] == expected[p]

    for p in (0, 1):
        msgs = await asyncio.to_thread(consume_from_beginning, broker.bootstrap, topic_name, n // 2, p)
        assert [m.offset() for m in msgs] == list(range(n // 2))
        assert [m.value() for m in msgs] == expected[p]


# ---------------------------------------------------------------------------------------------
# Long polling


def test_confluent_long_poll_is_woken_by_produce(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    p = Producer(producer_conf(broker.bootstrap, **{"linger.ms": 0}))
    produce_sync(p, topic_name, [{"partition": 0, "value": b"warm-up"}])
    c = Consumer(consumer_conf(broker.bootstrap, **{"fetch.wait.max.ms": 5000}))
    try:
        c.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
        (first,) = consume_n(c, 1, timeout=10)
        assert first.value() == b"warm-up"
        # The consumer is now parked in a 5 s fetch at offset 1. Produce 0.5 s later.
        produced_at: list[float] = []

        def later() -> None:
            produced_at.append(time.monotonic())
            produce_sync(p, topic_name, [{"partition": 0, "value": b"wake-up"}])

        timer = threading.Timer(0.5, later)
        timer.start()
        try:
            (msg,) = consume_n(c, 1, timeout=10)
            arrived = time.monotonic()
        finally:
            timer.join()
        assert msg.value() == b"wake-up" and msg.offset() == 1
        latency = arrived - produced_at[0]
        assert latency < 3.0, f"record reached the long-polling consumer {latency:.2f}s after produce"
    finally:
        c.close()


def test_raw_fetch_waits_max_wait_when_empty_and_wakes_on_produce(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    with rk.RawClient(broker.bootstrap) as fetcher, rk.RawClient(broker.bootstrap) as producer:
        # Nothing to return: the broker holds the fetch for about max_wait, then answers empty.
        t0 = time.monotonic()
        p = rk.fetch(fetcher, topic_name, 0, 0, max_wait_ms=600)
        waited = time.monotonic() - t0
        assert int(p.error_code) == 0 and not rk.parse_batches(p.records)
        assert 0.45 <= waited < 3.0, f"empty fetch with max_wait 600 ms answered after {waited:.3f}s"

        # A parked fetch (max_wait 8 s) is answered as soon as data arrives.
        corr = fetcher.send(rk.fetch_request(topic_name, 0, 0, max_wait_ms=8000))
        t1 = time.monotonic()
        pr = rk.produce(producer, topic_name, 0, rk.encode_batch([rk.Rec(b"hello")]))
        assert int(pr.error_code) == 0
        resp = fetcher.receive(type(rk.fetch_request(topic_name, 0, 0)), corr, timeout=10)
        waited = time.monotonic() - t1
        (part,) = resp.responses[0].partitions
        values = [r.value for r in rk.records_of(rk.parse_batches(part.records))]
        assert values == [b"hello"]
        assert waited < 3.0, f"parked fetch answered {waited:.2f}s after the produce"


# ---------------------------------------------------------------------------------------------
# ListOffsets and DeleteRecords


def _lookup(c: Consumer, topic: str, ts: int) -> int:
    (res,) = c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=5)
    assert res.error is None, res.error
    return res.offset


def test_watermarks_and_offsets_for_times_one_record_per_batch(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    t0 = int(time.time() * 1000) - 100_000
    p = Producer(producer_conf(broker.bootstrap, **{"linger.ms": 0}))
    for i in range(10):
        produce_sync(p, topic_name, [{"partition": 0, "value": f"r{i}".encode(), "timestamp": t0 + i * 1000}])
    c = Consumer(consumer_conf(broker.bootstrap))
    try:
        assert c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=5) == (0, 10)
        assert _lookup(c, topic_name, t0 - 50_000) == 0    # before the first: the first offset
        assert _lookup(c, topic_name, t0) == 0
        assert _lookup(c, topic_name, t0 + 1) == 1         # first offset with timestamp >= T
        assert _lookup(c, topic_name, t0 + 2500) == 3
        assert _lookup(c, topic_name, t0 + 9000) == 9
        assert _lookup(c, topic_name, t0 + 9001) == -1     # beyond the last: no offset (OFFSET_END)
    finally:
        c.close()


def test_offsets_for_times_inside_one_batch(broker, topic_name):
    """Kafka answers with the first *record* whose timestamp is >= T, even inside a batch."""
    create_topic(broker.bootstrap, topic_name)
    t0 = int(time.time() * 1000) - 100_000
    with rk.RawClient(broker.bootstrap) as raw:
        batch = rk.encode_batch([rk.Rec(b"r%d" % i, timestamp_ms=t0 + i * 1000) for i in range(10)])
        assert int(rk.produce(raw, topic_name, 0, batch).error_code) == 0
    c = Consumer(consumer_conf(broker.bootstrap))
    try:
        assert c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=5) == (0, 10)
        assert _lookup(c, topic_name, t0) == 0
        assert _lookup(c, topic_name, t0 + 1) == 1
        assert _lookup(c, topic_name, t0 + 2500) == 3
        assert _lookup(c, topic_name, t0 + 9000) == 9
        assert _lookup(c, topic_name, t0 + 9001) == -1
    finally:
        c.close()


def test_delete_records_moves_low_watermark(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    p = Producer(producer_conf(broker.bootstrap, **{"linger.ms": 0}))
    # several batches, so the cut falls inside the log
    for i in range(10):
        produce_sync(p, topic_name, [{"partition": 0, "value": f"d{i}".encode()}])
    a = admin(broker.bootstrap)
    futs = a.delete_records([TopicPartition(topic_name, 0, 4)], request_timeout=10)
    (fut,) = futs.values()
    res = fut.result(timeout=15)
    assert res.low_watermark == 4

    c = Consumer(consumer_conf(broker.bootstrap))
    try:
        assert c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=5) == (4, 10)
    finally:
        c.close()
    msgs = consume_from_beginning(broker.bootstrap, topic_name, 6)
    assert [m.offset() for m in msgs] == list(range(4, 10))
    assert [m.value() for m in msgs] == [f"d{i}".encode() for i in range(4, 10)]

    # Below the log start offset is out of range for a fetch, as in Kafka.
    with rk.RawClient(broker.bootstrap) as raw:
        resp = raw.request(rk.fetch_request(topic_name, 0, 0))
        (part,) = resp.responses[0].partitions
        assert int(part.error_code) == 1, part  # OFFSET_OUT_OF_RANGE
        assert part.log_start_offset == 4

    # delete_records to OFFSET_END (-1) empties the partition
    (fut,) = a.delete_records([TopicPartition(topic_name, 0, -1)], request_timeout=10).values()
    assert fut.result(timeout=15).low_watermark == 10


def _list_offset(bootstrap: str, topic: str, timestamp: int, version: int) -> tuple[int, int]:
    """(error code, offset) of a raw ListOffsets for partition 0."""
    cls = rk.req_cls(2, version)
    tcls = rk._nested(cls, "topics")
    pcls = rk._nested(tcls, "partitions")
    req = cls(**rk._fit(cls, {"replica_id": -1, "isolation_level": 0, "timeout": datetime.timedelta(0),
                              "topics": (tcls(name=topic, partitions=(
                                  pcls(partition_index=0, current_leader_epoch=-1, timestamp=timestamp),)),)}))
    with rk.RawClient(bootstrap) as raw:
        (p,) = raw.request(req).topics[0].partitions
    return int(p.error_code), int(p.offset)


def test_list_offsets_special_timestamps_after_delete_records(broker, topic_name):
    """Kafka's ListOffsetsRequest: EARLIEST_LOCAL_TIMESTAMP is -4, LATEST_TIERED_TIMESTAMP -5,
    EARLIEST_PENDING_UPLOAD -6. Without remote storage Kafka answers the log start offset for -4 and
    -1 for -5 and -6; each is refused with UNSUPPORTED_VERSION below the version that introduced it."""
    create_topic(broker.bootstrap, topic_name)
    p = Producer(producer_conf(broker.bootstrap, **{"linger.ms": 0}))
    now = int(time.time() * 1000)
    for i in range(3):  # rising timestamps: the max timestamp is offset 2's whatever the clock's resolution
        produce_sync(p, topic_name, [{"partition": 0, "value": f"d{i}".encode(), "timestamp": now + i}])
    a = admin(broker.bootstrap)  # kept: the futures die with their client
    (fut,) = a.delete_records([TopicPartition(topic_name, 0, 1)], request_timeout=10).values()
    assert fut.result(timeout=15).low_watermark == 1
    answers = {ts: _list_offset(broker.bootstrap, topic_name, ts, 11) for ts in (-2, -4, -5, -6, -1, -3)}
    assert answers == {-2: (0, 1), -4: (0, 1), -5: (0, -1), -6: (0, -1), -1: (0, 3), -3: (0, 2)}
    unsupported = 35
    assert _list_offset(broker.bootstrap, topic_name, -4, 7) == (unsupported, -1)
    assert _list_offset(broker.bootstrap, topic_name, -5, 8) == (unsupported, -1)
    assert _list_offset(broker.bootstrap, topic_name, -6, 10) == (unsupported, -1)
    assert _list_offset(broker.bootstrap, topic_name, -7, 11) == (unsupported, -1)
    assert _list_offset(broker.bootstrap, topic_name, -4, 8) == (0, 1)


def test_pipelined_produce_frames_of_every_size_are_stored_in_order(broker, topic_name):
    """Many Produce requests written back to back in odd-sized pieces, small ones and ones far
    above the broker's 64 KiB staging size (filled in place, their buffers reused), are answered
    in order and stored byte for byte: no frame is cut wrong, reordered or overwritten."""
    create_topic(broker.bootstrap, topic_name)
    rnd = random.Random(64)
    sizes = [10, 70_000, 5, 900_000, 200_000, 40, 65_536, 300_000, 1, 600_000, 12, 150_000]
    values = [bytes([i + 1]) * s for i, s in enumerate(sizes)]
    with rk.RawClient(broker.bootstrap, timeout=30) as raw:
        stream = bytearray()
        correlation = []
        for v in values:
            raw._corr += 1
            correlation.append(raw._corr)
            stream += rk.encode_request(rk.produce_request(topic_name, 0, rk.encode_batch([rk.Rec(v)])), raw._corr)
        pos = 0
        while pos < len(stream):  # odd-sized writes so frame edges land anywhere
            n = rnd.choice([1, 3, 4, 5, 999, 4096, 65_537, 250_000])
            raw.send_bytes(bytes(stream[pos:pos + n]))
            pos += n
        for i, corr in enumerate(correlation):
            resp = raw.receive(type(rk.produce_request(topic_name, 0, b"")), corr)
            (p,) = resp.responses[0].partition_responses
            assert (int(p.error_code), p.base_offset) == (0, i), p
        stored = [r.value for r in rk.records_of(rk.fetch_all_batches(raw, topic_name, 0))]
    assert [len(v) for v in stored] == sizes
    assert stored == values
