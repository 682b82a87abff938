"""The process's open-file limit (RLIMIT_NOFILE): raised to the hard limit at start-up, as the JVM
does for Kafka, and kept in mind where the broker opens files for good (a partition keeps three:
.log, .index, .timeindex per segment), so running out of descriptors is an error a request is
answered with, never a broker that stops accepting connections or cannot start again."""

from __future__ import annotations

import sys

try:
    import resource
except ImportError:  # pragma: no cover - not POSIX
    resource = None  # type: ignore[assignment]

_DARWIN_OPEN_MAX = 10240  # macOS refuses a soft limit above OPEN_MAX; the JVM caps it there too


def raise_limit() -> tuple[int, int, int] | None:
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns (soft before, soft after, hard)."""
    if resource is None:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if sys.platform == "darwin" and (hard == resource.RLIM_INFINITY or hard > _DARWIN_OPEN_MAX):
        target = _DARWIN_OPEN_MAX
    if target != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            target = soft  # not allowed here (a sandbox): keep what we were given
    return soft, target, hard


__all__ = ["raise_limit"]
