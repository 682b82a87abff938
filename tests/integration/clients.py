"""Small helpers around the PyPI clients, shared by the integration tests: configs with short
timeouts (a hang fails fast), topic creation, and consuming with a deadline."""

from __future__ import annotations

import socket
import time
import uuid
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def producer_conf(bootstrap: str, **extra: Any) -> dict[str, Any]:
    conf = {"bootstrap.servers": bootstrap, "socket.timeout.ms": 5000, "message.timeout.ms": 10000,
            "request.timeout.ms": 5000, "linger.ms": 5, "log_level": 3}
    conf.update(extra)
    return conf


def consumer_conf(bootstrap: str, **extra: Any) -> dict[str, Any]:
    conf = {"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False, "auto.offset.reset": "earliest", "socket.timeout.ms": 5000,
            "fetch.wait.max.ms": 100, "session.timeout.ms": 6000, "log_level": 3}
    conf.update(extra)
    return conf


def address_seen_by(bootstrap: str) -> str:
    """This machine's address as the broker at `bootstrap` sees a connection from it: 127.0.0.1 for
    a local broker, the container's address on a compose network."""
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        return s.getsockname()[0]


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 5000, "log_level": 3})


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    a = admin(bootstrap)  # keep the handle alive until the future resolves
    fut = a.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                    config=config or {})], request_timeout=10)[name]
    fut.result(timeout=15)


def produce_sync(producer: Producer, topic: str, items: list[dict[str, Any]], timeout: float = 15.0) -> list[Any]:
    """Produce each item (kwargs for Producer.produce) and return the delivered messages in order."""
    reports: list[Any] = [None] * len(items)

    def on_delivery(i: int):
        def cb(err: KafkaError | None, msg: Any) -> None:
            reports[i] = err if err is not None else msg
        return cb

    for i, item in enumerate(items):
        producer.produce(topic, on_delivery=on_delivery(i), **item)
        producer.poll(0)
    remaining = producer.flush(timeout)
    assert remaining == 0, f"{remaining} messages not delivered within {timeout}s"
    errors = [r for r in reports if isinstance(r, KafkaError) or r is None]
    assert not errors, f"delivery failed: {errors[:5]}"
    return reports


def consume_n(consumer: Consumer, n: int, timeout: float = 15.0) -> list[Any]:
    """Poll until n messages arrived (errors fail the test) or the deadline passes."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error() is not None:
            if msg.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise AssertionError(f"consumer error: {msg.error()}")
        got.append(msg)
    assert len(got) >= n, f"consumed {len(got)} of {n} messages within {timeout}s"
    return got


def consume_from_beginning(bootstrap: str, topic: str, n: int, partition: int = 0, timeout: float = 15.0,
                           **extra: Any) -> list[Any]:
    c = Consumer(consumer_conf(bootstrap, **extra))
    try:
        c.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        return consume_n(c, n, timeout)
    finally:
        c.close()
