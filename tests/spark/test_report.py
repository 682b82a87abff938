"""`run_report` on data directories with a known history: one written by the real broker (a share
group that accepted, rejected and released records, a classic group's commits, then a crash-like
torn tail), and one written by hand with no groups at all."""

from __future__ import annotations

import time
from collections import Counter

import pyarrow.parquet as pq
import pytest
from confluent_kafka import AcknowledgeType, Consumer, TopicPartition

from sharebroker.pipeline.analytics import ARCHIVED
from sharebroker.pipeline.report import run_report
from sharebroker.protocol.record_batch import GZIP, LZ4, ZSTD, encode_batch
from tests.integration.clients import create_topic
from tests.integration.share_helpers import FAST_SHARE_BROKER, new_group, produce_values, set_earliest, share_consumer
from sharebroker.testing import BrokerProcess

pytestmark = [pytest.mark.spark, pytest.mark.needs_own_broker("reads the data directory of a broker of its own")]
PER_PARTITION = 150
KEEP = 90  # partition 1: offsets below are accepted, the rest released (the start offset stays here)
# Partition 1 offsets the share group rejects. They lie above the start offset, where
# __share_group_state keeps archived ranges: the coordinator (Kafka's too) drops every range below
# the start offset from each record it writes, so a record rejected by the write that moves the
# start offset past it is never recorded as archived.
POISON = (100, 117)
PNG = b"\x89PNG\r\n\x1a\n"


def poll_acks(consumer, decide, until, deadline_s: float = 30.0) -> dict[tuple[int, int], int]:
    """Poll, acknowledging each record with decide(partition, offset) and committing, until
    until(seen) holds; returns the highest delivery count seen per (partition, offset)."""
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


def test_report_on_a_broker_data_dir_with_a_known_history(spark, tmp_path):
    data = tmp_path / "data"
    broker = BrokerProcess(data, FAST_SHARE_BROKER).start()
    group = new_group("report")
    t0 = int(time.time() * 1000)
    try:
        create_topic(broker.bootstrap, "work", 2)
        set_earliest(broker.bootstrap, group)
        # Partition 0 compressed by the producer: the report decodes what the broker stored verbatim.
        produce_values(broker.bootstrap, "work", [f"0-{i}".encode() for i in range(PER_PARTITION)], partition=0,
                       **{"compression.type": "lz4"})
        produce_values(broker.bootstrap, "work", [f"1-{i}".encode() for i in range(PER_PARTITION)], partition=1)
        t1 = int(time.time() * 1000)

        c = share_consumer(broker.bootstrap, group, ["work"], explicit=True)

        def first(p: int, o: int) -> AcknowledgeType:
            if p == 0 or o < KEEP:
                return AcknowledgeType.ACCEPT
            return AcknowledgeType.REJECT if o in POISON else AcknowledgeType.RELEASE

        counts = poll_acks(c, first, lambda s: len(s) == 2 * PER_PARTITION)
        released = [o for o in range(KEEP, PER_PARTITION) if o not in POISON]
        # Every released record comes back and is released once more: a delivery count of at
        # least 2 each, recorded above the start offset.
        again = poll_acks(c, lambda p, o: AcknowledgeType.RELEASE,
                          lambda s: all(s.get((1, o), 0) >= 2 for o in released))
        c.close()
        for k, n in again.items():
            counts[k] = max(counts[k], n)

        classic = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "readers"})
        classic.commit(offsets=[TopicPartition("work", 0, 42), TopicPartition("work", 1, 10)], asynchronous=False)
        classic.close()
    finally:
        assert broker.stop() == 0
    # A crash in the middle of an append: the first 30 bytes of the next batch of work-0.
    (active,) = sorted((data / "work-0").glob("*.log"))[-1:]
    with active.open("ab") as f:
        f.write(bytes(encode_batch([(None, b"lost")], timestamp_ms=t1, base_offset=PER_PARTITION))[:30])

    out = tmp_path / "report"
    steps: list[str] = []
    s = run_report(spark, data, out, progress=steps.append)

    work0, work1 = (group, "work", 0), (group, "work", 1)
    assert s.records == {("work", 0): PER_PARTITION, ("work", 1): PER_PARTITION}
    assert s.log_start == {("work", 0): 0, ("work", 1): 0}
    assert s.log_end == {("work", 0): PER_PARTITION, ("work", 1): PER_PARTITION}
    assert s.torn_segments == [(str(active), "truncated batch header (30 bytes)")] and s.crc_errors == {}
    assert s.share_start == {work0: PER_PARTITION, work1: KEEP}
    assert s.share_lag == {work0: 0, work1: PER_PARTITION - KEEP}
    assert s.share_remaining == {work0: 0, work1: PER_PARTITION - KEEP - len(POISON)}
    assert s.share_states[work1] == {"available": len(released), "acknowledged": 0, "archived": len(POISON),
                                     "unrecorded": 0}
    assert s.archived_total == len(POISON)
    assert [(a.group, a.topic, a.partition, a.offset, a.delivery_count, a.preview) for a in s.archived] == \
        [(group, "work", 1, o, 1, f"1-{o}") for o in POISON]
    assert all(t0 <= a.timestamp <= t1 for a in s.archived)
    # Accepted and rejected records were delivered once; each released one at least twice, and
    # the state's highest count per record is the highest the consumer saw.
    hist = s.delivery_counts[group]
    assert list(s.delivery_counts) == [group] and hist[1] == 2 * PER_PARTITION - len(released)
    assert sum(n for c_, n in hist.items() if c_ >= 2) == len(released)
    assert hist == dict(sorted(Counter(counts.values()).items()))
    assert s.classic_committed == {("readers", "work", 0): 42, ("readers", "work", 1): 10}
    assert s.classic_lag == {("readers", "work", 0): PER_PARTITION - 42, ("readers", "work", 1): PER_PARTITION - 10}
    assert s.throughput_bucket_s == 1
    assert {t: sum(n for _, n in series) for t, series in s.throughput.items()} == {"work": 2 * PER_PARTITION}
    assert all(t0 // 1000 <= b <= t1 // 1000 for b, _ in s.throughput["work"])

    records = pq.read_table(out / "records").to_pylist()
    assert sorted((r["partition"], r["offset"], r["value"]) for r in records) == \
        [(p, i, f"{p}-{i}".encode()) for p in range(2) for i in range(PER_PARTITION)]
    assert {(r["partition"], r["compression"]) for r in records} == {(0, LZ4), (1, 0)}
    state = pq.read_table(out / "share_state").to_pylist()
    assert {(r["group"], r["topic"]) for r in state} == {(group, "work")}
    assert max(r["start_offset"] for r in state if r["partition"] == 1) == KEEP
    ranges = pq.read_table(out / "share_state_ranges").to_pylist()
    assert sorted((r["first_offset"], r["last_offset"]) for r in ranges if r["delivery_state"] == ARCHIVED) == \
        [(o, o) for o in POISON]
    commits = pq.read_table(out / "consumer_offsets").to_pylist()
    assert sorted((r["group"], r["partition"], r["offset"]) for r in commits) == [("readers", 0, 42), ("readers", 1, 10)]
    archived = pq.read_table(out / "archived").to_pylist()
    assert sorted((r["offset"], r["value"]) for r in archived) == [(o, f"1-{o}".encode()) for o in POISON]
    segments = pq.read_table(out / "segments").to_pylist()
    assert sum(r["records"] for r in segments if r["topic"] == "work") == 2 * PER_PARTITION
    assert [r["torn_bytes"] for r in segments if r["torn"]] == [30]

    report = (out / "report.md").read_text()
    assert f"| {group} | work | 1 | {KEEP} | {PER_PARTITION - KEEP} | {PER_PARTITION - KEEP - len(POISON)} | " \
           f"{len(released)} | 0 | {len(POISON)} | 0 |" in report
    for o in POISON:
        assert f"| {group} | work | 1 | {o} | 1 | " in report and f"| `1-{o}` |" in report
    assert f"| readers | work | 0 | 42 | {PER_PARTITION - 42} |" in report
    assert f"| {group} | 1 | {hist[1]} |" in report and "truncated batch header (30 bytes)" in report
    for chart in ("throughput.png", "delivery_counts.png", "lag.png"):
        png = (out / chart).read_bytes()
        assert png[:8] == PNG and len(png) > 5000
    assert steps and any("records/" in step for step in steps)


def test_report_on_a_hand_written_dir_without_groups(spark, tmp_path):
    """No share group, no classic group: empty tables and a report that says so. A topic named
    like a number stays a string, and records spread over hours are bucketed per minute."""
    data = tmp_path / "data"
    seg = data / "2024-0" / f"{0:020d}.log"
    seg.parent.mkdir(parents=True)
    hour = 3_600_000
    base = 1_700_000_000_000
    batches = [encode_batch([(b"k", bytes(range(256)), (), base + i * 1000) for i in range(3)], timestamp_ms=base,
                            compression=GZIP),
               encode_batch([(None, b"late")], timestamp_ms=base + 2 * hour, base_offset=3, compression=ZSTD)]
    seg.write_bytes(b"".join(bytes(b) for b in batches))
    (data / "__consumer_offsets-0").mkdir()
    (data / "__consumer_offsets-0" / f"{0:020d}.log").write_bytes(b"")

    out = tmp_path / "report"
    s = run_report(spark, data, out)
    assert s.records == {("2024", 0): 4} and s.log_end == {("2024", 0): 4} and s.segments == 2
    assert s.share_lag == {} and s.classic_lag == {} and s.delivery_counts == {} and s.archived == []
    assert s.throughput_bucket_s == 60
    assert s.throughput == {"2024": [(base // 60_000 * 60, 3), ((base + 2 * hour) // 60_000 * 60, 1)]}
    assert pq.read_table(out / "share_state").num_rows == 0 and pq.read_table(out / "consumer_offsets").num_rows == 0
    values = sorted(r["value"] for r in pq.read_table(out / "records").to_pylist())
    assert values == [bytes(range(256))] * 3 + [b"late"]
    report = (out / "report.md").read_text()
    assert "No share groups." in report and "No committed offsets." in report and "| 2024 | 0 | 4 | 0 | 4 |" in report
    assert all((out / c).read_bytes()[:8] == PNG for c in ("throughput.png", "delivery_counts.png", "lag.png"))
    # The warm-up job (the scan over no segments, beside the state replay) ran and left nothing behind:
    # only the report's own files, the one record file of the one task that read the segment.
    assert s.warm_up_s > 0
    assert sorted(p.relative_to(out).as_posix() for p in (out / "records").rglob("*") if p.is_file()) == \
        ["records/topic=2024/part-00000.parquet"]
    assert sorted(p.name for p in out.iterdir()) == sorted([
        "archived", "classic_lag", "consumer_offsets", "delivery_counts.png", "lag.png", "records", "report.md",
        "segments", "share_lag", "share_state", "share_state_ranges", "throughput", "throughput.png"])


def test_preview_is_printable_and_cut():
    from sharebroker.pipeline.report import PREVIEW_BYTES, preview

    assert preview(None) == "null" and preview(b"ab|c\\`") == "ab|c\\x5c\\x60"
    assert preview(b"\x00\xffA") == "\\x00\\xffA"
    long = preview(b"x" * (PREVIEW_BYTES + 1))
    assert long == "x" * PREVIEW_BYTES + "…"


def test_the_sessions_python_workers_start_without_test_tools(spark):
    """A session from get_session runs its Python workers through the project's daemon, which
    keeps hypothesis (here with the test tools) out of them: kio would import it, 0.3 s per worker."""
    import sys

    import hypothesis  # noqa: F401  # installed, and importable in this process

    assert "hypothesis" in sys.modules and sys.modules["hypothesis"] is not None

    def seen(_: object) -> list[tuple[bool, bool]]:
        import sys

        import sharebroker.protocol.errors  # noqa: F401  # imports kio's types
        return [("hypothesis" in sys.modules, sys.modules.get("hypothesis") is None)]

    got = spark.sparkContext.parallelize(range(2), 2).mapPartitions(seen).collect()
    assert got == [(True, True), (True, True)]
