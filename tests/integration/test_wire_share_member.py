"""The project's own share-group member (cli/share_consumer.py, which the `sharegroup` Spark source
uses) against the real broker: RENEW acknowledgements (KIP-1222) sent with ShareAcknowledge v2 keep
records with this member past their lock, and are refused where the group does not allow them."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from sharebroker.cli.records import Record
from sharebroker.cli.share_consumer import ACCEPT, RENEW, ShareConsumer
from sharebroker.cli.wire import Client
from sharebroker.testing.plugin import Broker
from tests.brokers import module_broker
from tests.integration.clients import create_topic
from tests.integration.share_helpers import FAST_SHARE_BROKER, new_group, produce_values, set_earliest
from tests.integration.test_share_admin import describe_offsets

LOCK_MS = 1000


@pytest.fixture(scope="module")
def sbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from module_broker(tmp_path_factory, "wire-share-member", FAST_SHARE_BROKER)


def _member(bootstrap: str, group: str, topic: str) -> ShareConsumer:
    m = ShareConsumer(Client(bootstrap, timeout_ms=10_000), group, [topic], max_records=100, max_wait_ms=200)
    m.start()
    return m


def _poll_all(m: ShareConsumer, n: int) -> list[Record]:
    got: list[Record] = []
    deadline = time.monotonic() + 15
    while len(got) < n:
        assert time.monotonic() < deadline, f"got {len(got)} of {n} records"
        got += m.poll(300)
    return got


def _setup(sbroker: Broker, **group_configs: str) -> tuple[str, str]:
    topic, group = f"renew-{new_group()}", new_group()
    create_topic(sbroker.bootstrap, topic, 1)
    set_earliest(sbroker.bootstrap, group, share_record_lock_duration_ms=str(LOCK_MS), **group_configs)
    produce_values(sbroker.bootstrap, topic, [f"job-{i}".encode() for i in range(10)], partition=0)
    return topic, group


def test_renewed_records_stay_with_the_member_past_their_lock(sbroker):
    topic, group = _setup(sbroker)
    a, b = _member(sbroker.bootstrap, group, topic), _member(sbroker.bootstrap, group, topic)
    try:
        records = _poll_all(a, 10)
        offsets = {(topic, 0): [r.offset for r in records]}
        assert a.acquisition_lock_ms == LOCK_MS  # as the ShareFetch response said
        # Renew every 300 ms for three lock periods (the renewal pacing is what is tested), while
        # the other member finds nothing to acquire.
        others: list[Record] = []
        until = a.acquired_at + 3 * LOCK_MS / 1000
        while time.monotonic() < until:
            assert a.acknowledge_now(offsets, RENEW) == {}
            others += b.poll(300)
        assert others == []
        assert a.acknowledge_now(offsets, ACCEPT) == {}
        (p,) = [p for t in describe_offsets(sbroker.bootstrap, group).topics for p in t.partitions]
        assert (p.start_offset, p.lag) == (10, 0)
    finally:
        a.close()
        b.close()


def test_without_renewal_the_lock_runs_out_and_the_accept_is_refused(sbroker):
    topic, group = _setup(sbroker)
    a, b = _member(sbroker.bootstrap, group, topic), _member(sbroker.bootstrap, group, topic)
    try:
        records = _poll_all(a, 10)
        redelivered = _poll_all(b, 10)  # once a's locks ran out
        assert {r.delivery_count for r in redelivered} == {2}
        refused = a.acknowledge_now({(topic, 0): [r.offset for r in records]}, ACCEPT)
        assert list(refused) == [(topic, 0)] and "INVALID_RECORD_STATE" in refused[(topic, 0)]
    finally:
        a.close()
        b.close()


def test_renew_is_refused_where_the_group_does_not_allow_it(sbroker):
    topic, group = _setup(sbroker, share_renew_acknowledge_enable="false")
    a = _member(sbroker.bootstrap, group, topic)
    try:
        records = _poll_all(a, 10)
        offsets = {(topic, 0): [r.offset for r in records]}
        refused = a.acknowledge_now(offsets, RENEW)
        assert "Renewing acquisition locks is not enabled for the group" in refused[(topic, 0)]
        assert a.acknowledge_now(offsets, ACCEPT) == {}  # still held: the refused renewal changed nothing
    finally:
        a.close()
