"""One log segment: `<base>.log` holding record batches verbatim, with Kafka's sparse `.index`
(relative offset int32, position int32) and `.timeindex` (timestamp int64, relative offset int32),
and `.txnindex` once a transaction aborted in it (see txn_index).

The active segment keeps its indexes in memory as arrays for bisect and writes them to their files
in groups (append-only, never preallocated), each write opening the file for that write. Once
sealed and its entries all written, a segment drops its arrays and reads them back from the files
when a lookup needs them, within a broker-wide budget (see index_cache), so memory does not grow
with the log kept. The `.log` descriptor comes from the FileCache, which keeps only a budget of
them open (see file_cache). An offset-index entry maps the *last* offset of a batch to the
position where that batch starts, as Kafka does, and is added for a batch when more than
index.interval.bytes lie between the previous entry's batch and this one. That rule depends only
on positions, so a rebuilt index comes out identical to the one written by appends. A time-index
entry (largest timestamp so far, offset of the batch that carries it) is added at the same points
when the largest timestamp grew, and once more when the segment stops being active.
"""

from __future__ import annotations

import errno
import os
import struct
import sys
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from sharebroker.protocol.crc import crc32c

from sharebroker.protocol.errors import ErrorCode, KafkaError
from sharebroker.protocol.record_batch import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    read_header,
)
from sharebroker.storage.file_cache import FileCache
from sharebroker.storage.files import write_all
from sharebroker.storage.log_config import LogConfig

INDEX_ENTRY = 8
TIME_INDEX_ENTRY = 12
_INT32_MAX = 0x7FFFFFFF
_SWAP = sys.byteorder == "little"  # files are big-endian

# base offset, batch length, magic, attributes, last offset delta, max timestamp: the first 43
# bytes of a header are all the read path needs.
_WALK = struct.Struct(">qi4xb4xhi8xq")
_WALK_SIZE = _WALK.size
_WALK_BLOCK = 16384  # header-walk read size while batches are small
_BIG_BATCH = 16384  # past this, read just the next header instead of a block
_VERIFY_CHUNK = 4 << 20  # CRC recovery reads this much at a time
# Index entries reach their files in groups (and at every flush, roll and close) rather than one
# write per append: that write cost as much as a third of a 16 KiB append. Entries a crash loses
# are re-derived by the tail walk at open, which starts from the last entry on disk.
_INDEX_WRITE_BATCH = 256
_IDX = struct.Struct(">ii")
_TIDX = struct.Struct(">qi")
_TIDX_CHUNK = 1024  # time-index entries decoded per unpack: bounds the temporary ints
_TIDX_BLOCK = struct.Struct(">" + "qi" * _TIDX_CHUNK)

OffsetEntries = tuple["array[int]", "array[int]"]  # relative offsets, positions
TimeEntries = tuple["array[int]", "array[int]"]  # timestamps, relative offsets

Walked = tuple[int, int, int, int, int, int]  # position, base offset, size, last offset, max ts, attributes


class CorruptLogError(KafkaError):
    """Stored bytes do not parse as record batches (found while serving a read): `path` and
    `position` name where, `offset` the offset the read was looking for. CORRUPT_MESSAGE is what
    Kafka answers when a read meets a CorruptRecordException."""

    def __init__(self, message: str, *, path: str = "", position: int = -1, reason: str = "",
                 offset: int = -1) -> None:
        super().__init__(ErrorCode.corrupt_message, message)
        self.path = path
        self.position = position
        self.reason = reason
        self.offset = offset


class TornBatch(Exception):
    """A walk stopped at `position`: what starts there is not a whole, valid batch."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"{reason} at position {position}")
        self.position = position
        self.reason = reason


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def walk_headers(fd: int, start: int, end: int, block: list[tuple[int, bytes]] | None = None) -> Iterator[Walked]:
    """Headers of the batches in [start, end) of a file, reading headers only (no CRC). Raises
    TornBatch where the bytes stop making whole v2 batches. With `block`, it holds (position,
    bytes) of the last block read: a reader of the few small batches the block holds takes their
    bytes from it instead of reading them again."""
    buf = b""
    buf_start = start
    pos = start
    big = False
    while pos < end:
        rel = pos - buf_start
        if rel + _WALK_SIZE > len(buf):
            left = end - pos
            if left < BATCH_HEADER_SIZE:
                raise TornBatch(pos, f"truncated batch header ({left} bytes)")
            buf = os.pread(fd, min(BATCH_HEADER_SIZE if big else _WALK_BLOCK, left), pos)
            buf_start = pos
            rel = 0
            if block is not None:
                block[:] = [(pos, buf)]
            if len(buf) < _WALK_SIZE:
                raise TornBatch(pos, "file ends inside a batch header")
        base, length, magic, attrs, delta, max_ts = _WALK.unpack_from(buf, rel)
        if magic != 2:
            raise TornBatch(pos, f"invalid magic {magic}")
        if length < MIN_BATCH_LENGTH:
            raise TornBatch(pos, f"batch length {length} below the minimum {MIN_BATCH_LENGTH}")
        if delta < 0:
            raise TornBatch(pos, f"negative last offset delta {delta}")
        size = length + LOG_OVERHEAD
        if pos + size > end:
            raise TornBatch(pos, f"truncated batch (declares {size} bytes, {end - pos} present)")
        yield pos, base, size, base + delta, max_ts, attrs
        big = size >= _BIG_BATCH
        pos += size


def verify_batches(fd: int, start: int, end: int) -> Iterator[BatchHeader]:
    """Whole batches in [start, end) with header sanity and CRC checked; reads big chunks. Raises
    TornBatch at the first batch that is truncated or corrupt."""
    pos = start
    need = 0
    while pos < end:
        want = min(max(_VERIFY_CHUNK, need), end - pos)
        data = os.pread(fd, want, pos)
        n = len(data)
        if n == 0:
            raise TornBatch(pos, "file ends early")
        mv = memoryview(data)
        off = 0
        need = 0
        try:
            while off < n:
                at = pos + off
                left = n - off
                if left < BATCH_HEADER_SIZE:
                    if pos + n >= end:
                        raise TornBatch(at, f"truncated batch header ({end - at} bytes)")
                    need = BATCH_HEADER_SIZE
                    break
                h = read_header(data, off)
                if h.magic != 2:
                    raise TornBatch(at, f"invalid magic {h.magic}")
                if h.batch_length < MIN_BATCH_LENGTH:
                    raise TornBatch(at, f"batch length {h.batch_length} below the minimum {MIN_BATCH_LENGTH}")
                if h.last_offset_delta < 0 or h.record_count < 0:
                    raise TornBatch(at, "negative record count or offset delta")
                size = h.batch_length + LOG_OVERHEAD
                if size > left:
                    if at + size > end:
                        raise TornBatch(at, f"truncated batch (declares {size} bytes, {end - at} present)")
                    need = size
                    break
                crc = crc32c(mv[off + 21:off + size])
                if crc != h.crc:
                    raise TornBatch(at, f"CRC mismatch (stored {h.crc}, computed {crc})")
                h.position = at
                yield h
                off += size
        finally:
            mv.release()
        pos += off


def _decode_offset_index(data: bytes) -> OffsetEntries:
    raw = array("i")
    raw.frombytes(data)
    if _SWAP:
        raw.byteswap()
    return raw[0::2], raw[1::2]


def _decode_time_index(data: bytes) -> TimeEntries:
    """Timestamps and relative offsets of whole 12-byte entries (a partial last one is ignored)."""
    ts: array[int] = array("q")
    rel: array[int] = array("i")
    n = len(data) // TIME_INDEX_ENTRY
    whole = n - n % _TIDX_CHUNK
    for at in range(0, whole * TIME_INDEX_ENTRY, _TIDX_BLOCK.size):
        values = _TIDX_BLOCK.unpack_from(data, at)
        ts.extend(values[0::2])
        rel.extend(values[1::2])
    if n > whole:
        values = struct.unpack_from(">" + "qi" * (n - whole), data, whole * TIME_INDEX_ENTRY)
        ts.extend(values[0::2])
        rel.extend(values[1::2])
    return ts, rel


def _strictly_increasing(values: Sequence[int]) -> bool:
    lst = list(values)
    return lst == sorted(lst) and len(set(lst)) == len(lst)


def _valid_prefix(keys: Sequence[int], vals: Sequence[int], key_strict: bool, val_strict: bool,
                  key_min: int, val_min: int, val_max: int) -> int:
    """Length of the longest prefix with keys/values increasing and values within bounds."""
    prev_k = key_min - 1
    prev_v = val_min - 1
    for i, (k, v) in enumerate(zip(keys, vals)):
        if k < key_min or v < val_min or v > val_max:
            return i
        if (k <= prev_k) if key_strict else (k < prev_k):
            return i
        if (v <= prev_v) if val_strict else (v < prev_v):
            return i
        prev_k, prev_v = k, v
    return len(keys)


class LogSegment:
    """A segment's files and in-memory indexes. Not thread-safe: PartitionLog serialises access."""

    __slots__ = (
        "base_offset", "directory", "_stem", "files", "_fd", "size", "next_offset",
        "max_timestamp", "offset_of_max_timestamp", "created_ms", "rolling_base_ts",
        "_offsets", "_times", "sealed", "_idx_synced", "_tidx_synced",
        "_idx_file_entries", "_tidx_file_entries",
        "dirty", "log_unsynced", "index_unsynced", "sync_error", "closed", "index_damage", "time_index_damaged",
        "index_error", "untruncated", "txn_dirty", "has_txnindex", "_hint_offset", "_hint_pos",
    )

    def __init__(self, directory: Path, base_offset: int, created_ms: int, files: FileCache) -> None:
        self.directory = directory
        self.base_offset = base_offset
        # The files' path without extension, as a string: opening by it skips pathlib (a start-up
        # opens every partition's log).
        self._stem = os.path.join(directory, segment_name(base_offset))
        self.created_ms = created_ms
        self.files = files
        self._fd = -1  # the .log descriptor while the cache keeps it open
        self.size = 0
        self.next_offset = base_offset  # offset after the last batch
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.rolling_base_ts = -1  # max timestamp of the first batch, for segment.ms
        # The index entries in memory, each pair replaced whole (never emptied in place): a reader
        # holding one keeps a consistent copy if the index cache drops it meanwhile. None: the
        # file holds them all (the first `_idx_synced` / `_tidx_synced`), read back on demand.
        self._offsets: OffsetEntries | None = None
        self._times: TimeEntries | None = None
        self.sealed = False  # no longer the active segment: its entries may be dropped
        self._idx_synced = 0  # leading in-memory entries known to be in the file
        self._tidx_synced = 0
        self._idx_file_entries = 0  # entries the file holds (-1: unknown, truncate before appending)
        self._tidx_file_entries = 0
        self.dirty = False  # written since the last fsync
        self.log_unsynced = False  # .log bytes written or cut since the last fsync
        self.index_unsynced = False  # index files created, written or cut since the last fsync
        # An fsync failed when the cache closed the descriptor: the pages may be lost, so every
        # later flush of this segment fails rather than report them durable.
        self.sync_error: OSError | None = None
        self.closed = False
        self.index_damage: list[str] = []  # what was wrong with the index files at open
        self.time_index_damaged = False
        self.index_error: OSError | None = None  # an index write failed; retried by the next flush
        self.untruncated = False  # a failed append could not be cut off the file yet
        self.txn_dirty = False  # the transaction index was appended to since the last fsync
        self.has_txnindex = False  # its .txnindex file exists (spares a failed open per segment)
        # Where the last read ended: a batch boundary (or the end of the file) at _hint_pos, every
        # batch before which ends below _hint_offset. A reader that goes on from there (a
        # consumer, a share partition acquiring job after job) starts at it instead of walking
        # from the index entry before it.
        self._hint_offset = -1
        self._hint_pos = 0

    # -- paths ----------------------------------------------------------------------------------

    @property
    def log_path(self) -> Path:
        return self.directory / (segment_name(self.base_offset) + ".log")

    @property
    def index_path(self) -> Path:
        return self.directory / (segment_name(self.base_offset) + ".index")

    @property
    def timeindex_path(self) -> Path:
        return self.directory / (segment_name(self.base_offset) + ".timeindex")

    @property
    def txnindex_path(self) -> Path:
        return self.directory / (segment_name(self.base_offset) + ".txnindex")

    @property
    def index_pending(self) -> bool:
        """In-memory index entries not yet written to the files."""
        offsets, times = self._offsets, self._times
        return ((offsets is not None and (self._idx_synced != len(offsets[0])
                                          or self._idx_file_entries != self._idx_synced))
                or (times is not None and (self._tidx_synced != len(times[0])
                                           or self._tidx_file_entries != self._tidx_synced)))

    @property
    def index_entries(self) -> int:
        offsets = self._offsets
        return self._idx_synced if offsets is None else len(offsets[0])

    @property
    def time_index_entries(self) -> int:
        times = self._times
        return self._tidx_synced if times is None else len(times[0])

    @property
    def index_loaded(self) -> bool:
        """Whether any index entries are held in memory (for tests and tools)."""
        return self._offsets is not None or self._times is not None

    @property
    def index_bytes_held(self) -> int:
        """Bytes of index entries held in memory (for tools)."""
        return sum(a.itemsize * len(a) for pair in (self._offsets, self._times) if pair is not None for a in pair)

    def index_list(self) -> list[tuple[int, int]]:
        """(absolute offset, position) of each offset-index entry (for tests and tools)."""
        b = self.base_offset
        rel, pos = self._offset_entries() or ((), ())
        return [(b + r, p) for r, p in zip(rel, pos)]

    def time_index_list(self) -> list[tuple[int, int]]:
        b = self.base_offset
        ts, rel = self._time_entries() or ((), ())
        return [(t, b + r) for t, r in zip(ts, rel)]

    # -- entries in memory ----------------------------------------------------------------------

    def _offset_entries(self) -> OffsetEntries | None:
        """The offset index for a lookup: read back from the file if dropped; None if empty."""
        offsets = self._offsets
        if offsets is not None:
            if self.sealed:
                self.files.indexes.touch(self)
            return offsets
        n = self._idx_synced
        if not n:
            return None
        data = self._read_index(self._stem + ".index")
        offsets = None
        if data is not None and len(data) == n * INDEX_ENTRY:
            offsets = _decode_offset_index(data)
            rel, pos = offsets
            # Entries written by the broker are in order and inside the log (checked at C speed:
            # sorting sorted values is one pass); a file overwritten since is not trusted.
            if (min(rel) < 0 or min(pos) < 0 or max(pos) >= self.size
                    or not _strictly_increasing(rel) or not _strictly_increasing(pos)):
                offsets = None
        if offsets is None:
            # The file changed under us: keep its valid prefix, as a start-up would.
            self._load_offset_index(data or b"", f"{self.index_path.name} changed since it was written")
            offsets = self._offsets
            assert offsets is not None
        self._offsets = offsets
        self._held(len(offsets[0]) * INDEX_ENTRY)
        return offsets

    def _time_entries(self) -> TimeEntries | None:
        """The time index for a lookup: read back from the file if dropped; None if empty."""
        times = self._times
        if times is not None:
            if self.sealed:
                self.files.indexes.touch(self)
            return times
        n = self._tidx_synced
        if not n:
            return None
        data = self._read_index(self._stem + ".timeindex")
        times = None
        if data is not None and len(data) == n * TIME_INDEX_ENTRY:
            times = _decode_time_index(data)
            ts, rel = times
            if min(rel) < 0 or not _strictly_increasing(ts) or list(rel) != sorted(rel):
                times = None  # not what was written: checked as at start-up below
        if times is None:
            self._load_time_index(data or b"", f"{self.timeindex_path.name} changed since it was written")
            times = self._times
            assert times is not None
        self._times = times
        self._held(len(times[0]) * TIME_INDEX_ENTRY)
        return times

    def _writable_offsets(self) -> OffsetEntries:
        offsets = self._offsets
        if offsets is None:
            offsets = self._offset_entries() or (array("i"), array("i"))
            self._offsets = offsets
        return offsets

    def _writable_times(self) -> TimeEntries:
        times = self._times
        if times is None:
            times = self._time_entries() or (array("q"), array("i"))
            self._times = times
        return times

    def _held(self, nbytes: int) -> None:
        """Entries of a sealed segment were read back (or cannot be written yet): the index
        cache accounts for them and drops the least recently used over its budget."""
        if self.sealed and not self.closed:
            self.files.indexes.loaded(self, nbytes)

    def _drop_index(self) -> bool:
        """The index cache makes room: drop the in-memory entries if the files hold them all."""
        if self.index_pending:
            return False
        self._offsets = self._times = None
        return True

    def release_index(self) -> None:
        """Drop the in-memory entries if the segment is sealed (or has none) and its files hold
        them all; written first if they are not yet. If that write fails, the entries stay (the
        next flush retries it) and the index cache drops them once written."""
        if not (self.sealed or (not self.index_entries and not self.time_index_entries)):
            return
        if self.index_pending:
            try:
                self.sync_index_files()
                self.index_error = None
            except OSError as exc:
                self.index_error = exc
                self._held(self.index_entries * INDEX_ENTRY + self.time_index_entries * TIME_INDEX_ENTRY)
                return
        self._offsets = self._times = None
        self.files.indexes.forget(self)

    # -- opening --------------------------------------------------------------------------------

    def _open_log(self, flags: int) -> int:
        files = self.files
        files.admit()
        self._fd = files.open(self._stem + ".log", flags)
        files.added(self)
        return self._fd

    def log_fd(self) -> int:
        """The `.log` descriptor, reopened if the cache closed it. Use it before asking for another
        segment's: that may close this one."""
        fd = self._fd
        if fd >= 0:
            self.files.touch(self)
            return fd
        if self.closed:
            raise OSError(errno.EBADF, f"segment {self.log_path} is closed")
        # No O_CREAT: a segment deleted under a reader must not come back as an empty file.
        return self._open_log(os.O_RDWR | os.O_APPEND)

    def _evicted(self) -> None:
        """The cache closes the descriptor to make room: what it wrote is fsynced first, so the
        descriptor that wrote sees a write-back error (a later one might not)."""
        fd, self._fd = self._fd, -1
        try:
            if self.log_unsynced:
                self.log_unsynced = False
                try:
                    os.fsync(fd)
                except OSError as exc:
                    self.sync_error = exc
        finally:
            os.close(fd)

    @classmethod
    def create(cls, directory: Path, base_offset: int, now_ms: int, files: FileCache) -> LogSegment:
        seg = cls(directory, base_offset, now_ms, files)
        fd = seg._open_log(os.O_RDWR | os.O_CREAT | os.O_APPEND)
        try:
            if os.fstat(fd).st_size:
                raise FileExistsError(f"segment {seg.log_path} already exists and is not empty")
            for ext in (".index", ".timeindex"):
                os.close(files.open(seg._stem + ext, os.O_WRONLY | os.O_CREAT | os.O_TRUNC))
        except BaseException:
            seg.close_fds()  # e.g. no inode left: the empty files are harmless, the fds are not
            raise
        seg.dirty = seg.index_unsynced = True
        return seg

    @classmethod
    def open_existing(cls, directory: Path, base_offset: int, now_ms: int, files: FileCache) -> LogSegment:
        """Open the log and load both indexes, keeping only their valid leading entries; what
        was dropped is listed in `index_damage` (the caller rebuilds from there)."""
        seg = cls(directory, base_offset, now_ms, files)
        # The sizes come from stat, without a descriptor: the log is opened when first read (a
        # start-up of many partitions, most of them empty, opens and reads only what holds data).
        try:
            seg.size = os.stat(seg._stem + ".log").st_size
        except FileNotFoundError:  # gone since the directory was listed: an empty segment, as before
            seg.size = os.fstat(seg._open_log(os.O_RDWR | os.O_CREAT | os.O_APPEND)).st_size
        try:
            loaded = []
            for ext, entry in ((".index", INDEX_ENTRY), (".timeindex", TIME_INDEX_ENTRY)):
                path = seg._stem + ext
                data = seg._read_index(path, stat_first=True)
                if data is None:
                    if seg.size:
                        seg.index_damage.append(f"{os.path.basename(path)} missing")
                        seg.time_index_damaged |= entry == TIME_INDEX_ENTRY
                    os.close(files.open(path, os.O_WRONLY | os.O_CREAT))
                    seg.index_unsynced = seg.dirty = True
                    data = b""
                loaded.append(data)
            seg._load_offset_index(loaded[0])
            seg._load_time_index(loaded[1])
            if seg.size >= _WALK_SIZE:
                first = _WALK.unpack_from(os.pread(seg.log_fd(), _WALK_SIZE, 0))
                seg.rolling_base_ts = first[5] if first[2] == 2 else -1
        except BaseException:
            seg.close_fds()  # out of descriptors at start-up: the caller closes the other segments too
            raise
        return seg

    def _read_index(self, path: str, *, stat_first: bool = False) -> bytes | None:
        """An index file's bytes, None if it is missing. `stat_first`: an empty file is not opened."""
        try:
            if stat_first and not os.stat(path).st_size:
                return b""
            fd = self.files.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            size = os.fstat(fd).st_size
            return os.pread(fd, size, 0) if size else b""
        finally:
            os.close(fd)

    def _load_offset_index(self, data: bytes, changed: str | None = None) -> None:
        """Load and check an offset index file's bytes (at open; later only if `changed`, what
        differs from what was written), keeping the valid leading entries."""
        if changed is not None:
            self.index_damage.append(changed)
        size = len(data)
        usable = size - size % INDEX_ENTRY
        if usable != size:
            self.index_damage.append(f"{self.index_path.name} size {size} is not a multiple of {INDEX_ENTRY}")
        rel, pos = _decode_offset_index(data[:usable])
        total = len(rel)
        if total and (min(rel) < 0 or min(pos) < 0 or max(pos) >= self.size
                      or not _strictly_increasing(rel) or not _strictly_increasing(pos)):
            keep = _valid_prefix(rel, pos, True, True, 0, 0, self.size - 1)
            self.index_damage.append(f"{self.index_path.name}: entry {keep} of {total} is out of order or points "
                                     f"past the log ({self.size} bytes)")
            del rel[keep:], pos[keep:]
        if len(rel):
            # The first entry must name a batch that really ends at that offset.
            hdr = os.pread(self.log_fd(), _WALK_SIZE, pos[0])
            ok = len(hdr) == _WALK_SIZE
            if ok:
                b, _, magic, _, delta, _ = _WALK.unpack_from(hdr)
                ok = magic == 2 and b + delta == self.base_offset + rel[0]
            if not ok:
                self.index_damage.append(f"{self.index_path.name}: first entry does not match the log")
                del rel[:], pos[:]
        self._offsets = (rel, pos)
        # The kept entries are a prefix of the file; sync_index_files trims the rest.
        self._idx_synced = len(rel)
        self._idx_file_entries = size // INDEX_ENTRY if usable == size else -1

    def _load_time_index(self, data: bytes, changed: str | None = None) -> None:
        if changed is not None:
            self.index_damage.append(changed)
            self.time_index_damaged = True
        size = len(data)
        usable = size - size % TIME_INDEX_ENTRY
        if usable != size:
            self.index_damage.append(f"{self.timeindex_path.name} size {size} is not a multiple of "
                                     f"{TIME_INDEX_ENTRY}")
            self.time_index_damaged = True
        ts, rel = _decode_time_index(data)
        total = len(ts)
        if total and (min(rel) < 0 or not _strictly_increasing(ts) or list(rel) != sorted(rel)):
            keep = _valid_prefix(ts, rel, True, False, -(1 << 63), 0, _INT32_MAX)
            self.index_damage.append(f"{self.timeindex_path.name}: entry {keep} of {total} is out of order")
            self.time_index_damaged = True
            del ts[keep:], rel[keep:]
        self._times = (ts, rel)
        self._tidx_synced = len(ts)
        self._tidx_file_entries = size // TIME_INDEX_ENTRY if usable == size else -1

    def time_index_consistent(self) -> bool:
        """Time entries must name offsets inside the segment (checked once next_offset is known)."""
        times = self._time_entries()
        return times is None or not times[1] or self.base_offset + times[1][-1] < self.next_offset

    # -- lookups --------------------------------------------------------------------------------

    def lookup(self, offset: int) -> int:
        """Position of a batch at or before the one holding `offset` (0 if none is indexed)."""
        hint_offset = self._hint_offset
        if hint_offset == offset:
            return self._hint_pos  # the batch holding `offset` starts there: no index needed
        offsets = self._offset_entries()
        pos = 0
        if offsets is not None:
            i = bisect_right(offsets[0], offset - self.base_offset) - 1
            if i >= 0:
                pos = offsets[1][i]
        if 0 <= hint_offset <= offset and self._hint_pos > pos:
            return self._hint_pos
        return pos

    def remember_read_end(self, next_offset: int, position: int) -> None:
        """A read ended at `position`, a batch boundary, with the batches before it all below
        `next_offset`: the next `lookup` of an offset at or after it starts there."""
        if position <= self.size:
            self._hint_offset, self._hint_pos = next_offset, position

    def time_lookup(self, timestamp: int, min_offset: int) -> int:
        """Position from which to scan for the first batch with max timestamp >= `timestamp`."""
        times = self._time_entries()
        j = bisect_right(times[0], timestamp) - 1 if times is not None else -1
        off = self.base_offset + times[1][j] if times is not None and j >= 0 else self.base_offset
        return self.lookup(max(off, min_offset))

    def walk(self, start: int, block: list[tuple[int, bytes]] | None = None) -> Iterator[Walked]:
        return walk_headers(self.log_fd(), start, self.size, block)

    @property
    def last_index_position(self) -> int:
        offsets = self._offset_entries()
        return offsets[1][-1] if offsets is not None and offsets[1] else 0

    def index_full(self, config: LogConfig) -> bool:
        cap = config.segment_index_bytes
        return self.index_entries >= cap // INDEX_ENTRY or self.time_index_entries >= cap // TIME_INDEX_ENTRY

    # -- appending ------------------------------------------------------------------------------

    def append(self, buf: bytes | bytearray | memoryview, headers: Sequence[BatchHeader], config: LogConfig) -> None:
        """Write `buf` (whole batches, offsets assigned) at the end with one write, then index it.
        A failed write (a full disk) is cut off again so the file never keeps a partial append;
        if even that fails, the next append cuts it first, and is refused while it cannot."""
        start = self.size
        fd = self.log_fd()
        self.log_unsynced = True
        if self.untruncated:
            os.ftruncate(fd, start)
            self.untruncated = False
        try:
            write_all(fd, buf)
        except BaseException:
            self.untruncated = True
            os.ftruncate(fd, start)
            self.untruncated = False
            raise
        self.dirty = True
        if start == 0:
            self.rolling_base_ts = headers[0].max_timestamp
        base = self.base_offset
        # A segment without entries has no arrays until its first (a broker may hold 100,000
        # partitions of a few records).
        offsets = self._offsets
        if offsets is None and self._idx_synced:
            offsets = self._writable_offsets()
        last_entry = offsets[1][-1] if offsets is not None and offsets[1] else 0
        interval = config.index_interval_bytes
        max_ts = self.max_timestamp
        pos = start
        added = False
        for h in headers:
            mts = h.max_timestamp
            if mts > max_ts:
                max_ts = self.max_timestamp = mts
                self.offset_of_max_timestamp = h.base_offset if h.attributes & TIMESTAMP_TYPE_BIT else h.last_offset
            if pos - last_entry > interval and self.index_entries < config.segment_index_bytes // INDEX_ENTRY:
                offsets = self._writable_offsets()
                offsets[0].append(h.last_offset - base)
                offsets[1].append(pos)
                last_entry = pos
                added = True
                tidx_ts, tidx_rel = self._writable_times()
                if (not tidx_ts or max_ts > tidx_ts[-1]) and len(tidx_ts) < config.max_time_index_entries:
                    tidx_ts.append(max_ts)
                    tidx_rel.append(self.offset_of_max_timestamp - base)
            pos += h.size
        self.size = pos
        self.next_offset = headers[-1].last_offset + 1
        if added and (self.index_entries - self._idx_synced >= _INDEX_WRITE_BATCH or self.index_error is not None):
            try:
                self.sync_index_files()
                self.index_error = None
            except OSError as exc:
                # The batches are in the log; the index can wait. The next flush retries and raises.
                self.index_error = exc

    def seal(self) -> None:
        """The segment stops being active: record its largest timestamp in the time index even
        off the index interval (Kafka does this on roll), so it survives a restart exactly; then
        write what is pending and drop the in-memory entries (see release_index: if the write
        fails, the roll goes on and the next flush retries it, as for an append's entries)."""
        times = self._writable_times() if self.max_timestamp >= 0 else None
        if times is not None and (not times[0] or self.max_timestamp > times[0][-1]):
            times[0].append(self.max_timestamp)
            times[1].append(self.offset_of_max_timestamp - self.base_offset)
            self.dirty = True
        self.sealed = True
        self.release_index()

    def sync_index_files(self) -> None:
        """Make both index files equal the in-memory entries: append what is missing, and first
        truncate whatever in the file diverged (only after a load, a rebuild or a failed write)."""
        # Entries not in memory are all in their file: nothing to write for them.
        offsets, times = self._offsets, self._times
        if offsets is not None:
            idx_rel, idx_pos = offsets
            self._sync_index_file(".index", INDEX_ENTRY, len(idx_rel), "_idx_synced", "_idx_file_entries",
                                  lambda out, at, i: _IDX.pack_into(out, at, idx_rel[i], idx_pos[i]))
        if times is not None:
            tidx_ts, tidx_rel = times
            self._sync_index_file(".timeindex", TIME_INDEX_ENTRY, len(tidx_ts), "_tidx_synced",
                                  "_tidx_file_entries",
                                  lambda out, at, i: _TIDX.pack_into(out, at, tidx_ts[i], tidx_rel[i]))

    def _sync_index_file(self, suffix: str, entry_size: int, n: int, synced_attr: str, entries_attr: str,
                         pack: Callable[[bytearray, int, int], None]) -> None:
        """One index file of sync_index_files: `synced_attr` names the count of leading entries
        known to be in the file, `entries_attr` the count the file holds (-1: unknown)."""
        keep: int = getattr(self, synced_attr)
        if keep == n and getattr(self, entries_attr) == n:
            return
        fd = self.files.open(self._stem + suffix, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            self.index_unsynced = True
            if getattr(self, entries_attr) != keep:
                os.ftruncate(fd, keep * entry_size)
                setattr(self, entries_attr, keep)
            if n > keep:
                out = bytearray((n - keep) * entry_size)
                for i in range(keep, n):
                    pack(out, (i - keep) * entry_size, i)
                setattr(self, entries_attr, -1)  # unknown until the write completes
                write_all(fd, out)
                setattr(self, entries_attr, n)
        finally:
            os.close(fd)
        setattr(self, synced_attr, n)
        self.dirty = True

    # -- recovery -------------------------------------------------------------------------------

    def _scan_items(self, walk_from: int, crc_from: int | None) -> Iterator[Walked]:
        pos = walk_from
        if pos >= self.size:  # nothing to walk: the log need not be opened
            return
        if crc_from is None or crc_from > walk_from:
            pos = self.size
            for item in walk_headers(self.log_fd(), walk_from, self.size):
                if crc_from is not None and item[0] >= crc_from:
                    pos = item[0]
                    break
                yield item
        if pos >= self.size:
            return
        for h in verify_batches(self.log_fd(), pos, self.size):
            yield h.position, h.base_offset, h.size, h.last_offset, h.max_timestamp, h.attributes

    def scan(self, walk_from: int, config: LogConfig, *, crc_from: int | None,
             keep_time_index: bool = False) -> str | None:
        """Walk the batches from `walk_from` (0 or an offset-index entry's position) to the end of
        the file: re-derive the index entries past `walk_from`, the next offset and the largest
        timestamp; check the CRC of batches at or after `crc_from` (None: headers only). The file
        is truncated at the first batch that is torn or corrupt; returns what was cut, or None.

        Time-index entries past the kept offset-index entries are dropped and re-derived, unless
        keep_time_index (a clean tail check that must not disturb a sealed segment's last entry)."""
        base = self.base_offset
        self._hint_offset, self._hint_pos = -1, 0  # the file may be cut below
        # Only at open, before the segment is sealed: its arrays are edited in place.
        idx_rel, idx_pos = self._writable_offsets()
        tidx_ts, tidx_rel = self._writable_times()
        k = bisect_right(idx_pos, walk_from)
        if k and idx_pos[k - 1] != walk_from:
            walk_from = idx_pos[k - 1]
        del idx_rel[k:], idx_pos[k:]
        self._idx_synced = min(self._idx_synced, k)
        check_last = base + idx_rel[k - 1] if k else None
        if not keep_time_index:
            kt = bisect_right(tidx_rel, idx_rel[k - 1]) if k else 0
            del tidx_ts[kt:], tidx_rel[kt:]
            self._tidx_synced = min(self._tidx_synced, kt)
        if len(tidx_ts):
            max_ts = tidx_ts[-1]
            off_max = base + tidx_rel[-1]
        else:
            max_ts = off_max = -1
        if walk_from == 0:
            max_ts = off_max = -1
            if not keep_time_index:
                del tidx_ts[:], tidx_rel[:]
                self._tidx_synced = 0
        last_entry = idx_pos[-1] if len(idx_pos) else 0
        interval = config.index_interval_bytes
        cap_i = config.max_index_entries
        cap_t = config.max_time_index_entries
        expected = base
        first = True
        cut: TornBatch | None = None
        try:
            for pos, b, _size, last, mts, attrs in self._scan_items(walk_from, crc_from):
                if first and check_last is not None and last != check_last:
                    # The index disagrees with the log: forget it and rebuild from the start.
                    self.index_damage.append(f"{self.index_path.name}: entry at position {walk_from} names offset "
                                             f"{check_last}, the batch there ends at {last}")
                    del idx_rel[:], idx_pos[:]
                    self._idx_synced = 0
                    return self.scan(0, config, crc_from=crc_from if crc_from is None else min(crc_from, walk_from))
                if b < expected:
                    raise TornBatch(pos, f"offset {b} goes backwards (expected {expected} or more)")
                if last - base > _INT32_MAX:
                    raise TornBatch(pos, f"offset {last} does not fit a segment based at {base}")
                first = False
                if mts > max_ts:
                    max_ts = mts
                    off_max = b if attrs & TIMESTAMP_TYPE_BIT else last
                if pos - last_entry > interval and len(idx_rel) < cap_i:
                    idx_rel.append(last - base)
                    idx_pos.append(pos)
                    last_entry = pos
                    if (not tidx_ts or max_ts > tidx_ts[-1]) and len(tidx_ts) < cap_t:
                        tidx_ts.append(max_ts)
                        tidx_rel.append(off_max - base)
                expected = last + 1
        except TornBatch as torn:
            cut = torn
        if cut is not None and first and walk_from > 0:
            # The batch we started from is bad: we do not know the offset before it. Start over.
            return self.scan(0, config, crc_from=crc_from if crc_from is None else min(crc_from, walk_from))
        self.max_timestamp = max_ts
        self.offset_of_max_timestamp = off_max
        self.next_offset = expected if not first or walk_from == 0 else self.next_offset
        if cut is None:
            self.sync_index_files()
            return None
        old = self.size
        os.ftruncate(self.log_fd(), cut.position)
        self.log_unsynced = True
        self.size = cut.position
        self.dirty = True
        note = (f"{self.log_path.name}: truncated {old - cut.position} bytes at position {cut.position} "
                f"(offset {expected}): {cut.reason}")
        if keep_time_index:
            # Time entries may name truncated batches: re-derive them from the kept entries.
            self.scan(walk_from, config, crc_from=None)
        else:
            self.sync_index_files()
        if self.size == 0:
            self.rolling_base_ts = -1
        return note

    # -- durability and teardown ----------------------------------------------------------------

    def fsync(self, with_index: bool) -> None:
        """fsync the log (and the index files, if written since their last fsync) through
        descriptors of its own: a flush runs on another thread than the cache, which may close the
        cached one meanwhile. fsync flushes the file, whichever descriptor asks. A file deleted
        meanwhile (retention, DeleteTopics) needs nothing."""
        if self.sync_error is not None:
            raise self.sync_error
        stem = self._stem
        for path in (stem + ".log", stem + ".index", stem + ".timeindex") if with_index else (stem + ".log",):
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        if self.txn_dirty:
            self.txn_dirty = False
            try:
                fd = os.open(self.txnindex_path, os.O_RDONLY)
            except FileNotFoundError:
                return
            try:
                os.fsync(fd)
            except BaseException:
                self.txn_dirty = True
                raise
            finally:
                os.close(fd)

    def close_fds(self) -> None:
        """Close the log descriptor for good (the segment was closed or deleted)."""
        if self.closed:
            return
        self.closed = True
        if self.sealed:
            self.files.indexes.forget(self)
        if self._fd >= 0:
            self.files.forget(self)
            os.close(self._fd)
            self._fd = -1

    def unlink(self) -> None:
        for path in (self.log_path, self.index_path, self.timeindex_path, self.txnindex_path):
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, size={self.size}, next={self.next_offset})"
