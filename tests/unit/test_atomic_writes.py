"""write_atomic on a disk that refuses the write half-way (the file-size limit stands in for a
full disk: the kernel refuses to grow a file past it, EFBIG): the old content stays and no
temp file is left holding space."""

from __future__ import annotations

import contextlib
import resource
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from sharebroker.storage import write_atomic
from sharebroker.storage.txn_index import AbortedTxnEntry, read, rewrite


@contextlib.contextmanager
def files_limited_to(size: int) -> Iterator[None]:
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a refused write, not a killed process
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
        signal.signal(signal.SIGXFSZ, handler)


def test_a_failed_write_keeps_the_old_content_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "meta.json"
    write_atomic(path, b"old")
    with files_limited_to(16), pytest.raises(OSError):
        write_atomic(path, b"x" * 100)
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meta.json"]


def test_a_failed_transaction_index_rewrite_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    entries = [AbortedTxnEntry(1, 0, 5, 0), AbortedTxnEntry(2, 6, 9, 0)]
    rewrite(path, entries[:1])
    with files_limited_to(8), pytest.raises(OSError):
        rewrite(path, entries)
    assert read(path)[0] == entries[:1]
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]
