"""The share coordinator runs one operation at a time per share partition (Kafka's shard order):
writes of one key that arrive while an append is in flight wait their turn and go in arrival
order, writes of other keys do not wait, and a write cancelled while it waits (or just as its
turn comes) leaves the order of the others and the turn table as they should be."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from sharebroker.broker.share_state import records as rec
from sharebroker.broker.share_state.coordinator import ShareCoordinator
from sharebroker.broker.share_state.store import StateBatch
from sharebroker.config import BrokerConfig

TOPIC_ID = uuid.uuid4()


class _Partition:
    def __init__(self, index: int) -> None:
        self.index = index


class _Topic:
    def __init__(self, n: int) -> None:
        self.partitions = [_Partition(i) for i in range(n)]


class _Topics:
    def get_by_id(self, topic_id: Any) -> Any:
        return _Topic(4) if topic_id == TOPIC_ID else None


class GatedLog:
    """An InternalLog whose appends wait until the test opens the gate; it records what it got."""

    def __init__(self) -> None:
        self.topic: _Topic | None = None
        self.gate = asyncio.Event()
        self.gate.set()
        self.appended: list[tuple[int, list[tuple[bytes, bytes | None]]]] = []
        self.in_flight = 0
        self.max_in_flight = 0

    def get(self, name: str) -> Any:
        return self.topic

    async def ensure(self, name: str, partitions: int, segment_bytes: int) -> Any:
        if self.topic is None:
            self.topic = _Topic(partitions)
        return self.topic

    async def append(self, partition: Any, records: list[tuple[bytes, bytes | None]], *,
                     transaction: tuple[int, int] | None = None) -> int:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await self.gate.wait()
        finally:
            self.in_flight -= 1
        offset = sum(len(r) for _, r in self.appended)
        self.appended.append((partition.index, records))
        return offset


def coordinator() -> tuple[ShareCoordinator, GatedLog]:
    config = BrokerConfig.load(None, {}, {"log.dirs": "/nonexistent", "listeners": "PLAINTEXT://127.0.0.1:0",
                                          "share.coordinator.state.topic.num.partitions": "1"})
    log = GatedLog()
    return ShareCoordinator(config, _Topics(), log), log  # type: ignore[arg-type]


async def _ready(coord: ShareCoordinator, group: str) -> None:
    await coord.initialize(group, TOPIC_ID, 0, 1, 0)
    await coord.read(group, TOPIC_ID, 0, 0)


def write(coord: ShareCoordinator, group: str, offset: int) -> Any:
    return coord.write(group, TOPIC_ID, 0, state_epoch=1, leader_epoch=0, start_offset=offset,
                       delivery_complete_count=-1, batches=[StateBatch(offset, offset, 2, 1)])


def start_offsets(log: GatedLog, group: str) -> list[int]:
    out = []
    for _, records in log.appended:
        for key, value in records:
            if rec.decode_key(key)[1] == group and value is not None:
                record = rec.decode_record(key, value)
                if isinstance(record.value, rec.UpdateValue) and record.value.start_offset >= 0:
                    out.append(record.value.start_offset)
    return out


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_writes_of_one_key_wait_their_turn_in_arrival_order() -> None:
    coord, log = coordinator()
    await _ready(coord, "g")
    await _ready(coord, "other")
    log.gate.clear()
    tasks = [asyncio.create_task(write(coord, "g", n)) for n in (1, 2, 3)]
    await _settle()
    assert log.in_flight == 1  # the first append runs; the other two writes of "g" wait
    other = asyncio.create_task(write(coord, "other", 7))  # another key: not behind them
    await _settle()
    assert log.in_flight == 1 and not other.done()  # its append joins the partition's queue
    log.gate.set()
    await asyncio.gather(*tasks, other)
    assert start_offsets(log, "g") == [1, 2, 3]
    assert coord.store.states[("g", TOPIC_ID, 0)].start_offset == 3
    assert coord._key_waiters == {}


async def test_a_write_cancelled_while_it_waits_leaves_the_others_in_order() -> None:
    coord, log = coordinator()
    await _ready(coord, "g")
    log.gate.clear()
    first = asyncio.create_task(write(coord, "g", 1))
    await _settle()
    second = asyncio.create_task(write(coord, "g", 2))
    third = asyncio.create_task(write(coord, "g", 3))
    await _settle()
    second.cancel()
    await _settle()
    log.gate.set()
    await asyncio.gather(first, third)
    assert second.cancelled()
    assert start_offsets(log, "g") == [1, 3]
    assert coord._key_waiters == {}


async def test_a_write_cancelled_as_its_turn_comes_passes_the_turn_on() -> None:
    coord, _log = coordinator()
    key = ("g", TOPIC_ID, 0)
    await coord._acquire(key)  # the running operation
    second = asyncio.create_task(coord._acquire(key))
    third = asyncio.create_task(coord._acquire(key))
    await _settle()
    assert not second.done() and not third.done()
    coord._release(key)  # the turn goes to `second`...
    second.cancel()  # ...which is cancelled before it runs
    await asyncio.wait_for(third, 10)  # so it passes the turn on
    assert second.cancelled()
    assert list(coord._key_waiters) == [key]
    coord._release(key)
    assert coord._key_waiters == {}
