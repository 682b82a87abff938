"""A member whose heartbeat reached the broker before its session deadline keeps its membership,
even when the broker's event loop could not read it until after that deadline (the process was
stopped, or a step such as creating an internal topic's 50 partitions held the loop). The session
expiry must not run ahead of requests that arrived in time: Kafka's network threads read them while
its coordinator is busy, so there they are queued before the expiry.

The broker is stopped with SIGSTOP while a heartbeat is on its way and continued after the deadline:
the expiry timer and the heartbeat are then both due, and the heartbeat must win. Each kind of group
is covered: share (ShareGroupHeartbeat), consumer (ConsumerGroupHeartbeat) and classic (Heartbeat)."""

from __future__ import annotations

import datetime
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

from sharebroker.testing.plugin import Broker
from tests.integration import rawkafka as rk
from tests.integration.clients import create_topic
from tests.integration.share_helpers import FAST_SHARE_BROKER, heartbeat_request, new_group
from tests.integration.test_consumer_groups import heartbeat_req, join_req, sync_req
from tests.integration.test_consumer_protocol import hb_request, join

SESSION_MS = 4000  # margin for a loaded machine between the last answer and the heartbeat sent in time
BUSY_PARTITIONS = 30
NONE = 0


def stopped_while(broker: Broker, busy: rk.RawClient, send: Callable[[], int], hold_s: float) -> int:
    """Stop the broker; send a CreateTopics of many partitions on `busy`, a connection of its own
    (once the broker runs again, creating them holds its loop for a while, as creating an internal
    topic's 50 partitions does), then `send` a request on the caller's connection (it waits in the
    broker's socket behind it); keep the broker stopped for `hold_s`, continue it. Returns what
    `send` returned (the correlation id)."""
    pid = broker.proc.pid  # type: ignore[union-attr]
    create = rk.req_cls(19, 7)
    topic = rk._nested(create, "topics")
    os.kill(pid, signal.SIGSTOP)
    try:
        create_corr = busy.send(create(topics=(topic(name=new_group("holds-the-loop"), num_partitions=BUSY_PARTITIONS,
                                                     replication_factor=1, assignments=(), configs=()),),
                                       timeout=datetime.timedelta(seconds=30), validate_only=False))
        corr = send()
        time.sleep(hold_s)  # the deadline passes while the broker cannot run
    finally:
        os.kill(pid, signal.SIGCONT)
    created = busy.receive(create, create_corr, timeout=60)
    assert [int(t.error_code) for t in created.topics] == [0], created
    return corr


@pytest.fixture
def sbroker(make_broker: Any) -> Broker:
    return make_broker({**FAST_SHARE_BROKER, "group.share.min.session.timeout.ms": str(SESSION_MS),
                        "group.share.session.timeout.ms": str(SESSION_MS),
                        "group.consumer.min.session.timeout.ms": str(SESSION_MS),
                        "group.consumer.session.timeout.ms": str(SESSION_MS),
                        "group.consumer.heartbeat.interval.ms": "500",
                        "group.consumer.min.heartbeat.interval.ms": "500",
                        "group.min.session.timeout.ms": str(SESSION_MS),
                        "group.initial.rebalance.delay.ms": "0"})


def test_a_share_heartbeat_that_arrived_in_time_survives_a_stalled_broker(sbroker: Broker, topic_name: str) -> None:
    create_topic(sbroker.bootstrap, topic_name)
    group = new_group()
    with rk.RawClient(sbroker.bootstrap, timeout=20) as raw, rk.RawClient(sbroker.bootstrap, timeout=60) as busy:
        joined = raw.request(heartbeat_request(group, "member-0001", 0, [topic_name]))
        assert int(joined.error_code) == NONE, joined
        epoch = joined.member_epoch
        beat = heartbeat_request(group, "member-0001", epoch)
        last = raw.request(beat)
        assert int(last.error_code) == NONE, last
        corr = stopped_while(sbroker, busy, lambda: raw.send(beat), hold_s=SESSION_MS / 1000 + 1.5)
        answer = raw.receive(type(beat), corr, timeout=20)
        assert int(answer.error_code) == NONE, answer  # not UNKNOWN_MEMBER_ID: it was not expired
        after = raw.request(beat)
        assert int(after.error_code) == NONE and after.member_epoch == epoch, after


def test_a_consumer_group_heartbeat_that_arrived_in_time_survives_a_stalled_broker(sbroker: Broker,
                                                                                  topic_name: str) -> None:
    create_topic(sbroker.bootstrap, topic_name)
    group = new_group("cg")
    with rk.RawClient(sbroker.bootstrap, timeout=20) as raw, rk.RawClient(sbroker.bootstrap, timeout=60) as busy:
        joined = join(raw, group, "member-0001", (topic_name,))
        assert int(joined.error_code) == NONE, joined
        beat = hb_request(group, "member-0001", joined.member_epoch)
        last = raw.request(beat)
        assert int(last.error_code) == NONE, last
        corr = stopped_while(sbroker, busy, lambda: raw.send(beat), hold_s=SESSION_MS / 1000 + 1.5)
        answer = raw.receive(type(beat), corr, timeout=20)
        assert int(answer.error_code) == NONE, answer  # not UNKNOWN_MEMBER_ID: it was not fenced
        after = raw.request(hb_request(group, "member-0001", answer.member_epoch))
        assert int(after.error_code) == NONE, after


def test_a_classic_heartbeat_that_arrived_in_time_survives_a_stalled_broker(sbroker: Broker) -> None:
    group = new_group("cg")
    with rk.RawClient(sbroker.bootstrap, timeout=20) as raw, rk.RawClient(sbroker.bootstrap, timeout=60) as busy:
        member_id, generation = classic_join_and_sync(raw, group)
        beat = heartbeat_req(group, member_id, generation)
        last = raw.request(beat)
        assert int(last.error_code) == NONE, last
        corr = stopped_while(sbroker, busy, lambda: raw.send(beat), hold_s=SESSION_MS / 1000 + 1.5)
        answer = raw.receive(type(beat), corr, timeout=20)
        assert int(answer.error_code) == NONE, answer  # not UNKNOWN_MEMBER_ID: it was not removed
        after = raw.request(beat)
        assert int(after.error_code) == NONE, after


def classic_join_and_sync(raw: rk.RawClient, group: str) -> tuple[str, int]:
    """One classic member through JoinGroup (v3: no MEMBER_ID_REQUIRED round) and SyncGroup."""
    joined = raw.request(join_req(group, session=SESSION_MS, rebalance=30000, version=3))
    assert int(joined.error_code) == NONE, joined
    synced = raw.request(sync_req(group, joined.member_id, joined.generation_id, {joined.member_id: b""}))
    assert int(synced.error_code) == NONE, synced
    return joined.member_id, joined.generation_id
