"""The `sharegroup` streaming source: records read through a share group, ACCEPTed only after
Spark committed their micro-batch; a task failure mid-batch releases the batch, the records come
back (replayed from the spool and delivered again by the broker) and de-duplicate by
(topic, partition, offset)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from pyspark.errors import StreamingQueryException

from tests.integration.clients import create_topic
from tests.integration.share_helpers import FAST_SHARE_BROKER, new_group, produce_values, set_earliest
from tests.integration.test_share_admin import describe_offsets
from tests.brokers import module_broker
from sharebroker.testing import unique_name
from sharebroker.testing.plugin import Broker

pytestmark = pytest.mark.spark
RECORDS = 600


@pytest.fixture(scope="module")
def sbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from module_broker(tmp_path_factory, "spark-share", FAST_SHARE_BROKER)


def start_offsets(bootstrap: str, group: str) -> dict[int, int]:
    g = describe_offsets(bootstrap, group)
    return {p.partition_index: p.start_offset for t in g.topics for p in t.partitions}


def stream(spark, bootstrap: str, group: str, topic: str, checkpoint: Path, sink, **trigger):
    return (spark.readStream.format("sharegroup").option("kafka.bootstrap.servers", bootstrap)
            .option("kafka.group.id", group).option("subscribe", topic)
            .option("checkpointLocation", str(checkpoint)).option("maxRecordsPerTrigger", "100")
            .option("minPartitions", "3").load()
            .writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
            .trigger(**trigger).start())


def test_task_failure_mid_batch_redelivers_and_dedupes(spark, sbroker, tmp_path):
    topic, group = "jobs", new_group()
    create_topic(sbroker.bootstrap, topic, 2)
    set_earliest(sbroker.bootstrap, group)
    # Record batches of 10, so that max.poll.records (maxRecordsPerTrigger) cuts micro-batches of
    # about 100 (it is a soft bound: whole record batches are acquired).
    producer = Producer({"bootstrap.servers": sbroker.bootstrap, "batch.num.messages": 10, "linger.ms": 1})
    for part in range(2):
        produce_values(sbroker.bootstrap, topic, [f"{part}-{i}".encode() for i in range(RECORDS // 2)],
                       partition=part, producer=producer)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    failed_once = tmp_path / "failed-once"

    def sink(df, batch_id: int) -> None:
        if batch_id == 2 and not failed_once.exists():
            failed_once.touch()

            def fail_one_task(index, rows):
                if index == 1:
                    raise RuntimeError("injected task failure")
                return rows
            # Three tasks (minPartitions): the first and last succeed, the middle one fails.
            df.rdd.mapPartitionsWithIndex(fail_one_task).count()
        df.write.mode("append").parquet(str(out / f"batch={batch_id}"))

    q = stream(spark, sbroker.bootstrap, group, topic, checkpoint, sink, processingTime="100 milliseconds")
    with pytest.raises(StreamingQueryException, match="injected task failure"):
        q.awaitTermination(120)
    assert failed_once.exists()
    spool = checkpoint / "sharegroup" / "batch-3.arrow"  # batch 2 of Spark is spool batch 3
    with pa.memory_map(str(spool)) as source:
        spooled = pa.ipc.open_file(source).read_all()
    replayed = set(zip(spooled["partition"].to_pylist(), spooled["offset"].to_pylist()))
    assert replayed  # about 100 (maxRecordsPerTrigger is a soft bound: whole record batches)

    # Restart on the same checkpoint: batch 2 is replayed from the spool, its released records are
    # delivered again by the broker, and the query runs until the queue is empty.
    q = stream(spark, sbroker.bootstrap, group, topic, checkpoint, sink, availableNow=True)
    q.awaitTermination(120)
    assert q.exception() is None
    rows = spark.read.parquet(str(out)).collect()
    keys = [(r.topic, r.partition, r.offset) for r in rows]
    assert len(set(keys)) == RECORDS  # nothing lost
    assert {bytes(r.value).decode() for r in rows} == {f"{p}-{i}" for p in range(2) for i in range(RECORDS // 2)}
    redelivered = [r for r in rows if r.deliveryCount >= 2]
    # The failed batch's records, released and delivered again, and no others.
    assert {(r.partition, r.offset) for r in redelivered} == replayed
    assert len(rows) == RECORDS + len(redelivered)  # the only duplicates are the replayed batch
    # Every record was ACCEPTed once Spark committed it, the last batch at the query's stop.
    assert start_offsets(sbroker.bootstrap, group) == {0: RECORDS // 2, 1: RECORDS // 2}
    assert not list((checkpoint / "sharegroup").glob("batch-*.arrow"))


def test_without_renewal_a_batch_longer_than_the_lock_fails_the_query_clearly(spark, sbroker, tmp_path):
    topic, group = "slow-jobs", new_group()
    create_topic(sbroker.bootstrap, topic, 1)
    set_earliest(sbroker.bootstrap, group, share_record_lock_duration_ms="1000",
                 share_renew_acknowledge_enable="false")
    produce_values(sbroker.bootstrap, topic, [f"job-{i}".encode() for i in range(50)], partition=0)
    done = tmp_path / "done"

    def slow_sink(df, batch_id: int) -> None:
        import time as _time
        df.count()
        deadline = _time.monotonic() + 1.5  # longer than the 1 s lock: the point of the test
        while _time.monotonic() < deadline:
            _time.sleep(0.05)
        done.touch()

    q = stream(spark, sbroker.bootstrap, group, topic, tmp_path / "ck", slow_sink, processingTime="100 milliseconds")
    with pytest.raises(StreamingQueryException) as failure:
        q.awaitTermination(120)
    assert done.exists()
    message = str(failure.value)
    # Which batch, how long it took from acquisition, and the settings that would let it finish.
    assert "acknowledgement of micro-batch 0 of share group" in message, message
    assert "INVALID_RECORD_STATE" in message and "s after its records were acquired" in message, message
    assert "the record lock is 1000 ms (share.record.lock.duration.ms)" in message, message
    assert "share.renew.acknowledge.enable is false" in message, message
    assert "share.renew.acknowledge.enable=true" in message, message


def test_a_batch_longer_than_the_lock_keeps_its_records(spark, sbroker, tmp_path):
    """A 1 s lock and a sink that takes 3 s for the first batch: the source renews the batch's locks,
    so nothing is delivered twice and the group moves past every record."""
    topic, group = "renewed-jobs", new_group()
    create_topic(sbroker.bootstrap, topic, 2)
    set_earliest(sbroker.bootstrap, group, share_record_lock_duration_ms="1000")
    for part in range(2):
        produce_values(sbroker.bootstrap, topic, [f"{part}-{i}".encode() for i in range(50)], partition=part)
    out = tmp_path / "out"

    def slow_sink(df, batch_id: int) -> None:
        import time as _time
        if batch_id == 0:
            _time.sleep(3)  # three lock periods: the point of the test
        df.write.mode("append").parquet(str(out))

    q = stream(spark, sbroker.bootstrap, group, topic, tmp_path / "ck", slow_sink, availableNow=True)
    q.awaitTermination(120)
    assert q.exception() is None
    rows = spark.read.parquet(str(out)).collect()
    assert sorted((r.partition, r.offset) for r in rows) == [(p, o) for p in range(2) for o in range(50)]
    assert {r.deliveryCount for r in rows} == {1}
    assert start_offsets(sbroker.bootstrap, group) == {0: 50, 1: 50}


def test_the_readme_example_pipeline(spark, sbroker, tmp_path, monkeypatch):
    """pipeline/examples/enrich.py, as the README shows it: share group -> transform -> topic and Parquet."""
    import importlib

    from tests.spark.test_kafka_source_sink import _consume_all

    topic, group = unique_name("orders"), unique_name("enrich")
    create_topic(sbroker.bootstrap, topic, 2)
    set_earliest(sbroker.bootstrap, group)
    for part in range(2):
        produce_values(sbroker.bootstrap, topic, [f"order-{part}-{i}".encode() for i in range(100)], partition=part)
    monkeypatch.setenv("BOOTSTRAP", sbroker.bootstrap)
    monkeypatch.setenv("TOPIC", topic)
    monkeypatch.setenv("GROUP", group)
    monkeypatch.setenv("CHECKPOINT", str(tmp_path / "checkpoint"))
    monkeypatch.setenv("OUT", str(tmp_path / "parquet"))
    monkeypatch.setenv("TRIGGER", "availableNow")
    import sharebroker.pipeline.examples.enrich as example

    importlib.reload(example).main()
    expected = sorted(f"ORDER-{p}-{i}".encode() for p in range(2) for i in range(100))
    assert sorted(m.value() for m in _consume_all(sbroker.bootstrap, f"{topic}-enriched", 200)) == expected
    rows = spark.read.parquet(str(tmp_path / "parquet")).select("value", "deliveryCount").collect()
    assert sorted(r.value.encode() for r in rows) == expected
    assert start_offsets(sbroker.bootstrap, group) == {0: 100, 1: 100}
