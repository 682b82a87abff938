"""worker.processes=2 (experimental multi-worker mode): a real `sharebroker serve` supervisor with
two worker processes, talked to by confluent-kafka over TCP. Partitions and group coordinators are
split between the workers; the clients route to each as to the brokers of a cluster."""

from __future__ import annotations

import base64
import os
import signal
import uuid
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import NewPartitions
from kio.schema.errors import ErrorCode

from sharebroker.testing import wait_for
from tests.integration.clients import admin, consumer_conf, create_topic, producer_conf
from tests.integration import rawkafka as rk
from tests.integration.share_helpers import (
    FAST_SHARE_BROKER,
    heartbeat_request,
    new_group,
    poll_once,
    set_earliest,
    set_group_configs,
    share_consumer,
)

pytestmark = pytest.mark.needs_own_broker("starts multi-worker brokers of its own")

WORKERS = {"worker.processes": 2, **FAST_SHARE_BROKER}


def _started(broker: Any) -> dict[str, Any]:
    return broker.log_events("workers started")[-1]


def _bootstraps(broker: Any) -> list[str]:
    return [f"127.0.0.1:{port}" for port in _started(broker)["ports"]]


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    md = admin(bootstrap).list_topics(topic, timeout=10)
    t = md.topics[topic]
    if t.error is not None:
        raise AssertionError(t.error)
    return {p.id: p.leader for p in t.partitions.values()}


def _produce(bootstrap: str, topic: str, n: int, partitions: int, **extra: Any) -> None:
    p = Producer(producer_conf(bootstrap, **extra))
    failed: list[Any] = []
    for i in range(n):
        p.produce(topic, b"v%d" % i, partition=i % partitions,
                  on_delivery=lambda err, _m: failed.append(err) if err else None)
    assert p.flush(30) == 0
    assert not failed


def _consume_all(bootstrap: str, topic: str, n: int, protocol: str = "classic") -> Counter[bytes]:
    conf = consumer_conf(bootstrap, **{"group.id": new_group("cg"), "group.protocol": protocol})
    if protocol == "consumer":
        conf.pop("session.timeout.ms")  # a broker setting under the consumer protocol
    c = Consumer(conf)
    c.subscribe([topic])
    got: Counter[bytes] = Counter()
    try:
        def step() -> bool:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got[m.value()] += 1
            return sum(got.values()) >= n
        wait_for(step, timeout=60, interval=0, message=f"{n} records consumed")
    finally:
        c.close()
    return got


def test_topics_partitions_and_groups_are_split_between_two_workers(sharebroker_factory: Any) -> None:
    broker = sharebroker_factory(WORKERS)
    w0, w1 = _bootstraps(broker)
    topic = "split-topic"
    create_topic(w1, topic, partitions=4)  # forwarded by worker 1 to worker 0, which writes the metadata
    leaders = wait_for(lambda: _leaders(w0, topic), timeout=15, message="topic visible through worker 0")
    assert sorted(leaders) == [0, 1, 2, 3]
    assert set(leaders.values()) == {1, 2}, leaders  # both workers lead some partitions
    assert _leaders(w1, topic) == leaders  # both workers describe the same cluster
    _produce(w0, topic, 200, 4)
    _produce(w1, topic, 200, 4, **{"enable.idempotence": True})  # InitProducerId goes to worker 0
    got = _consume_all(w1, topic, 400)  # classic group, coordinated by one of the workers
    expected = Counter({b"v%d" % i: 2 for i in range(200)})
    assert got == expected
    assert _consume_all(w0, topic, 400, protocol="consumer") == expected  # KIP-848

    # auto-creation through the worker that does not write the metadata
    auto = "auto-created-topic"
    asker = Producer(producer_conf(w1))  # a producer's Metadata asks for auto-creation
    wait_for(lambda: asker.list_topics(auto, timeout=5).topics[auto].error is None, timeout=20,
             message="auto-created topic")
    assert auto in admin(w0).list_topics(timeout=10).topics

    # restart: the data stays, each partition with its worker
    pids = _started(broker)["pids"]
    assert broker.stop() == 0  # SIGTERM to the supervisor stops every worker
    assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)
    assert (broker.data_dir / ".kafka_cleanshutdown").exists()
    # both workers' partitions are in the one checkpoint file, as in Kafka's layout
    checkpoint = (broker.data_dir / "recovery-point-offset-checkpoint").read_text().split("\n")
    assert {(line.split()[0], line.split()[1]) for line in checkpoint[2:] if line.startswith(topic)} == {
        (topic, str(p)) for p in range(4)}
    # On fresh ports: with a fixed port the workers take port + i, and the port after the one the
    # first start was given (by the OS, at random) may meanwhile be another process's.
    broker.port = 0
    broker.start()
    w0, w1 = _bootstraps(broker)
    assert _leaders(w0, topic) == leaders
    assert _consume_all(w0, topic, 400) == expected


def test_share_consumers_get_each_record_once_from_partitions_of_both_workers(sharebroker_factory: Any) -> None:
    broker = sharebroker_factory(WORKERS)
    w0, w1 = _bootstraps(broker)
    topic = "share-split"
    create_topic(w0, topic, partitions=4)
    leaders = wait_for(lambda: _leaders(w1, topic), timeout=15, message="topic visible through worker 1")
    assert set(leaders.values()) == {1, 2}
    group = new_group()
    set_earliest(w1, group)
    n = 400
    _produce(w0, topic, n, 4)
    holders: dict[tuple[int, int], list[int]] = {}
    consumers = [share_consumer(w0 if i == 0 else w1, group, [topic], explicit=True) for i in range(2)]
    try:
        def step() -> bool:
            for i, c in enumerate(consumers):
                for m in poll_once(c, 0.2):
                    if m.error() is None:
                        holders.setdefault((m.partition(), m.offset()), []).append(i)
                        c.acknowledge(m)
                c.commit_sync()
            return len(holders) >= n
        wait_for(step, timeout=90, interval=0, message=f"{n} records shared")
    finally:
        for c in consumers:
            c.close()
    assert len(holders) == n
    assert {p for p, _ in holders} == {0, 1, 2, 3}
    twice = {k: v for k, v in holders.items() if len(v) > 1}
    assert not twice, f"records handed out more than once: {list(twice.items())[:5]}"
    # the state went through each partition's share coordinator: a new member gets nothing again
    again = share_consumer(w1, group, [topic], explicit=True)
    try:
        seen = [m for _ in range(10) for m in poll_once(again, 0.3) if m.error() is None]
    finally:
        again.close()
    assert seen == []


def test_what_multi_worker_mode_does_not_do_fails_clearly(sharebroker_factory: Any) -> None:
    broker = sharebroker_factory(WORKERS)
    w0, w1 = _bootstraps(broker)
    create_topic(w0, "kept", partitions=2)
    a = admin(w1)
    with pytest.raises(KafkaException, match="INVALID_REQUEST"):
        a.delete_topics(["kept"], request_timeout=10)["kept"].result(15)
    with pytest.raises(KafkaException, match="INVALID_REQUEST"):
        a.create_partitions([NewPartitions("kept", 4)], request_timeout=10)["kept"].result(15)
    for bootstrap in (w0, w1):  # a dead-letter queue would be archived silently: refused instead
        with pytest.raises(KafkaException, match="INVALID_REQUEST"):
            set_group_configs(bootstrap, new_group(), {"errors.deadletterqueue.topic.name": "dlq.kept"})
    refused = {e["message"] for e in broker.log_events("request refused in multi-worker mode")}
    assert {"DeleteTopics is not supported with worker.processes > 1 (experimental multi-worker mode).",
            "CreatePartitions is not supported with worker.processes > 1 (experimental multi-worker mode).",
            "Setting errors.deadletterqueue.topic.name (a share-group dead-letter queue) is not supported with "
            "worker.processes > 1 (experimental multi-worker mode)."
            } <= refused
    leaders = _leaders(w0, "kept")
    assert len(leaders) == 2

    # misrouted requests: the partition's leader and the group's coordinator are named, as in a cluster
    elsewhere = next(p for p, node in leaders.items() if node == 2)
    with rk.RawClient(w0) as raw:
        answer = rk.produce(raw, "kept", elsewhere, rk.encode_batch([rk.Rec(b"x")]))
    assert answer.error_code == ErrorCode.not_leader_or_follower
    group = new_group()
    codes = []
    for bootstrap in (w0, w1):
        with rk.RawClient(bootstrap) as raw:
            member = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            codes.append(raw.request(heartbeat_request(group, member, 0, topics=["kept"])).error_code)
    assert sorted(codes, key=lambda c: c == ErrorCode.not_coordinator) == [ErrorCode.none, ErrorCode.not_coordinator]


def test_a_worker_that_dies_stops_the_broker(sharebroker_factory: Any) -> None:
    broker = sharebroker_factory(WORKERS)
    pids = _started(broker)["pids"]
    os.kill(pids[1], signal.SIGKILL)
    code = broker.proc.wait(30)
    assert code == 1

    def gone(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with open(f"/proc/{pid}/stat") as f:  # a zombie until its parent (the test) reaps it
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    wait_for(lambda: gone(pids[0]), timeout=30, message="worker 0 stopped")


def test_a_share_consumer_is_not_held_up_by_a_long_poll_on_the_other_worker(sharebroker_factory: Any) -> None:
    """librdkafka's ShareConsumer sends its record-fetching ShareFetch to one broker at a time and
    turns to the next only once that one answers. A worker with nothing to acquire for the member
    must not hold its fetch for the whole MaxWaitMs (here 30 s) while the member's jobs wait on the
    other worker: draining them takes far less than one such wait (before the fix, at least one)."""
    broker = sharebroker_factory(WORKERS)
    w0, w1 = _bootstraps(broker)
    topic = "share-no-stall"
    create_topic(w0, topic, partitions=2)
    leaders = wait_for(lambda: _leaders(w1, topic), timeout=15, message="topic visible through worker 1")
    assert set(leaders.values()) == {1, 2}  # partition 1 (empty) is led by the other worker
    group = new_group()
    set_earliest(w1, group)
    n = 60
    _produce(w0, topic, n, 1, **{"linger.ms": 0, "batch.num.messages": 1})  # all on partition 0, one per batch
    c = share_consumer(w1, group, [topic], explicit=True,
                       **{"fetch.wait.max.ms": 30000, "max.poll.records": 1})
    seen: set[int] = set()
    try:
        def step() -> bool:
            for m in poll_once(c, 0.2):
                if m.error() is None:
                    seen.add(m.offset())
                    c.acknowledge(m)
            return len(seen) >= n
        def first() -> bool:
            return bool(seen) or step()
        # the clock starts at the first job (a member's first fetch may find no assignment yet)
        wait_for(first, timeout=60, interval=0, message="the first job")
        wait_for(step, timeout=15, interval=0, message=f"{n} jobs drained without waiting out a 30 s long poll")
    finally:
        c.close()
    assert seen == set(range(n))
