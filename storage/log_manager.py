"""All partition logs of one log directory, with Kafka's per-directory bookkeeping:

- `.kafka_cleanshutdown` marks a clean stop: present at start-up -> the logs skip recovery. It is
  removed once the logs are open and written again by close().
- `recovery-point-offset-checkpoint`: per partition, the offset up to which the log was fsynced;
  after an unclean stop recovery starts there.
- `log-start-offset-checkpoint`: per partition, the log start offset (DeleteRecords can move it
  inside a segment, where the files alone cannot tell it).
- `<topic>-<partition>/partition.metadata`: the topic id the directory belongs to (written here
  by `create` when given a topic id), so a stale directory of a deleted topic is recognised.
"""

from __future__ import annotations

import base64
import fcntl
import functools
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import MappingProxyType

from sharebroker.storage.files import (
    CheckpointError,
    fsync_dir,
    read_offset_checkpoint,
    write_atomic,
    write_offset_checkpoint,
)
from sharebroker.storage.file_cache import FileCache, open_file
from sharebroker.storage.log_config import LogConfig
from sharebroker.storage.partition_log import PartitionLog

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
PARTITION_METADATA = "partition.metadata"

_PARTITION_DIR = re.compile(r"^([a-zA-Z0-9._-]+)-(\d+)$")


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """`my.topic-name-3` -> ("my.topic-name", 3): topic names may hold '-', so split on the last."""
    m = _PARTITION_DIR.match(name)
    if m is None:
        return None
    return m.group(1), int(m.group(2))


def topic_id_base64(topic_id: uuid.UUID | str) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes, no padding (22 chars)."""
    u = topic_id if isinstance(topic_id, uuid.UUID) else uuid.UUID(str(topic_id))
    return base64.urlsafe_b64encode(u.bytes).decode("ascii").rstrip("=")


def topic_id_from_base64(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def write_partition_metadata(directory: Path, topic_id: uuid.UUID | str) -> None:
    write_atomic(directory / PARTITION_METADATA, f"version: 0\ntopic_id: {topic_id_base64(topic_id)}".encode())


def read_partition_metadata(directory: Path) -> uuid.UUID | None:
    """The topic id in `partition.metadata`, None if absent; ValueError if unreadable."""
    try:
        fd = open_file(os.path.join(directory, PARTITION_METADATA), os.O_RDONLY)  # not pathlib: once per partition at start
    except FileNotFoundError:
        return None
    try:
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    return _parse_partition_metadata(data)


@functools.lru_cache(maxsize=256)
def _parse_partition_metadata(data: bytes) -> uuid.UUID:
    """A partition.metadata file's topic id. Memoized: every partition of a topic has the same
    file, and a start-up reads them all."""
    text = data.decode("utf-8")
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    if fields.get("version", "").strip() != "0" or "topic_id" not in fields:
        raise ValueError(f"unsupported {PARTITION_METADATA}: {text!r}")
    return topic_id_from_base64(fields["topic_id"].strip())


def _remove_new_dir(path: Path) -> None:
    """Remove a partition directory just made: rmdir needs no descriptor, which matters when the
    directory is empty because the process had none left to list or fill it."""
    try:
        path.rmdir()
    except OSError:
        shutil.rmtree(path, ignore_errors=True)


class LogManager:
    """Owns the PartitionLogs of one log directory; their open files are bounded by `files`."""

    def __init__(self, log_dir: Path, files: FileCache | None = None) -> None:
        self.log_dir = Path(log_dir)
        self.files = FileCache() if files is None else files
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self.clean_shutdown = False  # what open_all found
        self.report: list[str] = []  # directory-level notes (checkpoint problems, removed dirs)
        # Several worker processes on one directory (worker.processes > 1): each opens only the
        # partitions `owns` accepts, merges its entries into the shared checkpoint files, and
        # leaves the clean-shutdown marker to the supervisor (`shared_clean` is what it found).
        self.owns: Callable[[str, int], bool] | None = None
        self.shared_clean: bool | None = None

    @property
    def logs(self) -> Mapping[tuple[str, int], PartitionLog]:
        return MappingProxyType(self._logs)

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def partition_dir(self, topic: str, partition: int) -> Path:
        return self.log_dir / f"{topic}-{partition}"

    def _read_checkpoint(self, name: str) -> dict[tuple[str, int], int]:
        try:
            return read_offset_checkpoint(self.log_dir / name)
        except (CheckpointError, UnicodeDecodeError) as exc:
            self.report.append(f"ignoring unreadable {name} ({exc}); logs recover from their start")
            return {}

    def open_all(self, configs: Callable[[str], LogConfig], now_ms: int) -> dict[tuple[str, int], PartitionLog]:
        """Open every `<topic>-<partition>` directory. A missing clean-shutdown marker means the
        last stop was unclean: each log then recovers from its checkpointed recovery point."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        marker = self.log_dir / CLEAN_SHUTDOWN_FILE
        self.clean_shutdown = marker.exists() if self.shared_clean is None else self.shared_clean
        recovery = self._read_checkpoint(RECOVERY_POINT_CHECKPOINT)
        starts = self._read_checkpoint(LOG_START_OFFSET_CHECKPOINT)
        topic_configs: dict[str, LogConfig] = {}  # one per topic, not per partition
        topic_ids: dict[uuid.UUID, str] = {}
        for entry in sorted(os.scandir(self.log_dir), key=lambda e: e.name):
            if not entry.is_dir(follow_symlinks=False):
                continue
            if entry.name.endswith("-delete"):
                # Kafka renames a deleted partition to `<dir>.<id>-delete` before removing it.
                shutil.rmtree(entry.path)
                self.report.append(f"removed {entry.name}, a partition directory pending deletion")
                continue
            key = parse_partition_dir(entry.name)
            if key is None or (self.owns is not None and not self.owns(*key)):
                continue
            path = Path(entry.path)
            config = topic_configs.get(key[0])
            if config is None:
                config = topic_configs[key[0]] = configs(key[0])
            log = PartitionLog.open(path, config, recovery_point=recovery.get(key, 0),
                                    clean_shutdown=self.clean_shutdown, now_ms=now_ms,
                                    log_start_offset=starts.get(key, 0), files=self.files)
            try:
                tid = read_partition_metadata(path)
                if tid is None:
                    log.topic_id = None
                else:  # one string per topic, not per partition
                    name = topic_ids.get(tid)
                    if name is None:
                        name = topic_ids[tid] = str(tid)
                    log.topic_id = name
            except ValueError as exc:
                log.recovery_report.append(str(exc))
            log.on_log_start_offset_change = self._log_start_offset_changed
            self._logs[key] = log
        if self.clean_shutdown and self.shared_clean is None:
            marker.unlink()
            fsync_dir(self.log_dir)
        return dict(self._logs)

    def create(self, topic: str, partition: int, config: LogConfig, *, now_ms: int | None = None,
               topic_id: uuid.UUID | str | None = None) -> PartitionLog:
        """The log of a new partition (its directory is created and made durable). An already open
        log is returned as is, unless `topic_id` shows it belongs to an older topic of the same
        name, in which case it is deleted first."""
        if now_ms is None:
            now_ms = time.time_ns() // 1_000_000
        key = (topic, partition)
        tid = str(uuid.UUID(str(topic_id))) if topic_id is not None else None
        log = self._logs.get(key)
        if log is not None:
            if tid is None or log.topic_id in (None, tid):
                if tid is not None and log.topic_id is None:
                    write_partition_metadata(log.path, tid)
                    log.topic_id = tid
                log.config = config
                return log
            self.report.append(f"deleted {log.path.name}: it belonged to topic id {log.topic_id}, not {tid}")
            self.delete(topic, partition)
        path = self.partition_dir(topic, partition)
        existed = path.exists()
        if existed:
            self.report.append(f"{path.name} existed without being open; recovering it before use")
        path.mkdir(parents=True, exist_ok=True)
        opened: PartitionLog | None = None
        try:
            # A directory we did not open ourselves gets full recovery (recovery point 0).
            log = opened = PartitionLog.open(path, config, recovery_point=0, clean_shutdown=not existed, now_ms=now_ms,
                                           files=self.files)
            if tid is not None:
                write_partition_metadata(path, tid)
                log.topic_id = tid
            if not existed:
                fsync_dir(self.log_dir)
        except BaseException:
            # Out of descriptors or space half-way: no open files and, for a new partition, no
            # directory are left behind (the caller rolls the rest of its change back).
            try:
                if existed:
                    if opened is not None:
                        opened.close()
                elif opened is not None:
                    opened.delete()
                else:
                    _remove_new_dir(path)
            except OSError:
                pass  # the first error is the one to report; a stale directory is replaced on reuse
            raise
        log.on_log_start_offset_change = self._log_start_offset_changed
        self._logs[key] = log
        return log

    def discard(self, topic: str, partition: int) -> None:
        """Remove a partition `create` just made, when the change that made it is rolled back: as
        `delete`, without rewriting the checkpoints (they never held it)."""
        log = self._logs.pop((topic, partition), None)
        if log is not None:
            log.delete()

    def delete(self, topic: str, partition: int) -> None:
        """Remove a partition's log and directory (DeleteTopics) and drop it from the checkpoints."""
        log = self._logs.pop((topic, partition), None)
        if log is not None:
            log.delete()
        else:
            path = self.partition_dir(topic, partition)
            if path.exists():
                shutil.rmtree(path)
                fsync_dir(self.log_dir)
        self.checkpoint()

    def retire(self, topic: str, partitions: Iterable[int]) -> tuple[list[Path], list[tuple[int, OSError]]]:
        """DeleteTopics' part that cannot wait: each partition's log closed and its directory
        renamed as Kafka renames it, `<dir>.<unique id>-delete` (start-up removes any such
        directory), then the directory entries made durable and the checkpoints written once, not
        once per partition. Returns the renamed directories, to be removed later, and the
        partitions whose directory could not be renamed (with why)."""
        retired: list[Path] = []
        failed: list[tuple[int, OSError]] = []
        try:
            for index in partitions:
                log = self._logs.pop((topic, index), None)
                if log is not None:
                    log.close_files()
                path = self.partition_dir(topic, index)
                target = path.with_name(f"{path.name}.{uuid.uuid4().hex}-delete")
                try:
                    os.rename(path, target)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    failed.append((index, exc))
                    continue
                retired.append(target)
        finally:
            if retired:
                fsync_dir(self.log_dir)
            self.checkpoint()
        return retired, failed

    def _log_start_offset_changed(self, log: PartitionLog) -> None:
        self.write_log_start_offsets()

    def write_log_start_offsets(self) -> None:
        self.write_checkpoint(LOG_START_OFFSET_CHECKPOINT, {k: log.log_start_offset for k, log in self._logs.items()})

    def write_recovery_points(self) -> None:
        self.write_checkpoint(RECOVERY_POINT_CHECKPOINT, {k: log.recovery_point for k, log in self._logs.items()})

    def write_checkpoint(self, name: str, entries: dict[tuple[str, int], int]) -> None:
        """Write a directory-level offset checkpoint file. With several workers, under a lock on
        the directory: the file is read, this worker's entries replaced, the others' kept."""
        owns = self.owns
        if owns is None:
            write_offset_checkpoint(self.log_dir / name, entries)
            return
        fd = os.open(self.log_dir, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                kept = read_offset_checkpoint(self.log_dir / name)
            except (CheckpointError, UnicodeDecodeError):
                kept = {}
            write_offset_checkpoint(self.log_dir / name, {**{k: v for k, v in kept.items() if not owns(*k)}, **entries})
        finally:
            os.close(fd)  # (releases the lock)

    def checkpoint(self) -> None:
        """Write both checkpoint files from the logs' current state (atomically)."""
        self.write_recovery_points()
        self.write_log_start_offsets()

    def close_files(self) -> None:
        """Close every log's files and forget them, writing nothing (a start-up that failed)."""
        for log in self._logs.values():
            log.close_files()
        self._logs.clear()

    def close(self) -> None:
        """Flush and close every log, checkpoint, then write the clean-shutdown marker."""
        for log in list(self._logs.values()):
            log.close()
        self.checkpoint()
        if self.shared_clean is None:
            write_atomic(self.log_dir / CLEAN_SHUTDOWN_FILE, json.dumps({"version": 0, "brokerEpoch": -1}).encode())


__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "LOG_START_OFFSET_CHECKPOINT",
    "LogManager",
    "PARTITION_METADATA",
    "RECOVERY_POINT_CHECKPOINT",
    "parse_partition_dir",
    "read_partition_metadata",
    "topic_id_base64",
    "topic_id_from_base64",
    "write_partition_metadata",
]
