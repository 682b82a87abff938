"""Client quotas: AlterClientQuotas (49) / DescribeClientQuotas (48) with Kafka's validation, set
with `sharebroker configs` like kafka-configs.sh, durable across kill -9, and applied as Kafka
applies them: throttle_time_ms in the response and no further reads from the connection until it
has passed (KIP-219), for produce bytes, fetch bytes, request time and controller mutations.

The brokers use 2 quota windows of 1 s, so a throttle is at most 2 s."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer

from sharebroker.testing.plugin import Broker
from tests.integration import rawkafka as rk
from tests.integration.clients import create_topic

pytestmark = pytest.mark.needs_own_broker("sets client quotas, which apply broker-wide")

FAST_WINDOWS = {"quota.window.num": "2", "quota.window.size.seconds": "1"}
INVALID_REQUEST, THROTTLING_QUOTA_EXCEEDED = 42, 89
ME = "ANONYMOUS"  # the user of every PLAINTEXT client


@pytest.fixture
def quota_broker(make_broker) -> Broker:
    return make_broker(FAST_WINDOWS)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def alter(bootstrap: str, entity: list[tuple[str, str | None]], ops: list[tuple[str, float, bool]],
          validate_only: bool = False, version: int = 1) -> list[tuple[int, str | None]]:
    cls = rk.req_cls(49, version)
    entry_cls = rk._nested(cls, "entries")
    entity_cls = rk._nested(entry_cls, "entity")
    op_cls = rk._nested(entry_cls, "ops")
    with rk.RawClient(bootstrap) as raw:
        resp = raw.request(cls(entries=(entry_cls(
            entity=tuple(entity_cls(entity_type=t, entity_name=n) for t, n in entity),
            ops=tuple(op_cls(key=k, value=v, remove=r) for k, v, r in ops)),), validate_only=validate_only))
    return [(int(e.error_code), e.error_message) for e in resp.entries]


def describe(bootstrap: str, components: list[tuple[str, int, str | None]], strict: bool = False) -> dict:
    cls = rk.req_cls(48, 1)
    comp_cls = rk._nested(cls, "components")
    with rk.RawClient(bootstrap) as raw:
        resp = raw.request(cls(components=tuple(comp_cls(entity_type=t, match_type=m, match=x)
                                                for t, m, x in components), strict=strict))
    assert int(resp.error_code) == 0, resp
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in resp.entries}


def configs_cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sharebroker", "configs", "--bootstrap-server", bootstrap, *args],
                          check=False, capture_output=True, text=True, timeout=60)


# -- the APIs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("entity, ops, message", [
    ([("user", "alice")], [("no_such_quota", 1.0, False)], "Invalid configuration key no_such_quota"),
    ([("user", "alice")], [("producer_byte_rate", 0.0, False)], "Quota producer_byte_rate must be greater than 0"),
    ([("user", "alice")], [("producer_byte_rate", 10.5, False)], "producer_byte_rate cannot be a fractional value."),
    ([("user", "alice")], [("producer_byte_rate", 1e30, False)],
     "Proposed value for producer_byte_rate is too large for a LONG."),
    ([("ip", "127.0.0.1"), ("user", "alice")], [("connection_creation_rate", 1.0, False)],
     "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
    ([("ip", "127.0.0.1")], [("producer_byte_rate", 1.0, False)], "Invalid configuration key producer_byte_rate"),
    ([("group", "g")], [("producer_byte_rate", 1.0, False)], "Unhandled client quota entity type: group"),
    ([("user", "")], [("producer_byte_rate", 1.0, False)], "Empty user not supported"),
    ([], [("producer_byte_rate", 1.0, False)], "Invalid empty client quota entity"),
])
def test_invalid_alterations_are_refused_as_kafka_refuses_them(quota_broker, entity, ops, message) -> None:
    assert alter(quota_broker.bootstrap, entity, ops) == [(INVALID_REQUEST, message)]
    assert describe(quota_broker.bootstrap, []) == {}


def test_alter_describe_defaults_and_filters(quota_broker) -> None:
    b = quota_broker.bootstrap
    assert alter(b, [("user", "alice"), ("client-id", "app")], [("producer_byte_rate", 1024, False),
                                                                 ("request_percentage", 12.5, False)]) == [(0, None)]
    assert alter(b, [("user", None)], [("consumer_byte_rate", 2048, False)]) == [(0, None)]
    assert alter(b, [("client-id", "app")], [("controller_mutation_rate", 5, False)], validate_only=True) == [(0, None)]
    everything = describe(b, [])
    assert everything == {
        (("client-id", "app"), ("user", "alice")): {"producer_byte_rate": 1024.0, "request_percentage": 12.5},
        (("user", None),): {"consumer_byte_rate": 2048.0}}
    # MATCH_EXACT user alice (not strict: the user+client entity too), MATCH_DEFAULT user, SPECIFIED client
    assert set(describe(b, [("user", 0, "alice")])) == {(("client-id", "app"), ("user", "alice"))}
    assert set(describe(b, [("user", 0, "alice")], strict=True)) == set()
    assert set(describe(b, [("user", 1, None)])) == {(("user", None),)}
    assert set(describe(b, [("client-id", 2, None)])) == {(("client-id", "app"), ("user", "alice"))}
    # removing the last key removes the entity
    assert alter(b, [("user", None)], [("consumer_byte_rate", 0, True)]) == [(0, None)]
    assert set(describe(b, [])) == {(("client-id", "app"), ("user", "alice"))}


def test_configs_cli_and_durability_across_kill_9(quota_broker) -> None:
    b = quota_broker.bootstrap
    r = configs_cli(b, "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
                    "--entity-name", "app", "--alter", "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2048")
    assert r.returncode == 0, r.stderr
    assert "Completed updating config for user alice." in r.stdout
    r = configs_cli(b, "--entity-type", "clients", "--entity-default", "--alter", "--add-config",
                    "request_percentage=50")
    assert r.returncode == 0, r.stderr
    quota_broker.kill()
    quota_broker.start()
    out = configs_cli(quota_broker.bootstrap, "--entity-type", "users", "--entity-name", "alice", "--entity-type",
                      "clients", "--entity-name", "app", "--describe")
    assert out.returncode == 0, out.stderr
    assert "Quota configs for user-principal 'alice', client-id 'app' are " in out.stdout
    assert "producer_byte_rate=1048576.0" in out.stdout and "consumer_byte_rate=2048.0" in out.stdout
    out = configs_cli(quota_broker.bootstrap, "--entity-type", "clients", "--entity-default", "--describe")
    assert "request_percentage=50.0" in out.stdout


# -- throttling --------------------------------------------------------------------------------------


def _batch(size: int) -> bytes:
    return rk.encode_batch([rk.Rec(b"x" * size)])


def test_producer_over_its_byte_rate_is_throttled_and_muted(quota_broker) -> None:
    b = quota_broker.bootstrap
    topic = unique("q")
    create_topic(b, topic)
    # 10 KB/s for every client of user ANONYMOUS with client id "slow"; other client ids are free
    assert alter(b, [("user", ME), ("client-id", "slow")], [("producer_byte_rate", 10_000, False)]) == [(0, None)]
    with rk.RawClient(b, client_id="slow") as raw:
        resp = raw.request(rk.produce_request(topic, 0, _batch(30_000)))
        throttle_ms = int(resp.throttle_time.total_seconds() * 1000)
        assert int(resp.responses[0].partition_responses[0].error_code) == 0  # accepted, then throttled
        assert 0 < throttle_ms <= 2000
        # the connection is muted for that long: the next request is read only after it
        started = time.monotonic()
        raw.request(rk.metadata_request([topic]))
        assert time.monotonic() - started >= throttle_ms / 1000 * 0.9
    with rk.RawClient(b, client_id="fast") as raw:
        resp = raw.request(rk.produce_request(topic, 0, _batch(30_000)))
        assert resp.throttle_time == datetime.timedelta(0)


def test_librdkafka_sees_the_throttle(quota_broker) -> None:
    b = quota_broker.bootstrap
    topic = unique("q")
    create_topic(b, topic)
    assert alter(b, [("client-id", None)], [("producer_byte_rate", 20_000, False)]) == [(0, None)]
    stats: list[dict[str, Any]] = []
    throttles: list[int] = []
    p = Producer({"bootstrap.servers": b, "client.id": "rdkafka-q", "linger.ms": 0, "statistics.interval.ms": 100,
                  "stats_cb": lambda s: stats.append(json.loads(s)), "throttle_cb": lambda e: throttles.append(
                      int(e.throttle_time * 1000)), "log_level": 3})
    for _ in range(10):
        p.produce(topic, b"y" * 20_000)
        p.poll(0)
    assert p.flush(30) == 0
    deadline = time.monotonic() + 10
    while not throttles and time.monotonic() < deadline:
        p.poll(0.1)
    assert throttles and max(throttles) > 0  # the client read throttle_time_ms from the responses


def test_fetch_over_consumer_byte_rate_is_throttled(quota_broker) -> None:
    b = quota_broker.bootstrap
    topic = unique("q")
    create_topic(b, topic)
    with rk.RawClient(b, client_id="loader") as raw:
        raw.request(rk.produce_request(topic, 0, _batch(50_000)))
    assert alter(b, [("user", ME)], [("consumer_byte_rate", 30_000, False)]) == [(0, None)]
    with rk.RawClient(b, client_id="reader") as raw:
        # 50 KB at once is over 30 KB/s: as Kafka, the answer is empty, with the throttle time, and the
        # bytes are not counted, so after the throttle the same fetch is served
        resp = raw.request(rk.fetch_request(topic, 0, 0))
        throttle_ms = int(resp.throttle_time.total_seconds() * 1000)
        assert int(resp.error_code) == 0 and resp.responses == ()
        assert 0 < throttle_ms <= 2000
        # fetching again (each request read once the previous throttle has passed) is served
        deadline = time.monotonic() + 15
        while not (again := raw.request(rk.fetch_request(topic, 0, 0))).responses:
            assert time.monotonic() < deadline, "never served again"
    assert again.responses[0].partitions[0].records


def test_request_percentage_throttles_any_request(quota_broker) -> None:
    b = quota_broker.bootstrap
    assert alter(b, [("client-id", "busy")], [("request_percentage", 0.01, False)]) == [(0, None)]
    # The quota is 0.01% of a thread over the 10 s window, 1 ms of request time: however fast the
    # broker answers, enough requests use it up. Each request's time is what it is; the test only
    # waits (with a deadline) for the throttle the used-up quota must bring.
    other = rk.RawClient(b, client_id="idle")
    with rk.RawClient(b, client_id="busy") as raw, other:
        deadline = time.monotonic() + 20
        while not int(raw.request(rk.metadata_request(None)).throttle_time.total_seconds() * 1000):
            assert time.monotonic() < deadline, "no throttle while the quota was used up"
        # another client id has its own (unbounded) quota
        assert int(other.request(rk.metadata_request(None)).throttle_time.total_seconds() * 1000) == 0


def test_controller_mutation_rate(quota_broker) -> None:
    b = quota_broker.bootstrap
    # 1 partition per second, a burst of 2 (2 windows of 1 s)
    assert alter(b, [("client-id", "creator")], [("controller_mutation_rate", 1, False)]) == [(0, None)]
    create = rk.req_cls(19, 7)
    topic_cls = rk._nested(create, "topics")

    def create_one(raw: rk.RawClient, name: str, partitions: int) -> Any:
        return raw.request(create(topics=(topic_cls(name=name, num_partitions=partitions, replication_factor=1,
                                                    assignments=(), configs=()),),
                                  timeout=datetime.timedelta(seconds=10), validate_only=False))

    with rk.RawClient(b, client_id="creator") as raw, rk.RawClient(b, client_id="creator") as other:
        # within the burst when it starts: accepted, and the bucket is now 2 partitions short
        resp = create_one(raw, unique("mq"), 4)
        assert int(resp.topics[0].error_code) == 0
        assert int(resp.throttle_time.total_seconds() * 1000) > 0
        # the same client id on another connection (this one is muted): refused while the bucket is empty
        resp = create_one(other, unique("mq"), 1)
        (refused,) = resp.topics
        assert (int(refused.error_code), refused.error_message) == (
            THROTTLING_QUOTA_EXCEEDED, "The throttling quota has been exceeded.")
        assert int(resp.throttle_time.total_seconds() * 1000) > 0
        # a version before strict quotas (v5) is accepted and only throttled
        old = rk.req_cls(19, 5)
        old_topic = rk._nested(old, "topics")
        with rk.RawClient(b, client_id="creator") as third:
            resp = third.request(old(topics=(old_topic(name=unique("mq"), num_partitions=1, replication_factor=1,
                                                       assignments=(), configs=()),),
                                     timeout=datetime.timedelta(seconds=10), validate_only=False))
        assert int(resp.topics[0].error_code) == 0 and int(resp.throttle_time.total_seconds() * 1000) > 0


def test_connection_creation_rate_per_ip(quota_broker) -> None:
    b = quota_broker.bootstrap
    from tests.integration.clients import address_seen_by
    ip = address_seen_by(b)
    assert alter(b, [("ip", ip)], [("connection_creation_rate", 2, False)]) == [(0, None)]
    answered, closed = 0, 0
    clients = [rk.RawClient(b) for _ in range(6)]  # at once: well over 2 a second
    try:
        for raw in clients:
            try:
                raw.request(rk.api_versions_request(3), timeout=5)
                answered += 1
            except (rk.ConnectionClosed, ConnectionResetError):  # refused: closed after the throttle time
                closed += 1
    finally:
        for raw in clients:
            raw.close()
    assert answered >= 1 and closed >= 1, (answered, closed)
    assert quota_broker.log_events("connection throttled")


def test_quotas_off_cost_nothing_and_answer_zero(make_broker) -> None:
    proc = make_broker(FAST_WINDOWS)
    with rk.RawClient(proc.bootstrap) as raw:
        resp = raw.request(rk.metadata_request(None))
    assert resp.throttle_time == datetime.timedelta(0)

