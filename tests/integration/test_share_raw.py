"""Share-group RPCs as raw kio frames, for what no PyPI client sends: ShareGroupHeartbeat (76)
validation and fencing, ShareFetch (78) / ShareAcknowledge (79) session epochs and limits,
acknowledgement validation, acquisition shaping (MaxRecords, BatchSize, ShareAcquireMode) and
long polling. Kafka's rules are in share-groups-spec §5-9."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from tests.integration import rawkafka as rk
from tests.integration.clients import create_topic
from tests.integration.share_helpers import (
    ACCEPT,
    FAST_SHARE_BROKER,
    REJECT,
    RELEASE,
    RENEW,
    ShareMember,
    acquired,
    acquired_offsets,
    code,
    describe_share_group,
    heartbeat_request,
    ms,
    new_group,
    partitions_of,
    raw_produce,
    set_earliest,
    share_ack_request,
    share_fetch_request,
    topic_id,
)
from tests.brokers import module_broker
from sharebroker.testing.plugin import Broker
from sharebroker.testing import BrokerProcess, wait_for

TIMEOUT = 15.0

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
UNKNOWN_MEMBER_ID = 25
INVALID_REQUEST = 42
GROUP_ID_NOT_FOUND = 69
GROUP_MAX_SIZE_REACHED = 81
UNKNOWN_TOPIC_ID = 100
FENCED_MEMBER_EPOCH = 110
INVALID_RECORD_STATE = 121
SHARE_SESSION_NOT_FOUND = 122
INVALID_SHARE_SESSION_EPOCH = 123
SHARE_SESSION_LIMIT_REACHED = 133

DEFAULT_LOCK_MS = 30000


@pytest.fixture(scope="module")
def rbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from module_broker(tmp_path_factory, "share-raw", FAST_SHARE_BROKER)


class Members:
    """Creates raw members and closes them at the end of the test."""

    def __init__(self) -> None:
        self.made: list[ShareMember] = []

    def new(self, bootstrap: str, group: str, member_id: str | None = None, version: int = 2) -> ShareMember:
        m = ShareMember(bootstrap, group, member_id, version=version)
        self.made.append(m)
        return m


@pytest.fixture
def members() -> Iterator[Members]:
    ms_ = Members()
    yield ms_
    for m in ms_.made:
        m.close()


def _setup(b: BrokerProcess, members: Members, topic: str, partitions: int = 1, version: int = 2,
           **group_configs: str) -> tuple[str, uuid.UUID, ShareMember]:
    """Topic, a group reading from earliest, and one joined member whose partitions are initialized."""
    create_topic(b.bootstrap, topic, partitions=partitions)
    group = new_group()
    set_earliest(b.bootstrap, group, **group_configs)
    tid = topic_id(b.bootstrap, topic)
    m = members.new(b.bootstrap, group, version=version)
    m.join([topic], {tid: list(range(partitions))})
    return group, tid, m


def _top_ok(resp) -> None:
    assert code(resp.error_code) == NONE, (resp.error_code, resp.error_message)


def _top_error(resp, expected: int) -> None:
    assert code(resp.error_code) == expected, resp
    assert tuple(resp.responses) == (), resp
    if hasattr(resp, "acquisition_lock_timeout"):
        assert ms(resp.acquisition_lock_timeout) == 0, resp


def _part(resp, key):
    parts = partitions_of(resp)
    assert key in parts, f"{key} missing from {resp}"
    return parts[key]


# =============================================================================================
# ShareGroupHeartbeat (76) v1


def test_heartbeat_join_assignment_describe_and_leave(rbroker, members, topic_name):
    create_topic(rbroker.bootstrap, topic_name, partitions=2)
    tid = topic_id(rbroker.bootstrap, topic_name)
    group = new_group()
    m = members.new(rbroker.bootstrap, group, member_id="chosen-member-id-0001")

    r = m.heartbeat(0, [topic_name])
    assert code(r.error_code) == NONE, r
    assert r.member_id == "chosen-member-id-0001"
    assert r.member_epoch >= 1
    assert ms(r.heartbeat_interval) == int(FAST_SHARE_BROKER["group.share.heartbeat.interval.ms"])
    assert r.assignment is not None  # epoch 0 always carries the (possibly empty) assignment

    def assigned():
        resp = m.heartbeat(None, [topic_name])  # a "full" heartbeat carries the assignment
        assert code(resp.error_code) == NONE, resp
        return m.assignment.get(tid) == [0, 1]
    wait_for(assigned, TIMEOUT, interval=0.1, message="assignment of both partitions")
    assert set(m.assignment) == {tid}

    # a plain heartbeat (nothing changed, topics null) keeps the epoch and sends no assignment
    epoch = m.member_epoch
    r = m.heartbeat(epoch, None)
    assert code(r.error_code) == NONE, r
    assert r.member_epoch == epoch and r.assignment is None, r

    g = describe_share_group(rbroker.bootstrap, group)
    assert code(g.error_code) == NONE, g
    assert g.group_state == "Stable" and g.assignor_name == "simple"
    (dm,) = g.members
    assert dm.member_id == "chosen-member-id-0001" and dm.member_epoch == epoch
    assert list(dm.subscribed_topic_names) == [topic_name]
    (tp,) = dm.assignment.topic_partitions
    assert (tp.topic_id, tp.topic_name, sorted(tp.partitions)) == (tid, topic_name, [0, 1])
    assert g.assignment_epoch == epoch and g.group_epoch >= epoch

    # leave
    r = m.heartbeat(-1, None)
    assert code(r.error_code) == NONE, r
    assert (r.member_id, r.member_epoch) == ("chosen-member-id-0001", -1)
    g = describe_share_group(rbroker.bootstrap, group)
    assert g.group_state == "Empty" and len(g.members) == 0, g
    r = m.heartbeat(epoch, None)
    assert code(r.error_code) == UNKNOWN_MEMBER_ID, r

    # rejoin with the same member id and epoch 0
    r = m.heartbeat(0, [topic_name])
    assert code(r.error_code) == NONE, r
    assert r.member_epoch > epoch


@pytest.mark.parametrize("case", ["empty-member", "long-member", "empty-group", "epoch0-null-topics",
                                  "epoch0-empty-topics", "epoch-minus-2", "empty-rack"])
def test_heartbeat_invalid_requests(rbroker, members, topic_name, case):
    create_topic(rbroker.bootstrap, topic_name)
    group = new_group()
    req = {
        "empty-member": lambda: heartbeat_request(group, "", 0, [topic_name]),
        "long-member": lambda: heartbeat_request(group, "m" * 37, 0, [topic_name]),
        "empty-group": lambda: heartbeat_request("", "member-1", 0, [topic_name]),
        "epoch0-null-topics": lambda: heartbeat_request(group, "member-1", 0, None),
        "epoch0-empty-topics": lambda: heartbeat_request(group, "member-1", 0, []),
        "epoch-minus-2": lambda: heartbeat_request(group, "member-1", -2, [topic_name]),
        "empty-rack": lambda: heartbeat_request(group, "member-1", 0, [topic_name], rack=""),
    }[case]()
    with rk.RawClient(rbroker.bootstrap) as raw:
        r = raw.request(req)
        assert code(r.error_code) == INVALID_REQUEST, r
        assert r.error_message, r
        assert r.assignment is None
        # the connection is still fine, and nothing joined
        ok = raw.request(heartbeat_request(group, "member-ok", 0, [topic_name]))
        assert code(ok.error_code) == NONE, ok
    g = describe_share_group(rbroker.bootstrap, group)
    assert [m.member_id for m in g.members] == ["member-ok"], g


def test_heartbeat_fenced_epoch_and_unknown_member(rbroker, members, topic_name):
    group, _tid, m = _setup(rbroker, members, topic_name)
    epoch = m.member_epoch
    for bad in (epoch + 1, epoch + 7):
        r = m.heartbeat(bad, None)
        assert code(r.error_code) == FENCED_MEMBER_EPOCH, (bad, r)
    r = m.heartbeat(epoch, None)  # the member itself is still fine
    assert code(r.error_code) == NONE and r.member_epoch == epoch, r

    stranger = members.new(rbroker.bootstrap, group, member_id="never-joined")
    r = stranger.heartbeat(1, None)
    assert code(r.error_code) == UNKNOWN_MEMBER_ID, r
    r = stranger.heartbeat(epoch, [topic_name])
    assert code(r.error_code) == UNKNOWN_MEMBER_ID, r
    r = stranger.heartbeat(-1, None)
    assert code(r.error_code) == UNKNOWN_MEMBER_ID, r
    g = describe_share_group(rbroker.bootstrap, group)
    assert [x.member_id for x in g.members] == [m.member_id]

    # leaving a group that does not exist
    with rk.RawClient(rbroker.bootstrap) as raw:
        r = raw.request(heartbeat_request(new_group("nogroup"), "member-1", -1))
    assert code(r.error_code) == GROUP_ID_NOT_FOUND, r


def test_heartbeat_group_max_size(make_broker, members, topic_name):
    b = make_broker({**FAST_SHARE_BROKER, "group.share.max.size": "1"})
    create_topic(b.bootstrap, topic_name)
    group = new_group()
    first = members.new(b.bootstrap, group, member_id="first")
    second = members.new(b.bootstrap, group, member_id="second")
    r = first.heartbeat(0, [topic_name])
    assert code(r.error_code) == NONE, r
    r = second.heartbeat(0, [topic_name])
    assert code(r.error_code) == GROUP_MAX_SIZE_REACHED, r
    r = first.heartbeat(0, [topic_name])  # an existing member may always rejoin
    assert code(r.error_code) == NONE, r
    assert [m.member_id for m in describe_share_group(b.bootstrap, group).members] == ["first"]
    r = first.heartbeat(-1, None)
    assert code(r.error_code) == NONE, r
    r = second.heartbeat(0, [topic_name])  # room again
    assert code(r.error_code) == NONE, r


# =============================================================================================
# Share sessions (ShareFetch 78 / ShareAcknowledge 79)


@pytest.mark.parametrize("version", [1, 2])
def test_session_epochs_shared_by_fetch_and_acknowledge(rbroker, members, topic_name, version):
    _group, tid, m = _setup(rbroker, members, topic_name, version=version)
    tp = (tid, 0)
    raw_produce(rbroker.bootstrap, topic_name, [[f"e{i}-{j}".encode() for j in range(2)] for i in range(5)])

    r = m.fetch([tp], epoch=0, max_records=2)  # opens the session
    _top_ok(r)
    assert acquired(_part(r, tp)) == [(0, 1, 1)]
    r = m.fetch(epoch=1, max_records=2)  # names no partition: the session's are fetched
    _top_ok(r)
    assert acquired(_part(r, tp)) == [(2, 3, 1)]
    r = m.ack({tp: [(0, 3, [ACCEPT])]}, epoch=2)  # ShareAcknowledge uses the same counter
    _top_ok(r)
    assert code(_part(r, tp).error_code) == NONE
    r = m.fetch(epoch=3, max_records=2)
    _top_ok(r)
    assert acquired(_part(r, tp)) == [(4, 5, 1)]

    # wrong epochs are refused and change nothing
    for bad in (3, 5, 99):
        _top_error(m.fetch(epoch=bad, bump=False), INVALID_SHARE_SESSION_EPOCH)
    _top_error(m.ack({tp: [(4, 5, [ACCEPT])]}, epoch=2, bump=False), INVALID_SHARE_SESSION_EPOCH)
    r = m.ack({tp: [(4, 5, [ACCEPT])]}, epoch=4)
    _top_ok(r)
    assert code(_part(r, tp).error_code) == NONE
    r = m.fetch(epoch=5, max_records=2)
    _top_ok(r)
    assert acquired(_part(r, tp)) == [(6, 7, 1)]

    # epoch 0 again replaces the session without releasing what the member holds
    r = m.fetch([tp], epoch=0, max_records=2)
    _top_ok(r)
    p = _part(r, tp)  # newly added partitions are listed even with nothing acquired
    assert acquired(p) == [(8, 9, 1)]
    _top_error(m.fetch(epoch=6, bump=False), INVALID_SHARE_SESSION_EPOCH)
    r = m.ack({tp: [(6, 9, [ACCEPT])]}, epoch=1)
    _top_ok(r)
    assert code(_part(r, tp).error_code) == NONE, "6..7 should still be held by the member"


def test_session_errors(rbroker, members, topic_name):
    group, tid, _m = _setup(rbroker, members, topic_name)
    tp = (tid, 0)
    raw_produce(rbroker.bootstrap, topic_name, [[b"a", b"b"]])
    fresh = members.new(rbroker.bootstrap, group)

    # non-zero epochs with no session
    _top_error(fresh.fetch([tp], epoch=1), SHARE_SESSION_NOT_FOUND)
    _top_error(fresh.fetch(epoch=-1), SHARE_SESSION_NOT_FOUND)
    _top_error(fresh.ack({tp: [(0, 0, [ACCEPT])]}, epoch=1), SHARE_SESSION_NOT_FOUND)
    _top_error(fresh.ack({tp: [(0, 0, [ACCEPT])]}, epoch=-1), SHARE_SESSION_NOT_FOUND)
    # ShareAcknowledge cannot open a session
    _top_error(fresh.ack({tp: [(0, 0, [ACCEPT])]}, epoch=0), INVALID_SHARE_SESSION_EPOCH)
    # an opening ShareFetch must not carry acknowledgements; no session is created
    _top_error(fresh.fetch(epoch=0, acks={tp: [(0, 1, [ACCEPT])]}), INVALID_REQUEST)
    _top_error(fresh.fetch(epoch=1), SHARE_SESSION_NOT_FOUND)

    # group and member id checks (ShareFetch and ShareAcknowledge)
    with rk.RawClient(rbroker.bootstrap) as raw:
        for g, mid in ((None, "member-x"), (group, ""), (group, None), (group, "m" * 37)):
            _top_error(raw.request(share_fetch_request(g, mid, 0, partitions=[tp])), INVALID_REQUEST)
            _top_error(raw.request(share_ack_request(g, mid, 1, {tp: [(0, 0, [ACCEPT])]})), INVALID_REQUEST)

    # none of that disturbed the records: a real session still gets both
    r = fresh.fetch([tp], epoch=0)
    _top_ok(r)
    assert acquired(_part(r, tp)) == [(0, 1, 1)]


@pytest.mark.parametrize("how", ["share-fetch", "share-acknowledge"])
def test_final_epoch_closes_session_and_releases_records(rbroker, members, topic_name, how):
    group, tid, a = _setup(rbroker, members, topic_name)
    tp = (tid, 0)
    raw_produce(rbroker.bootstrap, topic_name, [[b"x0", b"x1", b"x2"]])
    r = a.fetch([tp], epoch=0)
    assert acquired(_part(r, tp)) == [(0, 2, 1)]
    raw_produce(rbroker.bootstrap, topic_name, [[b"y3"]])  # available, must not be fetched by the close

    if how == "share-fetch":
        r = a.fetch(epoch=-1, acks={tp: [(0, 0, [ACCEPT])]})
        _top_ok(r)
        p = _part(r, tp)
        assert p.acknowledge_error_code == NONE, p
        assert acquired(p) == [] and p.records == b"", "a final ShareFetch fetches nothing"
    else:
        r = a.ack({tp: [(0, 0, [ACCEPT])]}, epoch=-1)
        _top_ok(r)
        assert code(_part(r, tp).error_code) == NONE
    _top_error(a.fetch(epoch=1, bump=False), SHARE_SESSION_NOT_FOUND)
    _top_error(a.fetch(epoch=-1, bump=False), SHARE_SESSION_NOT_FOUND)

    # another member gets the released records (1, 2) with delivery count 2, and 3 fresh;
    # the accepted 0 never again
    b = members.new(rbroker.bootstrap, group)
    counts: dict[int, int] = {}

    def fetch_more(epoch=None):
        resp = b.fetch([tp] if epoch == 0 else [], epoch=epoch)
        _top_ok(resp)
        for f, l, dc in acquired(partitions_of(resp).get(tp) or _Empty):
            for o in range(f, l + 1):
                assert o not in counts, f"offset {o} acquired twice"
                counts[o] = dc
        return set(counts) >= {1, 2, 3}
    fetch_more(0)
    wait_for(fetch_more, TIMEOUT, interval=0, message="records released by the closed session")
    assert counts == {1: 2, 2: 2, 3: 1}, counts


class _Empty:
    acquired_records = ()


def test_session_limit_and_connection_close_frees_the_slot(make_broker, members, topic_name):
    b = make_broker({**FAST_SHARE_BROKER, "group.share.max.share.sessions": "1", "group.share.max.size": "1"})
    group, tid, a = _setup(b, members, topic_name)
    tp = (tid, 0)
    raw_produce(b.bootstrap, topic_name, [[b"l0", b"l1", b"l2"]])
    r = a.fetch([tp], epoch=0)
    assert acquired(_part(r, tp)) == [(0, 2, 1)]

    other = members.new(b.bootstrap, group)
    t0 = time.monotonic()
    r = other.fetch([tp], epoch=0, max_wait_ms=500)
    waited = time.monotonic() - t0
    _top_error(r, SHARE_SESSION_LIMIT_REACHED)
    assert waited >= 0.4, f"SHARE_SESSION_LIMIT_REACHED came after {waited:.2f}s; Kafka delays it by MaxWaitMs"

    # closing the first member's connection ends its session: the slot is free and its
    # records are released at once (the lock is 30 s)
    a.conn.close()
    t_closed = time.monotonic()
    got: dict[int, int] = {}

    def opened():
        resp = other.fetch([tp] if other.session_epoch == 0 else [], max_wait_ms=100)
        if other.session_epoch == 0:
            assert code(resp.error_code) == SHARE_SESSION_LIMIT_REACHED, resp
            return False
        _top_ok(resp)
        for f, l, dc in acquired(partitions_of(resp).get(tp) or _Empty):
            got.update({o: dc for o in range(f, l + 1)})
        return len(got) >= 3
    wait_for(opened, TIMEOUT, interval=0, message="a session after the first connection closed")
    assert got == {0: 2, 1: 2, 2: 2}
    assert time.monotonic() - t_closed < 5.0


# =============================================================================================
# Acknowledgement validation


INVALID_ACK_CASES = {
    "first-after-last": [(2, 0, [ACCEPT])],
    "overlapping": [(0, 1, [ACCEPT]), (0, 2, [ACCEPT])],
    "descending": [(2, 2, [ACCEPT]), (0, 1, [ACCEPT])],
    "empty-types": [(0, 2, [])],
    "type-5": [(0, 2, [5])],
    "type-negative": [(0, 2, [-1])],
    "types-count-mismatch": [(0, 2, [ACCEPT, REJECT])],
    "renew-without-is-renew-ack": [(0, 2, [RENEW])],
}


def test_invalid_acknowledgements_are_invalid_request_per_partition(rbroker, members, topic_name):
    _group, tid, m = _setup(rbroker, members, topic_name)
    tp = (tid, 0)
    n_batches = len(INVALID_ACK_CASES) + 3
    raw_produce(rbroker.bootstrap, topic_name, [[f"v{i}-{j}".encode() for j in range(3)] for i in range(n_batches)])
    r = m.fetch([tp], epoch=0, max_records=3)
    assert acquired(_part(r, tp)) == [(0, 2, 1)]

    next_batch = 1
    # piggy-backed on ShareFetch: AcknowledgeErrorCode, while the fetch part still works
    for name, batches in INVALID_ACK_CASES.items():
        r = m.fetch(acks={tp: batches}, max_records=3)
        _top_ok(r)
        p = _part(r, tp)
        assert p.acknowledge_error_code == INVALID_REQUEST, (name, p)
        assert code(p.error_code) == NONE, (name, p)
        first = 3 * next_batch
        assert acquired(p) == [(first, first + 2, 1)], (name, p)
        assert [rec.offset for rec in rk.records_of(rk.parse_batches(p.records))] == [first, first + 1, first + 2]
        next_batch += 1
    # v1 has no RENEW: type 4 is out of range
    r = m.fetch(acks={tp: [(0, 2, [RENEW])]}, max_records=3, version=1)
    _top_ok(r)
    p = _part(r, tp)
    assert p.acknowledge_error_code == INVALID_REQUEST, p
    assert acquired(p) == [(3 * next_batch, 3 * next_batch + 2, 1)]

    # ShareAcknowledge: the partition's ErrorCode
    for name, batches in INVALID_ACK_CASES.items():
        r = m.ack({tp: batches})
        _top_ok(r)
        assert code(_part(r, tp).error_code) == INVALID_REQUEST, (name, r)
    r = m.ack({tp: [(0, 2, [RENEW])]}, version=1)
    _top_ok(r)
    assert code(_part(r, tp).error_code) == INVALID_REQUEST, r

    # nothing of that touched the records: 0..2 are still held; one type per offset works
    r = m.ack({tp: [(0, 2, [ACCEPT, RELEASE, REJECT])]})
    _top_ok(r)
    assert code(_part(r, tp).error_code) == NONE, r
    r = m.fetch(max_records=1)  # the released offset 1 comes back first, with count 2
    _top_ok(r)
    assert acquired(_part(r, tp))[0] == (1, 1, 2), r


def test_acknowledging_records_not_held_is_invalid_record_state(rbroker, members, topic_name):
    group, tid, a = _setup(rbroker, members, topic_name)
    tp = (tid, 0)
    raw_produce(rbroker.bootstrap, topic_name, [[f"s{j}".encode() for j in range(8)]])
    # record_limit: only 0..1 of the eight-record batch are acquired; 2..7 stay available
    r = a.fetch([tp], epoch=0, max_records=2, acquire_mode=1)
    assert acquired(_part(r, tp)) == [(0, 1, 1)]

    def ack_code(member, batches):
        resp = member.ack({tp: batches})
        _top_ok(resp)
        return code(_part(resp, tp).error_code)

    assert ack_code(a, [(2, 3, [ACCEPT])]) == INVALID_RECORD_STATE  # never acquired
    assert ack_code(a, [(0, 3, [ACCEPT])]) == INVALID_RECORD_STATE  # partly never acquired

    # another member's records
    b = members.new(rbroker.bootstrap, group)
    _top_ok(b.fetch([], epoch=0))  # a session with no partitions
    assert ack_code(b, [(0, 1, [ACCEPT])]) == INVALID_RECORD_STATE
    assert ack_code(b, [(0, 0, [RELEASE])]) == INVALID_RECORD_STATE

    # a second acknowledgement (0..1 are still held, so 2..3 are above the start offset)
    r = a.fetch(max_records=2, acquire_mode=1)
    assert acquired(_part(r, tp)) == [(2, 3, 1)]
    assert ack_code(a, [(2, 3, [ACCEPT])]) == NONE
    assert ack_code(a, [(2, 3, [ACCEPT])]) == INVALID_RECORD_STATE
    assert ack_code(a, [(3, 3, [REJECT])]) == INVALID_RECORD_STATE

    # piggy-backed: AcknowledgeErrorCode 121, and the fetch part still acquires
    r = a.fetch(acks={tp: [(2, 3, [ACCEPT])]}, max_records=2, acquire_mode=1)
    _top_ok(r)
    p = _part(r, tp)
    assert p.acknowledge_error_code == INVALID_RECORD_STATE, p
    assert acquired(p) == [(4, 5, 1)]

    # after all those refusals the owner still holds 0..1; once accepted the start offset moves
    # past them and a repeated acknowledgement below it is ignored (Kafka: success)
    assert ack_code(a, [(0, 1, [ACCEPT])]) == NONE
    assert ack_code(a, [(0, 1, [ACCEPT])]) == NONE

    # released records are no longer held
    assert ack_code(a, [(4, 5, [RELEASE])]) == NONE
    assert ack_code(a, [(4, 5, [ACCEPT])]) == INVALID_RECORD_STATE
    r = a.fetch(max_records=2, acquire_mode=1)
    assert acquired(_part(r, tp)) == [(4, 5, 2)]


def test_acknowledging_another_members_batch_is_invalid_record_state(rbroker, members, topic_name):
    group, tid, a = _setup(rbroker, members, topic_name)
    tp = (tid, 0)
    raw_produce(rbroker.bootstrap, topic_name, [[b"o0", b"o1", b"o2"]])
    r = a.fetch([tp], epoch=0)
    assert acquired(_part(r, tp)) == [(0, 2, 1)]
    b = members.new(rbroker.bootstrap, group)
    _top_ok(b.fetch([tp], epoch=0))  # b's session holds the partition but acquired nothing

    for batches in ([(0, 2, [ACCEPT])], [(0, 2, [REJECT, REJECT, REJECT])], [(1, 1, [RELEASE])]):
        r = b.ack({tp: batches})
        _top_ok(r)
        assert code(_part(r, tp).error_code) == INVALID_RECORD_STATE, (batches, r)
    r = b.fetch(acks={tp: [(0, 2, [ACCEPT])]})
    _top_ok(r)
    p = _part(r, tp)
    assert p.acknowledge_error_code == INVALID_RECORD_STATE and acquired(p) == [], p

    r = a.ack({tp: [(0, 2, [ACCEPT])]})  # still a's
    _top_ok(r)
    assert code(_part(r, tp).error_code) == NONE, r


# =============================================================================================
# Fetched data: records, acquired ranges, shaping, lock timeout, unknown topics


def test_records_never_null_and_acquired_ranges(rbroker, members, topic_name):
    group, tid, a = _setup(rbroker, members, topic_name)
    tp = (tid, 0)
    r = a.fetch([tp], epoch=0)
    _top_ok(r)
    assert ms(r.acquisition_lock_timeout) == DEFAULT_LOCK_MS
    p = _part(r, tp)  # new in the session: listed although empty
    assert isinstance(p.records, bytes) and p.records == b"", p  # kio refuses a null here anyway
    assert acquired(p) == [] and code(p.error_code) == NONE
    assert (p.current_leader.leader_id, p.current_leader.leader_epoch >= 0) == (1, True), p

    vals = [[b"k0", b"k1", b"k2"], [b"k3", b"k4"]]
    raw_produce(rbroker.bootstrap, topic_name, vals)
    r = a.fetch(max_wait_ms=2000)
    _top_ok(r)
    assert ms(r.acquisition_lock_timeout) == DEFAULT_LOCK_MS
    p = _part(r, tp)
    assert acquired(p) == [(0, 4, 1)], p
    batches = rk.parse_batches(p.records)
    assert [b.base_offset for b in batches] == [0, 3] and all(b.crc_ok for b in batches)
    assert [(rec.offset, rec.value) for rec in rk.records_of(batches)] == list(enumerate(v for vs in vals for v in vs))

    # a second member: the partition is listed, nothing acquirable, records still b""
    b = members.new(rbroker.bootstrap, group)
    r = b.fetch([tp], epoch=0)
    _top_ok(r)
    p = _part(r, tp)
    assert p.records == b"" and acquired(p) == [], p

    # ShareAcknowledge v2 reports the lock duration too
    r = a.ack({tp: [(0, 4, [ACCEPT])]})
    _top_ok(r)
    assert ms(r.acquisition_lock_timeout) == DEFAULT_LOCK_MS


def test_max_records_and_batch_size_shape_acquisitions(rbroker, members, topic_name):
    lock_ms = 4321
    _group, tid, a = _setup(rbroker, members, topic_name, **{"share.record.lock.duration.ms": str(lock_ms)})
    tp = (tid, 0)
    raw_produce(rbroker.bootstrap, topic_name, [[f"b{i}-{j}".encode() for j in range(2)] for i in range(7)])

    # batch_optimized: MaxRecords 3 rounds up to the end of the batch holding the third record
    r = a.fetch([tp], epoch=0, max_records=3, batch_size=500)
    _top_ok(r)
    assert ms(r.acquisition_lock_timeout) == lock_ms
    p = _part(r, tp)
    assert acquired(p) == [(0, 3, 1)], p
    assert [b.base_offset for b in rk.parse_batches(p.records)] == [0, 2]

    # BatchSize 2: one AcquiredRecords entry per two records, split at batch boundaries
    r = a.fetch(max_records=6, batch_size=2)
    assert acquired(_part(r, tp)) == [(4, 5, 1), (6, 7, 1), (8, 9, 1)]

    # MaxRecords 1 still acquires a whole batch
    r = a.fetch(max_records=1, batch_size=500)
    assert acquired(_part(r, tp)) == [(10, 11, 1)]
    r = a.ack({tp: [(0, 11, [ACCEPT])]})
    _top_ok(r)
    assert code(_part(r, tp).error_code) == NONE
    assert ms(r.acquisition_lock_timeout) == lock_ms

    # record_limit (ShareAcquireMode 1, v2): never more than MaxRecords
    group2 = new_group()
    set_earliest(rbroker.bootstrap, group2)
    c = members.new(rbroker.bootstrap, group2)
    c.join([topic_name], {tid: [0]})
    seen: list[int] = []
    limits = [3, 3, 1, 4, 5]
    for i, limit in enumerate(limits):
        r = c.fetch([tp] if i == 0 else [], epoch=0 if i == 0 else None, max_records=limit, acquire_mode=1)
        _top_ok(r)
        offs = acquired_offsets(partitions_of(r).get(tp) or _Empty)
        assert 0 < len(offs) <= limit, (limit, acquired(partitions_of(r)[tp]))
        assert all(dc == 1 for *_, dc in acquired(partitions_of(r)[tp]))
        seen += offs
    assert seen == list(range(14)), seen  # in order, each offset exactly once, nothing skipped


def test_unknown_topic_id_and_partition(rbroker, members, topic_name):
    _group, tid, a = _setup(rbroker, members, topic_name)
    ghost = (uuid.uuid4(), 0)
    r = a.fetch([ghost, (tid, 7)], epoch=0)
    _top_ok(r)
    p = _part(r, ghost)
    assert code(p.error_code) == UNKNOWN_TOPIC_ID and p.records == b"" and acquired(p) == [], p
    p = _part(r, (tid, 7))
    assert code(p.error_code) == UNKNOWN_TOPIC_OR_PARTITION, p
    r = a.ack({ghost: [(0, 0, [ACCEPT])]})
    _top_ok(r)
    assert code(_part(r, ghost).error_code) == UNKNOWN_TOPIC_ID, r


# =============================================================================================
# Long polling


def test_long_poll_waits_max_wait_on_an_empty_partition(rbroker, members, topic_name):
    _group, tid, a = _setup(rbroker, members, topic_name)
    tp = (tid, 0)
    _top_ok(a.fetch([tp], epoch=0))
    t0 = time.monotonic()
    r = a.fetch(max_wait_ms=3000, timeout=10)
    elapsed = time.monotonic() - t0
    _top_ok(r)
    assert all(acquired(p) == [] for p in partitions_of(r).values()), r
    assert 2.7 <= elapsed <= 4.5, f"ShareFetch with MaxWaitMs=3000 on an empty partition returned after {elapsed:.2f}s"


def test_long_poll_is_woken_by_produce(rbroker, members, topic_name):
    group, tid, a = _setup(rbroker, members, topic_name)
    tp = (tid, 0)
    _top_ok(a.fetch([tp], epoch=0))
    req = share_fetch_request(group, a.member_id, a.session_epoch, max_wait_ms=5000)
    t_sent = time.monotonic()
    corr = a.conn.send(req)
    time.sleep(0.5)  # the scenario: the fetch is parked when the record arrives
    t_produce = time.monotonic()
    raw_produce(rbroker.bootstrap, topic_name, [[b"wake-up"]])
    r = a.conn.receive(type(req), corr, timeout=10)
    t_answer = time.monotonic()
    _top_ok(r)
    assert acquired(_part(r, tp)) == [(0, 0, 1)], r
    assert t_answer - t_produce < 2.0, f"answered {t_answer - t_produce:.2f}s after the produce (MaxWaitMs 5000)"
    assert t_answer - t_sent >= 0.4


def test_long_poll_is_woken_by_a_release(rbroker, members, topic_name):
    group, tid, a = _setup(rbroker, members, topic_name)
    tp = (tid, 0)
    raw_produce(rbroker.bootstrap, topic_name, [[b"r0", b"r1"]])
    r = a.fetch([tp], epoch=0)
    assert acquired(_part(r, tp)) == [(0, 1, 1)]
    b = members.new(rbroker.bootstrap, group)
    _top_ok(b.fetch([tp], epoch=0))  # nothing to acquire: a holds both
    req = share_fetch_request(group, b.member_id, b.session_epoch, max_wait_ms=5000)
    corr = b.conn.send(req)
    time.sleep(0.5)  # parked
    t_release = time.monotonic()
    rr = a.ack({tp: [(0, 1, [RELEASE])]})
    assert code(_part(rr, tp).error_code) == NONE
    r = b.conn.receive(type(req), corr, timeout=10)
    latency = time.monotonic() - t_release
    _top_ok(r)
    assert acquired(_part(r, tp)) == [(0, 1, 2)], r
    assert latency < 2.0, f"answered {latency:.2f}s after the release (MaxWaitMs 5000)"


def test_heartbeat_with_epoch_for_unknown_group_is_group_id_not_found(rbroker):
    """Kafka creates a share group only on a join (epoch 0); any other epoch for an unknown group
    gets GROUP_ID_NOT_FOUND."""
    from tests.integration.rawkafka import RawClient, req_cls
    req = req_cls(76, 1)(group_id="never-joined-group", member_id="m-unknown", member_epoch=3, rack_id=None,
                         subscribed_topic_names=None)
    with RawClient(rbroker.bootstrap) as raw:
        resp = raw.request(req)
    assert int(resp.error_code) == 69, resp


def test_a_parked_share_fetch_answers_at_once_when_its_topic_is_deleted(rbroker, members, topic_name):
    """Issue 10: a ShareFetch waiting (MaxWaitMs) on a partition whose leader is dropped answers
    that partition's error at once instead of holding the dropped leader until MaxWaitMs."""
    import threading

    from tests.integration.clients import admin

    create_topic(rbroker.bootstrap, topic_name)
    group = new_group()
    set_earliest(rbroker.bootstrap, group)
    tid = topic_id(rbroker.bootstrap, topic_name)
    m = members.new(rbroker.bootstrap, group)
    m.join([topic_name], {tid: [0]})
    m.fetch([(tid, 0)], max_wait_ms=0)  # open the session: nothing to acquire yet
    result: dict = {}

    def parked() -> None:
        t0 = time.monotonic()
        result["resp"] = m.fetch(max_wait_ms=10_000, timeout=20)
        result["seconds"] = time.monotonic() - t0

    t = threading.Thread(target=parked)
    t.start()
    time.sleep(0.5)  # let the fetch park (it answers at once if it could not)
    assert t.is_alive(), "the fetch did not wait"
    a = admin(rbroker.bootstrap)
    a.delete_topics([topic_name])[topic_name].result(10)
    t.join(15)
    assert result["seconds"] < 5, result
    p = partitions_of(result["resp"])[(tid, 0)]
    assert code(p.error_code) in (UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION), p
