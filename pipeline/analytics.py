"""A broker data directory read from its files: segments in Kafka's layout (`<topic>-<n>/
<base offset>.log`), `__share_group_state` and `__consumer_offsets`. Plain Python over the
project's own decoders, run inside Spark tasks (one task per segment) by pipeline/report.py and
tested without a JVM.

Reading a live broker's directory is safe: the active segment may end in a torn batch, and the
walk stops quietly there."""

from __future__ import annotations

import heapq
import json
import mmap
import os
import re
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from broker.groups.classic_records import OFFSET_COMMIT, decode_key, decode_offset_commit_value
from broker.share_state.records import decode_record
from broker.share_state.store import SNAPSHOT, ShareStateStore, SnapshotValue, StateBatch, StateRecord, UpdateValue
from protocol.record_batch import decode_records, iter_batch_headers
from storage.log_manager import read_partition_metadata
from storage.topics import METADATA_FILE

SHARE_STATE_TOPIC, OFFSETS_TOPIC = "__share_group_state", "__consumer_offsets"
AVAILABLE, ACKNOWLEDGED, ARCHIVED = 0, 2, 4
_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
_SEGMENT = re.compile(r"^(?P<base>\d{20})\.log$")


@dataclass(frozen=True)
class Segment:
    path: str
    topic: str
    partition: int
    base_offset: int
    size: int
    topic_id: str | None  # partition.metadata's, as a UUID string


def list_segments(data_dir: Path) -> list[Segment]:
    """Every segment of every partition directory, in offset order within a partition (deleted
    partitions, `<topic>-<n>.<uuid>-delete`, are skipped)."""
    out = []
    for d in sorted(data_dir.iterdir()):
        m = _DIR.match(d.name)
        if not d.is_dir() or m is None:
            continue
        try:
            tid = read_partition_metadata(d)
        except ValueError:
            tid = None
        for f in sorted(d.iterdir()):
            s = _SEGMENT.match(f.name)
            if s is not None:
                out.append(Segment(str(f), m["topic"], int(m["partition"]), int(s["base"]), f.stat().st_size,
                                   str(tid) if tid else None))
    return out


def topic_names(data_dir: Path) -> dict[str, str]:
    """Topic id (UUID string) -> name, from the broker's metadata file and partition.metadata."""
    names: dict[str, str] = {}
    for seg in list_segments(data_dir):
        if seg.topic_id:
            names[seg.topic_id] = seg.topic
    try:
        doc = json.loads((data_dir / METADATA_FILE).read_text())
        for name, t in doc.get("topics", {}).items():
            names[str(uuid.UUID(t["topic_id"]))] = name
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return names


def group_start_policy(data_dir: Path) -> dict[str, str]:
    """Each share group's share.auto.offset.reset as the broker keeps it (GROUP configs)."""
    try:
        doc = json.loads((data_dir / "share-group-configs.json").read_text())
        return {str(g): str(c.get("share.auto.offset.reset", "latest")) for g, c in doc.items()}
    except (OSError, ValueError, AttributeError):
        return {}


def _mapped(path: str) -> tuple[memoryview, int]:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return memoryview(b""), 0
        return memoryview(mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)), size


@dataclass(frozen=True)
class SegmentSummary:
    batches: int
    records: int
    control_batches: int
    next_offset: int  # after the segment's last whole batch; its base offset when empty
    first_timestamp: int
    last_timestamp: int
    torn: str | None  # why the walk stopped before the end of the file, None if it did not


def summarize_segment(seg: Segment) -> SegmentSummary:
    buf, size = _mapped(seg.path)
    walk = iter_batch_headers(buf)
    batches = records = control = 0
    next_offset, first_ts, last_ts = seg.base_offset, -1, -1
    for h in walk:
        batches += 1
        next_offset = h.next_offset
        if h.is_control:
            control += 1
            continue
        records += h.record_count
        if first_ts < 0 or h.base_timestamp < first_ts:
            first_ts = h.base_timestamp
        last_ts = max(last_ts, h.max_timestamp)
    torn = walk.stopped_by if walk.position < size else None
    return SegmentSummary(batches, records, control, next_offset, first_ts, last_ts, torn)


RECORD_COLUMNS = ("topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers",
                  "producer_id", "compression")


def segment_records(seg: Segment, chunk: int = 10_000) -> Iterator[dict[str, list]]:
    """The records of one segment as column dicts of at most `chunk` rows; control batches are
    skipped, compressed batches decoded."""
    buf, _size = _mapped(seg.path)
    cols: dict[str, list] = {c: [] for c in RECORD_COLUMNS}
    for h in iter_batch_headers(buf):
        if h.is_control:
            continue
        for r in decode_records(buf[h.position:h.position + h.size]):
            cols["topic"].append(seg.topic)
            cols["partition"].append(seg.partition)
            cols["offset"].append(r.offset)
            cols["timestamp"].append(r.timestamp)
            cols["timestamp_type"].append(h.timestamp_type)
            cols["key"].append(r.key)
            cols["value"].append(r.value)
            cols["headers"].append(len(r.headers))
            cols["producer_id"].append(h.producer_id)
            cols["compression"].append(h.compression)
        if len(cols["offset"]) >= chunk:
            yield cols
            cols = {c: [] for c in RECORD_COLUMNS}
    if cols["offset"]:
        yield cols


STATE_COLUMNS = ("group", "topic_id", "partition", "state_partition", "log_offset", "log_timestamp", "record_type",
                 "snapshot_epoch", "state_epoch", "leader_epoch", "start_offset", "delivery_complete_count")
RANGE_COLUMNS = ("group", "topic_id", "partition", "state_partition", "log_offset", "first_offset", "last_offset",
                 "delivery_state", "delivery_count")


def share_state_rows(seg: Segment) -> tuple[dict[str, list], dict[str, list]]:
    """(state records, their state ranges) of one `__share_group_state` segment as column dicts.
    record_type is 'snapshot', 'update' or 'tombstone'; -1 stands for 'unchanged' in an update."""
    state: dict[str, list] = {c: [] for c in STATE_COLUMNS}
    ranges: dict[str, list] = {c: [] for c in RANGE_COLUMNS}
    buf, _size = _mapped(seg.path)
    for h in iter_batch_headers(buf):
        if h.is_control:
            continue
        for r in decode_records(buf[h.position:h.position + h.size]):
            if r.key is None:
                continue
            try:
                rec = decode_record(r.key, r.value)
            except (ValueError, IndexError):
                continue  # not a record this broker writes; the broker skips it at replay too
            group, tid, partition = rec.key
            v = rec.value
            kind = "tombstone" if v is None else ("snapshot" if rec.kind == SNAPSHOT else "update")
            row = {"group": group, "topic_id": str(tid), "partition": partition, "state_partition": seg.partition,
                   "log_offset": r.offset, "log_timestamp": r.timestamp, "record_type": kind,
                   "snapshot_epoch": v.snapshot_epoch if v else -1,
                   "state_epoch": v.state_epoch if isinstance(v, SnapshotValue) else -1,
                   "leader_epoch": v.leader_epoch if v else -1, "start_offset": v.start_offset if v else -1,
                   "delivery_complete_count": v.delivery_complete_count if v else -1}
            for c in STATE_COLUMNS:
                state[c].append(row[c])
            for b in (v.batches if v else ()):
                for c, x in (("group", group), ("topic_id", str(tid)), ("partition", partition),
                             ("state_partition", seg.partition), ("log_offset", r.offset),
                             ("first_offset", b.first_offset), ("last_offset", b.last_offset),
                             ("delivery_state", b.delivery_state), ("delivery_count", b.delivery_count)):
                    ranges[c].append(x)
    return state, ranges


OFFSET_COLUMNS = ("group", "topic", "partition", "offset", "commit_timestamp", "log_offset", "log_timestamp")


def consumer_offset_rows(seg: Segment) -> dict[str, list]:
    """Classic groups' offset commits (a deleted commit has offset -1); other records skipped."""
    out: dict[str, list] = {c: [] for c in OFFSET_COLUMNS}
    buf, _size = _mapped(seg.path)
    for h in iter_batch_headers(buf):
        if h.is_control:
            continue
        for r in decode_records(buf[h.position:h.position + h.size]):
            if r.key is None:
                continue
            try:
                kind, group, topic, partition = decode_key(r.key)
                if kind != OFFSET_COMMIT:
                    continue
                commit = decode_offset_commit_value(r.value) if r.value is not None else None
            except (ValueError, IndexError):
                continue
            for c, x in (("group", group), ("topic", topic), ("partition", partition),
                         ("offset", commit.offset if commit else -1),
                         ("commit_timestamp", commit.commit_timestamp_ms if commit else -1),
                         ("log_offset", r.offset), ("log_timestamp", r.timestamp)):
                out[c].append(x)
    return out


@dataclass
class PartitionState:
    """A share partition's state after replaying its history."""
    start_offset: int
    batches: list[StateBatch]
    deleted: bool


StateKey = tuple[str, str, int]  # group, topic id, partition


def replay_state(rows: Iterable[dict], ranges: Iterable[dict]) -> dict[StateKey, PartitionState]:
    """Replay state records (rows of share_state_rows, each with its ranges) in log order per state
    partition, through the share coordinator's own store, as the broker does at start-up."""
    by_record: dict[tuple[int, int], list[StateBatch]] = {}
    for r in ranges:
        by_record.setdefault((r["state_partition"], r["log_offset"]), []).append(
            StateBatch(r["first_offset"], r["last_offset"], r["delivery_state"], r["delivery_count"]))
    store = ShareStateStore()
    deleted: set[StateKey] = set()
    for row in sorted(rows, key=lambda x: (x["state_partition"], x["log_offset"])):
        key = (row["group"], uuid.UUID(row["topic_id"]), row["partition"])
        batches = by_record.get((row["state_partition"], row["log_offset"]), [])
        if row["record_type"] == "tombstone":
            store.apply(StateRecord(key, SNAPSHOT, None))
            deleted.add((row["group"], row["topic_id"], row["partition"]))
            continue
        if row["record_type"] == "snapshot":
            value: SnapshotValue | UpdateValue = SnapshotValue(
                row["snapshot_epoch"], row["state_epoch"], row["leader_epoch"], row["start_offset"],
                row["delivery_complete_count"], row["log_timestamp"], row["log_timestamp"], batches)
            deleted.discard((row["group"], row["topic_id"], row["partition"]))
        else:
            value = UpdateValue(row["snapshot_epoch"], row["leader_epoch"], row["start_offset"],
                                row["delivery_complete_count"], batches)
        store.apply(StateRecord(key, SNAPSHOT if row["record_type"] == "snapshot" else 1, value))
    out = {(g, str(t), p): PartitionState(s.start_offset, list(s.batches), False) for (g, t, p), s in store.states.items()}
    for k in deleted:
        out.setdefault(k, PartitionState(-1, [], True))
    return out


def max_delivery_counts(ranges: Iterable[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Disjoint (first, last, count) ranges holding, per offset, the highest delivery count any of
    the given (first, last, count) ranges recorded for it: a sweep over the range boundaries."""
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
