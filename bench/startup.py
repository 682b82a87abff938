"""Start-up time of `sharebroker serve`: process start to listening (ready file written)."""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from tests.support.broker_process import BrokerProcess


def measure(runs: int = 5) -> dict[str, float]:
    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            proc = BrokerProcess(Path(tmp) / f"empty-{i}")
            proc.start()
            figures.append(proc.start_seconds)
            proc.stop()
    return {"median_s": statistics.median(figures), "min_s": min(figures), "max_s": max(figures), "runs": runs}


def main() -> None:
    r = measure()
    print(f"start-up on an empty data directory (process start to listening), {r['runs']} runs: "
          f"median {r['median_s']*1000:.0f} ms (min {r['min_s']*1000:.0f}, max {r['max_s']*1000:.0f})")


if __name__ == "__main__":
    main()
