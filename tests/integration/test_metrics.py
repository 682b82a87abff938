"""The Prometheus endpoint (metrics.listener): a broker subprocess driven by confluent-kafka's
Producer, Consumer and ShareConsumer, scraped over HTTP after each step, every metric checked
against what the step must have done."""

from __future__ import annotations

import contextlib
import http.client
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Consumer, KafkaError, KafkaException
from prometheus_client.parser import text_string_to_metric_families

from sharebroker.testing import wait_for
from sharebroker.testing.plugin import Broker
from tests.integration import rawkafka as rk
from tests.integration.clients import consumer_conf, create_topic
from tests.integration.share_helpers import (
    FAST_SHARE_BROKER,
    ShareMember,
    commit_errors,
    new_group,
    poll_until,
    produce_values,
    set_earliest,
    share_consumer,
    share_fetch_request,
    topic_id,
    values,
)

TIMEOUT = 20.0
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def metrics_address(broker: Any) -> tuple[str, int]:
    """Where the broker serves /metrics: its 'metrics listener started' log line (port 0 picks one)."""
    (event,) = broker.log_events("metrics listener started")
    return "127.0.0.1", int(event["port"])


def get(address: tuple[str, int], path: str = "/metrics", method: str = "GET",
        headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection(*address, timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def scrape(address: tuple[str, int]) -> Samples:
    status, _, body = get(address)
    assert status == 200
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(body.decode()) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value (0 when the series is absent: a counter nothing has touched yet)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over every series of `name` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


@pytest.fixture
def mbroker(make_broker: Any) -> Iterator[Broker]:
    broker = make_broker({**FAST_SHARE_BROKER, "metrics.listener": "127.0.0.1:0"})
    if not hasattr(broker, "log_events"):
        pytest.skip("needs the broker's log to find its metrics port")
    yield broker


def read_at_least(consumer: Consumer, n: int, what: str) -> None:
    """Consume until `n` records (not errors) have come."""
    got: list[Any] = []
    wait_for(lambda: got.extend(m for m in consumer.consume(n, 0.2) if not m.error()) or len(got) >= n,
             TIMEOUT, interval=0.0, message=what)


def _closing(*consumers: Any) -> None:
    for c in consumers:
        with contextlib.suppress(Exception):
            c.close()


def test_every_metric_follows_produce_fetch_and_share_acknowledgements(mbroker: Any, topic_name: str) -> None:
    addr = metrics_address(mbroker)
    create_topic(mbroker.bootstrap, topic_name)
    group = new_group()
    set_earliest(mbroker.bootstrap, group, **{"share.record.lock.duration.ms": "1000",
                                              "share.delivery.count.limit": "2"})

    # -- produce: one batch of four records (sent as one batch: a client's linger can split them
    # on a loaded machine, and the byte counts below depend on the batching)
    with rk.RawClient(mbroker.bootstrap) as raw:
        stored = rk.produce(raw, topic_name, 0, rk.encode_batch(
            [rk.Rec(v) for v in (b"accept", b"reject", b"release", b"release-2")]))
        assert stored.error_code == 0
    s = scrape(addr)
    size = value(s, "kafka_log_log_size", topic=topic_name, partition="0")
    assert value(s, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic_name) == 4
    assert value(s, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic_name) == size > 0
    assert value(s, "kafka_log_log_logendoffset", topic=topic_name, partition="0") == 4
    assert value(s, "kafka_log_log_logstartoffset", topic=topic_name, partition="0") == 0
    assert value(s, "kafka_log_log_numlogsegments", topic=topic_name, partition="0") == 1
    assert total(s, "kafka_network_requestmetrics_requests_total", request="Produce") >= 1
    assert total(s, "kafka_network_requestmetrics_errors_total", request="Produce", error="NONE") >= 1
    assert total(s, "kafka_network_requestmetrics_totaltimems_count", request="Produce") == \
        total(s, "kafka_network_requestmetrics_requests_total", request="Produce")
    assert total(s, "kafka_network_requestmetrics_requests_total", request="CreateTopics") == 1
    assert value(s, "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT") >= 0

    # -- share: ACCEPT one, REJECT one, RELEASE two; then RELEASE one again at the delivery limit
    c = share_consumer(mbroker.bootstrap, group, [topic_name], explicit=True)
    plan = {b"accept": AcknowledgeType.ACCEPT, b"reject": AcknowledgeType.REJECT,
            b"release": AcknowledgeType.RELEASE, b"release-2": AcknowledgeType.RELEASE}
    try:
        first = poll_until(c, lambda got: len(got) >= 4, TIMEOUT,
                           on_batch=lambda batch: [c.acknowledge(m, plan[m.value()]) for m in batch])
        assert sorted(values(first)) == sorted(plan)
        assert all(e is None for e in commit_errors(c.commit_sync(10)).values())
        s = scrape(addr)
        assert value(s, "kafka_server_group_coordinator_metrics_share_group_count", state="Stable") == 1
        assert value(s, "kafka_server_group_coordinator_metrics_group_count", protocol="share") == 1
        assert value(s, "kafka_server_group_coordinator_metrics_share_group_rebalance_total") >= 1
        assert value(s, "kafka_server_sharegroupmetrics_partitionloadtimems_count") == 1
        labels = {"group": group, "topic": topic_name, "partition": "0"}
        # offsets 0-1 done, 2-3 released: SPSO 2, two records in flight, none acquired
        assert value(s, "kafka_server_sharepartitionmetrics_startoffset", **labels) == 2
        assert value(s, "kafka_server_sharepartitionmetrics_inflightmessagecount", **labels) == 2
        assert value(s, "kafka_server_sharepartitionmetrics_acquiredrecords", **labels) == 0
        assert value(s, "kafka_server_sharepartitionmetrics_inflightbatchcount", **labels) >= 1

        second = poll_until(c, lambda got: len(got) >= 2, TIMEOUT, on_batch=lambda batch: [
            c.acknowledge(m, AcknowledgeType.RELEASE if m.value() == b"release" else AcknowledgeType.ACCEPT)
            for m in batch])
        assert sorted((m.value(), m.delivery_count()) for m in second) == [(b"release", 2), (b"release-2", 2)]
        assert all(e is None for e in commit_errors(c.commit_sync(10)).values())
        s = scrape(addr)
        assert value(s, "kafka_server_sharepartitionmetrics_inflightmessagecount", **labels) == 0
        assert value(s, "kafka_server_sharepartitionmetrics_startoffset", **labels) == 4
    finally:
        c.close()
    s = scrape(addr)
    acks = {t: value(s, "kafka_server_sharegroupmetrics_recordacknowledgements_total", ackType=t)
            for t in ("Accept", "Release", "Reject", "Renew")}
    assert acks == {"Accept": 2, "Release": 3, "Reject": 1, "Renew": 0}
    assert value(s, "kafka_server_sharepartitionmetrics_archivedatdeliverylimit_total", **labels) == 1
    assert value(s, "kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total", **labels) == 0
    ack_requests = value(s, "kafka_server_brokertopicmetrics_totalshareacknowledgementrequests_total", topic=topic_name)
    assert ack_requests >= 2
    assert value(s, "kafka_server_share_group_metrics_share_acknowledgement_total") == ack_requests
    assert value(s, "kafka_server_brokertopicmetrics_failedshareacknowledgementrequests_total", topic=topic_name) == 0
    assert value(s, "kafka_server_brokertopicmetrics_totalsharefetchrequests_total", topic=topic_name) >= 2
    assert value(s, "kafka_server_brokertopicmetrics_failedsharefetchrequests_total", topic=topic_name) == 0
    # the one stored batch went out twice: all four records, then the two released ones
    assert value(s, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic_name) == 2 * size
    assert total(s, "kafka_network_requestmetrics_errors_total", request="ShareFetch", error="NONE") >= 2

    # -- lock expiry: two members take the same record in turn and never acknowledge it; the
    # second expiry is at the delivery limit (2), so the record is archived
    produce_values(mbroker.bootstrap, topic_name, [b"stalled"])
    stalled = [share_consumer(mbroker.bootstrap, group, [topic_name]) for _ in range(2)]
    try:
        for i, member in enumerate(stalled):
            (m,) = poll_until(member, lambda got: len(got) >= 1, TIMEOUT)
            assert (m.value(), m.delivery_count()) == (b"stalled", i + 1)
        wait_for(lambda: value(scrape(addr), "kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total",
                               **labels) == 2, TIMEOUT, interval=0.1, message="two lock expiries")
        s = scrape(addr)
        assert value(s, "kafka_server_sharepartitionmetrics_archivedatdeliverylimit_total", **labels) == 2
        assert value(s, "kafka_server_sharepartitionmetrics_startoffset", **labels) == 5
        assert value(s, "kafka_server_sharepartitionmetrics_inflightmessagecount", **labels) == 0
        assert value(s, "kafka_log_log_logendoffset", topic=topic_name, partition="0") == 5
        size = value(s, "kafka_log_log_size", topic=topic_name, partition="0")
        assert value(s, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic_name) == size
        assert value(s, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic_name) == 5
        assert value(s, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic_name) == 2 * size
        # expiry is not an acknowledgement
        assert value(s, "kafka_server_sharegroupmetrics_recordacknowledgements_total", ackType="Accept") == 2
    finally:
        _closing(*stalled)
    wait_for(lambda: value(scrape(addr), "kafka_server_group_coordinator_metrics_share_group_count", state="Empty") == 1,
             TIMEOUT, interval=0.1, message="the share group empty once its members left")

    # -- a classic group reads the partition once from the start
    before = value(scrape(addr), "kafka_server_brokertopicmetrics_bytesout_total", topic=topic_name)
    consumer = Consumer(consumer_conf(mbroker.bootstrap))
    consumer.subscribe([topic_name])
    try:
        read_at_least(consumer, 5, "the classic consumer reads all five records")
        s = scrape(addr)
        assert value(s, "kafka_coordinator_group_groupmetadatamanager_numgroupsstable") == 1
        assert value(s, "kafka_server_group_coordinator_metrics_group_count", protocol="classic") == 1
        assert value(s, "kafka_server_group_coordinator_metrics_group_completed_rebalance_total") >= 1
        assert value(s, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic_name) - before >= size
        assert value(s, "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT") >= 1
        assert total(s, "kafka_network_requestmetrics_requests_total", request="JoinGroup") >= 1
    finally:
        consumer.close()


def test_a_deleted_topics_counts_go_with_it(mbroker: Any, topic_name: str) -> None:
    """As Kafka removes a deleted topic's BrokerTopicMetrics: produced, fetched by a Consumer and
    a ShareConsumer, then deleted, the topic has no series left; a topic of the same name made
    again starts from nothing."""
    from confluent_kafka.admin import AdminClient

    addr = metrics_address(mbroker)
    create_topic(mbroker.bootstrap, topic_name)
    group = new_group()
    set_earliest(mbroker.bootstrap, group)
    produce_values(mbroker.bootstrap, topic_name, [b"one", b"two"])
    c = share_consumer(mbroker.bootstrap, group, [topic_name])
    try:
        poll_until(c, lambda got: len(got) >= 2, TIMEOUT)
    finally:
        _closing(c)
    consumer = Consumer(consumer_conf(mbroker.bootstrap))
    consumer.subscribe([topic_name])
    try:
        read_at_least(consumer, 2, "the classic consumer reads both records")
    finally:
        consumer.close()

    def series(s: Samples) -> set[str]:
        return {name for name, labels in s if ("topic", topic_name) in labels
                and name.startswith("kafka_server_brokertopicmetrics_")}

    wait_for(lambda: {"kafka_server_brokertopicmetrics_messagesin_total", "kafka_server_brokertopicmetrics_bytesout_total",
                      "kafka_server_brokertopicmetrics_totalsharefetchrequests_total"} <= series(scrape(addr)),
             TIMEOUT, interval=0.1, message="the topic's counts")
    admin = AdminClient({"bootstrap.servers": mbroker.bootstrap})
    for f in admin.delete_topics([topic_name]).values():
        f.result(TIMEOUT)
    wait_for(lambda: not series(scrape(addr)), TIMEOUT, interval=0.1, message="the deleted topic's counts gone")
    create_topic(mbroker.bootstrap, topic_name)
    produce_values(mbroker.bootstrap, topic_name, [b"three"])
    wait_for(lambda: value(scrape(addr), "kafka_server_brokertopicmetrics_messagesin_total", topic=topic_name) == 1,
             TIMEOUT, interval=0.1, message="the new topic counted from nothing")
    assert series(scrape(addr)) == {"kafka_server_brokertopicmetrics_messagesin_total",
                                    "kafka_server_brokertopicmetrics_bytesin_total"}


def test_errors_are_counted_by_request_and_code(mbroker: Any, topic_name: str) -> None:
    """Every error code of a response is counted, NONE included (Kafka's errorCounts)."""
    addr = metrics_address(mbroker)
    create_topic(mbroker.bootstrap, topic_name)
    with pytest.raises(KafkaException):
        create_topic(mbroker.bootstrap, topic_name)  # TOPIC_ALREADY_EXISTS, in the topic's entry
    s = scrape(addr)
    assert value(s, "kafka_network_requestmetrics_requests_total", request="CreateTopics",
                 version=_only_version(s, "CreateTopics")) == 2
    assert total(s, "kafka_network_requestmetrics_errors_total", request="CreateTopics", error="NONE") == 1
    assert total(s, "kafka_network_requestmetrics_errors_total", request="CreateTopics",
                 error="TOPIC_ALREADY_EXISTS") == 1
    # an unknown share session: ShareFetch answers SHARE_SESSION_NOT_FOUND at the top level
    tid = topic_id(mbroker.bootstrap, topic_name)
    with rk.RawClient(mbroker.bootstrap) as raw:
        raw.request(share_fetch_request(new_group(), "m" * 22, 5, partitions=[(tid, 0)]))
    s = scrape(addr)
    assert total(s, "kafka_network_requestmetrics_errors_total", request="ShareFetch",
                 error="SHARE_SESSION_NOT_FOUND") == 1


def _only_version(samples: Samples, request: str) -> str:
    (version,) = {dict(ls)["version"] for (n, ls) in samples
                  if n == "kafka_network_requestmetrics_requests_total" and dict(ls).get("request") == request}
    return version


def test_endpoint_answers_only_get_and_head_of_metrics(mbroker: Any) -> None:
    addr = metrics_address(mbroker)
    status, headers, body = get(addr)
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    assert int(headers["content-length"]) == len(body)
    assert b"# TYPE kafka_network_requestmetrics_totaltimems histogram" in body
    assert b"process_resident_memory_bytes" in body
    status, headers, body = get(addr, method="HEAD")
    assert status == 200 and body == b"" and int(headers["content-length"]) > 0
    # what Prometheus sends: OpenMetrics preferred
    status, headers, body = get(addr, headers={"Accept": "application/openmetrics-text;version=1.0.0,"
                                                         "text/plain;version=0.0.4;q=0.5"})
    assert status == 200 and headers["content-type"].startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")
    assert get(addr, "/no-such-page")[0] == 404
    assert get(addr, "/metrics", method="POST")[0] == 405
    # the live view shares the endpoint (test_admin_view.py)
    status, headers, body = get(addr, "/")
    assert status == 200 and headers["content-type"] == "text/html; charset=utf-8" and b"/static/view.js" in body
    assert "script-src 'self'" in headers["content-security-policy"]


def test_metrics_are_off_by_default(make_broker: Any) -> None:
    broker = make_broker()
    if not hasattr(broker, "log_events"):
        pytest.skip("reads the broker's log")
    assert broker.log_events("metrics listener started") == []


def test_consumer_protocol_groups_by_state_and_rebalances(mbroker: Any, topic_name: str) -> None:
    addr = metrics_address(mbroker)
    create_topic(mbroker.bootstrap, topic_name, partitions=2)
    produce_values(mbroker.bootstrap, topic_name, [b"x"])
    conf = consumer_conf(mbroker.bootstrap, **{"group.protocol": "consumer"})
    conf.pop("session.timeout.ms")  # a broker-side setting under the consumer protocol
    consumer = Consumer(conf)
    consumer.subscribe([topic_name])
    try:
        read_at_least(consumer, 1, "the consumer-protocol member reads the record")
        wait_for(lambda: value(scrape(addr), "kafka_server_group_coordinator_metrics_consumer_group_count",
                               state="Stable") == 1, TIMEOUT, interval=0.1, message="a stable consumer group")
        s = scrape(addr)
        assert value(s, "kafka_server_group_coordinator_metrics_group_count", protocol="consumer") == 1
        assert value(s, "kafka_server_group_coordinator_metrics_consumer_group_rebalance_total") >= 1
        assert total(s, "kafka_network_requestmetrics_requests_total", request="ConsumerGroupHeartbeat") >= 1
    finally:
        consumer.close()
    wait_for(lambda: value(scrape(addr), "kafka_server_group_coordinator_metrics_consumer_group_count",
                           state="Empty") == 1, TIMEOUT, interval=0.1, message="the group empty after the member left")


def test_share_fetch_requests_are_counted_per_topic_of_the_session_as_it_changes(mbroker: Any,
                                                                              topic_name: str) -> None:
    """TotalShareFetchRequestsPerSec counts a fetch once for each topic of its share session:
    the counters follow partitions added and forgotten, and a fetch with a failed partition counts
    as failed for that partition's topic only."""
    addr = metrics_address(mbroker)
    a, b = topic_name, topic_name + "-b"
    create_topic(mbroker.bootstrap, a)
    create_topic(mbroker.bootstrap, b)
    ta, tb = topic_id(mbroker.bootstrap, a), topic_id(mbroker.bootstrap, b)

    def fetches() -> tuple[float, float, float, float]:
        s = scrape(addr)
        return tuple(value(s, f"kafka_server_brokertopicmetrics_{kind}sharefetchrequests_total", topic=t)
                     for kind in ("total", "failed") for t in (a, b))  # type: ignore[return-value]

    with ShareMember(mbroker.bootstrap, new_group()) as m:
        m.join([a, b])
        assert code_of(m.fetch([(ta, 0)])) == 0  # the session opens with a's partition
        assert fetches() == (1, 0, 0, 0)
        assert code_of(m.fetch([(tb, 0)])) == 0  # b's joins it
        assert code_of(m.fetch()) == 0
        assert fetches() == (3, 2, 0, 0)
        assert code_of(m.fetch(forgotten=[(ta, 0)])) == 0  # a's leaves it
        assert fetches() == (3, 3, 0, 0)
        resp = m.fetch([(ta, 7)])  # a partition a does not have: failed, for a only
        assert code_of(resp) == 0
        assert fetches() == (4, 4, 1, 0)
        assert code_of(m.fetch(forgotten=[(ta, 7)])) == 0
        assert code_of(m.fetch()) == 0
        assert fetches() == (4, 6, 1, 0)


def code_of(resp: Any) -> int:
    return int(resp.error_code)


def test_a_refused_acknowledgement_is_a_failed_acknowledgement_request(mbroker: Any, topic_name: str) -> None:
    """A member acknowledging a record whose lock expired and went to another member: the
    partition is answered INVALID_RECORD_STATE, counted as a failed acknowledgement of the topic."""
    addr = metrics_address(mbroker)
    create_topic(mbroker.bootstrap, topic_name)
    group = new_group()
    set_earliest(mbroker.bootstrap, group, **{"share.record.lock.duration.ms": "1000"})
    produce_values(mbroker.bootstrap, topic_name, [b"contested"])
    c1 = share_consumer(mbroker.bootstrap, group, [topic_name], explicit=True)
    c2 = share_consumer(mbroker.bootstrap, group, [topic_name], explicit=True)
    try:
        (m1,) = poll_until(c1, lambda got: len(got) >= 1, TIMEOUT)
        (m2,) = poll_until(c2, lambda got: len(got) >= 1, TIMEOUT)  # after c1's lock expired
        assert m2.delivery_count() == 2
        c1.acknowledge(m1, AcknowledgeType.ACCEPT)
        assert commit_errors(c1.commit_sync(10)) == {(topic_name, 0): KafkaError.INVALID_RECORD_STATE}
        s = scrape(addr)
        assert value(s, "kafka_server_brokertopicmetrics_failedshareacknowledgementrequests_total", topic=topic_name) == 1
        assert value(s, "kafka_server_sharegroupmetrics_recordacknowledgements_total", ackType="Accept") == 0
        labels = {"group": group, "topic": topic_name, "partition": "0"}
        assert value(s, "kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total", **labels) == 1
        assert value(s, "kafka_server_sharepartitionmetrics_acquiredrecords", **labels) == 1  # c2 holds it
        assert total(s, "kafka_network_requestmetrics_errors_total", error="INVALID_RECORD_STATE") >= 1
    finally:
        _closing(c1, c2)
