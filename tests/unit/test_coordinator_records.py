"""Round trips of the coordinator record formats written to __share_group_state and
__consumer_offsets, and Kafka's partition placement."""

from __future__ import annotations

import uuid

from sharebroker.broker.groups import records as grec
from sharebroker.broker.groups.share_group import ShareMember
from sharebroker.broker.java_compat import string_hash
from sharebroker.broker.share_state import records as rec
from sharebroker.broker.share_state.store import StateBatch
from sharebroker.protocol.record_batch import encode_batch, iter_records


def test_share_snapshot_round_trip_with_delivery_complete_count() -> None:
    tid = uuid.uuid4()
    value = rec.SnapshotValue(3, 7, 2, 100, 12, 1_700_000_000_000, 1_700_000_000_500,
                              [StateBatch(100, 109, 2, 1), StateBatch(110, 110, 0, 3)])
    key = rec.encode_key(rec.SNAPSHOT, "grp", tid, 4)
    assert rec.decode_key(key) == (rec.SNAPSHOT, "grp", tid, 4)
    assert rec.decode_snapshot(rec.encode_snapshot(value)) == value


def test_share_update_without_tagged_count_decodes_default() -> None:
    value = rec.UpdateValue(1, 0, -1, -1, [StateBatch(5, 9, 4, 5)])
    data = rec.encode_update(value)
    assert data.endswith(b"\x00")  # no tagged fields when the count is the default -1
    assert rec.decode_update(data) == value


def test_share_values_have_kafkas_exact_bytes() -> None:
    """Golden bytes (ShareUpdateValue / ShareSnapshotValue v0): the struct-packed encoders write
    what the field-by-field writer wrote."""
    update = rec.UpdateValue(1, 2, 100, 7, [StateBatch(100, 109, 2, 1), StateBatch(110, 110, 0, 3)])
    assert rec.encode_update(update).hex() == (
        "0000" "00000001" "00000002" "0000000000000064" "03"
        "0000000000000064" "000000000000006d" "02" "0001" "00"
        "000000000000006e" "000000000000006e" "00" "0003" "00"
        "01" "00" "04" "00000007")
    snapshot = rec.SnapshotValue(3, 7, 2, 100, -1, 1_700_000_000_000, 1_700_000_000_500, [StateBatch(100, 109, 4, 5)])
    assert rec.encode_snapshot(snapshot).hex() == (
        "0000" "00000003" "00000007" "00000002" "0000000000000064" "0000018bcfe56800" "0000018bcfe569f4"
        "02" "0000000000000064" "000000000000006d" "04" "0005" "00" "00")


def test_records_survive_a_record_batch() -> None:
    tid = uuid.uuid4()
    pairs = [(rec.encode_key(rec.UPDATE, "g", tid, 0), rec.encode_update(rec.UpdateValue(0, 0, 1, 1, []))),
             (rec.encode_key(rec.SNAPSHOT, "g", tid, 0), None)]
    batch = encode_batch(pairs, timestamp_ms=1)
    out = iter_records(batch)
    assert [(o, k, v) for o, k, v in out] == [(0, pairs[0][0], pairs[0][1]), (1, pairs[1][0], None)]


def test_state_partition_uses_java_string_hash() -> None:
    assert string_hash("hello") == 99162322
    assert string_hash("polygenelubricants") == -(2**31)
    tid = uuid.UUID(int=1)
    p = rec.state_partition("g", tid, 0, 50)
    assert 0 <= p < 50 and p == rec.state_partition("g", tid, 0, 50)


def test_group_records_round_trip() -> None:
    tid = uuid.uuid4()
    m = ShareMember("m-1", epoch=5, previous_epoch=4, client_id="cid", client_host="/127.0.0.1", rack_id=None,
                    subscribed=("a", "b"), assignment={tid: frozenset({0, 2})})
    k, v = grec.member_metadata("g", m)
    assert grec.decode(k, v) == (grec.MEMBER_METADATA, ["g", "m-1"], {
        "rack_id": None, "client_id": "cid", "client_host": "/127.0.0.1", "subscribed": ("a", "b")})
    k, v = grec.member_assignment("g", m)
    assert grec.decode(k, v) == (grec.MEMBER_ASSIGNMENT, ["g", "m-1"], {
        "epoch": 5, "previous_epoch": 4, "assignment": {tid: frozenset({0, 2})}})
    k, v = grec.group_metadata("g", 9)
    assert grec.decode(k, v) == (grec.GROUP_METADATA, ["g"], {"epoch": 9, "metadata_hash": 0})
    k, v = grec.state_partitions("g", {tid: {0, 1}}, {tid: "a"})
    assert grec.decode(k, v) == (grec.STATE_PARTITIONS, ["g"], {"initialized": {tid: ("a", {0, 1})}})
    (k, none), _ = grec.member_tombstones("g", "m-1")
    assert grec.decode(k, none) == (grec.MEMBER_METADATA, ["g", "m-1"], None)
