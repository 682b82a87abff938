"""share.auto.offset.reset: ``earliest``, ``latest`` or ``by_duration:<ISO-8601 duration>``, and the
java.time.Duration syntax that the last one uses."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sharebroker.config.definitions import LONG_MAX

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "ShareAutoOffsetReset",
    "parse_iso8601_duration_ms",
    "parse_share_auto_offset_reset",
]

# java.time.Duration.parse: PnDTnHnMn.nS, each part optionally signed, case-insensitive.
_DURATION_RE = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?"
    r"(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE,
)


def _duration_nanos(text: str) -> int:
    match = _DURATION_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"Text cannot be parsed to a Duration: {text!r}")
    sign, days, time_part, hours, minutes, seconds, fraction = match.groups()
    if days is None and hours is None and minutes is None and seconds is None:
        raise ValueError(f"Text cannot be parsed to a Duration: {text!r}")
    if time_part is not None and time_part.upper() == "T":
        raise ValueError(f"Text cannot be parsed to a Duration: {text!r} (T without a time part)")
    whole = int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes or 0) * 60 + int(seconds or 0)
    nanos = whole * 1_000_000_000
    if fraction:
        part = int(fraction.ljust(9, "0"))
        nanos += -part if seconds is not None and seconds.startswith("-") else part
    return -nanos if sign == "-" else nanos


def parse_iso8601_duration_ms(text: str) -> int:
    """Non-negative ISO-8601 duration (``PnDTnHnMn.nS``, java.time.Duration syntax) in whole milliseconds.

    Raises ValueError for bad syntax or a negative duration.
    """
    nanos = _duration_nanos(text)
    if nanos < 0:
        raise ValueError("Negative duration is not supported in by_duration offset reset strategy.")
    millis = nanos // 1_000_000
    if millis > LONG_MAX:
        raise ValueError(f"Duration too large: {text!r}")
    return millis


EARLIEST_TIMESTAMP = -2  # ListOffsets sentinels
LATEST_TIMESTAMP = -1


@dataclass(frozen=True)
class ShareAutoOffsetReset:
    """A parsed share.auto.offset.reset: ``earliest``, ``latest`` or ``by_duration`` with ``duration_ms``."""

    strategy: str
    duration_ms: int | None = None

    def timestamp(self, now_ms: int) -> int:
        """The ListOffsets timestamp to look up: -2 earliest, -1 latest, else now minus the duration."""
        if self.strategy == "earliest":
            return EARLIEST_TIMESTAMP
        if self.strategy == "latest":
            return LATEST_TIMESTAMP
        assert self.duration_ms is not None
        return now_ms - self.duration_ms


def parse_share_auto_offset_reset(value: str) -> ShareAutoOffsetReset:
    """Parse share.auto.offset.reset (case-sensitive, as in Kafka); ValueError says what is wrong."""
    if value in ("earliest", "latest"):
        return ShareAutoOffsetReset(value)
    if value == "by_duration":
        raise ValueError("<:duration> part is missing in by_duration auto offset reset strategy.")
    if value.startswith("by_duration:"):
        return ShareAutoOffsetReset("by_duration", parse_iso8601_duration_ms(value[len("by_duration:"):]))
    raise ValueError(f"Unknown auto offset reset strategy: {value}")
