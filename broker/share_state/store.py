"""The share coordinator's state per share partition (group, topic id, partition), as a pure
object with Kafka's persister semantics (share-groups-spec §10): state epoch and leader epoch
fencing, start offsets that never regress, and state batches merged with Kafka's combiner rule.

It has Kafka's coordinator-shard shape. Each operation (InitializeShareGroupState,
ReadShareGroupState, WriteShareGroupState, DeleteShareGroupState) is a pure step that checks the
request against the current state and returns the records to append, changing nothing; once the
records are durable the caller hands them to ``apply``, the same function that replays the
topic at start-up. So live state is always what a replay of the log gives, and a failed append
changes nothing."""

from __future__ import annotations

import heapq
import uuid
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode
from sharebroker.protocol.errors import KafkaError

Key = tuple[str, uuid.UUID, int]


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


def _last(b: StateBatch) -> int:
    return b.last_offset


def _first(b: StateBatch) -> int:
    return b.first_offset


def merge_into(current: list[StateBatch], incoming: list[StateBatch], start_offset: int) -> None:
    """``merge_batches`` done in place on a sorted, non-overlapping list: each incoming range is
    merged with the stored ranges it overlaps or touches only, found by bisection, so a write
    costs O(log n) per incoming range however many ranges are stored."""
    if current and current[0].first_offset < start_offset:
        k = bisect_left(current, start_offset, key=_last)
        del current[:k]
        if current and current[0].first_offset < start_offset:
            b = current[0]
            current[0] = StateBatch(start_offset, b.last_offset, b.delivery_state, b.delivery_count)
    for b in incoming:
        if b.last_offset < start_offset:
            continue
        i = bisect_left(current, b.first_offset - 1, key=_last)
        j = bisect_right(current, b.last_offset + 1, lo=i, key=_first)
        current[i:j] = merge_batches(current[i:j], [b], start_offset)


def merge_batches(current: list[StateBatch], incoming: list[StateBatch], start_offset: int) -> list[StateBatch]:
    """Kafka's combiner: drop what lies below the start offset, clip what straddles it; where
    ranges overlap the higher delivery count wins, then the higher state id; coalesce neighbours
    with equal (state, count). Output sorted and non-overlapping. Sweep over range ends, so the
    cost follows the number of ranges, never the offsets they span."""
    if not current and _ordered(incoming):
        return _clip_and_coalesce(incoming, start_offset)
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


def _ordered(batches: list[StateBatch]) -> bool:
    """Whether the ranges are each well-formed and in order without overlap (as a leader writes
    them): then no offset is claimed twice and the sweep has nothing to decide."""
    prev = None
    for b in batches:
        if b.first_offset > b.last_offset or (prev is not None and prev.last_offset >= b.first_offset):
            return False
        prev = b
    return True


def _clip_and_coalesce(batches: list[StateBatch], start_offset: int) -> list[StateBatch]:
    """merge_batches of ordered, non-overlapping ranges alone: what lies below the start offset
    dropped, the range straddling it clipped, neighbours with equal (state, count) joined."""
    out: list[StateBatch] = []
    for b in batches:
        if b.last_offset < start_offset:
            continue
        if b.first_offset < start_offset:
            b = StateBatch(start_offset, b.last_offset, b.delivery_state, b.delivery_count)
        if out:
            p = out[-1]
            if (p.last_offset + 1 == b.first_offset and p.delivery_state == b.delivery_state
                    and p.delivery_count == b.delivery_count):
                out[-1] = StateBatch(p.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                continue
        out.append(b)
    return out


@dataclass(frozen=True, slots=True)
class StateRecord:
    """One record for ``__share_group_state``: a full snapshot, an update, or (value None) a
    tombstone. The coordinator encodes it; ``ShareStateStore.apply`` applies it."""
    key: Key
    kind: int  # SNAPSHOT or UPDATE (a tombstone is keyed as a snapshot)
    value: SnapshotValue | UpdateValue | None


SNAPSHOT, UPDATE = 0, 1


@dataclass(frozen=True, slots=True)
class SnapshotValue:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    create_timestamp: int
    write_timestamp: int
    batches: list[StateBatch]


@dataclass(frozen=True, slots=True)
class UpdateValue:
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    batches: list[StateBatch]


class ShareStateStore:
    """All share-partition state of the share coordinator, in memory. `snapshot_every` is
    share.coordinator.snapshot.update.records.per.snapshot: it decides whether a write becomes a
    full snapshot or an update record."""

    def __init__(self, snapshot_every: int = 500) -> None:
        self.states: dict[Key, ShareGroupOffset] = {}
        self.snapshot_every = snapshot_every

    @staticmethod
    def _check_key(topic_id: uuid.UUID | None, partition: int) -> None:
        if topic_id is None or partition < 0:
            raise KafkaError(ErrorCode.invalid_request, "Invalid topic id or partition in the request.")

    # -- pure steps: check a request, return the records it needs -------------------------------

    def initialize(self, key: Key, state_epoch: int, start_offset: int, now_ms: int) -> StateRecord | None:
        """A fresh snapshot (wiping in-flight state), or None for an identical repeat."""
        self._check_key(key[1], key[2])
        if state_epoch < 0:
            raise KafkaError(ErrorCode.invalid_request, "Invalid state epoch in the request.")
        cur = self.states.get(key)
        if cur is not None:
            if cur.state_epoch > state_epoch:
                raise KafkaError(ErrorCode.fenced_state_epoch,
                                 f"Initialize request state epoch {state_epoch} is older than the stored {cur.state_epoch}.")
            if cur.state_epoch == state_epoch and cur.start_offset == start_offset:
                return None
        return StateRecord(key, SNAPSHOT, SnapshotValue(
            snapshot_epoch=cur.snapshot_epoch + 1 if cur else 0, state_epoch=state_epoch,
            leader_epoch=cur.leader_epoch if cur else -1, start_offset=start_offset,
            delivery_complete_count=-1 if start_offset == -1 else 0, create_timestamp=now_ms,
            write_timestamp=now_ms, batches=[]))

    def read(self, key: Key, leader_epoch: int) -> tuple[ReadResult, StateRecord | None]:
        """State for a (new) leader, and the update recording its leader epoch when it moved."""
        self._check_key(key[1], key[2])
        cur = self.states.get(key)
        if cur is None:
            raise KafkaError(ErrorCode.invalid_request, "Read of uninitialized share partition.")
        if leader_epoch < cur.leader_epoch:
            raise KafkaError(ErrorCode.fenced_leader_epoch,
                             f"Leader epoch {leader_epoch} is older than the stored {cur.leader_epoch}.")
        record = None
        if leader_epoch > cur.leader_epoch:
            record = StateRecord(key, UPDATE, UpdateValue(cur.snapshot_epoch, leader_epoch, -1, -1, []))
        return ReadResult(cur.state_epoch, cur.start_offset, list(cur.batches)), record

    def write(self, key: Key, *, state_epoch: int, leader_epoch: int, start_offset: int,
              delivery_complete_count: int, batches: list[StateBatch], now_ms: int) -> StateRecord:
        """The record of a write: an update, or a full snapshot every `snapshot_every` updates."""
        self._check_key(key[1], key[2])
        if state_epoch < 0 or leader_epoch < 0:
            raise KafkaError(ErrorCode.invalid_request, "Invalid state or leader epoch in the request.")
        cur = self.states.get(key)
        if cur is None:
            raise KafkaError(ErrorCode.invalid_request, "Write to uninitialized share partition.")
        if cur.leader_epoch > leader_epoch:
            raise KafkaError(ErrorCode.fenced_leader_epoch,
                             f"Leader epoch {leader_epoch} is older than the stored {cur.leader_epoch}.")
        if cur.state_epoch > state_epoch:
            raise KafkaError(ErrorCode.fenced_state_epoch,
                             f"State epoch {state_epoch} is older than the stored {cur.state_epoch}.")
        if cur.updates_since_snapshot < self.snapshot_every:
            return StateRecord(key, UPDATE, UpdateValue(cur.snapshot_epoch, leader_epoch, start_offset,
                                                        delivery_complete_count,
                                                        merge_batches([], batches, start_offset)))
        new_start, dcc = _start_and_count(cur, start_offset, delivery_complete_count)
        merged = list(cur.batches)
        merge_into(merged, batches, new_start)
        return StateRecord(key, SNAPSHOT, SnapshotValue(
            cur.snapshot_epoch + 1, cur.state_epoch, max(leader_epoch, cur.leader_epoch), new_start, dcc,
            cur.create_timestamp, now_ms, merged))

    def delete(self, key: Key) -> StateRecord | None:
        self._check_key(key[1], key[2])
        return StateRecord(key, SNAPSHOT, None) if key in self.states else None

    def snapshot(self, key: Key, now_ms: int) -> StateRecord | None:
        """A full snapshot of the key's current state (pruning refreshes cold keys with it)."""
        cur = self.states.get(key)
        if cur is None:
            return None
        return StateRecord(key, SNAPSHOT, SnapshotValue(
            cur.snapshot_epoch + 1, cur.state_epoch, cur.leader_epoch, cur.start_offset,
            cur.delivery_complete_count, cur.create_timestamp, now_ms, list(cur.batches)))

    def summary(self, key: Key) -> Summary:
        cur = self.states.get(key)
        if cur is None:
            return Summary(0, 0, -1, -1)
        return Summary(cur.state_epoch, cur.leader_epoch, cur.start_offset, cur.delivery_complete_count)

    # -- the one mutation: live after a successful append, and replay at start-up -----------------

    def apply(self, record: StateRecord) -> None:
        key, v = record.key, record.value
        states = self.states
        if v is None:
            states.pop(key, None)
        elif isinstance(v, SnapshotValue):
            states[key] = ShareGroupOffset(v.snapshot_epoch, v.state_epoch, v.leader_epoch, v.start_offset,
                                           v.delivery_complete_count, v.create_timestamp, v.write_timestamp,
                                           list(v.batches))
        else:
            cur = states.get(key)
            if cur is None:
                return  # its snapshot was pruned with a tombstone after it
            if v.start_offset != -1:
                new_start, dcc = _start_and_count(cur, v.start_offset, v.delivery_complete_count)
                merge_into(cur.batches, v.batches, new_start)
                cur.start_offset = new_start
                cur.delivery_complete_count = dcc
            cur.leader_epoch = max(cur.leader_epoch, v.leader_epoch)
            cur.updates_since_snapshot += 1


def _start_and_count(cur: ShareGroupOffset, start_offset: int, delivery_complete_count: int) -> tuple[int, int]:
    """The start offset never moves back (an out-of-order write keeps the newer one), and the
    delivery-complete count belongs to whichever start offset wins."""
    if delivery_complete_count == -1:
        return max(start_offset, cur.start_offset), cur.delivery_complete_count
    if start_offset > cur.start_offset:
        return start_offset, delivery_complete_count
    if start_offset == cur.start_offset:
        return start_offset, max(delivery_complete_count, cur.delivery_complete_count)
    return cur.start_offset, cur.delivery_complete_count
