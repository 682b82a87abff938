"""Metrics without sockets: the recorder's counters and histograms, what the share-partition state
machine reports for lock expiry and the delivery limit (explicit now), the setting and its
environment form, and that a broker without metrics.listener neither counts nor loads
prometheus_client."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sharebroker.broker.metrics import (
    FOLD_AT,
    LATENCY_BUCKETS_MS,
    NULL_RECORDER,
    Histogram,
    MetricsRecorder,
    all_none,
    count_errors,
    error_name,
)
from sharebroker.broker.share.partition import AcquireMode, LogBatch, ShareLimits, SharePartition
from sharebroker.config import BrokerConfig, ConfigError
from sharebroker.config.broker_settings import parse_metrics_listener
from tests.unit.test_group_log import running_broker

ACCEPT, RELEASE, REJECT = 1, 2, 3
LIMITS = ShareLimits(record_lock_duration_ms=1000, delivery_count_limit=2, max_in_flight_records=2000)


def test_histogram_buckets_are_cumulative_with_inf_and_sum() -> None:
    h = Histogram((1.0, 10.0))
    for v in (0.5, 1.0, 3.0, 50.0):
        h.observe(v)
    assert h.cumulative() == [("1.0", 2), ("10.0", 3), ("+Inf", 4)]  # le is inclusive
    assert h.sum == 54.5


def test_recorder_counts_requests_topics_and_acknowledgements() -> None:
    r = MetricsRecorder()
    r.request((0, 11), 0.3, {"NONE": 1})
    r.request((0, 11), 7.0, {"NONE": 2, "NOT_LEADER_OR_FOLLOWER": 1})
    r.request((78, 2), 499.0, {"SHARE_SESSION_NOT_FOUND": 1})
    r.fetched("orders", 1000)  # a Fetch's (a ShareFetch's are counted on the partition)
    r.fetched("orders", 800)
    r.share_acknowledged([(0, 6, [ACCEPT]), (7, 9, [RELEASE, 0, RELEASE])])  # gaps (0) are not counted
    r.share_acknowledged([(10, 12, [REJECT])])
    # a ShareAcknowledge of two partitions of orders (one refused) and one of audit, refused
    r.request((79, 1), 1.0, {"NONE": 3, "INVALID_RECORD_STATE": 2}, (None, {"orders": True, "audit": True}))
    # a ShareFetch acknowledging orders and fetching from orders and audit, whose partition failed
    r.request((78, 1), 2.0, {"NONE": 3, "UNKNOWN_TOPIC_ID": 1}, ({"orders": False, "audit": True}, {"orders": False}))
    # two ShareFetches without a failed partition, with the keys the session keeps
    for _ in range(2):
        r.request((78, 1), 2.0, all_none(2), ((("fetch", "orders"),), None))
    assert r.requests == {(0, 11): 2, (78, 2): 1, (79, 1): 1, (78, 1): 3}
    assert r.errors == {(0, "NONE"): 3, (0, "NOT_LEADER_OR_FOLLOWER"): 1, (78, "SHARE_SESSION_NOT_FOUND"): 1,
                        (79, "NONE"): 3, (79, "INVALID_RECORD_STATE"): 2, (78, "NONE"): 7,
                        (78, "UNKNOWN_TOPIC_ID"): 1}
    assert r.latency[0].cumulative()[1] == ("0.5", 1) and r.latency[0].cumulative()[-1] == ("+Inf", 2)
    assert r.bytes_out == {"orders": 1800}
    assert r.record_acks == {ACCEPT: 7, RELEASE: 2, REJECT: 3, 4: 0}
    assert r.share_requests_total == {("acknowledgement", "orders"): 2, ("acknowledgement", "audit"): 1,
                                      ("fetch", "orders"): 3, ("fetch", "audit"): 1}
    assert r.share_requests_failed == {("acknowledgement", "audit"): 1, ("acknowledgement", "orders"): 1,
                                       ("fetch", "audit"): 1}


def test_refused_requests_of_any_api_key_are_counted_under_their_own_key() -> None:
    """A refused frame's API key is whatever int16 the client sent: unknown and negative keys
    are counted as sent, not folded into a known API's counts."""
    r = MetricsRecorder()
    r.request((9999, 0), 0.1, {"INVALID_REQUEST": 1})
    r.request((-1, 3), 0.1, {"INVALID_REQUEST": 1})
    r.request((18, 99), 0.1, {"UNSUPPORTED_VERSION": 1})
    assert r.requests == {(9999, 0): 1, (-1, 3): 1, (18, 99): 1}
    assert r.errors == {(9999, "INVALID_REQUEST"): 1, (-1, "INVALID_REQUEST"): 1, (18, "UNSUPPORTED_VERSION"): 1}


def test_a_slot_folds_when_full_and_when_read() -> None:
    r = MetricsRecorder()
    for _ in range(5000):
        r.request((78, 1), 0.1, all_none(2), ((("fetch", "jobs"),), {"jobs": False}))
    r.request((0, 9), 0.1, all_none(1))
    fetches, produces = r.slot(78, 1), r.slot(0, 9)
    assert len(fetches.times) == len(fetches.errors) == len(fetches.facts) == 5000 % FOLD_AT  # folded twice
    assert len(produces.times) == 1  # folded with them, then noted
    assert r.share_requests_total == {("fetch", "jobs"): 5000, ("acknowledgement", "jobs"): 5000}
    assert not fetches.times and not fetches.errors and not fetches.facts and not produces.times
    assert r.requests == {(78, 1): 5000, (0, 9): 1} and r.errors == {(78, "NONE"): 10_000, (0, "NONE"): 1}


_TOPICS = st.sampled_from(["orders", "audit", "jobs"])
_ENTRY = st.tuples(
    st.sampled_from([(0, 9), (0, 11), (78, 1), (79, 1), (3, 12)]),
    st.floats(min_value=0.0, max_value=40_000.0),
    st.one_of(st.sampled_from([all_none(1), all_none(2)]),
              st.dictionaries(st.sampled_from(["NONE", "NOT_LEADER_OR_FOLLOWER", "UNKNOWN_TOPIC_ID"]),
                              st.integers(1, 3), min_size=1)),
    st.one_of(st.none(), st.tuples(
        st.one_of(st.none(), st.sampled_from([(("fetch", "jobs"),), (("fetch", "orders"), ("fetch", "audit"))]),
                  st.dictionaries(_TOPICS, st.booleans(), min_size=1)),
        st.one_of(st.none(), st.dictionaries(_TOPICS, st.booleans(), min_size=1)))))


@settings(max_examples=200, deadline=None)
@given(st.lists(_ENTRY, max_size=60))
def test_a_fold_counts_what_counting_each_request_in_turn_counts(noted: list) -> None:
    """The fold tallies its slots' entries; the counts must be those of taking them one by one."""
    requests: dict = {}
    errors: dict = {}
    total: dict = {}
    failed: dict = {}
    latency: dict = {}
    for key, ms, errs, share in noted:
        requests[key] = requests.get(key, 0) + 1
        latency.setdefault(key[0], Histogram(LATENCY_BUCKETS_MS)).observe(ms)
        for name, n in errs.items():
            errors[(key[0], name)] = errors.get((key[0], name), 0) + n
        fetch, acknowledged = share or (None, None)
        for kind, topics in (("fetch", fetch), ("acknowledgement", acknowledged)):
            if isinstance(topics, tuple):
                topics = {topic: False for _, topic in topics}
            for topic, any_failed in (topics or {}).items():
                total[(kind, topic)] = total.get((kind, topic), 0) + 1
                if any_failed:
                    failed[(kind, topic)] = failed.get((kind, topic), 0) + 1
    r = MetricsRecorder()
    for entry in noted:
        r.request(*entry)
    assert r.requests == requests and r.errors == errors
    assert r.share_requests_total == total and r.share_requests_failed == failed
    assert {k: h.counts for k, h in r.latency.items()} == {k: h.counts for k, h in latency.items()}
    assert {k: h.sum for k, h in r.latency.items()} == pytest.approx({k: h.sum for k, h in latency.items()})


def test_error_counts_walk_a_kio_response_as_kafkas_error_counts() -> None:
    from kio.schema.errors import ErrorCode

    from sharebroker.protocol.codec import build, response_class

    resp = build(response_class(0, 11), {"throttle_time": 0, "responses": [
        {"name": "a", "partition_responses": [
            {"index": 0, "error_code": ErrorCode.none, "base_offset": 0, "log_start_offset": 0, "record_errors": ()},
            {"index": 1, "error_code": ErrorCode.not_leader_or_follower, "base_offset": -1, "log_start_offset": -1,
             "record_errors": ()}]},
        {"name": "b", "partition_responses": [
            {"index": 0, "error_code": ErrorCode.none, "base_offset": 5, "log_start_offset": 0, "record_errors": ()}]}]})
    counts: dict[str, int] = {}
    count_errors(resp, counts)
    assert counts == {"NONE": 2, "NOT_LEADER_OR_FOLLOWER": 1}
    counts = {}
    count_errors(build(response_class(76, 1), {"error_code": ErrorCode.group_max_size_reached}), counts)
    assert counts == {"GROUP_MAX_SIZE_REACHED": 1}
    assert error_name(ErrorCode.none) == "NONE" and error_name(3) == "UNKNOWN_TOPIC_OR_PARTITION"
    assert error_name(-12345) == "-12345"


def _acquired(sp: SharePartition, member: str, first: int, last: int, now: int) -> None:
    got = sp.acquire(member, [LogBatch(first, last)], max_records=500, batch_size=500,
                     mode=AcquireMode.BATCH_OPTIMIZED, limits=LIMITS, now_ms=now)
    assert got


def test_expiry_write_counts_expired_records_and_those_archived_at_the_limit() -> None:
    sp = SharePartition(start_offset=0)
    _acquired(sp, "a", 0, 9, now=0)                      # delivery 1
    first = sp.expire_locks(limits=LIMITS, now_ms=1000)
    assert first is not None and (first.expired, first.archived_at_limit) == (10, 0)
    sp.commit(first, now_ms=1000)
    _acquired(sp, "b", 0, 9, now=1000)                   # delivery 2 = the limit
    w = sp.acknowledge("b", [(0, 3, [ACCEPT])], limits=LIMITS, now_ms=1500, is_renew=False)
    assert w is not None
    sp.commit(w, now_ms=1500)
    second = sp.expire_locks(limits=LIMITS, now_ms=2000)
    assert second is not None and (second.expired, second.archived_at_limit) == (6, 6)


def test_release_at_the_limit_is_counted_by_acknowledgement_and_by_member_release() -> None:
    sp = SharePartition(start_offset=0)
    _acquired(sp, "a", 0, 9, now=0)
    w = sp.acknowledge("a", [(0, 9, [RELEASE])], limits=LIMITS, now_ms=10, is_renew=False)
    assert w is not None and w.archived_at_limit == 0      # delivery 1 < 2: available again
    sp.commit(w, now_ms=10)
    _acquired(sp, "a", 0, 9, now=20)                      # delivery 2
    w = sp.acknowledge("a", [(0, 1, [RELEASE]), (2, 2, [REJECT])], limits=LIMITS, now_ms=30, is_renew=False)
    assert w is not None and w.archived_at_limit == 2      # the two released; the rejected one is not "at the limit"
    sp.commit(w, now_ms=30)
    w = sp.release_member("a", limits=LIMITS, now_ms=40)
    assert w is not None and w.archived_at_limit == 7      # 3-9, still acquired by "a" when it left
    sp.rollback(w, limits=LIMITS, now_ms=40)


def test_metrics_listener_setting_flag_and_environment_forms() -> None:
    assert parse_metrics_listener("127.0.0.1:9404") == ("127.0.0.1", 9404)
    assert parse_metrics_listener(":9404") == ("", 9404)
    assert parse_metrics_listener("[::1]:0") == ("::1", 0)
    for bad in ("9404", "host:", "host:99999", "host:port"):
        with pytest.raises(ConfigError):
            parse_metrics_listener(bad)
    assert BrokerConfig.load(None, {}, {})["metrics.listener"] is None
    assert not BrokerConfig.load(None, {"KAFKA_METRICS_LISTENER": ""}, {})["metrics.listener"]  # empty: off
    assert BrokerConfig.load(None, {"KAFKA_METRICS_LISTENER": "0.0.0.0:9404"}, {})["metrics.listener"] == "0.0.0.0:9404"
    with pytest.raises(ConfigError, match="metrics.listener"):
        BrokerConfig.load(None, {}, {"metrics.listener": "nowhere"})


def test_serve_flag_reaches_the_setting(tmp_path: Path) -> None:
    """`serve --metrics-listener` is metrics.listener: a malformed value stops start-up naming it."""
    out = subprocess.run([sys.executable, "-m", "sharebroker", "serve", "--data-dir", str(tmp_path),
                          "--metrics-listener", "nowhere"], capture_output=True, text=True, timeout=60, cwd="/")
    assert out.returncode == 2
    assert "metrics.listener" in out.stderr and "HOST:PORT" in out.stderr


def test_a_taken_metrics_port_stops_start_up_naming_the_setting(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "sharebroker", "serve", "--data-dir", str(tmp_path),
                              "--listeners", "PLAINTEXT://127.0.0.1:0", "--metrics-listener", f"127.0.0.1:{port}"],
                             capture_output=True, text=True, timeout=60, cwd="/")
    assert out.returncode == 1
    assert f"cannot listen on metrics.listener 127.0.0.1:{port}" in out.stderr


async def test_a_broker_without_the_listener_counts_nothing(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as b:
        assert b.metrics is NULL_RECORDER and not b.metrics.enabled
        assert b.share.metrics is NULL_RECORDER and b.share_groups.metrics is NULL_RECORDER
        assert b.classic_groups.metrics is NULL_RECORDER and b.consumer_groups.metrics is NULL_RECORDER


async def test_a_broker_with_the_listener_serves_its_collector(tmp_path: Path) -> None:
    from prometheus_client import generate_latest

    async with running_broker(tmp_path, {"metrics.listener": "127.0.0.1:0"}) as b:
        assert isinstance(b.metrics, MetricsRecorder) and b.share.metrics is b.metrics
        assert b._metrics_endpoint is not None
        text = generate_latest(b._metrics_endpoint.registry).decode()
        assert 'kafka_server_socket_server_metrics_connection_count{listener="PLAINTEXT"} 0.0' in text
        assert "kafka_server_group_coordinator_metrics_share_group_count{state=\"Stable\"} 0.0" in text


def test_prometheus_client_is_not_imported_by_the_broker() -> None:
    code = "import sys, sharebroker.broker.server, sharebroker.cli.main; print('prometheus_client' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == "False"


def test_the_view_history_leaves_out_acknowledgements_that_only_accept() -> None:
    """An accepted record is never poison, so the history the view keeps for poison records skips
    acknowledgements that only accept (the trace log still has them)."""
    from sharebroker.broker.share.leader import _accepts_only

    assert _accepts_only([(0, 0, [ACCEPT]), (3, 5, [ACCEPT, ACCEPT, ACCEPT])])
    assert not _accepts_only([(0, 0, [ACCEPT]), (1, 1, [REJECT])])
    assert not _accepts_only([(0, 2, [ACCEPT, RELEASE, ACCEPT])])
    assert not _accepts_only([(0, 2, [0, ACCEPT, ACCEPT])])  # a gap
