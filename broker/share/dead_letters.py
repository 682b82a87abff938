"""Share-group dead-letter queues (KIP-1191, Kafka 4.4): writing ARCHIVING records to a group's DLQ
topic with Kafka's ``__dlq.errors.*`` context headers.

Exactly once across a crash. Each share partition writes its DLQ records as one idempotent
producer (a fixed producer id derived from group, topic id and partition; epoch 0; the next
sequence of that producer in the DLQ partition). Its leader writes one DLQ batch, then persists
ARCHIVED for exactly the offsets in it, and only then writes the next (``SharePartitionLeader``'s
DLQ drain). So at any moment at most one DLQ batch of a share partition is written but not yet
ARCHIVED, and it is that producer's last batch in the DLQ partition, which the producer state
(snapshot plus log replay) finds again after a ``kill -9``. A leader that loads ARCHIVING state
first reads that batch and archives the offsets it already holds without writing them again.

Kafka 4.4 differs in one visible way: it writes a copied record with the current time and only the
``__dlq.errors.*`` headers; here a copied record keeps its original timestamp and headers (the
context headers follow them), as sharebroker's issue asks. Without copying both write the same.
"""

from __future__ import annotations

import hashlib
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from sharebroker.broker.flusher import now_ms
from sharebroker.broker.structured_log import get_logger
from sharebroker.protocol.errors import KafkaError
from sharebroker.protocol.record_batch import (
    BATCH_HEADER_SIZE,
    BatchRecord,
    decode_records,
    encode_batch,
    iter_batch_headers,
    parse_batches,
)
from sharebroker.storage import OffsetOutOfRange

if TYPE_CHECKING:
    from sharebroker.broker.topics import Partition, Topic

log = get_logger("sharebroker.dlq")

HEADER_TOPIC = "__dlq.errors.topic"
HEADER_PARTITION = "__dlq.errors.partition"
HEADER_OFFSET = "__dlq.errors.offset"
HEADER_GROUP = "__dlq.errors.group"
HEADER_DELIVERY_COUNT = "__dlq.errors.delivery.count"
HEADER_MESSAGE = "__dlq.errors.message"

CLIENT_REJECT = "Offset rejected by client."
DELIVERY_COUNT_EXCEEDED = "Offset delivery count exceeded the threshold."

# TEST-ONLY fault injection: SIGKILL this process at a named point of the DLQ flow, so that a crash
# between ARCHIVING and ARCHIVED is reproducible without timing (tests/recovery, tests/chaos).
# "dlq-before-write": ARCHIVING is durable, nothing written; "dlq-after-write": the DLQ batch is
# appended and flushed, ARCHIVED not yet written. Unset (always, outside tests), it costs nothing.
_CRASH_POINT = os.environ.get("SHAREBROKER_TEST_CRASH_POINT", "")


def crash_point(name: str) -> None:
    if _CRASH_POINT and _CRASH_POINT == name:
        log.warning("test-only crash point reached: SIGKILL", point=name)
        os.kill(os.getpid(), signal.SIGKILL)


_DLQ_PRODUCER_BASE = 1 << 62  # far above the ids InitProducerId hands out
_SOURCE_READ_BYTES = 1024 * 1024  # per source read, as Kafka's DLQ reads


def dlq_producer_id(group_id: str, topic_id: Any, partition: int) -> int:
    digest = hashlib.blake2b(f"{group_id}\0{topic_id}\0{partition}".encode(), digest_size=8).digest()
    return _DLQ_PRODUCER_BASE | (int.from_bytes(digest, "big") & (_DLQ_PRODUCER_BASE - 1))


class DeadLetterHost(Protocol):
    """What the writer needs from the broker: settings, topics, and the append bookkeeping."""

    config: Any
    topics: Any

    def group_dlq_settings(self, group_id: str) -> tuple[str, bool]: ...

    def after_append(self, partition: Partition, *, wait: bool) -> Any: ...

    def segment_rolled(self, partition: Partition) -> None: ...


@dataclass(frozen=True, slots=True)
class Archiving:
    """One settled ARCHIVING range of a share partition."""
    first: int
    last: int
    delivery_count: int
    rejected: bool = False  # known to be a consumer's REJECT (else inferred from the count, as Kafka)


@dataclass(slots=True)
class Outcome:
    """What one DLQ round did: the offsets it settles, and how many records it wrote."""
    ranges: list[tuple[int, int]]
    written: int  # records appended to the DLQ topic (0 when misconfigured or failed)


class DeadLetters:
    def __init__(self, host: DeadLetterHost) -> None:
        self.host = host

    # -- configuration (checked for every round: the settings are dynamic) --------------------

    def misconfiguration(self, group_id: str) -> str | None:
        """Why the group's DLQ cannot be written (Kafka's message), or None; may create the topic."""
        name, _copy = self.host.group_dlq_settings(group_id)
        if not name:
            return f"Configured DLQ topic name in share group: {group_id} is empty."
        if name.startswith("__"):
            return f"Configured DLQ topic name in share group: {group_id} cannot start with __, topic: {name}."
        topic = self.host.topics.get(name)
        if topic is not None and not topic.config.errors_deadletterqueue_group_enable:
            return f"DLQ is not enabled on configured DLQ topic for share group: {group_id}, topic: {name}."
        auto_create = self.host.config["errors.deadletterqueue.auto.create.topics.enable"]
        if topic is None and not auto_create:
            return (f"DLQ topic does not exist and auto create is disabled on cluster for share group: {group_id}, "
                    f"topic: {name}.")
        prefix = self.host.config["errors.deadletterqueue.topic.name.prefix"] or ""
        if prefix and not name.startswith(prefix):
            return (f"Configured DLQ topic name does not comply with the DLQ topic prefix in share group: {group_id}, "
                    f"topic: {name}, prefix: {prefix}.")
        return None

    def _topic(self, name: str) -> Topic:
        topic = self.host.topics.get(name)
        if topic is None:
            # Auto-created as Kafka's DLQ manager asks its controller: default partitions, DLQ enabled.
            topic = self.host.topics.create(name, self.host.config["num.partitions"], {
                "errors.deadletterqueue.group.enable": "true", "message.timestamp.type": "CreateTime"}, now_ms())
            log.info("DLQ topic created", topic=name, partitions=len(topic.partitions))
        return topic

    def destination(self, group_id: str, source_partition: int) -> Partition | None:
        name, _copy = self.host.group_dlq_settings(group_id)
        topic = self.host.topics.get(name) if name else None
        if topic is None or not topic.partitions:
            return None
        return topic.partitions[source_partition % len(topic.partitions)]

    # -- resuming after a restart -----------------------------------------------------------------

    def already_written(self, group_id: str, source: Partition, producer_id: int) -> list[int]:
        """Source offsets in this share partition's last DLQ batch (see the module docstring)."""
        dest = self.destination(group_id, source.index)
        if dest is None:
            return []
        entry = dest.producers.entries.get(producer_id)
        if entry is None or not entry.batches:
            return []
        last = entry.batches[-1]
        try:
            read = dest.log.read(last.first_offset, 1, min_one_batch=True)
        except OffsetOutOfRange:
            return []
        out: list[int] = []
        for h in iter_batch_headers(read.records):
            if h.base_offset != last.first_offset:
                continue
            for rec in decode_records(read.records[h.position:h.position + h.size]):
                hdr = dict(rec.headers)
                if (hdr.get(HEADER_GROUP.encode()) == group_id.encode()
                        and hdr.get(HEADER_TOPIC.encode()) == source.topic.name.encode()
                        and hdr.get(HEADER_PARTITION.encode()) == str(source.index).encode()
                        and (off := hdr.get(HEADER_OFFSET.encode())) is not None):
                    out.append(int(off))
            break
        return out

    # -- writing ------------------------------------------------------------------------------------

    async def write_round(self, group_id: str, source: Partition, producer_id: int,
                          pending: Sequence[Archiving], delivery_count_limit: int) -> Outcome:
        """Write one DLQ batch from the start of ``pending`` (as much as max.message.bytes allows)
        and return the offsets it covers; misconfigured or failed: every pending offset, unwritten,
        with one structured log line naming why (the records are archived regardless, as Kafka)."""
        all_ranges = [(a.first, a.last) for a in pending]
        reason = self.misconfiguration(group_id)
        if reason is not None:
            log.warning("DLQ write skipped, records archived", group=group_id, topic=source.topic.name,
                        partition=source.index, offsets=_describe(all_ranges), reason=reason)
            return Outcome(all_ranges, 0)
        name, copy = self.host.group_dlq_settings(group_id)
        try:
            topic = self._topic(name)
            dest = topic.partitions[source.index % len(topic.partitions)]
            records, covered = self._build(group_id, source, pending, delivery_count_limit, copy,
                                           topic.config.max_message_bytes)
            crash_point("dlq-before-write")
            await self._append(dest, producer_id, records)
            crash_point("dlq-after-write")
        except (KafkaError, OSError) as exc:
            message = exc.message if isinstance(exc, KafkaError) else str(exc)
            log.error("DLQ write failed, records archived", group=group_id, topic=source.topic.name,
                      partition=source.index, offsets=_describe(all_ranges), dlq_topic=name,
                      error=type(exc).__name__, message=message)
            return Outcome(all_ranges, 0)
        return Outcome(covered, len(records))

    def _build(self, group_id: str, source: Partition, pending: Sequence[Archiving], limit: int, copy: bool,
               max_bytes: int) -> tuple[list[tuple[Any, ...]], list[tuple[int, int]]]:
        now = now_ms()
        topic_b = source.topic.name.encode()
        part_b = str(source.index).encode()
        group_b = group_id.encode()
        records: list[tuple[Any, ...]] = []
        covered: list[tuple[int, int]] = []
        size = BATCH_HEADER_SIZE
        originals: dict[int, BatchRecord] = {}  # decoded source batches, shared by the round's ranges
        for a in pending:
            if copy:
                self._source_records(source, a.first, a.last, originals)
            exceeded = not a.rejected and a.delivery_count >= limit
            cause = (DELIVERY_COUNT_EXCEEDED if exceeded else CLIENT_REJECT).encode()
            context = [(HEADER_TOPIC, topic_b), (HEADER_PARTITION, part_b), (HEADER_OFFSET, b""),
                       (HEADER_GROUP, group_b), (HEADER_DELIVERY_COUNT, str(a.delivery_count).encode()),
                       (HEADER_MESSAGE, cause)]
            for offset in range(a.first, a.last + 1):
                headers = list(context)
                headers[2] = (HEADER_OFFSET, str(offset).encode())
                bare = (None, None, headers, now)
                rec: tuple[Any, ...] = bare
                orig = originals.get(offset)
                if orig is not None:
                    rec = (orig.key, orig.value, [*orig.headers, *headers], orig.timestamp)
                    if BATCH_HEADER_SIZE + _record_size(rec) > max_bytes:
                        rec = bare  # too big for the DLQ topic even alone: the context headers only
                n = _record_size(rec)
                if records and size + n > max_bytes:
                    return records, covered
                records.append(rec)
                size += n
                if covered and covered[-1][1] + 1 == offset:
                    covered[-1] = (covered[-1][0], offset)
                else:
                    covered.append((offset, offset))
        return records, covered

    @staticmethod
    def _source_records(source: Partition, first: int, last: int, out: dict[int, BatchRecord]) -> None:
        """Add the records still in the source log for [first, last] to ``out`` (those gone are
        written headers-only); a batch already decoded for an earlier range is not read again."""
        offset = max(first, source.log.log_start_offset)
        while offset <= last and offset in out:
            offset += 1
        while offset <= last:
            try:
                read = source.log.read(offset, _SOURCE_READ_BYTES, min_one_batch=True, through_offset=last)
            except OffsetOutOfRange:
                break
            if not read.records:
                break
            for h in iter_batch_headers(read.records):
                if h.is_control or h.last_offset < offset:
                    continue
                try:
                    recs = decode_records(read.records[h.position:h.position + h.size])
                except (ImportError, KafkaError):
                    continue  # a codec we cannot read: headers only
                for r in recs:
                    out[r.offset] = r
            if read.next_offset <= offset:
                break
            offset = read.next_offset

    async def _append(self, dest: Partition, producer_id: int, records: list[tuple[Any, ...]]) -> None:
        entry = dest.producers.entries.get(producer_id)
        seq = 0 if entry is None or entry.last_seq < 0 else (entry.last_seq + 1) & 0x7FFFFFFF
        now = now_ms()
        buf = encode_batch(records, timestamp_ms=now, producer_id=producer_id, producer_epoch=0, base_sequence=seq)
        headers = parse_batches(buf, verify_crc=False)
        (h,) = headers
        cfg = dest.topic.config
        result = dest.log.append(buf, headers, leader_epoch=dest.leader_epoch, now_ms=now,
                                 log_append_time=cfg.log_append_time)
        dest.producers.record(producer_id, 0, seq, seq + len(records) - 1, result.first_offset, result.last_offset,
                              h.max_timestamp)
        if result.rolled:
            self.host.segment_rolled(dest)
        flushed = self.host.after_append(dest, wait=True)
        if flushed is not None:
            await flushed  # durable (as configured) before the records are ARCHIVED


def _record_size(rec: tuple[Any, ...]) -> int:
    """Upper bound of one encoded record (varints at their widest)."""
    key, value, headers = rec[0], rec[1], rec[2]
    n = 1 + 10 + 5 + 5 + 5 + 5 + 5 + len(key or b"") + len(value or b"")
    for hk, hv in headers:
        n += 10 + len(hk) + len(hv or b"")
    return n


def _describe(ranges: list[tuple[int, int]]) -> str:
    shown = ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges[:8])
    return shown + (f",... ({len(ranges)} ranges)" if len(ranges) > 8 else "")


__all__ = ["Archiving", "DeadLetters", "Outcome", "dlq_producer_id", "HEADER_TOPIC", "HEADER_PARTITION",
           "HEADER_OFFSET", "HEADER_GROUP", "HEADER_DELIVERY_COUNT", "HEADER_MESSAGE"]
