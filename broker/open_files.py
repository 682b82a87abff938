"""The process's open-file limit (RLIMIT_NOFILE): raised to the hard limit at start-up, as the JVM
does for Kafka, and kept in mind where the broker opens files for good (a partition keeps three:
.log, .index, .timeindex per segment), so running out of descriptors is an error a request is
answered with, never a broker that stops accepting connections or cannot start again."""

from __future__ import annotations

import errno
import os
import sys

try:
    import resource
except ImportError:  # pragma: no cover - not POSIX
    resource = None  # type: ignore[assignment]

FILES_PER_PARTITION = 3  # .log, .index, .timeindex of the active segment
_DARWIN_OPEN_MAX = 10240  # macOS refuses a soft limit above OPEN_MAX; the JVM caps it there too
# Where the process lists its descriptors (Linux; macOS and the BSDs).
_FD_DIRS = ("/proc/self/fd", "/dev/fd")


def soft_limit() -> int | None:
    if resource is None:
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


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


def reserve(limit: int) -> int:
    """Descriptors kept free of partitions: connections, atomic metadata and checkpoint writes,
    producer snapshots and segment rolls need some even when the partitions took the rest."""
    return max(32, limit // 16)


def in_use() -> int | None:
    """How many descriptors the process holds (None where the system does not list them). With
    none left, listing them fails with EMFILE, which is the answer too."""
    for path in _FD_DIRS:
        try:
            return len(os.listdir(path)) - 1  # the listing's own descriptor
        except (FileNotFoundError, NotADirectoryError):
            continue
    return None


def check_room(files: int, what: str) -> None:
    """Refuse (with EMFILE, as the open would have failed) to open `files` more files for good
    when that would leave fewer than the reserve free."""
    limit = soft_limit()
    used = in_use()
    if limit is None or used is None:
        return
    if used + files + reserve(limit) > limit:
        raise OSError(errno.EMFILE, f"Too many open files: {what} needs {files} more open files, {used} of the "
                                    f"limit of {limit} are in use and {reserve(limit)} are kept for connections "
                                    f"and writes")


__all__ = ["FILES_PER_PARTITION", "check_room", "in_use", "raise_limit", "reserve", "soft_limit"]
