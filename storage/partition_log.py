"""One topic-partition's log: a directory of segments in Kafka's layout, appended to on the event
loop thread and fsynced from a worker thread.

Threading: append, read, retention, delete_records, close and delete run on one thread (the
event loop), which is also the only one that opens and closes the segments' cached descriptors.
flush() may run concurrently on another thread. `_lock` guards the segment list and the counters
a flush reads; a flush fsyncs through descriptors of its own, so a segment removed or a descriptor
closed meanwhile takes nothing from under it.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sharebroker.protocol.errors import ErrorCode, KafkaError
from sharebroker.protocol.record_batch import (
    BatchHeader,
    InvalidRecordError,
    assign_offsets,
    record_timestamps,
)
from sharebroker.storage.file_cache import FileCache, default_cache, with_descriptor
from sharebroker.storage.files import fsync_dir
from sharebroker.storage.log_config import LogConfig
from sharebroker.storage import txn_index
from sharebroker.storage.cleaner import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    SEGMENT_EXTENSIONS,
    SWAP_SUFFIX,
    CleanedSegment,
    SourceSegment,
    crash_point,
    remove_cleaned,
)
from sharebroker.storage.segment import CorruptLogError, LogSegment, TornBatch, segment_name, walk_headers

_INT32_MAX = 0x7FFFFFFF
_SCRATCH_SUFFIXES = (".deleted", ".tmp", ".cleaned", ".swap")


class OffsetOutOfRange(KafkaError):
    """The offset is outside [log start offset, log end offset]."""

    def __init__(self, message: str, *, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(ErrorCode.offset_out_of_range, message)
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class LogClosedError(KafkaError):
    """The log was closed or deleted (e.g. by DeleteTopics) while someone still held it."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.unknown_topic_or_partition, message)


@dataclass(slots=True)
class AppendResult:
    first_offset: int
    last_offset: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    rolled: bool = False  # a new segment was started: the old one is worth an fsync soon


@dataclass(slots=True)
class ReadResult:
    records: bytes  # whole batches, verbatim
    first_offset: int  # base offset of the first batch returned (-1 when empty)
    next_offset: int  # offset after the last batch returned (the fetch offset when empty)
    log_start_offset: int
    high_watermark: int


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _stem_offset(name: str) -> int | None:
    stem = name[:20]
    return int(stem) if len(name) > 20 and name[20] == "." and stem.isdigit() else None


def _finish_interrupted_swaps(path: Path, names: list[str], report: list[str]) -> list[str]:
    """Kafka's LogLoader passes over the cleaner's files after a crash: `.deleted` files go; a
    segment still `.cleaned` (its swap had not begun: the segments it was to replace are intact) goes
    with any of its files already renamed `.swap`; a `.log.swap` (its swap had begun, and it and its
    indexes are complete) replaces the segments within its offsets, which had not all been renamed
    away yet, and its files lose the suffix. Returns the directory's names afterwards."""
    if not any(n.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX)) for n in names):
        return names
    unfinished = {_stem_offset(n) for n in names if n.endswith(".log" + CLEANED_SUFFIX)}
    for name in names:
        if (name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX))
                or (name.endswith(SWAP_SUFFIX) and _stem_offset(name) in unfinished)):
            (path / name).unlink()
            report.append(f"removed leftover file {name}")
    names = with_descriptor(lambda: os.listdir(path))
    swaps = sorted(n for n in names if n.endswith(".log" + SWAP_SUFFIX) and _stem_offset(n) is not None)
    for swap in swaps:
        base = _stem_offset(swap)
        assert base is not None
        end = base
        fd = os.open(path / swap, os.O_RDONLY)
        try:
            for _pos, _b, _size, last, _mts, _attrs in walk_headers(fd, 0, os.fstat(fd).st_size):
                end = last + 1
        except TornBatch:
            pass  # fsynced before its rename: cannot be torn; keep what parses
        finally:
            os.close(fd)
        end = max(end, base + 1)
        for name in names:
            off = _stem_offset(name)
            if off is not None and base <= off < end and not name.endswith(SWAP_SUFFIX) \
                    and name[20:] in SEGMENT_EXTENSIONS:
                (path / name).unlink(missing_ok=True)
                report.append(f"deleted {name}, replaced by the cleaned segment {swap} of an interrupted swap")
    for name in names:
        if name.endswith(SWAP_SUFFIX):
            os.replace(path / name, path / name[:-len(SWAP_SUFFIX)])
            report.append(f"completed the swap of {name}")
    return with_descriptor(lambda: os.listdir(path))


def _corrupt(seg: LogSegment, torn: TornBatch, offset: int) -> CorruptLogError:
    return CorruptLogError(f"{seg.log_path}: {torn}", path=str(seg.log_path), position=torn.position,
                           reason=torn.reason, offset=offset)


class PartitionLog:
    """The log of one topic-partition. Use `PartitionLog.open` (or LogManager)."""

    # A broker may hold 100,000 of these: no per-instance dict.
    __slots__ = ("path", "config", "files", "topic_id", "_segments", "_bases", "log_end_offset", "log_start_offset",
                 "recovery_point", "last_flush_ms", "recovery_report", "_lock", "_flush_lock", "_dir_dirty", "_closed",
                 "on_log_start_offset_change")

    def __init__(self, path: Path, config: LogConfig, segments: list[LogSegment], *, log_start_offset: int,
                 recovery_point: int, now_ms: int, report: list[str], files: FileCache) -> None:
        self.path = path
        self.config = config
        self.files = files
        self.topic_id: str | None = None  # from partition.metadata, set by LogManager
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self.log_end_offset = segments[-1].next_offset
        self.log_start_offset = min(max(log_start_offset, segments[0].base_offset), self.log_end_offset)
        self.recovery_point = min(recovery_point, self.log_end_offset)
        self.last_flush_ms = now_ms
        self.recovery_report = report
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._dir_dirty = False
        self._closed = False
        # Called after delete_records moved the log start offset (LogManager persists it).
        self.on_log_start_offset_change: Callable[[PartitionLog], None] | None = None

    # -- opening and recovery -------------------------------------------------------------------

    @classmethod
    def open(cls, path: Path, config: LogConfig, *, recovery_point: int, clean_shutdown: bool, now_ms: int,
             log_start_offset: int = 0, files: FileCache | None = None) -> PartitionLog:
        """Load the segments in `path` (created if missing). After an unclean shutdown every batch
        from the offset-index entry at or below `recovery_point` to the end of the log is checked
        (header and CRC); the log is cut at the first torn or corrupt batch and later segments are
        dropped. Segments below the recovery point, and all segments after a clean shutdown, only
        get their tail (from their last index entry) walked to learn where they end. Missing or
        damaged indexes are rebuilt from the batch headers. What was done is in recovery_report.
        Descriptors come from `files` (the process's default cache if None)."""
        files = default_cache() if files is None else files
        report: list[str] = []
        try:
            names = with_descriptor(lambda: os.listdir(path))
        except FileNotFoundError:
            path.mkdir(parents=True, exist_ok=True)
            names = []
        names = _finish_interrupted_swaps(path, names, report)
        bases = sorted(int(n[:20]) for n in names if n.endswith(".log") and len(n) == 24 and n[:20].isdigit())
        known = set(bases)
        for name in names:
            stem, _, ext = name.partition(".")
            orphan = (ext in ("index", "timeindex", "txnindex") and len(stem) == 20 and stem.isdigit()
                      and int(stem) not in known)
            if orphan or name.endswith(_SCRATCH_SUFFIXES):
                (path / name).unlink()
                report.append(f"removed leftover file {name}")
        segments: list[LogSegment] = []
        try:
            for base in bases:
                segments.append(LogSegment.open_existing(path, base, now_ms, files))
            first_recovered = len(segments)
            if not clean_shutdown and segments:
                first_recovered = max(bisect_right(bases, recovery_point) - 1, 0)
            i = 0
            while i < len(segments):
                seg = segments[i]
                damaged_at_load = bool(seg.index_damage)
                if i >= first_recovered:
                    start = seg.lookup(recovery_point) if i == first_recovered else 0
                    # A damaged time index is re-derived from the segment start; CRCs still only
                    # from the recovery point on.
                    note = seg.scan(0 if seg.time_index_damaged else start, config, crc_from=start)
                    if note:
                        report.append(note)
                        for later in segments[i + 1:]:
                            report.append(f"deleted segment {later.log_path.name} ({later.size} bytes) that followed "
                                          f"the corrupt batch")
                            later.close_fds()
                            later.unlink()
                        del segments[i + 1:]
                else:
                    if seg.time_index_damaged:
                        note = seg.scan(0, config, crc_from=None)
                    else:
                        note = seg.scan(seg.last_index_position, config, crc_from=None,
                                        keep_time_index=not damaged_at_load)
                    if note:
                        report.append(note)
                # Damage found while loading or while walking from the last entry; already repaired.
                for damage in seg.index_damage:
                    report.append(f"{damage}; rebuilt it from the log")
                if not seg.time_index_consistent():
                    report.append(f"{seg.timeindex_path.name} names offsets past the log; rebuilt it from the log")
                    seg.scan(0, config, crc_from=None)
                if i < len(segments) - 1:
                    seg.seal()
                i += 1
            with_txn_index = {int(n[:20]) for n in names if n.endswith(".txnindex") and n[:20].isdigit()}
            for seg in segments:
                if seg.base_offset not in with_txn_index:
                    continue
                # Entries for markers the log no longer holds (cut by recovery) go, as does a torn entry.
                note = txn_index.truncate_to(seg.txnindex_path, seg.next_offset)
                if note:
                    report.append(note)
                seg.has_txnindex = seg.txnindex_path.exists()
            for a, b in zip(segments, segments[1:]):
                if a.next_offset > b.base_offset:
                    report.append(f"segment {a.log_path.name} ends at offset {a.next_offset}, past the base "
                                  f"offset of the next segment {b.base_offset}")
            dir_dirty = bool(report)  # files were removed or cut: make that durable at the next flush
            if not segments:
                segments.append(LogSegment.create(path, max(log_start_offset, 0), now_ms, files))
                dir_dirty = True
            segments[-1].release_index()  # the active segment's arrays go if it has no entries
        except BaseException:
            for seg in segments:
                seg.close_fds()
            raise
        log = cls(path, config, segments, log_start_offset=log_start_offset,
                  recovery_point=recovery_point, now_ms=now_ms, report=report, files=files)
        if clean_shutdown:
            log.recovery_point = log.log_end_offset
        log._dir_dirty = dir_dirty
        return log

    # -- state ----------------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self.log_end_offset  # single node: everything appended is committed

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def unflushed_messages(self) -> int:
        """Offsets appended since the last flush (Kafka: log end offset - recovery point)."""
        return self.log_end_offset - self.recovery_point

    @property
    def closed(self) -> bool:
        return self._closed

    def earliest_offset(self) -> int:
        return self.log_start_offset

    # -- append ---------------------------------------------------------------------------------

    def append(self, buf: bytearray | memoryview, headers: Sequence[BatchHeader], *, leader_epoch: int, now_ms: int,
               log_append_time: bool = False) -> AppendResult:
        """Assign offsets to the batches in `buf` (parsed into `headers`, which must cover it
        exactly) and append it with one write, rolling the segment first when segment.bytes,
        segment.ms, the index size or relative offsets demand it (Kafka's rules, on the whole
        append). segment.ms counts from the first batch's max timestamp in the segment, compared
        to the largest timestamp being appended, or from the segment's creation (or load) time if
        that batch has no timestamp, as Kafka does."""
        if not headers:
            raise ValueError("append needs at least one batch")
        total = len(buf)
        tail = headers[-1]
        if headers[0].position != 0 or tail.position + tail.size != total:
            raise ValueError("headers do not cover the buffer exactly")
        config = self.config
        if len(headers) == 1:
            count = tail.last_offset_delta + 1
            max_ts = tail.max_timestamp
        else:
            count = 0
            max_ts = -1
            for h in headers:
                count += h.last_offset_delta + 1
                if h.max_timestamp > max_ts:
                    max_ts = h.max_timestamp
        if log_append_time:
            max_ts = now_ms
        with self._lock:
            if self._closed:
                raise LogClosedError(f"log {self.path.name} is closed")
            first = self.log_end_offset
            last = first + count - 1
            seg = self._segments[-1]
            rolled = False
            if seg.size and (seg.size > config.segment_bytes - total
                             or self._segment_expired(seg, now_ms, max_ts)
                             or seg.index_full(config)
                             or last - seg.base_offset > _INT32_MAX):
                seg = self._roll(now_ms)
                rolled = True
            assign_offsets(buf, headers, first, leader_epoch, log_append_time_ms=now_ms if log_append_time else None)
            seg.append(buf, headers, config)
            self.log_end_offset = last + 1
            return AppendResult(first, last, now_ms if log_append_time else -1, self.log_start_offset, rolled)

    def _segment_expired(self, seg: LogSegment, now_ms: int, max_ts: int) -> bool:
        if seg.rolling_base_ts >= 0:
            return max_ts - seg.rolling_base_ts > self.config.segment_ms
        return now_ms - seg.created_ms > self.config.segment_ms

    def _roll(self, now_ms: int) -> LogSegment:
        """Start a new active segment at the log end offset (caller holds the lock)."""
        self._segments[-1].seal()
        seg = LogSegment.create(self.path, self.log_end_offset, now_ms, self.files)
        self._segments.append(seg)
        self._bases.append(seg.base_offset)
        self._dir_dirty = True
        return seg

    def roll(self, now_ms: int) -> None:
        """Start a new segment now unless the active one is empty."""
        with self._lock:
            if self._segments[-1].size:
                self._roll(now_ms)

    # -- read -----------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True, through_offset: int | None = None,
             batches: list[tuple[int, int, int]] | None = None) -> ReadResult:
        """Whole batches from the one containing `offset` (which may start before it), at most
        `max_bytes` in total (but the first batch whole even if larger, with min_one_batch), each
        ending before `max_offset` (default: the high watermark), continuing across segments.
        With `through_offset`, the read ends with the batch that holds that offset: a reader that
        needs a few records never walks (and copies) a megabyte of small batches. `batches` gets
        (base offset, last offset, size) of each batch read, in order, from the headers the read
        walks anyway (a share fetch's acquisition needs them and nothing else)."""
        if self._closed:
            raise LogClosedError(f"log {self.path.name} is closed")
        leo = self.log_end_offset
        lso = self.log_start_offset
        if offset < lso or offset > leo:
            raise OffsetOutOfRange(f"Offset {offset} is out of range for {self.path.name}: log start offset {lso}, "
                                   f"log end offset {leo}.", offset=offset, log_start_offset=lso, log_end_offset=leo)
        limit = leo if max_offset is None or max_offset > leo else max_offset
        hw = self.high_watermark
        if offset >= limit:
            return ReadResult(b"", -1, offset, lso, hw)
        segments = self._segments
        i = max(bisect_right(self._bases, offset) - 1, 0)
        parts: list[bytes] = []
        total = 0
        first_offset = -1
        next_offset = offset
        target = offset
        done = False
        while i < len(segments) and not done:
            seg = segments[i]
            start = end = -1
            block: list[tuple[int, bytes]] = []  # (position, bytes) of the walk's last block read
            walk = seg.walk(seg.lookup(target), block)
            try:
                for pos, base, size, last, _mts, _attrs in walk:
                    if last < target:
                        continue
                    if last >= limit or (total + size > max_bytes and not (min_one_batch and total == 0)):
                        done = True
                        break
                    if start < 0:
                        start = pos
                        if first_offset < 0:
                            first_offset = base
                    end = pos + size
                    total += size
                    next_offset = last + 1
                    if batches is not None:
                        batches.append((base, last, size))
                    if total >= max_bytes or next_offset >= limit or (
                            through_offset is not None and last >= through_offset):
                        done = True
                        break
            except TornBatch as torn:
                raise _corrupt(seg, torn, target) from None
            if start >= 0:
                seg.remember_read_end(next_offset, end)
                at, got = block[0] if block else (-1, b"")
                if 0 <= at <= start and end <= at + len(got):
                    data = got[start - at:end - at]  # read with the headers already
                else:
                    data = os.pread(seg.log_fd(), end - start, start)
                if len(data) != end - start:
                    raise CorruptLogError(f"short read from {seg.log_path} at position {start}",
                                          path=str(seg.log_path), position=start, reason="short read",
                                          offset=target)
                parts.append(data)
            i += 1
            target = next_offset
        records = parts[0] if len(parts) == 1 else b"".join(parts)
        return ReadResult(records, first_offset, next_offset, lso, hw)

    # -- timestamps -----------------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """ListOffsets by timestamp, as Kafka answers it: (offset, timestamp) of the first record at
        or after the log start offset whose timestamp is >= `timestamp_ms`, or None. The time index
        and batch headers find the first batch whose max timestamp qualifies; only that batch's
        records are then decoded (decompressed if need be) to name the record inside it. If its
        codec's library is not installed, the answer is the batch (base offset, max timestamp)."""
        lso = self.log_start_offset
        for seg in list(self._segments):
            if seg.max_timestamp < timestamp_ms or seg.next_offset <= lso:
                continue
            try:
                for pos, base, size, last, mts, _attrs in seg.walk(seg.time_lookup(timestamp_ms, lso)):
                    if mts < timestamp_ms or last < lso:
                        continue
                    records = self._record_timestamps(seg, pos, size)
                    if records is None:
                        return max(base, lso), mts
                    for offset, ts in records:
                        if ts >= timestamp_ms and offset >= lso:
                            return offset, ts
            except TornBatch as torn:
                raise _corrupt(seg, torn, -1) from None
        return None

    def max_timestamp(self) -> tuple[int, int]:
        """ListOffsets MAX_TIMESTAMP: (largest timestamp, offset of the first record carrying it),
        or (-1, -1) if the log holds no timestamps. Segments track their largest timestamp and the
        batch holding it; that one batch is decoded to name the record (without its codec's
        library: the batch's last offset, or base offset for LogAppendTime)."""
        best: LogSegment | None = None
        for seg in list(self._segments):
            if seg.max_timestamp > (best.max_timestamp if best else -1):
                best = seg
        if best is None:
            return -1, -1
        ts, off = best.max_timestamp, best.offset_of_max_timestamp
        try:
            for pos, base, size, last, mts, _attrs in best.walk(best.lookup(off)):
                if base <= off <= last:
                    if mts == ts:
                        for offset, t in self._record_timestamps(best, pos, size) or ():
                            if t == ts:
                                return ts, offset
                    break
        except TornBatch as torn:
            raise _corrupt(best, torn, -1) from None
        return ts, off

    @staticmethod
    def _record_timestamps(seg: LogSegment, pos: int, size: int) -> list[tuple[int, int]] | None:
        try:
            return record_timestamps(os.pread(seg.log_fd(), size, pos))
        except InvalidRecordError:
            return None  # records we cannot parse: answer at batch level rather than fail the request

    # -- deletion -------------------------------------------------------------------------------

    def delete_records(self, before_offset: int) -> int:
        """DeleteRecords: raise the log start offset to `before_offset` (-1 = high watermark),
        delete the segments wholly below it, and report the new start offset to the persistence
        hook. Returns the new log start offset."""
        hw = self.high_watermark
        if before_offset == -1:
            before_offset = hw
        if before_offset < 0 or before_offset > hw:
            raise OffsetOutOfRange(f"Cannot increment the log start offset to {before_offset} of {self.path.name}: "
                                   f"the high watermark is {hw}.", offset=before_offset,
                                   log_start_offset=self.log_start_offset, log_end_offset=self.log_end_offset)
        if before_offset <= self.log_start_offset:
            return self.log_start_offset
        with self._lock:
            self.log_start_offset = before_offset
            n = 0
            while n + 1 < len(self._segments) and self._segments[n + 1].base_offset <= before_offset:
                n += 1
            if n:
                self._delete_prefix(n, _wall_ms())
        if self.on_log_start_offset_change is not None:
            self.on_log_start_offset_change(self)
        return self.log_start_offset

    def apply_retention(self, now_ms: int) -> list[str]:
        """Kafka's retention with cleanup.policy=delete: drop the oldest segments whose largest
        timestamp (file mtime when none) is more than retention.ms old, then the oldest while the
        log stays at or above retention.bytes without them, then (whatever the policy) those wholly
        below the log start offset. Never an empty active segment; if every segment goes, a new empty one is rolled
        first. Returns what was deleted, for logging."""
        if self._closed:
            return []
        notes: list[str] = []
        config = self.config
        if config.deletes and config.retention_ms >= 0:
            n = self._deletable(lambda seg, nxt: now_ms - self.largest_timestamp(seg) > config.retention_ms)
            if n:
                notes += self._delete_segments(n, now_ms, f"retention.ms {config.retention_ms} breached (largest "
                                                          f"timestamp older than {now_ms - config.retention_ms})")
        if config.deletes and config.retention_bytes >= 0:
            excess = self.size_bytes - config.retention_bytes
            if excess >= 0:
                def over(seg: LogSegment, nxt: LogSegment | None) -> bool:
                    nonlocal excess
                    if excess - seg.size >= 0:
                        excess -= seg.size
                        return True
                    return False
                n = self._deletable(over)
                if n:
                    notes += self._delete_segments(n, now_ms, f"retention.bytes {config.retention_bytes} breached")
        n = self._deletable(lambda seg, nxt: nxt is not None and nxt.base_offset <= self.log_start_offset)
        if n:
            notes += self._delete_segments(n, now_ms, f"below the log start offset {self.log_start_offset}")
        return notes

    def largest_timestamp(self, seg: LogSegment) -> int:
        """Kafka's LogSegment.largestTimestamp: the largest record timestamp, else the file's mtime."""
        if seg.max_timestamp >= 0:
            return seg.max_timestamp
        return os.stat(seg.log_path).st_mtime_ns // 1_000_000

    def _deletable(self, predicate: Callable[[LogSegment, LogSegment | None], bool]) -> int:
        """How many leading segments satisfy `predicate`, stopping at the first that does not."""
        segs = self._segments
        n = 0
        while n < len(segs):
            seg = segs[n]
            nxt = segs[n + 1] if n + 1 < len(segs) else None
            if nxt is None and seg.size == 0:
                break
            if not predicate(seg, nxt):
                break
            n += 1
        return n

    def _delete_segments(self, n: int, now_ms: int, reason: str) -> list[str]:
        with self._lock:
            doomed = self._segments[:n]
            notes = [f"deleted segment {s.log_path.name} (offsets {s.base_offset}-{s.next_offset - 1}, {s.size} "
                     f"bytes): {reason}" for s in doomed]
            self._delete_prefix(n, now_ms)
            notes[-1] += f"; log start offset now {self.log_start_offset}"
            return notes

    def _delete_prefix(self, n: int, now_ms: int) -> None:
        """Remove the first n segments (caller holds the lock); roll first if that is all of them."""
        if n >= len(self._segments):
            self._roll(now_ms)
        doomed = self._segments[:n]
        del self._segments[:n]
        del self._bases[:n]
        for seg in doomed:
            seg.close_fds()
            seg.unlink()
        self._dir_dirty = True
        self.log_start_offset = max(self.log_start_offset, self._segments[0].base_offset)

    # -- compaction -----------------------------------------------------------------------------

    def cleaning_sources(self, before_offset: int) -> list[SourceSegment]:
        """The non-active segments that start below `before_offset`, for a cleaning round."""
        with self._lock:
            segs = self._segments[:-1]
        out = []
        for seg in segs:
            if seg.base_offset >= before_offset:
                break
            try:
                mtime = os.stat(seg.log_path).st_mtime_ns
            except FileNotFoundError:
                mtime = time.time_ns()
            out.append(SourceSegment(seg.base_offset, seg.size, seg.index_entries, seg.time_index_entries, mtime))
        return out

    def replace_segments(self, cleaned: CleanedSegment, now_ms: int) -> bool:
        """Swap a cleaned segment (its `.cleaned` files, fsynced) in for the segments it was made
        from, as Kafka's replaceSegments: its files are renamed `.swap` (indexes first, the log
        last: a `.log.swap` means the whole segment is there), the old segments' files `.deleted`,
        then the new files lose the suffix (the log first). A crash anywhere in between is finished
        or undone by `open`. Returns False, removing the cleaned files, when the old segments are no
        longer all in the log (retention or DeleteRecords removed some meanwhile, or it was closed)."""
        directory = str(self.path)
        with self._lock:
            i = bisect_right(self._bases, cleaned.base_offset) - 1
            olds = self._segments[i:i + len(cleaned.replaces)] if i >= 0 else []
            if (self._closed or [s.base_offset for s in olds] != cleaned.replaces
                    or i + len(olds) >= len(self._segments)):
                remove_cleaned(directory, cleaned.base_offset)
                return False
            stem = os.path.join(directory, segment_name(cleaned.base_offset))
            crash_point("cleaner-cleaned")
            for ext in (".txnindex", ".timeindex", ".index", ".log"):
                try:
                    os.rename(stem + ext + CLEANED_SUFFIX, stem + ext + SWAP_SUFFIX)
                except FileNotFoundError:
                    if ext == ".log":
                        raise
            doomed: list[str] = []
            for n, seg in enumerate(olds):
                if n == 1 or len(olds) == 1:
                    crash_point("cleaner-swap")
                seg.close_fds()
                for ext in SEGMENT_EXTENSIONS:
                    name = os.path.join(directory, segment_name(seg.base_offset) + ext)
                    try:
                        os.rename(name, name + DELETED_SUFFIX)
                        doomed.append(name + DELETED_SUFFIX)
                    except FileNotFoundError:
                        pass
            for ext in SEGMENT_EXTENSIONS:
                try:
                    os.rename(stem + ext + SWAP_SUFFIX, stem + ext)
                except FileNotFoundError:
                    pass
            seg = LogSegment.open_existing(self.path, cleaned.base_offset, now_ms, self.files)
            seg.next_offset = cleaned.next_offset
            seg.max_timestamp = cleaned.max_timestamp
            seg.offset_of_max_timestamp = cleaned.offset_of_max_timestamp
            seg.has_txnindex = os.path.exists(stem + ".txnindex")
            seg.sealed = True
            seg.release_index()
            self._segments[i:i + len(olds)] = [seg]
            self._bases[i:i + len(olds)] = [seg.base_offset]
            self._dir_dirty = True
            for name in doomed:
                try:
                    os.unlink(name)
                except FileNotFoundError:
                    pass
            return True

    # -- the transaction index ------------------------------------------------------------------

    def append_aborted_txn(self, entry: txn_index.AbortedTxnEntry) -> None:
        """Record an aborted transaction in the transaction index of the segment holding its abort
        marker (`entry.last_offset`), as Kafka's LogSegment.updateTxnIndex does."""
        with self._lock:
            if self._closed:
                raise LogClosedError(f"{self.path.name} is closed")
            i = max(bisect_right(self._bases, entry.last_offset) - 1, 0)
            seg = self._segments[i]
            txn_index.append(seg.txnindex_path, [entry])
            seg.txn_dirty = True
            seg.dirty = True
            if not seg.has_txnindex:
                seg.has_txnindex = True
                self._dir_dirty = True  # a new file: the directory entry must be durable too

    def aborted_txns(self) -> list[txn_index.AbortedTxnEntry]:
        """Every entry of the segments' transaction indexes, in marker order."""
        with self._lock:
            paths = [seg.txnindex_path for seg in self._segments if seg.has_txnindex]
        out: list[txn_index.AbortedTxnEntry] = []
        for path in paths:
            out += txn_index.read(path)[0]
        return out

    # -- durability -----------------------------------------------------------------------------

    def flush(self, now_ms: int | None = None) -> int:
        """fsync every segment written since the last flush (log and index files) and, if
        segments were created or deleted, the directory. Returns the offset up to which the log
        is now durable (the log end offset when the flush started), which becomes the recovery
        point. Safe to call from a worker thread while append runs on the event loop."""
        with self._flush_lock:
            with self._lock:
                upto = self.log_end_offset
                if self._closed:
                    return self.recovery_point
                segs = [s for s in self._segments if s.dirty or s.index_pending]
                for s in segs:
                    s.sync_index_files()  # pending entries first; raises (nothing taken yet) if refused
                    if s.sealed and s.index_loaded:
                        s.release_index()  # its entries could not be written when it was sealed
                synced: list[tuple[LogSegment, bool, bool]] = []
                for s in segs:
                    s.index_error = None
                    synced.append((s, s.log_unsynced, s.index_unsynced))
                    s.dirty = s.log_unsynced = s.index_unsynced = False
                dir_dirty, self._dir_dirty = self._dir_dirty, False
            ok = False
            try:
                for s, _, with_index in synced:
                    s.fsync(with_index)
                if dir_dirty:
                    try:
                        fsync_dir(self.path)
                    except FileNotFoundError:
                        pass  # the log was deleted meanwhile
                ok = True
            finally:
                with self._lock:
                    if not ok:
                        for s, log_unsynced, index_unsynced in synced:
                            s.dirty = True
                            s.log_unsynced |= log_unsynced
                            s.index_unsynced |= index_unsynced
                        self._dir_dirty = self._dir_dirty or dir_dirty
                    else:
                        if upto > self.recovery_point:
                            self.recovery_point = upto
                        self.last_flush_ms = _wall_ms() if now_ms is None else now_ms
            return upto

    def close(self) -> None:
        """Seal the active segment's time index, flush everything, close the files."""
        if self._closed:
            return
        with self._lock:
            self._segments[-1].seal()
        self.flush()
        self.close_files()

    def close_files(self) -> None:
        """Close the files without sealing or flushing: a start-up that failed wrote nothing that
        needs it, and must give its descriptors back before it says what it needed."""
        with self._lock:
            self._closed = True
            for seg in self._segments:
                seg.close_fds()

    def delete(self) -> None:
        """Close and remove the whole partition directory (DeleteTopics)."""
        self.close_files()
        shutil.rmtree(self.path, ignore_errors=False)
        try:
            fsync_dir(self.path.parent)
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return (f"PartitionLog({self.path.name}, start={self.log_start_offset}, end={self.log_end_offset}, "
                f"segments={len(self._segments)})")


__all__ = ["AppendResult", "LogClosedError", "OffsetOutOfRange", "PartitionLog", "ReadResult", "segment_name"]
