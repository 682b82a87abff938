"""`sharebroker verify`: every batch of a data directory checked offline (header, CRC-32C, offsets),
damaged ranges reported by file, byte position and offsets, exit 1 when any is found."""

from __future__ import annotations

import gzip
import io
import struct
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from sharebroker.cli.main import main as cli_main
from sharebroker.protocol.crc import crc32c
from sharebroker.protocol.record_batch import encode_batch, parse_batches
from sharebroker.storage import LogConfig, PartitionLog

NOW = 1_700_000_000_000


def build(data_dir: Path, topic: str = "orders", partition: int = 0, *, batches: int = 30,
          per_batch: int = 5, size: int = 400, segment_bytes: int = 20_000) -> list[tuple[int, int, int]]:
    """A partition written through the real log; (segment base, position, base offset) of every batch."""
    log = PartitionLog.open(data_dir / f"{topic}-{partition}", LogConfig(segment_bytes=segment_bytes),
                            recovery_point=0, clean_shutdown=True, now_ms=NOW)
    for i in range(batches):
        buf = encode_batch([(None, f"{i}-{j}".encode().ljust(size, b".")) for j in range(per_batch)],
                           timestamp_ms=NOW + i)
        log.append(buf, parse_batches(buf, verify_crc=True), leader_epoch=0, now_ms=NOW)
    log.close()
    out = []
    for seg in sorted((data_dir / f"{topic}-{partition}").glob("*.log")):
        data = seg.read_bytes()
        pos = 0
        for h in parse_batches(data, verify_crc=True):
            out.append((int(seg.name[:20]), pos, h.base_offset))
            pos += h.size
    return out


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli_main(["verify", *args])
    return code, out.getvalue(), err.getvalue()


def segment_path(data_dir: Path, topic: str, partition: int, base: int) -> Path:
    return data_dir / f"{topic}-{partition}" / f"{base:020d}.log"


def flip(path: Path, position: int, mask: int = 0x01) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        b = f.read(1)[0]
        f.seek(position)
        f.write(bytes([b ^ mask]))


def test_clean_directory_passes(tmp_path):
    build(tmp_path)
    build(tmp_path, "payments", 1)
    code, out, err = run("--data-dir", str(tmp_path), "--verbose")
    assert code == 0, (out, err)
    assert "no damage found" in out and "checked 2 partition(s)" in out
    assert out.count(": ok") >= 3  # the partitions rolled: several segments each


def test_flipped_byte_in_an_older_segment_is_reported_with_file_position_and_offsets(tmp_path):
    layout = build(tmp_path)
    bases = sorted({b for b, _, _ in layout})
    assert len(bases) >= 3
    # The second batch of the first (older, sealed) segment: a byte in its records.
    seg_base, position, base_offset = [x for x in layout if x[0] == bases[0]][1]
    path = segment_path(tmp_path, "orders", 0, seg_base)
    flip(path, position + 200)
    code, out, _ = run("--data-dir", str(tmp_path))
    assert code == 1, out
    size = parse_batches(path.read_bytes()[position:], verify_crc=False)[0].size
    line = f"{path}: damaged bytes {position}-{position + size} ({size} bytes, offsets {base_offset}-{base_offset + 4})"
    assert line in out, out
    assert "CRC mismatch" in out
    assert "1 damaged range(s) in 1 segment(s)" in out


def test_damaged_header_resyncs_at_the_next_good_batch(tmp_path):
    layout = build(tmp_path)
    first = [x for x in layout if x[0] == 0]
    _, position, base_offset = first[2]
    _, next_position, next_offset = first[3]
    path = segment_path(tmp_path, "orders", 0, 0)
    # The batch length of the third batch: the walk cannot know where the next one starts.
    with open(path, "r+b") as f:
        f.seek(position + 8)
        f.write(struct.pack(">i", 7))
    # And a CRC error further on, in the same segment, is still found.
    _, later, later_offset = first[5]
    flip(path, later + 100)
    code, out, _ = run("--data-dir", str(tmp_path), "--topic", "orders")
    assert code == 1
    assert (f"{path}: damaged bytes {position}-{next_position} ({next_position - position} bytes, "
            f"offsets {base_offset}-{next_offset - 1}): batch length 7 below the minimum 49") in out, out
    assert f"damaged bytes {later}-" in out and f"offsets {later_offset}-{later_offset + 4}" in out
    assert "2 damaged range(s) in 1 segment(s)" in out


def test_torn_tail_and_a_rewritten_base_offset_are_damage(tmp_path):
    layout = build(tmp_path)
    last_base = max(b for b, _, _ in layout)
    path = segment_path(tmp_path, "orders", 0, last_base)
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(b"\0" * 30)
    # The base offset lies outside the CRC: a wrong one shows as a batch out of sequence.
    seg0 = segment_path(tmp_path, "orders", 0, 0)
    _, position, base_offset = [x for x in layout if x[0] == 0][1]
    with open(seg0, "r+b") as f:
        f.seek(position)
        f.write(struct.pack(">q", 999_999))
    code, out, _ = run("--data-dir", str(tmp_path))
    assert code == 1
    assert f"{path}: damaged bytes {size}-{size + 30} (30 bytes, offsets from" in out, out
    assert f"base offset 999999, expected {base_offset}" in out


def test_topic_filter_and_missing_things(tmp_path):
    layout = build(tmp_path)
    build(tmp_path, "payments")
    flip(segment_path(tmp_path, "orders", 0, 0), layout[1][1] + 100)
    assert run("--data-dir", str(tmp_path), "--topic", "payments")[0] == 0
    assert run("--data-dir", str(tmp_path), "--topic", "orders")[0] == 1
    code, _, err = run("--data-dir", str(tmp_path), "--topic", "nope")
    assert code == 2 and "no topic nope" in err
    code, _, err = run("--data-dir", str(tmp_path / "missing"))
    assert code == 2 and "is not a directory" in err


def test_deep_iteration_decodes_records(tmp_path):
    """A batch whose CRC is right but whose records do not decode (a producer's bug, or a
    compressed payload that was damaged before the CRC was computed) shows only with
    --deep-iteration."""
    build(tmp_path, batches=3)
    # Replace the last batch with one whose gzip payload is truncated but whose CRC matches.
    records = bytes(encode_batch([(None, b"x" * 100)], timestamp_ms=NOW))
    body = gzip.compress(records[61:])[:-8]
    header = bytearray(records[:61])
    struct.pack_into(">h", header, 21, 1)  # attributes: gzip
    batch = header + body
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">q", batch, 0, 15)  # the offset after the three batches of five
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    path = segment_path(tmp_path, "orders", 0, 0)
    with open(path, "ab") as f:
        f.write(batch)
    assert run("--data-dir", str(tmp_path))[0] == 0
    code, out, _ = run("--data-dir", str(tmp_path), "--deep-iteration")
    assert code == 1 and "records do not decode" in out and f"damaged bytes {path.stat().st_size - len(batch)}-" in out


def test_subcommand_is_registered():
    with pytest.raises(SystemExit) as exc, redirect_stdout(io.StringIO()) as out:
        cli_main(["verify", "--help"])
    assert exc.value.code == 0 and "--data-dir" in out.getvalue()
