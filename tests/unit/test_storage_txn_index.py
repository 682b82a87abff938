"""Kafka's `.txnindex` files: the 34-byte entry format, torn and unknown entries, the entry going
to the segment that holds the abort marker, entries past a cut log dropped at open, and the file
going with its segment (retention, orphans)."""

from __future__ import annotations

import struct
from pathlib import Path

from sharebroker.storage import PartitionLog, txn_index
from sharebroker.storage.txn_index import AbortedTxnEntry
from tests.unit.test_storage_recovery import CONFIG, NOW, crash, fill, put, reopen


def test_entry_format_is_kafkas() -> None:
    entry = AbortedTxnEntry(producer_id=7, first_offset=10, last_offset=15, last_stable_offset=16)
    assert txn_index.encode([entry]) == struct.pack(">hqqqq", 0, 7, 10, 15, 16)
    assert txn_index.ENTRY_SIZE == 34


def test_read_append_torn_and_unknown_entries(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    assert txn_index.read(path) == ([], None)  # Kafka creates the file with the first entry
    a, b = AbortedTxnEntry(1, 0, 4, 5), AbortedTxnEntry(2, 3, 9, 10)
    txn_index.append(path, [a])
    txn_index.append(path, [b])
    assert txn_index.read(path) == ([a, b], None)
    with path.open("ab") as f:
        f.write(b"\x00\x00\x00")  # a crash in the middle of an entry
    entries, damage = txn_index.read(path)
    assert entries == [a, b] and damage is not None and "torn" in damage
    assert txn_index.truncate_to(path, 100) is not None  # the torn tail goes
    assert path.stat().st_size == 2 * 34
    path.write_bytes(txn_index.encode([a]) + struct.pack(">hqqqq", 5, 0, 0, 0, 0))
    entries, damage = txn_index.read(path)
    assert entries == [a] and damage is not None and "version 5" in damage


def test_truncate_to_drops_entries_whose_marker_is_gone(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    entries = [AbortedTxnEntry(1, 0, 4, 5), AbortedTxnEntry(2, 3, 9, 10), AbortedTxnEntry(3, 8, 12, 13)]
    txn_index.append(path, entries)
    assert txn_index.truncate_to(path, 13) is None  # every marker is below the end: untouched
    assert "2 entries past offset 9" in (txn_index.truncate_to(path, 9) or "")
    assert txn_index.read(path)[0] == entries[:1]
    txn_index.truncate_to(path, 0)
    assert not path.exists()


def test_entries_go_to_the_segment_of_their_marker_and_read_back_in_order(tmp_path: Path) -> None:
    log = fill(tmp_path, 120)  # several segments of 3000 bytes
    segs = log.segments
    assert len(segs) >= 3
    first = AbortedTxnEntry(1, segs[0].base_offset, segs[0].next_offset - 1, segs[0].next_offset)
    second = AbortedTxnEntry(2, segs[0].base_offset + 1, segs[1].base_offset + 2, segs[1].base_offset + 3)
    log.append_aborted_txn(first)
    log.append_aborted_txn(second)
    assert txn_index.read(segs[0].txnindex_path)[0] == [first]
    assert txn_index.read(segs[1].txnindex_path)[0] == [second]
    assert not segs[2].txnindex_path.exists()
    assert log.aborted_txns() == [first, second]
    log.flush()  # fsyncs the new file with its segment
    log.close()
    again = reopen(tmp_path, clean=True)
    assert again.aborted_txns() == [first, second]
    again.close()


def test_open_after_a_cut_drops_entries_past_the_new_end(tmp_path: Path) -> None:
    log = fill(tmp_path, 10)
    end = log.log_end_offset
    kept = AbortedTxnEntry(1, 0, end - 3, end - 2)
    lost = AbortedTxnEntry(2, 1, end, end + 1)  # its marker never reached the log (or was torn off)
    log.append_aborted_txn(kept)
    log.append_aborted_txn(lost)
    crash(log)
    again = reopen(tmp_path)
    assert again.aborted_txns() == [kept]
    assert any("past offset" in note for note in again.recovery_report)
    again.close()


def test_the_file_goes_with_its_segment(tmp_path: Path) -> None:
    config = CONFIG
    log = fill(tmp_path, 120, config=config)
    first = log.segments[0]
    log.append_aborted_txn(AbortedTxnEntry(1, 0, 1, 2))
    assert first.txnindex_path.exists()
    log.delete_records(log.segments[1].base_offset)
    assert not first.txnindex_path.exists()
    assert log.aborted_txns() == []
    # an index whose segment is gone is a leftover, removed at open
    orphan = tmp_path / "00000000000000000001.txnindex"
    txn_index.append(orphan, [AbortedTxnEntry(1, 0, 1, 2)])
    log.close()
    again = PartitionLog.open(tmp_path, config, recovery_point=0, clean_shutdown=True, now_ms=NOW)
    assert not orphan.exists()
    put(again, again.log_end_offset)
    again.close()
