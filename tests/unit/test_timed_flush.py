"""flush.ms through the broker's flush scheduler, which looks only through the topics that set it
(by default none: 100,000 partitions took 20-40 ms a second when every partition was looked at):
a topic with flush.ms is flushed on time, one without is left to the OS (Kafka's default)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sharebroker.broker.flusher import now_ms
from sharebroker.protocol.record_batch import encode_batch, parse_batches
from tests.unit.test_group_log import running_broker


async def test_only_topics_with_flush_ms_are_flushed_by_time(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as b:  # the check runs every second by default
        timed = b.topics.create("timed", 2, {"flush.ms": "50"}, now_ms())
        plain = b.topics.create("plain", 2, {}, now_ms())
        for p in (*timed.partitions, *plain.partitions):
            buf = encode_batch([(None, b"job")], timestamp_ms=now_ms())
            p.log.append(buf, parse_batches(buf, verify_crc=True), leader_epoch=0, now_ms=now_ms())
            assert p.log.unflushed_messages == 1
        deadline = asyncio.get_running_loop().time() + 30
        while any(p.log.unflushed_messages for p in timed.partitions):
            assert asyncio.get_running_loop().time() < deadline, "flush.ms was not honoured"
            await asyncio.sleep(0.02)
        assert all(p.log.recovery_point == 1 for p in timed.partitions)
        assert all(p.log.unflushed_messages == 1 for p in plain.partitions)
