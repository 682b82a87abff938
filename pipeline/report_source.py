"""The tasks of the report's one Spark job: each runs the scan (pipeline/report_scan.py) over its
group of segments and returns the small tables as (name, Arrow IPC bytes) pairs.

The job is a plain RDD job (one partition per group of segments), not a Python data source: Spark
plans a data source read in Python processes of its own (the source's schema, then its reader
and partitions), which in a session's first such job cost seconds of the report's start. Here the
JVM plans alone and only the executors' Python workers run Python. This module is what the
workers unpickle: it imports nothing heavy, and a task imports the scan (numpy, pyarrow, the
decoders) when it runs. Internal to `sharebroker pipeline report`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

# A task's plan entry: (task number, [segment fields: path, topic, partition, base offset, size, topic id])
TaskPlan = tuple[int, list[list[Any]]]
# (topic, partition) -> the archived ranges the replayed state names: (first, last, group, delivery count)
ArchivedPlan = dict[tuple[str, int], list[tuple[Any, ...]]]


class ScanTasks:
    """The function Spark runs on each partition (`mapPartitions`): the scan of its tasks."""

    def __init__(self, output: str, archived: ArchivedPlan) -> None:
        self.output, self.archived = output, archived

    def __call__(self, tasks: Iterable[TaskPlan]) -> Iterator[tuple[str, bytes]]:
        from sharebroker.pipeline.analytics import Segment
        from sharebroker.pipeline.report_scan import ipc_bytes, scan_task

        for task, segments in tasks:
            tables = scan_task(task, [Segment(*s) for s in segments], self.output, self.archived)
            for name, table in tables.items():
                yield name, ipc_bytes(table)
