"""Incremental fetch sessions (KIP-227) against the real broker subprocess: raw Fetch requests for
every rule (session creation, answers with only the partitions that changed, forgotten
partitions, epoch and session-id errors, FINAL_EPOCH, topic names before v13 and topic ids from
v13, deleted and recreated topics, rotation), and real consumers: kafka-python (which uses
sessions), confluent-kafka and aiokafka (which fetch without them)."""

from __future__ import annotations

import asyncio
import datetime
import json
import statistics
import sys
import threading
import time
import uuid
from collections import defaultdict
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from sharebroker.testing import wait_for
from tests.integration import rawkafka as rk
from tests.integration.clients import admin, consumer_conf, create_topic, producer_conf

NONE, OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION = 0, 1, 3
FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH = 70, 71
UNKNOWN_TOPIC_ID, INCONSISTENT_TOPIC_ID, FETCH_SESSION_TOPIC_ID_ERROR = 100, 103, 106
VERSIONS = [7, 12, 13, 18]  # old and flexible, with topic names (v7-12) and topic ids (v13+)


# ---------------------------------------------------------------------------------------------
# raw Fetch with sessions


def fetch_request(version: int, parts: list[tuple[Any, int, int]] = (), *, session_id: int = 0, epoch: int = -1,
                  forgotten: list[tuple[Any, int]] = (), max_wait_ms: int = 0, min_bytes: int = 1,
                  max_bytes: int = 1 << 20, partition_max_bytes: int = 1 << 20, isolation_level: int = 0) -> Any:
    """`parts` are (topic name or id, partition, fetch offset); the topic is an id from v13."""
    cls = rk.req_cls(1, version)
    tcls = rk._nested(cls, "topics")
    pcls = rk._nested(tcls, "partitions")
    topic_field = "topic_id" if version >= 13 else "topic"
    by_topic: dict[Any, list[Any]] = {}
    for topic, partition, offset in parts:
        by_topic.setdefault(topic, []).append(pcls(**rk._fit(pcls, {
            "partition": partition, "fetch_offset": offset, "partition_max_bytes": partition_max_bytes,
            "current_leader_epoch": -1, "last_fetched_epoch": -1, "log_start_offset": -1})))
    topics = tuple(tcls(**{topic_field: t, "partitions": tuple(ps)}) for t, ps in by_topic.items())
    fcls = rk._nested(cls, "forgotten_topics_data")
    forgotten_by: dict[Any, list[int]] = {}
    for topic, partition in forgotten:
        forgotten_by.setdefault(topic, []).append(partition)
    forgotten_topics = tuple(fcls(**{topic_field: t, "partitions": tuple(ps)}) for t, ps in forgotten_by.items())
    fields = {"max_wait": datetime.timedelta(milliseconds=max_wait_ms), "min_bytes": min_bytes, "max_bytes": max_bytes,
              "isolation_level": isolation_level, "session_id": session_id, "session_epoch": epoch, "topics": topics,
              "forgotten_topics_data": forgotten_topics, "rack_id": "", "replica_id": -1}
    if version >= 15:
        rcls = sys.modules[cls.__module__].ReplicaState
        fields["replica_state"] = rcls(replica_id=-1, replica_epoch=-1)
    return cls(**rk._fit(cls, fields))


def answered(resp: Any, version: int) -> list[tuple[Any, int, Any]]:
    """(topic name or id, partition, partition data) in answer order."""
    return [(t.topic_id if version >= 13 else t.topic, p.partition_index, p)
            for t in resp.responses for p in t.partitions]


def listed(resp: Any, version: int) -> list[tuple[Any, int]]:
    return [(t, i) for t, i, _ in answered(resp, version)]


def record_offsets(p: Any) -> list[int]:
    return [r.offset for r in rk.records_of(rk.parse_batches(p.records))]


class Session:
    """A client's side of one fetch session over a raw connection: what the request names, the
    epoch it carries, what came back."""

    def __init__(self, client: rk.RawClient, version: int) -> None:
        self.client = client
        self.version = version
        self.id = 0
        self.epoch = 0

    def open(self, parts: list[tuple[Any, int, int]], **kwargs: Any) -> Any:
        resp = self.client.request(fetch_request(self.version, parts, session_id=0, epoch=0, **kwargs))
        assert int(resp.error_code) == NONE, resp
        self.id, self.epoch = resp.session_id, 1
        return resp

    def next(self, parts: list[tuple[Any, int, int]] = (), **kwargs: Any) -> Any:
        resp = self.client.request(fetch_request(self.version, parts, session_id=self.id, epoch=self.epoch, **kwargs),
                                   timeout=kwargs.get("max_wait_ms", 0) / 1000 + 5)
        assert int(resp.error_code) == NONE, resp
        assert resp.session_id == self.id
        self.epoch += 1
        return resp


def topic_id_of(bootstrap: str, name: str) -> uuid.UUID:
    with rk.RawClient(bootstrap) as raw:
        (t,) = raw.request(rk.metadata_request([name], version=12)).topics
    assert int(t.error_code) == 0, t
    return t.topic_id


def produce(bootstrap: str, topic: str, partition: int, *values: bytes) -> int:
    """Produce one batch; its base offset."""
    with rk.RawClient(bootstrap) as raw:
        p = rk.produce(raw, topic, partition, rk.encode_batch([rk.Rec(v) for v in values]))
    assert int(p.error_code) == 0, p
    return p.base_offset


def topic_key(bootstrap: str, name: str, version: int) -> Any:
    return topic_id_of(bootstrap, name) if version >= 13 else name


def delete_topic(bootstrap: str, name: str) -> None:
    a = admin(bootstrap)
    a.delete_topics([name], request_timeout=10)[name].result(15)


# ---------------------------------------------------------------------------------------------
# sessions over raw requests


@pytest.mark.parametrize("version", VERSIONS)
def test_incremental_fetches_answer_only_what_changed(broker, topic_name, version):
    create_topic(broker.bootstrap, topic_name, partitions=4)
    produce(broker.bootstrap, topic_name, 0, b"a")
    produce(broker.bootstrap, topic_name, 1, b"b")
    t = topic_key(broker.bootstrap, topic_name, version)
    with rk.RawClient(broker.bootstrap) as raw:
        s = Session(raw, version)
        first = s.open([(t, p, 0) for p in range(4)])
        assert first.session_id > 0  # the full fetch opened a session
        got = {p: data for _, p, data in answered(first, version)}
        assert sorted(got) == [0, 1, 2, 3]  # a full answer lists every partition
        assert record_offsets(got[0]) == [0] and record_offsets(got[1]) == [0]
        assert [got[p].high_watermark for p in range(4)] == [1, 1, 0, 0]

        # the client moved on in partitions 0 and 1: nothing is new anywhere
        assert listed(s.next([(t, 0, 1), (t, 1, 1)]), version) == []
        assert listed(s.next(), version) == []

        produce(broker.bootstrap, topic_name, 2, b"c1", b"c2")
        resp = s.next()
        assert listed(resp, version) == [(t, 2)]  # only the partition that received records
        (_, _, p2), = answered(resp, version)
        assert record_offsets(p2) == [0, 1] and p2.high_watermark == 2 and p2.last_stable_offset == 2
        assert p2.log_start_offset == 0 and p2.aborted_transactions is None
        # the broker still knows partition 2's fetch offset (0): it answers the records again
        # until the client names the partition with its new offset
        assert listed(s.next(), version) == [(t, 2)]
        assert listed(s.next([(t, 2, 2)]), version) == []


def test_long_poll_of_a_session_wakes_on_an_append_to_an_idle_partition(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=8)
    with rk.RawClient(broker.bootstrap) as raw:
        s = Session(raw, 12)
        s.open([(topic_name, p, 0) for p in range(8)])
        started = time.monotonic()
        assert listed(s.next(max_wait_ms=150), 12) == []  # nothing comes: answered (empty) at max_wait
        assert time.monotonic() - started >= 0.14
        # a long poll (60 s) answered only because partition 6 receives records
        corr = raw.send(fetch_request(12, session_id=s.id, epoch=s.epoch, max_wait_ms=60_000))
        produce(broker.bootstrap, topic_name, 6, b"wake")
        resp = raw.receive(rk.req_cls(1, 12), corr, timeout=20)
        s.epoch += 1
    assert int(resp.error_code) == NONE and resp.session_id == s.id
    ((_, _, p6),) = answered(resp, 12)
    assert p6.partition_index == 6 and record_offsets(p6) == [0]


@pytest.mark.parametrize("version", [12, 13])
def test_forgotten_partitions_leave_the_session(broker, topic_name, version):
    create_topic(broker.bootstrap, topic_name, partitions=3)
    t = topic_key(broker.bootstrap, topic_name, version)
    with rk.RawClient(broker.bootstrap) as raw:
        s = Session(raw, version)
        s.open([(t, p, 0) for p in range(3)])
        assert listed(s.next(forgotten=[(t, 0)]), version) == []
        for p in range(3):
            produce(broker.bootstrap, topic_name, p, b"x")
        assert listed(s.next(), version) == [(t, 1), (t, 2)]  # partition 0 is not in the session any more
        resp = s.next([(t, 0, 0), (t, 1, 1), (t, 2, 1)])  # named again: it is back, at the end
        assert listed(resp, version) == [(t, 0)]
        assert record_offsets(answered(resp, version)[0][2]) == [0]
        # forgetting every partition closes the session; that request is answered without one
        resp = raw.request(fetch_request(version, session_id=s.id, epoch=s.epoch, forgotten=[(t, p) for p in range(3)]))
        assert int(resp.error_code) == NONE and resp.session_id == 0 and listed(resp, version) == []
        resp = raw.request(fetch_request(version, session_id=s.id, epoch=s.epoch + 1))
        assert int(resp.error_code) == FETCH_SESSION_ID_NOT_FOUND


@pytest.mark.parametrize("version", [7, 13])
def test_session_errors_answer_the_top_level_code_and_nothing_else(broker, topic_name, version):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    produce(broker.bootstrap, topic_name, 0, b"x")
    t = topic_key(broker.bootstrap, topic_name, version)
    with rk.RawClient(broker.bootstrap) as raw:
        s = Session(raw, version)
        s.open([(t, 0, 0), (t, 1, 0)])
        for wrong in (s.epoch + 1, s.epoch + 100, -2):
            resp = raw.request(fetch_request(version, [(t, 0, 0)], session_id=s.id, epoch=wrong))
            assert (int(resp.error_code), resp.session_id, resp.responses) == (INVALID_FETCH_SESSION_EPOCH, 0, ())
        for unknown_id, epoch in ((s.id + 1, 1), (0, 1), (12345, 7)):
            resp = raw.request(fetch_request(version, [(t, 0, 0)], session_id=unknown_id, epoch=epoch))
            assert (int(resp.error_code), resp.session_id, resp.responses) == (FETCH_SESSION_ID_NOT_FOUND, 0, ())
        # a refused request changes nothing: the session goes on at the epoch it expects
        assert listed(s.next([(t, 0, 1)]), version) == []
        # a request version on the other side of v13 cannot continue it
        other = 12 if version >= 13 else 13
        other_t = topic_name if other < 13 else topic_id_of(broker.bootstrap, topic_name)
        resp = raw.request(fetch_request(other, [(other_t, 0, 1)], session_id=s.id, epoch=s.epoch))
        assert (int(resp.error_code), resp.session_id, resp.responses) == (FETCH_SESSION_TOPIC_ID_ERROR, 0, ())
        assert listed(s.next(), version) == []


def test_a_refusal_is_one_structured_log_line(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    with rk.RawClient(broker.bootstrap, client_id="refused-client") as raw:
        resp = raw.request(fetch_request(12, [(topic_name, 0, 0)], session_id=987654, epoch=3))
        assert int(resp.error_code) == FETCH_SESSION_ID_NOT_FOUND
    line = wait_for(lambda: next((e for e in log_events(broker) if e.get("event") == "fetch session refused"
                                  and e.get("session_id") == 987654), None), 10, message="the refusal's log line")
    assert line["error"] == "fetch_session_id_not_found" and line["client_id"] == "refused-client"
    assert "987654" in line["message"] and line["session_epoch"] == 3


def test_final_epoch_closes_and_initial_epoch_replaces_a_session(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    produce(broker.bootstrap, topic_name, 1, b"x")
    with rk.RawClient(broker.bootstrap) as raw:
        s = Session(raw, 12)
        s.open([(topic_name, 0, 0), (topic_name, 1, 0)])
        first = s.id
        # epoch 0 naming the session: closed, a new one opened
        resp = raw.request(fetch_request(12, [(topic_name, 0, 0)], session_id=first, epoch=0))
        assert int(resp.error_code) == NONE and resp.session_id not in (0, first)
        assert listed(resp, 12) == [(topic_name, 0)]
        second = resp.session_id
        resp = raw.request(fetch_request(12, session_id=first, epoch=1))
        assert int(resp.error_code) == FETCH_SESSION_ID_NOT_FOUND
        # FINAL_EPOCH: a full fetch without a session; the session named is closed
        resp = raw.request(fetch_request(12, [(topic_name, 0, 0), (topic_name, 1, 0)], session_id=second, epoch=-1))
        assert int(resp.error_code) == NONE and resp.session_id == 0
        assert listed(resp, 12) == [(topic_name, 0), (topic_name, 1)]
        resp = raw.request(fetch_request(12, session_id=second, epoch=1))
        assert int(resp.error_code) == FETCH_SESSION_ID_NOT_FOUND


def test_a_session_outlives_its_connection(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    with rk.RawClient(broker.bootstrap) as raw:
        s = Session(raw, 13)
        t = topic_id_of(broker.bootstrap, topic_name)
        s.open([(t, 0, 0), (t, 1, 0)])
    produce(broker.bootstrap, topic_name, 1, b"after")
    with rk.RawClient(broker.bootstrap) as again:
        s.client = again
        resp = s.next()
    assert listed(resp, 13) == [(t, 1)]


def test_partitions_that_returned_records_go_to_the_back_of_the_line(broker, topic_name):
    """Kafka moves a partition that returned records to the end of the session's order: with a
    response budget of one batch, partitions take turns instead of the first one taking all."""
    create_topic(broker.bootstrap, topic_name, partitions=4)
    with rk.RawClient(broker.bootstrap) as raw:
        s = Session(raw, 12)
        s.open([(topic_name, p, 0) for p in range(4)])
        produce(broker.bootstrap, topic_name, 0, b"p0")
        produce(broker.bootstrap, topic_name, 1, b"p1")
        resp = s.next(max_bytes=1)  # room for one batch (the first one always fits whole)
        got = answered(resp, 12)
        assert [(p, record_offsets(d)) for _, p, d in got] == [(0, [0]), (1, [])]  # 1 is listed for its new HW
        resp = s.next([(topic_name, 0, 1)], max_bytes=1)
        assert [(p, record_offsets(d)) for _, p, d in answered(resp, 12)] == [(1, [0])]
        # order now 2, 3, 0, 1: partition 2 is served first though 0 and 1 have new records too
        for p in (0, 1, 2):
            produce(broker.bootstrap, topic_name, p, b"more")
        resp = s.next([(topic_name, 1, 1)], max_bytes=1)
        assert [(p, record_offsets(d)) for _, p, d in answered(resp, 12)] == [(2, [0]), (0, []), (1, [])]
        resp = s.next([(topic_name, 2, 1)], max_bytes=1)
        assert [(p, record_offsets(d)) for _, p, d in answered(resp, 12)] == [(0, [1])]


def test_a_moved_log_start_offset_is_news(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=3)
    for _ in range(3):
        produce(broker.bootstrap, topic_name, 1, b"r")
    with rk.RawClient(broker.bootstrap) as raw:
        s = Session(raw, 12)
        s.open([(topic_name, p, 0 if p != 1 else 3) for p in range(3)])
        assert listed(s.next(), 12) == []
        a = admin(broker.bootstrap)
        [fut] = a.delete_records([TopicPartition(topic_name, 1, 2)], request_timeout=10).values()
        fut.result(15)
        resp = s.next()
        ((_, _, p1),) = answered(resp, 12)
        assert (p1.partition_index, p1.log_start_offset, p1.high_watermark, record_offsets(p1)) == (1, 2, 3, [])
        assert listed(s.next(), 12) == []


def test_retention_moving_the_log_start_reaches_the_session(make_broker, topic_name):
    """Retention announces nothing (no append); the session still answers the new log start
    offset of a caught-up partition, from the look it takes at all its partitions every second."""
    b = make_broker({"log.retention.check.interval.ms": 50, "log.initial.task.delay.ms": 0})
    create_topic(b.bootstrap, topic_name, partitions=2, config={"segment.ms": "1", "retention.ms": "200"})
    ends = [produce(b.bootstrap, topic_name, 0, b"r") + 1 for _ in range(4)]  # separate appends: segments roll
    with rk.RawClient(b.bootstrap) as raw:
        s = Session(raw, 13)
        t = topic_id_of(b.bootstrap, topic_name)
        first = s.open([(t, 0, ends[-1]), (t, 1, 0)])
        start = {p: d.log_start_offset for _, p, d in answered(first, 13)}[0]

        def moved() -> int:
            got = {p: d for _, p, d in answered(s.next(), 13)}
            assert set(got) <= {0} and all(record_offsets(d) == [] for d in got.values()), got
            return got[0].log_start_offset if 0 in got and got[0].log_start_offset > start else 0

        new_start = wait_for(moved, 15, 0.05, "the session to answer the log start offset retention moved")
    assert 0 < new_start <= ends[-1]


def test_read_committed_answers_the_stable_offset_and_the_aborted_list(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    produce(broker.bootstrap, topic_name, 0, b"x", b"y")
    with rk.RawClient(broker.bootstrap) as raw:
        s = Session(raw, 12)
        first = s.open([(topic_name, 0, 0), (topic_name, 1, 0)], isolation_level=1)
        p0, p1 = (d for _, _, d in answered(first, 12))
        assert record_offsets(p0) == [0, 1] and p0.last_stable_offset == p0.high_watermark == 2
        assert p0.aborted_transactions == () and p1.aborted_transactions == ()  # a list, empty: no aborts here
        produce(broker.bootstrap, topic_name, 1, b"z")
        resp = s.next([(topic_name, 0, 2)], isolation_level=1)
        ((_, _, p1),) = answered(resp, 12)
        assert (p1.partition_index, p1.last_stable_offset, record_offsets(p1)) == (1, 1, [0])
        assert p1.aborted_transactions == ()
        # read_uncommitted: no aborted list at all, the stable offset still answered
        resp = s.next([(topic_name, 1, 0)])
        ((_, _, p1),) = answered(resp, 12)
        assert p1.aborted_transactions is None and p1.last_stable_offset == 1 and record_offsets(p1) == [0]


def test_read_committed_session_follows_a_transaction(broker, topic_name):
    """With a transactional producer: while its transaction is open a read_committed session
    hears of the new high watermark but gets no records (the stable offset holds them back); the
    abort lists the partition with its records and the aborted transaction; a commit likewise."""
    from confluent_kafka import KafkaException

    create_topic(broker.bootstrap, topic_name, partitions=2)
    producer = Producer(producer_conf(broker.bootstrap, **{"transactional.id": f"{topic_name}-tx", "linger.ms": 0}))
    try:
        producer.init_transactions(10)
    except KafkaException as exc:  # a broker without transactions
        pytest.skip(f"transactions not served: {exc}")
    with rk.RawClient(broker.bootstrap) as raw:
        s = Session(raw, 12)
        s.open([(topic_name, 0, 0), (topic_name, 1, 0)], isolation_level=1)
        producer.begin_transaction()
        producer.produce(topic_name, b"aborted", partition=0)
        assert producer.flush(10) == 0
        ((_, _, p0),) = answered(s.next(isolation_level=1), 12)
        assert (p0.partition_index, p0.high_watermark, p0.last_stable_offset, record_offsets(p0)) == (0, 1, 0, [])
        assert listed(s.next(isolation_level=1), 12) == []  # nothing new while the transaction stays open
        producer.abort_transaction(10)
        ((_, _, p0),) = answered(s.next(isolation_level=1), 12)
        assert (p0.high_watermark, p0.last_stable_offset) == (2, 2)
        assert [(b.base_offset, b.is_control) for b in rk.parse_batches(p0.records)] == [(0, False), (1, True)]
        assert [a.first_offset for a in p0.aborted_transactions] == [0]  # the consumer drops offset 0
        producer.begin_transaction()
        producer.produce(topic_name, b"committed", partition=0)
        producer.commit_transaction(10)
        ((_, _, p0),) = answered(s.next([(topic_name, 0, 2)], isolation_level=1), 12)
        assert (p0.high_watermark, p0.last_stable_offset, record_offsets(p0), p0.aborted_transactions) == (4, 4, [2], ())


def test_topic_ids_unknown_deleted_and_recreated(broker, topic_name):
    """v13+: an unknown topic id is answered UNKNOWN_TOPIC_ID; a session's topic that is deleted
    keeps the name it resolved to and is answered UNKNOWN_TOPIC_OR_PARTITION, and once a topic of
    that name exists again (a new id) INCONSISTENT_TOPIC_ID, as Kafka answers."""
    create_topic(broker.bootstrap, topic_name, partitions=2)
    produce(broker.bootstrap, topic_name, 0, b"x")
    t = topic_id_of(broker.bootstrap, topic_name)
    stranger = uuid.uuid4()
    with rk.RawClient(broker.bootstrap) as raw:
        s = Session(raw, 13)
        first = s.open([(t, 0, 1), (t, 1, 0), (stranger, 0, 0)])
        errors = {(tid, p): int(d.error_code) for tid, p, d in answered(first, 13)}
        assert errors == {(t, 0): NONE, (t, 1): NONE, (stranger, 0): UNKNOWN_TOPIC_ID}
        # an error is listed in every answer
        assert listed(s.next(), 13) == [(stranger, 0)]
        delete_topic(broker.bootstrap, topic_name)
        resp = s.next(max_wait_ms=5000)
        errors = {(tid, p): int(d.error_code) for tid, p, d in answered(resp, 13)}
        assert errors == {(t, 0): UNKNOWN_TOPIC_OR_PARTITION, (t, 1): UNKNOWN_TOPIC_OR_PARTITION,
                          (stranger, 0): UNKNOWN_TOPIC_ID}
        create_topic(broker.bootstrap, topic_name, partitions=2)
        assert topic_id_of(broker.bootstrap, topic_name) != t
        resp = s.next()
        errors = {(tid, p): int(d.error_code) for tid, p, d in answered(resp, 13)}
        assert errors == {(t, 0): INCONSISTENT_TOPIC_ID, (t, 1): INCONSISTENT_TOPIC_ID, (stranger, 0): UNKNOWN_TOPIC_ID}


def test_topic_names_deleted_and_recreated(broker, topic_name):
    """Before v13 a session names topics: a deleted one is UNKNOWN_TOPIC_OR_PARTITION, and the
    topic created again under the name is simply that topic (here the old fetch offset is past
    its end)."""
    create_topic(broker.bootstrap, topic_name, partitions=1)
    produce(broker.bootstrap, topic_name, 0, b"x")
    with rk.RawClient(broker.bootstrap) as raw:
        s = Session(raw, 12)
        s.open([(topic_name, 0, 1)])
        delete_topic(broker.bootstrap, topic_name)
        ((_, _, p),) = answered(s.next(), 12)
        assert int(p.error_code) == UNKNOWN_TOPIC_OR_PARTITION
        create_topic(broker.bootstrap, topic_name, partitions=1)
        ((_, _, p),) = answered(s.next(), 12)
        assert int(p.error_code) == OFFSET_OUT_OF_RANGE
        ((_, _, p),) = answered(s.next([(topic_name, 0, 0)]), 12)
        assert int(p.error_code) == NONE and p.high_watermark == 0
        assert listed(s.next(), 12) == []


def test_a_full_cache_answers_without_a_session(make_broker, topic_name):
    b = make_broker({"max.incremental.fetch.session.cache.slots": 1})
    create_topic(b.bootstrap, topic_name, partitions=2)
    parts = [(topic_name, 0, 0), (topic_name, 1, 0)]
    with rk.RawClient(b.bootstrap) as one, rk.RawClient(b.bootstrap) as two:
        s = Session(one, 12)
        s.open(parts)
        assert s.id > 0
        # the only slot is taken by a session younger than two minutes: no session, a full answer
        resp = two.request(fetch_request(12, parts, epoch=0))
        assert int(resp.error_code) == NONE and resp.session_id == 0 and len(listed(resp, 12)) == 2
        assert listed(s.next(), 12) == []  # the first session is untouched


def test_no_slots_no_sessions(make_broker, topic_name):
    b = make_broker({"max.incremental.fetch.session.cache.slots": 0})
    create_topic(b.bootstrap, topic_name)
    with rk.RawClient(b.bootstrap) as raw:
        resp = raw.request(fetch_request(13, [(topic_id_of(b.bootstrap, topic_name), 0, 0)], epoch=0))
    assert int(resp.error_code) == NONE and resp.session_id == 0


# ---------------------------------------------------------------------------------------------
# real consumers


def log_events(broker: Any) -> list[dict[str, Any]]:
    events = []
    for line in broker.log_text().splitlines():
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
    return events


@pytest.fixture
def debug_broker(make_broker, monkeypatch):
    """A broker of this test's own logging at debug level (one line per incremental fetch)."""
    monkeypatch.setenv("SHAREBROKER_LOG_LEVEL", "debug")
    return make_broker()


class Trickle:
    """Produces to a few partitions of a topic in rounds, in the background, until stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: list[int], rounds: int) -> None:
        self.sent: dict[int, list[bytes]] = defaultdict(list)
        self.error: BaseException | None = None
        self._args = (bootstrap, topic, partitions, rounds)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        bootstrap, topic, partitions, rounds = self._args
        try:
            p = Producer(producer_conf(bootstrap, **{"linger.ms": 0}))
            for r in range(rounds):
                for part in partitions:
                    value = f"{part}-{r}".encode()
                    p.produce(topic, value=value, partition=part)
                    self.sent[part].append(value)
                assert p.flush(10) == 0
        except BaseException as exc:  # reported by join()
            self.error = exc

    def join(self) -> dict[int, list[bytes]]:
        self._thread.join(60)
        assert not self._thread.is_alive(), "producer did not finish"
        if self.error is not None:
            raise self.error
        return self.sent

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.sent.values())


PARTITIONS = 24
ACTIVE = [3, 11, 19]
ROUNDS = 40


def check_exactly_once_in_order(sent: dict[int, list[bytes]], got: dict[int, list[tuple[int, bytes]]]) -> None:
    assert sorted(got) == sorted(sent), f"records from partitions {sorted(got)}, sent to {sorted(sent)}"
    for part, values in sent.items():
        offsets = [o for o, _ in got[part]]
        assert offsets == list(range(len(values))), f"partition {part}: offsets {offsets}"
        assert [v for _, v in got[part]] == values, f"partition {part}: values out of order or repeated"


def test_kafka_python_consumer_uses_incremental_fetches(debug_broker, topic_name):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    b = debug_broker
    create_topic(b.bootstrap, topic_name, partitions=PARTITIONS)
    consumer = KafkaConsumer(bootstrap_servers=b.bootstrap, enable_auto_commit=False, request_timeout_ms=10000,
                             fetch_max_wait_ms=100, client_id="kp-sessions")
    got: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    try:
        consumer.assign([KTP(topic_name, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        consumer.poll(timeout_ms=300)  # the first fetch: the session opens while everything is empty
        trickle = Trickle(b.bootstrap, topic_name, ACTIVE, ROUNDS)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for tp, recs in consumer.poll(timeout_ms=200).items():
                got[tp.partition].extend((r.offset, r.value) for r in recs)
            if sum(map(len, got.values())) >= len(ACTIVE) * ROUNDS:
                break
        sent = trickle.join()
    finally:
        consumer.close()
    check_exactly_once_in_order(sent, got)

    events = log_events(b)
    created = [e for e in events if e.get("event") == "fetch session created" and e.get("client_id") == "kp-sessions"]
    assert created, "kafka-python opened no fetch session"
    ids = {e["session_id"] for e in created}
    incremental = [e for e in events if e.get("event") == "incremental fetch" and e.get("session_id") in ids]
    # the broker served the consumer incrementally: each answer listed only partitions with new
    # records (never an idle one of the 24), and a fetch read little more than those
    assert len(incremental) >= 5, f"{len(incremental)} incremental fetches"
    assert max(e["partitions"] for e in incremental) == PARTITIONS
    assert all(e["answered"] <= len(ACTIVE) for e in incremental if e["added"] == 0), incremental
    assert sum(e["answered"] for e in incremental) >= len(ACTIVE)
    steady = [e["read"] for e in incremental if not e["full_check"] and e["added"] == 0]
    assert steady and statistics.median(steady) <= len(ACTIVE), steady


def test_confluent_consumer_reads_many_partitions_where_few_are_written(debug_broker, topic_name):
    """librdkafka sends every Fetch without a session (SessionId 0, epoch -1): the sessionless
    path with 24 partitions, three of them busy."""
    b = debug_broker
    create_topic(b.bootstrap, topic_name, partitions=PARTITIONS)
    consumer = Consumer(consumer_conf(b.bootstrap, **{"client.id": "ck-sessions"}))
    got: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    try:
        consumer.assign([TopicPartition(topic_name, p, 0) for p in range(PARTITIONS)])
        consumer.poll(0.3)
        trickle = Trickle(b.bootstrap, topic_name, ACTIVE, ROUNDS)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sum(map(len, got.values())) < len(ACTIVE) * ROUNDS:
            msg = consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                assert msg is None or msg.error().code() < 0, msg.error()  # only local events (partition EOF)
                continue
            got[msg.partition()].append((msg.offset(), msg.value()))
        sent = trickle.join()
    finally:
        consumer.close()
    check_exactly_once_in_order(sent, got)
    assert "Traceback" not in b.log_text()


async def test_aiokafka_consumer_still_works(broker, topic_name):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATP

    create_topic(broker.bootstrap, topic_name, partitions=6)
    trickle = Trickle(broker.bootstrap, topic_name, [1, 4], 10)
    sent = await asyncio.to_thread(trickle.join)
    cons = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, request_timeout_ms=10000,
                            fetch_max_wait_ms=100)
    await asyncio.wait_for(cons.start(), 10)
    got: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    try:
        cons.assign([ATP(topic_name, p) for p in range(6)])
        await cons.seek_to_beginning()
        deadline = time.monotonic() + 20
        while sum(map(len, got.values())) < 20 and time.monotonic() < deadline:
            for tp, recs in (await cons.getmany(timeout_ms=200)).items():
                got[tp.partition].extend((r.offset, r.value) for r in recs)
    finally:
        await cons.stop()
    check_exactly_once_in_order(sent, got)
