"""The share coordinator's state per share partition (group, topic id, partition), as a pure
object with Kafka's persister semantics (share-groups-spec §10): state epoch and leader epoch
fencing, start offsets that never regress, and state batches merged with Kafka's combiner rule.
The operations mirror InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState,
DeleteShareGroupState and ReadShareGroupStateSummary."""

from __future__ import annotations

import heapq
import uuid
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

Key = tuple[str, uuid.UUID, int]


class PersisterError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class StateBatch:
    first_offset: int
    last_offset: int
    delivery_state: int  # 0 AVAILABLE, 2 ACKNOWLEDGED, 4 ARCHIVED
    delivery_count: int


@dataclass(slots=True)
class ShareGroupOffset:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    create_timestamp: int
    write_timestamp: int
    batches: list[StateBatch] = field(default_factory=list)
    updates_since_snapshot: int = 0


@dataclass(frozen=True, slots=True)
class ReadResult:
    state_epoch: int
    start_offset: int
    batches: list[StateBatch]


@dataclass(frozen=True, slots=True)
class Summary:
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int


def merge_batches(current: list[StateBatch], incoming: list[StateBatch], start_offset: int) -> list[StateBatch]:
    """Kafka's combiner: drop what lies below the start offset, clip what straddles it; where
    ranges overlap the higher delivery count wins, then the higher state id; coalesce neighbours
    with equal (state, count). Output sorted and non-overlapping. Sweep over range ends, so the
    cost follows the number of ranges, never the offsets they span."""
    items = [b for b in (*current, *incoming) if b.last_offset >= start_offset]
    if not items:
        return []
    events: list[tuple[int, int, int]] = []  # (offset, kind 0=start/1=end, index)
    for i, b in enumerate(items):
        events.append((max(b.first_offset, start_offset), 0, i))
        events.append((b.last_offset + 1, 1, i))
    events.sort()
    heap: list[tuple[int, int, int]] = []  # (-count, -state, index)
    ended: set[int] = set()
    out: list[StateBatch] = []
    prev = events[0][0]
    k = 0
    while k < len(events):
        pos = events[k][0]
        while heap and heap[0][2] in ended:
            heapq.heappop(heap)
        if heap and pos > prev:
            neg_count, neg_state, _ = heap[0]
            state, count = -neg_state, -neg_count
            if out and out[-1].last_offset == prev - 1 and out[-1].delivery_state == state and out[-1].delivery_count == count:
                out[-1] = StateBatch(out[-1].first_offset, pos - 1, state, count)
            else:
                out.append(StateBatch(prev, pos - 1, state, count))
        while k < len(events) and events[k][0] == pos:
            _, kind, idx = events[k]
            if kind == 0:
                b = items[idx]
                heapq.heappush(heap, (-b.delivery_count, -b.delivery_state, idx))
            else:
                ended.add(idx)
            k += 1
        prev = pos
    return out


class ShareStateStore:
    """All share-partition state of the share coordinator, in memory. `snapshot_every` is
    share.coordinator.snapshot.update.records.per.snapshot: it decides, for the durable log,
    whether a write becomes a full snapshot or an update record."""

    def __init__(self, snapshot_every: int = 500) -> None:
        self.states: dict[Key, ShareGroupOffset] = {}
        self.snapshot_every = snapshot_every

    @staticmethod
    def _check_key(topic_id: uuid.UUID | None, partition: int) -> None:
        if topic_id is None or partition < 0:
            raise PersisterError(ErrorCode.invalid_request, "Invalid topic id or partition in the request.")

    def initialize(self, key: Key, state_epoch: int, start_offset: int, now_ms: int) -> ShareGroupOffset | None:
        """A fresh snapshot (wiping in-flight state), or None for an identical repeat."""
        self._check_key(key[1], key[2])
        if state_epoch < 0:
            raise PersisterError(ErrorCode.invalid_request, "Invalid state epoch in the request.")
        cur = self.states.get(key)
        if cur is not None:
            if cur.state_epoch > state_epoch:
                raise PersisterError(ErrorCode.fenced_state_epoch,
                                     f"Initialize request state epoch {state_epoch} is older than the stored {cur.state_epoch}.")
            if cur.state_epoch == state_epoch and cur.start_offset == start_offset:
                return None
        new = ShareGroupOffset(
            snapshot_epoch=cur.snapshot_epoch + 1 if cur else 0, state_epoch=state_epoch,
            leader_epoch=cur.leader_epoch if cur else -1, start_offset=start_offset,
            delivery_complete_count=-1 if start_offset == -1 else 0, create_timestamp=now_ms,
            write_timestamp=now_ms, batches=[])
        self.states[key] = new
        return new

    def read(self, key: Key, leader_epoch: int) -> tuple[ReadResult, bool]:
        """State for a (new) leader; the flag says the leader epoch moved and must be recorded."""
        self._check_key(key[1], key[2])
        cur = self.states.get(key)
        if cur is None:
            raise PersisterError(ErrorCode.invalid_request, "Read of uninitialized share partition.")
        if leader_epoch < cur.leader_epoch:
            raise PersisterError(ErrorCode.fenced_leader_epoch,
                                 f"Leader epoch {leader_epoch} is older than the stored {cur.leader_epoch}.")
        moved = leader_epoch > cur.leader_epoch
        if moved:
            cur.leader_epoch = leader_epoch
        return ReadResult(cur.state_epoch, cur.start_offset, list(cur.batches)), moved

    def write(self, key: Key, *, state_epoch: int, leader_epoch: int, start_offset: int,
              delivery_complete_count: int, batches: list[StateBatch], now_ms: int) -> tuple[ShareGroupOffset, bool]:
        """Apply a write; returns the new state and whether it is due as a full snapshot."""
        self._check_key(key[1], key[2])
        if state_epoch < 0 or leader_epoch < 0:
            raise PersisterError(ErrorCode.invalid_request, "Invalid state or leader epoch in the request.")
        cur = self.states.get(key)
        if cur is None:
            raise PersisterError(ErrorCode.invalid_request, "Write to uninitialized share partition.")
        if cur.leader_epoch > leader_epoch:
            raise PersisterError(ErrorCode.fenced_leader_epoch,
                                 f"Leader epoch {leader_epoch} is older than the stored {cur.leader_epoch}.")
        if cur.state_epoch > state_epoch:
            raise PersisterError(ErrorCode.fenced_state_epoch,
                                 f"State epoch {state_epoch} is older than the stored {cur.state_epoch}.")
        new_start = max(start_offset, cur.start_offset)
        if start_offset == cur.start_offset:
            dcc = max(delivery_complete_count, cur.delivery_complete_count)
        elif start_offset < cur.start_offset:
            dcc = cur.delivery_complete_count
        else:
            dcc = delivery_complete_count
        snapshot_due = cur.updates_since_snapshot >= self.snapshot_every
        cur.batches = merge_batches(cur.batches, batches, new_start)
        cur.start_offset = new_start
        cur.delivery_complete_count = dcc
        cur.leader_epoch = leader_epoch
        cur.state_epoch = state_epoch
        cur.write_timestamp = now_ms
        if snapshot_due:
            cur.snapshot_epoch += 1
            cur.updates_since_snapshot = 0
        else:
            cur.updates_since_snapshot += 1
        return cur, snapshot_due

    def delete(self, key: Key) -> bool:
        self._check_key(key[1], key[2])
        return self.states.pop(key, None) is not None

    def summary(self, key: Key) -> Summary:
        cur = self.states.get(key)
        if cur is None:
            return Summary(0, 0, -1, -1)
        return Summary(cur.state_epoch, cur.leader_epoch, cur.start_offset, cur.delivery_complete_count)
