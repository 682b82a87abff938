"""Producer state per partition, as Kafka's ProducerStateManager keeps it: epoch and the last five
batches of each producer id (sequence checks), the first offset of each open transaction (the last
stable offset is the oldest of them) and the aborted transactions (what read_committed readers
skip; on disk in the segments' `.txnindex` files, as Kafka keeps them)."""

from __future__ import annotations

import json
import os
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.replay import replay_batches
from sharebroker.broker.structured_log import get_logger
from sharebroker.storage import write_atomic
from sharebroker.storage.txn_index import AbortedTxnEntry as AbortedTxn
from sharebroker.protocol.errors import KafkaError
from sharebroker.protocol.record_batch import ABORT_MARKER, COMMIT_MARKER, BatchHeader, InvalidRecordError, read_marker

log = get_logger("sharebroker.producers")

_MAX_CACHED_BATCHES = 5  # Kafka keeps metadata of the last 5 batches per producer for dedup
_INT32_MAX = 2**31 - 1


@dataclass(slots=True)
class CachedBatch:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque[CachedBatch] = field(default_factory=lambda: deque(maxlen=_MAX_CACHED_BATCHES))
    last_timestamp: int = -1
    coordinator_epoch: int = -1  # of the last transaction marker written for it

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


def _next_seq(seq: int) -> int:
    return 0 if seq == _INT32_MAX else seq + 1


class PartitionProducers:
    """Producer state of one partition. `check` runs before an append, `record` after it."""

    def __init__(self) -> None:
        self.entries: dict[int, ProducerEntry] = {}
        self.open_txns: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.aborted: list[AbortedTxn] = []  # by last offset

    def last_stable_offset(self, high_watermark: int) -> int:
        return min(self.open_txns.values(), default=high_watermark)

    def aborted_between(self, start: int, end: int) -> list[tuple[int, int]]:
        return [(a.producer_id, a.first_offset) for a in self.aborted_spans(start, end)]

    def aborted_spans(self, start: int, end: int) -> list[AbortedTxn]:
        # `aborted` is in marker order: skip those ended before `start` without walking them
        first = bisect_left(self.aborted, start, key=lambda a: a.last_offset)
        return [a for a in self.aborted[first:] if a.first_offset < end]

    def check(self, producer_id: int, epoch: int, first_seq: int, last_seq: int) -> CachedBatch | None:
        """A duplicate's cached batch (answer with its offsets), None to append, or KafkaError."""
        entry = self.entries.get(producer_id)
        if entry is None:
            return None  # unknown producer (new, or its state expired): accept any sequence
        if epoch < entry.epoch:
            raise KafkaError(ErrorCode.invalid_producer_epoch,
                             f"Epoch {epoch} of producer {producer_id} is older than the current epoch {entry.epoch}")
        if epoch > entry.epoch:
            if first_seq != 0:
                raise KafkaError(ErrorCode.out_of_order_sequence_number,
                                 f"Invalid sequence number for new epoch of producer {producer_id}: "
                                 f"{first_seq} (request epoch), 0 (expected)")
            return None
        for cached in entry.batches:
            if cached.first_seq == first_seq and cached.last_seq == last_seq:
                return cached
        last = entry.last_seq
        if last >= 0 and first_seq != _next_seq(last):
            if entry.batches and first_seq < entry.batches[0].first_seq:
                raise KafkaError(ErrorCode.duplicate_sequence_number,
                                 f"Sequence {first_seq} of producer {producer_id} is older than the "
                                 f"cached batches; treated as a duplicate")
            raise KafkaError(ErrorCode.out_of_order_sequence_number,
                             f"Out of order sequence number for producer {producer_id}: "
                             f"{first_seq} (incoming seq. number), {last} (current end sequence number)")
        return None

    def record(self, producer_id: int, epoch: int, first_seq: int, last_seq: int,
               first_offset: int, last_offset: int, timestamp: int, *, transactional: bool = False) -> None:
        entry = self.entries.get(producer_id)
        if entry is None or entry.epoch != epoch:
            entry = ProducerEntry(epoch)
            self.entries[producer_id] = entry
        entry.batches.append(CachedBatch(first_seq, last_seq, first_offset, last_offset, timestamp))
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        if transactional and producer_id not in self.open_txns:
            self.open_txns[producer_id] = first_offset

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        """A transaction marker at a producer epoch older than the producer's, or from a coordinator
        epoch older than the last marker's, is a zombie's (Kafka refuses both the same way)."""
        entry = self.entries.get(producer_id)
        if entry is None:
            return
        if epoch < entry.epoch:
            raise KafkaError(ErrorCode.invalid_producer_epoch,
                             f"Transaction marker epoch {epoch} of producer {producer_id} is older than the current "
                             f"epoch {entry.epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise KafkaError(ErrorCode.transaction_coordinator_fenced,
                             f"Transaction marker of producer {producer_id} has coordinator epoch {coordinator_epoch}, "
                             f"older than the last one ({entry.coordinator_epoch})")

    def complete_txn(self, producer_id: int, epoch: int, marker_offset: int, commit: bool, timestamp: int,
                     coordinator_epoch: int = 0) -> AbortedTxn | None:
        """The marker at `marker_offset` ended the producer's transaction here: its records become
        stable, and an abort is remembered for read_committed readers (and returned, for the
        transaction index). A marker at a newer epoch (the coordinator fenced the producer) starts
        a new epoch without cached batches."""
        entry = self.entries.get(producer_id)
        if entry is None or entry.epoch != epoch:
            entry = ProducerEntry(epoch, last_timestamp=entry.last_timestamp if entry else -1)
            self.entries[producer_id] = entry
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        entry.coordinator_epoch = coordinator_epoch
        first = self.open_txns.pop(producer_id, None)
        if first is None or commit:
            return None
        aborted = AbortedTxn(producer_id, first, marker_offset, self.last_stable_offset(marker_offset + 1))
        self.aborted.append(aborted)
        return aborted

    def truncate_aborted(self, log_start_offset: int) -> None:
        """Forget aborted transactions wholly below the log start (their records are gone)."""
        if self.aborted and self.aborted[0].last_offset < log_start_offset:
            self.aborted = [a for a in self.aborted if a.last_offset >= log_start_offset]

    def replay(self, data: bytes | memoryview, h: BatchHeader) -> None:
        """Take in one stored batch (start-up replay after the snapshot)."""
        if h.producer_id < 0:
            return
        if h.is_control:
            try:
                kind, coordinator_epoch = read_marker(memoryview(data)[h.position:h.position + h.size])
            except InvalidRecordError as exc:
                log.error("unreadable transaction marker skipped", offset=h.base_offset, error=str(exc))
                return
            if kind in (ABORT_MARKER, COMMIT_MARKER):
                self.complete_txn(h.producer_id, h.producer_epoch, h.base_offset, kind == COMMIT_MARKER,
                                  h.max_timestamp, coordinator_epoch)
            return
        self.record(h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence, h.base_offset,
                    h.last_offset, h.max_timestamp, transactional=h.is_transactional)

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Drop producers idle longer than producer.id.expiration.ms, never one with an open
        transaction; returns how many."""
        stale = [pid for pid, e in self.entries.items()
                 if e.last_timestamp >= 0 and now_ms - e.last_timestamp > expiration_ms and pid not in self.open_txns]
        for pid in stale:
            del self.entries[pid]
        return len(stale)


# -- durability: Kafka keeps producer state in snapshot files and replays the log after them ----

SNAPSHOT_FILE = "producer-state.json"


def save_snapshot(partition_dir: Path, producers: PartitionProducers, offset: int) -> bool:
    """Producer state as of `offset` (the log end offset), replaced atomically. A snapshot that
    cannot be written (a full disk) is logged and skipped: the previous one stays, and start-up
    replays the log from its offset instead. Returns whether it was written."""
    doc = {"offset": offset, "producers": {
        str(pid): {"epoch": e.epoch, "last_timestamp": e.last_timestamp, "coordinator_epoch": e.coordinator_epoch,
                   "batches": [[b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp] for b in e.batches]}
        for pid, e in producers.entries.items()},
        "open_transactions": {str(pid): first for pid, first in producers.open_txns.items()}}
    path = partition_dir / SNAPSHOT_FILE
    try:
        write_atomic(path, json.dumps(doc).encode())
    except OSError as exc:
        log.warning("producer state snapshot not written", path=str(path), offset=offset,
                    error=f"{type(exc).__name__}: {exc}")
        return False
    return True


def load_producers(partition_dir: Path, plog: Any) -> PartitionProducers:
    """The snapshot, then the idempotent batches appended after it (headers only). Aborted
    transactions come from the transaction indexes; an abort replayed from the log that its index
    lacks (a crash between the marker and the index entry) is written to it."""
    producers = PartitionProducers()
    start = plog.log_start_offset
    indexed: list[AbortedTxn] = plog.aborted_txns()
    from_snapshot: list[AbortedTxn] = []
    path = os.path.join(partition_dir, SNAPSHOT_FILE)  # not pathlib: once per partition at start-up
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.loads(f.read())
            if doc["offset"] <= plog.log_end_offset:
                for pid, e in doc["producers"].items():
                    entry = ProducerEntry(e["epoch"], last_timestamp=e["last_timestamp"],
                                          coordinator_epoch=e.get("coordinator_epoch", -1))
                    entry.batches.extend(CachedBatch(*b) for b in e["batches"])
                    producers.entries[int(pid)] = entry
                producers.open_txns = {int(pid): first for pid, first in doc.get("open_transactions", {}).items()}
                # Snapshots written before the transaction index held the aborted spans themselves.
                from_snapshot = [AbortedTxn(pid, first, last, last + 1)
                                 for pid, first, last in doc.get("aborted_transactions", [])]
                start = max(start, doc["offset"])
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("producer state snapshot unreadable, rebuilding from the log", path=path, error=str(exc))
    # A damaged range is skipped (idempotent producers writing there may see
    # OUT_OF_ORDER_SEQUENCE_NUMBER once).
    for data, h in replay_batches(plog, start, plog.log_end_offset, what="producer state"):
        if h.last_offset >= start:
            producers.replay(data, h)
    known = {(a.producer_id, a.first_offset, a.last_offset) for a in indexed}
    unindexed: dict[tuple[int, int, int], AbortedTxn] = {}
    for a in sorted([*from_snapshot, *producers.aborted], key=lambda a: a.last_offset):
        unindexed.setdefault((a.producer_id, a.first_offset, a.last_offset), a)
    missing = [a for k, a in unindexed.items() if k not in known]
    for a in missing:
        if a.last_offset >= plog.log_start_offset:
            plog.append_aborted_txn(a)
    producers.aborted = sorted([*indexed, *missing], key=lambda a: a.last_offset)
    if missing:
        log.info("transaction index completed from the log", partition=partition_dir.name, entries=len(missing))
    producers.truncate_aborted(plog.log_start_offset)
    return producers
