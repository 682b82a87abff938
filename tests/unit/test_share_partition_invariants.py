"""Randomised operation sequences against SharePartition, checking structural invariants.

Catches bookkeeping bugs in range splitting/merging that scenario tests miss: pieces stay sorted and
contiguous per batch, deliveryCompleteCount equals the terminal records at/after SPSO, the lock
deadline heap agrees with the pieces, completed records are never delivered again, and delivery
counts grow by exactly one per acquisition and never beyond the limit.
"""

from __future__ import annotations

import random

import pytest

from sharebroker.broker.share.inflight import TERMINAL_STATES, RecordState
from sharebroker.broker.share.partition import AcquireMode, LogBatch, PersistedBatch, ShareLimits, SharePartition
from sharebroker.protocol.errors import KafkaError

LOCK = 1000


def make_log(rng: random.Random, n: int) -> list[LogBatch]:
    out, cur = [], 0
    while cur < n:
        size = rng.randint(1, 8)
        out.append(LogBatch(cur, min(n - 1, cur + size - 1)))
        cur += size
    return out


def read_log(log: list[LogBatch], offset: int, rng: random.Random, log_start: int) -> list[LogBatch]:
    batches = [b for b in log if b.last_offset >= max(offset, log_start)]
    return batches[: rng.randint(1, 6)]


def check_invariants(sp: SharePartition, prev_spso: int) -> None:
    m = sp._map
    pieces = m.pieces
    assert m.firsts == [p.first for p in pieces]
    for a, b in zip(pieces, pieces[1:]):
        assert a.last < b.first, (a, b)
        if a.bfirst == b.bfirst:
            assert a.last + 1 == b.first, (a, b)
        else:
            assert a.blast == a.last and b.first == b.bfirst, (a, b)
    for i, p in enumerate(pieces):
        assert p.alive
        assert p.first <= p.last
        assert p.bfirst <= p.first and p.last <= p.blast
        if i > 0 and pieces[i - 1].bfirst != p.bfirst:
            assert p.first == p.bfirst
        if p.state is RecordState.ACQUIRED:
            assert p.owner != "" and p.deadline is not None and p.txn is None, p
        else:
            assert p.owner == "", p
        if p.state is RecordState.AVAILABLE:
            assert p.last >= sp.start_offset, p
        if p.txn is None:
            assert p.prev is None and not p.forced
    if pieces:
        assert pieces[-1].last <= sp.end_offset or sp.start_offset > pieces[-1].last
        assert pieces[-1].last == pieces[-1].blast
    terminal = sum(p.last - max(p.first, sp.start_offset) + 1 for p in pieces
                   if p.state in TERMINAL_STATES and p.last >= sp.start_offset)
    assert sp.delivery_complete_count == terminal
    assert sp.start_offset >= prev_spso
    assert sp.start_offset <= sp.end_offset
    deadlines = [p.deadline for p in pieces if p.state is RecordState.ACQUIRED]
    assert sp.next_lock_deadline() == (min(deadlines) if deadlines else None)


@pytest.mark.parametrize("seed", range(40))
def test_random_operations_keep_invariants(seed: int) -> None:
    rng = random.Random(seed)
    n = 300
    log = make_log(rng, n)
    limit = rng.choice([2, 3, 5])
    lim = ShareLimits(record_lock_duration_ms=LOCK, delivery_count_limit=limit,
                      max_in_flight_records=rng.choice([20, 60, 2000]), renew_enabled=rng.random() < 0.8)
    persisted: list[PersistedBatch] = []
    if rng.random() < 0.5:
        cur = 0
        while cur < 60:
            f = cur + rng.randint(0, 3)
            l = f + rng.randint(0, 5)
            persisted.append(PersistedBatch(f, l, rng.choice([0, 0, 2, 4]), rng.randint(0, limit - 1)))
            cur = l + 1
    sp = SharePartition(start_offset=0, persisted=persisted)
    counts: dict[int, int] = {}
    for b in persisted:
        for o in range(b.first_offset, b.last_offset + 1):
            counts[o] = b.delivery_count
    members = ["a", "b", "c"]
    pending: list = []
    now = 0
    log_start = 0
    prev_spso = sp.start_offset
    check_invariants(sp, prev_spso)

    for _ in range(400):
        now += rng.randint(0, 300)
        op = rng.random()
        if op < 0.35:
            offset = sp.next_fetch_offset()
            batches = read_log(log, offset, rng, log_start)
            if batches:
                mode = AcquireMode.RECORD_LIMIT if rng.random() < 0.3 else AcquireMode.BATCH_OPTIMIZED
                member = rng.choice(members)
                spso_before = sp.start_offset
                complete = {o for f, l, s, _, _ in sp.in_flight_ranges() if s in TERMINAL_STATES
                            for o in range(f, l + 1)}
                got = sp.acquire(member, batches, max_records=rng.randint(1, 30), batch_size=rng.randint(1, 20),
                                 mode=mode, limits=lim, now_ms=now, fetch_offset=offset)
                seen = set()
                for r in got:
                    assert r.first_offset >= sp.start_offset or r.first_offset >= log_start
                    for o in range(r.first_offset, r.last_offset + 1):
                        assert o not in seen
                        assert o >= spso_before and o not in complete, (o, r)
                        seen.add(o)
                        # +1 per acquisition; offsets never cached before (gaps) start from 0 or their
                        # persisted count
                        assert r.delivery_count == counts.get(o, 0) + 1, (o, r, counts.get(o))
                        counts[o] = r.delivery_count
                    assert r.delivery_count <= limit
        elif op < 0.6:
            member = rng.choice(members)
            mine = [(f, l) for f, l, s, _, o in sp.in_flight_ranges() if s is RecordState.ACQUIRED and o == member]
            if not mine and rng.random() < 0.7:
                continue
            items = []
            for f, l in mine[: rng.randint(1, 3)]:
                a = rng.randint(f, l)
                b = rng.randint(a, l)
                if rng.random() < 0.5:
                    types = [rng.choice([0, 1, 2, 3, 4])]
                else:
                    types = [rng.choice([0, 1, 2, 3, 4]) for _ in range(b - a + 1)]
                items.append((a, b, types))
            if rng.random() < 0.15:
                items.append((rng.randint(0, n), rng.randint(n, n + 10), [1]))  # likely invalid
            items.sort()
            try:
                w = sp.acknowledge(member, items, limits=lim, now_ms=now, is_renew=True)
            except KafkaError:
                w = None
            if w is not None:
                pending.append(w)
        elif op < 0.7:
            w = sp.release_member(rng.choice(members), limits=lim, now_ms=now)
            if w is not None:
                pending.append(w)
        elif op < 0.85:
            w = sp.expire_locks(limits=lim, now_ms=now)
            if w is not None:
                pending.append(w)
        elif op < 0.97:
            if pending:
                w = pending.pop(rng.randrange(len(pending)))
                if rng.random() < 0.75:
                    sp.commit(w, now_ms=now)
                else:
                    sp.rollback(w, limits=lim, now_ms=now)
        else:
            log_start = min(n, max(log_start, sp.start_offset) + rng.randint(1, 15))
            sp.move_log_start(log_start)
        check_invariants(sp, prev_spso)
        prev_spso = sp.start_offset

    # Drain: settle writes, then accept everything until the whole log is complete.
    for w in pending:
        sp.commit(w, now_ms=now)
    check_invariants(sp, prev_spso)
    for _ in range(2000):
        if sp.start_offset >= n:
            break
        now += LOCK
        w = sp.expire_locks(limits=lim, now_ms=now)
        if w is not None:
            sp.commit(w, now_ms=now)
        offset = sp.next_fetch_offset()
        batches = read_log(log, offset, rng, log_start)
        if not batches:
            break
        got = sp.acquire("z", batches, max_records=50, batch_size=50, mode=AcquireMode.BATCH_OPTIMIZED,
                         limits=lim, now_ms=now, fetch_offset=offset)
        if got:
            w = sp.acknowledge("z", [(r.first_offset, r.last_offset, [1]) for r in got], limits=lim, now_ms=now)
            if w is not None:
                sp.commit(w, now_ms=now)
        check_invariants(sp, prev_spso)
        prev_spso = sp.start_offset
    assert sp.start_offset >= n
    assert sp.in_flight_ranges() == []
    assert sp.delivery_complete_count == 0
