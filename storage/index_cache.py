"""Sealed segments' index entries in memory, bounded by a byte budget for the whole broker.

The active segment of each partition keeps its offset and time index in memory (it is appended
to). A sealed segment's entries are all in its `.index` and `.timeindex` files, so its in-memory
copy is dropped when it is sealed and read back from the files when a lookup needs it (Kafka's
LazyIndex opens a sealed segment's index on first use in the same spirit; Kafka then keeps it
mapped and leaves the memory to the page cache). The copies read back stay here, least recently
used first, until their total passes the budget; the oldest are dropped then. So the memory the
indexes take no longer grows with the log kept on disk: it is the active segments' entries plus
at most the budget.

Kafka has no setting for this (its indexes are memory-mapped files), hence a constant: 16 MiB
holds the offset indexes of eight full 1 GiB segments (2 MiB each at index.interval.bytes 4096),
more than the segments consumers catching up read at once; a reader going on from where its last
read ended needs no index at all (LogSegment.lookup).

Threading: entries are added on the thread that reads (the event loop's); a drop only replaces
the segment's references to its arrays, so a reader holding them keeps a consistent copy."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Protocol

INDEX_MEMORY_BUDGET = 16 << 20  # bytes of sealed segments' index entries kept in memory


class DroppableIndex(Protocol):
    """What the cache drops: a sealed segment's loaded index (LogSegment)."""

    def _drop_index(self) -> bool: ...


class IndexCache:
    """The sealed segments whose index entries are in memory, least recently used first, and the
    bytes those entries take."""

    def __init__(self, budget: int = INDEX_MEMORY_BUDGET) -> None:
        self.budget = budget
        self._loaded: OrderedDict[DroppableIndex, int] = OrderedDict()
        self.used = 0  # bytes of the entries held
        self.loads = 0  # index files read back
        self.evictions = 0  # segments whose entries were dropped to stay within the budget
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._loaded)

    def touch(self, entry: DroppableIndex) -> None:
        """`entry`'s index was used: it becomes the most recently used."""
        with self._lock:
            if entry in self._loaded:
                self._loaded.move_to_end(entry)

    def loaded(self, entry: DroppableIndex, nbytes: int) -> None:
        """`entry` read `nbytes` of index entries back into memory (or keeps entries it could not
        write yet): account for them, then drop the least recently used others while over budget."""
        with self._lock:
            self.loads += 1
            self._loaded[entry] = self._loaded.get(entry, 0) + nbytes
            self._loaded.move_to_end(entry)
            self.used += nbytes
            while self.used > self.budget:
                for victim in self._loaded:
                    # A segment whose entries are not all in its files yet keeps them (skipped).
                    if victim is not entry and victim._drop_index():
                        break
                else:
                    return
                self.used -= self._loaded.pop(victim)
                self.evictions += 1

    def forget(self, entry: DroppableIndex) -> None:
        """`entry` dropped its entries itself (it was closed or deleted)."""
        with self._lock:
            self.used -= self._loaded.pop(entry, 0)


__all__ = ["INDEX_MEMORY_BUDGET", "IndexCache"]
