"""A broker data directory read from its files: segments in Kafka's layout (`<topic>-<n>/
<20-digit base offset>.log`), `__share_group_state` and `__consumer_offsets`. Plain Python over the
project's own decoders (record batches, share-state records, classic offset commits) and the share
coordinator's own replay, run inside Spark tasks (pipeline/report_scan.py; user records are decoded
there by pipeline/columnar.py, with segment_records as its reference) and tested without a JVM. Nothing here writes to the data directory.

Reading a live broker's directory is safe: a segment is mapped at the size it had when opened, and
the walk stops quietly at a torn last batch (a live append, or a crash), which is counted."""

from __future__ import annotations

import heapq
import json
import mmap
import os
import re
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sharebroker.broker.groups.classic_records import OFFSET_COMMIT, decode_key, decode_offset_commit_value
from sharebroker.protocol.record_batch import BatchHeader, BatchRecord, batch_crc, decode_records, iter_batch_headers
from sharebroker.storage.files import CheckpointError, read_offset_checkpoint
from sharebroker.storage.topics import METADATA_FILE

if TYPE_CHECKING:
    from sharebroker.broker.share_state.store import StateBatch

# The share-state decoders and store, and the log manager, are imported where they are used: the
# Spark tasks (pipeline/report_scan.py) need neither, and each of their worker processes would
# otherwise spend about a second importing them.

# The broker's names (broker/share_state/coordinator.py STATE_TOPIC, broker/groups/group_log.py
# OFFSETS_TOPIC, broker/groups/coordinator.py GROUP_CONFIGS_FILE), spelled out: importing those
# modules would load the whole broker into every Spark worker.
SHARE_STATE_TOPIC, OFFSETS_TOPIC = "__share_group_state", "__consumer_offsets"
INTERNAL_TOPICS = frozenset({SHARE_STATE_TOPIC, OFFSETS_TOPIC, "__transaction_state"})
GROUP_CONFIGS_FILE = "share-group-configs.json"

# Persisted delivery states (ACQUIRED, 1, is never persisted: an acquisition lives in memory only).
AVAILABLE, ACKNOWLEDGED, ARCHIVED = 0, 2, 4
STATE_NAMES = {AVAILABLE: "available", ACKNOWLEDGED: "acknowledged", ARCHIVED: "archived"}

_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")  # `<topic>-<n>.<uuid>-delete` never matches
_SEGMENT = re.compile(r"^(?P<base>\d{20})\.log$")


# -- the directory ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    path: str
    topic: str
    partition: int
    base_offset: int
    size: int
    topic_id: str | None  # partition.metadata's, as a UUID string

    @property
    def internal(self) -> bool:
        return self.topic in INTERNAL_TOPICS


def list_segments(data_dir: Path) -> list[Segment]:
    """Every segment of every partition directory, in offset order within a partition. Directories
    of deleted partitions (`<topic>-<n>.<uuid>-delete`) are skipped."""
    from sharebroker.storage.log_manager import read_partition_metadata

    out = []
    for d in sorted(Path(data_dir).iterdir()):
        m = _DIR.match(d.name)
        if m is None or not d.is_dir():
            continue
        try:
            tid = read_partition_metadata(d)
        except ValueError:
            tid = None  # an unreadable partition.metadata costs the id, not the records
        for f in sorted(d.iterdir()):
            s = _SEGMENT.match(f.name)
            if s is not None:
                out.append(Segment(str(f), m["topic"], int(m["partition"]), int(s["base"]), f.stat().st_size,
                                   str(tid) if tid else None))
    return out


@dataclass(frozen=True)
class SegmentsByKind:
    user: list[Segment]
    share_state: list[Segment]
    consumer_offsets: list[Segment]


def split_segments(segments: Iterable[Segment]) -> SegmentsByKind:
    """User-topic segments apart from the two internal topics the report parses (other internal
    topics, such as `__transaction_state`, are in neither)."""
    segs = list(segments)
    return SegmentsByKind([s for s in segs if not s.internal], [s for s in segs if s.topic == SHARE_STATE_TOPIC],
                          [s for s in segs if s.topic == OFFSETS_TOPIC])


def topic_names(data_dir: Path, segments: Iterable[Segment] | None = None) -> dict[str, str]:
    """Topic id (UUID string) -> name, from partition.metadata files and the broker's metadata file
    (read as JSON: TopicStore.load would create the file when it is missing)."""
    names: dict[str, str] = {}
    for seg in list_segments(data_dir) if segments is None else segments:
        if seg.topic_id:
            names[seg.topic_id] = seg.topic
    try:
        doc = json.loads((Path(data_dir) / METADATA_FILE).read_text())
        for name, t in doc.get("topics", {}).items():
            names[str(uuid.UUID(t["topic_id"]))] = name  # the metadata file wins: it is the broker's truth
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return names


def group_start_policy(data_dir: Path) -> dict[str, str]:
    """Each share group's share.auto.offset.reset as the broker keeps it; groups absent use Kafka's
    default, latest."""
    try:
        doc = json.loads((Path(data_dir) / GROUP_CONFIGS_FILE).read_text())
        return {str(g): str(c.get("share.auto.offset.reset", "latest")) for g, c in doc.items()}
    except (OSError, ValueError, AttributeError):
        return {}


def log_start_offsets(data_dir: Path, segments: Iterable[Segment]) -> dict[tuple[str, int], int]:
    """Per partition, the log start offset: the first segment's base offset, or the broker's
    log-start-offset checkpoint when DeleteRecords moved it further."""
    starts: dict[tuple[str, int], int] = {}
    for s in segments:
        tp = (s.topic, s.partition)
        starts[tp] = min(starts.get(tp, s.base_offset), s.base_offset)
    from sharebroker.storage.log_manager import LOG_START_OFFSET_CHECKPOINT

    try:
        checkpoint = read_offset_checkpoint(Path(data_dir) / LOG_START_OFFSET_CHECKPOINT)
    except (OSError, CheckpointError):
        checkpoint = {}
    for tp, offset in checkpoint.items():
        if tp in starts:
            starts[tp] = max(starts[tp], offset)
    return starts


# -- one segment --------------------------------------------------------------------------------


@contextmanager
def mapped(path: str) -> Iterator[memoryview]:
    """The file mapped read-only at its current size: a live broker appending to it later changes
    nothing we read, and a 1 GiB segment costs no heap."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            yield memoryview(b"")
            return
        m = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
        view = memoryview(m)
        try:
            yield view
        finally:
            try:
                view.release()
                m.close()
            except BufferError:
                pass  # a caller still holds a slice: the mapping goes with it


@dataclass(frozen=True)
class SegmentSummary:
    batches: int
    records: int  # in data batches with a valid CRC: the rows segment_records gives
    control_batches: int
    crc_errors: int  # whole batches whose CRC does not match (skipped)
    next_offset: int  # after the last whole batch (control batches included); the base offset when empty
    first_timestamp: int  # -1 when no data batch
    last_timestamp: int
    torn: str | None  # why the walk stopped before the end of the file; None if it did not
    torn_bytes: int  # bytes after the last whole batch


class SegmentWalk:
    """One walk over a segment's batches (`buf`, the mapped file). Iterating yields the header of
    each whole data batch whose CRC matches; control batches (transaction markers) and batches
    with a bad CRC are counted and skipped. Once exhausted, `summary` says what the walk saw."""

    def __init__(self, seg: Segment, buf: memoryview) -> None:
        self.seg, self.buf = seg, buf
        self.summary: SegmentSummary | None = None

    def __iter__(self) -> Iterator[BatchHeader]:
        buf = self.buf
        walk = iter_batch_headers(buf)
        batches = records = control = crc_errors = 0
        next_offset, first_ts, last_ts = self.seg.base_offset, -1, -1
        for h in walk:
            batches += 1
            next_offset = h.next_offset
            if batch_crc(buf, h) != h.crc:
                crc_errors += 1
                continue
            if h.is_control:
                control += 1
                continue
            records += h.record_count
            if first_ts < 0 or h.base_timestamp < first_ts:
                first_ts = h.base_timestamp
            last_ts = max(last_ts, h.max_timestamp)
            yield h
        torn_bytes = len(buf) - walk.position
        self.summary = SegmentSummary(batches, records, control, crc_errors, next_offset, first_ts, last_ts,
                                      walk.stopped_by if torn_bytes else None, torn_bytes)


def summarize_segment(seg: Segment) -> SegmentSummary:
    with mapped(seg.path) as buf:
        walk = SegmentWalk(seg, buf)
        for _h in walk:
            pass
        assert walk.summary is not None
        return walk.summary


def _decode_batch(seg: Segment, buf: bytes | memoryview, h: BatchHeader) -> list[BatchRecord]:
    """The records of one CRC-valid batch; a batch its producer wrote broken says where it is
    (a missing codec library still raises ImportError)."""
    try:
        return decode_records(buf[h.position:h.position + h.size])
    except ImportError:
        raise
    except Exception as exc:
        raise ValueError(f"{seg.path}: batch at offset {h.base_offset} does not decode: {exc}") from exc


def keyed_records(walk: SegmentWalk) -> Iterator[BatchRecord]:
    """The records with a key of the data batches a walk yields (an internal topic's records)."""
    for h in walk:
        for r in _decode_batch(walk.seg, walk.buf, h):
            if r.key is not None:
                yield r


RECORD_COLUMNS = ("topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers",
                  "producer_id", "compression")


def segment_records(seg: Segment, chunk: int = 10_000) -> Iterator[dict[str, list]]:
    """The records of one segment as column dicts (RECORD_COLUMNS) of about `chunk` rows, cut at
    batch boundaries; compressed batches are decoded, control batches skipped. `headers` is the
    number of record headers. Record by record: the reference for pipeline/columnar.py."""
    with mapped(seg.path) as buf:
        yield from record_columns(seg, ((h, _decode_batch(seg, buf, h)) for h in SegmentWalk(seg, buf)), chunk)


def record_columns(seg: Segment, batches: Iterable[tuple[BatchHeader, list[Any]]],
                   chunk: int) -> Iterator[dict[str, list]]:
    """Decoded batches as RECORD_COLUMNS column dicts of about `chunk` rows."""
    cols: dict[str, list] = {c: [] for c in RECORD_COLUMNS}
    for h, records in batches:
        n = len(records)
        cols["topic"] += [seg.topic] * n
        cols["partition"] += [seg.partition] * n
        cols["timestamp_type"] += [h.timestamp_type] * n
        cols["producer_id"] += [h.producer_id] * n
        cols["compression"] += [h.compression] * n
        cols["offset"] += [r.offset for r in records]
        cols["timestamp"] += [r.timestamp for r in records]
        cols["key"] += [r.key for r in records]
        cols["value"] += [r.value for r in records]
        cols["headers"] += [len(r.headers) for r in records]
        if len(cols["offset"]) >= chunk:
            yield cols
            cols = {c: [] for c in RECORD_COLUMNS}
    if cols["offset"]:
        yield cols


# -- __share_group_state ------------------------------------------------------------------------

STATE_COLUMNS = ("group", "topic_id", "topic", "partition", "state_partition", "log_offset", "log_timestamp",
                 "record_type", "snapshot_epoch", "state_epoch", "leader_epoch", "start_offset",
                 "delivery_complete_count", "create_timestamp", "write_timestamp", "batches")
BATCH_FIELDS = ("first_offset", "last_offset", "delivery_state", "delivery_count")
RANGE_COLUMNS = ("group", "topic_id", "topic", "partition", "state_partition", "log_offset", *BATCH_FIELDS)


def share_state_rows(seg: Segment, names: Mapping[str, str] | None = None,
                     walk: SegmentWalk | None = None) -> dict[str, list]:
    """The state records of one `__share_group_state` segment as column dicts (STATE_COLUMNS).
    record_type is 'snapshot', 'update' or 'tombstone'; -1 stands for 'absent' (an update has no
    state epoch or timestamps, a tombstone nothing; an update's start offset -1 leaves it unchanged). `topic` is
    the name `names` (topic id -> name) gives, None for a topic that is gone. `batches` holds, per
    record, its ranges as dicts of BATCH_FIELDS (see flatten_ranges). With `walk` (a SegmentWalk
    of `seg` not yet iterated) the segment is read through it, which then holds its summary."""
    names = names or {}
    out: dict[str, list] = {c: [] for c in STATE_COLUMNS}
    with _walked(seg, walk) as w:
        for r in keyed_records(w):
            _state_row(seg, names, r, out)
    return out


def _state_row(seg: Segment, names: Mapping[str, str], r: BatchRecord, out: dict[str, list]) -> None:
    from sharebroker.broker.share_state.records import decode_record
    from sharebroker.broker.share_state.store import SNAPSHOT, SnapshotValue

    assert r.key is not None  # keyed_records gives only records with a key
    try:
        rec = decode_record(r.key, r.value)
    except ValueError:
        return  # a record type this broker does not write; its replay skips it too
    group, tid, partition = rec.key
    v = rec.value
    row = {"group": group, "topic_id": str(tid), "topic": names.get(str(tid)), "partition": partition,
           "state_partition": seg.partition, "log_offset": r.offset, "log_timestamp": r.timestamp,
           "record_type": "tombstone" if v is None else ("snapshot" if rec.kind == SNAPSHOT else "update"),
           "snapshot_epoch": v.snapshot_epoch if v else -1,
           "state_epoch": v.state_epoch if isinstance(v, SnapshotValue) else -1,
           "leader_epoch": v.leader_epoch if v else -1,
           "start_offset": v.start_offset if v else -1,
           "delivery_complete_count": v.delivery_complete_count if v else -1,
           "create_timestamp": v.create_timestamp if isinstance(v, SnapshotValue) else -1,
           "write_timestamp": v.write_timestamp if isinstance(v, SnapshotValue) else -1,
           "batches": [{"first_offset": b.first_offset, "last_offset": b.last_offset,
                        "delivery_state": b.delivery_state, "delivery_count": b.delivery_count}
                       for b in (v.batches if v else ())]}
    for c in STATE_COLUMNS:
        out[c].append(row[c])


@contextmanager
def _walked(seg: Segment, walk: SegmentWalk | None) -> Iterator[SegmentWalk]:
    """`walk`, or a walk over the segment mapped for the time of the block."""
    if walk is not None:
        yield walk
        return
    with mapped(seg.path) as buf:
        yield SegmentWalk(seg, buf)


def flatten_ranges(state: Mapping[str, list]) -> dict[str, list]:
    """One row per range of share_state_rows' `batches`, with its record's key columns."""
    out: dict[str, list] = {c: [] for c in RANGE_COLUMNS}
    keys = RANGE_COLUMNS[:6]
    for i, batches in enumerate(state["batches"]):
        for b in batches:
            for c in keys:
                out[c].append(state[c][i])
            for c in BATCH_FIELDS:
                out[c].append(b[c])
    return out


def rows_of(columns: Mapping[str, list]) -> list[dict[str, Any]]:
    """Column dict -> list of row dicts."""
    names = list(columns)
    return [dict(zip(names, values)) for values in zip(*(columns[c] for c in names))]


# -- __consumer_offsets -------------------------------------------------------------------------

OFFSET_COLUMNS = ("group", "topic", "partition", "offset", "commit_timestamp", "offsets_partition", "log_offset",
                  "log_timestamp")


def consumer_offset_rows(seg: Segment, walk: SegmentWalk | None = None) -> dict[str, list]:
    """Classic groups' offset commits in one `__consumer_offsets` segment (OFFSET_COLUMNS); a
    deleted commit (tombstone) has offset -1. Group metadata and other record types are skipped.
    `walk` as for share_state_rows."""
    out: dict[str, list] = {c: [] for c in OFFSET_COLUMNS}
    with _walked(seg, walk) as w:
        for r in keyed_records(w):
            _offset_row(seg, r, out)
    return out


def _offset_row(seg: Segment, r: BatchRecord, out: dict[str, list]) -> None:
    assert r.key is not None
    try:
        kind, group, topic, partition = decode_key(r.key)
        if kind != OFFSET_COMMIT:
            return
        commit = decode_offset_commit_value(r.value) if r.value is not None else None
    except ValueError:
        return  # share-group and consumer-protocol records share the topic
    for c, x in (("group", group), ("topic", topic), ("partition", partition),
                 ("offset", commit.offset if commit else -1),
                 ("commit_timestamp", commit.commit_timestamp_ms if commit else -1),
                 ("offsets_partition", seg.partition), ("log_offset", r.offset),
                 ("log_timestamp", r.timestamp)):
        out[c].append(x)


def committed_offsets(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, int], int]:
    """(group, topic, partition) -> last committed offset, replaying commits in log order (a
    tombstone removes the commit)."""
    out: dict[tuple[str, str, int], int] = {}
    for r in sorted(rows, key=lambda x: (x["offsets_partition"], x["log_offset"])):
        k = (r["group"], r["topic"], r["partition"])
        if r["offset"] < 0:
            out.pop(k, None)
        else:
            out[k] = r["offset"]
    return out


# -- share-partition state replay ---------------------------------------------------------------

StateKey = tuple[str, str, int]  # group, topic id (UUID string), partition


@dataclass
class PartitionState:
    """A share partition after replaying its `__share_group_state` records. The history fields
    cover the current state epoch only: a snapshot with a new state epoch (initialization, offset
    reset) or a tombstone starts it afresh."""
    topic: str | None
    state_epoch: int
    start_offset: int  # -1: never resolved (share.auto.offset.reset decides at the next load)
    delivery_complete_count: int
    batches: list[StateBatch]  # the in-flight ranges at/after start_offset, as the broker reloads them
    deleted: bool = False
    initial_start_offset: int = -1  # the epoch's initializing snapshot; -1: the reset policy chose it
    first_start_offset: int = -1  # the first start offset >= 0 the epoch persisted
    max_counts: list[tuple[int, int, int]] = field(default_factory=list)  # (first, last, highest count)
    archived: list[tuple[int, int, int]] = field(default_factory=list)  # (first, last, count), disjoint


def replay_state(rows: Iterable[Mapping[str, Any]]) -> dict[StateKey, PartitionState]:
    """Replay state records (rows of share_state_rows, with their `batches`) in log order through
    the share coordinator's own ShareStateStore.apply, exactly as the broker rebuilds its state at
    start-up: a snapshot replaces, an update merges by range (start offsets never go back, higher
    delivery counts win), a tombstone deletes, an update without a snapshot is ignored. Alongside
    it collects, per partition, every range any record of the epoch carried: the highest delivery
    count per offset and the archived ranges, which later records drop once the start offset
    passes them."""
    from sharebroker.broker.share_state.store import (
        SNAPSHOT,
        UPDATE,
        ShareStateStore,
        SnapshotValue,
        StateBatch,
        StateRecord,
        UpdateValue,
    )

    store = ShareStateStore()
    out: dict[StateKey, PartitionState] = {}
    seen: dict[StateKey, list[tuple[int, int, int]]] = {}
    archived: dict[StateKey, list[tuple[int, int, int]]] = {}
    topics: dict[StateKey, str | None] = {}
    for row in sorted(rows, key=lambda x: (x["state_partition"], x["log_offset"])):
        tid = uuid.UUID(row["topic_id"])
        skey: StateKey = (row["group"], str(tid), row["partition"])
        key = (row["group"], tid, row["partition"])
        topics[skey] = row.get("topic")
        batches = [StateBatch(b["first_offset"], b["last_offset"], b["delivery_state"], b["delivery_count"])
                   for b in row["batches"] or ()]
        kind = row["record_type"]
        current = store.states.get(key)
        if kind == "tombstone":
            store.apply(StateRecord(key, SNAPSHOT, None))
            out[skey] = PartitionState(topics[skey], -1, -1, -1, [], deleted=True)
            seen.pop(skey, None)
            archived.pop(skey, None)
            continue
        if kind == "snapshot":
            value: SnapshotValue | UpdateValue = SnapshotValue(
                row["snapshot_epoch"], row["state_epoch"], row["leader_epoch"], row["start_offset"],
                row["delivery_complete_count"], row["create_timestamp"], row["write_timestamp"], batches)
            if (current is None or current.state_epoch != row["state_epoch"]
                    or row["create_timestamp"] == row["write_timestamp"]):
                # An initializing snapshot (the coordinator's initialize stamps creation and write
                # with one clock reading; later snapshots keep the creation time), usually with a
                # new state epoch: what the partition went through before was another consumption.
                out[skey] = PartitionState(topics[skey], row["state_epoch"], -1, -1, [],
                                           initial_start_offset=row["start_offset"])
                seen[skey], archived[skey] = [], []
        else:
            if current is None:
                continue  # its snapshot was deleted before it: the store ignores it as well
            value = UpdateValue(row["snapshot_epoch"], row["leader_epoch"], row["start_offset"],
                                row["delivery_complete_count"], batches)
        store.apply(StateRecord(key, SNAPSHOT if kind == "snapshot" else UPDATE, value))
        if kind == "update" and row["start_offset"] == -1:
            continue  # only a leader-epoch bump: the store merges no ranges from it either
        p = out[skey]
        if p.first_start_offset < 0 and row["start_offset"] >= 0:
            p.first_start_offset = row["start_offset"]
        seen[skey] += [(b.first_offset, b.last_offset, b.delivery_count) for b in batches]
        archived[skey] += [(b.first_offset, b.last_offset, b.delivery_count) for b in batches
                           if b.delivery_state == ARCHIVED]
    for (group, tid, partition), s in store.states.items():
        skey = (group, str(tid), partition)
        p = out[skey]
        p.topic = topics[skey]
        p.start_offset, p.delivery_complete_count = s.start_offset, s.delivery_complete_count
        p.batches = list(s.batches)
        p.max_counts = max_delivery_counts(seen[skey])
        p.archived = max_delivery_counts(archived[skey])
    return out


def max_delivery_counts(ranges: Iterable[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Disjoint, sorted (first, last, count) ranges holding, per offset, the highest delivery count
    any of the given (first, last, count) ranges recorded for it; neighbours with equal counts
    merged. A sweep over the range boundaries: the cost follows the ranges, not the offsets."""
    rs = sorted((f, l_, c) for f, l_, c in ranges if l_ >= f and c > 0)
    bounds = sorted({f for f, _, _ in rs} | {l_ + 1 for _, l_, _ in rs})
    covering: list[tuple[int, int]] = []  # heap of (-count, last)
    out: list[tuple[int, int, int]] = []
    i = 0
    for lo, next_lo in zip(bounds, bounds[1:]):
        while i < len(rs) and rs[i][0] <= lo:
            heapq.heappush(covering, (-rs[i][2], rs[i][1]))
            i += 1
        while covering and covering[0][1] < lo:
            heapq.heappop(covering)
        if not covering:
            continue
        count = -covering[0][0]
        if out and out[-1][2] == count and out[-1][1] == lo - 1:
            out[-1] = (out[-1][0], next_lo - 1, count)
        else:
            out.append((lo, next_lo - 1, count))
    return out


def consumption_begin(state: PartitionState, policy: str, log_start: int) -> int:
    """The first offset the share group could have consumed in this epoch: the initializing
    snapshot's start offset when it had one; else the log start under share.auto.offset.reset
    'earliest'; else (latest, by_duration) the first start offset it persisted, a lower bound since
    the offset the leader began at is never persisted."""
    if state.initial_start_offset >= 0:
        begin = state.initial_start_offset
    elif policy == "earliest":
        begin = log_start
    else:
        begin = state.first_start_offset if state.first_start_offset >= 0 else max(state.start_offset, log_start)
    return max(begin, log_start)


def delivery_count_histogram(state: PartitionState, begin: int, end: int) -> Counter[int]:
    """Records of [begin, end) by the highest delivery count the state recorded for them. The
    coordinator keeps no range below the start offset, so a record below it that no record ever
    mentioned was completed in order from its first delivery: it counts as delivered once. Records
    at/after the start offset that no range mentions were never delivered (or are acquired right
    now) and are left out."""
    hist: Counter[int] = Counter()
    start = state.start_offset if state.start_offset >= 0 else begin
    mentioned_below_start = 0
    for f, l_, c in state.max_counts:
        lo, hi = max(f, begin), min(l_, end - 1)
        if hi < lo:
            continue
        hist[c] += hi - lo + 1
        if lo < start:
            mentioned_below_start += min(hi, start - 1) - lo + 1
    in_order = max(0, min(start, end) - begin) - mentioned_below_start
    if in_order > 0:
        hist[1] += in_order
    return hist


def state_counts(state: PartitionState, end: int) -> dict[str, int]:
    """Records of [start offset, end) by persisted delivery state; 'unrecorded' is what no range
    covers (not delivered yet, or acquired when the broker stopped)."""
    out = {name: 0 for name in STATE_NAMES.values()}
    covered = 0
    for b in state.batches:
        lo, hi = max(b.first_offset, state.start_offset), min(b.last_offset, end - 1)
        if hi >= lo:
            name = STATE_NAMES.get(b.delivery_state, str(b.delivery_state))
            out[name] = out.get(name, 0) + hi - lo + 1
            covered += hi - lo + 1
    out["unrecorded"] = max(0, end - max(state.start_offset, 0) - covered)
    return out
