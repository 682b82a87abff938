"""A streaming pipeline through a share group: read the topic `orders` as the share group
`enrich`, upper-case each value, and write every micro-batch to the topic `orders-enriched` and to
Parquet. Settings from the environment (TOPIC, GROUP and OUT_TOPIC change those names), so the same
file runs on local[*] against sharebroker and under spark-submit against an Apache Kafka cluster:

    BOOTSTRAP=127.0.0.1:9092 CHECKPOINT=/tmp/enrich/checkpoint OUT=/tmp/enrich/parquet \\
        python -m sharebroker.pipeline.examples.enrich

The share-group source is at-least-once: a failed micro-batch is replayed and its records are also
delivered again. Duplicates carry the same (topic, partition, offset); drop them within a batch
here, and across batches where the results land (an upsert, or a dedup on read)."""

from __future__ import annotations

import os

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from sharebroker.pipeline.session import get_session

BOOTSTRAP = os.environ.get("BOOTSTRAP", "127.0.0.1:9092")
CHECKPOINT = os.environ.get("CHECKPOINT", "/tmp/enrich/checkpoint")
OUT = os.environ.get("OUT", "/tmp/enrich/parquet")
TRIGGER = os.environ.get("TRIGGER", "1 second")
TOPIC = os.environ.get("TOPIC", "orders")
GROUP = os.environ.get("GROUP", "enrich")
OUT_TOPIC = os.environ.get("OUT_TOPIC", f"{TOPIC}-enriched")


def write_both(batch: DataFrame, batch_id: int) -> None:
    batch = batch.dropDuplicates(["topic", "partition", "offset"]).persist()
    (batch.select("key", "value").write.mode("append").format("sharebroker")
     .option("kafka.bootstrap.servers", BOOTSTRAP).option("topic", OUT_TOPIC).save())
    batch.write.mode("append").parquet(OUT)
    batch.unpersist()


def start(spark: SparkSession) -> StreamingQuery:
    """The running query (a test drives it on its own session)."""
    orders = (spark.readStream.format("sharegroup")
              .option("kafka.bootstrap.servers", BOOTSTRAP)
              .option("kafka.group.id", GROUP)
              .option("subscribe", TOPIC)
              .option("checkpointLocation", CHECKPOINT)
              .option("maxRecordsPerTrigger", 5000)
              .load())
    enriched = orders.select("topic", "partition", "offset", "deliveryCount", "key",
                             F.upper(F.col("value").cast("string")).alias("value"))
    return (enriched.writeStream.foreachBatch(write_both)
            .option("checkpointLocation", CHECKPOINT)
            .trigger(**({"availableNow": True} if TRIGGER == "availableNow" else {"processingTime": TRIGGER}))
            .start())


def main() -> None:
    spark = get_session()  # local[*], or $SPARK_MASTER / spark-submit's --master
    start(spark).awaitTermination()


if __name__ == "__main__":
    main()
