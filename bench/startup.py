"""Start-up time of `sharebroker serve` (process start to listening, the ready file written), and of
the test fixture users get (`sharebroker.testing.running_broker`, what the pytest plugin's
`sharebroker` fixture runs): from entering the `with` to the first Metadata answer.

    python -m bench.startup [--runs N]"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from sharebroker.cli.healthcheck import check
from sharebroker.testing import BrokerProcess, running_broker


def _summary(figures: list[float]) -> dict[str, float]:
    return {"median_s": statistics.median(figures), "min_s": min(figures), "max_s": max(figures), "runs": len(figures)}


def measure(runs: int = 5) -> dict[str, float]:
    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            proc = BrokerProcess(Path(tmp) / f"empty-{i}")
            proc.start()
            figures.append(proc.start_seconds)
            proc.stop()
    return _summary(figures)


def measure_fixture(runs: int = 5) -> dict[str, float]:
    """`with running_broker() as b:` entered, then one Metadata round trip answered."""
    figures = []
    for _ in range(runs):
        started = time.perf_counter()
        with running_broker() as broker:
            check(broker.bootstrap, 5000)
            figures.append(time.perf_counter() - started)
    return _summary(figures)


def _line(label: str, r: dict[str, float]) -> str:
    return (f"{label}, {r['runs']:.0f} runs: median {r['median_s']*1000:.0f} ms "
            f"(min {r['min_s']*1000:.0f}, max {r['max_s']*1000:.0f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    print(_line("start-up on an empty data directory (process start to listening)", measure(runs)))
    print(_line("test fixture: running_broker() entered to first Metadata answer", measure_fixture(runs)))


if __name__ == "__main__":
    main()
