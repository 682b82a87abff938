"""The in-flight range map of one share partition (DESIGN principle 4: ranges, not records).

Kafka keeps a map of in-flight *batches* keyed by first offset and "explodes" a batch into
per-offset states when an operation touches part of it. We keep the same batches (their bounds are
remembered on every piece as ``bfirst``/``blast``) but represent an exploded batch as a few
contiguous *pieces* (ranges with one state each) instead of one entry per offset. Adjacent pieces of
the same batch with identical attributes are merged back, so the number of pieces stays proportional
to the number of distinct states, never to the number of records.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from enum import IntEnum
from operator import attrgetter


class RecordState(IntEnum):
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVING = 3
    ARCHIVED = 4


TERMINAL_STATES = frozenset({RecordState.ACKNOWLEDGED, RecordState.ARCHIVED})

_by_bfirst = attrgetter("bfirst")


class Txn:
    """One two-phase update (an acknowledgement or a release): the pieces it marked in transition."""

    __slots__ = ("pieces", "at_limit")

    def __init__(self) -> None:
        self.pieces: list[Piece] = []
        self.at_limit = 0  # records it archives because they reached the delivery count limit


class Piece:
    """A contiguous range of offsets of one in-flight batch that share one state.

    ``txn``/``prev`` mark an ongoing transition: ``state`` already holds the new state and ``prev``
    is the rollback copy ``(state, delivery_count, owner, lock_deadline)``. ``forced`` means the
    piece was archived (log start movement, compaction) while in transition, so a rollback must keep
    it ARCHIVED.
    """

    __slots__ = ("first", "last", "state", "count", "owner", "deadline", "txn", "prev", "forced",
                 "bfirst", "blast", "alive", "rejected")

    def __init__(self, first: int, last: int, state: RecordState, count: int, owner: str,
                 deadline: int | None, bfirst: int, blast: int) -> None:
        self.first = first
        self.last = last
        self.state = state
        self.count = count
        self.owner = owner
        self.deadline = deadline
        self.txn: Txn | None = None
        self.prev: tuple[RecordState, int, str, int | None] | None = None
        self.forced = False
        self.bfirst = bfirst
        self.blast = blast
        self.alive = True
        self.rejected = False  # ARCHIVING because a consumer rejected it (the DLQ record says so)

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def clone(self, first: int, last: int) -> Piece:
        p = Piece(first, last, self.state, self.count, self.owner, self.deadline, self.bfirst, self.blast)
        p.txn = self.txn
        p.prev = self.prev
        p.forced = self.forced
        p.rejected = self.rejected
        return p

    def __repr__(self) -> str:  # pragma: no cover - diagnostics
        extra = " txn" if self.txn is not None else ""
        return (f"Piece({self.first}-{self.last} {self.state.name} dc={self.count} owner={self.owner!r} "
                f"deadline={self.deadline} batch={self.bfirst}-{self.blast}{extra})")


def _mergeable(a: Piece, b: Piece) -> bool:
    return (a.bfirst == b.bfirst and a.last + 1 == b.first and a.state == b.state and a.count == b.count
            and a.owner == b.owner and a.deadline == b.deadline and a.txn is None and b.txn is None
            and not a.forced and not b.forced and a.rejected == b.rejected)


class InFlightMap:
    """Sorted, non-overlapping pieces with bisect lookups and a lazy heap of lock deadlines."""

    __slots__ = ("firsts", "pieces", "_heap", "_seq")

    def __init__(self) -> None:
        self.firsts: list[int] = []
        self.pieces: list[Piece] = []
        self._heap: list[tuple[int, int, Piece]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self.pieces)

    def __bool__(self) -> bool:
        return bool(self.pieces)

    # ---- lookups -------------------------------------------------------------------------------

    def floor_index(self, offset: int) -> int:
        """Index of the last piece whose first offset is <= offset, or -1."""
        return bisect_right(self.firsts, offset) - 1

    def floor_batch_index(self, offset: int) -> int:
        """Index of the last piece whose *batch* starts at or before offset, or -1."""
        return bisect_right(self.pieces, offset, key=_by_bfirst) - 1

    def index_at_or_after(self, offset: int) -> int:
        """Index of the piece containing offset, else of the first piece after it (may be len)."""
        i = bisect_right(self.firsts, offset) - 1
        if i >= 0 and self.pieces[i].last >= offset:
            return i
        return i + 1

    def index_of(self, piece: Piece) -> int:
        i = bisect_left(self.firsts, piece.first)
        if i < len(self.pieces) and self.pieces[i] is piece:
            return i
        raise LookupError(piece)

    def batch_bounds(self, bfirst: int) -> tuple[int, int]:
        """Index range [i, j) of the pieces of the batch that starts at bfirst."""
        return (bisect_left(self.pieces, bfirst, key=_by_bfirst),
                bisect_right(self.pieces, bfirst, key=_by_bfirst))

    def batches_between(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """(first, last) of the batches whose first offset is in [lo, hi], in order."""
        out: list[tuple[int, int]] = []
        i = bisect_left(self.pieces, lo, key=_by_bfirst)
        n = len(self.pieces)
        while i < n:
            p = self.pieces[i]
            if p.bfirst > hi:
                break
            out.append((p.bfirst, p.blast))
            i = bisect_right(self.pieces, p.bfirst, lo=i, key=_by_bfirst)
        return out

    # ---- structure -----------------------------------------------------------------------------

    def insert(self, piece: Piece) -> int:
        i = bisect_left(self.firsts, piece.first)
        self.firsts.insert(i, piece.first)
        self.pieces.insert(i, piece)
        self.track_deadline(piece)
        return i

    def split(self, i: int, at: int) -> int:
        """Split piece i so that a new piece starts at ``at``; returns the new piece's index."""
        p = self.pieces[i]
        assert p.first < at <= p.last, (p, at)
        q = p.clone(at, p.last)
        p.last = at - 1
        if q.txn is not None:
            q.txn.pieces.append(q)
        self.firsts.insert(i + 1, at)
        self.pieces.insert(i + 1, q)
        self.track_deadline(q)
        return i + 1

    def isolate(self, i: int, lo: int, hi: int) -> int:
        """Make [lo, hi] (inside piece i) a piece of its own; returns its index."""
        p = self.pieces[i]
        if lo > p.first:
            i = self.split(i, lo)
        if hi < self.pieces[i].last:
            self.split(i, hi + 1)
        return i

    def remove_prefix(self, j: int) -> None:
        for p in self.pieces[:j]:
            p.alive = False
        del self.pieces[:j]
        del self.firsts[:j]

    def clear(self) -> None:
        self.remove_prefix(len(self.pieces))
        self._heap.clear()

    def coalesce(self, lo: int, hi: int) -> None:
        """Merge mergeable neighbours among the pieces touching [lo - 1, hi + 1]."""
        if not self.pieces:
            return
        i = max(self.floor_index(lo - 1), 0)
        while i + 1 < len(self.pieces):
            a, b = self.pieces[i], self.pieces[i + 1]
            if a.first > hi + 1:
                break
            if _mergeable(a, b):
                a.last = b.last
                b.alive = False
                del self.pieces[i + 1]
                del self.firsts[i + 1]
            else:
                i += 1

    # ---- lock deadlines ------------------------------------------------------------------------

    def track_deadline(self, piece: Piece) -> None:
        if piece.state is RecordState.ACQUIRED and piece.deadline is not None and piece.txn is None:
            self._seq += 1
            heapq.heappush(self._heap, (piece.deadline, self._seq, piece))
            if len(self._heap) > 64 + 4 * len(self.pieces):
                self._rebuild_heap()

    @staticmethod
    def _valid(deadline: int, piece: Piece) -> bool:
        return (piece.alive and piece.state is RecordState.ACQUIRED and piece.txn is None
                and piece.deadline == deadline)

    def _rebuild_heap(self) -> None:
        heap = []
        for p in self.pieces:
            if p.state is RecordState.ACQUIRED and p.deadline is not None and p.txn is None:
                self._seq += 1
                heap.append((p.deadline, self._seq, p))
        heapq.heapify(heap)
        self._heap = heap

    def next_deadline(self) -> int | None:
        heap = self._heap
        while heap:
            deadline, _, piece = heap[0]
            if self._valid(deadline, piece):
                return deadline
            heapq.heappop(heap)
        return None

    def pop_expired(self, now_ms: int) -> Piece | None:
        """Next ACQUIRED piece whose lock deadline is <= now_ms (each piece at most once)."""
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            deadline, _, piece = heapq.heappop(heap)
            if self._valid(deadline, piece):
                return piece
        return None
