"""storage.TopicStore: durable cluster metadata in one atomically replaced JSON file."""

from __future__ import annotations

import base64
import json
import os
import uuid
from pathlib import Path

import pytest

from sharebroker.storage import METADATA_FILE, MetadataError, TopicStore


def fresh(tmp_path: Path) -> TopicStore:
    store = TopicStore(tmp_path)
    store.load()
    return store


def test_first_load_creates_cluster_id(tmp_path: Path) -> None:
    store = fresh(tmp_path)
    cid = store.cluster_id
    assert len(cid) == 22 and not cid.startswith("-")
    assert len(base64.urlsafe_b64decode(cid + "==")) == 16
    assert (tmp_path / METADATA_FILE).exists()
    assert fresh(tmp_path).cluster_id == cid  # generated once


def test_topics_persist_across_reload(tmp_path: Path) -> None:
    store = fresh(tmp_path)
    meta = store.create_topic("my-topic.v1", 3, {"retention.ms": "1000"})
    assert isinstance(meta.topic_id, uuid.UUID)
    store.create_topic("other", 1)
    again = fresh(tmp_path)
    assert set(again.topics) == {"my-topic.v1", "other"}
    got = again.topics["my-topic.v1"]
    assert (got.topic_id, got.partitions, got.configs) == (meta.topic_id, 3, {"retention.ms": "1000"})
    assert again.by_id[meta.topic_id].name == "my-topic.v1"
    doc = json.loads((tmp_path / METADATA_FILE).read_text())
    assert doc["topics"]["my-topic.v1"]["topic_id"] == str(meta.topic_id)


def test_mutations(tmp_path: Path) -> None:
    store = fresh(tmp_path)
    meta = store.create_topic("t", 2, {"cleanup.policy": "compact"})
    with pytest.raises(ValueError):
        store.create_topic("t", 1)
    store.set_partitions("t", 5)
    with pytest.raises(ValueError):
        store.set_partitions("t", 4)
    store.set_configs("t", {"retention.bytes": "10"})
    again = fresh(tmp_path)
    assert again.topics["t"].partitions == 5
    assert again.topics["t"].configs == {"retention.bytes": "10"}
    assert again.topics["t"].topic_id == meta.topic_id
    store.delete_topic("t")
    with pytest.raises(KeyError):
        store.delete_topic("t")
    again = fresh(tmp_path)
    assert dict(again.topics) == {} and dict(again.by_id) == {}


def test_topic_ids_are_unique_and_kafka_shaped(tmp_path: Path) -> None:
    store = fresh(tmp_path)
    ids = {store.create_topic(f"t{i}", 1).topic_id for i in range(50)}
    assert len(ids) == 50
    assert all(uuid.UUID(int=0) != i and not store.by_id[i].topic_id_base64.startswith("-") for i in ids)


def test_producer_id_blocks_are_never_reused(tmp_path: Path) -> None:
    store = fresh(tmp_path)
    assert store.reserve_producer_ids(1000) == range(0, 1000)
    assert store.reserve_producer_ids(10) == range(1000, 1010)
    assert fresh(tmp_path).reserve_producer_ids() == range(1010, 2010)


def test_failed_write_leaves_file_and_memory_unchanged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = fresh(tmp_path)
    store.create_topic("a", 1)
    before = (tmp_path / METADATA_FILE).read_bytes()

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        store.create_topic("b", 1)
    with pytest.raises(OSError):
        store.reserve_producer_ids()
    monkeypatch.undo()
    assert (tmp_path / METADATA_FILE).read_bytes() == before
    assert set(store.topics) == {"a"} and store.next_producer_id_block == 0
    assert set(fresh(tmp_path).topics) == {"a"}


def test_replace_is_atomic_via_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = fresh(tmp_path)
    renames: list[tuple[str, str]] = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda s, d: renames.append((Path(s).name, Path(d).name)) or real(s, d))
    store.create_topic("a", 1)
    assert renames == [(METADATA_FILE + ".tmp", METADATA_FILE)]
    assert not (tmp_path / (METADATA_FILE + ".tmp")).exists()


def test_dynamic_broker_configs_persist(tmp_path: Path) -> None:
    store = fresh(tmp_path)
    assert store.dynamic_broker_configs == {}
    store.set_dynamic_broker_configs({"cluster": {"log.retention.ms": "1000", "gone": None}, "broker": {}})
    again = fresh(tmp_path)
    assert again.dynamic_broker_configs == {"cluster": {"log.retention.ms": "1000"}}
    again.create_topic("t", 1)  # other mutations keep them
    assert fresh(tmp_path).dynamic_broker_configs == {"cluster": {"log.retention.ms": "1000"}}


def test_unreadable_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / METADATA_FILE).write_text("{not json")
    with pytest.raises(MetadataError):
        TopicStore(tmp_path).load()
