"""The process's open-file limit (RLIMIT_NOFILE): raised to the hard limit at start-up, as the JVM
does for Kafka. The partitions' files take at most their budget of it (storage.file_cache, half
the limit by default); connections take what they need of the rest, and accepting pauses while
none is left (acceptor). What a start-up that still runs out of descriptors says is here."""

from __future__ import annotations

import errno
import sys
from pathlib import Path

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


def exhausted(exc: BaseException) -> bool:
    """The process (EMFILE) or the system (ENFILE) is out of file descriptors."""
    return isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE)


def startup_advice(log_dir: Path, exc: OSError) -> str:
    """What a start-up that ran out of descriptors prints: which limit to raise. However many
    partitions the data directory holds, only a limit of a few dozen (a broker with no partitions
    starts under 24) gets here."""
    limits = ""
    if resource is not None:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        shown = ["unlimited" if v == resource.RLIM_INFINITY else str(v) for v in (soft, hard)]
        limits = f" (open-file limit: soft {shown[0]}, hard {shown[1]})"
    return (f"{exc.strerror or exc}{limits} while opening the data directory {log_dir}: the broker needs a few "
            f"dozen open files of its own, and more for connections and its log files (log.open.files.budget, half "
            f"the limit by default). Raise the limit: `ulimit -n 1024` in the shell "
            f"that starts the broker (up to the hard limit, `ulimit -Hn`; beyond it raise the hard limit, e.g. "
            f"LimitNOFILE= in a systemd unit or nofile in /etc/security/limits.conf), or "
            f"`docker run --ulimit nofile=1024:1024`.")


__all__ = ["exhausted", "raise_limit", "startup_advice"]
