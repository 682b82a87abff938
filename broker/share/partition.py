"""The share-partition leader's state machine (KIP-932), pure and synchronous.

One ``SharePartition`` per (group, topic, partition). It owns the in-flight state between the share
partition start offset (SPSO) and end offset (SPEO) and reproduces Apache Kafka 4.2's behaviour
(spec sections 5.1-5.10). No I/O, no clock: operations that depend on time take ``now_ms``.

Durable changes are two-phase, as in Kafka: an acknowledgement or release marks pieces "in
transition" and returns a ``StateWrite`` (the content of one WriteShareGroupState call); the caller
persists it and then calls ``commit`` or ``rollback``. Pieces in transition are invisible to
acquisition, acknowledgement and SPSO movement. Lock expiry (``expire_locks``) applies its
transitions at once; its write must still be followed by ``commit`` or ``rollback`` (both advance
SPSO, because Kafka ignores expiry write failures).

Timers: the caller arms one timer at ``next_lock_deadline()`` and calls ``expire_locks(now)`` when
it fires. A lock counts as expired only once ``expire_locks`` has run for it (as in Kafka, where the
timer thread and an acknowledgement race); callers that want strictness run ``expire_locks(now)``
before every operation, which is O(1) when nothing is due.

Offsets conventions (Kafka's): ``end_offset`` (SPEO) is the last offset ever cached/acquired; when
the cache is empty it equals ``start_offset`` (so the next fetch offset is SPEO, not SPEO + 1).

Where we knowingly differ from Kafka 4.2 (never observable through the RPCs unless noted):
- exploded batches are a few ranges, re-merged when identical, and ranges wholly passed by SPSO are
  pruned even when the rest of their batch stays (Kafka drops whole batches only);
- SPSO never moves backwards, new records are never acquired below SPSO, and the persister gap
  window follows a log start movement (Kafka can violate each in rare log-start-offset races);
- a failed write's rollback also runs SPSO advancement (Kafka waits for the next write), and a
  rolled-back record whose lock expired below SPSO becomes ARCHIVED;

Dead-letter queue (KIP-1191, share.version 2, ``ShareLimits.dlq``): a rejected record, or one released
or expired at the delivery count limit, goes to ARCHIVING instead of ARCHIVED. ARCHIVING is durable and
not terminal (SPSO stops at it); the leader writes the record to the DLQ topic, then calls
``finish_archiving``. Persisted ARCHIVING batches stay ARCHIVING at initialisation so the leader can
finish them (exactly once: see broker/share/dead_letters.py).
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from sharebroker.broker.share.inflight import TERMINAL_STATES, InFlightMap, Piece, RecordState, Txn
from sharebroker.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "AcknowledgeType",
    "AcquireMode",
    "AcquiredRange",
    "LogBatch",
    "PersistedBatch",
    "RecordState",
    "ShareLimits",
    "SharePartition",
    "StateWrite",
    "validate_acknowledgement_batches",
]

AVAILABLE = RecordState.AVAILABLE
ACQUIRED = RecordState.ACQUIRED
ACKNOWLEDGED = RecordState.ACKNOWLEDGED
ARCHIVING = RecordState.ARCHIVING
ARCHIVED = RecordState.ARCHIVED


class AcknowledgeType(IntEnum):
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class AcquireMode(IntEnum):
    BATCH_OPTIMIZED = 0
    RECORD_LIMIT = 1


_ACK_TARGET = {
    AcknowledgeType.GAP: ARCHIVED,
    AcknowledgeType.ACCEPT: ACKNOWLEDGED,
    AcknowledgeType.RELEASE: AVAILABLE,
    AcknowledgeType.REJECT: ARCHIVED,
}


@dataclass(slots=True)  # not frozen: a fetch makes one per batch read, and frozen's __init__ costs 3x
class LogBatch:
    """A stored record batch from the log read: base offset .. last offset (inclusive)."""
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class PersistedBatch:
    """A state batch in the persister's format (state 0 AVAILABLE, 2 ACKNOWLEDGED, 3 ARCHIVING, 4 ARCHIVED)."""
    first_offset: int
    last_offset: int
    state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareLimits:
    """Group/broker settings, read by the caller for every call (they may change dynamically)."""
    record_lock_duration_ms: int
    delivery_count_limit: int
    max_in_flight_records: int
    renew_enabled: bool = True
    read_committed: bool = False  # share.isolation.level
    dlq: bool = False  # share.version >= 2 and errors.deadletterqueue.topic.name set


@dataclass(eq=False)
class StateWrite:
    """What one WriteShareGroupState call must persist, plus the transitions it settles.

    ``start_offset`` and ``delivery_complete_count`` are the values at the time the write was
    built (Kafka persists SPSO lazily, with the next write). ``batches`` are the changed ranges with
    their new state and delivery count. ``kind`` is "acknowledge", "release", "expiry" or "init".
    """
    start_offset: int
    delivery_complete_count: int
    batches: list[PersistedBatch]
    kind: str = "acknowledge"
    _txn: Txn | None = field(default=None, repr=False)
    _settled: bool = field(default=False, repr=False)
    expired: int = 0  # an expiry write: records whose lock ran out
    expired_at_limit: int = 0  # ... of which archived at the delivery count limit

    @property
    def archived_at_limit(self) -> int:
        """Records this write archives because they reached share.delivery.count.limit."""
        return self._txn.at_limit if self._txn is not None else self.expired_at_limit


def validate_acknowledgement_batches(
    batches: Iterable[tuple[int, int, Sequence[int]]], *, version: int, is_renew: bool
) -> str | None:
    """Request-level checks of one partition's acknowledgement batches (spec 5.7 A).

    Returns an error message (the partition is answered ErrorCode.invalid_request) or None. ``version`` is
    the ShareFetch/ShareAcknowledge version: RENEW (4) exists from v2.
    """
    prev_last = -1
    max_type = 4 if version >= 2 else 3
    for first, last, types in batches:
        if first > last:
            return f"Acknowledgement batch first offset {first} is greater than last offset {last}."
        if first < prev_last:
            return (f"Acknowledgement batches are not in ascending order or overlap: first offset {first} "
                    f"is below the previous batch's last offset {prev_last}.")
        if not types:
            return f"Acknowledgement batch {first}-{last} has no acknowledge types."
        if len(types) > 1 and last - first + 1 != len(types):
            return (f"Acknowledgement batch {first}-{last} has {len(types)} acknowledge types; "
                    f"expected 1 or {last - first + 1}.")
        if any(t < 0 or t > max_type for t in types):
            return f"Invalid acknowledge type in batch {first}-{last}: {list(types)}."
        if not is_renew and any(t == AcknowledgeType.RENEW for t in types):
            return "Acknowledge type RENEW is only allowed when IsRenewAck is true."
        prev_last = last
    return None


def _coalesce_batches(items: list[PersistedBatch]) -> list[PersistedBatch]:
    items.sort(key=lambda b: b.first_offset)
    out: list[PersistedBatch] = []
    for b in items:
        if out:
            p = out[-1]
            if p.last_offset + 1 == b.first_offset and p.state == b.state and p.delivery_count == b.delivery_count:
                out[-1] = PersistedBatch(p.first_offset, b.last_offset, p.state, p.delivery_count)
                continue
        out.append(b)
    return out


class _LogBatches:
    """Bisect helper over the fetched log batches (rounding up to batch ends, splitting points)."""

    __slots__ = ("batches", "firsts")

    def __init__(self, batches: Sequence[LogBatch]) -> None:
        self.batches = batches
        self.firsts = [b.first_offset for b in batches]

    def batch_end(self, offset: int) -> int:
        """Last offset of the log batch containing offset; offset itself if none does."""
        i = bisect_right(self.firsts, offset) - 1
        if i >= 0 and offset <= self.batches[i].last_offset:
            return self.batches[i].last_offset
        return offset

    def split_points(self, first: int, last: int, batch_size: int) -> list[tuple[int, int]]:
        """Split [first, last] at log-batch boundaries each time BatchSize records accumulated."""
        out: list[tuple[int, int]] = []
        cur = first
        lo = bisect_right(self.firsts, first)
        for i in range(lo, len(self.batches)):
            base = self.firsts[i]
            if base > last:
                break
            if base - cur >= batch_size:
                out.append((cur, base - 1))
                cur = base
        out.append((cur, last))
        return out


class SharePartition:
    """In-flight state of one share partition (the leader-side state machine)."""

    def __init__(self, *, start_offset: int, persisted: Iterable[PersistedBatch] = (),
                 end_offset_hint: int | None = None) -> None:
        """Initialise from the persister's state (spec 5.3).

        Raises ValueError (Kafka: the partition becomes FAILED) for a batch below ``start_offset``,
        a batch with last < first, overlapping batches or a state that is never persisted.
        ``end_offset_hint`` (e.g. the log end offset) is kept for diagnostics only: Kafka derives
        SPEO from the persisted batches alone (SPEO = SPSO when there are none).
        """
        if start_offset < 0:
            raise ValueError(f"invalid start offset {start_offset}")
        if end_offset_hint is not None and end_offset_hint < 0:
            raise ValueError(f"invalid end offset hint {end_offset_hint}")
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.delivery_complete_count = 0
        self.archiving = 0  # records in ARCHIVING: waiting for their DLQ write
        self.end_offset_hint = end_offset_hint
        self._map = InFlightMap()
        self._find_next = False
        self._gap_end: int | None = None
        self._gap_start = -1

        prev_last = start_offset - 1
        gap_start: int | None = None
        for b in sorted(persisted, key=lambda b: b.first_offset):
            if b.first_offset < start_offset:
                raise ValueError(f"state batch {b.first_offset}-{b.last_offset} starts below the start offset {start_offset}")
            if b.last_offset < b.first_offset:
                raise ValueError(f"state batch {b.first_offset}-{b.last_offset} has its last offset below its first")
            if b.first_offset <= prev_last:
                raise ValueError(f"state batch {b.first_offset}-{b.last_offset} overlaps the previous batch")
            try:
                state = RecordState(b.state)
            except ValueError:
                raise ValueError(f"state batch {b.first_offset}-{b.last_offset} has unknown state {b.state}") from None
            if state is ACQUIRED:
                raise ValueError(f"state batch {b.first_offset}-{b.last_offset} is ACQUIRED, which is never persisted")
            if b.delivery_count < 0:
                raise ValueError(f"state batch {b.first_offset}-{b.last_offset} has a negative delivery count")
            if gap_start is None and b.first_offset > prev_last + 1:
                gap_start = prev_last + 1
            prev_last = b.last_offset
            piece = Piece(b.first_offset, b.last_offset, state, b.delivery_count, "", None, b.first_offset, b.last_offset)
            self._map.insert(piece)
            if state in TERMINAL_STATES:
                self.delivery_complete_count += piece.size
            elif state is ARCHIVING:
                self.archiving += piece.size
        if self._map:
            self._find_next = True
            self.end_offset = self._map.pieces[-1].last
            if gap_start is not None:
                self._gap_end = self.end_offset
                self._gap_start = gap_start
            self._maybe_advance()

    # ---- queries -------------------------------------------------------------------------------

    def lag_complete(self) -> int:
        """deliveryCompleteCount: terminal records in [SPSO, SPEO] (used for lag)."""
        return self.delivery_complete_count

    def in_flight_count(self) -> int:
        """SPEO - SPSO + 1, or 0 when nothing is cached (what the in-flight limit counts)."""
        return self.end_offset - self.start_offset + 1 if self._map else 0

    def in_flight_batch_count(self) -> int:
        """In-flight state ranges (Kafka's InFlightBatchCount counts its cached batches)."""
        return len(self._map)

    def acquired_count(self) -> int:
        """Records ACQUIRED right now (walks the ranges: for a scrape, not for the hot path)."""
        return sum(p.last - p.first + 1 for p in self._map.pieces if p.state is ACQUIRED)

    def in_flight_ranges(self) -> list[tuple[int, int, RecordState, int, str]]:
        return [(p.first, p.last, p.state, p.count, p.owner) for p in self._map.pieces]

    def ranges(self) -> list[Piece]:
        """The cached state ranges in offset order, for the admin view to read (never to change)."""
        return self._map.pieces

    def in_transition_ranges(self) -> list[tuple[int, int]]:
        return [(p.first, p.last) for p in self._map.pieces if p.txn is not None]

    @property
    def gap_window(self) -> tuple[int, int] | None:
        """(gap start, end offset) of the persister read gap window while it is active."""
        if self._gap_end is None or not self._gap_active():
            return None
        return self._gap_start, self._gap_end

    def next_lock_deadline(self) -> int | None:
        return self._map.next_deadline()

    def persisted_state(self) -> list[PersistedBatch]:
        """Non-acquired, settled ranges at/after SPSO, for a full snapshot."""
        out: list[PersistedBatch] = []
        spso = self.start_offset
        for p in self._map.pieces:
            if p.last < spso or p.state is ACQUIRED or p.txn is not None:
                continue
            out.append(PersistedBatch(max(p.first, spso), p.last, int(p.state), p.count))
        return _coalesce_batches(out)

    def archiving_ranges(self) -> list[tuple[int, int, int, bool]]:
        """(first, last, delivery count, rejected) of the settled ARCHIVING ranges: what still goes
        to the DLQ; ``rejected`` is False for the delivery count limit and for state read back
        from the persister (which does not keep why)."""
        return [(p.first, p.last, p.count, p.rejected) for p in self._map.pieces
                if p.state is ARCHIVING and p.txn is None]

    def finish_archiving(self, ranges: Iterable[tuple[int, int]]) -> StateWrite | None:
        """ARCHIVING -> ARCHIVED for the settled ARCHIVING offsets in ``ranges`` (their DLQ write is
        done, or was given up). Applied at once, like lock expiry; the write persists it."""
        m = self._map
        out: list[PersistedBatch] = []
        lo: int | None = None
        hi: int | None = None
        for first, last in ranges:
            cur = first
            while cur <= last:
                i = m.index_at_or_after(cur)
                if i >= len(m) or m.pieces[i].first > last:
                    break
                p = m.pieces[i]
                seg_lo, seg_hi = max(cur, p.first), min(last, p.last)
                if p.state is ARCHIVING and p.txn is None:
                    q = m.pieces[m.isolate(i, seg_lo, seg_hi)]
                    q.rejected = False
                    self._set_state(q, ARCHIVED)
                    out.append(PersistedBatch(q.first, q.last, int(ARCHIVED), q.count))
                    lo = q.first if lo is None else min(lo, q.first)
                    hi = q.last if hi is None else max(hi, q.last)
                cur = seg_hi + 1
        if not out or lo is None or hi is None:
            return None
        m.coalesce(lo, hi)
        return StateWrite(*self._settled_start(None), _coalesce_batches(out), "archive")

    def next_fetch_offset(self) -> int:
        """Offset the next log read should start at (spec 5.4; Kafka's nextFetchOffset)."""
        m = self._map
        if not m or self.start_offset > m.pieces[-1].last:
            self._find_next = False
            return self.end_offset
        if not self._find_next:
            return self.end_offset + 1
        gap = self._gap_start if self._gap_active() else None
        pieces = m.pieces
        i = m.floor_batch_index(self.start_offset)
        i = m.batch_bounds(pieces[i].bfirst)[0] if i >= 0 else 0
        n = len(pieces)
        while i < n:
            bfirst, blast = pieces[i].bfirst, pieces[i].blast
            if gap is not None:
                if bfirst > gap:
                    return gap
                gap = max(blast + 1, gap)
            while i < n and pieces[i].bfirst == bfirst:
                p = pieces[i]
                if p.state is AVAILABLE and p.txn is None:
                    return max(p.first, self.start_offset)
                i += 1
        self._find_next = False
        return self.end_offset + 1

    def can_acquire(self, limits: ShareLimits) -> bool:
        """Kafka's canAcquireRecords: re-deliverable records exist, or the in-flight limit allows more."""
        if self.next_fetch_offset() != self.end_offset + 1:
            return True
        return self.in_flight_count() < limits.max_in_flight_records

    def read_through(self, fetch_offset: int, max_records: int, limits: ShareLimits) -> int:
        """The last offset an acquisition from ``fetch_offset`` can use: the log read stops at the
        batch holding it, so the cost of a fetch follows MaxRecords, never the backlog behind it.
        Records past it that a fuller read would have offered (available ones behind acquired
        ones) go to the next fetch; MaxRecords is a soft limit either way."""
        max_n, _ = self._acquire_window(fetch_offset, max_records, fetch_offset + max_records, limits)
        return fetch_offset + max(max_n, 1) - 1

    # ---- acquisition ---------------------------------------------------------------------------

    def acquire(self, member_id: str, batches: Sequence[LogBatch], *, max_records: int, batch_size: int,
                mode: AcquireMode, limits: ShareLimits, now_ms: int, fetch_offset: int | None = None,
                aborted_batches: Sequence[LogBatch] = ()) -> list[AcquiredRange]:
        """Acquire records from a log read (spec 5.4) and start their locks.

        ``batches`` are the whole log batches read from ``fetch_offset`` (default: the current
        ``next_fetch_offset()``); the first may start before it. ``aborted_batches`` (read_committed
        only) are batches of aborted transactions: acquired offsets in them are archived at once and
        cut out of the result.
        """
        if max_records <= 0 or not batches:
            return []
        if fetch_offset is None:
            fetch_offset = self.next_fetch_offset()
        last_fetched = batches[-1].last_offset
        if last_fetched < self.start_offset:
            return []
        max_n, last_to_acquire = self._acquire_window(fetch_offset, max_records, last_fetched, limits)
        if max_n <= 0:
            return []
        m = self._map
        log = _LogBatches(batches)
        rl = mode == AcquireMode.RECORD_LIMIT
        deadline = now_ms + limits.record_lock_duration_ms
        limit = limits.delivery_count_limit
        throttle_at = max(2, math.ceil(limit / 2))
        req_first = batches[0].first_offset

        self._archive_stale(fetch_offset, req_first)

        # Align with the cached batch that contains the first fetched offset, or clip to SPSO.
        base = req_first
        i = m.floor_batch_index(req_first)
        if i < 0:
            base = max(base, self.start_offset)
        elif m.pieces[i].blast >= req_first:
            base = m.pieces[i].bfirst
        keys = m.batches_between(min(req_first, base), last_to_acquire)
        if not keys:
            got, _ = self._acquire_new(member_id, log, rl, max(base, self.start_offset), last_to_acquire,
                                       batch_size, max_n, deadline)
            return self._cut_aborted(got, aborted_batches)

        result: list[AcquiredRange] = []
        acquired = 0
        gap_cursor = base
        for bfirst, blast in keys:
            if acquired >= max_n:
                break
            if self._gap_active():
                # Holes of the persister gap window are acquired as new records.
                if gap_cursor < bfirst:
                    got, n = self._acquire_new(member_id, log, rl, max(gap_cursor, self.start_offset), bfirst - 1,
                                               batch_size, max_n - acquired, deadline)
                    result.extend(got)
                    acquired += n
                gap_cursor = blast + 1
                if acquired >= max_n:
                    break
            gi, gj = m.batch_bounds(bfirst)
            head = m.pieces[gi]
            whole = gj - gi == 1 and head.first == bfirst and head.last == blast
            full_match = bfirst >= req_first and blast <= last_to_acquire
            rl_subset = rl and blast - bfirst + 1 > max_n - acquired
            throttle = self._should_throttle(gi, gj, req_first, last_to_acquire, throttle_at)
            if throttle and acquired > 0:
                # Deliver the throttled batch in a later fetch, on its own.
                max_n = 0
                break
            if not full_match or not whole or rl_subset or throttle:
                if whole and (head.state is not AVAILABLE or head.txn is not None):
                    continue
                got, n = self._acquire_subset(member_id, bfirst, blast, req_first, last_to_acquire, rl,
                                              max_n - acquired, throttle_at, limit, deadline)
                result.extend(got)
                acquired += n
                if throttle and n > 0:
                    max_n = 0
                    break
                continue
            if head.state is not AVAILABLE or head.txn is not None:
                continue
            self._set_state(head, ACQUIRED)
            head.count += 1
            head.owner = member_id
            head.deadline = deadline
            m.track_deadline(head)
            result.append(AcquiredRange(bfirst, blast, head.count))
            acquired += blast - bfirst + 1

        last_key_end = keys[-1][1]
        if acquired < max_n and last_key_end < last_to_acquire:
            got, n = self._acquire_new(member_id, log, rl, max(last_key_end + 1, self.start_offset),
                                       last_to_acquire, batch_size, max_n - acquired, deadline)
            result.extend(got)
            acquired += n
        if result:
            self._update_gap_start(result[-1].last_offset + 1)
            m.coalesce(result[0].first_offset, result[-1].last_offset)
            result = self._cut_aborted(result, aborted_batches)
        return result

    def _acquire_window(self, fetch_offset: int, max_records: int, last_fetched: int,
                        limits: ShareLimits) -> tuple[int, int]:
        """(max records to acquire, last offset to acquire) under the in-flight limit (5.4 step 2)."""
        max_n = min(max_records, limits.max_in_flight_records - self.in_flight_count())
        last = last_fetched
        if max_n <= 0 and fetch_offset <= self.end_offset:
            # Re-delivery inside the cache is allowed at the limit but never grows the window.
            max_n = min(max_records, self.end_offset - fetch_offset + 1)
            last = min(last_fetched, self.end_offset)
        return max_n, last

    def _should_throttle(self, gi: int, gj: int, lo: int, hi: int, throttle_at: int) -> bool:
        top = 0
        for k in range(gi, gj):
            p = self._map.pieces[k]
            if p.last < lo or p.first > hi:
                continue
            if p.state is AVAILABLE and p.txn is None and p.count > top:
                top = p.count
        return top >= throttle_at

    def _acquire_new(self, member_id: str, log: _LogBatches, rl: bool, first: int, last: int,
                     batch_size: int, max_n: int, deadline: int) -> tuple[list[AcquiredRange], int]:
        """Cache and acquire records never cached before: [first, last] (rounded, split, limited)."""
        m = self._map
        if not m and self.end_offset > first:
            first = self.end_offset
        if first > last or max_n <= 0:
            return [], 0
        last_acq = last
        if max_n < last_acq - first + 1:
            # MaxRecords is soft: round up to the end of the log batch holding the limit.
            last_acq = log.batch_end(first + max_n - 1)
            if self._gap_active() and last_acq > last:
                last_acq = last
        nxt = m.index_at_or_after(first)
        if nxt < len(m) and m.pieces[nxt].first <= last_acq:
            if m.pieces[nxt].first <= first:
                return [], 0
            last_acq = m.pieces[nxt].first - 1  # never overlap cached state
        if rl:
            spans = [(first, last_acq)]
        elif batch_size > 0 and last_acq - first + 1 > batch_size:
            spans = log.split_points(first, last_acq, batch_size)
        else:
            spans = [(first, last_acq)]

        result: list[AcquiredRange] = []
        acquired_last = last_acq
        if rl and last_acq - first + 1 > max_n:
            # Record-limit mode: cache the whole log batch, acquire exactly max_n records of it.
            acquired_last = first + max_n - 1
            m.insert(Piece(first, acquired_last, ACQUIRED, 1, member_id, deadline, first, last_acq))
            m.insert(Piece(acquired_last + 1, last_acq, AVAILABLE, 0, "", None, first, last_acq))
            self._find_next = True
            result.append(AcquiredRange(first, acquired_last, 1))
        else:
            for f, l in spans:
                m.insert(Piece(f, l, ACQUIRED, 1, member_id, deadline, f, l))
                result.append(AcquiredRange(f, l, 1))
        if m.pieces[0].first == first and first > self.start_offset:
            self.start_offset = first  # nothing cached below: SPSO follows the first record
        if last_acq > self.end_offset:
            self.end_offset = last_acq
        self._update_gap_start(acquired_last + 1)
        return result, acquired_last - first + 1

    def _acquire_subset(self, member_id: str, bfirst: int, blast: int, req_first: int, req_last: int,
                        rl: bool, remaining: int, throttle_at: int, limit: int,
                        deadline: int) -> tuple[list[AcquiredRange], int]:
        """Acquire the AVAILABLE parts of one cached batch inside [req_first, req_last] (exploding it)."""
        m = self._map
        lo = max(req_first, bfirst, self.start_offset)
        hi = min(req_last, blast)
        batch_records = blast - bfirst + 1
        out: list[AcquiredRange] = []
        acquired = 0
        throttle_cap: int | None = None
        cur = lo
        while cur <= hi:
            i = m.index_at_or_after(cur)
            if i >= len(m):
                break
            p = m.pieces[i]
            if p.bfirst != bfirst or p.first > hi:
                break
            seg_lo = max(cur, p.first)
            seg_hi = min(hi, p.last)
            if p.state is not AVAILABLE or p.txn is not None:
                cur = seg_hi + 1
                continue
            c = p.count
            if limit > 2 and c == limit - 1 and acquired > 0:
                break  # a record on its last attempt is delivered alone
            if c >= throttle_at and throttle_cap is None:
                throttle_cap = max(1, batch_records >> (c - throttle_at + 1))
            n = seg_hi - seg_lo + 1
            alone = limit > 2 and c + 1 == limit
            if alone:
                n = 1
            if rl:
                n = min(n, remaining - acquired)
            if throttle_cap is not None and acquired < throttle_cap:
                n = min(n, throttle_cap - acquired)
            k = m.isolate(i, seg_lo, seg_lo + n - 1)
            q = m.pieces[k]
            self._set_state(q, ACQUIRED)
            q.count = c + 1
            q.owner = member_id
            q.deadline = deadline
            m.track_deadline(q)
            if out and out[-1].last_offset + 1 == q.first and out[-1].delivery_count == q.count:
                out[-1] = AcquiredRange(out[-1].first_offset, q.last, q.count)
            else:
                out.append(AcquiredRange(q.first, q.last, q.count))
            acquired += n
            if alone or (rl and acquired >= remaining) or (throttle_cap is not None and acquired == throttle_cap):
                break
            cur = seg_lo + n
        return out, acquired

    def _cut_aborted(self, result: list[AcquiredRange], aborted: Sequence[LogBatch]) -> list[AcquiredRange]:
        """Archive acquired offsets of aborted-transaction batches and drop them from the result."""
        if not aborted or not result:
            return result
        m = self._map
        for b in aborted:
            cur = b.first_offset
            while cur <= b.last_offset:
                i = m.index_at_or_after(cur)
                if i >= len(m) or m.pieces[i].first > b.last_offset:
                    break
                p = m.pieces[i]
                lo, hi = max(cur, p.first), min(b.last_offset, p.last)
                if p.state is ACQUIRED and p.txn is None:
                    q = m.pieces[m.isolate(i, lo, hi)]
                    self._set_state(q, ARCHIVED)
                    q.owner = ""
                    q.deadline = None
                cur = hi + 1
            m.coalesce(b.first_offset, b.last_offset)
        out: list[AcquiredRange] = []
        cuts = sorted((b.first_offset, b.last_offset) for b in aborted)
        for r in result:
            pieces = [(r.first_offset, r.last_offset)]
            for cf, cl in cuts:
                nxt = []
                for f, l in pieces:
                    if cl < f or cf > l:
                        nxt.append((f, l))
                        continue
                    if f < cf:
                        nxt.append((f, cf - 1))
                    if l > cl:
                        nxt.append((cl + 1, l))
                pieces = nxt
            out.extend(AcquiredRange(f, l, r.delivery_count) for f, l in pieces)
        return out

    # ---- acknowledgement -----------------------------------------------------------------------

    def acknowledge(self, member_id: str, batches: Sequence[tuple[int, int, Sequence[int]]], *,
                    limits: ShareLimits, now_ms: int, is_renew: bool = False) -> StateWrite | None:
        """Apply one request's acknowledgement batches for this partition (spec 5.7 B).

        The first invalid batch raises KafkaError after rolling back every transition this call
        started. Returns the write to persist, or None when nothing needs persisting (everything
        below SPSO, or only RENEW: renewals restart the lock at once and persist nothing).
        """
        txn = Txn()
        out: list[PersistedBatch] = []
        try:
            for first, last, types in batches:
                types = list(types)
                if not types or any(t < 0 or t > AcknowledgeType.RENEW for t in types):
                    raise KafkaError(ErrorCode.invalid_request, f"Invalid acknowledge type: {types}")
                if first > last or (len(types) > 1 and len(types) != last - first + 1):
                    raise KafkaError(ErrorCode.invalid_request, f"Invalid acknowledgement batch {first}-{last} with types {types}")
                if not is_renew and AcknowledgeType.RENEW in types:
                    raise KafkaError(ErrorCode.invalid_request, "Acknowledge type RENEW is only allowed when IsRenewAck is true.")
                if last < self.start_offset:
                    continue  # already complete: silently ignored
                self._acknowledge_batch(member_id, first, last, types, txn, out, limits, now_ms)
        except KafkaError:
            self._rollback_txn(txn, limits, now_ms)
            if batches:
                self._map.coalesce(min(b[0] for b in batches), max(b[1] for b in batches))
            raise
        if not txn.pieces:
            return None
        return StateWrite(*self._settled_start(txn), _coalesce_batches(out), "acknowledge", txn)

    def _acknowledge_batch(self, member_id: str, first: int, last: int, types: list[int], txn: Txn,
                           out: list[PersistedBatch], limits: ShareLimits, now_ms: int) -> None:
        m = self._map
        spso = self.start_offset
        i = m.floor_batch_index(first)
        if i < 0:
            if first < spso <= last:
                i = m.floor_batch_index(spso)
            if i < 0:
                raise KafkaError(ErrorCode.invalid_record_state,
                                 "Batch record not found. The request batch offsets are not found in the cache.")
        pieces = m.pieces
        keys = m.batches_between(pieces[i].bfirst, last)
        if keys[-1][1] < first:
            raise KafkaError(ErrorCode.invalid_request, "Batch record not found. The first offset in request is past acquired records.")
        if last > keys[-1][1]:
            raise KafkaError(ErrorCode.invalid_request, "Batch record not found. The last offset in request is past acquired records.")
        per_offset_types = len(types) > 1
        for bfirst, blast in keys:
            if blast < self.start_offset:
                continue
            gi, gj = m.batch_bounds(bfirst)
            head = m.pieces[gi]
            whole = gj - gi == 1 and head.first == bfirst and head.last == blast
            if whole:
                if head.owner == "":
                    raise KafkaError(ErrorCode.invalid_record_state,
                                     "The batch cannot be acknowledged. The batch is not in the acquired state.")
                if head.owner != member_id:
                    raise KafkaError(ErrorCode.invalid_record_state, "Member is not the owner of batch record")
                if head.txn is not None:
                    raise KafkaError(ErrorCode.invalid_record_state,
                                     "The record state is invalid. The acknowledgement of delivery could not be completed.")
            full_match = bfirst >= first and blast <= last
            start_moved = bfirst < self.start_offset <= blast
            if not full_match or not whole or per_offset_types or start_moved:
                if whole and head.state is not ACQUIRED:
                    raise KafkaError(ErrorCode.invalid_record_state,
                                     "The batch cannot be acknowledged. The subset batch is not in the acquired state.")
                lo = max(first, bfirst, self.start_offset)
                hi = min(last, blast)
                self._acknowledge_offsets(member_id, first, lo, hi, types, txn, out, limits, now_ms)
                continue
            if head.state is not ACQUIRED:
                raise KafkaError(ErrorCode.invalid_record_state,
                                 "The batch cannot be acknowledged. The batch is not in the acquired state.")
            ack = AcknowledgeType(types[0])
            if ack is AcknowledgeType.RENEW:
                self._renew(head, limits, now_ms)
            else:
                self._start_transition(head, _ACK_TARGET[ack], txn, out, limits, reject=ack is AcknowledgeType.REJECT)

    def _acknowledge_offsets(self, member_id: str, first: int, lo: int, hi: int, types: list[int], txn: Txn,
                             out: list[PersistedBatch], limits: ShareLimits, now_ms: int) -> None:
        m = self._map
        cur = lo
        while cur <= hi:
            i = m.index_at_or_after(cur)
            p = m.pieces[i]
            if p.first > cur:  # a hole inside a batch cannot happen; be strict anyway
                raise KafkaError(ErrorCode.invalid_record_state, "The offset cannot be acknowledged. The offset is not acquired.")
            if p.state is not ACQUIRED:
                raise KafkaError(ErrorCode.invalid_record_state, "The offset cannot be acknowledged. The offset is not acquired.")
            if p.txn is not None:
                raise KafkaError(ErrorCode.invalid_record_state,
                                 "The record state is invalid. The acknowledgement of delivery could not be completed.")
            if p.owner != member_id:
                raise KafkaError(ErrorCode.invalid_record_state, "Member is not the owner of offset")
            seg_hi = min(hi, p.last)
            if len(types) == 1:
                runs = [(cur, seg_hi, types[0])]
            else:
                runs = []
                a = cur
                for t, grp in itertools.groupby(types[cur - first: seg_hi - first + 1]):
                    n = sum(1 for _ in grp)
                    runs.append((a, a + n - 1, t))
                    a += n
            for a, b, t in runs:
                ack = AcknowledgeType(t)
                if ack is AcknowledgeType.RENEW and not limits.renew_enabled:
                    raise KafkaError(ErrorCode.invalid_record_state, "Renewing acquisition locks is not enabled for the group.")
                k = m.isolate(m.index_at_or_after(a), a, b)
                q = m.pieces[k]
                if ack is AcknowledgeType.RENEW:
                    self._renew(q, limits, now_ms)
                else:
                    self._start_transition(q, _ACK_TARGET[ack], txn, out, limits, reject=ack is AcknowledgeType.REJECT)
            cur = seg_hi + 1

    def _renew(self, p: Piece, limits: ShareLimits, now_ms: int) -> None:
        if not limits.renew_enabled:
            raise KafkaError(ErrorCode.invalid_record_state, "Renewing acquisition locks is not enabled for the group.")
        p.deadline = now_ms + limits.record_lock_duration_ms
        self._map.track_deadline(p)

    # ---- release on session close --------------------------------------------------------------

    def release_member(self, member_id: str, *, limits: ShareLimits, now_ms: int) -> StateWrite | None:
        """Release every record ACQUIRED by member_id (spec 5.9); one write, or None."""
        m = self._map
        txn = Txn()
        out: list[PersistedBatch] = []
        i = 0
        while i < len(m):
            p = m.pieces[i]
            if p.state is not ACQUIRED or p.owner != member_id or p.txn is not None:
                i += 1
                continue
            spso = self.start_offset
            if p.first < spso <= p.last:
                k = m.split(i, spso)
                self._start_transition(m.pieces[i], ARCHIVED, txn, out, limits)
                self._start_transition(m.pieces[k], AVAILABLE, txn, out, limits)
                i = k + 1
                continue
            self._start_transition(p, ARCHIVED if p.last < spso else AVAILABLE, txn, out, limits)
            i += 1
        if not txn.pieces:
            return None
        return StateWrite(*self._settled_start(txn), _coalesce_batches(out), "release", txn)

    # ---- lock expiry ---------------------------------------------------------------------------

    def expire_locks(self, *, limits: ShareLimits, now_ms: int) -> StateWrite | None:
        """Expire every lock whose deadline is <= now_ms (spec 5.5).

        Transitions apply at once (AVAILABLE, or ARCHIVED below SPSO / at the delivery limit) and
        stay even if the returned write fails; call commit or rollback afterwards to advance SPSO.
        """
        m = self._map
        out: list[PersistedBatch] = []
        lo: int | None = None
        hi: int | None = None
        expired = at_limit = 0
        limit = limits.delivery_count_limit
        while (p := m.pop_expired(now_ms)) is not None:
            i = m.index_of(p)
            for q in self._expire_piece(i, limits):
                out.append(PersistedBatch(q.first, q.last, int(q.state), q.count))
                lo = q.first if lo is None else min(lo, q.first)
                hi = q.last if hi is None else max(hi, q.last)
                expired += q.last - q.first + 1
                if q.state is not AVAILABLE and q.count >= limit:
                    at_limit += q.last - q.first + 1
        if not out or lo is None or hi is None:
            return None
        m.coalesce(lo, hi)
        return StateWrite(*self._settled_start(None), _coalesce_batches(out), "expiry",
                          expired=expired, expired_at_limit=at_limit)

    def _expire_piece(self, i: int, limits: ShareLimits) -> list[Piece]:
        """Move piece i out of ACQUIRED after its lock expired (split at SPSO if needed)."""
        m = self._map
        p = m.pieces[i]
        spso = self.start_offset
        parts = [p]
        if p.first < spso <= p.last:
            parts.append(m.pieces[m.split(i, spso)])
        for q in parts:
            if q.last < spso:
                target = ARCHIVED
            elif q.count >= limits.delivery_count_limit:
                target = ARCHIVING if limits.dlq else ARCHIVED
            else:
                target = AVAILABLE
                self._find_next = True
            self._set_state(q, target)
            q.owner = ""
            q.deadline = None
        return parts

    # ---- settling writes -----------------------------------------------------------------------

    def commit(self, write: StateWrite, *, now_ms: int) -> None:
        """The write succeeded: commit its transitions, then advance SPSO (5.7 C, 5.8)."""
        if write._settled:
            raise ValueError("state write already settled")
        write._settled = True
        txn = write._txn
        if txn is not None:
            lo: int | None = None
            hi: int | None = None
            for p in txn.pieces:
                if not p.alive or p.txn is not txn:
                    continue
                p.txn = None
                p.prev = None
                p.forced = False
                p.deadline = None
                if p.state is AVAILABLE:
                    self._find_next = True
                lo = p.first if lo is None else min(lo, p.first)
                hi = p.last if hi is None else max(hi, p.last)
            if lo is not None and hi is not None:
                self._map.coalesce(lo, hi)
        self._maybe_advance()

    def rollback(self, write: StateWrite, *, limits: ShareLimits, now_ms: int) -> None:
        """The write failed: restore previous states, except records whose lock expired meanwhile
        (AVAILABLE, or ARCHIVED at the delivery limit / below SPSO). Expiry writes keep their
        transitions (Kafka ignores their failure)."""
        if write._settled:
            raise ValueError("state write already settled")
        write._settled = True
        if write._txn is not None:
            self._rollback_txn(write._txn, limits, now_ms)
        self._maybe_advance()

    def _rollback_txn(self, txn: Txn, limits: ShareLimits, now_ms: int) -> None:
        m = self._map
        lo: int | None = None
        hi: int | None = None
        for p in list(txn.pieces):
            if not p.alive or p.txn is not txn:
                continue
            prev_state, prev_count, prev_owner, prev_deadline = p.prev  # type: ignore[misc]
            p.txn = None
            p.prev = None
            p.rejected = False
            lo = p.first if lo is None else min(lo, p.first)
            hi = p.last if hi is None else max(hi, p.last)
            if p.forced:
                p.forced = False  # archived by log start movement/compaction meanwhile: stays ARCHIVED
                continue
            p.count = prev_count
            if prev_state is ACQUIRED and prev_deadline is not None and prev_deadline <= now_ms:
                self._expire_piece(m.index_of(p), limits)
                continue
            self._set_state(p, prev_state)
            p.owner = prev_owner
            p.deadline = prev_deadline
            if prev_state is AVAILABLE:
                self._find_next = True
            m.track_deadline(p)
        if lo is not None and hi is not None:
            m.coalesce(lo, hi)

    def _start_transition(self, p: Piece, target: RecordState, txn: Txn, out: list[PersistedBatch],
                          limits: ShareLimits, *, reject: bool = False) -> None:
        if target is AVAILABLE and p.count >= limits.delivery_count_limit:
            target = ARCHIVING if limits.dlq else ARCHIVED
            txn.at_limit += p.last - p.first + 1
        elif reject and limits.dlq:
            target = ARCHIVING
            p.rejected = True
        p.prev = (p.state, p.count, p.owner, p.deadline)
        p.txn = txn
        txn.pieces.append(p)
        self._set_state(p, target)
        p.owner = ""
        p.deadline = None
        out.append(PersistedBatch(p.first, p.last, int(target), p.count))

    # ---- log start offset movement and compaction ---------------------------------------------

    def move_log_start(self, log_start_offset: int) -> None:
        """The log start offset moved past SPSO (DeleteRecords, retention): spec 5.10.

        AVAILABLE records below it are archived (not persisted eagerly); ACQUIRED ones are archived
        at expiry/release; SPSO (and SPEO if behind) move to it.
        """
        if log_start_offset <= self.start_offset:
            return
        if not self._map:
            self.start_offset = self.end_offset = log_start_offset
            self.delivery_complete_count = 0
            self._move_gap_window(log_start_offset)
            return
        if self._archive_available(self.start_offset, log_start_offset - 1):
            self._find_next = True
        self.delivery_complete_count -= self._terminal_between(self.start_offset, log_start_offset - 1)
        self.start_offset = log_start_offset
        if self.end_offset < self.start_offset:
            self.end_offset = self.start_offset
        self._move_gap_window(log_start_offset)

    def _move_gap_window(self, offset: int) -> None:
        if self._gap_end is not None and self._gap_start < offset:
            if offset > self._gap_end:
                self._gap_end = None
            else:
                self._gap_start = offset

    def _archive_stale(self, fetch_offset: int, base_offset: int) -> None:
        """Compaction: cached AVAILABLE records between the fetch offset and the first returned
        batch no longer exist in the log; archive them (5.4 step 3)."""
        if not self._map or fetch_offset >= base_offset:
            return
        if self._archive_available(fetch_offset, base_offset - 1):
            self._find_next = True

    def _archive_available(self, lo: int, hi: int) -> bool:
        m = self._map
        any_archived = False
        cur = lo
        while cur <= hi:
            i = m.index_at_or_after(cur)
            if i >= len(m) or m.pieces[i].first > hi:
                break
            p = m.pieces[i]
            seg_lo, seg_hi = max(cur, p.first), min(hi, p.last)
            if p.state is AVAILABLE:
                q = m.pieces[m.isolate(i, seg_lo, seg_hi)]
                if q.txn is not None:
                    q.forced = True
                self._set_state(q, ARCHIVED)
                q.owner = ""
                q.deadline = None
                any_archived = True
            cur = seg_hi + 1
        if any_archived:
            m.coalesce(lo, hi)
        return any_archived

    def _terminal_between(self, lo: int, hi: int) -> int:
        m = self._map
        total = 0
        i = m.index_at_or_after(lo)
        while i < len(m):
            p = m.pieces[i]
            if p.first > hi:
                break
            if p.state in TERMINAL_STATES:
                total += min(hi, p.last) - max(lo, p.first) + 1
            i += 1
        return total

    # ---- SPSO advancement ----------------------------------------------------------------------

    def _maybe_advance(self) -> bool:
        """Advance SPSO over the terminal prefix of the cache and prune it (spec 5.8)."""
        step = self._advance_step(None)
        if step is None:
            return False
        j, new, removed_terminal = step
        m = self._map
        if j == len(m):
            self.start_offset = self.end_offset = new
            m.clear()
            self.delivery_complete_count = 0
            self._gap_end = None
            return True
        self.delivery_complete_count -= removed_terminal
        m.remove_prefix(j)
        self.start_offset = new
        return True

    def _settled_start(self, txn: Txn | None) -> tuple[int, int]:
        """(SPSO, deliveryCompleteCount) as they will be once ``txn`` commits: what its write
        persists, so the persisted start offset moves with the acknowledgement that moves it."""
        step = self._advance_step(txn)
        if step is None:
            return self.start_offset, self.delivery_complete_count
        j, new, removed_terminal = step
        if j == len(self._map):
            return new, 0
        return new, self.delivery_complete_count - removed_terminal

    def _advance_step(self, txn: Txn | None) -> tuple[int, int, int] | None:
        """(pieces to prune, new SPSO, terminal records passed) for the terminal prefix at SPSO,
        counting the pieces in transition under ``txn`` as committed; None when SPSO stays.
        Amortised O(1): the pieces it walks are pruned when the advance is applied."""
        m = self._map
        if not m:
            return None
        spso = self.start_offset
        i = m.floor_index(spso)
        if i < 0:
            return None  # a persister gap at SPSO
        p = m.pieces[i]
        if (p.txn is not None and p.txn is not txn) or p.state not in TERMINAL_STATES:
            return None
        gap = self._gap_start if self._gap_active() else None
        pieces = m.pieces
        n = len(pieces)
        j = 0
        removed_terminal = 0
        while j < n:
            p = pieces[j]
            if gap is not None and p.blast >= gap:
                break
            if (p.txn is not None and p.txn is not txn) or p.state not in TERMINAL_STATES:
                break
            if p.last >= spso:
                removed_terminal += p.last - max(p.first, spso) + 1
            j += 1
        if j == 0:
            return None
        last_done = pieces[j - 1]
        if j == n:
            return j, max(spso, last_done.last + 1), removed_terminal
        if last_done.last == last_done.blast:
            new = max(spso, pieces[j].first)
            if gap is not None:
                new = max(spso, min(gap, new))
        else:
            new = max(spso, last_done.last + 1)
        return j, new, removed_terminal

    # ---- helpers -------------------------------------------------------------------------------

    def _gap_active(self) -> bool:
        return self._gap_end is not None and self._gap_end == self.end_offset

    def _update_gap_start(self, offset: int) -> None:
        if self._gap_end is None:
            return
        if self._gap_end == self.end_offset and offset <= self._gap_end:
            self._gap_start = offset
        else:
            self._gap_end = None

    def _set_state(self, p: Piece, state: RecordState) -> None:
        """Change a piece's state, keeping deliveryCompleteCount = terminal records at/after SPSO."""
        if p.state is ARCHIVING:
            self.archiving -= p.size
        if state is ARCHIVING:
            self.archiving += p.size
        was = p.state in TERMINAL_STATES
        now = state in TERMINAL_STATES
        if was != now and p.last >= self.start_offset:
            n = p.last - max(p.first, self.start_offset) + 1
            self.delivery_complete_count += n if now else -n
        p.state = state
