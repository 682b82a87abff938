"""The `sharebroker` sink: Spark's Kafka sink schema and options. Each task produces its rows
with an idempotent producer (acks=all) and fails when any delivery fails. As with Spark's own
Kafka sink this is at-least-once: a retried task or a replayed micro-batch produces its rows
again; the idempotent producer only removes the duplicates of its own retries."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError, Message, Producer
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from sharebroker.pipeline.options import OptionError, client_settings

_FLUSH_TIMEOUT_S = 120.0


class SinkError(RuntimeError):
    """A row the sink cannot write, or a delivery the broker refused."""


def _check_schema(schema: StructType, topic_option: str | None) -> None:
    """Spark's KafkaWriter.validateQuery, with its messages."""
    fields = {f.name: f.dataType for f in schema.fields}
    if topic_option is None:
        if "topic" not in fields:
            raise OptionError("topic option required when no 'topic' attribute is present. Use the topic option "
                              "for setting a topic.")
        if not isinstance(fields["topic"], StringType):
            raise OptionError(f"Topic type must be a StringType, not {fields['topic'].simpleString()}")
    if "value" not in fields:
        raise OptionError("Required attribute 'value' not found")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], (StringType, BinaryType)):
            raise OptionError(f"{name} attribute type must be a StringType or BinaryType, "
                              f"not {fields[name].simpleString()}")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise OptionError(f"partition attribute type must be an IntegerType, not {fields['partition'].simpleString()}")
    if "headers" in fields:
        h = fields["headers"]
        ok = (isinstance(h, ArrayType) and isinstance(h.elementType, StructType)
              and [(f.name, type(f.dataType)) for f in h.elementType.fields]
              == [("key", StringType), ("value", BinaryType)])
        if not ok:
            raise OptionError("headers attribute type must be an array<struct<key: string, value: binary>>, "
                              f"not {h.simpleString()}")


@dataclass(frozen=True)
class SinkOptions:
    producer: Mapping[str, Any]
    topic: str | None

    @classmethod
    def parse(cls, options: Mapping[str, str], schema: StructType) -> SinkOptions:
        client = client_settings(options, sink=True)
        topic = next((v for k, v in options.items() if k.lower() == "topic"), None)
        _check_schema(schema, topic)
        producer: dict[str, Any] = {"enable.idempotence": True, "acks": "all", "linger.ms": 5,
                                    "compression.type": "none"}
        producer.update(client)
        return cls(producer, topic)


@dataclass
class SinkCommit(WriterCommitMessage):
    records: int


def produce_batches(opts: SinkOptions, batches: Iterator[pa.RecordBatch]) -> SinkCommit:
    """Produce every row; raise if any delivery fails, so that Spark fails (and retries) the task."""
    producer = Producer(dict(opts.producer))
    failures: list[str] = []  # the first few, for the message
    failed = 0

    def delivered(err: KafkaError | None, msg: Message) -> None:
        nonlocal failed
        if err is not None:
            failed += 1
            if len(failures) < 3:
                failures.append(f"{msg.topic()}-{msg.partition()}: {err.str()}")

    sent = 0
    produce = producer.produce
    for batch in batches:
        names = batch.schema.names
        n = batch.num_rows
        values = batch.column(names.index("value")).to_pylist()
        keys = batch.column(names.index("key")).to_pylist() if "key" in names else [None] * n
        if opts.topic is not None:
            topics = [opts.topic] * n
        else:
            topics = batch.column(names.index("topic")).to_pylist()
        partitions = batch.column(names.index("partition")).to_pylist() if "partition" in names else None
        headers = batch.column(names.index("headers")).to_pylist() if "headers" in names else None
        for i in range(n):
            topic = topics[i]
            if topic is None:
                raise SinkError("null topic present in the data. Use the topic option for setting a topic.")
            kwargs: dict[str, Any] = {"key": keys[i], "on_delivery": delivered}
            if partitions is not None and partitions[i] is not None:
                kwargs["partition"] = partitions[i]
            if headers is not None and headers[i]:
                kwargs["headers"] = [(h["key"], h["value"]) for h in headers[i]]
            while True:
                try:
                    produce(topic, values[i], **kwargs)
                    break
                except BufferError:  # the local queue is full: let deliveries drain
                    producer.poll(0.05)
            sent += 1
        producer.poll(0)
        if failures:
            break
    remaining = producer.flush(_FLUSH_TIMEOUT_S)
    if failures:
        raise SinkError(f"{failed} records were not delivered, e.g. {'; '.join(failures)}")
    if remaining:
        raise SinkError(f"{remaining} records were not delivered within {_FLUSH_TIMEOUT_S:.0f} s")
    return SinkCommit(sent)


class KafkaBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return produce_batches(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Each task's rows are delivered before its task ends; nothing is left to do."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Records already delivered stay in the log (at-least-once, as Spark's Kafka sink)."""


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return produce_batches(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Delivered by the tasks already."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """A replay of the batch produces its rows again (at-least-once)."""
