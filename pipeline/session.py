"""One way to get a SparkSession with the project's data sources registered.

Spark starts Python workers with `PYSPARK_PYTHON` (else `python3` from PATH, which may lack pyarrow
and this package), so it is pinned to the running interpreter. The data source classes are pickled
by reference: the package must be installed where the workers run (on a cluster, ship the venv
with `spark.archives`), `addPyFile` is not enough for streaming queries."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"


def register(spark: SparkSession) -> None:
    """Register `sharebroker` (offset-range source and sink) and `sharegroup` (share-group
    streaming source) with a session."""
    from sharebroker.pipeline.kafka_source import KafkaDataSource
    from sharebroker.pipeline.share_source import ShareGroupDataSource

    spark.dataSource.register(KafkaDataSource)
    spark.dataSource.register(ShareGroupDataSource)


def get_session(master: str | None = None, app_name: str = "sharebroker-pipeline",
                conf: Mapping[str, str] | None = None) -> SparkSession:
    """A session on `master` (default: $SPARK_MASTER or local[*]) with the data sources
    registered. On a local master Spark binds to loopback and runs without its web UI."""
    master = master or os.environ.get("SPARK_MASTER", DEFAULT_MASTER)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = (builder.config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.ui.enabled", "false")
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.sql.shuffle.partitions", "4")
                   # the same interpreter and package run the workers: its daemon keeps test tools out
                   .config("spark.python.daemon.module", "sharebroker.pipeline.spark_daemon"))
    builder = builder.config("spark.sql.session.timeZone", "UTC")
    for name, value in (conf or {}).items():
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
