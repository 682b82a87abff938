"""The process's open-file limit (RLIMIT_NOFILE): raised to the hard limit at start-up, as the JVM
does for Kafka, and kept in mind where the broker opens files for good (a partition keeps three:
.log, .index, .timeindex per segment), so running out of descriptors is an error a request is
answered with, never a broker that stops accepting connections or cannot start again."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

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


def exhausted(exc: BaseException) -> bool:
    """The process (EMFILE) or the system (ENFILE) is out of file descriptors."""
    return isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE)


def needed_for(log_dir: Path) -> tuple[int, int]:
    """(partitions, open files) a start-up on `log_dir` needs: three per segment, plus the reserve."""
    partitions = segments = 0
    try:
        entries = list(os.scandir(log_dir))
    except OSError:
        return 0, 0
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False) or "-" not in entry.name:
            continue
        partitions += 1
        try:
            segments += max(1, sum(1 for name in os.listdir(entry.path) if name.endswith(".log")))
        except OSError:
            segments += 1
    files = segments * FILES_PER_PARTITION
    return partitions, files + reserve(files + 64) + 64


def startup_advice(log_dir: Path, exc: OSError) -> str:
    """What a start-up that ran out of descriptors prints: how many it needs and which limit to raise."""
    partitions, needed = needed_for(log_dir)
    limits = ""
    if resource is not None:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        shown = ["unlimited" if v == resource.RLIM_INFINITY else str(v) for v in (soft, hard)]
        limits = f" (open-file limit: soft {shown[0]}, hard {shown[1]})"
    return (f"{exc.strerror or exc}{limits}: the data directory {log_dir} holds {partitions} partition "
            f"directories and needs about {needed} open files ({FILES_PER_PARTITION} per segment and room for "
            f"connections). Raise the limit: `ulimit -n {needed}` in the shell that starts the broker (up to the "
            f"hard limit, `ulimit -Hn`; beyond it raise the hard limit, e.g. LimitNOFILE= in a systemd unit or "
            f"nofile in /etc/security/limits.conf), or `docker run --ulimit nofile={needed}:{needed}`.")


__all__ = ["FILES_PER_PARTITION", "check_room", "exhausted", "in_use", "needed_for", "raise_limit", "reserve",
           "soft_limit", "startup_advice"]
