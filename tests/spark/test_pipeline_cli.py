"""`sharebroker pipeline export` and `import` as a user runs them: subprocesses with their own Spark
(local[2]) against a broker subprocess.

These tests need no Spark session of the test run (the output is read with pyarrow), so they run on a
pytest-xdist worker of their own beside the other Spark tests (tests/conftest.py). Each command
starts a JVM; on a loaded two-core machine one takes up to a minute, so a test's time limit covers
its commands' own deadlines."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.integration.clients import create_topic
from tests.integration.share_helpers import produce_values
from tests.spark.test_kafka_source_sink import _consume_all

PIPELINE_TIMEOUT_S = 110  # one command, Spark's start-up included
pytestmark = [pytest.mark.spark, pytest.mark.timeout(3 * PIPELINE_TIMEOUT_S)]


def pipeline(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
    return subprocess.run([sys.executable, "-m", "sharebroker", "pipeline", *args, "--master", "local[2]"],
                          capture_output=True, text=True, timeout=PIPELINE_TIMEOUT_S, env=env)


def committed_files(out: Path) -> list[str]:
    """The data files Spark's file sink committed under `out`, relative to it: what its log
    `_spark_metadata` names (a JSON line per file after a version line, compacted every ten
    batches into a file holding all before it), as Spark itself reads such a directory."""
    from urllib.parse import unquote, urlparse

    added: set[str] = set()
    deleted: set[str] = set()
    for entry in (out / "_spark_metadata").iterdir():
        if entry.name.startswith("."):
            continue  # Hadoop's .crc side files
        lines = entry.read_text().splitlines()
        assert lines and lines[0] == "v1", (entry, lines[:1])
        for line in lines[1:]:
            status = json.loads(line)
            (added if status["action"] == "add" else deleted).add(unquote(urlparse(status["path"]).path))
    files = sorted(os.path.relpath(path, out) for path in added - deleted)
    assert files, f"no committed files in {out}"
    return files


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
    """One run of a followed export in micro-batches of at most 100 into CSV (resuming from its
    checkpoint is the kill -9 test's part)."""
    create_topic(broker.bootstrap, "cli-follow", 1)
    produce_values(broker.bootstrap, "cli-follow", [f"row-{i}".encode() for i in range(300)], partition=0)
    out, checkpoint = tmp_path / "csv", tmp_path / "checkpoint"
    r = pipeline("export", "--bootstrap-server", broker.bootstrap, "--topic", "cli-follow", "--output", str(out),
                 "--format", "csv", "--follow", "--checkpoint", str(checkpoint), "--available-now",
                 "--max-offsets-per-trigger", "100")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "batch 2: 100 records" in r.stderr and "batch 3" not in r.stderr
    values = []
    for f in Path(out).glob("*.csv"):
        with f.open() as fh:
            values += [row[1] for row in csv.reader(fh)]
    assert sorted(values) == sorted(f"row-{i}" for i in range(300))


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


def test_follow_export_survives_a_kill_9_and_resumes_from_its_checkpoint(broker, tmp_path):
    """A streaming export killed with SIGKILL mid-stream (Spark and its JVM) and started again on
    its checkpoint, with more records produced meanwhile: every record exactly once in the Parquet
    output (those before the kill and those after it), as a reader of the committed
    files sees it (a killed micro-batch may leave files of its own that the sink's log never named)."""
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
    for part in range(2):  # and records that came after the kill: the resumed run takes them too
        produce_values(broker.bootstrap, "cli-crash", [f"{part}-{i}".encode() for i in range(1000, 1100)],
                       partition=part)

    r = pipeline("export", "--bootstrap-server", broker.bootstrap, "--topic", "cli-crash", "--output", str(out),
                 "--follow", "--checkpoint", str(checkpoint), "--available-now", "--max-offsets-per-trigger", "200")
    assert r.returncode == 0, r.stderr[-3000:]
    table = pq.read_table([str(out / f) for f in committed_files(out)])
    rows = list(zip(table["partition"].to_pylist(), table["offset"].to_pylist()))
    assert len(rows) == 2200
    assert set(rows) == {(p, o) for p in range(2) for o in range(1100)}
