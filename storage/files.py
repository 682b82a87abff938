"""Small file primitives shared by storage: durable atomic replace, directory fsync, and Kafka's
offset checkpoint text format."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Mapping
from pathlib import Path

from sharebroker.storage.file_cache import open_file

LOCK_FILE = ".lock"


class LogDirInUse(OSError):
    """Another process holds the log directory's lock."""


class LogDirLock:
    """Kafka's exclusive lock on `<log dir>/.lock`, held for the broker's life: taken before any
    other file of the directory is opened, so a second broker on the same directory stops before
    it can recover (truncate) or write anything. The kernel drops it when the process dies."""

    def __init__(self, log_dir: Path) -> None:
        self.path = Path(log_dir) / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LogDirInUse(f"Failed to acquire lock on file {LOCK_FILE} in {self.path.parent}. A Kafka "
                              "instance in another process or thread is using this directory.") from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (created, renamed, deleted files) durable."""
    fd = open_file(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """os.write until everything is written (it may write less than asked)."""
    n = os.write(fd, data)
    if n == len(data):
        return
    view = memoryview(data)[n:]
    try:
        while view:
            n = os.write(fd, view)
            view = view[n:]
    finally:
        view.release()


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` so a crash leaves either the old or the new content: write a temp file,
    fsync it, rename it over `path`, fsync the directory."""
    tmp = path.with_name(path.name + ".tmp")
    fd = open_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        # A full disk half-way: the partial temp file would hold the space it failed to get.
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    fsync_dir(path.parent)


class CheckpointError(ValueError):
    """A checkpoint file exists but does not parse."""


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """Kafka's OffsetCheckpointFile: `0`, count, then `topic partition offset` lines.
    Missing file -> {}; malformed -> CheckpointError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    lines = text.splitlines()
    if len(lines) < 2 or lines[0].strip() != "0":
        raise CheckpointError(f"{path.name}: unsupported version or missing header")
    try:
        count = int(lines[1])
    except ValueError:
        raise CheckpointError(f"{path.name}: bad entry count {lines[1]!r}") from None
    entries = [ln for ln in lines[2:] if ln.strip()]
    if len(entries) != count:
        raise CheckpointError(f"{path.name}: expected {count} entries, found {len(entries)}")
    out: dict[tuple[str, int], int] = {}
    for ln in entries:
        parts = ln.split()
        if len(parts) != 3:
            raise CheckpointError(f"{path.name}: malformed line {ln!r}")
        try:
            out[(parts[0], int(parts[1]))] = int(parts[2])
        except ValueError:
            raise CheckpointError(f"{path.name}: malformed line {ln!r}") from None
    return out


def write_offset_checkpoint(path: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    lines = ["0", str(len(offsets))]
    lines += [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
    write_atomic(path, ("\n".join(lines) + "\n").encode("utf-8"))
