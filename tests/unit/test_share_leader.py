"""The share-partition leader through its seams (persister, clock, host) over a real partition log:
the cost of one-record jobs does not grow with the backlog (issue 10 defect 1), and a write that
fails or is fenced never makes the leader forget acquisitions or acknowledgements."""

from __future__ import annotations

import sys
import uuid
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from sharebroker.broker.share.leader import SharePartitionLeader, ack_runs
from sharebroker.broker.share.partition import AcquireMode, RecordState, ShareLimits
from tests.unit.share_leader_support import Host, ManualClock, MemoryPersister, append_jobs, open_partition
from sharebroker.protocol.errors import KafkaError

GROUP = "workers"
LOCK_MS = 30_000
LIMITS = ShareLimits(record_lock_duration_ms=LOCK_MS, delivery_count_limit=5, max_in_flight_records=2000)
ACCEPT, RELEASE = 1, 2


async def make_leader(tmp_path, jobs: int, persister: MemoryPersister | None = None, clock: ManualClock | None = None,
                      name: str = "jobs-0"):
    tid = uuid.uuid4()
    partition = open_partition(tmp_path / name, tid)
    append_jobs(partition, jobs)
    persister = persister or MemoryPersister()
    await persister.initialize(GROUP, tid, 0, 0, 0)
    clock = clock or ManualClock()
    host = Host(LIMITS)
    leader = SharePartitionLeader(host, persister, clock, GROUP, partition)
    await leader.ensure_loaded()
    return leader, persister, clock, host


def acquire(leader: SharePartitionLeader, member: str = "m1", n: int = 1):
    assert leader.try_fetch_lock()
    try:
        return leader.acquire(member, max_records=n, batch_size=n, mode=AcquireMode.BATCH_OPTIMIZED,
                              max_bytes=1 << 20).acquired
    finally:
        leader.release_fetch_lock()


def count_lines(fn) -> int:
    """Python lines executed by fn(): an operation count that does not depend on machine speed."""
    lines = 0

    def tracer(frame, event, arg):
        nonlocal lines
        if event == "line":
            lines += 1
        return tracer

    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
    return lines


async def job_cycles_cost(tmp_path, backlog: int, cycles: int = 40) -> int:
    """Lines executed by `cycles` rounds of: acquire one job, acknowledge it (the ack's state
    write included), with `backlog` one-record batches waiting behind."""
    leader, persister, _clock, _host = await make_leader(tmp_path, backlog, name=f"jobs-{backlog}")
    total = 0
    for _ in range(cycles):
        got: list = []
        total += count_lines(lambda got=got, leader=leader: got.extend(acquire(leader)))
        (r,) = got
        coro = leader.acknowledge("m1", [(r.first_offset, r.last_offset, [ACCEPT])], is_renew=False)
        # drive the coroutine under the tracer: the persister never really suspends here
        total += count_lines(lambda coro=coro: _drive(coro))
    assert leader.sp is not None and leader.sp.start_offset == cycles
    return total


def _drive(coro) -> None:
    try:
        while True:
            coro.send(None)
    except StopIteration:
        pass


async def test_cost_per_job_does_not_grow_with_the_backlog(tmp_path):
    small = await job_cycles_cost(tmp_path, 200)
    large = await job_cycles_cost(tmp_path, 12_000)
    # Before the fix every fetch walked up to a megabyte of batches: about 40x more lines here.
    assert large < small * 1.25, (small, large)


async def test_cost_per_job_does_not_grow_with_records_in_flight(tmp_path):
    """Jobs acquired by other members (up to the in-flight limit) sit in front of SPSO; acquiring
    and acknowledging one more must not scan them."""
    costs = []
    for held in (50, 1500):
        leader, *_ = await make_leader(tmp_path, held + 100, name=f"held-{held}")
        for _ in range(held):
            assert acquire(leader, "other")
        total = 0
        for _ in range(30):
            got: list = []
            total += count_lines(lambda got=got, leader=leader: got.extend(acquire(leader)))
            (r,) = got
            coro = leader.acknowledge("m1", [(r.first_offset, r.last_offset, [ACCEPT])], is_renew=False)
            total += count_lines(lambda coro=coro: _drive(coro))
        costs.append(total)
    assert costs[1] < costs[0] * 1.25, costs


async def test_failed_write_rolls_back_and_the_store_is_untouched(tmp_path):
    leader, persister, _clock, _host = await make_leader(tmp_path, 3)
    (r,) = acquire(leader, n=1)
    before = persister.store.summary((GROUP, leader.topic_id, 0))
    persister.fail_writes = 1
    with pytest.raises(KafkaError) as err:
        await leader.acknowledge("m1", [(r.first_offset, r.first_offset, [ACCEPT])], is_renew=False)
    assert err.value.code == ErrorCode.unknown_server_error
    assert persister.store.summary((GROUP, leader.topic_id, 0)) == before
    # still acquired by m1, with its delivery count: the acknowledgement can be retried
    assert leader.sp.in_flight_ranges()[0][:4] == (0, 0, RecordState.ACQUIRED, 1)
    await leader.acknowledge("m1", [(0, 0, [ACCEPT])], is_renew=False)
    assert persister.store.summary((GROUP, leader.topic_id, 0)).start_offset == 1


async def test_fenced_write_unloads_the_leader_and_keeps_durable_state(tmp_path):
    leader, persister, _clock, host = await make_leader(tmp_path, 3)
    acquire(leader, n=1)
    await leader.acknowledge("m1", [(0, 0, [ACCEPT])], is_renew=False)
    acquire(leader, n=1)
    persister.fence_writes = True
    with pytest.raises(KafkaError) as err:
        await leader.acknowledge("m1", [(1, 1, [ACCEPT])], is_renew=False)
    assert err.value.code == ErrorCode.not_leader_or_follower
    assert host.dropped == [leader] and leader.fenced
    # a new leader loads what was durable: 0 accepted, 1 not (its acknowledgement failed)
    persister.fence_writes = False
    again = SharePartitionLeader(host, persister, ManualClock(), GROUP, leader.partition)
    sp = await again.ensure_loaded()
    assert sp.start_offset == 1


async def test_lock_expiry_is_persisted_by_a_tracked_task_and_survives_restart(tmp_path):
    leader, persister, clock, host = await make_leader(tmp_path, 2)
    acquire(leader, n=2)
    clock.wall += 10 * LOCK_MS  # a wall-clock step expires nothing
    assert leader.sp.in_flight_ranges()[0][2] is RecordState.ACQUIRED
    clock.advance(LOCK_MS)  # the lock timer fires on the monotonic clock
    assert leader.sp.in_flight_ranges()[0][2] is RecordState.AVAILABLE
    assert leader._tasks  # the expiry write is referenced until it settles
    while leader._tasks:
        await next(iter(leader._tasks))
    durable = persister.restarted().store.states[(GROUP, leader.topic_id, 0)]
    assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in durable.batches] == [(0, 1, 0, 1)]
    # the next delivery counts the expired one
    (r,) = acquire(leader, n=2)
    assert r.delivery_count == 2


async def test_overlapping_acknowledgements_persist_the_start_offset_they_reach_together(tmp_path):
    """Issue 10 defect 4: two members' acknowledgements in flight at once each compute the start
    offset without the other's; once both settle, the persisted start offset is the leader's."""
    import asyncio

    leader, persister, _clock, _host = await make_leader(tmp_path, 4)
    persister.delay = 3
    a = acquire(leader, "m1", n=2)
    b = acquire(leader, "m2", n=2)
    assert (a[0].first_offset, b[0].first_offset) == (0, 2)
    await asyncio.gather(leader.acknowledge("m2", [(2, 3, [ACCEPT])], is_renew=False),
                         leader.acknowledge("m1", [(0, 1, [ACCEPT])], is_renew=False))
    while leader._tasks:
        await asyncio.gather(*leader._tasks)
    assert leader.sp.start_offset == 4
    assert persister.store.summary((GROUP, leader.topic_id, 0)).start_offset == 4


def test_ack_runs_split_an_acknowledgement_batch_by_type() -> None:
    # One type, given once or per offset: one run (no walk per offset for the usual batch).
    assert ack_runs(10, 14, [1]) == [(10, 14, 1)]
    assert ack_runs(10, 14, [2] * 5) == [(10, 14, 2)]
    # Mixed per-offset types: a run per change of type, covering every offset once.
    assert ack_runs(10, 16, [1, 1, 2, 3, 3, 3, 1]) == [(10, 11, 1), (12, 12, 2), (13, 15, 3), (16, 16, 1)]
    assert ack_runs(0, 1, [0, 1]) == [(0, 0, 0), (1, 1, 1)]


async def test_the_records_answered_are_the_batches_that_hold_what_was_acquired(tmp_path):
    """The acquisition's bytes come from the batch spans the log read walked (no second header
    parse): over batches of 1-4 records in several segments, with records acknowledged, released
    and acquired by others in between, every answer is exactly the stored batches that overlap the
    first to the last offset acquired, checked against the whole log parsed independently."""
    import random

    from sharebroker.broker.topics import Partition
    from sharebroker.protocol.record_batch import encode_batch, iter_batch_headers, parse_batches
    from sharebroker.storage import LogConfig, PartitionLog
    from tests.unit.share_leader_support import NOW_WALL

    rng = random.Random(932)
    tid = uuid.uuid4()
    plog = PartitionLog.open(tmp_path / "mixed-0", LogConfig(segment_bytes=2_000), recovery_point=0,
                             clean_shutdown=True, now_ms=NOW_WALL)
    partition = Partition(SimpleNamespace(name="mixed", topic_id=tid), 0, plog)  # type: ignore[arg-type]
    for i in range(300):
        buf = encode_batch([(None, b"job-%d-%d" % (i, k)) for k in range(rng.randint(1, 4))], timestamp_ms=NOW_WALL)
        plog.append(buf, parse_batches(buf, verify_crc=True), leader_epoch=0, now_ms=NOW_WALL)
    assert len(plog._segments) > 5
    whole = plog.read(0, 1 << 30).records
    stored = [(h.base_offset, h.last_offset, bytes(whole[h.position:h.position + h.size]))
              for h in iter_batch_headers(whole)]
    persister = MemoryPersister()
    await persister.initialize(GROUP, tid, 0, 0, 0)
    leader = SharePartitionLeader(Host(LIMITS), persister, ManualClock(), GROUP, partition)
    await leader.ensure_loaded()
    answers = 0
    while True:
        member = rng.choice(["m1", "m2", "m3"])
        n = rng.randint(1, 12)
        assert leader.try_fetch_lock()
        try:
            acq = leader.acquire(member, max_records=n, batch_size=rng.choice([1, n]), mode=AcquireMode.BATCH_OPTIMIZED,
                                 max_bytes=1 << 20)
        finally:
            leader.release_fetch_lock()
        if not acq.acquired:
            break
        answers += 1
        lo, hi = acq.acquired[0].first_offset, acq.acquired[-1].last_offset
        assert acq.records == b"".join(data for base, last, data in stored if last >= lo and base <= hi)
        for r in acq.acquired:  # most are accepted; some go back to be acquired again
            kind = RELEASE if rng.random() < 0.2 else ACCEPT
            await leader.acknowledge(member, [(r.first_offset, r.last_offset, [kind])], is_renew=False)
    assert answers > 100 and leader.sp is not None and leader.sp.start_offset == stored[-1][1] + 1
