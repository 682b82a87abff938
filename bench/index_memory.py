"""Index memory against the log kept (issue 24), in process: one partition log without retention
is written with batches a little over index.interval.bytes (one offset and one time entry each,
20 bytes per 4 KiB of log), then read at offsets spread over all its sealed segments. Printed: the
log and index files on disk, the index entries the segments hold in memory after writing and after
the reads, the process's RSS, and what a lookup into a sealed segment costs when its index must be
read back and when it is already in memory.

    python -m bench.index_memory [--mib 1024] [--segment-mib 64] [--reads 2000]"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from sharebroker.protocol.record_batch import encode_batch, parse_batches
from sharebroker.storage import LogConfig, PartitionLog
from sharebroker.storage.file_cache import FileCache

NOW = 1_700_000_000_000


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def held_mb(log: PartitionLog) -> float:
    """Index entries the log's segments hold in memory."""
    return sum(seg.index_bytes_held for seg in log.segments) / 1e6


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=1024, help="log written")
    ap.add_argument("--segment-mib", type=int, default=64, help="segment.bytes")
    ap.add_argument("--reads", type=int, default=2000, help="reads at random offsets afterwards")
    args = ap.parse_args(argv)
    config = LogConfig(segment_bytes=args.segment_mib << 20, index_interval_bytes=4096, retention_bytes=-1,
                       retention_ms=-1)
    files = FileCache()
    with tempfile.TemporaryDirectory(prefix="bench-index-") as tmp:
        log = PartitionLog.open(Path(tmp) / "t-0", config, recovery_point=0, clean_shutdown=True, now_ms=NOW,
                                files=files)
        rss0 = rss_mb()
        value = b"x" * 4100
        n = (args.mib << 20) // len(encode_batch([(None, value)], timestamp_ms=NOW))
        t0 = time.perf_counter()
        for i in range(n):
            buf = encode_batch([(None, value)], timestamp_ms=NOW + i)  # each a time-index entry too
            log.append(buf, parse_batches(buf, verify_crc=False), leader_epoch=0, now_ms=NOW + i)
        write_s = time.perf_counter() - t0
        log.flush()
        on_disk = sum(s.index_entries * 8 + s.time_index_entries * 12 for s in log.segments) / 1e6
        print(f"log {log.size_bytes / 2**20:.0f} MiB in {len(log.segments)} segments, written in {write_s:.1f} s; "
              f"index files {on_disk:.1f} MB (what every segment held in memory before)")
        print(f"after writing: index entries in memory {held_mb(log):.2f} MB, RSS {rss0:.1f} -> {rss_mb():.1f} MB")
        rng = random.Random(1)
        sealed_end = log.segments[-1].base_offset
        cold: list[float] = []
        warm: list[float] = []
        for _ in range(args.reads):
            offset = rng.randrange(sealed_end)
            seg = next(s for s in log.segments if s.base_offset <= offset < s.next_offset)
            was_loaded = getattr(seg, "index_loaded", True)  # every segment's, before the change
            t0 = time.perf_counter()
            seg.lookup(offset)
            (warm if was_loaded else cold).append(time.perf_counter() - t0)
            log.read(offset, 1)
        indexes = getattr(files, "indexes", None)
        print(f"after {args.reads} reads: index entries in memory {held_mb(log):.2f} MB, RSS {rss_mb():.1f} MB"
              + (f" (budget {indexes.budget / 2**20:.0f} MiB, {indexes.loads} read back, {indexes.evictions} "
                 f"dropped)" if indexes is not None else ""))
        for name, xs in (("read back", cold), ("in memory", warm)):
            if xs:
                xs.sort()
                print(f"lookup, index {name}: p50 {xs[len(xs) // 2] * 1e6:.0f} us, "
                      f"p99 {xs[int(len(xs) * 0.99)] * 1e6:.0f} us ({len(xs)} lookups)")
        log.close()


if __name__ == "__main__":
    main()
