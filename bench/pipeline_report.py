"""`sharebroker pipeline report` at size (issue 25): MB/s of log on `local[*]`, Spark's start-up
apart, with the time of each step of the report.

    python -m bench.pipeline_report [--data DIR] [--runs 3] [--master local[*]] [--out DIR] [--no-warm-up]

Without --data it writes bench.report_data's directory (500 topics, 1,000 groups, ~120 MB) to a
temporary directory first. Each run writes the report to a fresh temporary directory. Run 1 is what
the command line does (a fresh session: Python workers start, numpy and pyarrow import in them);
later runs reuse the workers. The report starts its warm-up job (the scan over no segments) beside
the driver's state replay; --no-warm-up leaves it out, to see what it saves. Beside it, the scan's
work alone: every segment through the task function in this one process, no Spark (CPU seconds, one
core). Target (issue 25): >= 20 MB/s.
The load average is printed: the figures are only as quiet as the machine."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET_MB_S = 20.0


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def scan_alone(data: Path, work: Path) -> float:
    """CPU seconds of the report's scan task over every segment, in this process (decoding and
    writing records/; the archived records' picking, which needs the replayed state, left out)."""
    from sharebroker.pipeline.analytics import list_segments
    from sharebroker.pipeline.report_scan import scan_task

    segments = [s for s in list_segments(data) if s.size > 0]
    t = time.process_time()
    scan_task(0, segments, str(work))
    return time.process_time() - t


def _jvm_cpu_s(spark: Any) -> float | None:
    """User + system CPU seconds of the driver JVM so far (Linux), None when it cannot be read."""
    try:
        pid = spark.sparkContext._gateway.proc.pid
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (AttributeError, OSError, ValueError, IndexError):
        return None


def one_report(spark: Any, data: Path, out: Path, warm_up: bool = True) -> dict[str, Any]:
    from sharebroker.pipeline.report import run_report

    steps: list[tuple[float, str]] = []
    jvm0, cpu0 = _jvm_cpu_s(spark), time.process_time()
    t0, epoch0 = time.perf_counter(), time.time()
    s = run_report(spark, data, out, progress=lambda text: steps.append((time.perf_counter(), text)), warm_up=warm_up)
    end = time.perf_counter()
    driver_cpu, jvm1 = time.process_time() - cpu0, _jvm_cpu_s(spark)
    marks = [*steps, (end, "done")]
    breakdown = [(text, marks[i + 1][0] - at) for i, (at, text) in enumerate(marks[:-1])]
    tasks = s.scan_tasks
    first = min((t["started"] for t in tasks), default=epoch0)
    last = max((t["started"] + t["wall_s"] for t in tasks), default=epoch0)
    scan = {"job_s": s.scan_s, "tasks": len(tasks), "task_wall_s": sum(t["wall_s"] for t in tasks),
            "task_cpu_s": sum(t["cpu_s"] for t in tasks),
            # From the scan step's start to its first task's start: planning, Python workers, imports
            # (what the warm-up job has not already paid).
            "before_first_task_s": first - epoch0 - (steps[2][0] - t0 if len(steps) > 2 else 0.0),
            "tasks_span_s": last - first, "warm_up_s": s.warm_up_s, "warm_up_wait_s": s.warm_up_wait_s}
    cpu = {"driver_s": driver_cpu, "tasks_s": scan["task_cpu_s"],
           "jvm_s": (jvm1 - jvm0) if jvm0 is not None and jvm1 is not None else None}
    return {"seconds": end - t0, "steps": breakdown, "scan": scan, "cpu": cpu, "load": _load()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, help="a broker data directory (default: generate one)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--out", type=Path, help="write the figures as JSON here")
    ap.add_argument("--no-warm-up", action="store_true",
                    help="without the report's warm-up job beside the state replay (what it saves)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="sharebroker-bench-report-") as tmp:
        work = Path(tmp)
        data = args.data
        if data is None:
            from bench.report_data import generate

            data = work / "data"
            print("generated", generate(data, topics=500, groups=1000, megabytes=110.0, seed=25))
        log_bytes = sum(f.stat().st_size for f in data.glob("*/*.log"))
        mb = log_bytes / 1e6
        print(f"{mb:.1f} MB of log in {data}; {os.cpu_count()} cores; load average {_load()}")

        alone_s = scan_alone(data, work / "alone")
        shutil.rmtree(work / "alone")
        print(f"scan work alone (no Spark, one process): {alone_s:.2f} CPU s = {mb / alone_s:.1f} MB/s per core")

        from sharebroker.pipeline.report import REPORT_CONF
        from sharebroker.pipeline.session import get_session

        t = time.perf_counter()
        spark = get_session(args.master, "bench-pipeline-report", REPORT_CONF)  # as the command line does
        spark.sparkContext.setLogLevel("ERROR")
        startup_s = time.perf_counter() - t
        jvm_args = list(spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
                        .getInputArguments())
        print(f"Spark start-up ({args.master}): {startup_s:.1f} s (not counted below); driver JVM options "
              f"{' '.join(a for a in jvm_args if a.startswith('-XX'))}")
        runs = []
        try:
            for i in range(args.runs):
                out = work / f"report-{i}"
                r = one_report(spark, data, out, warm_up=not args.no_warm_up)
                shutil.rmtree(out)
                runs.append(r)
                print(f"\nrun {i + 1}{' (fresh Python workers, as the command line)' if i == 0 else ''}: "
                      f"{r['seconds']:.1f} s = {mb / r['seconds']:.1f} MB/s (load average {r['load']})")
                for text, sec in r["steps"]:
                    print(f"  {sec:6.2f} s  {text}")
                sc = r["scan"]
                print(f"          Spark's warm-up job (beside the listing and the state replay): {sc['warm_up_s']:.2f} s, "
                      f"of which the scan still waited {sc['warm_up_wait_s']:.2f} s")
                print(f"          the scan job: {sc['before_first_task_s']:.2f} s before its first task started, "
                      f"{sc['tasks']} tasks over {sc['tasks_span_s']:.2f} s ({sc['task_wall_s']:.2f} s of task wall "
                      f"time, {sc['task_cpu_s']:.2f} s of task CPU)")
                cpu = r["cpu"]
                jvm = f"{cpu['jvm_s']:.2f}" if cpu["jvm_s"] is not None else "?"
                print(f"          CPU: driver {cpu['driver_s']:.2f} s, scan tasks {cpu['tasks_s']:.2f} s, JVM {jvm} s")
        finally:
            spark.stop()
        rates = [mb / r["seconds"] for r in runs]
        print(f"\nMB/s of log: first {rates[0]:.1f}, median {statistics.median(rates):.1f}, best {max(rates):.1f} "
              f"(target >= {TARGET_MB_S:.0f}: {'met' if statistics.median(rates) >= TARGET_MB_S else 'not met'} "
              f"by the median); Spark start-up {startup_s:.1f} s apart")
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "pipeline_report.json").write_text(json.dumps({
                "log_mb": mb, "spark_startup_s": startup_s, "scan_alone_cpu_s": alone_s,
                "runs": runs, "mb_per_s": rates}, indent=2))


if __name__ == "__main__":
    main()
