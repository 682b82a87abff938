"""What the coordinators share about their internal topics (`__share_group_state`,
`__consumer_offsets`): creating them on first use, appending key/value records through the normal
log and flush policy, and reading every record back at start-up."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from broker.flusher import now_ms
from protocol.record_batch import (
    encode_batch,
    iter_batch_headers,
    iter_records,
    parse_batches,
)

_READ_BYTES = 4 << 20


def ensure_topic(broker: Any, name: str, partitions: int, segment_bytes: int) -> Any:
    topic = broker.topics.get(name)
    if topic is None:
        # Pruned by the coordinators themselves (log start offset), never by time or size.
        topic = broker.topics.create(name, partitions, {
            "cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1",
            "segment.bytes": str(segment_bytes)}, now_ms())
    return topic


def read_records(plog: Any) -> Iterator[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every keyed record from the log start to the end."""
    offset = plog.log_start_offset
    while offset < plog.high_watermark:
        data = plog.read(offset, _READ_BYTES, min_one_batch=True).records
        if not data:
            return
        for h in iter_batch_headers(data):
            for off, key, value in iter_records(memoryview(data)[h.position:h.position + h.size]):
                if off >= offset and key is not None:
                    yield off, key, value
            offset = h.last_offset + 1


async def append_records(broker: Any, partition: Any, records: list[tuple[bytes, bytes | None]]) -> int:
    """Append records as one batch; return the first offset once the flush policy is met."""
    buf = encode_batch(records, timestamp_ms=now_ms())
    result = partition.log.append(buf, parse_batches(buf, verify_crc=False),
                                  leader_epoch=partition.leader_epoch, now_ms=now_ms())
    if result.rolled:
        broker.segment_rolled(partition)
    flushed = broker.after_append(partition, wait=True)
    if flushed is not None:
        await flushed
    return result.first_offset
