"""Disk faults against the real broker: a full file system (a small tmpfs as the data directory)
answers KAFKA_STORAGE_ERROR per partition and recovers once space is freed; a corrupt segment in
the middle of a partition is reported once (file and position) while the other partitions keep
serving; failed background work is one structured log line.

The full-disk tests mount a 4 MiB tmpfs (root only) and skip with the reason when that is not
permitted. The broker's own log file stays outside the tmpfs."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.integration import rawkafka as rk
from tests.integration.clients import create_topic, producer_conf
from sharebroker.testing import BrokerProcess, wait_for

pytestmark = pytest.mark.needs_own_broker("fills and corrupts the disks of brokers of its own")

KAFKA_STORAGE_ERROR = 56
CORRUPT_MESSAGE = 2
NOT_COORDINATOR = 16


# ---------------------------------------------------------------------------------------------
# A small file system that can be filled and freed


@contextlib.contextmanager
def small_disk(where: Path, size: str = "4m") -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for a full-disk test (needs root): {r.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(disk: Path) -> Path:
    """Write a filler file until the file system is full (down to the last free page)."""
    filler = disk / f"filler-{uuid.uuid4().hex[:6]}"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for chunk in (1 << 16, 1 << 12, 1 << 9):
            data = b"\0" * chunk
            while True:
                try:
                    os.write(fd, data)
                except OSError:
                    break
    finally:
        os.close(fd)
    return filler


@pytest.fixture
def full_disk_broker(tmp_path: Path) -> Iterator[tuple[BrokerProcess, Path]]:
    with small_disk(tmp_path / "disk") as disk:
        # data dir = the mount point; the broker log goes beside it (tmp_path/disk-broker.log)
        broker = BrokerProcess(disk, {"offsets.topic.num.partitions": "1"})
        try:
            broker.start()
            yield broker, disk
        finally:
            broker.kill()


def records_of_size(size: int, tag: str = "") -> bytes:
    return rk.encode_batch([rk.Rec(tag.encode() + os.urandom(max(size - len(tag), 1)))])


def log_events(broker: BrokerProcess) -> list[dict[str, Any]]:
    out = []
    for line in broker.log_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            out.append({"event": "<not json>", "line": line})
    return out


def assert_log_is_structured(broker: BrokerProcess) -> None:
    text = broker.log_text()
    assert "Traceback" not in text, text[-3000:]
    plain = [e["line"] for e in log_events(broker) if e["event"] == "<not json>"]
    assert not plain, f"unstructured lines in the broker log: {plain[:5]}"


def check_partition(raw: rk.RawClient, topic: str, expected_values: list[bytes]) -> None:
    batches = rk.fetch_all_batches(raw, topic, 0)
    assert all(b.crc_ok for b in batches)
    assert [b.base_offset for b in batches] == list(range(len(batches)))
    assert [r.value for r in rk.records_of(batches)] == expected_values


def offset_commit_request(group: str, topic: str, offset: int, version: int = 8) -> Any:
    cls = rk.req_cls(8, version)
    tcls = rk._nested(cls, "topics")
    pcls = rk._nested(tcls, "partitions")
    part = pcls(**rk._fit(pcls, {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
                                 "committed_metadata": ""}))
    return cls(**rk._fit(cls, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                               "group_instance_id": None, "retention_time_ms": -1,
                               "topics": (tcls(name=topic, partitions=(part,)),)}))


# ---------------------------------------------------------------------------------------------
# Full disk: Produce


def test_full_disk_produce_answers_storage_error_keeps_connection_and_recovers(full_disk_broker, topic_name):
    broker, disk = full_disk_broker
    create_topic(broker.bootstrap, topic_name)
    first = records_of_size(200, "first")
    big = records_of_size(20_000, "big")
    segment = disk / f"{topic_name}-0" / "00000000000000000000.log"
    with rk.RawClient(broker.bootstrap) as raw:
        r = rk.produce(raw, topic_name, 0, first)
        assert (int(r.error_code), r.base_offset) == (0, 0), r
        good_size = segment.stat().st_size
        filler = fill(disk)
        try:
            # The write starts in the segment's last page and runs out of space part-way.
            for _ in range(3):
                r = rk.produce(raw, topic_name, 0, big)
                assert int(r.error_code) == KAFKA_STORAGE_ERROR, r
                assert r.base_offset == -1 and r.error_message, r
            # Nothing partial stays in the segment; reads and metadata keep working, same connection.
            assert segment.stat().st_size == good_size
            md = raw.request(rk.metadata_request([topic_name]))
            assert int(md.topics[0].error_code) == 0 and len(md.topics[0].partitions) == 1
            p = rk.fetch(raw, topic_name, 0, 0)
            assert int(p.error_code) == 0 and p.high_watermark == 1
            check_partition(raw, topic_name, [rk.parse_batches(first)[0].records()[0].value])
        finally:
            filler.unlink()
        r = rk.produce(raw, topic_name, 0, big)
        assert (int(r.error_code), r.base_offset) == (0, 1), r
        check_partition(raw, topic_name, [rk.parse_batches(b)[0].records()[0].value for b in (first, big)])
    failures = [e for e in log_events(broker) if e.get("error") == "kafka_storage_error"]
    assert failures and all(e.get("topic") == topic_name for e in failures), failures
    assert "No space left on device" in failures[0].get("message", "")
    assert_log_is_structured(broker)
    assert broker.stop() == 0


def test_full_disk_real_producer_keeps_its_connection_and_delivers_after_space_is_freed(full_disk_broker, topic_name):
    broker, disk = full_disk_broker
    create_topic(broker.bootstrap, topic_name)
    p = Producer(producer_conf(broker.bootstrap, **{"message.timeout.ms": 60000, "linger.ms": 0,
                                                    "retry.backoff.ms": 50}))
    reports: list[Any] = []
    p.produce(topic_name, value=b"warm-up", on_delivery=lambda err, msg: reports.append(err or msg))
    assert p.flush(15) == 0 and reports and not isinstance(reports[0], Exception)

    def opened() -> int:
        return sum(1 for e in log_events(broker) if e["event"] == "connection opened")

    def refused() -> int:
        return sum(1 for e in log_events(broker) if e.get("error") == "kafka_storage_error")

    connections = opened()
    filler = fill(disk)
    try:
        p.produce(topic_name, value=os.urandom(30_000), on_delivery=lambda err, msg: reports.append(err or msg))
        p.poll(0)
        # The producer is refused and retries (on the same connection) while the disk is full.
        wait_for(lambda: (p.poll(0.05), refused() >= 1)[1], timeout=20, message="a refused produce")
        assert len(reports) == 1
    finally:
        filler.unlink()
    assert p.flush(30) == 0
    assert len(reports) == 2 and reports[1].error() is None and reports[1].offset() == 1, reports
    assert opened() == connections, "the broker closed a connection over the full disk"
    assert_log_is_structured(broker)


def test_full_disk_fsync_failure_is_a_partition_error_not_a_closed_connection(tmp_path, topic_name):
    """With --fsync the response waits for the flush; a flush that fails (the index write finds no
    space, after the batch itself fitted in the segment's last page) answers KAFKA_STORAGE_ERROR."""
    with small_disk(tmp_path / "disk") as disk:
        broker = BrokerProcess(disk, {"offsets.topic.num.partitions": "1"}, fsync=True)
        try:
            broker.start()
            create_topic(broker.bootstrap, topic_name)
            with rk.RawClient(broker.bootstrap) as raw:
                # 4,200 bytes: no index entry yet (the first batch), and the second page has room.
                r = rk.produce(raw, topic_name, 0, records_of_size(4_200 - 70))
                assert int(r.error_code) == 0, r
                filler = fill(disk)
                try:
                    # This batch fits in the segment's last page but adds the first index entry,
                    # whose write at the flush needs a new page.
                    r = rk.produce(raw, topic_name, 0, records_of_size(500))
                    assert int(r.error_code) == KAFKA_STORAGE_ERROR, r
                    md = raw.request(rk.metadata_request([topic_name]))  # the connection still serves
                    assert int(md.topics[0].error_code) == 0
                finally:
                    filler.unlink()
                r = rk.produce(raw, topic_name, 0, records_of_size(500))
                assert int(r.error_code) == 0, r
                batches = rk.fetch_all_batches(raw, topic_name, 0)
                assert all(b.crc_ok for b in batches) and [b.base_offset for b in batches] == [0, 1, 2]
            assert_log_is_structured(broker)
        finally:
            broker.kill()


# ---------------------------------------------------------------------------------------------
# Full disk: internal topics


def test_full_disk_offset_commit_answers_an_error_and_keeps_the_connection(full_disk_broker, topic_name):
    broker, disk = full_disk_broker
    create_topic(broker.bootstrap, topic_name)
    group = f"g-{uuid.uuid4().hex[:8]}"
    with rk.RawClient(broker.bootstrap) as raw:
        r = raw.request(offset_commit_request(group, topic_name, 1))
        assert int(r.topics[0].partitions[0].error_code) == 0, r
        # Fill the space, leaving no page for the next __consumer_offsets write.
        offsets_segment = disk / "__consumer_offsets-0" / "00000000000000000000.log"
        filler = fill(disk)
        try:
            # The first commits may still fit in the segment's last page; at most a few do.
            codes = []
            for i in range(2, 60):
                r = raw.request(offset_commit_request(group, topic_name, i))
                codes.append(int(r.topics[0].partitions[0].error_code))
                if codes[-1]:
                    break
            assert codes[-1] == NOT_COORDINATOR, codes
            size = offsets_segment.stat().st_size
            md = raw.request(rk.metadata_request([topic_name]))
            assert int(md.topics[0].error_code) == 0
            assert offsets_segment.stat().st_size == size
        finally:
            filler.unlink()
        r = raw.request(offset_commit_request(group, topic_name, 100))
        assert int(r.topics[0].partitions[0].error_code) == 0, r
    assert_log_is_structured(broker)


# ---------------------------------------------------------------------------------------------
# A corrupt segment in the middle of a partition


def _fetch_two(raw: rk.RawClient, topic: str) -> Any:
    cls = rk.req_cls(1, 12)
    tcls = rk._nested(cls, "topics")
    pcls = rk._nested(tcls, "partitions")
    parts = tuple(pcls(**rk._fit(pcls, {"partition": i, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                                        "current_leader_epoch": -1, "last_fetched_epoch": -1,
                                        "log_start_offset": -1})) for i in (0, 1))
    req = cls(**rk._fit(cls, {"max_wait": datetime.timedelta(milliseconds=0), "min_bytes": 1, "max_bytes": 4 << 20,
                              "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                              "topics": (tcls(**rk._fit(tcls, {"topic": topic, "partitions": parts})),),
                              "forgotten_topics_data": (), "rack_id": "", "replica_id": -1}))
    resp = raw.request(req)
    assert int(resp.error_code) == 0, resp
    return {p.partition_index: p for p in resp.responses[0].partitions}


def test_corrupt_segment_in_the_middle_is_reported_once_and_other_partitions_keep_serving(make_broker, topic_name):
    broker = make_broker({"log.segment.bytes": str(1 << 20)})
    create_topic(broker.bootstrap, topic_name, partitions=2)
    values = {0: [], 1: []}
    with rk.RawClient(broker.bootstrap) as raw:
        for i in range(26):  # ~1.3 MB: partition 0 rolls once
            for part in (0, 1):
                batch = records_of_size(50_000, f"p{part}-{i}-")
                values[part].append(rk.parse_batches(batch)[0].records()[0].value)
                assert int(rk.produce(raw, topic_name, part, batch).error_code) == 0
    assert broker.stop() == 0
    part_dir = broker.data_dir / f"{topic_name}-0"
    segments = sorted(part_dir.glob("*.log"))
    assert len(segments) >= 2
    # Flip the magic byte of the third batch of the first (older) segment.
    data = bytearray(segments[0].read_bytes())
    batches = rk.parse_batches(bytes(data))
    position = sum(len(b.raw) for b in batches[:2])
    data[position + 16] ^= 0x07
    segments[0].write_bytes(bytes(data))
    broker.start()
    with rk.RawClient(broker.bootstrap) as raw:
        for _ in range(3):
            got = _fetch_two(raw, topic_name)
            assert int(got[0].error_code) == CORRUPT_MESSAGE, got[0]
            assert int(got[1].error_code) == 0
            assert [r.value for r in rk.records_of(rk.parse_batches(got[1].records))][:1] == values[1][:1]
        # Past the damage, partition 0 serves; partition 1 in full.
        p = rk.fetch(raw, topic_name, 0, 3)
        assert int(p.error_code) == 0 and rk.parse_batches(p.records)[0].base_offset == 3
        assert [r.value for r in rk.records_of(rk.fetch_all_batches(raw, topic_name, 1))] == values[1]
    lines = [e for e in log_events(broker) if e["event"] == "corrupt log segment"]
    assert len(lines) == 1, lines
    assert lines[0]["file"] == str(segments[0]) and lines[0]["position"] == position, lines[0]
    assert lines[0]["topic"] == topic_name and lines[0]["partition"] == 0
    assert_log_is_structured(broker)


# ---------------------------------------------------------------------------------------------
# Background failures reach the log as one structured line


def test_a_failed_background_task_is_one_structured_log_line(tmp_path):
    """run() installs the loop's exception handler: a task nobody awaits that fails is logged as
    one JSON line (not asyncio's multi-line "Task exception was never retrieved")."""
    ready = tmp_path / "ready"
    script = textwrap.dedent(f"""
        import asyncio, gc, os, signal
        from pathlib import Path
        from sharebroker.broker.structured_log import configure_logging
        from sharebroker.broker.server import run
        from sharebroker.config import BrokerConfig

        configure_logging("json")
        config = BrokerConfig.load(None, {{}}, {{"listeners": "PLAINTEXT://127.0.0.1:0",
                                                "log.dirs": {str(tmp_path / "data")!r}}})
        ready = Path({str(ready)!r})

        async def boom():
            raise RuntimeError("boom in the background")

        async def fire_and_forget():
            while not ready.exists():
                await asyncio.sleep(0.01)
            task = asyncio.get_running_loop().create_task(boom())
            while not task.done():
                await asyncio.sleep(0)
            del task
            gc.collect()
            os.kill(os.getpid(), signal.SIGTERM)

        async def main():
            helper = asyncio.ensure_future(fire_and_forget())
            await run(config, ready_file=ready)
            await helper

        asyncio.run(main())
    """)
    r = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stderr.splitlines()
    plain = [line for line in lines if not line.startswith("{")]
    assert not plain, plain
    events = [json.loads(line) for line in lines]
    failed = [e for e in events if "boom in the background" in json.dumps(e)]
    assert len(failed) == 1, failed
    assert failed[0]["event"] == "unhandled error in background task" and failed[0]["level"] == "error"
    assert failed[0]["error"] == "RuntimeError: boom in the background"


def test_full_disk_create_topics_answers_storage_error_and_leaves_nothing_half_created(full_disk_broker, topic_name):
    broker, disk = full_disk_broker
    filler = fill(disk)
    with rk.RawClient(broker.bootstrap) as client:
        (result,) = rk.create_topics(client, (topic_name, 3))
        assert int(result.error_code) == KAFKA_STORAGE_ERROR
        assert result.error_message.startswith(f"Error while creating log for {topic_name}-0 in dir {disk} (No space "
                                               f"left on device"), result.error_message
        assert not [p for p in disk.iterdir() if p.name.startswith(topic_name)]
        assert topic_name not in json.loads((disk / "sharebroker-metadata.json").read_text())["topics"]
        meta = client.request(rk.metadata_request([topic_name]))
        assert [int(t.error_code) for t in meta.topics] == [3]  # UNKNOWN_TOPIC_OR_PARTITION
        filler.unlink()
        (result,) = rk.create_topics(client, (topic_name, 3))
        assert (int(result.error_code), result.error_message) == (0, None)
    assert sorted(p.name for p in disk.iterdir() if p.name.startswith(topic_name)) == [f"{topic_name}-{i}"
                                                                                        for i in range(3)]
