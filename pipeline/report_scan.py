"""The report's one pass over a data directory: a Spark Python data source whose input partitions
are groups of segments ("tasks", packed to about equal bytes), each read exactly once.

A task walks its segments and
- decodes the user topics' records into Arrow columns (pipeline/columnar.py: many batches in
  lockstep, no Python work per record) and writes them itself, with pyarrow, as the `records/`
  table: `records/topic=<topic>/part-<task>.parquet`, one file per topic and task. Spark never sees
  a record: no row conversion, no second copy through the JVM;
- parses `__consumer_offsets`' records into their table;
- picks out the archived records the driver names (it replays `__share_group_state` first);
- counts records per topic and second of record timestamp (the report's throughput, bucketed
  later by the driver, which knows the whole time span);
- summarizes every segment (offsets, counts, CRC errors, torn tail) from the same walk.
It returns those small tables to the driver as Arrow IPC payloads (pipeline/report_source.py's
tasks run it), one (name, payload) pair per table.

A task run again (a retry) writes the same file names, replacing its earlier output: each file is
written under a hidden name and renamed when the task ends. Executors need the data directory and
the output directory at the same paths (local[*] on the broker host, or shared storage)."""

from __future__ import annotations

import os
import uuid
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sharebroker.pipeline.analytics import (
    OFFSETS_TOPIC,
    Segment,
    SegmentSummary,
    SegmentWalk,
    _decode_batch,
    consumer_offset_rows,
    mapped,
    record_columns,
    share_state_rows,
)
from sharebroker.pipeline.columnar import ColumnarDecodeError, DecodedColumns, decode_batches
from sharebroker.protocol.record_batch import BatchHeader

CHUNK_BYTES = 8 * 1024 * 1024  # batches decoded together (several segments' when they are small)
ROW_GROUP_BYTES = 64 * 1024 * 1024  # record bytes buffered per topic before a Parquet row group
PENDING_BYTES = 2 * ROW_GROUP_BYTES  # record bytes a task buffers over all its topics before writing them

RECORDS_SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                            ("timestamp", pa.int64()), ("timestamp_type", pa.int8()), ("key", pa.binary()),
                            ("value", pa.binary()), ("headers", pa.int32()), ("producer_id", pa.int64()),
                            ("compression", pa.int8())])
RECORD_FILE_SCHEMA = pa.schema([f for f in RECORDS_SCHEMA if f.name != "topic"])  # topic: the directory
SEGMENTS_SCHEMA = pa.schema([("path", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
                             ("base_offset", pa.int64()), ("next_offset", pa.int64()), ("bytes", pa.int64()),
                             ("batches", pa.int64()), ("records", pa.int64()), ("control_batches", pa.int64()),
                             ("crc_errors", pa.int64()), ("first_timestamp", pa.int64()),
                             ("last_timestamp", pa.int64()), ("torn", pa.string()), ("torn_bytes", pa.int64())])
BATCH_TYPE = pa.struct([("first_offset", pa.int64()), ("last_offset", pa.int64()), ("delivery_state", pa.int8()),
                        ("delivery_count", pa.int16())])
STATE_SCHEMA = pa.schema([("group", pa.string()), ("topic_id", pa.string()), ("topic", pa.string()),
                          ("partition", pa.int32()), ("state_partition", pa.int32()), ("log_offset", pa.int64()),
                          ("log_timestamp", pa.int64()), ("record_type", pa.string()),
                          ("snapshot_epoch", pa.int32()), ("state_epoch", pa.int32()), ("leader_epoch", pa.int32()),
                          ("start_offset", pa.int64()), ("delivery_complete_count", pa.int32()),
                          ("create_timestamp", pa.int64()), ("write_timestamp", pa.int64()),
                          ("batches", pa.list_(BATCH_TYPE))])
OFFSETS_SCHEMA = pa.schema([("group", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
                            ("offset", pa.int64()), ("commit_timestamp", pa.int64()),
                            ("offsets_partition", pa.int32()), ("log_offset", pa.int64()),
                            ("log_timestamp", pa.int64())])
ARCHIVED_SCHEMA = pa.schema([("group", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
                             ("offset", pa.int64()), ("delivery_count", pa.int32()), ("timestamp", pa.int64()),
                             ("key", pa.binary()), ("value", pa.binary())])
SECONDS_SCHEMA = pa.schema([("topic", pa.string()), ("second", pa.int64()), ("count", pa.int64())])
# Per task: when it started (epoch seconds), its wall and CPU time: where the job's time went.
TASKS_SCHEMA = pa.schema([("task", pa.int32()), ("segments", pa.int64()), ("bytes", pa.int64()),
                          ("started", pa.float64()), ("wall_s", pa.float64()), ("cpu_s", pa.float64())])
TABLES = {"segments": SEGMENTS_SCHEMA, "consumer_offsets": OFFSETS_SCHEMA, "archived": ARCHIVED_SCHEMA,
          "seconds": SECONDS_SCHEMA, "tasks": TASKS_SCHEMA}


def summary_row(seg: Segment, s: SegmentSummary) -> dict[str, object]:
    return {"path": seg.path, "topic": seg.topic, "partition": seg.partition, "base_offset": seg.base_offset,
            "next_offset": s.next_offset, "bytes": seg.size, "batches": s.batches, "records": s.records,
            "control_batches": s.control_batches, "crc_errors": s.crc_errors, "first_timestamp": s.first_timestamp,
            "last_timestamp": s.last_timestamp, "torn": s.torn, "torn_bytes": s.torn_bytes}


def topic_directory(records: Path, topic: str) -> Path:
    """records/topic=<topic>, escaped the way Spark and pyarrow unescape partition values (Kafka's
    topic characters need none)."""
    return records / f"topic={quote(topic, safe='')}"


class _RecordFiles:
    """A task's records/ files, one per topic, each buffered up to a row group (and all of them
    written out when the task buffers PENDING_BYTES: a task may hold many small topics)."""

    def __init__(self, records: Path, task: int) -> None:
        self.records, self.name = records, f"part-{task:05d}.parquet"
        # Unique per attempt: a speculative or lost attempt of the same task never writes into
        # this one's file; the last attempt to finish replaces the part whole.
        self.tmp = f".{self.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
        self.writers: dict[str, pq.ParquetWriter] = {}
        self.pending: dict[str, list[pa.RecordBatch]] = defaultdict(list)
        self.pending_bytes: dict[str, int] = defaultdict(int)

    def add(self, topic: str, batch: pa.RecordBatch) -> None:
        self.pending[topic].append(batch)
        self.pending_bytes[topic] += batch.nbytes
        if self.pending_bytes[topic] >= ROW_GROUP_BYTES:
            self._flush(topic)
        elif sum(self.pending_bytes.values()) >= PENDING_BYTES:
            for t in list(self.pending):
                self._flush(t)

    def _flush(self, topic: str) -> None:
        batches = self.pending.pop(topic, [])
        self.pending_bytes.pop(topic, None)
        if not batches:
            return
        writer = self.writers.get(topic)
        if writer is None:
            d = topic_directory(self.records, topic)
            d.mkdir(parents=True, exist_ok=True)
            writer = self.writers[topic] = pq.ParquetWriter(
                d / self.tmp, RECORD_FILE_SCHEMA, compression="snappy",
                # Dictionaries only where values repeat: keys and values rarely do.
                use_dictionary=["partition", "timestamp_type", "headers", "producer_id", "compression"])
        writer.write_table(pa.Table.from_batches(batches, RECORD_FILE_SCHEMA))

    def close(self) -> None:
        for topic in list(self.pending):
            self._flush(topic)
        for topic, writer in self.writers.items():
            writer.close()
            d = topic_directory(self.records, topic)
            os.replace(d / self.tmp, d / self.name)

    def abort(self) -> None:
        """A failed task: its writers closed and its temporary files removed."""
        for topic, writer in self.writers.items():
            try:
                writer.close()
            finally:
                (topic_directory(self.records, topic) / self.tmp).unlink(missing_ok=True)
        self.writers.clear()


def _archived_rows(seg: Segment, ranges: Sequence[tuple[int, int, str, int]], cols: DecodedColumns, lo: int,
                   hi: int) -> pa.Table:
    """The records of cols[lo:hi] (one segment's) inside the archived ranges, one row per group."""
    offsets = cols.offset[lo:hi]
    ordered = bool(np.all(offsets[1:] > offsets[:-1]))  # a segment's offsets rise: binary search
    take: list[np.ndarray] = []
    groups: list[str] = []
    counts: list[int] = []
    for first, last, group, count in ranges:
        if ordered:
            rows = np.arange(np.searchsorted(offsets, first, "left"), np.searchsorted(offsets, last, "right"))
        else:
            rows = np.flatnonzero((offsets >= first) & (offsets <= last))
        if len(rows):
            take.append(rows + lo)
            groups += [group] * len(rows)
            counts += [count] * len(rows)
    if not take:
        return ARCHIVED_SCHEMA.empty_table()
    index = np.concatenate(take)
    n = len(index)
    return pa.Table.from_arrays([
        pa.array(groups, pa.string()), pa.array([seg.topic] * n, pa.string()),
        pa.array(np.full(n, seg.partition, dtype=np.int32)), pa.array(cols.offset[index]), pa.array(counts, pa.int32()),
        pa.array(cols.timestamp[index]), cols.key.take(pa.array(index)), cols.value.take(pa.array(index))],
        schema=ARCHIVED_SCHEMA)


def read_share_state(segments: Sequence[Segment], names: Mapping[str, str]) -> tuple[pa.Table, list[dict[str, object]]]:
    """The `__share_group_state` segments' records (STATE_SCHEMA) and their summaries, each read
    once. Done by the driver before the scan: the replayed state says which records are archived,
    and the scan tasks pick those out as they pass (the topic is small: compacted state)."""
    state: dict[str, list] = defaultdict(list)
    summaries = []
    for seg in segments:
        with mapped(seg.path) as buf:
            walk = SegmentWalk(seg, buf)
            for name, values in share_state_rows(seg, names, walk).items():
                state[name] += values
            assert walk.summary is not None
            summaries.append(summary_row(seg, walk.summary))
    return pa.Table.from_pydict(dict(state) or {c: [] for c in STATE_SCHEMA.names}, STATE_SCHEMA), summaries


def _piece(seg: Segment, buf: memoryview, headers: list[BatchHeader]) -> tuple[Segment, bytes, list[BatchHeader]]:
    """The bytes from the first to the last of `headers` copied out of the mapping (which closes
    with its segment), the headers' positions moved to match."""
    start, end = headers[0].position, headers[-1].position + headers[-1].size
    return seg, bytes(buf[start:end]), [replace(h, position=h.position - start) for h in headers]


def _record_batch(seg: Segment, cols: DecodedColumns, lo: int, hi: int) -> pa.RecordBatch:
    n = hi - lo
    return pa.RecordBatch.from_arrays([
        pa.array(np.full(n, seg.partition, dtype=np.int32)), pa.array(cols.offset[lo:hi]),
        pa.array(cols.timestamp[lo:hi]), pa.array(cols.timestamp_type[lo:hi]), cols.key.slice(lo, n),
        cols.value.slice(lo, n), pa.array(cols.headers[lo:hi]), pa.array(cols.producer_id[lo:hi]),
        pa.array(cols.compression[lo:hi])], schema=RECORD_FILE_SCHEMA)


def _reference_columns(pieces: Sequence[tuple[Segment, bytes, list[BatchHeader]]]) -> DecodedColumns:
    """What decode_batches gives, record by record (protocol/record_batch.decode_records): for a
    chunk the vectorised decoder refused, so that a broken batch fails with the reference's error
    (or decodes, when only the vectorised decoder's stricter checks refused it)."""
    cols: dict[str, list] = defaultdict(list)
    for seg, buf, headers in pieces:
        for c in record_columns(seg, ((h, _decode_batch(seg, buf, h)) for h in headers), chunk=2**62):
            for name, values in c.items():
                cols[name] += values
    return DecodedColumns(
        offset=np.array(cols["offset"], dtype=np.int64), timestamp=np.array(cols["timestamp"], dtype=np.int64),
        timestamp_type=np.array(cols["timestamp_type"], dtype=np.int8),
        producer_id=np.array(cols["producer_id"], dtype=np.int64),
        compression=np.array(cols["compression"], dtype=np.int8), headers=np.array(cols["headers"], dtype=np.int32),
        key=pa.array(cols["key"], pa.binary()), value=pa.array(cols["value"], pa.binary()))


Archived = Mapping[tuple[str, int], Sequence[tuple[int, int, str, int]]]  # (topic, partition) -> (first, last, group, count)


def scan_task(task: int, segments: Sequence[Segment], output: str,
              archived: Archived | None = None) -> dict[str, pa.Table]:
    """Read `segments` once (user topics and `__consumer_offsets`): records/ files written, the
    small tables returned (TABLES). The records `archived` names are returned in full, per group."""
    archived = archived or {}
    started, wall, cpu = time.time(), time.perf_counter(), time.process_time()
    files = _RecordFiles(Path(output) / "records", task)
    summaries: list[dict[str, object]] = []
    poison: list[pa.Table] = []
    offsets: dict[str, list] = defaultdict(list)
    seconds: dict[str, list[np.ndarray]] = defaultdict(list)

    def decode(pieces: list[tuple[Segment, bytes, list[BatchHeader]]]) -> None:
        if not any(headers for _, _, headers in pieces):
            return
        try:
            cols = decode_batches([(buf, h) for _, buf, headers in pieces for h in headers])
        except ColumnarDecodeError:
            cols = _reference_columns(pieces)
        at = 0
        for seg, _buf, headers in pieces:
            n = sum(h.record_count for h in headers)
            if n:
                files.add(seg.topic, _record_batch(seg, cols, at, at + n))
                ts = cols.timestamp[at:at + n]
                seconds[seg.topic].append(ts[ts >= 0] // 1000)
                if (seg.topic, seg.partition) in archived:
                    poison.append(_archived_rows(seg, archived[(seg.topic, seg.partition)], cols, at, at + n))
            at += n

    try:
        pieces: list[tuple[Segment, bytes, list[BatchHeader]]] = []
        size = 0
        for seg in segments:
            with mapped(seg.path) as buf:
                walk = SegmentWalk(seg, buf)
                if seg.topic == OFFSETS_TOPIC:
                    for name, values in consumer_offset_rows(seg, walk).items():
                        offsets[name] += values
                elif not seg.internal:
                    headers: list[BatchHeader] = []
                    for h in walk:
                        headers.append(h)
                        size += h.size
                        if size >= CHUNK_BYTES:  # decode what is gathered; the segment goes on in the next chunk
                            pieces.append(_piece(seg, buf, headers))
                            decode(pieces)
                            pieces, headers, size = [], [], 0
                    if headers:
                        pieces.append(_piece(seg, buf, headers))
                else:
                    for _h in walk:
                        pass  # another internal topic: summarized only
                assert walk.summary is not None
                summaries.append(summary_row(seg, walk.summary))
        decode(pieces)
        files.close()
    except BaseException:
        files.abort()
        raise

    topics: list[str] = []
    secs: list[np.ndarray] = []
    counts: list[np.ndarray] = []
    for topic, parts in seconds.items():
        unique = np.unique(np.concatenate(parts), return_counts=True)
        topics += [topic] * len(unique[0])
        secs.append(np.asarray(unique[0]))
        counts.append(np.asarray(unique[1]))
    return {
        "segments": pa.Table.from_pylist(summaries, SEGMENTS_SCHEMA),
        "archived": pa.concat_tables(poison) if poison else ARCHIVED_SCHEMA.empty_table(),
        "consumer_offsets": pa.Table.from_pydict(dict(offsets) or {c: [] for c in OFFSETS_SCHEMA.names},
                                                 OFFSETS_SCHEMA),
        "seconds": pa.Table.from_arrays([pa.array(topics, pa.string()),
                                         pa.array(np.concatenate(secs) if secs else np.zeros(0, np.int64)),
                                         pa.array(np.concatenate(counts) if counts else np.zeros(0, np.int64))],
                                        schema=SECONDS_SCHEMA),
        "tasks": pa.Table.from_pylist([{"task": task, "segments": len(segments), "bytes": sum(s.size for s in segments),
                                        "started": started, "wall_s": time.perf_counter() - wall,
                                        "cpu_s": time.process_time() - cpu}], TASKS_SCHEMA),
    }


def ipc_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def ipc_table(payload: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(payload)).read_all()
