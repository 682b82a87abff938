"""The data-directory readers behind `sharebroker pipeline report`, on hand-made segments written
with the project's own encoders (no JVM)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from sharebroker.broker.groups.classic_records import (
    CommittedOffset,
    GroupSnapshot,
    group_metadata_key,
    group_metadata_value,
    offset_commit_key,
    offset_commit_value,
)
from sharebroker.broker.share_state.records import encode_record
from sharebroker.broker.share_state.store import SNAPSHOT, UPDATE, SnapshotValue, StateBatch, StateRecord, UpdateValue
from sharebroker.pipeline.analytics import (
    ACKNOWLEDGED,
    ARCHIVED,
    AVAILABLE,
    PartitionState,
    Segment,
    committed_offsets,
    consumer_offset_rows,
    consumption_begin,
    delivery_count_histogram,
    flatten_ranges,
    group_start_policy,
    list_segments,
    log_start_offsets,
    max_delivery_counts,
    replay_state,
    rows_of,
    SegmentWalk,
    mapped,
    segment_records,
    share_state_rows,
    split_segments,
    state_counts,
    summarize_segment,
    topic_names,
)
from sharebroker.protocol.record_batch import GZIP, LZ4, NONE, SNAPPY, ZSTD, encode_batch
from sharebroker.storage.files import write_offset_checkpoint
from sharebroker.storage.log_manager import LOG_START_OFFSET_CHECKPOINT, write_partition_metadata
from sharebroker.storage.topics import METADATA_FILE

TS = 1_700_000_000_000


def write_segment(directory: Path, base: int, batches: list[bytes | bytearray], tail: bytes = b"") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{base:020d}.log"
    path.write_bytes(b"".join(bytes(b) for b in batches) + tail)
    return path


def segment_of(path: Path, topic: str = "t", partition: int = 0) -> Segment:
    return Segment(str(path), topic, partition, int(path.stem), path.stat().st_size, None)


# -- the directory ------------------------------------------------------------------------------


def test_segments_of_a_data_dir_by_kind_with_topic_ids_names_and_log_starts(tmp_path):
    orders, gone = uuid.uuid4(), uuid.uuid4()
    one = encode_batch([(b"k", b"v")], timestamp_ms=TS)
    write_segment(tmp_path / "orders-0", 0, [one])
    write_segment(tmp_path / "orders-0", 7, [])
    write_segment(tmp_path / "orders-10", 0, [one, one])
    write_partition_metadata(tmp_path / "orders-0", orders)
    write_partition_metadata(tmp_path / "orders-10", orders)
    write_segment(tmp_path / "__share_group_state-4", 0, [])
    write_segment(tmp_path / "__consumer_offsets-49", 0, [])
    write_segment(tmp_path / "orders-2.0123456789abcdef0123456789abcdef-delete", 0, [one])  # being deleted
    (tmp_path / "orders-0" / "00000000000000000000.index").write_bytes(b"")
    (tmp_path / "orders-0" / "00000000000000000000.log.swap").write_bytes(b"x")
    (tmp_path / "cleaner-offset-checkpoint").write_text("0\n0\n")
    (tmp_path / METADATA_FILE).write_text(json.dumps({"version": 1, "topics": {
        "orders": {"topic_id": str(orders), "partitions": 11, "configs": {}},
        "empty": {"topic_id": str(gone), "partitions": 1, "configs": {}}}}))
    write_offset_checkpoint(tmp_path / LOG_START_OFFSET_CHECKPOINT, {("orders", 0): 3, ("orders", 10): 0})
    (tmp_path / "share-group-configs.json").write_text(json.dumps({"g1": {"share.auto.offset.reset": "earliest"},
                                                                   "g2": {"share.record.lock.duration.ms": "5000"}}))

    segs = list_segments(tmp_path)
    assert [(s.topic, s.partition, s.base_offset, s.size, s.topic_id) for s in segs] == [
        ("__consumer_offsets", 49, 0, 0, None), ("__share_group_state", 4, 0, 0, None),
        ("orders", 0, 0, len(one), str(orders)), ("orders", 0, 7, 0, str(orders)),
        ("orders", 10, 0, 2 * len(one), str(orders))]
    kinds = split_segments(segs)
    assert [s.topic for s in kinds.user] == ["orders"] * 3
    assert [s.partition for s in kinds.share_state] == [4] and [s.partition for s in kinds.consumer_offsets] == [49]
    assert topic_names(tmp_path) == {str(orders): "orders", str(gone): "empty"}
    assert log_start_offsets(tmp_path, kinds.user) == {("orders", 0): 3, ("orders", 10): 0}
    assert group_start_policy(tmp_path) == {"g1": "earliest", "g2": "latest"}
    assert group_start_policy(tmp_path / "nowhere") == {} and topic_names(tmp_path / "orders-10") == {}


# -- records ------------------------------------------------------------------------------------


@pytest.mark.parametrize("tail, why", [
    (b"", None),
    (b"\x00" * 20, "truncated batch header (20 bytes)"),
    (b"\x00" * 64, "invalid magic 0"),  # zeros where a batch should start (a file grown but not written)
    ("cut", "truncated batch (declares 72 bytes, 70 present)"),  # the last 2 bytes never written
], ids=["clean", "torn-header", "zeros", "torn-batch"])
def test_records_of_compressed_control_and_corrupt_batches_up_to_a_torn_tail(tmp_path, tail, why):
    pid = 4242
    batches = [
        encode_batch([(b"k0", b"v0", [("h", b"1"), ("i", None)]), (None, b"v1", (), TS + 3)], timestamp_ms=TS,
                     base_offset=0, producer_id=pid, producer_epoch=0, base_sequence=0),
        encode_batch([(b"k2", b"v2"), (b"k3", None)], timestamp_ms=TS + 5, base_offset=2, compression=GZIP),
        encode_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")], timestamp_ms=TS + 6, base_offset=4,
                     producer_id=pid, producer_epoch=0, transactional=True, control=True),  # a commit marker
        encode_batch([(b"k5", b"v5")], timestamp_ms=TS + 7, base_offset=5, compression=SNAPPY),
        encode_batch([(b"k6", b"v6"), (b"k7", b"v7")], timestamp_ms=TS + 8, base_offset=6, compression=LZ4),
        encode_batch([(b"k8", b"v8")], timestamp_ms=TS + 9, base_offset=8, compression=ZSTD),
        encode_batch([(b"k9", b"v9", (), TS + 1)], timestamp_ms=TS + 1, base_offset=9, log_append_time=True),
    ]
    broken = bytearray(encode_batch([(b"kA", b"vA")], timestamp_ms=TS, base_offset=10))
    broken[-1] ^= 0xFF  # the body changed under its CRC
    last = encode_batch([(b"kB", b"vB")], timestamp_ms=TS + 20, base_offset=11)
    torn = bytes(encode_batch([(b"kC", b"vC")], timestamp_ms=TS, base_offset=12))[:-2] if tail == "cut" else tail
    path = write_segment(tmp_path / "orders-1", 0, [*batches, broken, last], tail=torn)
    seg = segment_of(path, "orders", 1)

    chunks = list(segment_records(seg, chunk=3))
    assert [len(c["offset"]) for c in chunks] == [4, 3, 3]  # cut after the batch that reaches the chunk
    cols = {c: sum((ch[c] for ch in chunks), []) for c in chunks[0]}
    assert cols["offset"] == [0, 1, 2, 3, 5, 6, 7, 8, 9, 11]  # control batch and corrupt batch skipped
    assert cols["key"] == [b"k0", None, b"k2", b"k3", b"k5", b"k6", b"k7", b"k8", b"k9", b"kB"]
    assert cols["value"] == [b"v0", b"v1", b"v2", None, b"v5", b"v6", b"v7", b"v8", b"v9", b"vB"]
    assert cols["timestamp"] == [TS, TS + 3, TS + 5, TS + 5, TS + 7, TS + 8, TS + 8, TS + 9, TS + 1, TS + 20]
    assert cols["timestamp_type"] == [0] * 8 + [1, 0]
    assert cols["headers"] == [2] + [0] * 9
    assert cols["compression"] == [NONE, NONE, GZIP, GZIP, SNAPPY, LZ4, LZ4, ZSTD, NONE, NONE]
    assert cols["producer_id"] == [pid, pid] + [-1] * 8
    assert cols["topic"] == ["orders"] * 10 and cols["partition"] == [1] * 10

    s = summarize_segment(seg)
    assert (s.batches, s.records, s.control_batches, s.crc_errors, s.next_offset) == (9, 10, 1, 1, 12)
    assert (s.first_timestamp, s.last_timestamp) == (TS, TS + 20)
    if why is None:
        assert (s.torn, s.torn_bytes) == (None, 0)
    else:
        assert s.torn is not None and s.torn.startswith(why) and s.torn_bytes == len(torn)
    # The report's one walk: the data batches and the same summary from a single read.
    with mapped(str(path)) as buf:
        walk = SegmentWalk(seg, buf)
        assert [h.base_offset for h in walk] == [0, 2, 5, 6, 8, 9, 11] and walk.summary == s


def test_empty_and_headerless_segments(tmp_path):
    empty = segment_of(write_segment(tmp_path / "t-0", 5, []))
    assert list(segment_records(empty)) == []
    s = summarize_segment(empty)
    assert (s.batches, s.records, s.next_offset, s.first_timestamp, s.torn, s.torn_bytes) == (0, 0, 5, -1, None, 0)
    stub = segment_of(write_segment(tmp_path / "t-1", 0, [], tail=b"\x00" * 11))
    assert list(segment_records(stub)) == []
    assert summarize_segment(stub).torn_bytes == 11


# -- __share_group_state ------------------------------------------------------------------------


def state_segment(directory: Path, records: list[StateRecord], base: int = 0) -> Segment:
    batches = []
    for i, rec in enumerate(records):
        key, value = encode_record(rec)
        batches.append(encode_batch([(key, value)], timestamp_ms=TS + i, base_offset=base + i))
    return segment_of(write_segment(directory, base, batches), "__share_group_state", int(directory.name.rsplit("-", 1)[1]))


def snap(epoch: int, start: int, batches: list[StateBatch], *, created: int = TS, written: int = TS,
         snapshot_epoch: int = 0, dcc: int = 0) -> SnapshotValue:
    return SnapshotValue(snapshot_epoch, epoch, 0, start, dcc, created, written, batches)


def upd(start: int, batches: list[StateBatch], dcc: int = 0) -> UpdateValue:
    return UpdateValue(0, 0, start, dcc, batches)


def replayed(tmp_path: Path, records: list[StateRecord], names: dict[str, str] | None = None) -> dict:
    return replay_state(rows_of(share_state_rows(state_segment(tmp_path / "__share_group_state-3", records), names)))


def test_share_state_rows_and_their_ranges(tmp_path):
    tid, gone = uuid.uuid4(), uuid.uuid4()
    records = [
        StateRecord(("g", tid, 0), SNAPSHOT, snap(1, -1, [], created=TS, written=TS)),
        StateRecord(("g", tid, 0), UPDATE, upd(5, [StateBatch(5, 6, ARCHIVED, 3), StateBatch(7, 9, AVAILABLE, 2)], 2)),
        StateRecord(("g", gone, 2), SNAPSHOT, None),
    ]
    seg = state_segment(tmp_path / "__share_group_state-3", records)
    state = share_state_rows(seg, {str(tid): "orders"})
    assert state["record_type"] == ["snapshot", "update", "tombstone"]
    assert state["topic"] == ["orders", "orders", None] and state["topic_id"] == [str(tid), str(tid), str(gone)]
    assert state["partition"] == [0, 0, 2] and state["state_partition"] == [3, 3, 3]
    assert state["log_offset"] == [0, 1, 2] and state["log_timestamp"] == [TS, TS + 1, TS + 2]
    assert state["start_offset"] == [-1, 5, -1] and state["state_epoch"] == [1, -1, -1]
    assert state["delivery_complete_count"] == [0, 2, -1] and state["create_timestamp"] == [TS, -1, -1]
    ranges = flatten_ranges(state)
    assert list(zip(ranges["log_offset"], ranges["first_offset"], ranges["last_offset"], ranges["delivery_state"],
                    ranges["delivery_count"], ranges["topic"])) == \
        [(1, 5, 6, ARCHIVED, 3, "orders"), (1, 7, 9, AVAILABLE, 2, "orders")]


def test_replay_merges_updates_by_range_and_keeps_the_history_below_the_start_offset(tmp_path):
    tid = uuid.uuid4()
    key = ("g", tid, 0)
    final = replayed(tmp_path, [
        StateRecord(key, SNAPSHOT, snap(1, 0, [])),
        StateRecord(key, UPDATE, upd(0, [StateBatch(0, 9, AVAILABLE, 1)])),
        StateRecord(key, UPDATE, upd(0, [StateBatch(3, 4, ARCHIVED, 1), StateBatch(5, 6, AVAILABLE, 2)])),
        StateRecord(key, UPDATE, upd(-1, [StateBatch(0, 20, ACKNOWLEDGED, 9)])),  # leader epoch only: no ranges
        StateRecord(key, UPDATE, upd(3, [StateBatch(0, 2, ACKNOWLEDGED, 1)], dcc=2)),
        StateRecord(key, UPDATE, upd(2, [StateBatch(7, 7, ACKNOWLEDGED, 1), StateBatch(12, 12, AVAILABLE, 1)])),
        StateRecord(key, SNAPSHOT, snap(1, 3, [StateBatch(3, 4, ARCHIVED, 1), StateBatch(5, 6, AVAILABLE, 2),
                                               StateBatch(7, 7, ACKNOWLEDGED, 1), StateBatch(8, 9, AVAILABLE, 1),
                                               StateBatch(12, 12, AVAILABLE, 1)],
                                        created=TS, written=TS + 50, snapshot_epoch=1)),  # periodic: same epoch
        StateRecord(key, UPDATE, upd(8, [StateBatch(8, 9, ACKNOWLEDGED, 3)])),
    ], {str(tid): "orders"})
    p = final[("g", str(tid), 0)]
    assert (p.topic, p.state_epoch, p.start_offset, p.deleted) == ("orders", 1, 8, False)
    assert (p.initial_start_offset, p.first_start_offset) == (0, 0)
    # The update's start offset 2 does not move the start back; ranges below the start are gone.
    assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.batches] == \
        [(8, 9, ACKNOWLEDGED, 3), (12, 12, AVAILABLE, 1)]
    assert p.max_counts == [(0, 4, 1), (5, 6, 2), (7, 7, 1), (8, 9, 3), (12, 12, 1)]
    assert p.archived == [(3, 4, 1)]

    assert delivery_count_histogram(p, 0, 15) == {1: 7, 2: 2, 3: 2}  # 13, 14 never delivered
    assert delivery_count_histogram(p, 4, 9) == {1: 2, 2: 2, 3: 1}
    assert state_counts(p, 15) == {"available": 1, "acknowledged": 2, "archived": 0, "unrecorded": 4}


def test_replay_starts_afresh_on_a_new_epoch_and_after_a_tombstone(tmp_path):
    tid = uuid.uuid4()
    a, b, c, d = ("a", tid, 0), ("b", tid, 1), ("c", tid, 0), ("d", tid, 0)
    final = replayed(tmp_path, [
        StateRecord(d, SNAPSHOT, snap(1, 0, [])),
        StateRecord(d, UPDATE, upd(0, [StateBatch(0, 1, ARCHIVED, 2)])),
        StateRecord(d, SNAPSHOT, snap(1, 10, [], created=TS + 5, written=TS + 5)),  # re-initialized, same epoch
        StateRecord(a, SNAPSHOT, snap(1, -1, [])),
        StateRecord(a, UPDATE, upd(4, [StateBatch(4, 5, ARCHIVED, 5)])),
        StateRecord(b, SNAPSHOT, snap(1, 0, [])),
        StateRecord(b, UPDATE, upd(0, [StateBatch(0, 1, ARCHIVED, 5)])),
        StateRecord(a, SNAPSHOT, snap(2, 30, [], created=TS + 9, written=TS + 9)),  # offsets reset
        StateRecord(a, UPDATE, upd(31, [StateBatch(32, 33, AVAILABLE, 1)])),
        StateRecord(b, SNAPSHOT, None),  # group deleted
        StateRecord(b, UPDATE, upd(9, [StateBatch(9, 9, ARCHIVED, 2)])),  # after its tombstone: ignored
        StateRecord(c, SNAPSHOT, snap(1, 0, [])),
        StateRecord(c, SNAPSHOT, None),
        StateRecord(c, SNAPSHOT, snap(3, 7, [], created=TS + 20, written=TS + 20)),  # back again
    ])
    pa_, pb, pc = final[("a", str(tid), 0)], final[("b", str(tid), 1)], final[("c", str(tid), 0)]
    assert (pa_.state_epoch, pa_.start_offset, pa_.initial_start_offset, pa_.first_start_offset) == (2, 31, 30, 30)
    assert pa_.archived == [] and pa_.max_counts == [(32, 33, 1)]
    assert pb.deleted and pb.batches == [] and pb.archived == []
    assert (pc.deleted, pc.state_epoch, pc.start_offset, pc.max_counts) == (False, 3, 7, [])
    pd = final[("d", str(tid), 0)]
    assert (pd.start_offset, pd.initial_start_offset, pd.archived, pd.max_counts) == (10, 10, [], [])
    assert all(p.topic is None for p in final.values())  # no names given: the topic is unknown


def test_where_consumption_began():
    def state(initial: int, first: int, start: int) -> PartitionState:
        return PartitionState("t", 1, start, 0, [], initial_start_offset=initial, first_start_offset=first)

    assert consumption_begin(state(5, 9, 12), "latest", 0) == 5  # the initializing snapshot said so
    assert consumption_begin(state(-1, 9, 12), "earliest", 2) == 2  # the reset policy chose the log start
    assert consumption_begin(state(-1, 9, 12), "latest", 0) == 9  # the first persisted start (a lower bound)
    assert consumption_begin(state(-1, -1, -1), "latest", 4) == 4
    assert consumption_begin(state(1, -1, 12), "earliest", 3) == 3  # records deleted since


def test_histogram_counts_unmentioned_records_below_the_start_once():
    p = PartitionState("t", 1, 10, 0, [StateBatch(12, 13, AVAILABLE, 2)],
                       max_counts=[(3, 3, 4), (12, 13, 2)])
    assert delivery_count_histogram(p, 0, 20) == {1: 9, 4: 1, 2: 2}
    assert delivery_count_histogram(p, 5, 11) == {1: 5}
    assert delivery_count_histogram(p, 0, 0) == {}
    assert state_counts(p, 20) == {"available": 2, "acknowledged": 0, "archived": 0, "unrecorded": 8}


def test_max_delivery_counts_keeps_the_highest_count_per_offset():
    assert max_delivery_counts([]) == []
    assert max_delivery_counts([(0, 9, 1), (5, 7, 3), (8, 20, 2), (30, 31, 1), (4, 3, 9), (40, 41, 0)]) == \
        [(0, 4, 1), (5, 7, 3), (8, 20, 2), (30, 31, 1)]
    assert max_delivery_counts([(0, 10, 2), (2, 3, 1), (10, 12, 2)]) == [(0, 12, 2)]
    assert max_delivery_counts([(0, 100, 1), (50, 50, 5), (0, 100, 1)]) == [(0, 49, 1), (50, 50, 5), (51, 100, 1)]


# -- __consumer_offsets -------------------------------------------------------------------------


def test_classic_offset_commits_in_log_order(tmp_path):
    def commit(group: str, topic: str, p: int, offset: int, ts: int) -> tuple[bytes, bytes]:
        return offset_commit_key(group, topic, p), offset_commit_value(CommittedOffset(offset, 0, "", ts))

    records = [
        commit("readers", "orders", 0, 10, TS),
        (group_metadata_key("readers"), group_metadata_value(GroupSnapshot("consumer", 1, "range", "m-1"))),
        commit("readers", "orders", 1, 4, TS + 1),
        (b"\x00\x0b\x00\x01g", b"\x00\x00"),  # a record type we do not read (a share-group record)
        commit("readers", "orders", 0, 25, TS + 2),
        (offset_commit_key("readers", "orders", 1), None),  # offsets deleted
        commit("other", "orders", 0, 3, TS + 3),
    ]
    batches = [encode_batch(records[:3], timestamp_ms=TS, base_offset=0),
               encode_batch(records[3:], timestamp_ms=TS, base_offset=3, compression=GZIP)]
    seg = segment_of(write_segment(tmp_path / "__consumer_offsets-7", 0, batches), "__consumer_offsets", 7)
    cols = consumer_offset_rows(seg)
    assert list(zip(cols["group"], cols["topic"], cols["partition"], cols["offset"], cols["commit_timestamp"],
                    cols["log_offset"])) == [
        ("readers", "orders", 0, 10, TS, 0), ("readers", "orders", 1, 4, TS + 1, 2),
        ("readers", "orders", 0, 25, TS + 2, 4), ("readers", "orders", 1, -1, -1, 5),
        ("other", "orders", 0, 3, TS + 3, 6)]
    assert cols["offsets_partition"] == [7] * 5
    rows = rows_of(cols)
    assert committed_offsets(reversed(rows)) == {("readers", "orders", 0): 25, ("other", "orders", 0): 3}
