"""The share coordinator's state RPCs as raw kio frames against the real broker:
InitializeShareGroupState (83), ReadShareGroupState (84), WriteShareGroupState (85 v0-1),
DeleteShareGroupState (86) and ReadShareGroupStateSummary (87 v0-1). No PyPI client sends them;
Kafka's brokers (the share-partition leaders' persister) and tools do. The rules are in
share-groups-spec §10: state-epoch and leader-epoch fencing, reads of uninitialized keys,
unknown topics, the batch merge rule, start offsets that never regress, tombstones, and
durability across a restart."""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple

import pytest

from tests.integration import rawkafka as rk
from tests.integration.clients import create_topic
from tests.integration.share_helpers import new_group, topic_id

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_REQUEST = 42
FENCED_LEADER_EPOCH = 74
FENCED_STATE_EPOCH = 124

AVAILABLE, ACKNOWLEDGED, ARCHIVED = 0, 2, 4


class Batch(NamedTuple):
    first: int
    last: int
    state: int
    count: int


# --------------------------------------------------------------------------------------------
# Request builders and one-partition calls (each returns that partition's result entry)


def _partition_request(api_key: int, version: int, group: str, tid: uuid.UUID | None, fields: dict[str, Any]) -> Any:
    cls = rk.req_cls(api_key, version)
    tcls = rk._nested(cls, "topics")
    pcls = rk._nested(tcls, "partitions")
    part_fields = {k: v for k, v in fields.items() if k in pcls.__dataclass_fields__}
    if "state_batches" in pcls.__dataclass_fields__:
        bcls = rk._nested(pcls, "state_batches")
        part_fields["state_batches"] = tuple(
            bcls(first_offset=b.first, last_offset=b.last, delivery_state=b.state, delivery_count=b.count)
            for b in fields.get("state_batches", ()))
    return cls(group_id=group, topics=(tcls(topic_id=tid, partitions=(pcls(**part_fields),)),))


def _call(bootstrap: str, api_key: int, version: int, group: str, tid: uuid.UUID | None, **fields: Any) -> Any:
    req = _partition_request(api_key, version, group, tid, fields)
    with rk.RawClient(bootstrap) as raw:
        resp = raw.request(req)
    (result,) = resp.results
    assert result.topic_id == tid, resp
    (p,) = result.partitions
    assert p.partition == fields["partition"], resp
    return p


def initialize(bootstrap: str, group: str, tid: uuid.UUID | None, partition: int = 0, *, state_epoch: int,
               start_offset: int) -> Any:
    return _call(bootstrap, 83, 0, group, tid, partition=partition, state_epoch=state_epoch,
                 start_offset=start_offset)


def read(bootstrap: str, group: str, tid: uuid.UUID | None, partition: int = 0, *, leader_epoch: int = 0) -> Any:
    return _call(bootstrap, 84, 0, group, tid, partition=partition, leader_epoch=leader_epoch)


def write(bootstrap: str, group: str, tid: uuid.UUID | None, partition: int = 0, *, state_epoch: int,
          leader_epoch: int = 0, start_offset: int, batches: list[Batch] = (), delivery_complete_count: int = -1,
          version: int = 1) -> Any:
    return _call(bootstrap, 85, version, group, tid, partition=partition, state_epoch=state_epoch,
                 leader_epoch=leader_epoch, start_offset=start_offset,
                 delivery_complete_count=delivery_complete_count, state_batches=list(batches))


def delete(bootstrap: str, group: str, tid: uuid.UUID | None, partition: int = 0) -> Any:
    return _call(bootstrap, 86, 0, group, tid, partition=partition)


def summary(bootstrap: str, group: str, tid: uuid.UUID | None, partition: int = 0, *, leader_epoch: int = 0,
            version: int = 1) -> Any:
    return _call(bootstrap, 87, version, group, tid, partition=partition, leader_epoch=leader_epoch)


def ok(p: Any) -> Any:
    assert int(p.error_code) == NONE, (p.error_code, p.error_message)
    return p


def err(p: Any, expected: int) -> Any:
    assert int(p.error_code) == expected, (int(p.error_code), p.error_message, p)
    return p


def batches_of(p: Any) -> list[Batch]:
    return [Batch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches]


@pytest.fixture
def key(broker, topic_name) -> tuple[str, uuid.UUID]:
    """A fresh (group, topic id) on the module broker; the topic has 2 partitions."""
    create_topic(broker.bootstrap, topic_name, partitions=2)
    return new_group("state"), topic_id(broker.bootstrap, topic_name)


# --------------------------------------------------------------------------------------------
# Initialize, read, write, summary


def test_initialize_read_write_and_summary(broker, key):
    b = broker.bootstrap
    group, tid = key
    ok(initialize(b, group, tid, state_epoch=1, start_offset=5))

    r = ok(read(b, group, tid, leader_epoch=0))
    assert (r.state_epoch, r.start_offset, batches_of(r)) == (1, 5, [])

    # unsorted on the wire; the coordinator stores them merged and sorted
    ok(write(b, group, tid, state_epoch=1, leader_epoch=0, start_offset=5, delivery_complete_count=5,
             batches=[Batch(10, 14, AVAILABLE, 2), Batch(5, 9, ACKNOWLEDGED, 1)]))
    r = ok(read(b, group, tid, leader_epoch=0))
    assert (r.state_epoch, r.start_offset) == (1, 5)
    assert batches_of(r) == [Batch(5, 9, ACKNOWLEDGED, 1), Batch(10, 14, AVAILABLE, 2)]

    for version in (0, 1):
        s = ok(summary(b, group, tid, leader_epoch=0, version=version))
        assert (s.start_offset, s.state_epoch, s.leader_epoch) == (5, 1, 0), s
        if version >= 1:
            assert s.delivery_complete_count == 5, s

    # the other partition of the topic was never initialized
    err(read(b, group, tid, 1, leader_epoch=0), INVALID_REQUEST)
    s = ok(summary(b, group, tid, 1))
    assert (s.start_offset, s.delivery_complete_count) == (-1, -1), s


def test_write_merges_with_the_stored_batches(broker, key):
    """Kafka's combiner: overlapping ranges -> higher delivery count wins, then the higher state
    id; neighbours with equal (state, count) coalesce; the result is sorted and disjoint."""
    b = broker.bootstrap
    group, tid = key
    ok(initialize(b, group, tid, state_epoch=1, start_offset=0))
    ok(write(b, group, tid, state_epoch=1, start_offset=0,
             batches=[Batch(0, 9, AVAILABLE, 1), Batch(10, 19, AVAILABLE, 2)]))
    # same count as 10-19 but a higher state: wins; a lower count than 0-9: loses;
    # a higher count inside 0-9: wins
    ok(write(b, group, tid, state_epoch=1, start_offset=0,
             batches=[Batch(12, 13, ACKNOWLEDGED, 2), Batch(5, 6, ARCHIVED, 0), Batch(7, 8, ACKNOWLEDGED, 3)]))
    r = ok(read(b, group, tid))
    assert batches_of(r) == [
        Batch(0, 6, AVAILABLE, 1), Batch(7, 8, ACKNOWLEDGED, 3), Batch(9, 9, AVAILABLE, 1),
        Batch(10, 11, AVAILABLE, 2), Batch(12, 13, ACKNOWLEDGED, 2), Batch(14, 19, AVAILABLE, 2),
    ]
    # adjacent equal ranges are coalesced
    ok(write(b, group, tid, state_epoch=1, start_offset=0, batches=[Batch(9, 9, ACKNOWLEDGED, 3)]))
    assert batches_of(ok(read(b, group, tid)))[:3] == [
        Batch(0, 6, AVAILABLE, 1), Batch(7, 9, ACKNOWLEDGED, 3), Batch(10, 11, AVAILABLE, 2)]


def test_write_v0_is_accepted(broker, key):
    b = broker.bootstrap
    group, tid = key
    ok(initialize(b, group, tid, state_epoch=0, start_offset=0))
    ok(write(b, group, tid, state_epoch=0, start_offset=0, batches=[Batch(0, 3, ACKNOWLEDGED, 1)], version=0))
    assert batches_of(ok(read(b, group, tid))) == [Batch(0, 3, ACKNOWLEDGED, 1)]


# --------------------------------------------------------------------------------------------
# Fencing


def test_lower_state_epoch_is_fenced(broker, key):
    b = broker.bootstrap
    group, tid = key
    ok(initialize(b, group, tid, state_epoch=3, start_offset=0))
    err(write(b, group, tid, state_epoch=2, start_offset=0, batches=[Batch(0, 0, ACKNOWLEDGED, 1)]),
        FENCED_STATE_EPOCH)
    err(initialize(b, group, tid, state_epoch=2, start_offset=0), FENCED_STATE_EPOCH)
    r = ok(read(b, group, tid))
    assert (r.state_epoch, r.start_offset, batches_of(r)) == (3, 0, []), "a fenced write changed the state"
    ok(write(b, group, tid, state_epoch=3, start_offset=0, batches=[Batch(0, 0, ACKNOWLEDGED, 1)]))


def test_lower_leader_epoch_is_fenced_after_a_higher_one(broker, key):
    b = broker.bootstrap
    group, tid = key
    ok(initialize(b, group, tid, state_epoch=1, start_offset=0))
    ok(read(b, group, tid, leader_epoch=0))
    ok(read(b, group, tid, leader_epoch=3))  # a new leader took over
    err(read(b, group, tid, leader_epoch=2), FENCED_LEADER_EPOCH)
    err(read(b, group, tid, leader_epoch=0), FENCED_LEADER_EPOCH)
    err(write(b, group, tid, state_epoch=1, leader_epoch=2, start_offset=0, batches=[Batch(0, 0, ACKNOWLEDGED, 1)]),
        FENCED_LEADER_EPOCH)
    assert ok(summary(b, group, tid)).leader_epoch == 3
    assert batches_of(ok(read(b, group, tid, leader_epoch=3))) == []
    ok(write(b, group, tid, state_epoch=1, leader_epoch=3, start_offset=0, batches=[Batch(0, 0, ACKNOWLEDGED, 1)]))
    assert batches_of(ok(read(b, group, tid, leader_epoch=3))) == [Batch(0, 0, ACKNOWLEDGED, 1)]


def test_initialize_repeat_is_a_no_op_and_a_newer_epoch_wipes_the_state(broker, key):
    b = broker.bootstrap
    group, tid = key
    ok(initialize(b, group, tid, state_epoch=1, start_offset=0))
    ok(write(b, group, tid, state_epoch=1, start_offset=0, batches=[Batch(0, 4, ACKNOWLEDGED, 1)]))
    ok(initialize(b, group, tid, state_epoch=1, start_offset=0))  # identical repeat
    assert batches_of(ok(read(b, group, tid))) == [Batch(0, 4, ACKNOWLEDGED, 1)]
    ok(initialize(b, group, tid, state_epoch=2, start_offset=7))  # AlterShareGroupOffsets-style reset
    r = ok(read(b, group, tid))
    assert (r.state_epoch, r.start_offset, batches_of(r)) == (2, 7, [])
    err(write(b, group, tid, state_epoch=1, start_offset=7), FENCED_STATE_EPOCH)


# --------------------------------------------------------------------------------------------
# Missing keys, unknown topics, invalid input


def test_uninitialized_key_is_invalid_request(broker, key):
    b = broker.bootstrap
    group, tid = key
    err(read(b, group, tid), INVALID_REQUEST)
    err(write(b, group, tid, state_epoch=0, start_offset=0, batches=[Batch(0, 0, ACKNOWLEDGED, 1)]), INVALID_REQUEST)
    s = ok(summary(b, group, tid))
    assert (s.start_offset, s.delivery_complete_count, s.leader_epoch, s.state_epoch) == (-1, -1, 0, 0), s


def test_unknown_topic_id_or_partition(broker, key):
    b = broker.bootstrap
    group, tid = key
    unknown = uuid.uuid4()
    err(initialize(b, group, unknown, state_epoch=0, start_offset=0), UNKNOWN_TOPIC_OR_PARTITION)
    err(read(b, group, unknown), UNKNOWN_TOPIC_OR_PARTITION)
    err(write(b, group, unknown, state_epoch=0, start_offset=0), UNKNOWN_TOPIC_OR_PARTITION)
    # a partition the topic does not have
    err(initialize(b, group, tid, 7, state_epoch=0, start_offset=0), UNKNOWN_TOPIC_OR_PARTITION)
    err(read(b, group, tid, 7), UNKNOWN_TOPIC_OR_PARTITION)


@pytest.mark.parametrize("case", ["null-topic-id", "negative-partition", "negative-state-epoch", "empty-group"])
def test_invalid_input_is_invalid_request(broker, key, case):
    b = broker.bootstrap
    group, tid = key
    if case == "null-topic-id":
        err(initialize(b, group, None, state_epoch=0, start_offset=0), INVALID_REQUEST)
        err(read(b, group, None), INVALID_REQUEST)
        err(write(b, group, None, state_epoch=0, start_offset=0), INVALID_REQUEST)
    elif case == "negative-partition":
        err(initialize(b, group, tid, -1, state_epoch=0, start_offset=0), INVALID_REQUEST)
        err(read(b, group, tid, -1), INVALID_REQUEST)
    elif case == "negative-state-epoch":
        err(initialize(b, group, tid, state_epoch=-1, start_offset=0), INVALID_REQUEST)
        ok(initialize(b, group, tid, state_epoch=0, start_offset=0))
        err(write(b, group, tid, state_epoch=-1, start_offset=0), INVALID_REQUEST)
        err(write(b, group, tid, state_epoch=0, leader_epoch=-1, start_offset=0), INVALID_REQUEST)
    else:
        err(initialize(b, "", tid, state_epoch=0, start_offset=0), INVALID_REQUEST)
        err(read(b, "", tid), INVALID_REQUEST)


# --------------------------------------------------------------------------------------------
# Delete, start offset monotonicity


def test_delete_then_read_is_invalid_request_and_summary_is_empty(broker, key):
    b = broker.bootstrap
    group, tid = key
    ok(initialize(b, group, tid, state_epoch=1, start_offset=3))
    ok(write(b, group, tid, state_epoch=1, start_offset=3, batches=[Batch(3, 5, ACKNOWLEDGED, 1)]))
    ok(delete(b, group, tid))
    err(read(b, group, tid), INVALID_REQUEST)
    s = ok(summary(b, group, tid))
    assert (s.start_offset, s.delivery_complete_count) == (-1, -1), s
    ok(delete(b, group, tid))  # deleting a missing key is a success
    # the key can be initialized again from scratch, with any state epoch
    ok(initialize(b, group, tid, state_epoch=0, start_offset=0))
    r = ok(read(b, group, tid))
    assert (r.state_epoch, r.start_offset, batches_of(r)) == (0, 0, [])


def test_start_offset_never_regresses(broker, key):
    b = broker.bootstrap
    group, tid = key
    ok(initialize(b, group, tid, state_epoch=1, start_offset=0))
    ok(write(b, group, tid, state_epoch=1, start_offset=0,
             batches=[Batch(0, 9, ACKNOWLEDGED, 1), Batch(10, 29, AVAILABLE, 1)]))
    ok(write(b, group, tid, state_epoch=1, start_offset=20, delivery_complete_count=0, batches=[]))
    r = ok(read(b, group, tid))
    # batches below the new start offset are dropped, straddling ones clipped
    assert (r.start_offset, batches_of(r)) == (20, [Batch(20, 29, AVAILABLE, 1)])
    ok(write(b, group, tid, state_epoch=1, start_offset=10, delivery_complete_count=0,
             batches=[Batch(10, 24, ARCHIVED, 2)]))
    r = ok(read(b, group, tid))
    assert r.start_offset == 20, "a write with a lower start offset moved it backwards"
    assert batches_of(r) == [Batch(20, 24, ARCHIVED, 2), Batch(25, 29, AVAILABLE, 1)]
    assert ok(summary(b, group, tid)).start_offset == 20


# --------------------------------------------------------------------------------------------
# Durability


def test_written_state_survives_a_restart(make_broker, topic_name):
    broker = make_broker()
    b = broker.bootstrap
    create_topic(b, topic_name, partitions=2)
    tid = topic_id(b, topic_name)
    group = new_group("state")
    ok(initialize(b, group, tid, 0, state_epoch=4, start_offset=5))
    ok(write(b, group, tid, 0, state_epoch=4, leader_epoch=2, start_offset=5, delivery_complete_count=5,
             batches=[Batch(5, 9, ACKNOWLEDGED, 1), Batch(10, 14, AVAILABLE, 2)]))
    ok(write(b, group, tid, 0, state_epoch=4, leader_epoch=2, start_offset=7, delivery_complete_count=3,
             batches=[Batch(12, 12, ARCHIVED, 3)]))
    ok(initialize(b, group, tid, 1, state_epoch=4, start_offset=0))
    ok(delete(b, group, tid, 1))
    before = ok(summary(b, group, tid, 0))

    assert broker.stop() == 0
    broker.start()
    assert "share state replayed" in broker.log_text()

    after = ok(summary(b, group, tid, 0))
    assert (after.state_epoch, after.leader_epoch, after.start_offset, after.delivery_complete_count) == \
        (before.state_epoch, before.leader_epoch, before.start_offset, before.delivery_complete_count) == (4, 2, 7, 3)
    r = ok(read(b, group, tid, 0, leader_epoch=2))
    assert (r.state_epoch, r.start_offset) == (4, 7)
    assert batches_of(r) == [Batch(7, 9, ACKNOWLEDGED, 1), Batch(10, 11, AVAILABLE, 2), Batch(12, 12, ARCHIVED, 3),
                             Batch(13, 14, AVAILABLE, 2)]
    # the fencing epochs survived too, and so did the tombstone of partition 1
    err(read(b, group, tid, 0, leader_epoch=1), FENCED_LEADER_EPOCH)
    err(write(b, group, tid, 0, state_epoch=3, leader_epoch=2, start_offset=7), FENCED_STATE_EPOCH)
    err(read(b, group, tid, 1), INVALID_REQUEST)
    assert ok(summary(b, group, tid, 1)).start_offset == -1
    assert "Traceback" not in broker.log_text(), broker.log_text()[-4000:]


def test_find_coordinator_takes_share_keys_whose_base64_topic_id_has_a_dash(broker):
    """A share coordinator key names its topic by Kafka's Uuid.toString(): 22 characters of
    URL-safe base64, where '-' and '_' are ordinary digits (about a third of all ids have one)."""
    import base64

    ids = [u for u in (uuid.uuid4() for _ in range(500)) if "-" in base64.urlsafe_b64encode(u.bytes).decode()][:5]
    assert ids
    keys = [f"{new_group()}:{base64.urlsafe_b64encode(u.bytes).decode().rstrip('=')}:0" for u in ids]
    keys.append(f"{new_group()}:{ids[0]}:1")  # the dashed UUID form is taken too
    keys.append(f"{new_group()}:not-a-topic-id:0")
    with rk.RawClient(broker.bootstrap) as raw:
        found = raw.request(rk.req_cls(10, 6)(key_type=2, coordinator_keys=tuple(keys)))
    codes = {c.key: int(c.error_code) for c in found.coordinators}
    assert codes == {**{k: NONE for k in keys[:-1]}, keys[-1]: INVALID_REQUEST}, found
