"""kill -9 in the middle of a cleaning: the log loses nothing, reads whole, and the cleaner finishes
the job after the restart. The kill lands at an exact step (SHAREBROKER_TEST_CRASH_AT makes the
broker SIGKILL itself there), so no timing is involved."""

from __future__ import annotations

import pytest

from sharebroker.storage.cleaner import CRASH_POINT_ENV
from sharebroker.testing import wait_for
from tests.integration.clients import create_topic
from tests.integration.compaction_helpers import (
    CLEANER,
    COMPACTED,
    compacted_view,
    latest,
    make_compacted,
    produce_round,
    read_partition,
)


@pytest.mark.needs_own_broker("kills brokers of its own in the middle of a cleaning")
@pytest.mark.parametrize("point", ["cleaner-writing", "cleaner-cleaned", "cleaner-swap"])
def test_kill_mid_clean_loses_nothing(make_broker, topic_name, monkeypatch, point) -> None:
    monkeypatch.setenv(CRASH_POINT_ENV, point)
    broker = make_broker(CLEANER)
    # Written uncompacted first; the cleaner starts (and the broker dies) once the policy changes.
    create_topic(broker.bootstrap, topic_name, config={**COMPACTED, "cleanup.policy": "delete",
                                                       "delete.retention.ms": "86400000"})
    keys = [f"key-{i:03d}".encode() for i in range(200)]
    written = []
    for r in range(4):
        pairs: list[tuple[bytes, bytes | None]] = [(k, f"{r}-{k.decode()}".encode() * 8) for k in keys]
        if r == 3:
            pairs = [(k, None) if i % 7 == 0 else (k, v) for i, (k, v) in enumerate(pairs)]
        written.append(produce_round(broker.bootstrap, topic_name, r, pairs))
    written.append(produce_round(broker.bootstrap, topic_name, 4, [(b"active", b"a")]))
    before = read_partition(broker.bootstrap, topic_name)
    assert len(before) == 4 * len(keys) + 1
    compacted = compacted_view(latest(written), tombstones=True)

    make_compacted(broker.bootstrap, topic_name)
    wait_for(lambda: not broker.alive(), timeout=30, message=f"the broker killed at {point}")
    partition_dir = broker.data_dir / f"{topic_name}-0"
    leftovers = sorted(f.name for f in partition_dir.iterdir() if f.suffix in (".cleaned", ".swap", ".deleted"))
    assert leftovers, "the kill landed in the middle of a cleaning"

    monkeypatch.delenv(CRASH_POINT_ENV)
    # First without the cleaner, to see what start-up alone made of the files.
    broker.overrides["log.cleaner.enable"] = "false"
    broker.start()
    assert not [f for f in partition_dir.iterdir() if f.suffix in (".cleaned", ".swap", ".deleted")]
    after = read_partition(broker.bootstrap, topic_name)
    if point == "cleaner-swap":
        assert after == compacted  # the swap had begun: start-up completed it
    else:
        assert after == before  # the swap had not begun: the cleaned files were discarded
    assert broker.stop() == 0
    del broker.overrides["log.cleaner.enable"]
    broker.start()
    wait_for(lambda: read_partition(broker.bootstrap, topic_name) == compacted, timeout=30,
             message="the cleaner finished the job after the restart")
    assert "Traceback" not in broker.log_text()
