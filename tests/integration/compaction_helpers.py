"""Shared by the compaction tests: produce keyed rounds that each start a segment, read a
partition whole, and the state a compacted log must converge to."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from tests.integration.clients import admin, consumer_conf, produce_sync, producer_conf

# Old enough that every round's timestamps are ahead of the previous round's by more than
# segment.ms: each round's first append rolls a segment, without waiting on the clock.
BASE_TS = int(time.time() * 1000) - 3_600_000
ROUND_MS = 10_000

COMPACTED = {"cleanup.policy": "compact", "segment.ms": "1000", "min.cleanable.dirty.ratio": "0.01",
             "delete.retention.ms": "1000"}
CLEANER = {"log.cleaner.backoff.ms": 50}


def make_compacted(bootstrap: str, topic: str) -> None:
    """Switch a topic written with cleanup.policy=delete to compact: the cleaner starts on it then,
    so what was written can be read uncompacted first."""
    a = admin(bootstrap)
    resource = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([resource])[resource].result(timeout=15)


def produce_round(bootstrap: str, topic: str, round_no: int, pairs: list[tuple[bytes, bytes | None]],
                  producer: Producer | None = None) -> dict[bytes, tuple[int, bytes | None]]:
    """Produce one round (its own segment); returns key -> (offset, value) of what was written."""
    p = producer or Producer(producer_conf(bootstrap, **{"linger.ms": 20, "batch.num.messages": 50}))
    ts = BASE_TS + round_no * ROUND_MS
    items: list[dict[str, Any]] = [{"key": k, "value": v, "timestamp": ts} for k, v in pairs]
    msgs = produce_sync(p, topic, items, timeout=30)
    out: dict[bytes, tuple[int, bytes | None]] = {}
    for m in msgs:
        assert not isinstance(m, KafkaError) and m is not None, m
        out[m.key()] = (m.offset(), m.value())
    return out


def read_partition(bootstrap: str, topic: str, *, isolation: str = "read_uncommitted",
                   timeout: float = 20.0) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record of partition 0 from the log start to its end."""
    c = Consumer(consumer_conf(bootstrap, **{"enable.partition.eof": True, "isolation.level": isolation}))
    out: list[tuple[int, bytes | None, bytes | None]] = []
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(f"consumer error: {msg.error()}")
            out.append((msg.offset(), msg.key(), msg.value()))
        raise AssertionError(f"partition not read to its end within {timeout}s ({len(out)} records)")
    finally:
        c.close()


def log_bytes(data_dir: Path, topic: str) -> int:
    return sum(f.stat().st_size for f in (data_dir / f"{topic}-0").glob("*.log"))


def latest(written: list[dict[bytes, tuple[int, bytes | None]]]) -> dict[bytes, tuple[int, bytes | None]]:
    out: dict[bytes, tuple[int, bytes | None]] = {}
    for r in written:
        out.update(r)
    return out


def compacted_view(state: dict[bytes, tuple[int, bytes | None]], *, tombstones: bool
                   ) -> list[tuple[int, bytes | None, bytes | None]]:
    return sorted((off, k, v) for k, (off, v) in state.items() if tombstones or v is not None)
