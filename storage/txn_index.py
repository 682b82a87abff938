"""Kafka's transaction index, `<base>.txnindex` next to a segment: one 34-byte entry per aborted
transaction whose abort marker is in that segment (version int16 0, producer id int64, first
offset int64, last offset int64 = the marker's offset, last stable offset int64 after the abort),
appended in marker order. read_committed readers learn from it which records to skip. The file is
created by the first entry, as Kafka creates it lazily, and goes with its segment."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sharebroker.storage.file_cache import open_file
from sharebroker.storage.files import write_all, write_atomic

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxnEntry:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def encode(entries: Iterable[AbortedTxnEntry]) -> bytes:
    return b"".join(_ENTRY.pack(VERSION, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset)
                    for e in entries)


def append(path: Path, entries: Iterable[AbortedTxnEntry]) -> None:
    """Append entries (aborts are rare: the file is opened per append)."""
    data = encode(entries)
    if not data:
        return
    fd = open_file(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        write_all(fd, data)
    finally:
        os.close(fd)


def read(path: Path) -> tuple[list[AbortedTxnEntry], str | None]:
    """The entries of an index file (none if it is missing), and what was wrong with it, if
    anything: a torn last entry (a crash in mid-append) or an entry of an unknown version; the
    entries before the damage are returned."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], None
    out: list[AbortedTxnEntry] = []
    usable = len(data) - len(data) % ENTRY_SIZE
    for pos in range(0, usable, ENTRY_SIZE):
        version, producer_id, first, last, lso = _ENTRY.unpack_from(data, pos)
        if version != VERSION:
            return out, f"{path.name}: entry {pos // ENTRY_SIZE} has unknown version {version}"
        out.append(AbortedTxnEntry(producer_id, first, last, lso))
    if usable != len(data):
        return out, f"{path.name}: {len(data) - usable} trailing bytes of a torn entry"
    return out, None


def rewrite(path: Path, entries: list[AbortedTxnEntry]) -> None:
    """Replace the file's content by `entries` (removing it when none are left)."""
    if not entries:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        return
    write_atomic(path, encode(entries))


def truncate_to(path: Path, end_offset: int) -> str | None:
    """Kafka's TransactionIndex.truncateTo: drop the entries whose marker is at or past
    `end_offset` (the log was cut there), and any damaged tail. Returns what was done, if anything."""
    entries, damage = read(path)
    kept = [e for e in entries if e.last_offset < end_offset]
    if damage is None and len(kept) == len(entries):
        return None
    rewrite(path, kept)
    dropped = len(entries) - len(kept)
    note = f"{path.name}: {dropped} entries past offset {end_offset} dropped" if dropped else ""
    return "; ".join(n for n in (damage, note) if n)
