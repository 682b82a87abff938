"""Classic consumer groups end to end: confluent-kafka, kafka-python and aiokafka consumers sharing a
group (partition split, rebalances on join and leave), commits and committed(), resuming from
committed offsets after a broker restart, the admin views, and Kafka's error codes over raw kio
frames (JoinGroup/SyncGroup/Heartbeat/LeaveGroup/OffsetCommit/OffsetFetch/DescribeGroups)."""

from __future__ import annotations

import asyncio
import datetime
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from tests.integration import rawkafka as rk
from tests.integration.clients import (
    address_seen_by,
    admin,
    consumer_conf,
    create_topic,
    produce_sync,
    producer_conf,
)
from tests.integration.share_helpers import heartbeat_request
from tests.brokers import module_broker
from sharebroker.testing.plugin import Broker
from sharebroker.testing import BrokerProcess, wait_for

TIMEOUT = 30.0
FAST_GROUPS = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}

NONE = 0
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
UNKNOWN_TOPIC_OR_PARTITION = 3
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
FENCED_INSTANCE_ID = 82
GROUP_SUBSCRIBED_TO_TOPIC = 86
MEMBER_ID_REQUIRED = 79


@pytest.fixture(scope="module")
def gbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from module_broker(tmp_path_factory, "groups", FAST_GROUPS)


def new_group(prefix: str = "cg") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def code(x: Any) -> int:
    return int(x)


# ---------------------------------------------------------------------------------------------
# Consumers of the three clients behind one interface, each polled in its own thread


class ConfluentMember:
    name = "confluent"

    def __init__(self, bootstrap: str, group: str, topic: str, **extra: Any) -> None:
        conf = consumer_conf(bootstrap, **{"group.id": group, "heartbeat.interval.ms": 250,
                                           "session.timeout.ms": 6000, **extra})
        self.c = Consumer(conf)
        self.c.subscribe([topic])

    def poll(self) -> list[tuple[int, int, bytes]]:
        out = []
        for m in self.c.consume(100, 0.2):
            if m.error() is None:
                out.append((m.partition(), m.offset(), m.value()))
            elif m.error().code() != KafkaError._PARTITION_EOF:
                raise AssertionError(f"consumer error: {m.error()}")
        return out

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}

    def commit(self) -> None:
        self.c.commit(asynchronous=False)

    def committed(self, topic: str, partitions: list[int]) -> dict[int, int]:
        got = self.c.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
        return {tp.partition: tp.offset for tp in got}

    def close(self) -> None:
        self.c.close()


class KafkaPythonMember:
    name = "kafka-python"

    def __init__(self, bootstrap: str, group: str, topic: str, **extra: Any) -> None:
        from kafka import KafkaConsumer

        self.c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                               enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=250,
                               request_timeout_ms=40000, **extra)
        # The topic's partitions in the client's metadata before its first poll joins: a leader that
        # assigns without them (its join outran its first metadata fetch) rejoins once they arrive,
        # and kafka-python 3.0.12 drops that rejoin when it outlasts a poll(): the rejoin's own
        # assignment makes need_rejoin() false, so the finished JoinGroup/SyncGroup is never
        # collected, heartbeats stay disabled and the broker expires the member after its session.
        assert self.c.partitions_for_topic(topic), f"no partitions of {topic} in kafka-python's metadata"

    def poll(self) -> list[tuple[int, int, bytes]]:
        batches = self.c.poll(timeout_ms=200)
        return [(m.partition, m.offset, m.value) for msgs in batches.values() for m in msgs]

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}

    def commit(self) -> None:
        self.c.commit()

    def committed(self, topic: str, partitions: list[int]) -> dict[int, int]:
        from kafka import TopicPartition as KTP

        return {p: self.c.committed(KTP(topic, p)) for p in partitions}

    def close(self) -> None:
        self.c.close()


class AioKafkaMember:
    name = "aiokafka"

    def __init__(self, bootstrap: str, group: str, topic: str, **extra: Any) -> None:
        from aiokafka import AIOKafkaConsumer

        self.loop = asyncio.new_event_loop()
        self.c: AIOKafkaConsumer | None = None
        self.loop.run_until_complete(self._start(bootstrap, group, topic, extra))

    async def _start(self, bootstrap: str, group: str, topic: str, extra: dict[str, Any]) -> None:
        from aiokafka import AIOKafkaConsumer

        self.c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                                  enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=250,
                                  **extra)
        await self.c.start()

    def poll(self) -> list[tuple[int, int, bytes]]:
        batches = self.loop.run_until_complete(self.c.getmany(timeout_ms=200))
        return [(m.partition, m.offset, m.value) for msgs in batches.values() for m in msgs]

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}

    def commit(self) -> None:
        self.loop.run_until_complete(self.c.commit())

    def committed(self, topic: str, partitions: list[int]) -> dict[int, int]:
        from aiokafka.structs import TopicPartition as ATP

        async def get() -> dict[int, int]:
            return {p: await self.c.committed(ATP(topic, p)) for p in partitions}
        return self.loop.run_until_complete(get())

    def close(self) -> None:
        self.loop.run_until_complete(self.c.stop())
        self.loop.close()


CLIENTS: dict[str, Callable[..., Any]] = {"confluent": ConfluentMember, "kafka-python": KafkaPythonMember,
                                          "aiokafka": AioKafkaMember}


class Runner(threading.Thread):
    """Creates a consumer in its own thread and polls it until stopped, recording its current
    assignment and every record it got. Commits after each non-empty poll (commits refused
    during a rebalance are counted, not fatal)."""

    def __init__(self, make: Callable[[], Any], *, commit: bool = True) -> None:
        super().__init__(daemon=True)
        self._make = make
        self._commit = commit
        self._stop_event = threading.Event()
        self.lock = threading.Lock()
        self.assigned: frozenset[int] = frozenset()
        self.records: list[tuple[int, int, bytes]] = []
        self.refused_commits = 0
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self.name_ = "?"

    def run(self) -> None:
        member = None
        try:
            member = self._make()
            self.name_ = member.name
            self.ready.set()
            while not self._stop_event.is_set():
                got = member.poll()
                with self.lock:
                    self.records.extend(got)
                    self.assigned = frozenset(member.assignment())
                if got and self._commit:
                    try:
                        member.commit()
                    except Exception:  # noqa: BLE001 - commits refused during a rebalance are expected
                        self.refused_commits += 1
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test through check()
            self.error = exc
            self.ready.set()
        finally:
            if member is not None:
                try:
                    member.close()
                except Exception as exc:  # noqa: BLE001 - reported through check()
                    self.error = self.error or exc

    def stop(self) -> None:
        self._stop_event.set()
        self.join(30)
        assert not self.is_alive(), f"{self.name_} consumer did not stop"
        self.check()

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"{self.name_} consumer failed: {self.error!r}") from self.error

    def values(self) -> list[bytes]:
        with self.lock:
            return [v for _, _, v in self.records]


def settled(runners: list[Runner], partitions: int) -> bool:
    """Every runner owns something, no partition is owned twice, and together they own all."""
    for r in runners:
        r.check()
    sets = [r.assigned for r in runners]
    return all(sets) and sum(len(s) for s in sets) == partitions and set().union(*sets) == set(range(partitions))


def broker_view(bootstrap: str, group: str) -> dict[str, set[int]]:
    """member id -> partitions, as DescribeGroups (through AdminClient) reports them."""
    a = admin(bootstrap)
    desc = a.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=TIMEOUT)
    return {m.member_id: {tp.partition for tp in m.assignment.topic_partitions} for m in desc.members}


def produce_markers(bootstrap: str, topic: str, partitions: int, tag: str) -> set[bytes]:
    p = Producer(producer_conf(bootstrap))
    items = [{"value": f"{tag}-{i}".encode(), "partition": i % partitions} for i in range(partitions * 5)]
    produce_sync(p, topic, items)
    return {it["value"] for it in items}


def check_markers(runners: list[Runner], markers: set[bytes], partitions: int) -> None:
    """Each marker is consumed exactly once, by the member that owns its partition."""
    def all_seen() -> bool:
        for r in runners:
            r.check()
        seen = [v for r in runners for v in r.values() if v in markers]
        return set(seen) == markers
    wait_for(all_seen, timeout=TIMEOUT, message="every marker consumed")
    for r in runners:
        with r.lock:
            mine = [(p, v) for p, _, v in r.records if v in markers]
            owned = r.assigned
        assert all(p in owned for p, _ in mine), (r.name_, owned, mine)
    counts: dict[bytes, int] = {}
    for r in runners:
        for v in r.values():
            if v in markers:
                counts[v] = counts.get(v, 0) + 1
    assert set(counts.values()) == {1}, {v: n for v, n in counts.items() if n != 1}


# ---------------------------------------------------------------------------------------------
# Real clients


def test_three_clients_split_partitions_and_rebalance_on_join_and_leave(gbroker: BrokerProcess) -> None:
    bootstrap = gbroker.bootstrap
    topic = f"t-{uuid.uuid4().hex[:10]}"
    parts = 6
    create_topic(bootstrap, topic, parts)
    group = new_group()
    runners: list[Runner] = []

    def start(kind: str) -> Runner:
        r = Runner(lambda: CLIENTS[kind](bootstrap, group, topic))
        r.start()
        assert r.ready.wait(TIMEOUT)
        r.check()
        runners.append(r)
        return r

    try:
        c1 = start("confluent")
        wait_for(lambda: settled([c1], parts), timeout=TIMEOUT, message="confluent owns every partition")
        kp = start("kafka-python")
        wait_for(lambda: settled([c1, kp], parts), timeout=TIMEOUT, message="confluent and kafka-python split")
        assert c1.assigned < frozenset(range(parts))  # partitions moved away from the first member
        ak = start("aiokafka")
        wait_for(lambda: settled([c1, kp, ak], parts), timeout=TIMEOUT, message="three clients split")
        # the broker's view agrees with the clients'
        wait_for(lambda: sorted(sorted(s) for s in broker_view(bootstrap, group).values())
                 == sorted(sorted(r.assigned) for r in (c1, kp, ak)), timeout=TIMEOUT, interval=0.2,
                 message="DescribeGroups shows the three members' assignments")
        # aiokafka only offers roundrobin: the one protocol every member supports is chosen
        desc = admin(bootstrap)
        assert desc.describe_consumer_groups([group], request_timeout=10)[group].result(
            timeout=TIMEOUT).partition_assignor == "roundrobin"
        check_markers([c1, kp, ak], produce_markers(bootstrap, topic, parts, "three"), parts)

        before = {r.name_: r.assigned for r in (c1, ak)}
        kp.stop()  # kafka-python leaves the group: its partitions move to the others
        runners.remove(kp)
        wait_for(lambda: settled([c1, ak], parts), timeout=TIMEOUT, message="confluent and aiokafka split")
        assert {r.name_: r.assigned for r in (c1, ak)} != before
        check_markers([c1, ak], produce_markers(bootstrap, topic, parts, "two"), parts)
    finally:
        for r in runners:
            r.stop()


@pytest.mark.parametrize("kind", ["confluent", "kafka-python", "aiokafka"])
def test_subscribe_commit_and_committed(gbroker: BrokerProcess, kind: str) -> None:
    bootstrap = gbroker.bootstrap
    topic = f"t-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, topic, 2)
    produce_sync(Producer(producer_conf(bootstrap)),
                 topic, [{"value": f"v{i}".encode(), "partition": i % 2} for i in range(10)])
    group = new_group(kind)
    member = CLIENTS[kind](bootstrap, group, topic)
    try:
        got: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + TIMEOUT
        while len(got) < 10 and time.monotonic() < deadline:
            got += member.poll()
        assert sorted(v for _, _, v in got) == sorted(f"v{i}".encode() for i in range(10))
        member.commit()
        assert member.committed(topic, [0, 1]) == {0: 5, 1: 5}
    finally:
        member.close()
    a = admin(bootstrap)
    offsets = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                            request_timeout=10)[group].result(timeout=TIMEOUT)
    assert sorted((tp.topic, tp.partition, tp.offset) for tp in offsets.topic_partitions) == [
        (topic, 0, 5), (topic, 1, 5)]


def test_resume_from_committed_offsets_after_restart(make_broker: Callable[..., BrokerProcess]) -> None:
    b = make_broker(FAST_GROUPS)
    topic = f"t-{uuid.uuid4().hex[:10]}"
    create_topic(b.bootstrap, topic, 3)
    produce_sync(Producer(producer_conf(b.bootstrap)),
                 topic, [{"value": f"p{i % 3}-{i // 3}".encode(), "partition": i % 3} for i in range(30)])
    group = new_group("restart")
    committed = {0: 4, 1: 7, 2: 10}
    c = Consumer(consumer_conf(b.bootstrap, **{"group.id": group}))
    try:
        c.subscribe([topic])
        got = 0
        deadline = time.monotonic() + TIMEOUT
        while got < 30 and time.monotonic() < deadline:
            got += sum(1 for m in c.consume(100, 0.2) if m.error() is None)
        assert got == 30
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in committed.items()], asynchronous=False)
    finally:
        c.close()

    assert b.stop() == 0  # SIGTERM
    b.start()
    a = admin(b.bootstrap)  # the handle must outlive its futures
    listed = a.list_consumer_groups(request_timeout=10).result(timeout=TIMEOUT).valid
    mine = [g for g in listed if g.group_id == group]
    assert mine and mine[0].state == ConsumerGroupState.EMPTY

    for kind in ("confluent", "kafka-python", "aiokafka"):
        member = CLIENTS[kind](b.bootstrap, group, topic)
        try:
            assert member.committed(topic, [0, 1, 2]) == committed, kind
            got_records: list[tuple[int, int, bytes]] = []
            deadline = time.monotonic() + TIMEOUT
            while len(got_records) < 9 and time.monotonic() < deadline:
                got_records += member.poll()
            by_partition = {p: sorted(o for q, o, _ in got_records if q == p) for p in range(3)}
            assert by_partition == {0: list(range(4, 10)), 1: list(range(7, 10)), 2: []}, (kind, by_partition)
        finally:
            member.close()  # closes without committing: the next client starts at the same offsets
    assert "Traceback" not in b.log_text()


def test_admin_views_and_delete_of_a_non_empty_group(gbroker: BrokerProcess) -> None:
    bootstrap = gbroker.bootstrap
    topic = f"t-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, topic, 3)
    produce_sync(Producer(producer_conf(bootstrap)),
                 topic, [{"value": b"x", "partition": p} for p in range(3)])
    group = new_group("admin")
    a = admin(bootstrap)
    member = ConfluentMember(bootstrap, group, topic)
    try:
        got: list[Any] = []
        deadline = time.monotonic() + TIMEOUT
        while len(got) < 3 and time.monotonic() < deadline:
            got += member.poll()
        member.commit()

        listed = a.list_consumer_groups(request_timeout=10).result(timeout=TIMEOUT).valid
        mine = [g for g in listed if g.group_id == group]
        assert len(mine) == 1 and mine[0].state == ConsumerGroupState.STABLE
        assert not mine[0].is_simple_consumer_group

        desc = a.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=TIMEOUT)
        assert desc.state == ConsumerGroupState.STABLE and desc.partition_assignor == "range"
        assert len(desc.members) == 1
        (m,) = desc.members
        assert m.client_id == "rdkafka" and m.host == f"/{address_seen_by(gbroker.bootstrap)}"
        assert sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions) == [
            (topic, 0), (topic, 1), (topic, 2)]

        offsets = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                request_timeout=10)[group].result(timeout=TIMEOUT)
        assert sorted((tp.partition, tp.offset) for tp in offsets.topic_partitions) == [(0, 1), (1, 1), (2, 1)]

        with pytest.raises(KafkaException) as info:
            a.delete_consumer_groups([group], request_timeout=10)[group].result(timeout=TIMEOUT)
        assert info.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    finally:
        member.close()

    wait_for(lambda: a.describe_consumer_groups([group], request_timeout=10)[group].result(
        timeout=TIMEOUT).state == ConsumerGroupState.EMPTY, timeout=TIMEOUT, message="group empty after close")
    a.delete_consumer_groups([group], request_timeout=10)[group].result(timeout=TIMEOUT)
    listed = a.list_consumer_groups(request_timeout=10).result(timeout=TIMEOUT).valid
    assert group not in {g.group_id for g in listed}
    with rk.RawClient(bootstrap) as raw:
        (t,) = offset_fetch(raw, group, [(topic, [0, 1, 2])]).topics
        assert [p.committed_offset for p in t.partitions] == [-1, -1, -1]


def test_topic_deletion_removes_committed_offsets(gbroker: BrokerProcess) -> None:
    bootstrap = gbroker.bootstrap
    topic = f"t-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, topic, 2)
    group = new_group("deltopic")
    with rk.RawClient(bootstrap) as raw:
        resp = raw.request(offset_commit_req(group, [(topic, 0, 5), (topic, 1, 6)]))
        assert [code(p.error_code) for t in resp.topics for p in t.partitions] == [NONE, NONE]
        a = admin(bootstrap)
        a.delete_topics([topic], operation_timeout=10)[topic].result(timeout=TIMEOUT)
        resp = offset_fetch(raw, group, None)
        assert resp.topics == ()


# ---------------------------------------------------------------------------------------------
# Raw frames


def td(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


def join_req(group: str, member_id: str = "", *, version: int = 5, session: int = 10000, rebalance: int = 10000,
             instance: str | None = None, protocols: tuple[tuple[str, bytes], ...] = (("range", b"meta"),),
             protocol_type: str = "consumer") -> Any:
    cls = rk.req_cls(11, version)
    pcls = rk._nested(cls, "protocols")
    return cls(**rk._fit(cls, {"group_id": group, "session_timeout": td(session), "rebalance_timeout": td(rebalance),
                               "member_id": member_id, "group_instance_id": instance, "protocol_type": protocol_type,
                               "protocols": tuple(pcls(name=n, metadata=m) for n, m in protocols), "reason": None}))


def sync_req(group: str, member_id: str, generation: int, assignments: dict[str, bytes] | None = None, *,
             version: int = 5, instance: str | None = None, protocol_type: str = "consumer",
             protocol_name: str = "range") -> Any:
    cls = rk.req_cls(14, version)
    acls = rk._nested(cls, "assignments")
    return cls(**rk._fit(cls, {"group_id": group, "generation_id": generation, "member_id": member_id,
                               "group_instance_id": instance, "protocol_type": protocol_type, "protocol_name": protocol_name,
                               "assignments": tuple(acls(member_id=m, assignment=a)
                                                    for m, a in (assignments or {}).items())}))


def heartbeat_req(group: str, member_id: str, generation: int, *, version: int = 4,
                  instance: str | None = None) -> Any:
    cls = rk.req_cls(12, version)
    return cls(**rk._fit(cls, {"group_id": group, "generation_id": generation, "member_id": member_id,
                               "group_instance_id": instance}))


def leave_req(group: str, member_id: str, *, version: int = 5, instance: str | None = None) -> Any:
    cls = rk.req_cls(13, version)
    if version < 3:
        return cls(group_id=group, member_id=member_id)
    mcls = rk._nested(cls, "members")
    return cls(group_id=group, members=(mcls(**rk._fit(mcls, {"member_id": member_id, "group_instance_id": instance,
                                                              "reason": None})),))


def offset_commit_req(group: str, offsets: list[tuple[str, int, int]], *, generation: int = -1, member_id: str = "",
                      version: int = 9) -> Any:
    cls = rk.req_cls(8, version)
    tcls = rk._nested(cls, "topics")
    pcls = rk._nested(tcls, "partitions")
    topics: dict[str, list[Any]] = {}
    for t, p, o in offsets:
        topics.setdefault(t, []).append(pcls(**rk._fit(pcls, {"partition_index": p, "committed_offset": o,
                                                              "committed_leader_epoch": -1,
                                                              "committed_metadata": ""})))
    return cls(**rk._fit(cls, {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
                               "group_instance_id": None, "retention_time": td(-1),
                               "topics": tuple(tcls(name=t, partitions=tuple(ps)) for t, ps in topics.items())}))


def offset_fetch(raw: rk.RawClient, group: str, topics: list[tuple[str, list[int]]] | None, *,
                 version: int = 9) -> Any:
    """The single group of an OffsetFetch v8+ response."""
    cls = rk.req_cls(9, version)
    gcls = rk._nested(cls, "groups")
    tcls = rk._nested(gcls, "topics")
    tlist = None if topics is None else tuple(tcls(name=t, partition_indexes=tuple(ps)) for t, ps in topics)
    req = cls(groups=(gcls(**rk._fit(gcls, {"group_id": group, "member_id": None, "member_epoch": -1,
                                            "topics": tlist})),), require_stable=True)
    (g,) = raw.request(req).groups
    return g


def describe_groups(raw: rk.RawClient, group: str, version: int = 6) -> Any:
    cls = rk.req_cls(15, version)
    (g,) = raw.request(cls(**rk._fit(cls, {"groups": (group,), "include_authorized_operations": False}))).groups
    return g


def join_as_new_member(raw: rk.RawClient, group: str, **kw: Any) -> Any:
    """JoinGroup v4+: MEMBER_ID_REQUIRED, then the join with that id (answered after the rebalance)."""
    first = raw.request(join_req(group, **kw))
    assert code(first.error_code) == MEMBER_ID_REQUIRED and first.member_id, first
    resp = raw.request(join_req(group, first.member_id, **kw), timeout=TIMEOUT)
    assert code(resp.error_code) == NONE, resp
    assert resp.member_id == first.member_id
    return resp


def stable_single(raw: rk.RawClient, group: str, **kw: Any) -> tuple[str, int]:
    resp = join_as_new_member(raw, group, **kw)
    sync = raw.request(sync_req(group, resp.member_id, resp.generation_id, {resp.member_id: b"A"},
                                protocol_type=kw.get("protocol_type", "consumer")))
    assert code(sync.error_code) == NONE and sync.assignment == b"A"
    return resp.member_id, resp.generation_id


def test_member_id_required_then_join_succeeds(gbroker: BrokerProcess) -> None:
    group = new_group("raw")
    with rk.RawClient(gbroker.bootstrap) as raw:
        first = raw.request(join_req(group))
        assert code(first.error_code) == MEMBER_ID_REQUIRED
        assert first.member_id.startswith("rawkafka-") and first.generation_id == -1
        resp = raw.request(join_req(group, first.member_id), timeout=TIMEOUT)
        assert code(resp.error_code) == NONE and resp.generation_id == 1
        assert resp.leader == first.member_id and resp.protocol_name == "range"
        assert [(m.member_id, m.metadata) for m in resp.members] == [(first.member_id, b"meta")]
        sync = raw.request(sync_req(group, first.member_id, 1, {first.member_id: b"assignment"}))
        assert code(sync.error_code) == NONE and sync.assignment == b"assignment"
        assert describe_groups(raw, group).group_state == "Stable"
        # v3 joins get a member id without the extra round trip
        other = new_group("raw3")
        old = raw.request(join_req(other, version=3), timeout=TIMEOUT)
        assert code(old.error_code) == NONE and old.member_id and old.generation_id == 1


def test_wrong_generation_and_unknown_member(gbroker: BrokerProcess) -> None:
    group = new_group("raw")
    with rk.RawClient(gbroker.bootstrap) as raw:
        member, gen = stable_single(raw, group)
        assert code(raw.request(heartbeat_req(group, member, gen)).error_code) == NONE
        assert code(raw.request(heartbeat_req(group, member, gen + 1)).error_code) == ILLEGAL_GENERATION
        assert code(raw.request(sync_req(group, member, gen - 1)).error_code) == ILLEGAL_GENERATION
        assert code(raw.request(heartbeat_req(group, "nobody", gen)).error_code) == UNKNOWN_MEMBER_ID
        assert code(raw.request(sync_req(group, "nobody", gen)).error_code) == UNKNOWN_MEMBER_ID
        assert code(raw.request(heartbeat_req(new_group("none"), "nobody", 1)).error_code) == UNKNOWN_MEMBER_ID
        # a known member id for a group that does not exist
        resp = raw.request(join_req(new_group("none"), "made-up"))
        assert code(resp.error_code) == UNKNOWN_MEMBER_ID
        # commits are generation checked too
        topic = f"t-{uuid.uuid4().hex[:10]}"
        create_topic(gbroker.bootstrap, topic, 1)
        resp = raw.request(offset_commit_req(group, [(topic, 0, 1)], generation=gen + 1, member_id=member))
        assert code(resp.topics[0].partitions[0].error_code) == ILLEGAL_GENERATION
        resp = raw.request(offset_commit_req(group, [(topic, 0, 1)], generation=gen, member_id="nobody"))
        assert code(resp.topics[0].partitions[0].error_code) == UNKNOWN_MEMBER_ID
        resp = raw.request(offset_commit_req(group, [(topic, 0, 1)]))  # admin commit on a non-empty group
        assert code(resp.topics[0].partitions[0].error_code) == UNKNOWN_MEMBER_ID
        resp = raw.request(offset_commit_req(group, [(topic, 0, 3)], generation=gen, member_id=member))
        assert code(resp.topics[0].partitions[0].error_code) == NONE
        resp = raw.request(offset_commit_req(group, [("no-such-topic", 0, 1)], generation=gen, member_id=member))
        assert code(resp.topics[0].partitions[0].error_code) == UNKNOWN_TOPIC_OR_PARTITION
        resp = raw.request(offset_commit_req(new_group("none"), [(topic, 0, 1)], generation=3, member_id="m"))
        assert code(resp.topics[0].partitions[0].error_code) == GROUP_ID_NOT_FOUND
        resp = raw.request(offset_commit_req(new_group("none"), [(topic, 0, 1)], generation=3, member_id="m",
                                             version=8))
        assert code(resp.topics[0].partitions[0].error_code) == ILLEGAL_GENERATION
        (t,) = offset_fetch(raw, group, [(topic, [0])]).topics
        assert t.partitions[0].committed_offset == 3
        # leaving: the group is empty, and an admin commit is accepted now
        resp = raw.request(leave_req(group, member))
        assert code(resp.error_code) == NONE and [code(m.error_code) for m in resp.members] == [NONE]
        assert describe_groups(raw, group).group_state == "Empty"
        resp = raw.request(offset_commit_req(group, [(topic, 0, 9)]))
        assert code(resp.topics[0].partitions[0].error_code) == NONE
        resp = raw.request(leave_req(group, member, version=1))
        assert code(resp.error_code) == UNKNOWN_MEMBER_ID


def test_session_timeout_out_of_range(gbroker: BrokerProcess) -> None:
    group = new_group("raw")
    with rk.RawClient(gbroker.bootstrap) as raw:
        for session in (999, 1_800_001):
            resp = raw.request(join_req(group, session=session))
            assert code(resp.error_code) == INVALID_SESSION_TIMEOUT, session
        assert describe_groups(raw, group).error_code == GROUP_ID_NOT_FOUND  # nothing was created


def join_one_generation(group: str, clients: list[rk.RawClient], **kw: Any) -> list[Any]:
    """JoinGroup answers of one generation that holds every client. Two JoinGroups do not always
    land in one rebalance (with group.initial.rebalance.delay.ms 0 the first can complete a
    generation alone, and the other's JoinGroup then waits for the next rebalance): a client answered
    while another's JoinGroup is still parked rejoins; one that was removed meanwhile joins anew."""
    join_cls = rk.req_cls(11, 5)
    ids = [""] * len(clients)
    pending: dict[int, int] = {}
    answers: dict[int, tuple[float, Any]] = {}
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        for i, client in enumerate(clients):
            if i not in pending and i not in answers:
                pending[i] = client.send(join_req(group, ids[i], **kw))
        for i in list(pending):
            try:
                resp = clients[i].receive(join_cls, pending[i], 0.05)
            except TimeoutError:
                continue
            del pending[i]
            if code(resp.error_code) in (MEMBER_ID_REQUIRED, UNKNOWN_MEMBER_ID):
                ids[i] = resp.member_id or ""
                continue
            assert code(resp.error_code) == NONE, resp
            answers[i] = (time.monotonic(), resp)
        if len(answers) == len(clients):
            got = [answers[i][1] for i in range(len(clients))]
            leader = next((a for a in got if a.leader == a.member_id), None)  # its answer lists the members
            if (len({a.generation_id for a in got}) == 1 and leader is not None
                    and {m.member_id for m in leader.members} == set(ids)):
                return got
            answers.clear()  # not one generation: everyone rejoins
        elif pending:  # answered while a peer is parked: that generation lacks the peer (a grace for its answer in flight)
            for i in [i for i, (at, _) in answers.items() if time.monotonic() - at > 0.3]:
                del answers[i]
    raise AssertionError("the members never joined one generation")


def test_rebalance_removes_a_member_that_does_not_rejoin(gbroker: BrokerProcess) -> None:
    group = new_group("raw")
    bootstrap = gbroker.bootstrap
    with rk.RawClient(bootstrap) as a, rk.RawClient(bootstrap) as b:
        ja, jb = join_one_generation(group, [a, b], session=5000, rebalance=1500)
        gen = ja.generation_id
        leader, follower = (a, b) if ja.leader == ja.member_id else (b, a)
        lid, fid = (ja.member_id, jb.member_id) if ja.leader == ja.member_id else (jb.member_id, ja.member_id)
        cf = follower.send(sync_req(group, fid, gen))
        assert code(leader.request(sync_req(group, lid, gen, {lid: b"L", fid: b"F"})).error_code) == NONE
        assert follower.receive(rk.req_cls(14, 5), cf, TIMEOUT).assignment == b"F"
        # the leader rejoins (a rebalance); the follower keeps heartbeating but never rejoins
        t0 = time.monotonic()
        cl = leader.send(join_req(group, lid, session=5000, rebalance=1500))
        # the leader's JoinGroup and this heartbeat come over two connections: wait until the
        # broker has taken the JoinGroup rather than assume it read that socket first
        wait_for(lambda: code(follower.request(heartbeat_req(group, fid, gen)).error_code) == REBALANCE_IN_PROGRESS,
                 timeout=TIMEOUT, message="the follower told of the rebalance")
        rejoin = leader.receive(rk.req_cls(11, 5), cl, TIMEOUT)
        assert time.monotonic() - t0 >= 1.4  # answered once the rebalance timeout ran out
        assert code(rejoin.error_code) == NONE and rejoin.generation_id == gen + 1
        assert [m.member_id for m in rejoin.members] == [lid]
        assert code(follower.request(heartbeat_req(group, fid, gen)).error_code) == UNKNOWN_MEMBER_ID


def test_member_that_stops_heartbeating_is_removed(gbroker: BrokerProcess) -> None:
    group = new_group("raw")
    with rk.RawClient(gbroker.bootstrap) as raw:
        member, gen = stable_single(raw, group, session=1000)
        assert describe_groups(raw, group).group_state == "Stable"
        wait_for(lambda: describe_groups(raw, group).group_state == "Empty", timeout=TIMEOUT,
                 message="expired member removed")
        assert code(raw.request(heartbeat_req(group, member, gen)).error_code) == UNKNOWN_MEMBER_ID


def test_inconsistent_protocols(gbroker: BrokerProcess) -> None:
    group = new_group("raw")
    with rk.RawClient(gbroker.bootstrap) as raw, rk.RawClient(gbroker.bootstrap) as other:
        stable_single(raw, group)
        resp = other.request(join_req(group, protocol_type="connect"))
        assert code(resp.error_code) == INCONSISTENT_GROUP_PROTOCOL
        resp = other.request(join_req(group, protocols=(("sticky", b""),)))
        assert code(resp.error_code) == INCONSISTENT_GROUP_PROTOCOL


def test_static_member_restart_replaces_old_member_without_rebalance(gbroker: BrokerProcess) -> None:
    group = new_group("static")
    with rk.RawClient(gbroker.bootstrap) as raw, rk.RawClient(gbroker.bootstrap) as again:
        first = raw.request(join_req(group, instance="inst-1"), timeout=TIMEOUT)
        assert code(first.error_code) == NONE and first.member_id.startswith("inst-1-")
        assert code(raw.request(sync_req(group, first.member_id, 1, {first.member_id: b"P"},
                                         instance="inst-1")).error_code) == NONE
        # the instance restarts: no member id, same metadata
        second = again.request(join_req(group, instance="inst-1"), timeout=TIMEOUT)
        assert code(second.error_code) == NONE and second.generation_id == 1
        assert second.member_id != first.member_id
        sync = again.request(sync_req(group, second.member_id, 1, instance="inst-1"))
        assert code(sync.error_code) == NONE and sync.assignment == b"P"
        assert describe_groups(raw, group).group_state == "Stable"
        assert code(raw.request(heartbeat_req(group, first.member_id, 1, instance="inst-1")).error_code) == \
            FENCED_INSTANCE_ID
        assert code(again.request(heartbeat_req(group, second.member_id, 1, instance="inst-1")).error_code) == NONE


def test_share_group_ids_are_not_classic_groups(gbroker: BrokerProcess) -> None:
    bootstrap = gbroker.bootstrap
    topic = f"t-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, topic, 1)
    share_group = new_group("share")
    with rk.RawClient(bootstrap) as raw:
        hb = raw.request(heartbeat_request(share_group, uuid.uuid4().hex[:22], 0, [topic]))
        assert code(hb.error_code) == NONE
        # OffsetFetch on a share group's id: no error and no offsets (Kafka 4.2 treats it as unknown)
        g = offset_fetch(raw, share_group, [(topic, [0])])
        assert code(g.error_code) == NONE and g.topics[0].partitions[0].committed_offset == -1
        assert offset_fetch(raw, share_group, None).topics == ()
        resp = raw.request(offset_commit_req(share_group, [(topic, 0, 1)]))
        assert code(resp.topics[0].partitions[0].error_code) == GROUP_ID_NOT_FOUND
        resp = raw.request(join_req(share_group))
        assert code(resp.error_code) == INCONSISTENT_GROUP_PROTOCOL
        d = describe_groups(raw, share_group)
        assert code(d.error_code) == GROUP_ID_NOT_FOUND and d.group_state == "Dead"
        assert d.error_message == f"Group {share_group} is not a classic group."
        assert code(raw.request(heartbeat_req(share_group, "m", 1)).error_code) == UNKNOWN_MEMBER_ID
        # and the share coordinator refuses ids classic groups own
        classic = new_group("classic")
        stable_single(raw, classic)
        hb = raw.request(heartbeat_request(classic, uuid.uuid4().hex[:22], 0, [topic]))
        assert code(hb.error_code) == GROUP_ID_NOT_FOUND


def test_empty_group_metadata_and_offsets_survive_restart(make_broker: Callable[..., BrokerProcess]) -> None:
    b = make_broker(FAST_GROUPS)
    topic = f"t-{uuid.uuid4().hex[:10]}"
    create_topic(b.bootstrap, topic, 1)
    group = new_group("persist")
    with rk.RawClient(b.bootstrap) as raw:
        member, gen = stable_single(raw, group)
        resp = raw.request(offset_commit_req(group, [(topic, 0, 42)], generation=gen, member_id=member))
        assert code(resp.topics[0].partitions[0].error_code) == NONE
        assert code(raw.request(leave_req(group, member)).error_code) == NONE
        assert describe_groups(raw, group).group_state == "Empty"
    b.stop()
    b.start()
    with rk.RawClient(b.bootstrap) as raw:
        d = describe_groups(raw, group)
        assert d.group_state == "Empty" and d.protocol_type == "consumer"
        (t,) = offset_fetch(raw, group, [(topic, [0])]).topics
        assert t.partitions[0].committed_offset == 42
        # the generation carries on from the persisted one (1 stable, 2 empty)
        resp = join_as_new_member(raw, group)
        assert resp.generation_id == 3


@pytest.mark.parametrize("version", range(10))
def test_every_version_round_trips(gbroker: BrokerProcess, version: int) -> None:
    """One member through JoinGroup vN and the highest version of the other APIs at or below
    theirs, so every advertised version of every response encodes."""
    bootstrap = gbroker.bootstrap
    topic = f"t-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, topic, 1)
    group = new_group(f"v{version}")
    with rk.RawClient(bootstrap) as raw:
        if version >= 4:
            resp = join_as_new_member(raw, group, version=version)
        else:
            resp = raw.request(join_req(group, version=version), timeout=TIMEOUT)
            assert code(resp.error_code) == NONE, resp
        member, gen = resp.member_id, resp.generation_id
        assert resp.protocol_name == "range" and resp.leader == member
        sync = raw.request(sync_req(group, member, gen, {member: b"A"}, version=min(version, 5)))
        assert code(sync.error_code) == NONE and sync.assignment == b"A"
        assert code(raw.request(heartbeat_req(group, member, gen, version=min(version, 4))).error_code) == NONE
        commit = raw.request(offset_commit_req(group, [(topic, 0, 11)], generation=gen, member_id=member,
                                               version=max(2, version)))
        assert code(commit.topics[0].partitions[0].error_code) == NONE
        fetch_version = max(1, version)
        if fetch_version >= 8:
            (t,) = offset_fetch(raw, group, [(topic, [0])], version=fetch_version).topics
        else:
            cls = rk.req_cls(9, fetch_version)
            tcls = rk._nested(cls, "topics")
            (t,) = raw.request(cls(**rk._fit(cls, {"group_id": group, "require_stable": False, "topics": (
                tcls(name=topic, partition_indexes=(0,)),)}))).topics
        assert t.partitions[0].committed_offset == 11
        d = describe_groups(raw, group, version=min(version, 6))
        assert d.group_state == "Stable" and d.protocol_data == "range"
        assert [(m.member_id, m.member_metadata, m.member_assignment) for m in d.members] == [(member, b"meta", b"A")]
        leave = raw.request(leave_req(group, member, version=min(version, 5)))
        assert code(leave.error_code) == NONE
        assert describe_groups(raw, group, version=min(version, 6)).group_state == "Empty"


def offset_delete(raw: rk.RawClient, group: str, offsets: list[tuple[str, int]]) -> Any:
    cls = rk.req_cls(47, 0)
    tcls = rk._nested(cls, "topics")
    pcls = rk._nested(tcls, "partitions")
    topics: dict[str, list[Any]] = {}
    for t, p in offsets:
        topics.setdefault(t, []).append(pcls(partition_index=p))
    return raw.request(cls(group_id=group, topics=tuple(tcls(name=t, partitions=tuple(ps))
                                                        for t, ps in topics.items())))


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: the topics, no user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def test_offset_delete(gbroker: BrokerProcess) -> None:
    bootstrap = gbroker.bootstrap
    subscribed, other = f"t-{uuid.uuid4().hex[:10]}", f"t-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, subscribed, 1)
    create_topic(bootstrap, other, 1)
    group = new_group("odel")
    with rk.RawClient(bootstrap) as raw:
        member, gen = stable_single(raw, group, protocols=(("range", subscription(subscribed)),))
        resp = raw.request(offset_commit_req(group, [(subscribed, 0, 1), (other, 0, 2)], generation=gen,
                                             member_id=member))
        assert {code(p.error_code) for t in resp.topics for p in t.partitions} == {NONE}
        resp = offset_delete(raw, group, [(subscribed, 0), (other, 0), ("no-such-topic", 0)])
        assert code(resp.error_code) == NONE
        got = {(t.name, p.partition_index): code(p.error_code) for t in resp.topics for p in t.partitions}
        assert got == {(subscribed, 0): GROUP_SUBSCRIBED_TO_TOPIC, (other, 0): NONE,
                       ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION}
        (t1, t2) = offset_fetch(raw, group, [(subscribed, [0]), (other, [0])]).topics
        assert t1.partitions[0].committed_offset == 1 and t2.partitions[0].committed_offset == -1
        assert code(offset_delete(raw, new_group("none"), [(other, 0)]).error_code) == GROUP_ID_NOT_FOUND
        # a group whose protocol is not the consumer protocol keeps its offsets while it has members
        connect = new_group("connect")
        m2, g2 = stable_single(raw, connect, protocol_type="connect")
        raw.request(offset_commit_req(connect, [(other, 0, 5)], generation=g2, member_id=m2))
        assert code(offset_delete(raw, connect, [(other, 0)]).error_code) == NON_EMPTY_GROUP


def test_admin_removal_of_a_static_member_echoes_the_request_ids(gbroker: BrokerProcess) -> None:
    """Admin removeMembersFromConsumerGroup sends LeaveGroup with member id "" and the instance id,
    and matches the answer on both: Kafka echoes the request's ids (the Java Admin threw "was not
    included in the removal response" when the broker answered the member's real id)."""
    group = new_group("static")
    with rk.RawClient(gbroker.bootstrap) as raw, rk.RawClient(gbroker.bootstrap) as admin:
        first = raw.request(join_req(group, instance="inst-1"), timeout=TIMEOUT)  # static: no MEMBER_ID_REQUIRED
        member, gen = first.member_id, first.generation_id
        sync = raw.request(sync_req(group, member, gen, {member: b"A"}, instance="inst-1"))
        assert code(sync.error_code) == NONE
        resp = admin.request(leave_req(group, "", instance="inst-1"))
        assert code(resp.error_code) == NONE
        assert [(m.member_id, m.group_instance_id, code(m.error_code)) for m in resp.members] == [("", "inst-1", NONE)]
        assert describe_groups(raw, group).group_state == "Empty"
        assert code(raw.request(heartbeat_req(group, member, gen, instance="inst-1")).error_code) == UNKNOWN_MEMBER_ID
        again = admin.request(leave_req(group, "", instance="inst-1"))
        assert [(m.member_id, m.group_instance_id, code(m.error_code)) for m in again.members] == [
            ("", "inst-1", UNKNOWN_MEMBER_ID)]
