"""The data-directory readers behind `sharebroker pipeline report`, on hand-made segments."""

from __future__ import annotations

import uuid
from pathlib import Path

from broker.share_state.records import encode_record
from broker.share_state.store import SNAPSHOT, UPDATE, SnapshotValue, StateBatch, StateRecord, UpdateValue
from pipeline.analytics import (
    ARCHIVED,
    AVAILABLE,
    list_segments,
    max_delivery_counts,
    replay_state,
    segment_records,
    share_state_rows,
    summarize_segment,
)
from protocol.record_batch import GZIP, encode_batch
from storage.log_manager import write_partition_metadata

TS = 1_700_000_000_000


def write_segment(directory: Path, base: int, batches: list[bytes | bytearray], tail: bytes = b"") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{base:020d}.log"
    path.write_bytes(b"".join(bytes(b) for b in batches) + tail)
    return path


def test_records_of_plain_compressed_and_control_batches_and_a_torn_tail(tmp_path):
    tid = uuid.uuid4()
    d = tmp_path / "orders-1"
    plain = encode_batch([(b"k0", b"v0", [("h", b"1")]), (None, b"v1")], timestamp_ms=TS, base_offset=0)
    zipped = encode_batch([(b"k2", b"v2"), (b"k3", None)], timestamp_ms=TS + 5, base_offset=2, compression=GZIP)
    control = encode_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")], timestamp_ms=TS, base_offset=4,
                           control=True)
    torn = bytes(encode_batch([(b"k5", b"v5")], timestamp_ms=TS, base_offset=5))[:30]
    write_segment(d, 0, [plain, zipped, control], tail=torn)
    write_partition_metadata(d, tid)
    (seg,) = list_segments(tmp_path)
    assert (seg.topic, seg.partition, seg.base_offset, seg.topic_id) == ("orders", 1, 0, str(tid))

    (cols,) = list(segment_records(seg))
    assert cols["offset"] == [0, 1, 2, 3]
    assert cols["key"] == [b"k0", None, b"k2", b"k3"] and cols["value"] == [b"v0", b"v1", b"v2", None]
    assert cols["headers"] == [1, 0, 0, 0] and cols["compression"] == [0, 0, GZIP, GZIP]
    assert cols["timestamp"] == [TS, TS, TS + 5, TS + 5]

    s = summarize_segment(seg)
    assert (s.batches, s.records, s.control_batches, s.next_offset) == (3, 4, 1, 5)
    assert s.torn is not None and "truncated" in s.torn


def state_segment(tmp_path: Path, records: list[StateRecord]) -> Path:
    batches = []
    for i, rec in enumerate(records):
        key, value = encode_record(rec)
        batches.append(encode_batch([(key, value)], timestamp_ms=TS + i, base_offset=i))
    return write_segment(tmp_path / "__share_group_state-3", 0, batches)


def test_share_state_history_replays_like_the_broker(tmp_path):
    tid = uuid.uuid4()
    key = ("g", tid, 0)
    records = [
        StateRecord(key, SNAPSHOT, SnapshotValue(0, 1, 0, 0, 0, TS, TS, [])),
        StateRecord(key, UPDATE, UpdateValue(0, 0, -1, -1, [StateBatch(0, 9, AVAILABLE, 1)])),
        StateRecord(key, UPDATE, UpdateValue(0, 0, 5, -1, [StateBatch(5, 6, ARCHIVED, 3), StateBatch(7, 9, AVAILABLE, 2)])),
        StateRecord(("gone", tid, 0), SNAPSHOT, SnapshotValue(0, 1, 0, 0, 0, TS, TS, [])),
        StateRecord(("gone", tid, 0), SNAPSHOT, None),
    ]
    state_segment(tmp_path, records)
    (seg,) = list_segments(tmp_path)
    state, ranges = share_state_rows(seg)
    assert state["record_type"] == ["snapshot", "update", "update", "snapshot", "tombstone"]
    assert state["start_offset"] == [0, -1, 5, 0, -1] and state["state_partition"] == [3] * 5
    assert list(zip(ranges["first_offset"], ranges["last_offset"], ranges["delivery_state"])) == \
        [(0, 9, AVAILABLE), (5, 6, ARCHIVED), (7, 9, AVAILABLE)]

    rows = [dict(zip(state, v)) for v in zip(*state.values())]
    range_rows = [dict(zip(ranges, v)) for v in zip(*ranges.values())]
    final = replay_state(rows, range_rows)
    g = final[("g", str(tid), 0)]
    assert g.start_offset == 5 and not g.deleted
    assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in g.batches] == \
        [(5, 6, ARCHIVED, 3), (7, 9, AVAILABLE, 2)]
    assert final[("gone", str(tid), 0)].deleted


def test_max_delivery_counts_keeps_the_highest_count_per_offset():
    assert max_delivery_counts([]) == []
    assert max_delivery_counts([(0, 9, 1), (5, 7, 3), (8, 20, 2), (30, 31, 1), (4, 3, 9), (40, 41, 0)]) == \
        [(0, 4, 1), (5, 7, 3), (8, 20, 2), (30, 31, 1)]
    assert max_delivery_counts([(0, 10, 2), (2, 3, 1), (10, 12, 2)]) == [(0, 12, 2)]
