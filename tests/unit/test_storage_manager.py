"""storage.LogManager: directories, clean-shutdown marker, checkpoints, partition.metadata."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from sharebroker.protocol.record_batch import encode_batch, parse_batches
from sharebroker.storage import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LogConfig,
    LogManager,
    PartitionLog,
    parse_partition_dir,
    read_partition_metadata,
    topic_id_base64,
)
from sharebroker.storage.files import read_offset_checkpoint, write_offset_checkpoint

NOW = 1_700_000_000_000
SMALL = LogConfig(segment_bytes=1500, index_interval_bytes=200)


def put(log: PartitionLog, n: int = 1) -> None:
    for _ in range(n):
        buf = encode_batch([(None, b"v" * 100)], timestamp_ms=NOW)
        log.append(buf, parse_batches(buf, verify_crc=True), leader_epoch=0, now_ms=NOW)


def crash(manager: LogManager) -> None:
    for log in manager.logs.values():
        for seg in log.segments:
            seg.close_fds()


def test_parse_partition_dir() -> None:
    assert parse_partition_dir("orders-0") == ("orders", 0)
    assert parse_partition_dir("my-topic.v1-12") == ("my-topic.v1", 12)
    assert parse_partition_dir("a-b-c-3") == ("a-b-c", 3)
    assert parse_partition_dir("__consumer_offsets-49") == ("__consumer_offsets", 49)
    for bad in ("orders", "orders-", "orders-x", "orders-0.abc-delete", ".hidden-0-", "t-0-future"):
        assert parse_partition_dir(bad) is None, bad


def test_create_open_close_and_reopen(tmp_path: Path) -> None:
    m = LogManager(tmp_path)
    assert m.open_all(lambda t: SMALL, NOW) == {}
    names = [("orders", 0), ("orders", 1), ("my-topic.v1", 0), ("a-b-c", 12)]
    for t, p in names:
        put(m.create(t, p, SMALL, now_ms=NOW), 3 + p)
    assert {d.name for d in tmp_path.iterdir() if d.is_dir()} == {"orders-0", "orders-1", "my-topic.v1-0", "a-b-c-12"}
    m.close()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert read_offset_checkpoint(tmp_path / RECOVERY_POINT_CHECKPOINT) == {
        ("orders", 0): 3, ("orders", 1): 4, ("my-topic.v1", 0): 3, ("a-b-c", 12): 15}

    m2 = LogManager(tmp_path)
    seen: list[str] = []
    logs = m2.open_all(lambda t: seen.append(t) or SMALL, NOW)
    assert m2.clean_shutdown
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()  # removed once the logs are open
    assert sorted(logs) == sorted(names)
    assert sorted(seen) == sorted({t for t, _ in names})  # once per topic, not per partition
    assert logs[("a-b-c", 12)].log_end_offset == 15
    assert logs[("a-b-c", 12)].recovery_point == 15
    assert m2.create("orders", 0, SMALL, now_ms=NOW) is logs[("orders", 0)]
    m2.close()


def test_checkpoint_file_format(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    write_offset_checkpoint(path, {("b", 1): 7, ("a-x", 0): 42})
    assert path.read_text() == "0\n2\na-x 0 42\nb 1 7\n"
    assert read_offset_checkpoint(path) == {("b", 1): 7, ("a-x", 0): 42}
    assert not (tmp_path / "cp.tmp").exists()
    assert read_offset_checkpoint(tmp_path / "missing") == {}


def test_unclean_shutdown_recovers_from_checkpointed_recovery_point(tmp_path: Path) -> None:
    m = LogManager(tmp_path)
    m.open_all(lambda t: SMALL, NOW)
    log = m.create("t", 0, SMALL, now_ms=NOW)
    put(log, 30)
    log.flush()
    m.checkpoint()
    durable = log.recovery_point
    assert durable == 30
    put(log, 5)
    tail = log.segments[-1].log_path
    crash(m)
    with open(tail, "ab") as f:
        f.write(b"\x00" * 100)  # a torn write past the last batch
    m2 = LogManager(tmp_path)
    logs = m2.open_all(lambda t: SMALL, NOW)
    assert not m2.clean_shutdown
    again = logs[("t", 0)]
    assert again.log_end_offset == 35
    assert again.recovery_point == 30  # recovered data is not yet known to be durable
    assert any("truncated 100 bytes" in line for line in again.recovery_report)
    m2.close()


def test_log_start_offset_survives_a_crash(tmp_path: Path) -> None:
    m = LogManager(tmp_path)
    m.open_all(lambda t: SMALL, NOW)
    log = m.create("t", 0, SMALL, now_ms=NOW)
    put(log, 20)
    log.delete_records(7)  # inside the first segment: only the checkpoint remembers it
    assert read_offset_checkpoint(tmp_path / LOG_START_OFFSET_CHECKPOINT) == {("t", 0): 7}
    crash(m)
    m2 = LogManager(tmp_path)
    assert m2.open_all(lambda t: SMALL, NOW)[("t", 0)].log_start_offset == 7
    m2.close()


def test_malformed_checkpoint_is_reported_and_recovery_is_full(tmp_path: Path) -> None:
    m = LogManager(tmp_path)
    m.open_all(lambda t: SMALL, NOW)
    put(m.create("t", 0, SMALL, now_ms=NOW), 5)
    m.close()
    (tmp_path / CLEAN_SHUTDOWN_FILE).unlink()
    (tmp_path / RECOVERY_POINT_CHECKPOINT).write_text("0\n3\nt 0 5\n")
    m2 = LogManager(tmp_path)
    logs = m2.open_all(lambda t: SMALL, NOW)
    assert any(RECOVERY_POINT_CHECKPOINT in line for line in m2.report)
    assert logs[("t", 0)].log_end_offset == 5
    m2.close()


def test_delete_partition(tmp_path: Path) -> None:
    m = LogManager(tmp_path)
    m.open_all(lambda t: SMALL, NOW)
    put(m.create("gone", 0, SMALL, now_ms=NOW), 2)
    put(m.create("kept", 0, SMALL, now_ms=NOW), 2)
    m.checkpoint()
    m.delete("gone", 0)
    assert not (tmp_path / "gone-0").exists()
    assert m.get("gone", 0) is None
    assert read_offset_checkpoint(tmp_path / RECOVERY_POINT_CHECKPOINT) == {("kept", 0): 0}
    m.close()
    m2 = LogManager(tmp_path)
    assert list(m2.open_all(lambda t: SMALL, NOW)) == [("kept", 0)]
    m2.close()


def test_pending_delete_directories_are_removed(tmp_path: Path) -> None:
    (tmp_path / "old-0.0123456789abcdef-delete").mkdir()
    (tmp_path / "old-0.0123456789abcdef-delete" / "00000000000000000000.log").write_bytes(b"x")
    m = LogManager(tmp_path)
    assert m.open_all(lambda t: SMALL, NOW) == {}
    assert not (tmp_path / "old-0.0123456789abcdef-delete").exists()
    assert m.report


def test_partition_metadata_and_stale_directories(tmp_path: Path) -> None:
    m = LogManager(tmp_path)
    m.open_all(lambda t: SMALL, NOW)
    old_id = uuid.uuid4()
    log = m.create("t", 0, SMALL, now_ms=NOW, topic_id=old_id)
    put(log, 3)
    text = (tmp_path / "t-0" / "partition.metadata").read_text()
    assert text == f"version: 0\ntopic_id: {topic_id_base64(old_id)}"
    assert len(topic_id_base64(old_id)) == 22
    assert read_partition_metadata(tmp_path / "t-0") == old_id
    m.close()

    m2 = LogManager(tmp_path)
    logs = m2.open_all(lambda t: SMALL, NOW)
    assert logs[("t", 0)].topic_id == str(old_id)
    assert m2.create("t", 0, SMALL, now_ms=NOW, topic_id=old_id).log_end_offset == 3  # same topic: kept
    new = m2.create("t", 0, SMALL, now_ms=NOW, topic_id=uuid.uuid4())  # recreated topic: old data gone
    assert new.log_end_offset == 0 and new is not logs[("t", 0)]
    assert m2.report
    m2.close()


def test_close_flushes_and_marks_clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []  # inodes: a flush fsyncs through descriptors of its own
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.fstat(fd).st_ino) or real(fd))
    m = LogManager(tmp_path)
    m.open_all(lambda t: SMALL, NOW)
    log = m.create("t", 0, SMALL, now_ms=NOW)
    put(log, 20)
    inodes = {s.log_path.stat().st_ino for s in log.segments}
    synced.clear()
    m.close()
    assert inodes <= set(synced)
    assert log.recovery_point == 20 and log.unflushed_messages == 0
