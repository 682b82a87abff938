"""Every listener in `listeners` is served, and a client is told the advertised endpoint of the
listener its request came in on (Metadata, FindCoordinator, DescribeCluster, and Fetch's current leader
endpoint), as Kafka does."""

from __future__ import annotations

import contextlib
import datetime
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kio.index import load_request_schema

from tests.integration import rawkafka as rk
from tests.integration.clients import consume_from_beginning, create_topic, produce_sync, producer_conf
from sharebroker.testing import wait_for

pytestmark = pytest.mark.needs_own_broker("serves listeners of its own")
FENCED_LEADER_EPOCH = 74


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _two_listener_broker(tmp_path: Path) -> Iterator[tuple[int, int]]:
    internal, external = _free_port(), _free_port()
    ready = tmp_path / "ready"
    args = [sys.executable, "-m", "sharebroker", "serve", "--data-dir", str(tmp_path / "data"),
            "--listeners", f"INTERNAL://127.0.0.1:{internal},EXTERNAL://127.0.0.1:{external}",
            "--override", "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
            "--override", "inter.broker.listener.name=INTERNAL",
            "--override", f"advertised.listeners=INTERNAL://broker-internal:{internal},EXTERNAL://localhost:{external}",
            "--ready-file", str(ready), "--log-format", "json"]
    log = open(tmp_path / "broker.log", "wb")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    log.close()
    try:
        wait_for(lambda: ready.exists() or proc.poll() is not None, 20, 0.02, "the broker ready")
        assert proc.poll() is None, (tmp_path / "broker.log").read_text()[-3000:]
        yield internal, external
    finally:
        proc.terminate()
        proc.wait(15)


def _request(port: int, api_key: int, version: int, **fields: object) -> object:
    cls = load_request_schema(api_key, version)
    with rk.RawClient(f"127.0.0.1:{port}") as raw:
        return raw.request(cls(**fields))


@pytest.mark.parametrize("which", ["internal", "external"])
def test_each_listener_answers_with_its_own_advertised_endpoint(tmp_path, which):
    with _two_listener_broker(tmp_path) as (internal, external):
        port = internal if which == "internal" else external
        expected = ("broker-internal", internal) if which == "internal" else ("localhost", external)
        meta = _request(port, 3, 12, topics=None, allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False)
        assert [(b.host, b.port) for b in meta.brokers] == [expected]
        coord = _request(port, 10, 4, key_type=0, coordinator_keys=("g",))
        assert [(c.host, c.port) for c in coord.coordinators] == [expected]
        cluster = _request(port, 60, 1, include_cluster_authorized_operations=False, endpoint_type=1)
        assert [(b.host, b.port) for b in cluster.brokers] == [expected]

        # A fetch from an older leader epoch than the partition's (Kafka fences any epoch below
        # the leader's but -1) names the current leader and its endpoint on this listener (KIP-951).
        topic = f"fenced-{which}"
        create = rk.req_cls(19, 7)
        ctopic = rk._nested(create, "topics")
        _request(port, 19, 7, topics=(ctopic(name=topic, num_partitions=1, replication_factor=1, assignments=(), configs=()),),
                 timeout=datetime.timedelta(seconds=10), validate_only=False)
        meta = _request(port, 3, 12, topics=(rk._nested(rk.req_cls(3, 12), "topics")(topic_id=None, name=topic),),
                        allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        (t,) = meta.topics
        fetch = rk.req_cls(1, 16)
        tcls = rk._nested(fetch, "topics")
        pcls = rk._nested(tcls, "partitions")
        part = pcls(partition=0, current_leader_epoch=-2, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                    partition_max_bytes=1 << 20)
        resp = _request(port, 1, 16, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                        session_id=0, session_epoch=-1, topics=(tcls(topic_id=t.topic_id, partitions=(part,)),),
                        forgotten_topics_data=(), rack_id="")
        (p,) = resp.responses[0].partitions
        assert int(p.error_code) == FENCED_LEADER_EPOCH
        assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (1, 0)
        assert [(n.node_id, n.host, n.port) for n in resp.node_endpoints] == [(1, *expected)]


def test_a_client_on_the_second_listener_produces_and_one_on_the_first_consumes(tmp_path, topic_name):
    with _two_listener_broker(tmp_path) as (internal, external):
        outside = f"localhost:{external}"  # advertised as localhost: a client there stays on it
        create_topic(outside, topic_name)
        produce_sync(Producer(producer_conf(outside, **{"broker.address.family": "v4"})), topic_name,
                     [{"value": b"from outside"}])
        # The internal listener advertises a name only the compose network resolves; a client
        # here reaches it through a bootstrap-only raw fetch instead.
        with rk.RawClient(f"127.0.0.1:{internal}") as raw:
            batches = rk.fetch_all_batches(raw, topic_name, 0)
        assert [r.value for r in rk.records_of(batches)] == [b"from outside"]
        assert [m.value() for m in consume_from_beginning(outside, topic_name, 1,
                                                          **{"broker.address.family": "v4"})] == [b"from outside"]
