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
from confluent_kafka import Producer

from sharebroker.testing import BrokerProcess, wait_for
from tests.integration import rawkafka as rk
from tests.integration.clients import consume_from_beginning, create_topic, produce_sync, producer_conf

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
        assert (line["soft_before"], line["soft"], line["hard"]) == (256, 4096, 4096)
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


def metadata_topics(client: rk.RawClient) -> set[str]:
    return {t.name for t in client.request(rk.metadata_request(None)).topics}


def test_creating_topics_until_the_limit_answers_every_request_and_the_broker_keeps_serving(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data, open_files=(256, 256))  # raising the soft limit to the hard one does not help
    broker.start()
    clients: list[rk.RawClient] = []
    try:
        producer = Producer(producer_conf(broker.bootstrap))
        with rk.RawClient(broker.bootstrap, timeout=30) as admin:
            assert int(rk.create_topics(admin, ("kept", 1))[0].error_code) == 0
            produce_sync(producer, "kept", [{"value": b"before"}])

            created: list[str] = []
            while True:  # one partition (three files) per topic until one does not fit
                name = f"t{len(created)}"
                (result,) = rk.create_topics(admin, (name, 1))
                if int(result.error_code):
                    break
                created.append(name)
                assert len(created) < 256, "the limit was never reached"
            failed = name
            assert int(result.error_code) == KAFKA_STORAGE_ERROR
            assert result.error_message.startswith(f"Error while creating log for {failed}-0 in dir {data} (Too many "
                                                   f"open files"), result.error_message
            assert len(created) > 40
            # Nothing of the failed topic is left: no directory, no metadata, no topic.
            assert not (data / f"{failed}-0").exists()
            assert failed not in json.loads((data / "sharebroker-metadata.json").read_text())["topics"]
            # A new connection is served, and so are producers and consumers of existing topics.
            with rk.RawClient(broker.bootstrap) as fresh:
                assert int(fresh.request(rk.api_versions_request()).error_code) == 0
                assert set(created) | {"kept"} <= metadata_topics(fresh) and failed not in metadata_topics(fresh)
            produce_sync(producer, "kept", [{"value": b"at the limit"}])
            assert [m.value() for m in consume_from_beginning(broker.bootstrap, "kept", 2)] == [b"before",
                                                                                              b"at the limit"]

            # Connections take the last descriptors: creating is refused even then, and answered.
            while not broker.log_events(PAUSED):
                client = rk.RawClient(broker.bootstrap, timeout=10)
                clients.append(client)
                client.request(rk.api_versions_request())
                assert len(clients) < 256, "the broker never ran out of descriptors"
            (result,) = rk.create_topics(admin, (failed, 1))
            assert int(result.error_code) == KAFKA_STORAGE_ERROR and "Too many open files" in result.error_message
            assert not (data / f"{failed}-0").exists()
            assert failed not in metadata_topics(admin)
            for client in clients:
                client.close()
            clients.clear()

            # Deleting topics gives their descriptors back: the failed name can be created now.
            delete = rk.req_cls(20, 6)
            dtopic = rk._nested(delete, "topics")
            resp = admin.request(delete(topics=tuple(dtopic(name=n, topic_id=None) for n in created[:10]),
                                        timeout=datetime.timedelta(seconds=10)))
            assert [int(r.error_code) for r in resp.responses] == [0] * 10
            (result,) = rk.create_topics(admin, (failed, 1))
            assert (int(result.error_code), result.error_message) == (0, None)
        producer.flush(5)
        del producer
        assert broker.stop() == 0
        kept = set(created[10:]) | {failed, "kept"}

        # The same limit: the data directory fits it (creation kept room), so it starts.
        broker.start()
        with rk.RawClient(broker.bootstrap) as client:
            assert kept <= metadata_topics(client)
        assert broker.stop() == 0

        # A limit it cannot fit: a clear message and a non-zero exit, no traceback.
        broker.open_files = (128, 128)
        with pytest.raises(RuntimeError) as err:
            broker.start()
        assert broker.proc is not None and broker.proc.returncode == 1
        assert "needs about" in str(err.value) and "ulimit -n" in str(err.value), str(err.value)
        assert "Traceback" not in broker.log_text()

        # A higher limit serves everything again.
        broker.open_files = (1024, 1024)
        broker.start()
        with rk.RawClient(broker.bootstrap) as client:
            assert kept <= metadata_topics(client)
            (result,) = rk.create_topics(client, ("after-restart", 5))
            assert int(result.error_code) == 0
        assert [m.value() for m in consume_from_beginning(broker.bootstrap, "kept", 2)] == [b"before", b"at the limit"]
    finally:
        for client in clients:
            client.close()
        broker.kill()


def test_a_segment_roll_at_the_limit_is_answered_and_done_once_descriptors_free(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", open_files=(128, 128))
    broker.start()
    clients: list[rk.RawClient] = []
    try:
        create_topic(broker.bootstrap, "rolling", 1, {"segment.bytes": str(1 << 20)})
        with rk.RawClient(broker.bootstrap, timeout=30) as client:
            def produce(value: bytes) -> Any:
                return rk.produce(client, "rolling", 0, rk.encode_batch([rk.Rec(value=value)]))

            assert int(produce(b"a" * 700_000).error_code) == 0
            while not broker.log_events(PAUSED):  # connections take every descriptor left
                other = rk.RawClient(broker.bootstrap, timeout=10)
                clients.append(other)
                other.request(rk.api_versions_request())
                assert len(clients) < 128, "the broker never ran out of descriptors"
            # The next batch does not fit the segment: the new one cannot be opened.
            refused = produce(b"b" * 700_000)
            assert int(refused.error_code) == KAFKA_STORAGE_ERROR
            assert "Too many open files" in refused.error_message, refused.error_message
            for other in clients[:4]:
                other.close()
            wait_for(lambda: int(produce(b"b" * 700_000).error_code) == 0, message="the roll once descriptors freed")
            values = [r.value[:1] for r in rk.records_of(rk.fetch_all_batches(client, "rolling", 0))]
            assert values == [b"a", b"b"]
        assert broker.alive()
    finally:
        for other in clients:
            other.close()
        broker.kill()
