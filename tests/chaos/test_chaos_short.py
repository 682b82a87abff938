"""A short chaos run inside the test command (`make chaos` runs 20 cycles): kill -9 and restart
under idempotent producers, explicit-ack share consumers and a classic group."""

from __future__ import annotations

import pytest

from tests.chaos.harness import Options, run

pytestmark = pytest.mark.needs_own_broker("kills its brokers in cycles")


def test_short_chaos_run_loses_nothing_and_never_redelivers_accepted_records(tmp_path):
    # Deadlines short enough that a failing run fails well inside pytest's 120 s timeout.
    s = run(3, tmp_path, opts=Options(progress_timeout=20, drain_timeout=30), log=lambda _line: None)
    why = f"python -m tests.chaos.harness --cycles 3 --seed {s.seed}\n{s.table()}\n{s.examples}\n{s.notes}"
    assert s.cycles == 3 and s.produced > 0 and s.accepted > 0, why
    assert s.lost == 0, why
    assert s.accepted_then_redelivered == 0, why
    assert s.never_delivered == 0, why
    assert s.classic_missed == 0, why
    assert s.log_duplicates == 0, why
    assert s.rejected > 0 and s.dlq_records >= s.rejected, why  # the DLQ path ran across the kills
    assert s.crash_point_kills >= 1, why  # killed between ARCHIVING and ARCHIVED on purpose
    assert s.dlq_lost == 0, why
    assert s.dlq_duplicated == 0, why
