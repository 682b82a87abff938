"""A process's CPU time, for the benchmarks that judge the broker by its own cost.

`/proc/PID/stat` counts in clock ticks (10 ms), too coarse for a drain that costs the broker a
fraction of a second; each thread's `/proc/PID/task/TID/schedstat` counts nanoseconds on the CPU.
The sum over the live threads is the process's CPU time; the tick-based figure (which also keeps
exited threads) is the fallback where schedstat is missing."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) the process `pid` has used so far, to the nanosecond where the
    kernel keeps schedstat."""
    total_ns = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                total_ns += int((task / "schedstat").read_text().split()[0])
            except (FileNotFoundError, ProcessLookupError):
                continue  # a thread that ended between the listing and the read
    except FileNotFoundError:
        return ticks_cpu_seconds(pid)
    return total_ns / 1e9 if total_ns else ticks_cpu_seconds(pid)


def ticks_cpu_seconds(pid: int) -> float:
    """CPU seconds from /proc/PID/stat's utime + stime (10 ms ticks; includes exited threads)."""
    return sum(user_and_kernel_seconds(pid))


def user_and_kernel_seconds(pid: int) -> tuple[float, float]:
    """/proc/PID/stat's CPU seconds in user space and in the kernel (10 ms ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick
