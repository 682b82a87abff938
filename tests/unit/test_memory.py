"""The allocator tuning keeps megabyte buffers in the heap: allocating and freeing one per produce
request must not page-fault its memory in again every time."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import resource, sys
from sharebroker.broker.memory import tune_allocator
applied = tune_allocator() if sys.argv[1] == "tuned" else False
def churn():
    # a produce request's buffers: the frame, the decoded records, the copy given offsets...
    for _ in range(200):
        a = bytes(1 << 20); b = bytearray(a); c = bytes(b); d = bytearray(c)
        del a, b, c, d
churn()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
churn()
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True).stdout
    applied, faults = out.split()
    return applied == "True", int(faults)


def test_megabyte_buffers_are_reused_without_page_faults_once_tuned() -> None:
    applied, tuned = _faults("tuned")
    if not applied:
        pytest.skip("not glibc: mallopt is unavailable")
    _, untuned = _faults("untuned")
    # 800 fresh megabytes are 204,800 pages; reused heap memory faults next to none of them.
    assert tuned < 2_000, tuned
    assert untuned > 10 * max(tuned, 100), (untuned, tuned)
