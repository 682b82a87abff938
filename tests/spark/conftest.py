"""One local[2] Spark session for the whole test session (starting one costs 6-9 s), with the
project's data sources registered. The JVM runs with the C1 compiler only: these jobs are short."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

pytestmark = pytest.mark.spark


@pytest.fixture(scope="session")
def spark() -> Iterator:
    os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    from sharebroker.pipeline.session import get_session

    session = get_session("local[2]", "sharebroker-tests", {
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.sql.streaming.pollingDelay": "20ms",
    })
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
