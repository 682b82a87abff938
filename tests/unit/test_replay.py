"""The start-up replay walk shared by internal topics and producer state: whole batches in order,
a damaged range skipped to the next segment."""

from __future__ import annotations

from dataclasses import dataclass

from sharebroker.broker.replay import replay_batches
from sharebroker.protocol.record_batch import encode_batch
from sharebroker.storage import CorruptLogError


@dataclass
class _Segment:
    base_offset: int


@dataclass
class _Read:
    records: bytes


class FakeLog:
    """Segments at 0 and 10; offsets 0-9 are damaged, 10-12 hold one batch each."""
    segments = [_Segment(0), _Segment(10)]

    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool) -> _Read:
        if offset < 10:
            raise CorruptLogError("bad", path="0.log", position=61, reason="crc")
        return _Read(b"".join(bytes(encode_batch([(b"k", b"v")], timestamp_ms=0, base_offset=o))
                              for o in range(offset, 13)))


def test_a_damaged_range_is_skipped_to_the_next_segment():
    assert [h.base_offset for _data, h in replay_batches(FakeLog(), 0, 13, what="test")] == [10, 11, 12]


def test_the_walk_stops_at_the_end_and_when_nothing_follows_the_damage():
    assert [h.base_offset for _d, h in replay_batches(FakeLog(), 11, 12, what="test")] == [11, 12]
    one_segment = FakeLog()
    one_segment.segments = [_Segment(0)]
    assert list(replay_batches(one_segment, 0, 13, what="test")) == []
