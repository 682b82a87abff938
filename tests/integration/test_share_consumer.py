"""Share groups (KIP-932) through confluent_kafka.ShareConsumer (librdkafka 2.16) against the real
broker: delivery once per record, sharing between members, explicit acknowledgement, acquisition
locks and the delivery limit, release on close, share.auto.offset.reset, member session timeout,
and long polling."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import AcknowledgeType, KafkaError, KafkaException

from tests.integration.clients import create_topic
from tests.integration.share_helpers import (
    FAST_SHARE_BROKER,
    commit_errors,
    describe_group_configs,
    describe_share_group,
    list_groups,
    new_group,
    poll_for,
    poll_once,
    poll_until,
    produce_values,
    set_earliest,
    set_group_configs,
    share_consumer,
    values,
)
from tests.brokers import module_broker
from sharebroker.testing.plugin import Broker
from sharebroker.testing import wait_for

TIMEOUT = 20.0


@pytest.fixture(scope="module")
def sbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """One broker for the module with fast share-group heartbeats and session timeout (broker
    level) and bounds that let a group choose a short acquisition lock (group level)."""
    yield from module_broker(tmp_path_factory, "share-broker", FAST_SHARE_BROKER)


def _closing(*consumers):
    """Close every consumer; a failing close must not hide the test's own failure."""
    for c in consumers:
        with contextlib.suppress(Exception):
            c.close()


def _wait_members(bootstrap: str, group: str, n: int, timeout: float = TIMEOUT, check=None):
    """Wait until ShareGroupDescribe shows n members, each with a non-empty assignment."""
    def ok():
        g = describe_share_group(bootstrap, group)
        if int(g.error_code) != 0 or len(g.members) != n:
            return None
        if not all(tp.partitions for m in g.members for tp in m.assignment.topic_partitions) or \
                not all(m.assignment.topic_partitions for m in g.members):
            return None
        if check is not None and not check(g):
            return None
        return g
    return wait_for(ok, timeout, interval=0.1, message=f"{n} assigned members in {group}")


# ---------------------------------------------------------------------------------------------
# 1. one consumer, implicit acknowledgement


def test_one_consumer_receives_every_record_exactly_once(sbroker, topic_name):
    create_topic(sbroker.bootstrap, topic_name, partitions=3)
    group = new_group()
    set_earliest(sbroker.bootstrap, group)
    n = 300
    sent = [f"v-{i}".encode() for i in range(n)]
    delivered = produce_values(sbroker.bootstrap, topic_name, sent)
    assert {m.partition() for m in delivered} <= {0, 1, 2}

    c = share_consumer(sbroker.bootstrap, group, [topic_name])
    try:
        got = poll_until(c, lambda g: len(g) >= n, TIMEOUT, what=f"{n} records")
        # a little longer: nothing is delivered a second time
        got += poll_for(c, 1.0)
    finally:
        c.close()  # implicit acks of a poll go out with the next poll; librdkafka sends none on close
    assert sorted(values(got)) == sorted(sent), "every record exactly once"
    coords = [(m.partition(), m.offset()) for m in got]
    assert len(set(coords)) == len(coords) == n
    assert {m.delivery_count() for m in got} == {1}
    assert {(m.partition(), m.offset()) for m in got} == {(m.partition(), m.offset()) for m in delivered}

    # everything was accepted: a new member of the same group gets nothing more
    c2 = share_consumer(sbroker.bootstrap, group, [topic_name])
    try:
        again = poll_for(c2, 2.0)
    finally:
        c2.close()
    assert again == [], [(m.partition(), m.offset(), m.delivery_count()) for m in again]


# ---------------------------------------------------------------------------------------------
# 2. three members share one partition / three partitions


@pytest.mark.parametrize("partitions", [1, 3])
def test_three_consumers_receive_disjoint_sets_covering_everything(sbroker, topic_name, partitions):
    create_topic(sbroker.bootstrap, topic_name, partitions=partitions)
    group = new_group()
    set_earliest(sbroker.bootstrap, group)
    consumers = [share_consumer(sbroker.bootstrap, group, [topic_name], **{"client.id": f"member-{i}"})
                 for i in range(3)]
    try:
        # the three have joined and the assignor gave every one of them a share
        def balanced(g):
            parts = [sorted(p for tp in m.assignment.topic_partitions for p in tp.partitions) for m in g.members]
            if partitions == 1:
                return parts == [[0], [0], [0]]  # one partition is shared by every member
            return sorted(parts) == [[0], [1], [2]]  # one partition each
        for c in consumers:
            poll_once(c, 0.05)  # drive the join
        _wait_members(sbroker.bootstrap, group, 3, check=balanced)

        n = 300
        sent = [f"r-{i}".encode() for i in range(n)]
        produce_values(sbroker.bootstrap, topic_name, sent[:n // 2])
        produce_values(sbroker.bootstrap, topic_name, sent[n // 2:])

        lock = threading.Lock()
        union: set[bytes] = set()
        received: list[list] = [[] for _ in consumers]
        errors: list[BaseException] = []
        stop = threading.Event()
        deadline = time.monotonic() + TIMEOUT

        def run(i: int) -> None:
            try:
                while not stop.is_set() and time.monotonic() < deadline:
                    batch = poll_once(consumers[i], 0.2)
                    with lock:
                        received[i].extend((m.partition(), m.offset(), m.value(), m.delivery_count())
                                           for m in batch)
                        union.update(m.value() for m in batch)
                        if len(union) >= n:
                            stop.set()
            except BaseException as exc:  # noqa: BLE001 - re-raised by the main thread's assert
                errors.append(exc)
                stop.set()

        threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT + 5)
        assert not errors, errors
        assert union == set(sent), f"missing {sorted(set(sent) - union)[:10]} after {TIMEOUT}s"
        all_values = [v for r in received for (_, _, v, _) in r]
        assert len(all_values) == n, "a record was delivered to more than one member (or twice)"
        sets = [{v for (_, _, v, _) in r} for r in received]
        for i in range(3):
            for j in range(i + 1, 3):
                assert not sets[i] & sets[j], f"members {i} and {j} both got {sorted(sets[i] & sets[j])[:5]}"
        assert {dc for r in received for (*_, dc) in r} == {1}
        if partitions == 3:
            assert {p for r in received for (p, *_) in r} == {0, 1, 2}
    finally:
        _closing(*consumers)


# ---------------------------------------------------------------------------------------------
# 3. explicit acknowledgement


def test_explicit_release_redelivers_reject_and_accept_are_final(sbroker, topic_name):
    create_topic(sbroker.bootstrap, topic_name)
    group = new_group()
    lock_ms = 2000
    set_earliest(sbroker.bootstrap, group, **{"share.record.lock.duration.ms": str(lock_ms)})
    produce_values(sbroker.bootstrap, topic_name, [b"accept-me", b"reject-me", b"release-me"])
    plan = {b"accept-me": AcknowledgeType.ACCEPT, b"reject-me": AcknowledgeType.REJECT,
            b"release-me": AcknowledgeType.RELEASE}

    c = share_consumer(sbroker.bootstrap, group, [topic_name], explicit=True)
    try:
        def ack_first_round(batch):
            for m in batch:
                c.acknowledge(m, plan[m.value()])
        first = poll_until(c, lambda g: len(g) >= 3, TIMEOUT, on_batch=ack_first_round)
        assert sorted(values(first)) == sorted(plan)
        assert {m.delivery_count() for m in first} == {1}
        result = c.commit_sync(10)
        assert all(code is None for code in commit_errors(result).values()), commit_errors(result)

        # RELEASE: delivered again, with delivery count 2; accept it this time
        def accept(batch):
            for m in batch:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
        second = poll_until(c, lambda g: len(g) >= 1, TIMEOUT, on_batch=accept)
        assert [(m.value(), m.delivery_count()) for m in second] == [(b"release-me", 2)]
        assert second[0].offset() == next(m.offset() for m in first if m.value() == b"release-me")
        result = c.commit_sync(10)
        assert all(code is None for code in commit_errors(result).values()), commit_errors(result)

        # ACCEPT and REJECT are final: nothing comes back, not even after the lock duration
        late = poll_for(c, lock_ms / 1000 + 1.5, on_batch=accept)
        assert late == [], [(m.value(), m.delivery_count()) for m in late]
    finally:
        c.close()
    c2 = share_consumer(sbroker.bootstrap, group, [topic_name], explicit=True)
    try:
        late = poll_for(c2, 1.5, on_batch=lambda b: [c2.acknowledge(m) for m in b])
    finally:
        c2.close()
    assert late == [], [(m.value(), m.delivery_count()) for m in late]


def test_ack_after_lock_expired_and_taken_by_another_member_is_invalid_record_state(sbroker, topic_name):
    create_topic(sbroker.bootstrap, topic_name)
    group = new_group()
    set_earliest(sbroker.bootstrap, group, **{"share.record.lock.duration.ms": "1500"})
    produce_values(sbroker.bootstrap, topic_name, [b"contested"])
    c1 = share_consumer(sbroker.bootstrap, group, [topic_name], explicit=True)
    c2 = share_consumer(sbroker.bootstrap, group, [topic_name], explicit=True)
    try:
        (m1,) = poll_until(c1, lambda g: len(g) >= 1, TIMEOUT)
        assert m1.delivery_count() == 1
        # c1 sits on it; the lock expires and c2 acquires it
        (m2,) = poll_until(c2, lambda g: len(g) >= 1, TIMEOUT)
        assert (m2.value(), m2.offset(), m2.delivery_count()) == (b"contested", m1.offset(), 2)

        c1.acknowledge(m1, AcknowledgeType.ACCEPT)
        result = commit_errors(c1.commit_sync(10))
        assert result == {(topic_name, 0): KafkaError.INVALID_RECORD_STATE}, result

        # the rightful holder can still accept it
        c2.acknowledge(m2, AcknowledgeType.ACCEPT)
        result = commit_errors(c2.commit_sync(10))
        assert result == {(topic_name, 0): None}, result
    finally:
        _closing(c1, c2)


# ---------------------------------------------------------------------------------------------
# 4. lock expiry and the delivery count limit


def test_stalled_consumer_loses_records_at_lock_expiry(sbroker, topic_name):
    create_topic(sbroker.bootstrap, topic_name)
    group = new_group()
    lock_ms = 2000
    set_earliest(sbroker.bootstrap, group, **{"share.record.lock.duration.ms": str(lock_ms)})
    sent = [f"s-{i}".encode() for i in range(5)]
    produce_values(sbroker.bootstrap, topic_name, sent)
    stalled = share_consumer(sbroker.bootstrap, group, [topic_name])
    other = share_consumer(sbroker.bootstrap, group, [topic_name])
    try:
        got1 = poll_until(stalled, lambda g: len(g) >= len(sent), TIMEOUT)
        t_acquired = time.monotonic()
        assert sorted(values(got1)) == sorted(sent) and {m.delivery_count() for m in got1} == {1}
        # `stalled` never polls again (and never closes until the end): its records come back
        # only when their lock expires, then `other` gets them with the count raised
        got2 = poll_until(other, lambda g: len(g) >= len(sent), TIMEOUT)
        elapsed = time.monotonic() - t_acquired
        assert sorted(values(got2)) == sorted(sent)
        assert {m.delivery_count() for m in got2} == {2}
        assert elapsed >= lock_ms / 1000 - 0.5, f"records were redelivered after {elapsed:.2f}s, before the lock expired"
    finally:
        _closing(other, stalled)


@pytest.mark.parametrize("level", ["broker", "group"])
def test_delivery_count_limit_archives_record(sbroker, make_broker, topic_name, level):
    if level == "broker":
        b = make_broker({**FAST_SHARE_BROKER, "group.share.delivery.count.limit": "2"})
        group = new_group()
        set_earliest(b.bootstrap, group)
    else:
        b = sbroker
        group = new_group()
        set_earliest(b.bootstrap, group, **{"share.delivery.count.limit": "2"})
    create_topic(b.bootstrap, topic_name)
    produce_values(b.bootstrap, topic_name, [b"poison"])
    c = share_consumer(b.bootstrap, group, [topic_name], explicit=True)
    try:
        counts = []

        def release(batch):
            for m in batch:
                counts.append((m.value(), m.delivery_count()))
                c.acknowledge(m, AcknowledgeType.RELEASE)
        poll_until(c, lambda g: len(g) >= 2, TIMEOUT, on_batch=release)
        assert counts == [(b"poison", 1), (b"poison", 2)]
        result = commit_errors(c.commit_sync(10))
        assert all(v is None for v in result.values()), result

        # archived at the limit: a later record is delivered, the poison record never again
        produce_values(b.bootstrap, topic_name, [b"after"])
        seen = []

        def accept(batch):
            for m in batch:
                seen.append((m.value(), m.delivery_count()))
                c.acknowledge(m, AcknowledgeType.ACCEPT)
        poll_until(c, lambda g: any(m.value() == b"after" for m in g), TIMEOUT, on_batch=accept)
        poll_for(c, 1.0, on_batch=accept)
        assert seen == [(b"after", 1)], seen
    finally:
        c.close()


# ---------------------------------------------------------------------------------------------
# 5. close releases at once


def test_close_releases_unacknowledged_records_immediately(sbroker, topic_name):
    create_topic(sbroker.bootstrap, topic_name)
    group = new_group()
    lock_ms = 60000
    set_earliest(sbroker.bootstrap, group, **{"share.record.lock.duration.ms": str(lock_ms)})
    sent = [f"c-{i}".encode() for i in range(5)]
    produce_values(sbroker.bootstrap, topic_name, sent)

    c1 = share_consumer(sbroker.bootstrap, group, [topic_name], explicit=True)
    try:
        got1 = poll_until(c1, lambda g: len(g) >= len(sent), TIMEOUT)
    finally:
        c1.close()  # explicit mode, nothing acknowledged
    t_closed = time.monotonic()
    assert sorted(values(got1)) == sorted(sent)

    c2 = share_consumer(sbroker.bootstrap, group, [topic_name])
    try:
        got2 = poll_until(c2, lambda g: len(g) >= len(sent), 10.0, what="released records")
    finally:
        c2.close()
    elapsed = time.monotonic() - t_closed
    assert sorted(values(got2)) == sorted(sent)
    assert {m.delivery_count() for m in got2} == {2}
    assert elapsed < 5.0, f"released records took {elapsed:.2f}s (lock is {lock_ms} ms)"


# ---------------------------------------------------------------------------------------------
# 6. share.auto.offset.reset


def _config_value(bootstrap: str, group: str, name: str) -> str | None:
    entries = describe_group_configs(bootstrap, group)
    assert name in entries, sorted(entries)
    return entries[name].value


def test_auto_offset_reset_earliest_delivers_existing_records(sbroker, topic_name):
    create_topic(sbroker.bootstrap, topic_name)
    group = new_group()
    old = [f"old-{i}".encode() for i in range(5)]
    produce_values(sbroker.bootstrap, topic_name, old)
    set_group_configs(sbroker.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    assert _config_value(sbroker.bootstrap, group, "share.auto.offset.reset") == "earliest"
    c = share_consumer(sbroker.bootstrap, group, [topic_name])
    try:
        got = poll_until(c, lambda g: len(g) >= len(old), TIMEOUT)
    finally:
        c.close()
    assert sorted(values(got)) == sorted(old)
    assert [m.offset() for m in sorted(got, key=lambda m: m.offset())] == list(range(len(old)))


@pytest.mark.parametrize("how", ["set-latest", "default"])
def test_auto_offset_reset_latest_skips_existing_records(sbroker, topic_name, how):
    create_topic(sbroker.bootstrap, topic_name)
    group = new_group()
    if how == "set-latest":
        # first earliest, then back to latest: the last value wins
        set_group_configs(sbroker.bootstrap, group, {"share.auto.offset.reset": "earliest"})
        set_group_configs(sbroker.bootstrap, group, {"share.auto.offset.reset": "latest"})
    assert _config_value(sbroker.bootstrap, group, "share.auto.offset.reset") == "latest"
    old = [f"old-{i}".encode() for i in range(5)]
    produce_values(sbroker.bootstrap, topic_name, old)

    c = share_consumer(sbroker.bootstrap, group, [topic_name])
    try:
        # Produce probes until the group has fetched once and sees them (records produced before
        # that first fetch are skipped, so the first probes may be lost too).
        got: list = []
        deadline = time.monotonic() + TIMEOUT
        i = 0
        while not got:
            assert time.monotonic() < deadline, "no record delivered with share.auto.offset.reset=latest"
            produce_values(sbroker.bootstrap, topic_name, [f"probe-{i}".encode()])
            i += 1
            got += poll_once(c, 0.5)
        new = [f"new-{i}".encode() for i in range(5)]
        produce_values(sbroker.bootstrap, topic_name, new)
        got += poll_until(c, lambda g: set(new) <= set(values(g)), TIMEOUT)
        got += poll_for(c, 0.5)
    finally:
        c.close()
    vals = values(got)
    assert not set(old) & set(vals), f"records produced before the first fetch were delivered: {vals}"
    assert set(new) <= set(vals)
    assert all(v.startswith((b"probe-", b"new-")) for v in vals)


# ---------------------------------------------------------------------------------------------
# 7. member session timeout

_CHILD = r"""
import sys
from confluent_kafka import ShareConsumer
bootstrap, group, topic = sys.argv[1:4]
c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": "doomed",
                   "socket.timeout.ms": 5000, "log_level": 3})
c.subscribe([topic])
print("subscribed", flush=True)
while True:
    for m in c.poll(0.2):
        if m.error() is None:
            print("got", m.partition(), m.offset(), m.value().decode(), flush=True)
"""


def test_member_that_stops_heartbeating_is_removed_and_its_partitions_reassigned(sbroker, topic_name):
    create_topic(sbroker.bootstrap, topic_name, partitions=2)
    group = new_group()
    set_earliest(sbroker.bootstrap, group)
    session_timeout_ms = int(FAST_SHARE_BROKER["group.share.session.timeout.ms"])

    child = subprocess.Popen([sys.executable, "-c", _CHILD, sbroker.bootstrap, group, topic_name],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    child_lines: list[str] = []

    def reader():
        assert child.stdout is not None
        for line in child.stdout:
            child_lines.append(line.strip())
    threading.Thread(target=reader, daemon=True).start()
    survivor = share_consumer(sbroker.bootstrap, group, [topic_name], **{"client.id": "survivor"})
    try:
        wait_for(lambda: "subscribed" in child_lines, TIMEOUT, message="child consumer start")
        poll_once(survivor, 0.05)
        g = _wait_members(sbroker.bootstrap, group, 2, check=lambda g: sorted(
            p for m in g.members for tp in m.assignment.topic_partitions for p in tp.partitions) == [0, 1])
        assert {m.client_id for m in g.members} == {"doomed", "survivor"}

        # both are consuming
        round1 = [f"r1-{p}-{i}" for p in range(2) for i in range(3)]
        for p in range(2):
            produce_values(sbroker.bootstrap, topic_name, [f"r1-{p}-{i}".encode() for i in range(3)], partition=p)
        mine: list = []

        def all_round1():
            mine.extend(poll_once(survivor, 0.1))
            theirs = {line.split()[3] for line in list(child_lines) if line.startswith("got ")}
            return set(round1) <= theirs | {m.value().decode() for m in mine}
        wait_for(all_round1, TIMEOUT, interval=0, message="round 1 consumed by the two members")
        assert any(line.startswith("got ") for line in child_lines), "the child member consumed nothing"

        # freeze the child: no heartbeats, but its connections stay open and it is not closed
        os.kill(child.pid, signal.SIGSTOP)
        t_stop = time.monotonic()

        def one_member():
            poll_once(survivor, 0.1)  # keep the survivor alive and polling
            g = describe_share_group(sbroker.bootstrap, group)
            return g if len(g.members) == 1 else None
        g = wait_for(one_member, session_timeout_ms / 1000 + 10, interval=0, message="member removal")
        removed_after = time.monotonic() - t_stop
        assert g.members[0].client_id == "survivor"
        assert g.group_state == "Stable"
        assert removed_after >= session_timeout_ms / 1000 - 1.0, \
            f"member removed {removed_after:.2f}s after its last heartbeat; session timeout is {session_timeout_ms} ms"

        # the survivor takes over both partitions (on its next heartbeat)
        def survivor_has_both():
            poll_once(survivor, 0.1)
            g = describe_share_group(sbroker.bootstrap, group)
            return len(g.members) == 1 and sorted(
                p for tp in g.members[0].assignment.topic_partitions for p in tp.partitions) == [0, 1]
        wait_for(survivor_has_both, TIMEOUT, interval=0, message="both partitions assigned to the survivor")
        listed = {lg.group_id: lg for lg in list_groups(sbroker.bootstrap)}
        assert group in listed and listed[group].group_type.lower() == "share", listed.get(group)

        # the survivor now receives records from both partitions
        round2 = {f"r2-{p}-{i}".encode(): p for p in range(2) for i in range(3)}
        for p in range(2):
            produce_values(sbroker.bootstrap, topic_name, [v for v, q in round2.items() if q == p], partition=p)
        got = poll_until(survivor, lambda g: set(round2) <= set(values(g)), TIMEOUT, what="round 2 from both partitions")
        assert {m.partition() for m in got if m.value() in round2} == {0, 1}
    finally:
        child.kill()  # SIGKILL works on a stopped process too
        child.wait(10)
        survivor.close()


# ---------------------------------------------------------------------------------------------
# 8. long polling


def test_waiting_poll_returns_soon_after_a_produce(sbroker, topic_name):
    create_topic(sbroker.bootstrap, topic_name)
    group = new_group()
    set_earliest(sbroker.bootstrap, group)
    c = share_consumer(sbroker.bootstrap, group, [topic_name], **{"fetch.wait.max.ms": 5000})
    try:
        # joined and fetching: the next ShareFetch long-polls an empty partition
        produce_values(sbroker.bootstrap, topic_name, [b"warm-up"])
        poll_until(c, lambda g: len(g) >= 1, TIMEOUT)

        arrived: dict[str, float] = {}
        failure: list[BaseException] = []

        def consume():
            try:
                got = poll_until(c, lambda g: any(m.value() == b"late" for m in g), TIMEOUT)
                arrived["t"] = time.monotonic()
                arrived["n"] = len(got)
            except BaseException as exc:  # noqa: BLE001 - re-raised by the main thread's assert
                failure.append(exc)

        t = threading.Thread(target=consume, daemon=True)
        t.start()
        time.sleep(0.5)  # the scenario: produce half a second into the waiting poll
        t_produce = time.monotonic()
        produce_values(sbroker.bootstrap, topic_name, [b"late"])
        t.join(TIMEOUT + 5)
        assert not failure, failure
        latency = arrived["t"] - t_produce
        assert latency < 3.0, f"record arrived {latency:.2f}s after produce; MaxWaitMs is 5000"
    finally:
        c.close()


@pytest.mark.parametrize("name,value,fragment", [
    ("share.record.lock.duration.ms", "10", "share.record.lock.duration.ms"),
    ("share.auto.offset.reset", "sometimes", "share.auto.offset.reset"),
    ("share.auto.offset.reset", "by_duration:-PT1H", "share.auto.offset.reset"),
    ("share.delivery.count.limit", "50", "share.delivery.count.limit"),
    ("share.no.such.setting", "1", "share.no.such.setting"),
])
def test_invalid_group_config_is_refused_with_invalid_config(sbroker, name, value, fragment):
    group = new_group("badcfg")
    with pytest.raises(KafkaException) as exc:
        set_group_configs(sbroker.bootstrap, group, {name: value})
    err = exc.value.args[0]
    assert err.code() == KafkaError.INVALID_CONFIG, err
    assert fragment in err.str(), err.str()
    # nothing was stored: the group still shows the default
    entry = describe_group_configs(sbroker.bootstrap, group).get("share.auto.offset.reset")
    assert entry is not None and entry.value == "latest"
