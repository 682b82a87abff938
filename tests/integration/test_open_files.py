"""Running out of file descriptors (issue 23): the broker raises its soft open-file limit to the
hard one at start-up; under a limit it cannot raise, creating partitions until they no longer fit
answers every request (KAFKA_STORAGE_ERROR for what does not fit, nothing half-created), new
connections are still served, deleting topics makes room again, and a restart that cannot open
its files says what to raise instead of failing with a traceback.

Each test starts brokers of its own with RLIMIT_NOFILE set in the child process."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest

from sharebroker.testing import BrokerProcess
from tests.integration import rawkafka as rk

pytestmark = pytest.mark.needs_own_broker("sets the open-file limit of brokers of its own")

KAFKA_STORAGE_ERROR = 56


def create_topics(client: rk.RawClient, *topics: tuple[str, int]) -> list[Any]:
    """Raw CreateTopics v7 (a client library would retry or hide per-topic errors)."""
    create = rk.req_cls(19, 7)
    topic = rk._nested(create, "topics")
    resp = client.request(create(topics=tuple(topic(name=name, num_partitions=n, replication_factor=1, assignments=(),
                                                    configs=()) for name, n in topics),
                                 timeout=datetime.timedelta(seconds=10), validate_only=False), timeout=30)
    return list(resp.topics)


def log_events(broker: BrokerProcess, event: str) -> list[dict[str, Any]]:
    lines = []
    for line in broker.log_text().splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if doc.get("event") == event:
            lines.append(doc)
    return lines


def test_the_soft_limit_is_raised_to_the_hard_one_at_start(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", open_files=(256, 4096))
    broker.start()
    try:
        # 200 partitions keep 600 files open: more than the soft limit the broker was given
        with rk.RawClient(broker.bootstrap) as client:
            (result,) = create_topics(client, ("wide", 200))
        assert (int(result.error_code), result.error_message) == (0, None)
        (line,) = log_events(broker, "open file limit")
        assert (line["soft_before"], line["soft"], line["hard"]) == (256, 4096, 4096)
    finally:
        broker.kill()


PAUSED = "accepting paused: out of file descriptors"


def test_at_the_limit_new_connections_wait_in_the_backlog_and_are_served_once_a_descriptor_frees(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", open_files=(128, 128))
    broker.start()
    clients: list[rk.RawClient] = []
    try:
        # Each connection holds one descriptor: open them until the broker has none left (it
        # logs the pause when an accept is refused, before it answers the last one it took).
        while not log_events(broker, PAUSED):
            client = rk.RawClient(broker.bootstrap, timeout=10)
            clients.append(client)
            assert int(client.request(rk.api_versions_request()).error_code) == 0
            assert len(clients) < 128, "the broker never ran out of descriptors"
        pending = rk.RawClient(broker.bootstrap, timeout=10)
        pending.send(rk.api_versions_request())
        # The connection is queued, not dropped: freeing one descriptor gets it served.
        clients.pop(0).close()
        pending.recv_frame(timeout=10)
        pending.close()
        for client in clients:
            client.close()
        with rk.RawClient(broker.bootstrap) as again:
            assert int(again.request(rk.api_versions_request()).error_code) == 0
        # One line for the whole episode, however often an accept was refused within it.
        assert len(log_events(broker, PAUSED)) == 1
        assert log_events(broker, "accepting connections again")
        assert broker.alive()
    finally:
        for client in clients:
            client.close()
        broker.kill()
