"""Allocator tuning for the broker process.

Every produce request moves megabyte-sized buffers through Python objects. glibc serves
allocations that large with mmap and unmaps them on free, so each new one page-faults all of its
pages in again: in a produce profile that was a third of the broker's time. Raising the mmap and
trim thresholds keeps such buffers in the heap, where freed memory is reused as it is; the heap
may then hold up to the trim threshold of free memory after a burst."""

from __future__ import annotations

import ctypes
import ctypes.util

from sharebroker.broker.structured_log import get_logger

log = get_logger("sharebroker.memory")

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's ceiling for this setting on 64-bit
TRIM_THRESHOLD = 64 << 20


def tune_allocator() -> bool:
    """Apply the thresholds when the C library is glibc; True if applied."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    if not ok:
        log.info("allocator thresholds not applied")
    return ok


def trim_heap() -> None:
    """Give free heap pages back to the OS (glibc's malloc_trim), e.g. after many connections
    closed: their buffers were freed, but inside the heap, where RSS still counts them."""
    name = ctypes.util.find_library("c")
    if not name:
        return
    try:
        ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass
