"""The log cleaner: picks the dirtiest compacted log as Kafka's LogCleanerManager does, has it
cleaned in a cleaner process (storage.cleaner: decoding every record is CPU work that must not
hold the event loop, nor its GIL), then swaps the cleaned segments in on the loop and advances
`cleaner-offset-checkpoint` (Kafka's file: the offset below which each log is clean), so a restart
resumes where cleaning stopped.

What a log offers for cleaning: from its first dirty offset (the checkpoint, or the log start) to
its first uncleanable offset, the base of the first segment that is active, holds the last stable
offset (an open transaction), or has a record younger than min.compaction.lag.ms. It is cleaned when
its dirty bytes exceed min.cleanable.dirty.ratio of the log, or when a dirty segment's first record
is older than max.compaction.lag.ms. Cleaner processes start with the first log worth cleaning:
a broker without compacted topics starts none."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sharebroker.broker.flusher import now_ms
from sharebroker.broker.structured_log import get_logger
from sharebroker.broker.topics import is_remote
from sharebroker.storage.cleaner import CleaningAborted, CleanResult, CleanTask, run_in_worker, worker_init
from sharebroker.storage.files import CheckpointError, fsync_dir, read_offset_checkpoint

if TYPE_CHECKING:
    from sharebroker.broker.topics import Partition, Topics
    from sharebroker.config import BrokerConfig

log = get_logger("sharebroker.log_cleaner")

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"


@dataclass(slots=True)
class LogToClean:
    partition: Partition
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def plan(partition: Partition, checkpoint: int | None, now: int) -> LogToClean:
    """Kafka's cleanableOffsets + LogToClean for one log."""
    plog = partition.log
    config = plog.config
    start = plog.log_start_offset
    first_dirty = start if checkpoint is None or checkpoint < start or checkpoint > plog.log_end_offset else checkpoint
    segments = plog.segments
    uncleanable = min(partition.last_stable_offset, segments[-1].base_offset)
    non_active_dirty = [s for i, s in enumerate(segments[:-1]) if segments[i + 1].base_offset > first_dirty]
    lag = max(config.min_compaction_lag_ms, 0)
    if lag > 0:
        for seg in non_active_dirty:
            if plog.largest_timestamp(seg) > now - lag:
                uncleanable = min(uncleanable, seg.base_offset)
                break
    uncleanable = max(first_dirty, uncleanable)
    # Rounded down to the base of the segment holding it: only whole segments are cleaned.
    first_uncleanable = segments[-1].base_offset
    for i, seg in enumerate(segments[:-1]):
        if seg.base_offset <= uncleanable < segments[i + 1].base_offset:
            first_uncleanable = seg.base_offset
            break
    clean_bytes = sum(s.size for s in segments if s.base_offset < first_dirty)
    low = min(first_dirty, first_uncleanable)
    cleanable_bytes = sum(s.size for i, s in enumerate(segments[:-1])
                          if s.base_offset < first_uncleanable and segments[i + 1].base_offset > low)
    first_stamps = [s.rolling_base_ts for s in non_active_dirty if s.rolling_base_ts > 0]
    max_lag = max(config.max_compaction_lag_ms, 0)
    need_now = bool(first_stamps) and min(first_stamps) < now - max_lag
    return LogToClean(partition, first_dirty, first_uncleanable, clean_bytes, cleanable_bytes, need_now)


class LogCleaner:
    def __init__(self, config: BrokerConfig, topics: Topics) -> None:
        self.config = config
        self.topics = topics
        self.checkpoint_path = Path(topics.log_dir) / CLEANER_CHECKPOINT
        self.checkpoints: dict[tuple[str, int], int] = {}
        self.in_progress: set[tuple[str, int]] = set()
        self.uncleanable: set[tuple[str, int]] = set()
        self._pool: ProcessPoolExecutor | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._wakeup = asyncio.Event()

    @property
    def threads(self) -> int:
        return int(self.config["log.cleaner.threads"]) if self.config["log.cleaner.enable"] else 0

    def load(self) -> None:
        try:
            self.checkpoints = read_offset_checkpoint(self.checkpoint_path)
        except (CheckpointError, UnicodeDecodeError) as exc:
            log.warning("ignoring unreadable cleaner checkpoint; logs are cleaned from their start",
                        path=str(self.checkpoint_path), error=str(exc))
            self.checkpoints = {}

    def start(self) -> None:
        if self.threads <= 0:
            return
        self.load()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._run(i), name=f"log-cleaner-{i}") for i in range(self.threads)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        self._shutdown_pool()

    def _shutdown_pool(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        # A round in progress is abandoned (its .cleaned files are removed by the next start), rather
        # than waited for: a stop must not wait for a cleaning of minutes.
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            proc.kill()
        pool.shutdown(wait=True, cancel_futures=True)

    def wake(self) -> None:
        self._wakeup.set()

    # -- choosing ---------------------------------------------------------------------------------

    def grab_filthiest(self, now: int) -> LogToClean | None:
        best: LogToClean | None = None
        # Per topic first: a broker of 100,000 partitions without compacted topics spends nothing here.
        compacted = [p for t in list(self.topics.by_name.values()) if t.config.compact for p in t.partitions
                     if not is_remote(p)]  # (another worker's, with worker.processes > 1)
        for p in compacted:
            key = (p.topic.name, p.index)
            if not p.log.config.compacts or key in self.in_progress or key in self.uncleanable or p.log.closed:
                continue
            ltc = plan(p, self.checkpoints.get(key), now)
            if ltc.total_bytes <= 0:
                continue
            ratio = ltc.cleanable_ratio
            if (ltc.need_compaction_now and ltc.cleanable_bytes > 0) or ratio > p.log.config.min_cleanable_dirty_ratio:
                if best is None or ratio > best.cleanable_ratio:
                    best = ltc
        if best is not None:
            self.in_progress.add((best.partition.topic.name, best.partition.index))
        return best

    # -- cleaning ---------------------------------------------------------------------------------

    async def _run(self, worker: int) -> None:
        while True:
            cleaned = False
            try:
                ltc = self.grab_filthiest(now_ms())
                if ltc is not None:
                    key = (ltc.partition.topic.name, ltc.partition.index)
                    try:
                        await self.clean(ltc)
                        cleaned = True
                    finally:
                        self.in_progress.discard(key)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("log cleaner round failed", cleaner=worker)
            if not cleaned:
                self._wakeup.clear()
                try:
                    await asyncio.wait_for(self._wakeup.wait(), self.config["log.cleaner.backoff.ms"] / 1000)
                except asyncio.TimeoutError:
                    pass

    def _task(self, ltc: LogToClean, now: int) -> CleanTask:
        p = ltc.partition
        plog = p.log
        config = plog.config
        active = {pid: (e.batches[-1].last_offset if e.batches else -1, e.epoch)
                  for pid, e in p.producers.entries.items()}
        threads = max(self.threads, 1)
        return CleanTask(
            directory=str(plog.path), name=plog.path.name,
            segments=plog.cleaning_sources(ltc.first_uncleanable_offset),
            first_dirty_offset=ltc.first_dirty_offset, first_uncleanable_offset=ltc.first_uncleanable_offset,
            aborted=list(p.producers.aborted), active_producers=active, now_ms=now,
            delete_retention_ms=config.delete_retention_ms, segment_bytes=config.segment_bytes,
            segment_index_bytes=config.segment_index_bytes, index_interval_bytes=config.index_interval_bytes,
            map_memory_bytes=int(self.config["log.cleaner.dedupe.buffer.size"]) // threads,
            map_load_factor=float(self.config["log.cleaner.io.buffer.load.factor"]),
            max_io_bytes_per_second=float(self.config["log.cleaner.io.max.bytes.per.second"]))

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=max(self.threads, 1),
                                             mp_context=multiprocessing.get_context("spawn"), initializer=worker_init,
                                             initargs=(os.getpid(),))
        return self._pool

    async def clean(self, ltc: LogToClean) -> CleanResult | None:
        """One round for one log: clean in a cleaner process, swap on the loop, checkpoint."""
        p = ltc.partition
        plog = p.log
        key = (p.topic.name, p.index)
        now = now_ms()
        task = self._task(ltc, now)
        if not task.segments:
            return None
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        try:
            result: CleanResult = await loop.run_in_executor(self._executor(), run_in_worker, task)
        except CleaningAborted as exc:
            log.info("log cleaning abandoned", topic=p.topic.name, partition=p.index, reason=str(exc))
            return None
        except BrokenProcessPool:
            self._shutdown_pool()
            if plog.closed:
                return None
            self.uncleanable.add(key)
            log.error("log cleaner process died; partition marked uncleanable until restart", topic=p.topic.name,
                      partition=p.index)
            return None
        except Exception as exc:
            self.uncleanable.add(key)
            log.error("log cleaning failed; partition marked uncleanable until restart", topic=p.topic.name,
                      partition=p.index, error=f"{type(exc).__name__}: {exc}")
            return None
        cleaned_in = time.monotonic() - started
        swapped = 0
        for cleaned in result.cleaned:
            if plog.replace_segments(cleaned, now_ms()):
                swapped += 1
        if swapped:
            await asyncio.to_thread(_fsync_dir_if_present, plog.path)
            # The cleaned transaction indexes hold only the aborted transactions whose markers remain.
            p.producers.aborted = plog.aborted_txns()
            p.producers.truncate_aborted(plog.log_start_offset)
        swapped_in = time.monotonic() - started
        if swapped == len(result.cleaned) and not plog.closed:
            self.checkpoints[key] = result.end_offset
            await self._write_checkpoint()
        seconds = time.monotonic() - started
        s = result.stats
        log.info("log cleaned", topic=p.topic.name, partition=p.index, first_dirty_offset=ltc.first_dirty_offset,
                 end_offset=result.end_offset, segments=sum(len(c.replaces) for c in result.cleaned),
                 swapped=swapped, map_bytes_read=s.map_bytes_read, bytes_read=s.bytes_read,
                 bytes_written=s.bytes_written, worker_seconds=round(s.seconds, 3),
                 worker_cpu_seconds=round(s.cpu_seconds, 3),
                 records_read=s.records_read, records_retained=s.records_retained, map_keys=s.map_keys,
                 batches_copied=s.batches_copied, batches_rewritten=s.batches_rewritten,
                 seconds=round(seconds, 3), result_after=round(cleaned_in, 3), swapped_after=round(swapped_in, 3),
                 mb_per_s=round(s.bytes_read / 1e6 / max(s.seconds, 1e-6), 1))
        return result

    async def _write_checkpoint(self) -> None:
        live = {(p.topic.name, p.index) for p in self.topics.all_partitions()}
        self.checkpoints = {k: v for k, v in self.checkpoints.items() if k in live}
        await asyncio.to_thread(self.topics.logs.write_checkpoint, CLEANER_CHECKPOINT, dict(self.checkpoints))


def _fsync_dir_if_present(path: Path) -> None:
    try:
        fsync_dir(path)
    except FileNotFoundError:
        pass
