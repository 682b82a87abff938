"""`sharebroker pipeline export` and `import` as a user runs them: subprocesses with their own Spark
(local[2]) against a broker subprocess."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.integration.clients import create_topic
from tests.integration.share_helpers import produce_values
from tests.spark.test_kafka_source_sink import _consume_all

pytestmark = pytest.mark.spark


def pipeline(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
    return subprocess.run([sys.executable, "-m", "sharebroker", "pipeline", *args, "--master", "local[2]"],
                          capture_output=True, text=True, timeout=110, env=env)


def test_export_then_import_round_trip(broker, tmp_path):
    create_topic(broker.bootstrap, "cli-src", 2)
    for part in range(2):
        produce_values(broker.bootstrap, "cli-src", [f"{part}-{i}".encode() for i in range(250)], partition=part)

    out = tmp_path / "export"
    r = pipeline("export", "--bootstrap-server", broker.bootstrap, "--topic", "cli-src", "--output", str(out),
                 "--min-partitions", "4")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "exported topic cli-src" in r.stderr
    table = pq.read_table(out)
    assert table.num_rows == 500
    assert sorted(zip(table["partition"].to_pylist(), table["offset"].to_pylist())) == \
        [(p, o) for p in range(2) for o in range(250)]

    r = pipeline("import", "--bootstrap-server", broker.bootstrap, "--topic", "cli-dst", "--input", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "imported 500 records" in r.stderr
    got = _consume_all(broker.bootstrap, "cli-dst", 500)
    assert sorted(m.value() for m in got) == sorted(f"{p}-{i}".encode() for p in range(2) for i in range(250))


def test_export_follow_available_now_to_csv_with_a_checkpoint(broker, tmp_path):
    create_topic(broker.bootstrap, "cli-follow", 1)
    produce_values(broker.bootstrap, "cli-follow", [f"row-{i}".encode() for i in range(300)], partition=0)
    out, checkpoint = tmp_path / "csv", tmp_path / "checkpoint"
    args = ["export", "--bootstrap-server", broker.bootstrap, "--topic", "cli-follow", "--output", str(out),
            "--format", "csv", "--follow", "--checkpoint", str(checkpoint), "--available-now",
            "--max-offsets-per-trigger", "100"]
    r = pipeline(*args)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "batch 2: 100 records" in r.stderr

    produce_values(broker.bootstrap, "cli-follow", [f"row-{i}".encode() for i in range(300, 350)], partition=0)
    r = pipeline(*args)  # resumes from the checkpoint: only the new records
    assert r.returncode == 0, r.stderr[-3000:]
    assert "batch 3: 50 records" in r.stderr
    values = []
    for f in Path(out).glob("*.csv"):
        with f.open() as fh:
            values += [row[1] for row in csv.reader(fh)]
    assert sorted(values) == sorted(f"row-{i}" for i in range(350))


def test_pipeline_arguments_are_checked(tmp_path):
    r = pipeline("export", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--output", str(tmp_path), "--follow")
    assert r.returncode == 2 and "--follow needs --checkpoint" in r.stderr
    r = pipeline("report", "--data-dir", str(tmp_path / "missing"), "--output", str(tmp_path / "o"))
    assert r.returncode == 2 and "is not a directory" in r.stderr


def test_report_from_the_command_line(tmp_path):
    """`pipeline report` as a user runs it: the tables and report.md written, the report's time and
    rate printed apart from Spark's start-up."""
    from sharebroker.protocol.record_batch import encode_batch

    seg = tmp_path / "data" / "orders-0" / f"{0:020d}.log"
    seg.parent.mkdir(parents=True)
    seg.write_bytes(b"".join(bytes(encode_batch([(None, f"v{i}-{j}".encode()) for j in range(10)],
                                                timestamp_ms=1_700_000_000_000, base_offset=10 * i))
                             for i in range(3)))
    out = tmp_path / "report"
    r = pipeline("report", "--data-dir", str(tmp_path / "data"), "--output", str(out))
    assert r.returncode == 0, r.stderr
    assert "after Spark started" in r.stderr and "MB/s of log" in r.stderr
    values = sorted(row["value"] for row in pq.read_table(out / "records" / "topic=orders").to_pylist())
    assert values == sorted(f"v{i}-{j}".encode() for i in range(3) for j in range(10))
    assert "| orders | 0 | 30 | 0 | 30 |" in (out / "report.md").read_text()


def test_follow_export_survives_a_kill_9_and_resumes_from_its_checkpoint(spark, broker, tmp_path):
    """A streaming export killed with SIGKILL mid-stream (Spark and its JVM) and started again on
    its checkpoint: every record exactly once in the Parquet output, as Spark reads it."""
    import signal

    from sharebroker.testing import wait_for

    create_topic(broker.bootstrap, "cli-crash", 2)
    for part in range(2):
        produce_values(broker.bootstrap, "cli-crash", [f"{part}-{i}".encode() for i in range(1000)], partition=part)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    args = [sys.executable, "-m", "sharebroker", "pipeline", "export", "--bootstrap-server", broker.bootstrap,
            "--topic", "cli-crash", "--output", str(out), "--follow", "--checkpoint", str(checkpoint),
            "--max-offsets-per-trigger", "200", "--trigger-seconds", "0.2", "--master", "local[2]"]
    env = {**os.environ, "JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            start_new_session=True)
    try:
        commits = checkpoint / "commits"
        wait_for(lambda: commits.is_dir() and len([p for p in commits.iterdir() if p.name.isdigit()]) >= 2,
                 timeout=90, message="two committed micro-batches")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    done = len([p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()])
    assert done < 10  # killed mid-stream: 2,000 records take 10 micro-batches of 200

    r = pipeline("export", "--bootstrap-server", broker.bootstrap, "--topic", "cli-crash", "--output", str(out),
                 "--follow", "--checkpoint", str(checkpoint), "--available-now", "--max-offsets-per-trigger", "200")
    assert r.returncode == 0, r.stderr[-3000:]
    rows = spark.read.parquet(str(out)).select("partition", "offset").collect()
    assert len(rows) == 2000
    assert {(r.partition, r.offset) for r in rows} == {(p, o) for p in range(2) for o in range(1000)}
