"""Topic changes are all or nothing: a partition log or metadata write that fails (out of
descriptors, a full disk; here a path that cannot be written) leaves no directory, no metadata and
no in-memory topic behind, the client hears KAFKA_STORAGE_ERROR, and the name works again once the
cause is gone. Real Topics, TopicStore and LogManager on a temp dir."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sharebroker.broker.topics import Topics
from sharebroker.config import BrokerConfig
from sharebroker.protocol.errors import ErrorCode, KafkaError
from sharebroker.storage import METADATA_FILE, TopicStore

NOW = 1_700_000_000_000


def topics_in(path: Path) -> Topics:
    topics = Topics(BrokerConfig.load(None, {}, {"log.dirs": str(path)}), path)
    topics.open(NOW)
    return topics


def partition_dirs(path: Path, name: str) -> list[str]:
    return sorted(e.name for e in path.iterdir() if e.is_dir() and e.name.rsplit("-", 1)[0] == name)


def stored(path: Path) -> dict[str, int]:
    store = TopicStore(path)
    store.load()
    return {name: meta.partitions for name, meta in store.topics.items()}


@pytest.mark.parametrize("sliced", [False, True], ids=["create", "create_async"])
async def test_a_partition_that_cannot_be_created_removes_the_ones_before_it(tmp_path: Path, sliced: bool) -> None:
    topics = topics_in(tmp_path)
    blocker = tmp_path / "t-2"
    blocker.write_text("not a directory")  # partition 2's directory cannot be made
    with pytest.raises(KafkaError) as err:
        if sliced:
            await topics.create_async("t", 3, {}, NOW)
        else:
            topics.create("t", 3, {}, NOW)
    assert err.value.code == ErrorCode.kafka_storage_error
    assert err.value.message.startswith(f"Error while creating log for t-2 in dir {tmp_path} (")
    assert partition_dirs(tmp_path, "t") == [] and topics.get("t") is None and "t" not in stored(tmp_path)
    assert topics.logs.get("t", 0) is None and not topics.creating
    blocker.unlink()
    created = topics.create("t", 3, {}, NOW)  # the name is usable again
    assert [p.index for p in created.partitions] == [0, 1, 2]
    assert stored(tmp_path)["t"] == 3


def test_a_metadata_write_that_fails_removes_the_new_partitions(tmp_path: Path) -> None:
    topics = topics_in(tmp_path)
    blocker = tmp_path / (METADATA_FILE + ".tmp")
    blocker.mkdir()  # the atomic replace cannot open its temp file
    with pytest.raises(KafkaError) as err:
        topics.create("t", 2, {}, NOW)
    assert err.value.code == ErrorCode.kafka_storage_error
    assert "Error while writing the metadata of topic t" in err.value.message
    assert partition_dirs(tmp_path, "t") == [] and topics.get("t") is None and "t" not in stored(tmp_path)
    blocker.rmdir()
    topics.create("t", 2, {}, NOW)
    assert stored(tmp_path)["t"] == 2 and partition_dirs(tmp_path, "t") == ["t-0", "t-1"]


async def test_added_partitions_are_all_or_nothing(tmp_path: Path) -> None:
    topics = topics_in(tmp_path)
    topics.create("t", 1, {}, NOW)
    (tmp_path / "t-3").write_text("not a directory")
    with pytest.raises(KafkaError) as err:
        await topics.add_partitions("t", 4, NOW)
    assert err.value.code == ErrorCode.kafka_storage_error
    assert len(topics.get("t").partitions) == 1 and stored(tmp_path)["t"] == 1
    assert partition_dirs(tmp_path, "t") == ["t-0"]
    (tmp_path / "t-3").unlink()
    assert await topics.add_partitions("t", 4, NOW) == 1
    assert len(topics.get("t").partitions) == 4 and stored(tmp_path)["t"] == 4


def test_a_deletion_whose_metadata_write_fails_keeps_the_topic(tmp_path: Path) -> None:
    topics = topics_in(tmp_path)
    topics.create("t", 1, {}, NOW)
    blocker = tmp_path / (METADATA_FILE + ".tmp")
    blocker.mkdir()
    with pytest.raises(KafkaError) as err:
        topics.delete("t")
    assert err.value.code == ErrorCode.kafka_storage_error
    assert topics.get("t") is not None and "t" in stored(tmp_path) and partition_dirs(tmp_path, "t") == ["t-0"]
    blocker.rmdir()
    topics.delete("t")
    assert topics.get("t") is None and "t" not in stored(tmp_path) and partition_dirs(tmp_path, "t") == []


def test_no_descriptor_is_left_open_by_a_failed_creation(tmp_path: Path) -> None:
    topics = topics_in(tmp_path)
    (tmp_path / "t-1").write_text("not a directory")
    before = len(os.listdir("/proc/self/fd")) if Path("/proc/self/fd").exists() else None
    with pytest.raises(KafkaError):
        topics.create("t", 2, {}, NOW)
    if before is not None:
        assert len(os.listdir("/proc/self/fd")) == before
