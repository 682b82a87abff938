"""Log compaction, as Kafka's log cleaner does it: the pure file work of one cleaning round.

`clean(task)` runs away from the event loop (in a worker process: it decodes every record of the
log, which is CPU work). It reads only segments that are no longer active, which nothing else writes,
and writes each group of cleaned segments to `<base>.log.cleaned` with `.index.cleaned`,
`.timeindex.cleaned` and (when aborted transactions remain) `.txnindex.cleaned`, all fsynced. The
loop then swaps them in (`PartitionLog.replace_segments`) with Kafka's .cleaned -> .swap -> final
renames, which `PartitionLog.open` completes or discards after a crash.

A round, as in Kafka's Cleaner:
1. Map every key of the dirty section [first dirty offset, first uncleanable offset) to the offset
   of its last record, skipping aborted transactions; the map is bounded by
   log.cleaner.dedupe.buffer.size, and a full map ends the round early (the rest is cleaned next round).
2. Rewrite every segment below the map's end, in groups that fit one segment: a record stays if
   no later record has its key; a tombstone (null value) also stays until its batch's delete horizon
   (set at the first cleaning that keeps it: now + delete.retention.ms) has passed. Aborted
   transactional batches go; a transaction marker goes once the cleaner has removed every batch of
   its transaction and its own delete horizon has passed. A batch holding a producer's last
   sequence (or epoch) stays, emptied if need be, as does the round's last batch. Offsets never
   change: a rewritten batch keeps its base offset and last offset delta.
3. Batches from which nothing is removed are copied byte for byte; the others are rebuilt with the
   same codec and a new CRC.
"""

from __future__ import annotations

import errno
import gzip
import heapq
import os
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from sharebroker.protocol.crc import crc32c
from sharebroker.protocol.errors import ErrorCode
from sharebroker.protocol.record_batch import (
    ABORT_MARKER,
    BATCH_HEADER_SIZE,
    COMMIT_MARKER,
    COMPRESSION_MASK,
    CONTROL_BIT,
    DELETE_HORIZON_BIT,
    GZIP,
    LOG_OVERHEAD,
    LZ4,
    MIN_BATCH_LENGTH,
    NONE,
    SNAPPY,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    ZSTD,
    BatchHeader,
    InvalidRecordError,
    decompress,
    read_header,
    _varint as read_varint,
    _zigzag as append_varint,
)
from sharebroker.storage import txn_index
from sharebroker.storage.files import write_all
from sharebroker.storage.segment import segment_name
from sharebroker.storage.txn_index import AbortedTxnEntry

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
SEGMENT_EXTENSIONS = (".log", ".index", ".timeindex", ".txnindex")

# Bytes one key of the offset map costs in this process (a dict entry, the key's bytes object and
# the offset): Kafka's map costs 24 bytes a key (an MD5 and a long); ours keeps the keys themselves
# (no hash collisions) and is bounded by this estimate plus each key's length.
MAP_ENTRY_OVERHEAD = 120
_READ_CHUNK = 4 << 20
_WRITE_CHUNK = 1 << 20
_INT32_MAX = 0x7FFFFFFF
_HEADER = struct.Struct(">qiibIhiqqqhii")
_U32 = struct.Struct(">I")
_IDX = struct.Struct(">ii")
_TIDX = struct.Struct(">qi")
_CONTROL_KEY = struct.Struct(">hh")
_XERIAL_MAGIC = b"\x82SNAPPY\x00"


CRASH_POINT_ENV = "SHAREBROKER_TEST_CRASH_AT"


def crash_point(name: str) -> None:
    """Tests only: with SHAREBROKER_TEST_CRASH_AT=<name> in the broker's environment, the broker is
    killed with SIGKILL here, so a recovery test lands its kill -9 at an exact step of a cleaning
    (`cleaner-writing`: half-way through writing a .cleaned log, in the cleaner process;
    `cleaner-cleaned`: cleaned files complete, nothing renamed; `cleaner-swap`: half-way through
    the renames)."""
    if os.environ.get(CRASH_POINT_ENV) == name:
        import signal
        target = _parent_pid or os.getpid()
        os.kill(target, signal.SIGKILL)
        os._exit(1)


class CleaningAborted(Exception):
    """The partition went away (deleted, or the broker is stopping) while it was being cleaned."""


@dataclass(slots=True)
class SourceSegment:
    """A non-active segment as the loop saw it when the round was planned."""

    base_offset: int
    size: int
    index_entries: int
    time_index_entries: int
    mtime_ns: int


@dataclass(slots=True)
class CleanTask:
    directory: str
    name: str  # topic-partition, for messages
    segments: list[SourceSegment]  # every segment below the first uncleanable offset, in order
    first_dirty_offset: int
    first_uncleanable_offset: int
    aborted: list[AbortedTxnEntry]  # the log's aborted transactions, in marker order
    # producer id -> (offset of its last data batch's last record or -1, epoch): active producers
    active_producers: dict[int, tuple[int, int]]
    now_ms: int
    delete_retention_ms: int
    segment_bytes: int
    segment_index_bytes: int
    index_interval_bytes: int
    map_memory_bytes: int  # log.cleaner.dedupe.buffer.size / log.cleaner.threads
    map_load_factor: float = 0.9  # log.cleaner.io.buffer.load.factor
    max_io_bytes_per_second: float = float("inf")  # log.cleaner.io.max.bytes.per.second
    stop_check: Callable[[], bool] | None = None  # set in the worker: True when the work must stop


@dataclass(slots=True)
class CleanedSegment:
    base_offset: int
    replaces: list[int]  # base offsets of the segments it replaces (the first is its own)
    size: int
    next_offset: int  # after its last batch (base offset if empty)
    max_timestamp: int
    offset_of_max_timestamp: int


@dataclass(slots=True)
class CleanStats:
    map_bytes_read: int = 0  # read to build the offset map
    bytes_read: int = 0  # of the segments cleaned (Kafka's "MB of log processed")
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    map_keys: int = 0
    map_bytes: int = 0
    batches_copied: int = 0
    batches_rewritten: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # of the process that cleaned


@dataclass(slots=True)
class CleanResult:
    end_offset: int  # the new cleaner checkpoint: everything below it is clean
    cleaned: list[CleanedSegment] = field(default_factory=list)
    stats: CleanStats = field(default_factory=CleanStats)


# -- reading ------------------------------------------------------------------------------------

def _batches(fd: int, start: int, end: int) -> Iterator[tuple[memoryview, BatchHeader]]:
    """Whole batches of [start, end) of a file, read in large chunks (headers checked, no CRC: the
    segments being cleaned were checked when written or recovered)."""
    pos = start
    while pos < end:
        want = min(_READ_CHUNK, end - pos)
        data = os.pread(fd, want, pos)
        if len(data) < BATCH_HEADER_SIZE:
            raise InvalidRecordError(ErrorCode.corrupt_message, f"truncated batch at position {pos}")
        mv = memoryview(data)
        off = 0
        n = len(data)
        while off + BATCH_HEADER_SIZE <= n:
            h = read_header(data, off)
            if h.magic != 2 or h.batch_length < MIN_BATCH_LENGTH:
                raise InvalidRecordError(ErrorCode.corrupt_message, f"not a v2 batch at position {pos + off}")
            size = h.batch_length + LOG_OVERHEAD
            if off + size > n:
                if off == 0:  # one batch larger than the chunk: read it whole
                    data = os.pread(fd, size, pos)
                    if len(data) < size:
                        raise InvalidRecordError(ErrorCode.corrupt_message, f"truncated batch at position {pos}")
                    mv = memoryview(data)
                    n = size
                    continue
                break
            h.position = pos + off
            yield mv[off:off + size], h
            off += size
        pos += off


# One record of a batch: (start, end, attributes, timestamp delta, offset delta, key or None,
# is a tombstone, position of its key length).
Record = tuple[int, int, int, int, int, bytes | None, bool, int]


def _records(batch: memoryview, h: BatchHeader) -> tuple[bytes, list[Record]]:
    """The records section (decompressed) of one batch and where each record lies in it."""
    body = bytes(batch[BATCH_HEADER_SIZE:])
    codec = h.attributes & COMPRESSION_MASK
    if codec:
        body = decompress(codec, body)
    out: list[Record] = []
    pos = 0
    try:
        for _ in range(h.record_count):
            length, p = read_varint(body, pos)
            end = p + length
            attrs = body[p]
            ts_delta, p = read_varint(body, p + 1)
            off_delta, p = read_varint(body, p)
            key_at = p
            klen, p = read_varint(body, p)
            key = None
            if klen >= 0:
                key = body[p:p + klen]
                p += klen
            vlen, _ = read_varint(body, p)
            out.append((pos, end, attrs, ts_delta, off_delta, key, vlen < 0, key_at))
            pos = end
    except IndexError:
        raise InvalidRecordError(ErrorCode.corrupt_message, f"records end before the record count at offset {h.base_offset}") from None
    return body, out


def _control_type(batch: memoryview, h: BatchHeader) -> int | None:
    """The control record type of a control batch, None when it holds no record."""
    if h.record_count == 0:
        return None
    body, recs = _records(batch, h)
    if not recs or recs[0][5] is None or len(recs[0][5]) < _CONTROL_KEY.size:
        return None
    key = recs[0][5]
    assert key is not None
    return int(_CONTROL_KEY.unpack_from(key, 0)[1])


# -- transactions (Kafka's CleanedTransactionMetadata) -------------------------------------------

class _AbortedState:
    __slots__ = ("entry", "last_batch_seen")

    def __init__(self, entry: AbortedTxnEntry) -> None:
        self.entry = entry
        self.last_batch_seen = False


class TransactionTracker:
    """Which transactional batches belong to aborted transactions, and when a marker may go."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, int, int, int]] = []  # first offset, pid, last, lso, seq
        self._added: set[tuple[int, int, int]] = set()
        self._ongoing_committed: set[int] = set()
        self._ongoing_aborted: dict[int, _AbortedState] = {}
        self.retained_aborts: list[AbortedTxnEntry] = []  # for the cleaned transaction index

    def add_aborted(self, entries: list[AbortedTxnEntry]) -> None:
        for e in entries:
            k = (e.producer_id, e.first_offset, e.last_offset)
            if k not in self._added:
                self._added.add(k)
                heapq.heappush(self._heap, (e.first_offset, e.producer_id, e.last_offset, e.last_stable_offset,
                                            len(self._added)))

    def _consume_up_to(self, offset: int) -> None:
        heap = self._heap
        while heap and heap[0][0] <= offset:
            first, pid, last, lso, _ = heapq.heappop(heap)
            if pid not in self._ongoing_aborted:
                self._ongoing_aborted[pid] = _AbortedState(AbortedTxnEntry(pid, first, last, lso))

    def on_control_batch(self, h: BatchHeader, control_type: int | None) -> bool:
        """True when this control batch may be discarded."""
        self._consume_up_to(h.last_offset)
        if control_type is None:
            return True  # an empty control batch was already cleaned
        pid = h.producer_id
        if control_type == ABORT_MARKER:
            state = self._ongoing_aborted.pop(pid, None)
            if state is not None and state.last_batch_seen:
                self.retained_aborts.append(state.entry)  # keep the marker until its batches are gone
                return False
            return True
        if control_type == COMMIT_MARKER:
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False
            return True
        return False

    def on_batch(self, h: BatchHeader) -> bool:
        """True when this data batch belongs to an aborted transaction."""
        self._consume_up_to(h.last_offset)
        if not h.attributes & TRANSACTIONAL_BIT:
            return False
        state = self._ongoing_aborted.get(h.producer_id)
        if state is not None:
            state.last_batch_seen = True
            return True
        self._ongoing_committed.add(h.producer_id)
        return False


def aborted_overlapping(aborted: list[AbortedTxnEntry], start: int, end: int) -> list[AbortedTxnEntry]:
    """Kafka's collectAbortedTransactions: aborted transactions with records in [start, end)."""
    return [a for a in aborted if a.last_offset >= start and a.first_offset < end]


# -- the offset map ------------------------------------------------------------------------------

class OffsetMap:
    """Key -> offset of its last record in the dirty section, bounded in memory (Kafka's
    SkimpyOffsetMap, keyed by the key bytes rather than their MD5)."""

    __slots__ = ("_map", "_bytes", "limit_bytes", "latest_offset")

    def __init__(self, limit_bytes: int) -> None:
        self._map: dict[bytes, int] = {}
        self._bytes = 0
        self.limit_bytes = limit_bytes
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._map)

    @property
    def bytes_used(self) -> int:
        return self._bytes

    def full_for(self, key: bytes) -> bool:
        return key not in self._map and self._bytes + MAP_ENTRY_OVERHEAD + len(key) > self.limit_bytes

    def put(self, key: bytes, offset: int) -> None:
        m = self._map
        if key not in m:
            self._bytes += MAP_ENTRY_OVERHEAD + len(key)
        m[key] = offset

    def get(self, key: bytes) -> int:
        return self._map.get(key, -1)


# -- writing ------------------------------------------------------------------------------------

def _compress(codec: int, body: bytes, original: memoryview) -> bytes:
    """Records recompressed with the batch's own codec, in the framing Kafka's clients write."""
    if codec == NONE:
        return body
    if codec == GZIP:
        return gzip.compress(body)
    if codec == SNAPPY:
        import snappy
        if bytes(original[BATCH_HEADER_SIZE:BATCH_HEADER_SIZE + 8]) == _XERIAL_MAGIC:
            out = bytearray(_XERIAL_MAGIC)
            out += struct.pack(">ii", 1, 1)
            for i in range(0, len(body), 32768):
                block = snappy.compress(body[i:i + 32768])
                out += struct.pack(">i", len(block))
                out += block
            return bytes(out)
        packed: bytes = snappy.compress(body)
        return packed
    if codec == LZ4:
        import lz4.frame
        framed: bytes = lz4.frame.compress(body, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
                                           store_size=False)
        return framed
    if codec == ZSTD:
        import zstandard
        return zstandard.ZstdCompressor().compress(body)
    raise InvalidRecordError(ErrorCode.corrupt_message, f"unknown compression type id {codec}")


def rebuild_batch(original: memoryview, h: BatchHeader, body: bytes, kept: list[Record],
                  delete_horizon_ms: int | None) -> bytes:
    """The batch with only `kept` records (at least one), same base offset, last offset delta,
    producer fields, leader epoch and codec; with a delete horizon, the base timestamp holds it."""
    log_append = bool(h.attributes & TIMESTAMP_TYPE_BIT)
    stamps = [h.base_timestamp + r[3] for r in kept]
    base_ts = delete_horizon_ms if delete_horizon_ms is not None else stamps[0]
    max_ts = h.max_timestamp if log_append else max(stamps)
    out = bytearray()
    rec = bytearray()
    for (_start, end, attrs, _ts_delta, off_delta, _key, _tomb, key_at), ts in zip(kept, stamps):
        rec.clear()
        rec.append(attrs)
        append_varint(rec, ts - base_ts)
        append_varint(rec, off_delta)
        rec += body[key_at:end]
        append_varint(out, len(rec))
        out += rec
    codec = h.attributes & COMPRESSION_MASK
    payload = _compress(codec, bytes(out), original)
    attrs = h.attributes & ~DELETE_HORIZON_BIT
    if delete_horizon_ms is not None:
        attrs |= DELETE_HORIZON_BIT
    buf = bytearray(BATCH_HEADER_SIZE)
    _HEADER.pack_into(buf, 0, h.base_offset, BATCH_HEADER_SIZE - LOG_OVERHEAD + len(payload), h.partition_leader_epoch,
                      2, 0, attrs, h.last_offset_delta, base_ts, max_ts, h.producer_id, h.producer_epoch,
                      h.base_sequence, len(kept))
    buf += payload
    _U32.pack_into(buf, 17, crc32c(memoryview(buf)[21:]))
    return bytes(buf)


def empty_batch(h: BatchHeader) -> bytes:
    """Kafka's empty batch: the header alone, kept to preserve a producer's sequence or epoch (or
    the round's last offset)."""
    attrs = h.attributes & (TIMESTAMP_TYPE_BIT | TRANSACTIONAL_BIT | CONTROL_BIT)
    buf = bytearray(BATCH_HEADER_SIZE)
    _HEADER.pack_into(buf, 0, h.base_offset, MIN_BATCH_LENGTH, h.partition_leader_epoch, 2, 0, attrs,
                      h.last_offset_delta, -1, h.max_timestamp, h.producer_id, h.producer_epoch, h.base_sequence, 0)
    _U32.pack_into(buf, 17, crc32c(memoryview(buf)[21:]))
    return bytes(buf)


class _Throttle:
    """log.cleaner.io.max.bytes.per.second over reads and writes together, as Kafka's Throttler."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self._start = time.monotonic()
        self._bytes = 0

    def __call__(self, n: int) -> None:
        if self.rate == float("inf") or self.rate <= 0:
            return
        self._bytes += n
        elapsed = time.monotonic() - self._start
        ahead = self._bytes / self.rate - elapsed
        if ahead > 0.01:
            time.sleep(ahead)
        if elapsed > 1.0:
            self._start = time.monotonic()
            self._bytes = 0


class CleanedWriter:
    """A cleaned segment being written: its log bytes, and its indexes derived by the rule the
    log's own appends use (so a rebuilt index comes out the same)."""

    def __init__(self, directory: str, base_offset: int, task: CleanTask, throttle: _Throttle) -> None:
        self.base = base_offset
        self.stem = os.path.join(directory, segment_name(base_offset))
        self.task = task
        self.throttle = throttle
        for ext in SEGMENT_EXTENSIONS:
            try:
                os.unlink(self.stem + ext + CLEANED_SUFFIX)  # a leftover of a cleaning that died
            except FileNotFoundError:
                pass
        self.fd = os.open(self.stem + ".log" + CLEANED_SUFFIX, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self.pending = bytearray()
        self.size = 0
        self.next_offset = base_offset
        self.max_ts = -1
        self.off_max = -1
        self.idx = bytearray()
        self.tidx = bytearray()
        self.idx_n = self.tidx_n = 0
        self.last_tidx_ts = -1
        self.last_entry = 0
        self.cap_i = task.segment_index_bytes // 8
        self.cap_t = task.segment_index_bytes // 12

    def append(self, data: bytes | memoryview, last_offset: int, max_ts: int, log_append: bool, base: int) -> None:
        pos = self.size
        if max_ts > self.max_ts:
            self.max_ts = max_ts
            self.off_max = base if log_append else last_offset
        if pos - self.last_entry > self.task.index_interval_bytes and self.idx_n < self.cap_i:
            self.idx += _IDX.pack(last_offset - self.base, pos)
            self.idx_n += 1
            self.last_entry = pos
            if (self.tidx_n == 0 or self.max_ts > self.last_tidx_ts) and self.tidx_n < self.cap_t:
                self.tidx += _TIDX.pack(self.max_ts, self.off_max - self.base)
                self.tidx_n += 1
                self.last_tidx_ts = self.max_ts
        self.pending += data
        self.size += len(data)
        self.next_offset = last_offset + 1
        if len(self.pending) >= _WRITE_CHUNK:
            self._drain()
            crash_point("cleaner-writing")

    def _drain(self) -> None:
        if self.pending:
            write_all(self.fd, self.pending)
            self.throttle(len(self.pending))
            self.pending.clear()

    def finish(self, aborted: list[AbortedTxnEntry], mtime_ns: int) -> None:
        """Seal (the last time-index entry), write the indexes, fsync everything."""
        self._drain()
        crash_point("cleaner-writing")
        if self.max_ts >= 0 and (self.tidx_n == 0 or self.max_ts > self.last_tidx_ts):
            self.tidx += _TIDX.pack(self.max_ts, self.off_max - self.base)
        try:
            os.fsync(self.fd)
        finally:
            os.close(self.fd)
        os.utime(self.stem + ".log" + CLEANED_SUFFIX, ns=(mtime_ns, mtime_ns))
        files = [(".index", bytes(self.idx)), (".timeindex", bytes(self.tidx))]
        if aborted:
            files.append((".txnindex", txn_index.encode(aborted)))
        for ext, data in files:
            fd = os.open(self.stem + ext + CLEANED_SUFFIX, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)

    def discard(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass
        remove_cleaned(os.path.dirname(self.stem), self.base)


def remove_cleaned(directory: str, base_offset: int) -> None:
    stem = os.path.join(directory, segment_name(base_offset))
    for ext in SEGMENT_EXTENSIONS:
        for suffix in (CLEANED_SUFFIX, SWAP_SUFFIX):
            try:
                os.unlink(stem + ext + suffix)
            except FileNotFoundError:
                pass


# -- the round ----------------------------------------------------------------------------------

def group_segments(segments: list[SourceSegment], end_offset: int, segment_bytes: int, index_bytes: int,
                   first_uncleanable: int) -> list[list[SourceSegment]]:
    """Kafka's groupSegmentsBySize: consecutive segments below `end_offset` whose logs fit one
    segment, whose indexes fit one index, and whose offsets fit one segment's relative offsets."""
    todo = [s for s in segments if s.base_offset < end_offset]
    groups: list[list[SourceSegment]] = []
    i = 0
    while i < len(todo):
        group = [todo[i]]
        log_size = todo[i].size
        idx_size = todo[i].index_entries * 8
        tidx_size = todo[i].time_index_entries * 12
        i += 1
        while i < len(todo):
            nxt = todo[i]
            last_of_next = todo[i + 1].base_offset - 1 if i + 1 < len(todo) else first_uncleanable - 1
            if not (log_size + nxt.size <= segment_bytes and idx_size + nxt.index_entries * 8 <= index_bytes
                    and tidx_size + nxt.time_index_entries * 12 <= index_bytes
                    and (nxt.size == 0 or last_of_next - group[0].base_offset <= _INT32_MAX)):
                break
            group.append(nxt)
            log_size += nxt.size
            idx_size += nxt.index_entries * 8
            tidx_size += nxt.time_index_entries * 12
            i += 1
        groups.append(group)
    return groups


def _open_segment(directory: str, base: int) -> int:
    try:
        return os.open(os.path.join(directory, segment_name(base) + ".log"), os.O_RDONLY)
    except FileNotFoundError:
        raise CleaningAborted(f"segment {base} of {directory} is gone") from None


def build_offset_map(task: CleanTask, offset_map: OffsetMap, stats: CleanStats, throttle: _Throttle) -> None:
    start, end = task.first_dirty_offset, task.first_uncleanable_offset
    segs = task.segments
    dirty = [(i, s) for i, s in enumerate(segs)
             if s.base_offset < end and (segs[i + 1].base_offset if i + 1 < len(segs) else end) > start]
    txns = TransactionTracker()
    txns.add_aborted(aborted_overlapping(task.aborted, start, end))
    for i, seg in dirty:
        next_start = task.segments[i + 1].base_offset if i + 1 < len(task.segments) else end
        fd = _open_segment(task.directory, seg.base_offset)
        try:
            for batch, h in _batches(fd, 0, seg.size):
                if task.stop_check is not None and task.stop_check():
                    raise CleaningAborted("stopped")
                stats.map_bytes_read += h.size
                throttle(h.size)
                if h.last_offset < start:
                    continue
                if h.attributes & CONTROL_BIT:
                    txns.on_control_batch(h, _control_type(batch, h))
                elif not txns.on_batch(h):
                    _body, recs = _records(batch, h)
                    base = h.base_offset
                    for rec in recs:
                        key = rec[5]
                        offset = base + rec[4]
                        if key is not None and offset >= start:
                            if offset_map.full_for(key):
                                if not len(offset_map):
                                    raise ValueError("the offset map is too small to hold a single key, so log "
                                                     "cleaning will never make progress: raise "
                                                     "log.cleaner.dedupe.buffer.size or lower log.cleaner.threads")
                                return  # full: the round ends at the last whole batch mapped
                            offset_map.put(key, offset)
                if h.last_offset > offset_map.latest_offset:
                    offset_map.latest_offset = h.last_offset
        finally:
            os.close(fd)
        # Offsets the segment does not hold (a gap at its end) are clean too.
        offset_map.latest_offset = max(offset_map.latest_offset, next_start - 1)


def clean(task: CleanTask) -> CleanResult:
    """One cleaning round of one log (see the module docstring); raises CleaningAborted when the
    log's files went away or the task was told to stop, leaving no .cleaned file behind."""
    started = time.monotonic()
    cpu_started = time.process_time()
    stats = CleanStats()
    throttle = _Throttle(task.max_io_bytes_per_second)
    offset_map = OffsetMap(int(task.map_memory_bytes * task.map_load_factor))
    build_offset_map(task, offset_map, stats, throttle)
    stats.map_keys = len(offset_map)
    stats.map_bytes = offset_map.bytes_used
    end_offset = offset_map.latest_offset + 1
    result = CleanResult(end_offset, stats=stats)
    if not task.segments or end_offset <= task.segments[0].base_offset:
        return result
    txns = TransactionTracker()
    groups = group_segments(task.segments, end_offset, task.segment_bytes, task.segment_index_bytes,
                            task.first_uncleanable_offset)
    index_of = {s.base_offset: i for i, s in enumerate(task.segments)}
    for group in groups:
        writer = CleanedWriter(task.directory, group[0].base_offset, task, throttle)
        txns.retained_aborts = []
        try:
            for seg in group:
                i = index_of[seg.base_offset]
                upper = task.segments[i + 1].base_offset if i + 1 < len(task.segments) else task.first_uncleanable_offset
                txns.add_aborted(aborted_overlapping(task.aborted, seg.base_offset, upper))
                _clean_into(task, seg, writer, offset_map, txns, stats, throttle)
            writer.finish(txns.retained_aborts, group[-1].mtime_ns)
        except BaseException:
            writer.discard()
            raise
        stats.bytes_written += writer.size
        result.cleaned.append(CleanedSegment(group[0].base_offset, [s.base_offset for s in group], writer.size,
                                             writer.next_offset if writer.size else group[0].base_offset,
                                             writer.max_ts, writer.off_max))
    stats.seconds = time.monotonic() - started
    stats.cpu_seconds = time.process_time() - cpu_started
    return result


def _clean_into(task: CleanTask, seg: SourceSegment, writer: CleanedWriter, offset_map: OffsetMap,
                txns: TransactionTracker, stats: CleanStats, throttle: _Throttle) -> None:
    now = task.now_ms
    latest = offset_map.latest_offset
    active = task.active_producers
    round_end = task.first_uncleanable_offset
    fd = _open_segment(task.directory, seg.base_offset)
    try:
        for batch, h in _batches(fd, 0, seg.size):
            if task.stop_check is not None and task.stop_check():
                raise CleaningAborted("stopped")
            stats.bytes_read += h.size
            throttle(h.size)
            attrs = h.attributes
            control = bool(attrs & CONTROL_BIT)
            has_horizon = bool(attrs & DELETE_HORIZON_BIT)
            control_type = _control_type(batch, h) if control else None
            can_discard = txns.on_control_batch(h, control_type) if control else txns.on_batch(h)
            if control:
                discard_records = can_discard and has_horizon and h.base_timestamp <= now
            else:
                discard_records = can_discard
            last_of_producer = False
            if h.producer_id >= 0:
                last = active.get(h.producer_id)
                if last is not None:
                    if last[0] >= 0:
                        last_of_producer = h.last_offset == last[0]
                    else:
                        last_of_producer = control and h.producer_epoch == last[1]
            if last_of_producer or h.next_offset == round_end:
                retain_empty = True
            elif discard_records:
                continue  # DELETE: the whole batch goes
            else:
                retain_empty = False
            marker_for_empty_txn = can_discard and control
            kept: list[Record] = []
            tombstones = False
            whole = True
            body = b""
            if discard_records:
                whole = h.record_count == 0
                stats.records_read += h.record_count
            elif control:
                if h.record_count:
                    body, kept = _records(batch, h)
                stats.records_read += len(kept)
            else:
                body, recs = _records(batch, h)
                retain_deletes = not has_horizon or now < h.base_timestamp
                base = h.base_offset
                for rec in recs:
                    offset = base + rec[4]
                    key = rec[5]
                    if offset > latest:
                        keep = True
                    elif key is None:
                        keep = False  # Kafka drops keyless records from a compacted log
                    else:
                        keep = offset >= offset_map.get(key) and (not rec[6] or retain_deletes)
                    if keep:
                        kept.append(rec)
                        if rec[6]:
                            tombstones = True
                    else:
                        whole = False
                stats.records_read += len(recs)
            if kept:
                stats.records_retained += len(kept)
                need_horizon = (tombstones or marker_for_empty_txn) and not has_horizon
                if whole and not need_horizon:
                    data: bytes | memoryview = batch
                    stats.batches_copied += 1
                else:
                    horizon = now + task.delete_retention_ms if need_horizon else (
                        h.base_timestamp if has_horizon else None)
                    data = rebuild_batch(batch, h, body, kept, horizon)
                    stats.batches_rewritten += 1
                writer.append(data, h.last_offset, read_header(data, 0).max_timestamp,
                              bool(attrs & TIMESTAMP_TYPE_BIT), h.base_offset)
            elif retain_empty:
                data = empty_batch(h)
                stats.batches_rewritten += 1
                writer.append(data, h.last_offset, h.max_timestamp, bool(attrs & TIMESTAMP_TYPE_BIT), h.base_offset)
    finally:
        os.close(fd)


# -- the worker process -------------------------------------------------------------------------

_parent_pid = 0


def worker_init(broker_pid: int) -> None:
    """In a cleaner process: run at a lower priority than the broker, and die with the broker (a
    kill -9 of the broker must not leave a cleaner writing into a directory the next broker
    recovers, nor an idle one behind). `broker_pid` comes from the broker: a broker killed while
    this process was still starting is seen here, where the parent pid would already be init's."""
    global _parent_pid
    _parent_pid = broker_pid
    try:
        # Background work: on a busy machine the broker's event loop gets the CPU first.
        os.nice(10)
    except OSError:
        pass
    try:
        import ctypes
        import signal
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the parent check below still stops the work
    if os.getppid() != _parent_pid:  # the broker died before the signal was asked for
        os._exit(1)


def _parent_gone() -> bool:
    if _parent_pid and os.getppid() != _parent_pid:
        os._exit(1)
    return False


def run_in_worker(task: CleanTask) -> CleanResult:
    """The entry point the broker's cleaner processes run."""
    task.stop_check = _parent_gone
    try:
        return clean(task)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise CleaningAborted(str(exc)) from None
        raise


__all__ = ["CLEANED_SUFFIX", "CleanResult", "CleanStats", "CleanTask", "CleanedSegment", "CleaningAborted",
           "DELETED_SUFFIX", "OffsetMap", "SWAP_SUFFIX", "SourceSegment", "aborted_overlapping", "clean", "crash_point",
           "empty_batch", "group_segments", "rebuild_batch", "remove_cleaned", "run_in_worker", "worker_init"]
