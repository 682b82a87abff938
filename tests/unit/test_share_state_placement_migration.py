"""A `__share_group_state` written under the old placement ((hash & 0x7FFFFFFF) % n instead of
Kafka's Utils.abs(hash) % n) still loads right: the misplaced records replay before the placed
ones, the live state is moved to its own partition by a fresh snapshot at start-up, newer state
wins over the stale copy at every later restart, and a deleted key does not come back once pruning
has dropped its tombstone. A real Broker on a temp dir, run in-process; the old data directory is
made by appending encoded records to the old partition directly."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

from sharebroker.broker.flusher import now_ms
from sharebroker.broker.internal_topics import read_records
from sharebroker.broker.java_compat import string_hash
from sharebroker.broker.server import Broker
from sharebroker.broker.share_state import records as rec
from sharebroker.broker.share_state.coordinator import STATE_TOPIC, ShareCoordinator
from sharebroker.broker.share_state.store import Key, ShareStateStore, SnapshotValue, StateBatch, StateRecord
from tests.unit.test_group_log import running_broker

N = 10  # share.coordinator.state.topic.num.partitions
SETTINGS = {"share.coordinator.state.topic.num.partitions": str(N)}


def old_partition(key: Key) -> int:
    """The placement before the fix: the sign bit masked off instead of Utils.abs."""
    group, tid, partition = key
    text = f"{group}:{base64.urlsafe_b64encode(tid.bytes).decode().rstrip('=')}:{partition}"
    return (string_hash(text) & 0x7FFFFFFF) % N


def new_partition(key: Key) -> int:
    return rec.state_partition(key[0], key[1], key[2], N)


def find_key(tid: uuid.UUID, prefix: str, *, old_after_new: bool) -> Key:
    """A key whose old and new partitions differ, the old one coming after (or before) the new
    one in partition order: after is where a replay in partition order would let stale win."""
    for i in range(10_000):
        key = (f"{prefix}-{i}", tid, 0)
        old, new = old_partition(key), new_partition(key)
        if old != new and (old > new) == old_after_new:
            return key
    raise AssertionError("no key found")


async def append_at(b: Broker, index: int, records: list[StateRecord]) -> None:
    """Append share-state records to partition `index` of the state topic, as a writer that
    placed them there would have."""
    coord = b.share_persister
    topic = await coord.internal.ensure(STATE_TOPIC, N, b.config["share.coordinator.state.topic.segment.bytes"])
    await coord.internal.append(topic.partitions[index], [rec.encode_record(r) for r in records])


def old_history(key: Key, start_offset: int) -> tuple[list[StateRecord], ShareStateStore]:
    """Initialize, a new leader, two writes: the records an old broker would have written for
    `key`, and the state they leave."""
    plan = ShareStateStore()
    records: list[StateRecord] = []

    def step(record: StateRecord | None) -> None:
        assert record is not None
        plan.apply(record)
        records.append(record)

    step(plan.initialize(key, 3, start_offset, 1_000))
    step(plan.read(key, 1)[1])
    step(plan.write(key, state_epoch=3, leader_epoch=1, start_offset=start_offset, delivery_complete_count=5,
                    batches=[StateBatch(start_offset, start_offset + 4, 2, 1), StateBatch(start_offset + 5, start_offset + 9, 0, 2)],
                    now_ms=2_000))
    step(plan.write(key, state_epoch=3, leader_epoch=1, start_offset=start_offset + 2, delivery_complete_count=3,
                    batches=[StateBatch(start_offset + 7, start_offset + 7, 4, 3)], now_ms=3_000))
    step(plan.snapshot(key, 4_000))  # a snapshot, then an update after it
    step(plan.write(key, state_epoch=3, leader_epoch=1, start_offset=start_offset + 2, delivery_complete_count=3,
                    batches=[StateBatch(start_offset + 8, start_offset + 8, 2, 1)], now_ms=5_000))
    return records, plan


def state_of(coord: ShareCoordinator, key: Key) -> tuple[int, int, int, int, list[StateBatch]]:
    s = coord.store.states[key]
    return s.state_epoch, s.leader_epoch, s.start_offset, s.delivery_complete_count, list(s.batches)


def snapshots_in(b: Broker, index: int, key: Key) -> list[SnapshotValue]:
    topic = b.topics.get(STATE_TOPIC)
    out = []
    for _, k, v in read_records(topic.partitions[index].log):
        r = rec.decode_record(k, v)
        if r.key == key and isinstance(r.value, SnapshotValue):
            out.append(r.value)
    return out


async def test_old_placement_is_replayed_moved_and_overtaken(tmp_path: Path) -> None:
    async with running_broker(tmp_path, SETTINGS) as b:
        tid = b.topics.create("t", 1, {}, now_ms()).topic_id
        keys = [find_key(tid, "late", old_after_new=True), find_key(tid, "early", old_after_new=False)]
        expected = {}
        for start, key in enumerate(keys):
            records, plan = old_history(key, 10 * start)
            await append_at(b, old_partition(key), records)
            s = plan.states[key]
            expected[key] = (s.state_epoch, s.leader_epoch, s.start_offset, s.delivery_complete_count, list(s.batches))
        assert snapshots_in(b, new_partition(keys[0]), keys[0]) == []

    async with running_broker(tmp_path, SETTINGS) as b:
        coord = b.share_persister
        assert coord.relocation is not None
        assert await coord.relocation == 2  # both keys got a snapshot in their own partition
        for key in keys:
            assert state_of(coord, key) == expected[key]
            (moved,) = snapshots_in(b, new_partition(key), key)
            assert (moved.state_epoch, moved.leader_epoch, moved.start_offset, moved.delivery_complete_count,
                    moved.batches) == expected[key]
        summary = await coord.read_summary(*keys[0])
        assert (summary.state_epoch, summary.leader_epoch, summary.start_offset) == expected[keys[0]][:3]
        # Later changes, written to the right partitions now: an update for one, a new snapshot
        # (a new state epoch) for the other.
        await coord.write(*keys[0], state_epoch=3, leader_epoch=2, start_offset=4, delivery_complete_count=1,
                          batches=[StateBatch(4, 6, 4, 1)])
        await coord.initialize(*keys[1], state_epoch=4, start_offset=30)
        await coord.read(*keys[1], leader_epoch=7)
        after = {key: state_of(coord, key) for key in keys}
        assert after[keys[0]] != expected[keys[0]] and after[keys[1]] != expected[keys[1]]

    async with running_broker(tmp_path, SETTINGS) as b:
        coord = b.share_persister
        for key in keys:
            assert state_of(coord, key) == after[key]  # the stale copies in the old partitions lose
        assert coord.relocation is None  # nothing misplaced is the newest any more
        await coord.prune()  # the old partitions may now drop the misplaced records

    async with running_broker(tmp_path, SETTINGS) as b:
        for key in keys:
            assert state_of(b.share_persister, key) == after[key]


async def test_deleted_key_stays_deleted_when_its_tombstone_is_pruned_first(tmp_path: Path) -> None:
    async with running_broker(tmp_path, SETTINGS) as b:
        coord = b.share_persister
        tid = b.topics.create("t", 2, {}, now_ms()).topic_id
        key = find_key(tid, "gone", old_after_new=True)
        old = old_partition(key)
        # A live key of the old partition's own whose snapshot lies before the misplaced records,
        # so pruning keeps them there.
        keeper = next(k for i in range(10_000) for k in [(f"keep-{i}", tid, 1)] if new_partition(k) == old)
        await coord.initialize(*keeper, state_epoch=0, start_offset=0)
        records, _ = old_history(key, 0)
        await append_at(b, old, records)

    async with running_broker(tmp_path, SETTINGS) as b:
        coord = b.share_persister
        assert coord.relocation is not None and await coord.relocation == 1
        await coord.delete(*key)
        await coord.prune()  # the key's own partition has no live key left: pruned to its end
        own = b.topics.get(STATE_TOPIC).partitions[new_partition(key)].log
        assert own.log_start_offset == own.high_watermark
        assert snapshots_in(b, old, key)  # its misplaced records are still there

    async with running_broker(tmp_path, SETTINGS) as b:
        assert key not in b.share_persister.store.states
        assert keeper in b.share_persister.store.states
