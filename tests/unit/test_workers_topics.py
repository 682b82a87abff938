"""worker.processes > 1 on one data directory: each worker's Topics opens only the partitions it
leads (the others answer NOT_LEADER_OR_FOLLOWER), worker 0 alone writes the metadata, and another
worker takes what worker 0 created from the metadata file. Real Topics, TopicStore and LogManager
on a temp dir, two instances standing for two workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from sharebroker.broker.topics import Topics, is_remote
from sharebroker.broker.workers import WorkerIdentity, owner_index
from sharebroker.config import BrokerConfig
from sharebroker.protocol.errors import ErrorCode, KafkaError
from sharebroker.storage.files import read_offset_checkpoint

NOW = 1_700_000_000_000


def identity(index: int) -> WorkerIdentity:
    return WorkerIdentity(index, 2, (1, 2), "127.0.0.1", (9092, 9093), (), clean=False)


def worker(path: Path, index: int) -> Topics:
    me = identity(index)
    topics = Topics(BrokerConfig.load(None, {}, {"log.dirs": str(path)}), path)
    topics.owns = me.owns
    topics.leader_of = me.owner_node
    topics.writable = index == 0
    topics.logs.shared_clean = False
    topics.open(NOW)
    return topics


def test_ownership_is_deterministic_and_spreads_partitions() -> None:
    assert [owner_index("__consumer_offsets", p, 2) for p in range(4)] == [0, 1, 0, 1]
    owners = {owner_index("orders", p, 2) for p in range(4)}
    assert owners == {0, 1}
    assert {owner_index(f"t{i}", 0, 2) for i in range(20)} == {0, 1}  # single-partition topics spread
    assert WorkerIdentity.from_env() is None  # no supervisor: one process


def test_a_worker_identity_travels_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    me = WorkerIdentity(1, 2, (5, 6), "h", (9092, 9093), (7,), clean=True, after="/x/ready")
    monkeypatch.setenv("SHAREBROKER_WORKER", me.to_env())
    assert WorkerIdentity.from_env() == me
    assert me.node_id == 6 and me.endpoint(0) == ("h", 9092)


def test_each_worker_opens_its_partitions_and_follows_worker_0(tmp_path: Path) -> None:
    w0 = worker(tmp_path, 0)
    w1 = worker(tmp_path, 1)
    w0.create("orders", 4, {}, NOW)
    with pytest.raises(KafkaError) as refused:
        w1.create("other", 1, {}, NOW)
    assert refused.value.code == ErrorCode.not_controller

    assert w1.get("orders") is None
    assert w1.reload(NOW)  # the metadata file changed
    assert not w1.reload(NOW)  # and now it has not
    mine = {p.index for p in w1.get("orders").partitions if not is_remote(p)}
    theirs = {p.index for p in w0.get("orders").partitions if not is_remote(p)}
    assert mine | theirs == {0, 1, 2, 3} and not mine & theirs
    assert {p.index for p in w1.all_partitions() if p.topic.name == "orders"} == mine

    remote = next(p for p in w1.get("orders").partitions if is_remote(p))
    with pytest.raises(KafkaError) as misrouted:
        remote.log.append  # noqa: B018 - any use of another worker's log
    assert misrouted.value.code == ErrorCode.not_leader_or_follower
    assert "node 1" in misrouted.value.message

    # both write the shared checkpoint; neither drops the other's entries
    w0.close()
    w1.close()
    checkpoint = read_offset_checkpoint(tmp_path / "recovery-point-offset-checkpoint")
    assert {p for (t, p) in checkpoint if t == "orders"} == {0, 1, 2, 3}
    assert not (tmp_path / ".kafka_cleanshutdown").exists()  # the supervisor writes it
