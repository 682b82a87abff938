"""The live view draws a share partition's window from its state ranges: a window of ten million
records with a few ranges is a few segments, and thousands of ranges are capped."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sharebroker.broker.admin_view import POISON_PER_PARTITION, STRIP_SEGMENTS, AdminView, esc, preview
from sharebroker.broker.share.partition import PersistedBatch, SharePartition


@dataclass
class _Log:
    high_watermark: int


@dataclass
class _Partition:
    log: _Log


class _Clock:
    def monotonic_ms(self) -> int:
        return 0


@dataclass
class _Leader:
    """What AdminView.segments and poison read of a share-partition leader."""
    sp: SharePartition
    partition: _Partition
    clock: Any = None

    def __post_init__(self) -> None:
        self.clock = _Clock()


def view() -> AdminView:
    return AdminView(None, write_enabled=False)  # type: ignore[arg-type]  # segments() needs no broker


def test_a_huge_window_of_few_ranges_is_a_few_segments() -> None:
    sp = SharePartition(start_offset=0, persisted=[PersistedBatch(0, 4_999_999, 0, 2),
                                                    PersistedBatch(5_000_000, 5_000_000, 4, 5),
                                                    PersistedBatch(5_000_001, 9_999_999, 2, 1)])
    leader = _Leader(sp, _Partition(_Log(20_000_000)))
    started = time.perf_counter()
    segments, hidden = view().segments(leader)  # type: ignore[arg-type]
    assert time.perf_counter() - started < 0.05
    assert hidden == 0
    assert [(s.first, s.last, s.state) for s in segments] == [
        (0, 4_999_999, "available"), (5_000_000, 5_000_000, "archived"), (5_000_001, 9_999_999, "acknowledged"),
        (10_000_000, 19_999_999, "unread")]
    poison = view().poison(leader, limit=5)  # type: ignore[arg-type]
    assert poison == [(5_000_000, "archived", 5)]


def test_thousands_of_ranges_are_capped() -> None:
    sp = SharePartition(start_offset=0, persisted=[PersistedBatch(2 * i, 2 * i, 4 if i % 2 else 0, 1 + i % 3)
                                                    for i in range(5000)])
    leader = _Leader(sp, _Partition(_Log(9_999)))
    segments, hidden = view().segments(leader)  # type: ignore[arg-type]
    assert len(segments) <= 2 * STRIP_SEGMENTS + 2 and hidden > 0
    assert segments[-1].state == "more" and segments[-1].last == 9_998
    assert len(view().poison(leader, limit=5)) == POISON_PER_PARTITION  # type: ignore[arg-type]


def test_escaping_and_previews() -> None:
    assert esc('<script>"x"</script>') == "&lt;script&gt;&quot;x&quot;&lt;/script&gt;"
    assert preview(None) == "(null)" and preview(b"\xff<a>") == "\\xff<a>"
    assert preview(b"x" * 200).endswith("…")
