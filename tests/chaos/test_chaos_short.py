"""A short chaos run inside the test command (`make chaos` runs 20 cycles): kill -9 and restart
under idempotent producers, explicit-ack share consumers and a classic group."""

from __future__ import annotations

from tests.chaos.harness import run


def test_short_chaos_run_loses_nothing_and_never_redelivers_accepted_records(tmp_path):
    s = run(3, tmp_path, log=lambda _line: None)
    assert s.cycles == 3 and s.produced > 0
    assert s.lost == 0, s.examples["lost"]
    assert s.accepted_then_redelivered == 0, s.examples["accepted_then_redelivered"]
    assert s.never_delivered == 0, s.examples["never_delivered"]
    assert s.classic_missed == 0, s.examples["classic_missed"]
    assert s.log_duplicates == 0
