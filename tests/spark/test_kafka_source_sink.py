"""The `sharebroker` data source on a local[2] Spark session against a broker subprocess: batch
reads (options as Spark's Kafka source, minPartitions splits), streaming into a checkpointed
Parquet sink with a restart in the middle, and the sink (batch and streaming)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.brokers import module_broker
from sharebroker.testing.plugin import Broker
from sharebroker.testing import BrokerProcess, wait_for

pytestmark = pytest.mark.spark
N_PER_PARTITION = 1000
# An hour ago, not a fixed date: retention (7 days by default, first checked 30 s after start as in
# Kafka) must not delete the records while the module runs, here or on a long-lived compose broker.
BASE_TS = (int(time.time()) - 3600) * 1000


@pytest.fixture(scope="module")
def kbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from module_broker(tmp_path_factory, "spark-kafka")


def create(bootstrap: str, *topics: tuple[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(t, n, 1) for t, n in topics]).values():
        fut.result(timeout=15)


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, *, first: int = 0) -> None:
    """Values "<partition>-<i>", keys "k<i>", a header, timestamps BASE_TS + i."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for i in range(first, first + per_partition):
        for part in range(partitions):
            p.produce(topic, f"{part}-{i}".encode(), key=f"k{i}".encode(), partition=part,
                      headers=[("n", str(i).encode())], timestamp=BASE_TS + i)
    assert p.flush(30) == 0


@pytest.fixture(scope="module")
def orders(kbroker: BrokerProcess) -> str:
    create(kbroker.bootstrap, ("orders", 3))
    produce(kbroker.bootstrap, "orders", 3, N_PER_PARTITION)
    return "orders"


def reader(spark, bootstrap: str, **options: str):
    r = spark.read.format("sharebroker").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_batch_read_returns_every_record_once_with_spark_kafka_schema(spark, kbroker, orders):
    df = reader(spark, kbroker.bootstrap, subscribe=orders, includeHeaders="true")
    assert [f.name for f in df.schema.fields] == ["key", "value", "topic", "partition", "offset", "timestamp",
                                                  "timestampType", "headers"]
    rows = df.collect()
    assert len(rows) == 3 * N_PER_PARTITION
    assert {(r.partition, r.offset) for r in rows} == {(p, o) for p in range(3) for o in range(N_PER_PARTITION)}
    by_value = {bytes(r.value).decode(): r for r in rows}
    r = by_value["2-17"]
    assert (bytes(r.key), r.topic, r.partition, r.offset, r.timestampType) == (b"k17", "orders", 2, 17, 0)
    assert int(r.timestamp.timestamp() * 1000) == BASE_TS + 17
    assert [(h.key, bytes(h.value)) for h in r.headers] == [("n", b"17")]


def test_min_partitions_splits_ranges_without_gaps_or_overlaps(spark, kbroker, orders):
    df = reader(spark, kbroker.bootstrap, subscribe=orders, minPartitions="7")
    assert df.rdd.getNumPartitions() == 6  # Spark's calculator: round(1000 / (3000/7)) = 2 per partition
    rows = df.select("partition", "offset").collect()
    assert len(rows) == 3 * N_PER_PARTITION
    assert len({(r.partition, r.offset) for r in rows}) == 3 * N_PER_PARTITION


def test_starting_and_ending_offsets_as_json_and_by_timestamp(spark, kbroker, orders):
    df = reader(spark, kbroker.bootstrap, subscribe=orders,
                startingOffsets=json.dumps({orders: {"0": 10, "1": -2, "2": -2}}),
                endingOffsets=json.dumps({orders: {"0": 20, "1": -1, "2": 5}}))
    counts = {r.partition: (r.n, r.lo, r.hi) for r in df.groupBy("partition").agg(
        F.count("*").alias("n"), F.min("offset").alias("lo"), F.max("offset").alias("hi")).collect()}
    assert counts == {0: (10, 10, 19), 1: (N_PER_PARTITION, 0, N_PER_PARTITION - 1), 2: (5, 0, 4)}

    by_ts = reader(spark, kbroker.bootstrap, assign=json.dumps({orders: [1]}),
                   startingOffsetsByTimestamp=json.dumps({orders: {"1": BASE_TS + 900}}))
    offsets = sorted(r.offset for r in by_ts.select("offset").collect())
    assert offsets == list(range(900, N_PER_PARTITION))


def test_invalid_options_fail_with_spark_messages(spark, kbroker, orders):
    with pytest.raises(Exception, match="Only one of the following options"):
        reader(spark, kbroker.bootstrap, subscribe=orders, assign=json.dumps({orders: [0]})).collect()
    with pytest.raises(Exception, match="can't be latest for batch queries"):
        reader(spark, kbroker.bootstrap, subscribe=orders, startingOffsets="latest").collect()
    with pytest.raises(Exception, match="kafka.bootstrap.servers"):
        spark.read.format("sharebroker").option("subscribe", orders).load().collect()


def test_fail_on_data_loss(spark, kbroker, tmp_path):
    create(kbroker.bootstrap, ("trimmed", 1))
    produce(kbroker.bootstrap, "trimmed", 1, 200)
    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})
    (fut,) = admin.delete_records([TopicPartition("trimmed", 0, 120)]).values()
    fut.result(timeout=15)
    from_zero = json.dumps({"trimmed": {"0": 0}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        reader(spark, kbroker.bootstrap, subscribe="trimmed", startingOffsets=from_zero).collect()
    rows = reader(spark, kbroker.bootstrap, subscribe="trimmed", startingOffsets=from_zero,
                  failOnDataLoss="false").select("offset").collect()
    assert sorted(r.offset for r in rows) == list(range(120, 200))


def _stream(spark, bootstrap: str, topic: str, out: Path, checkpoint: Path, **trigger):
    return (spark.readStream.format("sharebroker").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "600")
            .load().selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
            .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
            .trigger(**trigger).start())


def test_streaming_into_parquet_is_exactly_once_across_a_restart(spark, kbroker, tmp_path):
    create(kbroker.bootstrap, ("events", 2))
    produce(kbroker.bootstrap, "events", 2, 1500)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    # First run: a processing-time trigger, stopped in the middle (after two micro-batches).
    q = _stream(spark, kbroker.bootstrap, "events", out, checkpoint, processingTime="200 milliseconds")
    wait_for(lambda: q.lastProgress is not None and q.lastProgress["batchId"] >= 1, timeout=60,
             message="two micro-batches")
    q.stop()
    first = spark.read.parquet(str(out)).count()
    assert 0 < first < 3000 and first % 600 == 0  # maxOffsetsPerTrigger holds: whole batches of 600

    # More records arrive while it is down; the restart resumes from the checkpoint.
    produce(kbroker.bootstrap, "events", 2, 500, first=1500)
    q = _stream(spark, kbroker.bootstrap, "events", out, checkpoint, availableNow=True)
    q.awaitTermination(120)
    assert q.exception() is None
    rows = spark.read.parquet(str(out)).collect()
    assert len(rows) == 4000
    assert {(r.partition, r.offset) for r in rows} == {(p, o) for p in range(2) for o in range(2000)}
    assert all(r.value == f"{r.partition}-{r.offset}" for r in rows)
    assert all(p["numInputRows"] <= 600 for p in q.recentProgress)


def _consume_all(bootstrap: str, topic: str, expected: int) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got: list = []
    deadline = time.monotonic() + 30
    while len(got) < expected and time.monotonic() < deadline:
        for m in c.consume(1000, timeout=0.5):
            assert m.error() is None, m.error()
            got.append(m)
    c.close()
    return got


def test_batch_sink_writes_topic_key_value_headers_and_partition(spark, kbroker):
    create(kbroker.bootstrap, ("sink-a", 3), ("sink-b", 1))
    rows = [(("sink-a" if i % 2 else "sink-b"), f"k{i}", f"v{i}".encode(), (i % 3) if i % 2 else 0,
             [("i", str(i).encode())]) for i in range(400)]
    df = spark.createDataFrame(rows, "topic string, key string, value binary, partition int, "
                                     "headers array<struct<key: string, value: binary>>")
    df.write.mode("append").format("sharebroker").option("kafka.bootstrap.servers", kbroker.bootstrap).save()
    a = _consume_all(kbroker.bootstrap, "sink-a", 200)
    b = _consume_all(kbroker.bootstrap, "sink-b", 200)
    assert (len(a), len(b)) == (200, 200)
    for m in a:
        i = int(m.key().decode()[1:])
        assert (i % 2, m.value(), m.partition(), m.headers()) == (1, f"v{i}".encode(), i % 3, [("i", str(i).encode())])
    assert sorted(int(m.key().decode()[1:]) for m in b) == list(range(0, 400, 2))

    # The topic option overrides the column, as in Spark's Kafka sink.
    df.select("key", "value").write.mode("append").format("sharebroker") \
        .option("kafka.bootstrap.servers", kbroker.bootstrap).option("topic", "sink-b").save()
    assert len(_consume_all(kbroker.bootstrap, "sink-b", 600)) == 600


def test_sink_fails_the_job_on_delivery_errors_and_bad_schemas(spark, kbroker):
    create(kbroker.bootstrap, ("one-partition", 1))
    df = spark.createDataFrame([("x", 5)], "value string, partition int")
    with pytest.raises(Exception, match="not delivered"):
        df.write.mode("append").format("sharebroker").option("kafka.bootstrap.servers", kbroker.bootstrap) \
            .option("topic", "one-partition").save()
    with pytest.raises(Exception, match="topic option required"):
        df.write.mode("append").format("sharebroker").option("kafka.bootstrap.servers", kbroker.bootstrap).save()
    with pytest.raises(Exception, match="value"):
        spark.createDataFrame([(1,)], "key int").write.mode("append").format("sharebroker") \
            .option("kafka.bootstrap.servers", kbroker.bootstrap).option("topic", "one-partition").save()


def test_streaming_pipeline_topic_to_topic(spark, kbroker, orders, tmp_path):
    q = (spark.readStream.format("sharebroker").option("kafka.bootstrap.servers", kbroker.bootstrap)
         .option("subscribe", orders).option("startingOffsets", "earliest").load()
         .selectExpr("key", "upper(CAST(value AS STRING)) AS value")
         .writeStream.format("sharebroker").option("kafka.bootstrap.servers", kbroker.bootstrap)
         .option("topic", "orders-upper").option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    got = _consume_all(kbroker.bootstrap, "orders-upper", 3 * N_PER_PARTITION)
    assert sorted(m.value() for m in got) == sorted(f"{p}-{i}".upper().encode() for p in range(3)
                                                    for i in range(N_PER_PARTITION))
