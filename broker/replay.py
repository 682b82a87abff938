"""Start-up replays of a partition log (internal topics, idempotent-producer state): whole batches
in offset order, where a damaged range must not keep the broker from starting."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sharebroker.broker.structured_log import get_logger
from sharebroker.protocol.record_batch import BatchHeader, iter_batch_headers
from sharebroker.storage import CorruptLogError

log = get_logger("sharebroker.replay")

_READ_BYTES = 4 << 20


def replay_batches(plog: Any, start: int, end: int, *, what: str) -> Iterator[tuple[bytes | memoryview, BatchHeader]]:
    """(read buffer, header) of every whole batch from the one holding `start` up to `end`. A
    damaged range is skipped to the next segment with one error line naming `what` replayed: what
    it held is lost, the rest replays. The first batch may begin before `start`."""
    offset = start
    while offset < end:
        try:
            data = plog.read(offset, _READ_BYTES, min_one_batch=True).records
        except CorruptLogError as exc:
            following = [s.base_offset for s in plog.segments if s.base_offset > offset]
            log.error(f"{what} replay skipped a damaged range", file=exc.path, position=exc.position,
                      reason=exc.reason, from_offset=offset, resumed_at=following[0] if following else None)
            if not following:
                return
            offset = following[0]
            continue
        if not data:
            return
        for h in iter_batch_headers(data):
            yield data, h
            offset = h.last_offset + 1
