"""A topic's partitions are made on the event loop a slice at a time (Topics.create_async, and
CreatePartitions through Topics.add_partitions), other requests served between slices: a
partition is a directory, four files and their fsyncs, so `__share_group_state`'s 50 held every
request for 0.2-0.5 s, and a CreateTopics of 2,000 partitions for 4.3 s, when they were made in one
go. While a name is being made it is not seen, and another creation of it is refused as existing;
a creation that fails or is cancelled leaves nothing behind. Real Topics, TopicStore and
LogManager on a temp dir; the slice's length is set to 0 (a slice per partition) or to a minute
(one slice), so what is asserted does not depend on the machine's speed."""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from sharebroker.broker import topics as topics_module
from sharebroker.broker.internal_topics import InternalTopics
from sharebroker.broker.topics import Topics
from sharebroker.protocol.errors import ErrorCode, KafkaError
from sharebroker.storage import read_partition_metadata
from tests.unit.test_topic_changes import partition_dirs, stored, topics_in

NOW = 1_700_000_000_000
STATE = "__share_group_state"


class _NoFlushPolicy:
    def after_append(self, partition: Any, *, wait: bool) -> Awaitable[None] | None:
        return None

    def segment_rolled(self, partition: Any) -> None:
        pass


class _Ticker:
    """Another request's coroutine: counts the turns the event loop gives it."""

    def __init__(self) -> None:
        self.ticks = 0
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            self.ticks += 1
            await asyncio.sleep(0)

    def stop(self) -> None:
        self._task.cancel()


def _watch_creations(topics: Topics, ticker: _Ticker) -> list[tuple[int, int]]:
    """(partition, the ticker's count when its log was made) for each partition log made."""
    made: list[tuple[int, int]] = []
    real = topics.logs.create

    def create(topic: str, partition: int, *args: Any, **kwargs: Any) -> Any:
        made.append((partition, ticker.ticks))
        return real(topic, partition, *args, **kwargs)

    topics.logs.create = create  # type: ignore[method-assign]
    return made


async def test_other_requests_run_between_the_slices_of_a_creation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topics_module, "CREATE_SLICE_S", 0.0)  # every partition is a slice
    topics = topics_in(tmp_path)
    ticker = _Ticker()
    made = _watch_creations(topics, ticker)
    creating = asyncio.ensure_future(topics.create_async("jobs", 20, {}, NOW))
    seen_meanwhile: list[bool] = []
    await asyncio.sleep(0)  # the creation starts
    while not creating.done():
        seen_meanwhile.append(topics.get("jobs") is not None or "jobs" not in topics.creating)
        await asyncio.sleep(0)
    topic = creating.result()
    ticker.stop()
    assert [p for p, _ in made] == list(range(20))
    ticks = [t for _, t in made]
    assert all(b > a for a, b in zip(ticks, ticks[1:])), f"the loop did not run between partitions: {ticks}"
    assert len(seen_meanwhile) >= 19 and not any(seen_meanwhile)  # not seen until made
    assert topics.get("jobs") is topic and not topics.creating and stored(tmp_path)["jobs"] == 20
    for p in topic.partitions:
        assert read_partition_metadata(tmp_path / f"jobs-{p.index}") == topic.topic_id
    topics.close()

    again = topics_in(tmp_path)  # what was made is what a restart opens, with nothing to recover
    reopened = again.get("jobs")
    assert reopened is not None and reopened.topic_id == topic.topic_id and len(reopened.partitions) == 20
    assert not again.logs.report and all(not p.log.recovery_report for p in reopened.partitions)
    again.close()


async def test_a_creation_shorter_than_a_slice_holds_the_loop_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topics_module, "CREATE_SLICE_S", 60.0)
    topics = topics_in(tmp_path)
    ticker = _Ticker()
    await asyncio.sleep(0)
    made = _watch_creations(topics, ticker)
    await topics.create_async("jobs", 20, {}, NOW)
    ticker.stop()
    assert len(made) == 20 and len({t for _, t in made}) == 1
    topics.close()


async def test_internal_topic_callers_asking_at_once_share_one_creation(tmp_path: Path) -> None:
    topics = topics_in(tmp_path)
    internal = InternalTopics(topics, _NoFlushPolicy())
    calls: list[str] = []
    real = topics.create_async

    async def create_async(name: str, *args: Any) -> Any:
        calls.append(name)
        return await real(name, *args)

    topics.create_async = create_async  # type: ignore[method-assign]
    first, second, third = await asyncio.gather(*(internal.ensure(STATE, 5, 1 << 20) for _ in range(3)))
    assert first is second is third and calls == [STATE]
    assert await internal.ensure(STATE, 5, 1 << 20) is first and calls == [STATE]
    topics.close()


async def test_a_creation_the_disk_refuses_leaves_nothing_and_can_be_retried(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topics_module, "CREATE_SLICE_S", 0.0)
    topics = topics_in(tmp_path)
    internal = InternalTopics(topics, _NoFlushPolicy())
    real_replace = os.replace
    renames = [0]

    def replace(src: Any, dst: Any) -> None:  # the third partition's metadata: a full disk
        if str(dst).endswith("partition.metadata"):
            renames[0] += 1
            if renames[0] == 3:
                raise OSError(errno.ENOSPC, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KafkaError) as refused:
        await internal.ensure(STATE, 5, 1 << 20)
    assert refused.value.code == ErrorCode.coordinator_not_available
    assert "No space left on device" in (refused.value.message or "")
    assert topics.get(STATE) is None and partition_dirs(tmp_path, STATE) == [] and renames[0] == 3
    assert topics.logs.get(STATE, 0) is None and not topics.creating
    monkeypatch.setattr(os, "replace", real_replace)
    topic = await internal.ensure(STATE, 5, 1 << 20)
    assert len(topic.partitions) == 5 and topics.get(STATE) is topic
    assert partition_dirs(tmp_path, STATE) == [f"{STATE}-{i}" for i in range(5)]
    topics.close()


@pytest.mark.parametrize("how", ["cancelled", "internal topics stopped"])
async def test_a_creation_stopped_half_way_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """The broker stopping (its connections' tasks cancelled, then InternalTopics.stop) in the
    middle of a creation: the partitions made so far are removed and the name is free."""
    monkeypatch.setattr(topics_module, "CREATE_SLICE_S", 0.0)
    topics = topics_in(tmp_path)
    internal = InternalTopics(topics, _NoFlushPolicy())
    name = "jobs" if how == "cancelled" else STATE
    creating = asyncio.ensure_future(topics.create_async(name, 20, {}, NOW) if how == "cancelled"
                                     else internal.ensure(STATE, 20, 1 << 20))
    while len(partition_dirs(tmp_path, name)) < 5:
        await asyncio.sleep(0)
    if how == "cancelled":
        creating.cancel()
    else:
        await internal.stop()
    with pytest.raises(asyncio.CancelledError):
        await creating
    assert partition_dirs(tmp_path, name) == [] and topics.get(name) is None and name not in stored(tmp_path)
    assert topics.logs.get(name, 0) is None and not topics.creating
    topics.close()


async def test_a_name_being_created_is_refused_as_existing_until_it_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from sharebroker.broker.apis.topics_admin import _validate_new_topic

    monkeypatch.setattr(topics_module, "CREATE_SLICE_S", 0.0)
    topics = topics_in(tmp_path)
    first = asyncio.ensure_future(topics.create_async("jobs.a", 30, {}, NOW))
    while not partition_dirs(tmp_path, "jobs.a"):
        await asyncio.sleep(0)
    assert not first.done()
    broker = SimpleNamespace(topics=topics)
    attempts: list[Callable[[], object]] = [lambda: topics.create("jobs.a", 1, {}, NOW),
                                            lambda: _validate_new_topic(broker, "jobs.a")]  # type: ignore[arg-type]
    for attempt in attempts:
        with pytest.raises(KafkaError) as exists:
            attempt()
        assert exists.value.code == ErrorCode.topic_already_exists
    with pytest.raises(KafkaError) as exists:
        await topics.create_async("jobs.a", 1, {}, NOW)
    assert exists.value.code == ErrorCode.topic_already_exists
    with pytest.raises(KafkaError) as collides:
        _validate_new_topic(broker, "jobs_a")  # type: ignore[arg-type]  # '.' against '_': Kafka's metric-name clash
    assert collides.value.code == ErrorCode.invalid_topic_exception
    assert topics.get("jobs.a") is None and not first.done()
    topic = await first
    assert len(topic.partitions) == 30 and topics.get("jobs.a") is topic and not topics.creating
    with pytest.raises(KafkaError) as exists:
        _validate_new_topic(broker, "jobs.a")  # type: ignore[arg-type]
    assert exists.value.code == ErrorCode.topic_already_exists
    topics.close()


async def test_partition_additions_to_one_topic_take_turns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two CreatePartitions at once: the second is checked against the count the first left, as
    Kafka's controller orders them, and no partition is made twice."""
    monkeypatch.setattr(topics_module, "CREATE_SLICE_S", 0.0)
    topics = topics_in(tmp_path)
    topics.create("t", 1, {}, NOW)
    results = await asyncio.gather(topics.add_partitions("t", 8, NOW), topics.add_partitions("t", 12, NOW),
                                   topics.add_partitions("t", 12, NOW), return_exceptions=True)
    assert results[:2] == [1, 8]
    assert isinstance(results[2], KafkaError) and results[2].code == ErrorCode.invalid_partitions
    assert results[2].message == "Topic already has 12 partitions."
    topic = topics.get("t")
    assert topic is not None and [p.index for p in topic.partitions] == list(range(12))
    assert stored(tmp_path)["t"] == 12 and partition_dirs(tmp_path, "t") == sorted(f"t-{i}" for i in range(12))
    topics.close()


async def test_a_deletion_waits_for_partitions_being_added(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topics_module, "CREATE_SLICE_S", 0.0)
    topics = topics_in(tmp_path)
    topics.create("t", 1, {}, NOW)
    adding = asyncio.ensure_future(topics.add_partitions("t", 20, NOW))
    while len(partition_dirs(tmp_path, "t")) < 3:
        await asyncio.sleep(0)

    async def delete() -> None:
        await topics.settled("t")
        assert adding.done()
        topics.delete("t")

    await delete()
    assert adding.result() == 1
    assert partition_dirs(tmp_path, "t") == [] and "t" not in stored(tmp_path)
    assert all(topics.logs.get("t", i) is None for i in range(20))
    topics.close()


@pytest.mark.parametrize("slice_s, turns", [(0.0, 10), (60.0, 0)])
async def test_a_sweep_in_slices_lets_the_loop_run_between_slices(monkeypatch: pytest.MonkeyPatch, slice_s: float,
                                                                  turns: int) -> None:
    """The broker's sweeps over every partition (retention) and the removal of deleted
    directories go through `in_slices`: a slice per item at 0 s, one slice at a minute."""
    monkeypatch.setattr(topics_module, "CREATE_SLICE_S", slice_s)
    ticker = _Ticker()
    await asyncio.sleep(0)
    seen: list[int] = []
    async for _item in topics_module.in_slices(range(11)):
        seen.append(ticker.ticks)
    ticker.stop()
    assert len(seen) == 11 and len(set(seen)) - 1 == turns
