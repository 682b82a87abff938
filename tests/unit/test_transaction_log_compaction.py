"""`__transaction_state` compaction in-process on a temp dir: after many state changes the log is
cut down to one record per live transactional id, and a restart rebuilds exactly the states from
before (completed, aborted, still open), including ids whose epoch was bumped."""

from __future__ import annotations

from pathlib import Path

from kio.schema.errors import ErrorCode

from sharebroker.broker.flusher import now_ms
from sharebroker.broker.server import Broker
from sharebroker.broker.transactions.coordinator import TRANSACTION_STATE_TOPIC
from tests.unit.test_group_log import running_broker

SETTINGS = {"transaction.state.log.num.partitions": "3"}


def _states(b: Broker) -> dict[str, tuple[int, int, str, frozenset[tuple[str, int]]]]:
    return {tid: (t.producer_id, t.producer_epoch, t.state.name, frozenset(t.partitions))
            for tid, t in b.transactions.txns.items()}


async def _transaction(b: Broker, tid: str, *, commit: bool | None, rounds: int = 1) -> None:
    """Init `tid`, then `rounds` transactions on t-0: committed, aborted, or (None) the last left open."""
    init = await b.transactions.init_producer_id(tid, 60_000, None)
    assert init.error == ErrorCode.none
    for i in range(rounds):
        added = await b.transactions.add_partitions(tid, init.producer_id, init.producer_epoch, [("t", 0)])
        assert added == ErrorCode.none
        if commit is None and i == rounds - 1:
            return
        ended = await b.transactions.end_txn(tid, init.producer_id, init.producer_epoch, bool(commit))
        assert ended == ErrorCode.none


async def test_compaction_keeps_one_record_per_id_and_a_restart_sees_the_same_states(tmp_path: Path) -> None:
    async with running_broker(tmp_path, SETTINGS) as b:
        b.topics.create("t", 1, {}, now_ms())
        await _transaction(b, "committed", commit=True, rounds=5)
        await _transaction(b, "aborted", commit=False, rounds=3)
        await _transaction(b, "bumped", commit=True)
        await _transaction(b, "bumped", commit=True, rounds=2)  # a second InitProducerId bumps the epoch
        await _transaction(b, "open", commit=None, rounds=2)
        before = _states(b)
        assert before["bumped"][1] == 1 and before["open"][2] == "ONGOING"
        topic = b.topics.get(TRANSACTION_STATE_TOPIC)
        assert topic is not None
        records_before = sum(p.log.high_watermark - p.log.log_start_offset for p in topic.partitions)
        await b.transactions.compact(force=True)
        live = sum(p.log.high_watermark - p.log.log_start_offset for p in topic.partitions)
        assert live == len(before) < records_before
        assert _states(b) == before

    async with running_broker(tmp_path, SETTINGS) as b2:
        assert _states(b2) == before
        # the open transaction carries on after the restart and commits
        pid, epoch, _, _ = before["open"]
        assert await b2.transactions.end_txn("open", pid, epoch, True) == ErrorCode.none
        assert b2.transactions.txns["open"].state.name == "COMPLETE_COMMIT"
