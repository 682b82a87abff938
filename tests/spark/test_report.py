"""`run_report` on a data directory with a known history: a share group that accepted, rejected
(archived) and released records, and a classic group with committed offsets."""

from __future__ import annotations

import time

import pyarrow.parquet as pq
import pytest
from confluent_kafka import AcknowledgeType, Consumer, TopicPartition

from pipeline.report import run_report
from tests.integration.clients import create_topic
from tests.integration.share_helpers import FAST_SHARE_BROKER, new_group, produce_values, set_earliest, share_consumer
from tests.support.broker_process import BrokerProcess

pytestmark = pytest.mark.spark
PER_PARTITION = 100
# Partition 1 offsets the share group rejects. They stay above the start offset (60), which is
# where __share_group_state keeps archived ranges: Kafka's coordinator, like this broker's, drops
# the ranges below the start offset from every record it writes.
POISON = {80, 85}


def poll_acks(consumer, decide, until, deadline_s: float = 30.0) -> dict[tuple[int, int], int]:
    """Poll, acknowledging each record with decide(partition, offset), until until(seen) holds;
    returns the highest delivery count seen per (partition, offset)."""
    seen: dict[tuple[int, int], int] = {}
    deadline = time.monotonic() + deadline_s
    while not until(seen):
        assert time.monotonic() < deadline, f"only {len(seen)} records seen"
        for m in consumer.poll(0.5):
            assert m.error() is None, m.error()
            k = (m.partition(), m.offset())
            seen[k] = max(seen.get(k, 0), m.delivery_count())
            consumer.acknowledge(m, decide(*k))
        consumer.commit_sync()
    return seen


def test_report_on_a_known_history(spark, tmp_path):
    data = tmp_path / "data"
    broker = BrokerProcess(data, FAST_SHARE_BROKER).start()
    group = new_group("report")
    try:
        create_topic(broker.bootstrap, "work", 2)
        set_earliest(broker.bootstrap, group)
        for p in range(2):
            produce_values(broker.bootstrap, "work", [f"{p}-{i}".encode() for i in range(PER_PARTITION)], partition=p)

        c = share_consumer(broker.bootstrap, group, ["work"], explicit=True)

        def first(p: int, o: int) -> AcknowledgeType:
            if p == 0 or o < 60:
                return AcknowledgeType.ACCEPT
            return AcknowledgeType.REJECT if o in POISON else AcknowledgeType.RELEASE

        counts = poll_acks(c, first, lambda s: len(s) == 2 * PER_PARTITION)

        # The second round releases everything again: its delivery counts stay above the start
        # offset, so __share_group_state keeps them (a range acknowledged in the write that moves
        # the start offset past it is not recorded with its final count).
        def second(p: int, o: int) -> AcknowledgeType:
            return AcknowledgeType.RELEASE

        again = poll_acks(c, second, lambda s: all((1, o) in s for o in range(60, PER_PARTITION) if o not in POISON))
        c.close()
        for k, n in again.items():
            counts[k] = max(counts[k], n)

        classic = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "readers"})
        classic.commit(offsets=[TopicPartition("work", 0, 42), TopicPartition("work", 1, 10)], asynchronous=False)
        classic.close()
    finally:
        broker.stop()

    out = tmp_path / "report"
    s = run_report(spark, data, out)

    assert s.records == {("work", 0): PER_PARTITION, ("work", 1): PER_PARTITION}
    assert s.log_end == {("work", 0): PER_PARTITION, ("work", 1): PER_PARTITION}
    assert s.share_start == {(group, "work", 0): PER_PARTITION, (group, "work", 1): 60}
    assert s.share_lag == {(group, "work", 0): 0, (group, "work", 1): 40}
    assert s.classic_lag == {("readers", "work", 0): 58, ("readers", "work", 1): 90}
    assert s.archived == [(group, "work", 1, o, f"1-{o}") for o in sorted(POISON)]
    expected_hist: dict[int, int] = {}
    for n in counts.values():
        expected_hist[n] = expected_hist.get(n, 0) + 1
    assert s.delivery_counts == {group: dict(sorted(expected_hist.items()))}
    assert expected_hist.get(2, 0) >= 38  # partition 1's offsets 60-99 but the poison went round twice
    assert sum(n for series in s.throughput.values() for _, n in series) == 2 * PER_PARTITION

    records = pq.read_table(out / "records")
    assert records.num_rows == 2 * PER_PARTITION
    assert pq.read_table(out / "share_state").num_rows > 0
    assert pq.read_table(out / "consumer_offsets").num_rows == 2
    report = (out / "report.md").read_text()
    assert "| " + group + " | work | 1 | 60 | 40 |" in report
    assert "| " + group + " | work | 1 | 85 | 1-85 |" in report
    for chart in ("throughput.png", "delivery_counts.png", "lag.png"):
        assert (out / chart).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
