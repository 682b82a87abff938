"""Deleting a topic that a producer is still writing to, as Apache Kafka 4.2 (KRaft) behaves.

Kafka does not stop a running producer from re-creating a deleted topic: the producer's next
Metadata request (librdkafka producers allow auto-creation by default) triggers auto-creation
through the broker's AutoTopicCreationManager. That creation is asynchronous: the Metadata request
that triggers it is answered UNKNOWN_TOPIC_OR_PARTITION, and the topic appears afterwards with
num.partitions and a new topic id. librdkafka keeps its queued records through that answer (it
allows topic.metadata.propagation.max.ms before it believes a known topic gone), then sees the
topic id change and the partition count drop, and fails only the records queued for partitions
the new topic does not have ("Local: Unknown partition"). A CreateTopics issued after that fails
with TOPIC_ALREADY_EXISTS; CreatePartitions is how the topic gets its partitions back.

Real clients (confluent-kafka Producer and AdminClient) against a broker subprocess; waits are
conditions with deadlines."""

from __future__ import annotations

import logging
import threading
import uuid
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import NewPartitions, NewTopic

from tests.integration import rawkafka as rk
from tests.integration.clients import admin, create_topic, produce_sync, producer_conf
from sharebroker.testing import wait_for

TIMEOUT = 20.0
UNKNOWN_TOPIC_OR_PARTITION = 3


def described(bootstrap: str, topic: str) -> tuple[int, uuid.UUID | None, int]:
    """(error code, topic id, partition count) from a Metadata request that never auto-creates."""
    with rk.RawClient(bootstrap) as raw:
        (t,) = raw.request(rk.metadata_request([topic], version=12, allow_auto=False)).topics
    tid = t.topic_id if t.topic_id is not None and t.topic_id.int != 0 else None
    return int(t.error_code), tid, len(t.partitions)


class LibrdkafkaLog(logging.Handler):
    """librdkafka's own log lines (debug contexts metadata and topic), as the producer saw things."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock:
            self.lines.append(record.getMessage())

    def since(self, mark: int, *fragments: str) -> list[str]:
        with self._lock:
            return [line for line in self.lines[mark:] if all(f in line for f in fragments)]

    def mark(self) -> int:
        with self._lock:
            return len(self.lines)


class RunningProducer:
    """A confluent-kafka Producer writing keyed records to `topic` from its own thread until stopped,
    with a delivery report for every record it produced."""

    def __init__(self, bootstrap: str, topic: str, log: LibrdkafkaLog) -> None:
        logger = logging.getLogger(f"librdkafka.{uuid.uuid4().hex[:8]}")
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        logger.addHandler(log)
        # allow.auto.create.topics keeps the producer default (true); a short periodic metadata
        # refresh lets the test see the producer pick up added partitions without waiting minutes.
        self.producer = Producer(producer_conf(bootstrap, **{"message.timeout.ms": 60000, "debug": "metadata,topic",
                                                             "log_level": 7, "topic.metadata.refresh.interval.ms": 500}),
                                 logger=logger)
        self.topic = topic
        self.produced = 0
        self.delivered: dict[int, int] = {}
        self.errors: list[KafkaError] = []
        self.failed_partitions: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _report(self, err: KafkaError | None, msg: Any) -> None:
        with self._lock:
            if err is not None:
                self.errors.append(err)
                self.failed_partitions.add(msg.partition())
            else:
                self.delivered[msg.partition()] = self.delivered.get(msg.partition(), 0) + 1

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.producer.produce(self.topic, key=f"k{self.produced}".encode(), value=b"v",
                                      on_delivery=self._report)
                self.produced += 1
            except BufferError:
                pass
            self.producer.poll(0.002)

    def delivered_to(self, partition: int) -> int:
        with self._lock:
            return self.delivered.get(partition, 0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        assert self.producer.flush(30) == 0, "records left without a delivery report"


@pytest.fixture
def librdkafka_log() -> LibrdkafkaLog:
    return LibrdkafkaLog()


def test_metadata_auto_creation_is_answered_unknown_topic_and_creates_the_topic_afterwards(make_broker, topic_name):
    b = make_broker({"num.partitions": "2"}).bootstrap
    with rk.RawClient(b) as raw:  # the Metadata request a producer sends (AllowAutoTopicCreation true)
        (t,) = raw.request(rk.metadata_request([topic_name], version=12, allow_auto=True)).topics
    assert (int(t.error_code), len(t.partitions)) == (UNKNOWN_TOPIC_OR_PARTITION, 0)
    code, tid, partitions = wait_for(lambda: (r := described(b, topic_name))[0] == 0 and r, TIMEOUT, 0.02,
                                     "the topic created after the answer")
    assert tid is not None and partitions == 2  # num.partitions
    p = Producer(producer_conf(b))
    (report,) = produce_sync(p, topic_name, [{"value": b"first"}])
    assert report.topic() == topic_name

    # Nothing is created for a name no topic may have, or when the broker disables auto-creation.
    with rk.RawClient(b) as raw:
        (bad,) = raw.request(rk.metadata_request(["bad/name"], version=12, allow_auto=True)).topics
    assert int(bad.error_code) == 17  # INVALID_TOPIC_EXCEPTION
    # Internal topics are left to their coordinators (their own partition counts, not num.partitions).
    with rk.RawClient(b) as raw:
        (internal,) = raw.request(rk.metadata_request(["__consumer_offsets"], version=12, allow_auto=True)).topics
        raw.request(rk.metadata_request([], version=12))  # a round trip after the answer
    assert int(internal.error_code) == UNKNOWN_TOPIC_OR_PARTITION
    assert described(b, "__consumer_offsets")[0] == UNKNOWN_TOPIC_OR_PARTITION
    off = make_broker({"auto.create.topics.enable": "false"}, name="off").bootstrap
    with rk.RawClient(off) as raw:
        (t,) = raw.request(rk.metadata_request([topic_name], version=12, allow_auto=True)).topics
    assert int(t.error_code) == UNKNOWN_TOPIC_OR_PARTITION
    assert described(off, topic_name)[0] == UNKNOWN_TOPIC_OR_PARTITION


def test_a_running_producer_re_creates_a_deleted_topic_as_in_kafka(make_broker, topic_name, librdkafka_log):
    b = make_broker().bootstrap  # num.partitions 1, auto.create.topics.enable true: Kafka's defaults
    create_topic(b, topic_name, partitions=3)
    _, old_id, _ = described(b, topic_name)
    running = RunningProducer(b, topic_name, librdkafka_log)
    a = admin(b)
    try:
        wait_for(lambda: all(running.delivered_to(p) >= 20 for p in range(3)), TIMEOUT, 0.02,
                 "records delivered to the three partitions")

        mark = librdkafka_log.mark()
        a.delete_topics([topic_name], request_timeout=10)[topic_name].result(15)

        # The producer's next Metadata request triggers auto-creation and is answered
        # UNKNOWN_TOPIC_OR_PARTITION, which librdkafka rides out (propagation allowance) ...
        wait_for(lambda: librdkafka_log.since(mark, f"Error in metadata reply for topic {topic_name} ",
                                              "Unknown topic or partition"),
                 TIMEOUT, 0.02, "the producer's Metadata answered UNKNOWN_TOPIC_OR_PARTITION")
        # librdkafka's log lines reach Python from its queue, one poll at a time: wait for this one too
        wait_for(lambda: librdkafka_log.since(mark, "TOPICPROP", topic_name, "metadata propagation"), TIMEOUT, 0.02,
                 "the producer allowing for metadata propagation")

        # ... and the topic comes back, created afterwards with num.partitions and a new topic id.
        code, new_id, partitions = wait_for(lambda: (r := described(b, topic_name))[0] == 0 and r, TIMEOUT, 0.02,
                                            "the topic auto-created again")
        assert partitions == 1 and new_id is not None and new_id != old_id
        wait_for(lambda: librdkafka_log.since(mark, f"Topic {topic_name} changed id from "), TIMEOUT, 0.02,
                 "the producer saw the new topic id")
        wait_for(lambda: librdkafka_log.since(mark, f"Topic {topic_name} ", "partition count changed from 3 to 1"),
                 TIMEOUT, 0.02, "the producer saw the partition count drop")

        # The running producer got there first: an explicit CreateTopics now finds the topic, as in
        # Kafka; CreatePartitions gives it its partitions back and the producer spreads over them.
        (fut,) = a.create_topics([NewTopic(topic_name, num_partitions=6, replication_factor=1)],
                                 request_timeout=10).values()
        with pytest.raises(Exception) as exc:
            fut.result(15)
        assert exc.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS, exc.value
        (fut,) = a.create_partitions([NewPartitions(topic_name, 6)], request_timeout=10).values()
        fut.result(15)
        wait_for(lambda: running.delivered_to(5) >= 5, TIMEOUT, 0.02, "records delivered to an added partition")
        assert described(b, topic_name)[1:] == (new_id, 6)
    finally:
        running.stop()

    # Every record got its report; the only failures are librdkafka's for records that were queued
    # for partitions 1 and 2 when the re-created topic came back with one partition: UNKNOWN_PARTITION,
    # or DESTROY for those still on a partition's own queue when librdkafka dropped that partition.
    assert sum(running.delivered.values()) + len(running.errors) == running.produced
    assert {e.code() for e in running.errors} <= {KafkaError._UNKNOWN_PARTITION, KafkaError._DESTROY}, running.errors[:5]
    assert running.failed_partitions <= {1, 2}, running.failed_partitions
