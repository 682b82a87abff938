"""Two brokers on one data directory (issue 11 defect 3): the second stops with Kafka's message
before it touches any file, and the first keeps its files and keeps serving."""

from __future__ import annotations

import subprocess
import sys

from confluent_kafka import Producer

from tests.integration.clients import consume_from_beginning, create_topic, produce_sync, producer_conf


def _files(data_dir) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(data_dir)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(data_dir.rglob("*")) if p.is_file() and p.name != ".lock"}


def test_second_broker_on_a_directory_in_use_refuses_to_start_and_touches_nothing(make_broker, topic_name, tmp_path):
    first = make_broker()
    create_topic(first.bootstrap, topic_name, 2)
    p = Producer(producer_conf(first.bootstrap))
    produce_sync(p, topic_name, [{"value": b"before", "partition": 0}])
    data_dir = first.data_dir
    before = _files(data_dir)
    assert any(name.endswith(".timeindex") for name in before)

    second = subprocess.run([sys.executable, "-m", "sharebroker", "serve", "--data-dir", str(data_dir),
                             "--listeners", "PLAINTEXT://127.0.0.1:0"], capture_output=True, text=True, timeout=60)
    assert second.returncode != 0
    assert "Failed to acquire lock on file .lock" in second.stderr, second.stderr
    assert _files(data_dir) == before  # not one file opened for writing, truncated or created

    produce_sync(p, topic_name, [{"value": b"after", "partition": 0}])
    assert [m.value() for m in consume_from_beginning(first.bootstrap, topic_name, 2, partition=0)] == [b"before", b"after"]
    assert first.alive()
