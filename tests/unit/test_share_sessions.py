"""Share sessions (share-groups-spec §6): one per (group, member) per broker; epoch 0 opens (replacing
any existing session), N > 0 must match, -1 closes; epochs wrap to 1 after INT32_MAX; a broker-wide
session limit; a session belongs to the connection that opened it."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from sharebroker.broker.share.sessions import FINAL_EPOCH, INITIAL_EPOCH, ShareSession, ShareSessionCache
from sharebroker.protocol.errors import KafkaError

INT32_MAX = 2**31 - 1
T = uuid.UUID("00000000-0000-0000-0000-0000000000bb")


def raises(code: ErrorCode, fn, *args) -> KafkaError:
    with pytest.raises(KafkaError) as exc:
        fn(*args)
    assert exc.value.code == code, (exc.value.code, exc.value.message)
    return exc.value


def test_epoch_constants():
    assert INITIAL_EPOCH == 0 and FINAL_EPOCH == -1


def test_open_new_session_starts_at_epoch_one():
    cache = ShareSessionCache(max_sessions=10)
    session, old = cache.open("g", "m", conn_id=1)
    assert old is None
    assert session.epoch == 1, "the client's second request carries 1"
    assert session.conn_id == 1 and session.group_id == "g" and session.member_id == "m"
    assert cache.get("g", "m") is session
    assert list(session.partitions) == []


def test_check_expected_epoch_then_bump():
    cache = ShareSessionCache(max_sessions=10)
    session, _ = cache.open("g", "m", 1)
    assert cache.check("g", "m", 1) is session
    session.bump()
    assert session.epoch == 2
    err = raises(ErrorCode.invalid_share_session_epoch, cache.check, "g", "m", 1)
    assert err.message
    raises(ErrorCode.invalid_share_session_epoch, cache.check, "g", "m", 3)
    assert cache.check("g", "m", 2) is session
    assert session.epoch == 2, "a failed check changes nothing"


def test_check_missing_session():
    cache = ShareSessionCache(max_sessions=10)
    err = raises(ErrorCode.share_session_not_found, cache.check, "g", "m", 1)
    assert err.message
    raises(ErrorCode.share_session_not_found, cache.check, "g", "m", FINAL_EPOCH)
    cache.open("g", "m", 1)
    raises(ErrorCode.share_session_not_found, cache.check, "g", "other", 1)
    raises(ErrorCode.share_session_not_found, cache.check, "other", "m", 1)


def test_final_epoch_not_checked_against_session_epoch():
    cache = ShareSessionCache(max_sessions=10)
    session, _ = cache.open("g", "m", 1)
    for _ in range(5):
        session.bump()
    assert cache.check("g", "m", FINAL_EPOCH) is session
    assert session.epoch == 6


def test_open_replaces_existing_session():
    cache = ShareSessionCache(max_sessions=10)
    first, _ = cache.open("g", "m", 1)
    first.add((T, 0))
    first.bump()
    first.bump()
    second, old = cache.open("g", "m", 1)
    assert old is first
    assert second is not first
    assert second.epoch == 1
    assert list(second.partitions) == [], "the new session holds only what the new request names"
    assert cache.get("g", "m") is second
    assert len(cache.sessions) == 1
    raises(ErrorCode.invalid_share_session_epoch, cache.check, "g", "m", 3)


def test_session_limit():
    cache = ShareSessionCache(max_sessions=2)
    cache.open("g", "a", 1)
    cache.open("h", "b", 2)
    err = raises(ErrorCode.share_session_limit_reached, cache.open, "g", "c", 3)
    assert err.message
    assert cache.get("g", "c") is None and len(cache.sessions) == 2
    # replacing a member's own session at the limit is fine: the old one goes first
    s, old = cache.open("g", "a", 4)
    assert old is not None and cache.get("g", "a") is s
    assert len(cache.sessions) == 2
    # once a session is removed there is room again
    cache.remove(cache.get("h", "b"))
    cache.open("g", "c", 3)
    assert len(cache.sessions) == 2


def test_session_limit_is_per_broker_not_per_group():
    cache = ShareSessionCache(max_sessions=3)
    cache.open("g1", "m", 1)
    cache.open("g2", "m", 1)
    cache.open("g3", "m", 1)
    raises(ErrorCode.share_session_limit_reached, cache.open, "g4", "m", 1)


def test_same_member_id_in_different_groups_are_different_sessions():
    cache = ShareSessionCache(max_sessions=10)
    a, _ = cache.open("g1", "m", 1)
    b, old = cache.open("g2", "m", 1)
    assert old is None and a is not b
    a.bump()
    assert cache.check("g1", "m", 2) is a
    assert cache.check("g2", "m", 1) is b


def test_epoch_wraps_to_one_after_int32_max():
    s = ShareSession("g", "m", 1)
    s.epoch = INT32_MAX - 1
    s.bump()
    assert s.epoch == INT32_MAX
    s.bump()
    assert s.epoch == 1
    s.bump()
    assert s.epoch == 2


def test_epoch_sequence_from_open():
    cache = ShareSessionCache(max_sessions=1)
    s, _ = cache.open("g", "m", 1)
    for expected in range(1, 50):
        assert cache.check("g", "m", expected) is s
        s.bump()


def test_remove_only_the_same_object():
    cache = ShareSessionCache(max_sessions=10)
    first, _ = cache.open("g", "m", 1)
    second, _ = cache.open("g", "m", 2)
    cache.remove(first)  # the stale one: must not remove its replacement
    assert cache.get("g", "m") is second
    cache.remove(second)
    assert cache.get("g", "m") is None
    cache.remove(second)  # twice is harmless
    assert cache.sessions == {}


def test_of_connection_and_replacement_on_another_connection():
    cache = ShareSessionCache(max_sessions=10)
    a, _ = cache.open("g", "a", 1)
    b, _ = cache.open("g", "b", 1)
    c, _ = cache.open("g", "c", 2)
    assert {s.member_id for s in cache.of_connection(1)} == {"a", "b"}
    assert cache.of_connection(2) == [c]
    assert cache.of_connection(3) == []
    # member a reopens on connection 2: connection 1 closing must not kill the new session
    a2, old = cache.open("g", "a", 2)
    assert old is a
    assert cache.of_connection(1) == [b]
    assert {s.member_id for s in cache.of_connection(2)} == {"a", "c"}
    for s in cache.of_connection(1):
        cache.remove(s)
    assert cache.get("g", "a") is a2 and cache.get("g", "b") is None


def test_groups_with_sessions():
    cache = ShareSessionCache(max_sessions=10)
    assert cache.groups_with_sessions() == set()
    x, _ = cache.open("g1", "m", 1)
    cache.open("g2", "m", 1)
    cache.open("g2", "n", 1)
    assert cache.groups_with_sessions() == {"g1", "g2"}
    cache.remove(x)
    assert cache.groups_with_sessions() == {"g2"}


def test_session_partitions_add_forget_and_fairness_order():
    s = ShareSession("g", "m", 1)
    p0, p1, p2 = (T, 0), (T, 1), (T, 2)
    for p in (p0, p1, p2):
        s.add(p)
    assert list(s.partitions) == [p0, p1, p2]
    assert s.pending_new == {p0, p1, p2}, "new partitions must appear in the next response"
    s.pending_new.clear()
    s.add(p1)  # already present: not new again, order unchanged
    assert s.pending_new == set() and list(s.partitions) == [p0, p1, p2]
    s.move_to_end(p0)  # a partition that returned data goes to the back
    assert list(s.partitions) == [p1, p2, p0]
    s.errored.add(p2)
    s.add((T, 3))
    s.forget(p2)
    s.forget((T, 3))
    s.forget((T, 99))  # unknown: harmless
    assert list(s.partitions) == [p1, p0]
    assert p2 not in s.errored and (T, 3) not in s.pending_new
    s.move_to_end((T, 42))
    assert list(s.partitions) == [p1, p0]
