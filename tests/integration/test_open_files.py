"""Open files (issues 23 and 24): the broker raises its soft open-file limit to the hard one at
start-up; its log files take at most a budget of it (half the limit), however many partitions it
has, so hundreds of partitions are created, written, read back, and restarted after kill -9 under
a limit of 256; connections over the limit wait in the backlog; and when connections took every
descriptor, writes still get theirs from the log files' cache.

Each test starts brokers of its own with RLIMIT_NOFILE set in the child process."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from sharebroker.testing import BrokerProcess, wait_for
from tests.integration import rawkafka as rk
from tests.integration.clients import admin as admin_client
from tests.integration.clients import create_topic

pytestmark = pytest.mark.needs_own_broker("sets the open-file limit of brokers of its own")

KAFKA_STORAGE_ERROR = 56




def test_the_soft_limit_is_raised_to_the_hard_one_at_start(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", open_files=(256, 4096))
    broker.start()
    try:
        # 200 partitions keep 600 files open: more than the soft limit the broker was given
        with rk.RawClient(broker.bootstrap) as client:
            (result,) = rk.create_topics(client, ("wide", 200))
        assert (int(result.error_code), result.error_message) == (0, None)
        (line,) = broker.log_events("open file limit")
        assert (line["soft_before"], line["soft"], line["hard"], line["log_files_budget"]) == (256, 4096, 4096, 2048)
    finally:
        broker.kill()


PAUSED = "accepting paused"


def test_at_the_limit_new_connections_wait_in_the_backlog_and_are_served_once_a_descriptor_frees(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", open_files=(128, 128))
    broker.start()
    clients: list[rk.RawClient] = []
    try:
        # Each connection holds one descriptor: open them until the broker has none left (it
        # logs the pause when an accept is refused, before it answers the last one it took).
        while not broker.log_events(PAUSED):
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
        # One line for each episode, however often an accept was refused within it: as many pauses
        # as ends of pauses. (Closing the clients races with the next connect, so the descriptor
        # freed for `pending` can run out once more: a second, short episode.)
        wait_for(lambda: len(broker.log_events("accepting connections again")) == len(broker.log_events(PAUSED)),
                 message="every pause ended and logged once")
        assert 1 <= len(broker.log_events(PAUSED)) <= 2
        assert broker.alive()
    finally:
        for client in clients:
            client.close()
        broker.kill()


def broker_files(broker: BrokerProcess) -> tuple[int, int]:
    """(descriptors, of which segment logs) the broker process holds."""
    assert broker.proc is not None
    fd_dir = f"/proc/{broker.proc.pid}/fd"
    targets = []
    for name in os.listdir(fd_dir):
        try:
            targets.append(os.readlink(f"{fd_dir}/{name}"))
        except FileNotFoundError:
            pass  # closed while listed
    segments = f"{broker.data_dir}/"  # not the broker's own log next to it
    return len(targets), sum(1 for t in targets if t.startswith(segments) and t.endswith(".log"))


def value(topic: str, p: int, i: int) -> bytes:
    return f"{topic}/{p}/{i}".encode()


def test_hundreds_of_partitions_under_a_limit_of_256_are_written_read_back_and_survive_kill_9(tmp_path: Path) -> None:
    limit, budget = 256, 128
    broker = BrokerProcess(tmp_path / "data", open_files=(limit, limit))
    broker.start()
    rng = random.Random(24)
    topics = [f"wide{i}" for i in range(6)]
    try:
        with rk.RawClient(broker.bootstrap, timeout=60) as client:
            results = rk.create_topics(client, *((t, 100) for t in topics))  # 600 partitions: 1,800 files
            assert [(int(r.error_code), r.error_message) for r in results] == [(0, None)] * len(topics)
            written = {(t, p): 0 for t in topics for p in range(100)}
            order = [key for key in written for _ in range(2)]
            rng.shuffle(order)
            for t, p in order:
                i = written[(t, p)]
                resp = rk.produce(client, t, p, rk.encode_batch([rk.Rec(value=value(t, p, i))]))
                assert (int(resp.error_code), int(resp.base_offset)) == (0, i)
                written[(t, p)] = i + 1
            held, logs = broker_files(broker)
            assert logs <= budget and held < limit, (held, logs)

            def check(start: dict[tuple[str, int], int]) -> None:
                keys = list(written)
                rng.shuffle(keys)
                for t, p in keys:
                    got = [r.value for r in rk.records_of(rk.fetch_all_batches(client, t, p, start.get((t, p), 0)))]
                    assert got == [value(t, p, i) for i in range(start.get((t, p), 0), written[(t, p)])], (t, p)

            check({})
            held, logs = broker_files(broker)
            assert logs <= budget and held < limit, (held, logs)

        # DeleteRecords through evicted descriptors, then kill -9: nothing acknowledged is lost.
        deleted = {(topics[0], p): 1 for p in range(0, 100, 3)}
        adm = admin_client(broker.bootstrap)  # kept alive until the futures resolve
        futures = adm.delete_records([TopicPartition(t, p, o) for (t, p), o in deleted.items()])
        for future in futures.values():
            assert future.result(timeout=30).low_watermark == 1
        broker.kill()
        broker.start()
        with rk.RawClient(broker.bootstrap, timeout=60) as client:
            check(deleted)
            first = rk.fetch(client, topics[0], 0, 0)
            assert int(first.error_code) == 1  # OFFSET_OUT_OF_RANGE below the log start offset
            held, logs = broker_files(broker)
            assert logs <= budget and held < limit, (held, logs)
    finally:
        broker.kill()


def test_when_connections_take_every_descriptor_writes_and_rolls_still_get_theirs(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", open_files=(128, 128))
    broker.start()
    clients: list[rk.RawClient] = []
    try:
        create_topic(broker.bootstrap, "rolling", 1, {"segment.bytes": str(1 << 20)})
        with rk.RawClient(broker.bootstrap, timeout=30) as client:
            def produce(topic: str, value: bytes) -> Any:
                return rk.produce(client, topic, 0, rk.encode_batch([rk.Rec(value=value)]))

            assert int(produce("rolling", b"a" * 700_000).error_code) == 0
            # Fetch's schema is loaded now: importing it later would need a descriptor too.
            assert len(rk.fetch_all_batches(client, "rolling", 0)) == 1
            while not broker.log_events(PAUSED):  # connections take every descriptor left
                other = rk.RawClient(broker.bootstrap, timeout=10)
                clients.append(other)
                other.request(rk.api_versions_request())
                assert len(clients) < 128, "the broker never ran out of descriptors"
            # The next batch does not fit the segment: the new one's files are opened with a
            # descriptor the log files' cache gives back.
            assert int(produce("rolling", b"b" * 700_000).error_code) == 0
            (result,) = rk.create_topics(client, ("more", 3))
            assert (int(result.error_code), result.error_message) == (0, None)
            assert int(produce("more", b"c").error_code) == 0
            values = [r.value[:1] for r in rk.records_of(rk.fetch_all_batches(client, "rolling", 0))]
            assert values == [b"a", b"b"]
            assert [r.value for r in rk.records_of(rk.fetch_all_batches(client, "more", 0))] == [b"c"]
        assert broker.alive()
    finally:
        for other in clients:
            other.close()
        broker.kill()
