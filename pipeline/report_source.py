"""The Spark data source that runs the report's scan (pipeline/report_scan.py), one input
partition per group of segments. Spark plans a Python data source in Python processes of its own
(the source's schema, then its partitions), each of which imports this module: it imports only
pyspark's data source API, and the tasks import the scan (numpy, pyarrow, the decoders) when they
run. Internal to `sharebroker pipeline report`; not registered by get_session."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

OUTPUT_DDL = "table string, payload binary"  # one row per table a task returns: Arrow IPC bytes


@dataclass
class ScanTask(InputPartition):
    task: int
    segments: list[list[Any]]  # Segment fields: path, topic, partition, base offset, size, topic id


class ReportScanSource(DataSource):
    """`spark.read.format("sharebroker_report_scan").option("output", DIR).option("plan", JSON)`:
    the plan is {"tasks": [[segment fields, ...], ...], "archived": [[topic, partition, [[first, last, group,
    delivery count], ...]], ...]}."""

    @classmethod
    def name(cls) -> str:
        return "sharebroker_report_scan"

    def schema(self) -> str:
        return OUTPUT_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        return _ScanReader(dict(self.options))


class _ScanReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        plan = json.loads(options["plan"])
        self.output, self.tasks, self.archived = options["output"], plan["tasks"], plan["archived"]

    def partitions(self) -> list[InputPartition]:
        return [ScanTask(i, segs) for i, segs in enumerate(self.tasks)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow as pa

        from sharebroker.pipeline.analytics import Segment
        from sharebroker.pipeline.report_scan import ipc_bytes, scan_task

        assert isinstance(partition, ScanTask)
        archived = {(t, p): [tuple(r) for r in ranges] for t, p, ranges in self.archived}
        tables = scan_task(partition.task, [Segment(*s) for s in partition.segments], self.output, archived)
        yield pa.RecordBatch.from_pydict({"table": list(tables), "payload": [ipc_bytes(t) for t in tables.values()]},
                                         schema=pa.schema([("table", pa.string()), ("payload", pa.binary())]))
