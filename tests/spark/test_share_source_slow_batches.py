"""The README's worked example (pipeline/examples/enrich.py) at the README's scale, with a record
lock shorter than a micro-batch: 5,000 orders on 3 partitions, a group lock of 15 s (Kafka's
minimum) and a sink that holds the first batch for longer than that. The source must keep the
batch's locks alive until Spark commits it, so that the query keeps running, every order lands
once, and the group's start offset reaches the log end."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from sharebroker.testing import unique_name
from sharebroker.testing.plugin import Broker
from tests.brokers import module_broker
from tests.integration.clients import create_topic, produce_sync, producer_conf
from tests.integration.share_helpers import set_earliest
from tests.integration.test_share_admin import describe_offsets

pytestmark = pytest.mark.spark
ORDERS = 5000
PARTITIONS = 3
LOCK_MS = 15_000


@pytest.fixture(scope="module")
def rbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    # The broker of `make run`: Kafka's defaults (a 45 s member session, 5 s heartbeats, locks of
    # at least 15 s), nothing made fast for tests.
    yield from module_broker(tmp_path_factory, "spark-readme")


def log_ends(bootstrap: str, topic: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("watermarks")})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
    finally:
        c.close()


def test_the_worked_example_outlives_the_record_lock(spark, rbroker, tmp_path, monkeypatch):
    import importlib

    from tests.spark.test_kafka_source_sink import _consume_all

    bootstrap = rbroker.bootstrap
    topic, group = unique_name("orders"), unique_name("enrich")
    create_topic(bootstrap, topic, PARTITIONS)
    create_topic(bootstrap, f"{topic}-enriched", 1)
    set_earliest(bootstrap, group, share_record_lock_duration_ms=str(LOCK_MS))
    produce_sync(Producer(producer_conf(bootstrap)), topic,
                 [{"key": f"customer-{i % 97}".encode(), "value": f"order-{i}".encode()} for i in range(ORDERS)])
    ends = log_ends(bootstrap, topic)
    assert sum(ends.values()) == ORDERS and all(ends.values())

    for name, value in {"BOOTSTRAP": bootstrap, "TOPIC": topic, "GROUP": group,
                        "CHECKPOINT": str(tmp_path / "checkpoint"), "OUT": str(tmp_path / "parquet")}.items():
        monkeypatch.setenv(name, value)
    example = importlib.reload(importlib.import_module("sharebroker.pipeline.examples.enrich"))
    assert example.TRIGGER == "1 second"  # the README's processing-time trigger
    write_both = example.write_both
    slow_batches: list[float] = []

    def slow_sink(batch, batch_id: int) -> None:
        if batch_id == 0:
            # A slow sink on the first batch: it holds the batch for longer than the lock, counted
            # from when the sink got it (its records were acquired earlier still). The point of the
            # test, not a wait for something.
            started = time.monotonic()
            time.sleep(LOCK_MS / 1000 + 3)
            slow_batches.append(time.monotonic() - started)
        write_both(batch, batch_id)

    monkeypatch.setattr(example, "write_both", slow_sink)
    query = example.start(spark)
    try:
        deadline = time.monotonic() + 100
        offsets = None
        while True:
            if not query.isActive:
                raise AssertionError(f"the query stopped: {query.exception()}")
            g = describe_offsets(bootstrap, group)
            offsets = {p.partition_index: (p.start_offset, p.lag) for t in g.topics for p in t.partitions}
            if slow_batches and offsets == {p: (end, 0) for p, end in ends.items()}:
                break
            assert time.monotonic() < deadline, f"the group did not reach the log end {ends}: {offsets}"
            query.awaitTermination(0.5)
        assert query.isActive and query.exception() is None  # it keeps running after the slow batch
    finally:
        query.stop()
    assert slow_batches and slow_batches[0] > LOCK_MS / 1000

    rows = spark.read.parquet(str(tmp_path / "parquet")).select("partition", "offset", "value", "deliveryCount").collect()
    assert len(rows) == ORDERS  # exactly once: no batch was delivered twice
    assert {(r.partition, r.offset) for r in rows} == {(p, o) for p, end in ends.items() for o in range(end)}
    assert sorted(r.value for r in rows) == sorted(f"ORDER-{i}" for i in range(ORDERS))
    assert {r.deliveryCount for r in rows} == {1}
    enriched = _consume_all(bootstrap, f"{topic}-enriched", ORDERS)
    assert sorted(m.value() for m in enriched) == sorted(f"ORDER-{i}".encode() for i in range(ORDERS))
    g = describe_offsets(bootstrap, group)
    assert {p.partition_index: (p.start_offset, p.lag) for t in g.topics for p in t.partitions} == \
        {p: (end, 0) for p, end in ends.items()}
