"""Coordinator writes are planned, appended, then applied (DESIGN principle 2): an offset commit
or group metadata write whose __consumer_offsets append fails (a full disk) changes nothing a
client can fetch or a compaction restates, a compaction during a commit's append restates the
commit, concurrent commits end as a replay would, and a share-state write the disk refuses is
answered as Kafka's share coordinator answers it. In-process Broker on a temp dir; the full disk
is the partition's log refusing appends."""

from __future__ import annotations

import asyncio
import errno
import time
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from sharebroker.broker.flusher import now_ms
from sharebroker.broker.server import Broker
from sharebroker.protocol.errors import KafkaError
from tests.unit.test_group_log import running_broker


class FullDisk:
    """A partition log whose appends fail as on a full disk; everything else is the real log's."""

    def __init__(self, log: Any) -> None:
        self._log = log

    def append(self, *args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)


def offsets_partition(b: Broker, group: str) -> Any:
    return b.topics.get("__consumer_offsets").partitions[b.group_log.partition_of(group)]


async def commit(b: Broker, group: str, offset: int) -> dict[tuple[str, int], ErrorCode]:
    return await b.classic_groups.commit_offsets(group_id=group, member_id="", group_instance_id=None,
                                                 generation_id=-1, offsets=[("t", 0, offset, -1, "")], version=9)


async def fetched(b: Broker, group: str) -> int:
    ((_topic, ((_p, offset, *_rest),)),) = await b.classic_groups.fetch_offsets(group, [("t", [0])], False)
    return offset


async def test_a_commit_whose_append_fails_changes_nothing(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as b:
        b.topics.create("t", 1, {}, now_ms())
        assert await commit(b, "g", 5) == {("t", 0): ErrorCode.none}
        partition = offsets_partition(b, "g")
        real = partition.log
        partition.log = FullDisk(real)
        with pytest.raises(KafkaError) as err:
            await commit(b, "g", 9)
        assert err.value.code == ErrorCode.not_coordinator
        assert await fetched(b, "g") == 5
        # A simple group made for a commit that failed is not left behind either.
        other = next(f"s{i}" for i in range(1000) if b.group_log.partition_of(f"s{i}") == partition.index)
        with pytest.raises(KafkaError):
            await commit(b, other, 1)
        assert b.group_type(other) is None and other not in b.classic_groups.offsets
        partition.log = real
        assert await commit(b, "g", 9) == {("t", 0): ErrorCode.none}
        assert await fetched(b, "g") == 9


async def test_stored_offsets_whose_append_fails_change_nothing(tmp_path: Path) -> None:
    # The path of consumer-group (KIP-848) commits, once the member was validated.
    async with running_broker(tmp_path) as b:
        b.topics.create("t", 1, {}, now_ms())
        assert await b.classic_groups.store_offsets("cg", [("t", 0, 3, -1, "")]) == {("t", 0): ErrorCode.none}
        partition = offsets_partition(b, "cg")
        real = partition.log
        partition.log = FullDisk(real)
        with pytest.raises(KafkaError):
            await b.classic_groups.store_offsets("cg", [("t", 0, 8, -1, "")])
        partition.log = real
        assert b.classic_groups.offsets["cg"][("t", 0)].offset == 3


async def test_a_compaction_during_an_in_flight_commit_restates_the_commit(tmp_path: Path) -> None:
    # With an fsync per append, a commit waits for the flusher thread between its append and its
    # apply; a compaction running then must not restate the offset from before it.
    async with running_broker(tmp_path, {"log.flush.interval.messages": "1"}) as b:
        b.topics.create("t", 1, {}, now_ms())
        await commit(b, "g", 5)
        plog = offsets_partition(b, "g").log
        end = plog.log_end_offset
        pending = asyncio.get_running_loop().create_task(commit(b, "g", 9))
        deadline = time.monotonic() + 10
        while plog.log_end_offset == end:  # the commit's record is in the log, its fsync pending
            assert time.monotonic() < deadline and not pending.done()
            await asyncio.sleep(0)
        await asyncio.gather(pending, b.group_log.compact(force=True))
        assert await fetched(b, "g") == 9
    async with running_broker(tmp_path) as b2:
        assert await fetched(b2, "g") == 9


async def test_a_group_metadata_write_that_fails_is_not_restated_by_compaction(tmp_path: Path) -> None:
    from sharebroker.broker.groups import classic_records as crec
    from tests.unit.test_classic_group_coordinator import SETTINGS, _stable_member

    async with running_broker(tmp_path, SETTINGS) as b:
        b.topics.create("t", 1, {}, now_ms())
        cg = b.classic_groups
        member = await _stable_member(b, "g")  # generation 1, persisted
        partition = offsets_partition(b, "g")
        real = partition.log
        partition.log = FullDisk(real)
        cg.rebalance("g")
        kw = {"group_id": "g", "group_instance_id": None, "client_id": "c", "client_host": "/127.0.0.1",
              "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000, "protocol_type": "consumer",
              "protocols": (("range", b"meta"),), "version": 5}
        joined = await cg.join(member_id=member, **kw)
        assert joined.generation_id == 2
        synced = await cg.sync(group_id="g", member_id=member, group_instance_id=None, generation_id=2,
                               protocol_type="consumer", protocol_name="range", assignments={member: b"B"})
        assert synced.error != ErrorCode.none  # the assignment was not persisted
        partition.log = real
        assert crec.decode_group_metadata_value(cg._persisted["g"]).generation == 1


async def test_concurrent_commits_of_one_partition_keep_the_later_record(tmp_path: Path) -> None:
    # Both appends wait for one fsync and are applied after it: memory ends where a replay does.
    async with running_broker(tmp_path, {"log.flush.interval.messages": "1"}) as b:
        b.topics.create("t", 1, {}, now_ms())
        await commit(b, "g", 1)
        await asyncio.gather(commit(b, "g", 5), commit(b, "g", 9))
        assert await fetched(b, "g") == 9
    async with running_broker(tmp_path) as b2:
        assert await fetched(b2, "g") == 9


async def test_a_share_state_write_the_disk_refuses_answers_not_coordinator_and_changes_nothing(tmp_path: Path) -> None:
    # Kafka's share coordinator answers a storage error NOT_COORDINATOR; the share-partition
    # leader then tells its client COORDINATOR_NOT_AVAILABLE (retriable), not UNKNOWN_SERVER_ERROR.
    async with running_broker(tmp_path) as b:
        topic = b.topics.create("t", 2, {}, now_ms())
        persister = b.share_persister
        await persister.initialize("g", topic.topic_id, 0, 0, 0)  # creates __share_group_state
        partition = b.topics.get("__share_group_state").partitions[persister._partition_for(("g", topic.topic_id, 1))]
        real = partition.log
        partition.log = FullDisk(real)
        with pytest.raises(KafkaError) as err:
            await persister.initialize("g", topic.topic_id, 1, 0, 0)
        assert err.value.code == ErrorCode.not_coordinator
        partition.log = real
        assert ("g", topic.topic_id, 1) not in persister.store.states
        await persister.initialize("g", topic.topic_id, 1, 0, 0)
        assert ("g", topic.topic_id, 1) in persister.store.states
