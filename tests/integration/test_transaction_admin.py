"""Transaction admin APIs over raw frames, as Kafka answers them: DescribeTransactions,
ListTransactions v0–2, DescribeProducers and WriteTxnMarkers (what `kafka-transactions.sh abort`
sends for a hanging transaction). confluent-kafka 2.16's AdminClient has no transaction admin
calls (list_transactions, describe_transactions, describe_producers), so these are raw requests."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from sharebroker.testing import wait_for
from tests.integration import rawkafka as rk
from tests.integration.clients import create_topic, produce_sync, producer_conf
from tests.integration.test_transactions import (
    ABORT_MARKER,
    INVALID_PRODUCER_EPOCH,
    NONE,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    TRANSACTIONAL_ID_NOT_FOUND,
    UNKNOWN_TOPIC_OR_PARTITION,
    add_partitions,
    describe_txns,
    end_txn,
    fetch_raw,
    init_ok,
    list_offset,
    marker_kind,
    produce_raw,
    txn_batch,
    txn_id,
)


# --------------------------------------------------------------------------------------------
# DescribeTransactions


def test_describe_transactions_through_a_transaction_lifecycle(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=3)
    tid = txn_id("describe")
    with rk.RawClient(broker.bootstrap) as raw:
        pid, epoch = init_ok(raw, tid, timeout_ms=45000)
        (s,) = describe_txns(raw, tid)
        assert (s.error_code, s.transactional_id, s.transaction_state) == (NONE, tid, "Empty")
        assert (s.producer_id, s.producer_epoch, s.transaction_timeout_ms) == (pid, epoch, 45000)
        assert (s.transaction_start_time_ms, s.topics) == (-1, ())

        before = int(time.time() * 1000)
        assert set(add_partitions(raw, tid, pid, epoch, {topic_name: [2, 0]}).values()) == {NONE}
        after = int(time.time() * 1000)
        (s,) = describe_txns(raw, tid)
        assert (s.error_code, s.transaction_state, s.producer_id, s.producer_epoch) == (NONE, "Ongoing", pid, epoch)
        assert before - 5 <= s.transaction_start_time_ms <= after + 5, (before, s.transaction_start_time_ms, after)
        started = s.transaction_start_time_ms
        assert [(t.topic, sorted(t.partitions)) for t in s.topics] == [(topic_name, [0, 2])]
        # adding more keeps the start time
        assert set(add_partitions(raw, tid, pid, epoch, {topic_name: [1]}).values()) == {NONE}
        (s,) = describe_txns(raw, tid)
        assert [(t.topic, sorted(t.partitions)) for t in s.topics] == [(topic_name, [0, 1, 2])]
        assert s.transaction_start_time_ms == started

        assert end_txn(raw, tid, pid, epoch, True) == NONE
        s = wait_for(lambda: (d := describe_txns(raw, tid)[0]).transaction_state == "CompleteCommit" and d, 10,
                     0.05, "CompleteCommit")
        assert (s.producer_id, s.producer_epoch, s.topics, s.transaction_timeout_ms) == (pid, epoch, (), 45000)
        assert s.transaction_start_time_ms == started

        assert set(add_partitions(raw, tid, pid, epoch, {topic_name: [1]}).values()) == {NONE}
        (s,) = describe_txns(raw, tid)
        assert s.transaction_state == "Ongoing" and s.transaction_start_time_ms >= started
        assert end_txn(raw, tid, pid, epoch, False) == NONE
        s = wait_for(lambda: (d := describe_txns(raw, tid)[0]).transaction_state == "CompleteAbort" and d, 10,
                     0.05, "CompleteAbort")
        assert (s.producer_id, s.producer_epoch, s.topics) == (pid, epoch, ())


def test_describe_transactions_unknown_id(broker):
    known = txn_id("known")
    unknown = txn_id("unknown")
    with rk.RawClient(broker.bootstrap) as raw:
        pid, _ = init_ok(raw, known)
        states = describe_txns(raw, unknown, known)
    assert [(s.transactional_id, s.error_code) for s in states] == [(unknown, TRANSACTIONAL_ID_NOT_FOUND),
                                                                     (known, NONE)]
    assert states[1].producer_id == pid


# --------------------------------------------------------------------------------------------
# ListTransactions


def list_txns(raw: rk.RawClient, version: int, *, states: tuple[str, ...] = (), pids: tuple[int, ...] = (),
              duration: int = -1, pattern: str | None = None) -> Any:
    cls = rk.req_cls(66, version)
    resp = raw.request(cls(**rk._fit(cls, {"state_filters": states, "producer_id_filters": pids,
                                           "duration_filter": duration, "transactional_id_pattern": pattern})))
    assert int(resp.error_code) == NONE, resp
    return resp


def _ours(resp: Any, prefix: str) -> dict[str, tuple[int, str]]:
    return {t.transactional_id: (t.producer_id, t.transaction_state) for t in resp.transaction_states
            if t.transactional_id.startswith(prefix)}


@pytest.fixture(scope="module")
def four_transactions(broker) -> tuple[str, dict[str, tuple[int, str]]]:
    """Transactional ids `<prefix>-empty`, `-ongoing`, `-committed`, `-aborted` in those states."""
    topic = f"txn-list-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic)
    prefix = f"list-{uuid.uuid4().hex[:8]}"
    expected: dict[str, tuple[int, str]] = {}
    with rk.RawClient(broker.bootstrap) as raw:
        for kind, state in (("empty", "Empty"), ("ongoing", "Ongoing"), ("committed", "CompleteCommit"),
                            ("aborted", "CompleteAbort")):
            tid = f"{prefix}-{kind}"
            pid, epoch = init_ok(raw, tid)
            if kind != "empty":
                assert set(add_partitions(raw, tid, pid, epoch, {topic: [0]}).values()) == {NONE}
            if kind in ("committed", "aborted"):
                assert end_txn(raw, tid, pid, epoch, kind == "committed") == NONE
                wait_for(lambda tid=tid, state=state: describe_txns(raw, tid)[0].transaction_state == state, 10, 0.05,
                         state)
            expected[tid] = (pid, state)
    return prefix, expected


@pytest.mark.parametrize("version", [0, 1, 2])
def test_list_transactions_filters(broker, four_transactions, version):
    prefix, expected = four_transactions
    by_state = {state: tid for tid, (_, state) in expected.items()}
    with rk.RawClient(broker.bootstrap) as raw:
        resp = list_txns(raw, version)
        assert _ours(resp, prefix) == expected
        assert tuple(resp.unknown_state_filters) == ()

        resp = list_txns(raw, version, states=("Ongoing",))
        assert _ours(resp, prefix) == {by_state["Ongoing"]: expected[by_state["Ongoing"]]}
        assert all(t.transaction_state == "Ongoing" for t in resp.transaction_states)

        resp = list_txns(raw, version, states=("CompleteCommit", "CompleteAbort"))
        assert set(_ours(resp, prefix)) == {by_state["CompleteCommit"], by_state["CompleteAbort"]}

        resp = list_txns(raw, version, states=("Bogus", "Ongoing", "ongoing"))
        assert sorted(resp.unknown_state_filters) == ["Bogus", "ongoing"]
        assert set(_ours(resp, prefix)) == {by_state["Ongoing"]}

        committed_pid = expected[by_state["CompleteCommit"]][0]
        resp = list_txns(raw, version, pids=(committed_pid,))
        assert [(t.transactional_id, t.producer_id) for t in resp.transaction_states] == [
            (by_state["CompleteCommit"], committed_pid)]
        # both filters must match
        resp = list_txns(raw, version, pids=(committed_pid,), states=("Ongoing",))
        assert list(resp.transaction_states) == []


def test_list_transactions_v1_duration_filter(broker, four_transactions):
    """Kafka lists a transaction when now - its start time > DurationFilter, whatever its state
    (a completed transaction keeps its start time)."""
    prefix, expected = four_transactions
    by_state = {state: tid for tid, (_, state) in expected.items()}
    with rk.RawClient(broker.bootstrap) as raw:
        assert set(_ours(list_txns(raw, 1, duration=-1), prefix)) == set(expected)
        started = {tid: describe_txns(raw, tid)[0].transaction_start_time_ms for tid in expected}
        # an hour: none of these started that long ago
        long_running = _ours(list_txns(raw, 1, duration=3_600_000), prefix)
        for state in ("Ongoing", "CompleteCommit", "CompleteAbort"):
            assert by_state[state] not in long_running, long_running
        # 0 ms: every started transaction once a millisecond has passed
        newest = max(started[by_state[s]] for s in ("Ongoing", "CompleteCommit", "CompleteAbort"))
        wait_for(lambda: time.time() * 1000 > newest + 1, 2, 0.005, "a millisecond to pass")
        listed = _ours(list_txns(raw, 1, duration=0), prefix)
        assert {by_state[s] for s in ("Ongoing", "CompleteCommit", "CompleteAbort")} <= set(listed), listed
        # combined with a state filter
        listed = _ours(list_txns(raw, 1, duration=0, states=("Ongoing",)), prefix)
        assert set(listed) == {by_state["Ongoing"]}


def test_list_transactions_v2_transactional_id_pattern(broker, four_transactions):
    prefix, expected = four_transactions
    with rk.RawClient(broker.bootstrap) as raw:
        resp = list_txns(raw, 2, pattern=f"^{prefix}-(ongoing|committed)$")
        assert set(t.transactional_id for t in resp.transaction_states) == {f"{prefix}-ongoing",
                                                                           f"{prefix}-committed"}
        resp = list_txns(raw, 2, pattern=f"^{prefix}-.*$")
        assert {t.transactional_id for t in resp.transaction_states} == set(expected)
        resp = list_txns(raw, 2, pattern=f"^{prefix}-nothing$")
        assert list(resp.transaction_states) == []
        # null or empty: no filter
        assert set(_ours(list_txns(raw, 2, pattern=None), prefix)) == set(expected)
        assert set(_ours(list_txns(raw, 2, pattern=""), prefix)) == set(expected)
        # with the other filters
        resp = list_txns(raw, 2, pattern=f"^{prefix}-.*$", states=("CompleteAbort",))
        assert [t.transactional_id for t in resp.transaction_states] == [f"{prefix}-aborted"]


# --------------------------------------------------------------------------------------------
# DescribeProducers


def describe_producers(raw: rk.RawClient, topics: dict[str, list[int]]) -> dict[tuple[str, int], Any]:
    cls = rk.req_cls(61, 0)
    tcls = rk._nested(cls, "topics")
    resp = raw.request(cls(topics=tuple(tcls(name=t, partition_indexes=tuple(ps)) for t, ps in topics.items())))
    return {(t.name, p.partition_index): p for t in resp.topics for p in t.partitions}


def test_describe_producers_shows_the_open_transaction(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    from confluent_kafka import Producer

    produce_sync(Producer(producer_conf(broker.bootstrap, **{"enable.idempotence": False})), topic_name,
                 [{"value": b"plain-%d" % i, "partition": 0} for i in range(3)])
    tid = txn_id("producers")
    before = int(time.time() * 1000)
    with rk.RawClient(broker.bootstrap) as raw:
        pid, epoch = init_ok(raw, tid)
        assert set(add_partitions(raw, tid, pid, epoch, {topic_name: [0]}).values()) == {NONE}
        r = produce_raw(raw, topic_name, 0, txn_batch(pid, epoch, 0, [b"t-0", b"t-1"]), tid)
        assert (int(r.error_code), r.base_offset) == (NONE, 3), r

        missing = f"missing-{uuid.uuid4().hex[:8]}"
        got = describe_producers(raw, {topic_name: [0, 1, 7], missing: [0]})
        p0 = got[(topic_name, 0)]
        assert (int(p0.error_code), len(p0.active_producers)) == (NONE, 1), p0
        (state,) = p0.active_producers
        assert (state.producer_id, state.producer_epoch, state.last_sequence) == (pid, epoch, 1)
        assert state.current_txn_start_offset == 3
        assert state.last_timestamp >= before
        assert (int(got[(topic_name, 1)].error_code), got[(topic_name, 1)].active_producers) == (NONE, ())
        assert int(got[(topic_name, 7)].error_code) == UNKNOWN_TOPIC_OR_PARTITION
        assert int(got[(missing, 0)].error_code) == UNKNOWN_TOPIC_OR_PARTITION

        assert end_txn(raw, tid, pid, epoch, True) == NONE
        wait_for(lambda: describe_producers(raw, {topic_name: [0]})[(topic_name, 0)].active_producers[0]
                 .current_txn_start_offset == -1, 10, 0.05, "the transaction to end on the partition")
        (state,) = describe_producers(raw, {topic_name: [0]})[(topic_name, 0)].active_producers
        assert (state.producer_id, state.producer_epoch, state.last_sequence) == (pid, epoch, 1)


# --------------------------------------------------------------------------------------------
# WriteTxnMarkers


def write_markers(raw: rk.RawClient, pid: int, epoch: int, commit: bool,
                  topics: dict[str, list[int]]) -> dict[tuple[str, int], int]:
    cls = rk.req_cls(27, 1)
    mcls = rk._nested(cls, "markers")
    tcls = rk._nested(mcls, "topics")
    marker = mcls(producer_id=pid, producer_epoch=epoch, transaction_result=commit, coordinator_epoch=0,
                  topics=tuple(tcls(name=t, partition_indexes=tuple(ps)) for t, ps in topics.items()))
    (result,) = raw.request(cls(markers=(marker,))).markers
    assert result.producer_id == pid
    return {(t.name, p.partition_index): int(p.error_code) for t in result.topics for p in t.partitions}


def test_write_txn_markers_aborts_a_hanging_transaction(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    tid = txn_id("hanging")
    with rk.RawClient(broker.bootstrap) as raw:
        init_ok(raw, tid)
        pid, epoch = init_ok(raw, tid)  # epoch 1: an older epoch exists to be refused below
        assert epoch == 1
        assert set(add_partitions(raw, tid, pid, epoch, {topic_name: [0]}).values()) == {NONE}
        r = produce_raw(raw, topic_name, 0, txn_batch(pid, epoch, 0, [b"h-0", b"h-1"]), tid)
        assert (int(r.error_code), r.base_offset) == (NONE, 0), r
        assert (list_offset(raw, topic_name, 0, READ_COMMITTED), list_offset(raw, topic_name, 0, READ_UNCOMMITTED)) \
            == (0, 2)

        # a marker from an older epoch is a zombie coordinator's: refused, nothing written
        assert write_markers(raw, pid, epoch - 1, False, {topic_name: [0]}) == {(topic_name, 0): INVALID_PRODUCER_EPOCH}
        assert list_offset(raw, topic_name, 0, READ_UNCOMMITTED) == 2
        # an unknown partition
        assert write_markers(raw, pid, epoch, False, {topic_name: [5]}) == {(topic_name, 5): UNKNOWN_TOPIC_OR_PARTITION}

        assert write_markers(raw, pid, epoch, False, {topic_name: [0]}) == {(topic_name, 0): NONE}
        assert (list_offset(raw, topic_name, 0, READ_COMMITTED), list_offset(raw, topic_name, 0, READ_UNCOMMITTED)) \
            == (3, 3)
        batches = rk.fetch_all_batches(raw, topic_name, 0)
        (marker,) = [b for b in batches if b.is_control]
        assert (marker.base_offset, marker_kind(marker), marker.producer_id, marker.producer_epoch) == (
            2, ABORT_MARKER, pid, epoch)
        f = fetch_raw(raw, topic_name, 0, 0, READ_COMMITTED)
        assert (f.last_stable_offset, f.high_watermark) == (3, 3)
        assert [(a.producer_id, a.first_offset) for a in f.aborted_transactions or ()] == [(pid, 0)]
        (state,) = describe_producers(raw, {topic_name: [0]})[(topic_name, 0)].active_producers
        assert state.current_txn_start_offset == -1
