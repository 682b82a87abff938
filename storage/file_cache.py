"""Open segment files bounded by a budget, as a database's table cache bounds its open tables.

A partition's `.log` descriptor is opened when a read, an append or recovery needs it and stays
open while it is among the `capacity` most recently used; the least recently used one is closed
to make room (its unsynced writes fsynced first, so a write-back error is seen by the descriptor
that wrote). Index files are not kept open at all: the active segments' entries live in memory and
are written in groups, each write opening the file for that write; sealed segments' entries are
read back when a lookup needs them, within the budget of `indexes` (see index_cache). So the
broker holds at most `capacity` descriptors for its logs however many partitions it has, and the
active segments of the partitions being written stay open.

Kafka keeps every segment open (and its indexes mapped); that needs an open-file limit above three
times the segment count, which a developer's shell does not have.

Threading: descriptors are handed out and closed on the thread that made the cache (the event
loop's); a flush on another thread opens files of its own, so no descriptor is closed under it."""

from __future__ import annotations

import errno
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol, TypeVar

from sharebroker.storage.index_cache import IndexCache

try:
    import resource
except ImportError:  # pragma: no cover - not POSIX
    resource = None  # type: ignore[assignment]

T = TypeVar("T")

MIN_CAPACITY = 4  # a read holds one segment's descriptor while it opens the next
THREAD_DESCRIPTOR_WAIT_S = 0.2  # a few fsyncs on a slow disk (see with_descriptor)
_FALLBACK_LIMIT = 1024  # where the limit is unknown or unlimited


class CachedFile(Protocol):
    """What the cache closes: a segment's log descriptor (LogSegment)."""

    def _evicted(self) -> None: ...


def soft_open_file_limit() -> int:
    if resource is None:
        return _FALLBACK_LIMIT
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return _FALLBACK_LIMIT if soft == resource.RLIM_INFINITY else int(soft)


def derived_capacity(limit: int | None = None) -> int:
    """Half the open-file limit: the other half is for connections and the files opened for one
    write (index entries, checkpoints, metadata)."""
    return max(MIN_CAPACITY, (soft_open_file_limit() if limit is None else limit) // 2)


class FileCache:
    """The open log descriptors of all segments, least recently used first; and (`indexes`) the
    sealed segments' index entries read back into memory."""

    def __init__(self, capacity: int | None = None, indexes: IndexCache | None = None) -> None:
        self.capacity = max(MIN_CAPACITY, derived_capacity() if capacity is None else capacity)
        self.indexes = IndexCache() if indexes is None else indexes
        self._open: OrderedDict[CachedFile, None] = OrderedDict()
        self._owner = threading.get_ident()
        self.evictions = 0  # descriptors closed to make room
        _caches.add(self)

    def __len__(self) -> int:
        return len(self._open)

    def touch(self, entry: CachedFile) -> None:
        """`entry` was used: it becomes the most recently used."""
        self._open.move_to_end(entry)

    def admit(self) -> None:
        """Make room for one descriptor, which the caller opens next (then `added`)."""
        while len(self._open) >= self.capacity and self.evict_one():
            pass

    def added(self, entry: CachedFile) -> None:
        self._open[entry] = None

    def forget(self, entry: CachedFile) -> None:
        """`entry` closed its descriptor itself (segment closed or deleted)."""
        self._open.pop(entry, None)

    def evict_one(self) -> bool:
        """Close the least recently used descriptor; False if there is none (or on another thread,
        where a descriptor in use by the loop could be closed under it)."""
        if not self._open or threading.get_ident() != self._owner:
            return False
        entry, _ = self._open.popitem(last=False)
        self.evictions += 1
        entry._evicted()
        return True

    def open(self, path: os.PathLike[str] | str, flags: int, mode: int = 0o644) -> int:
        return open_file(path, flags, mode)


_caches: weakref.WeakSet[FileCache] = weakref.WeakSet()


def with_descriptor(call: Callable[[], T]) -> T:
    """`call()` (which needs a descriptor: an open, a directory listing), giving back a cached
    descriptor and trying again while the process (or the system) is out of them: storage never
    fails for want of a descriptor its log files hold, whoever took the rest (connections).

    With none cached left to give back, it waits a little (THREAD_DESCRIPTOR_WAIT_S, checking
    every millisecond) before it fails: the broker's own threads hold descriptors for moments (a
    flush's fsync, the log cleaner), and one may take the very descriptor an eviction just freed.
    That wait blocks the caller, the event loop included, but only at the limit with nothing left
    to evict."""
    deadline: float | None = None
    while True:
        try:
            return call()
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE):
                raise
            if any(c.evict_one() for c in list(_caches)):
                continue
            now = time.monotonic()
            if deadline is None:
                deadline = now + THREAD_DESCRIPTOR_WAIT_S
            elif now >= deadline:
                raise
            time.sleep(0.001)


def open_file(path: os.PathLike[str] | str, flags: int, mode: int = 0o644) -> int:
    return with_descriptor(lambda: os.open(path, flags, mode))


_default: FileCache | None = None


def default_cache() -> FileCache:
    """The process's cache for logs opened without one (tools, tests): half the open-file limit."""
    global _default
    if _default is None:
        _default = FileCache()
    return _default


__all__ = ["FileCache", "MIN_CAPACITY", "default_cache", "derived_capacity", "open_file", "soft_open_file_limit",
           "with_descriptor"]
