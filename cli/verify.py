"""`sharebroker verify`: check a data directory's record batches offline, like Kafka's
`kafka-dump-log.sh --verify` (`--deep-iteration` also decodes every record).

The broker serves stored batches verbatim and never checks their CRC on the read path (as Kafka),
so a byte flipped on disk in an older segment reaches consumers as is; clients that do not check
CRCs then stall or skip past it. This walks every segment of every partition (or of --topic),
checks each batch's header, CRC-32C and offsets, and lists the damaged byte ranges with the
offsets they held. After damage it looks for the next whole batch with a valid CRC and goes on
from there, so one bad spot does not hide the rest. Exit status: 0 clean, 1 damage found,
2 nothing to check (no such directory or topic).

Run it on a stopped broker's directory (a running broker's active segments grow meanwhile)."""

from __future__ import annotations

import argparse
import mmap
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from sharebroker.protocol.crc import crc32c
from sharebroker.protocol.record_batch import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    InvalidRecordError,
    decode_records,
    read_header,
)

_CRC_START = 21
_MAGIC_AT = 16
_INT32_MAX = 0x7FFFFFFF


@dataclass
class Damage:
    file: Path
    start: int  # byte position where the damage starts
    end: int  # byte position where readable batches resume (the file size if they do not)
    first_offset: int  # the first offset the damaged bytes held (as far as the log tells)
    last_offset: int | None  # the last one, None when no whole batch follows in the segment
    reason: str

    def describe(self) -> str:
        first, last = self.first_offset, self.last_offset
        if last is None:
            offsets = f"offsets from {first}"
        elif last > first:
            offsets = f"offsets {first}-{last}"
        elif last == first:
            offsets = f"offset {first}"
        else:
            offsets = f"no offsets lost, before offset {first}"
        return (f"{self.file}: damaged bytes {self.start}-{self.end} ({self.end - self.start} bytes, "
                f"{offsets}): {self.reason}")


@dataclass
class SegmentCheck:
    file: Path
    size: int
    batches: int = 0
    first_offset: int = -1
    last_offset: int = -1
    damages: list[Damage] = field(default_factory=list)


def _header_problem(buf: bytes | mmap.mmap, pos: int, n: int) -> tuple[str | None, int]:
    """(what is wrong with the batch at `pos`, its size); None when its header and CRC are fine."""
    if n - pos < BATCH_HEADER_SIZE:
        return f"{n - pos} bytes at the end of the file, less than a batch header", 0
    h = read_header(buf, pos)
    if h.magic != 2:
        return f"invalid magic {h.magic}", 0
    if h.batch_length < MIN_BATCH_LENGTH:
        return f"batch length {h.batch_length} below the minimum {MIN_BATCH_LENGTH}", 0
    size = h.batch_length + LOG_OVERHEAD
    if pos + size > n:
        return f"batch declares {size} bytes, the file has {n - pos} left", 0
    if h.record_count < 0 or h.last_offset_delta < 0:
        return "negative record count or last offset delta", size
    crc = crc32c(memoryview(buf)[pos + _CRC_START:pos + size])
    if crc != h.crc:
        return f"CRC mismatch (stored {h.crc:#010x}, computed {crc:#010x})", size
    return None, size


def _resync(buf: bytes | mmap.mmap, after: int, n: int, min_offset: int) -> int | None:
    """The position of the next whole batch with a valid CRC after `after` whose base offset is
    not below `min_offset` (candidates are found by their magic byte), or None."""
    at = after + 1 + _MAGIC_AT
    while True:
        i = buf.find(b"\x02", at)
        if i < 0:
            return None
        at = i + 1
        pos = i - _MAGIC_AT
        if pos + BATCH_HEADER_SIZE > n:
            return None
        h = read_header(buf, pos)
        if h.base_offset < min_offset or h.base_offset - min_offset > _INT32_MAX:
            continue
        problem, _size = _header_problem(buf, pos, n)
        if problem is None:
            return pos


def _deep_problem(buf: bytes | mmap.mmap, pos: int, size: int) -> str | None:
    try:
        batch = bytes(memoryview(buf)[pos:pos + size])
        h = read_header(batch, 0)
        records = decode_records(batch)
    except ImportError:
        return None  # the codec's library is absent: the CRC check has to do
    except (InvalidRecordError, ValueError, EOFError, OSError) as exc:
        return f"records do not decode: {exc}"
    except Exception as exc:  # noqa: BLE001 - a codec's own error type
        return f"records do not decode: {type(exc).__name__}: {exc}"
    if len(records) != h.record_count:
        return f"{len(records)} records decoded, the header says {h.record_count}"
    if records and records[-1].offset != h.last_offset:
        return f"last record has offset {records[-1].offset}, the header says {h.last_offset}"
    return None


def check_segment(path: Path, base_offset: int, *, deep: bool = False) -> SegmentCheck:
    """Every batch of one `.log` file, with the damaged ranges found."""
    size = path.stat().st_size
    check = SegmentCheck(path, size)
    if size == 0:
        return check
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        pos = 0
        expected = base_offset
        while pos < size:
            problem, bsize = _header_problem(buf, pos, size)
            if problem is None:
                h = read_header(buf, pos)
                if h.base_offset != expected:
                    # Base offsets are outside the CRC: a batch that does not continue where the
                    # previous one ended holds a damaged (or foreign) header.
                    check.damages.append(Damage(path, pos, pos + bsize, expected, expected + h.last_offset_delta,
                                                f"base offset {h.base_offset}, expected {expected}"))
                elif deep and (why := _deep_problem(buf, pos, bsize)) is not None:
                    check.damages.append(Damage(path, pos, pos + bsize, h.base_offset, h.last_offset, why))
                else:
                    if check.first_offset < 0:
                        check.first_offset = h.base_offset
                    check.last_offset = h.last_offset
                check.batches += 1
                expected += h.last_offset_delta + 1
                pos += bsize
                continue
            nxt = _resync(buf, pos, size, expected)
            if nxt is None:
                check.damages.append(Damage(path, pos, size, expected, None, problem))
                break
            resumed = read_header(buf, nxt).base_offset
            check.damages.append(Damage(path, pos, nxt, expected, resumed - 1, problem))
            expected = resumed
            pos = nxt
    return check


def partition_dirs(data_dir: Path, topic: str | None) -> Iterator[tuple[str, int, Path]]:
    """(topic, partition, directory) of every partition directory, sorted."""
    found = []
    for entry in os.scandir(data_dir):
        if not entry.is_dir(follow_symlinks=False):
            continue
        name, sep, index = entry.name.rpartition("-")
        if not sep or not name or not index.isdigit():
            continue
        if topic is not None and name != topic:
            continue
        found.append((name, int(index), Path(entry.path)))
    yield from sorted(found)


def segment_files(directory: Path) -> list[tuple[int, Path]]:
    out = []
    for name in os.listdir(directory):
        if name.endswith(".log") and len(name) == 24 and name[:20].isdigit():
            out.append((int(name[:20]), directory / name))
    return sorted(out)


def verify(data_dir: Path, topic: str | None = None, *, deep: bool = False,
           verbose: bool = False, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    if not data_dir.is_dir():
        print(f"sharebroker verify: {data_dir} is not a directory", file=sys.stderr)
        return 2
    partitions = segments = batches = 0
    damages: list[Damage] = []
    for _name, _index, directory in partition_dirs(data_dir, topic):
        partitions += 1
        for base, path in segment_files(directory):
            check = check_segment(path, base, deep=deep)
            segments += 1
            batches += check.batches
            damages += check.damages
            if verbose or check.damages:
                span = (f"offsets {check.first_offset}-{check.last_offset}" if check.first_offset >= 0
                        else "no readable batch")
                state = f"{len(check.damages)} damaged range(s)" if check.damages else "ok"
                print(f"{path}: {check.batches} whole batches, {span}, {check.size} bytes: {state}", file=out)
            for d in check.damages:
                print(f"  {d.describe()}", file=out)
    if partitions == 0:
        what = f"topic {topic}" if topic is not None else "partition directory"
        print(f"sharebroker verify: no {what} in {data_dir}", file=sys.stderr)
        return 2
    files = len({d.file for d in damages})
    summary = (f"checked {partitions} partition(s), {segments} segment(s), {batches} batch(es)"
               f"{' with records decoded' if deep else ''}: ")
    summary += (f"{len(damages)} damaged range(s) in {files} segment(s)" if damages else "no damage found")
    print(summary, file=out)
    return 1 if damages else 0


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("verify", help="check the record batches of a data directory (offline)",
                       description="Check every batch of every segment in a data directory: header, CRC-32C and "
                                   "offsets (like kafka-dump-log.sh --verify). Lists each damaged byte range with "
                                   "its file, position and offsets; exits 1 if any is found, 0 if none. Run it on a "
                                   "stopped broker's directory.")
    p.add_argument("--data-dir", "--log-dirs", dest="data_dir", required=True, metavar="DIR",
                   help="the broker's log directory (log.dirs)")
    p.add_argument("--topic", metavar="TOPIC", help="check only this topic's partitions")
    p.add_argument("--deep-iteration", action="store_true",
                   help="also decompress and decode every record of every batch")
    p.add_argument("--verbose", "-v", action="store_true", help="list every segment, not only damaged ones")
    p.set_defaults(handler=lambda args: verify(Path(args.data_dir), args.topic, deep=args.deep_iteration,
                                               verbose=args.verbose))
    return p
