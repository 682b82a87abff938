"""Topics are created with their partitions' directories and files made on a worker thread
(LogManager.prepare), so the event loop keeps serving: `__share_group_state`'s 50 partitions held
every request for 0.2-0.5 s when they were made on the loop. Internal topics on first use
(InternalTopics.ensure, through Topics.create_async); while a name is being made, another creation
of it is refused as existing."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from sharebroker.broker.internal_topics import InternalTopics
from sharebroker.broker.topics import Topics
from sharebroker.config import BrokerConfig
from sharebroker.protocol.errors import ErrorCode, KafkaError
from sharebroker.storage import read_partition_metadata

NOW = 1_700_000_000_000
STATE = "__share_group_state"


class _NoFlushPolicy:
    def after_append(self, partition: Any, *, wait: bool) -> Awaitable[None] | None:
        return None

    def segment_rolled(self, partition: Any) -> None:
        pass


def _topics(path: Path) -> Topics:
    config = BrokerConfig.load(None, {}, {"log.dirs": str(path), "listeners": "PLAINTEXT://127.0.0.1:0"})
    topics = Topics(config, path)
    topics.open(NOW)
    return topics


async def test_the_event_loop_serves_while_an_internal_topics_partitions_are_made(tmp_path: Path) -> None:
    topics = _topics(tmp_path)
    internal = InternalTopics(topics, _NoFlushPolicy())
    loop_ran = threading.Event()
    made_on: list[threading.Thread] = []
    real = topics.logs.prepare

    def prepare(*args: Any) -> frozenset[int]:
        made_on.append(threading.current_thread())
        # Made on the loop's thread, this would wait for a coroutine that cannot run: it fails.
        assert loop_ran.wait(30), "the event loop did not run while the partitions were made"
        return real(*args)

    topics.logs.prepare = prepare  # type: ignore[method-assign]

    async def another_request() -> None:
        loop_ran.set()

    creating = asyncio.ensure_future(internal.ensure(STATE, 50, 1 << 20))
    await another_request()
    topic = await creating
    assert made_on and made_on[0] is not threading.main_thread()
    assert len(topic.partitions) == 50 and topics.get(STATE) is topic
    for p in topic.partitions:
        assert p.log.topic_id == str(topic.topic_id)
        assert read_partition_metadata(tmp_path / f"{STATE}-{p.index}") == topic.topic_id
    topics.close()

    again = _topics(tmp_path)  # what was made is what a restart opens, with nothing to recover
    reopened = again.get(STATE)
    assert reopened is not None and reopened.topic_id == topic.topic_id and len(reopened.partitions) == 50
    assert not again.logs.report and all(not p.log.recovery_report for p in reopened.partitions)
    again.close()


async def test_callers_asking_at_once_share_one_creation(tmp_path: Path) -> None:
    topics = _topics(tmp_path)
    internal = InternalTopics(topics, _NoFlushPolicy())
    calls: list[str] = []
    real = topics.logs.prepare

    def prepare(topic: str, *args: Any) -> frozenset[int]:
        calls.append(topic)
        return real(topic, *args)

    topics.logs.prepare = prepare  # type: ignore[method-assign]
    first, second, third = await asyncio.gather(*(internal.ensure(STATE, 5, 1 << 20) for _ in range(3)))
    assert first is second is third and calls == [STATE]
    assert await internal.ensure(STATE, 5, 1 << 20) is first and calls == [STATE]
    topics.close()


async def test_a_creation_the_disk_refuses_leaves_nothing_and_can_be_retried(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    topics = _topics(tmp_path)
    internal = InternalTopics(topics, _NoFlushPolicy())
    real_replace = os.replace
    renames = [0]

    def replace(src: Any, dst: Any) -> None:  # the third partition's metadata: a full disk
        if str(dst).endswith("partition.metadata"):
            renames[0] += 1
            if renames[0] == 3:
                raise OSError(errno.ENOSPC, "No space left on device")
        real_replace(src, dst)

    def leftover() -> list[str]:
        return sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(STATE))

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KafkaError) as refused:
        await internal.ensure(STATE, 5, 1 << 20)
    assert refused.value.code == ErrorCode.coordinator_not_available
    assert "No space left on device" in (refused.value.message or "")
    assert topics.get(STATE) is None and leftover() == [] and renames[0] == 3
    monkeypatch.setattr(os, "replace", real_replace)
    topic = await internal.ensure(STATE, 5, 1 << 20)
    assert len(topic.partitions) == 5 and topics.get(STATE) is topic
    assert leftover() == [f"{STATE}-{i}" for i in range(5)]
    topics.close()


async def test_out_of_descriptors_on_the_worker_thread_the_loop_makes_them(tmp_path: Path) -> None:
    """The worker thread cannot take descriptors back from the file cache (the loop's); at the
    process's limit the partitions are made on the loop, which can, as before."""
    topics = _topics(tmp_path)
    internal = InternalTopics(topics, _NoFlushPolicy())

    def prepare(*args: Any) -> frozenset[int]:
        raise OSError(errno.EMFILE, "Too many open files")

    topics.logs.prepare = prepare  # type: ignore[method-assign]
    topic = await internal.ensure(STATE, 5, 1 << 20)
    assert len(topic.partitions) == 5
    assert all(read_partition_metadata(tmp_path / f"{STATE}-{i}") == topic.topic_id for i in range(5))
    topics.close()


async def test_a_name_being_created_is_refused_as_existing_until_it_is(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from sharebroker.broker.apis.topics_admin import _validate_new_topic

    topics = _topics(tmp_path)
    release = threading.Event()
    real = topics.logs.prepare

    def prepare(*args: Any) -> frozenset[int]:
        assert release.wait(30)
        return real(*args)

    topics.logs.prepare = prepare  # type: ignore[method-assign]
    first = asyncio.ensure_future(topics.create_async("jobs.a", 3, {}, NOW))
    while "jobs.a" not in topics.creating:
        await asyncio.sleep(0)
    broker = SimpleNamespace(topics=topics)
    for attempt in (lambda: topics.create("jobs.a", 1, {}, NOW), lambda: _validate_new_topic(broker, "jobs.a")):
        with pytest.raises(KafkaError) as exists:
            attempt()  # type: ignore[no-untyped-call]
        assert exists.value.code == ErrorCode.topic_already_exists
    with pytest.raises(KafkaError) as exists:
        await topics.create_async("jobs.a", 1, {}, NOW)
    assert exists.value.code == ErrorCode.topic_already_exists
    with pytest.raises(KafkaError) as collides:
        _validate_new_topic(broker, "jobs_a")  # '.' against '_': Kafka's metric-name clash
    assert collides.value.code == ErrorCode.invalid_topic_exception
    assert topics.get("jobs.a") is None
    release.set()
    topic = await first
    assert len(topic.partitions) == 3 and topics.get("jobs.a") is topic and not topics.creating
    with pytest.raises(KafkaError) as exists:
        _validate_new_topic(broker, "jobs.a")
    assert exists.value.code == ErrorCode.topic_already_exists
    topics.close()
