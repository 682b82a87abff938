"""Kafka's classic-group records in __consumer_offsets: OffsetCommit (key 1, value v3 written,
v0-v4 read) and GroupMetadata (key 2, value v3 written, v0-v4 read)."""

from __future__ import annotations

import struct

from sharebroker.broker.groups import classic_records as crec
from sharebroker.broker.groups.records import offsets_partition
from sharebroker.protocol.record_batch import encode_batch, iter_records


def _s(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    return struct.pack(">h", len(text.encode())) + text.encode()


def _cs(text: str | None) -> bytes:  # compact string (flexible versions)
    if text is None:
        return b"\x00"
    data = text.encode()
    return bytes([len(data) + 1]) + data


def test_offset_commit_key_layout_is_kafkas() -> None:
    key = crec.offset_commit_key("grp", "orders", 7)
    assert key == struct.pack(">h", 1) + _s("grp") + _s("orders") + struct.pack(">i", 7)
    assert crec.decode_key(key) == (crec.OFFSET_COMMIT, "grp", "orders", 7)
    # key version 0 is an offset commit too
    assert crec.decode_key(struct.pack(">h", 0) + key[2:]) == (crec.OFFSET_COMMIT, "grp", "orders", 7)


def test_offset_commit_value_v3_round_trip() -> None:
    c = crec.CommittedOffset(42, 3, "meta", 1_700_000_000_000)
    value = crec.offset_commit_value(c)
    assert value == struct.pack(">hqi", 3, 42, 3) + _s("meta") + struct.pack(">q", 1_700_000_000_000)
    assert crec.decode_offset_commit_value(value) == c


def test_offset_commit_value_older_and_flexible_versions() -> None:
    v0 = struct.pack(">hq", 0, 9) + _s("m") + struct.pack(">q", 5)
    assert crec.decode_offset_commit_value(v0) == crec.CommittedOffset(9, -1, "m", 5)
    v1 = struct.pack(">hq", 1, 9) + _s("") + struct.pack(">qq", 5, 99)
    assert crec.decode_offset_commit_value(v1) == crec.CommittedOffset(9, -1, "", 5, 99)
    v4 = struct.pack(">hqi", 4, 10, 2) + _cs("x") + struct.pack(">q", 6) + b"\x00"
    assert crec.decode_offset_commit_value(v4) == crec.CommittedOffset(10, 2, "x", 6)


def test_group_metadata_round_trip() -> None:
    snap = crec.GroupSnapshot("consumer", 4, "range", "m-1", 123, (
        crec.MemberSnapshot("m-1", None, "client", "/127.0.0.1", 30000, 10000, b"sub", b"assign"),
        crec.MemberSnapshot("m-2", "inst", "client2", "/127.0.0.2", 45000, 45000, b"", b""),
    ))
    key = crec.group_metadata_key("grp")
    assert key == struct.pack(">h", 2) + _s("grp")
    assert crec.decode_key(key) == (crec.GROUP_METADATA, "grp", None, None)
    value = crec.group_metadata_value(snap)
    assert value[:2] == struct.pack(">h", 3)
    assert crec.decode_group_metadata_value(value) == snap


def test_empty_group_metadata_has_null_protocol_and_leader() -> None:
    snap = crec.GroupSnapshot("consumer", 2, None, None, 7, ())
    assert crec.decode_group_metadata_value(crec.group_metadata_value(snap)) == snap


def test_group_metadata_v0_and_v4_decode() -> None:
    v0 = (struct.pack(">h", 0) + _s("consumer") + struct.pack(">i", 1) + _s("range") + _s("m")
          + struct.pack(">i", 1) + _s("m") + _s("cid") + _s("/h") + struct.pack(">i", 6000)
          + struct.pack(">i", 1) + b"s" + struct.pack(">i", 1) + b"a")
    snap = crec.decode_group_metadata_value(v0)
    assert snap.generation == 1 and snap.state_timestamp_ms == -1
    assert snap.members == (crec.MemberSnapshot("m", None, "cid", "/h", 6000, 6000, b"s", b"a"),)
    v4 = (struct.pack(">h", 4) + _cs("consumer") + struct.pack(">i", 2) + _cs(None) + _cs(None)
          + struct.pack(">q", 9) + b"\x02"  # one member (compact array)
          + _cs("m") + _cs("i") + _cs("c") + _cs("/h") + struct.pack(">ii", 100, 200) + b"\x02s" + b"\x02a" + b"\x00"
          + b"\x00")
    snap = crec.decode_group_metadata_value(v4)
    assert snap == crec.GroupSnapshot("consumer", 2, None, None, 9,
                                      (crec.MemberSnapshot("m", "i", "c", "/h", 100, 200, b"s", b"a"),))


def test_records_live_in_the_groups_offsets_partition_and_survive_a_batch() -> None:
    assert offsets_partition("my-group", 50) == offsets_partition("my-group", 50)
    pairs = [(crec.offset_commit_key("g", "t", 0), crec.offset_commit_value(crec.CommittedOffset(1))),
             (crec.group_metadata_key("g"), None)]
    batch = encode_batch(pairs, timestamp_ms=1)
    assert [(k, v) for _, k, v in iter_records(batch)] == pairs
