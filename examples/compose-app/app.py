"""The pattern to copy: a producer that enqueues jobs and share-group workers that take them (KIP-932,
"queues for Kafka"). Any number of workers share one topic, whatever its partition count; each job
goes to one worker at a time and is redelivered if that worker dies before acknowledging it.

    python app.py produce --bootstrap broker:29092 --topic jobs --count 100
    python app.py work    --bootstrap broker:29092 --topic jobs --group workers [--expect 100]

A new share group starts at the latest offset (as in Kafka); for the workers to take the backlog too,
the compose project's `group-config` service sets the group's share.auto.offset.reset first:

    sharebroker configs --bootstrap-server broker:29092 --group workers --alter \
        --add-config share.auto.offset.reset=earliest

The same code runs against Apache Kafka 4.2+ with share groups enabled (kafka-configs.sh takes the
same arguments)."""

from __future__ import annotations

import argparse
import sys
import time

from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.create_topics([NewTopic(topic, num_partitions=partitions)]).values()
    try:
        future.result(timeout=30)
    except Exception as exc:  # TOPIC_ALREADY_EXISTS when another replica of this service made it
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise


def produce(args: argparse.Namespace) -> int:
    ensure_topic(args.bootstrap, args.topic, args.partitions)
    producer = Producer({"bootstrap.servers": args.bootstrap, "enable.idempotence": True})
    for i in range(args.count):
        producer.produce(args.topic, key=str(i).encode(), value=f"job-{i}".encode())
        producer.poll(0)
    left = producer.flush(30)
    print(f"produced {args.count - left} jobs to {args.topic}", flush=True)
    return 0 if left == 0 else 1


def work(args: argparse.Namespace) -> int:
    consumer = ShareConsumer({"bootstrap.servers": args.bootstrap, "group.id": args.group,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([args.topic])
    done = 0
    deadline = time.monotonic() + args.timeout
    try:
        while args.expect is None or done < args.expect:
            if time.monotonic() > deadline:
                print(f"timed out after {args.timeout}s with {done} jobs done", flush=True)
                return 1
            batch = consumer.poll(1.0)
            for message in batch:
                if message.error() is not None:
                    print(f"error: {message.error()}", file=sys.stderr, flush=True)
                    continue
                # ... do the job here; ACCEPT when it is done (REJECT or RELEASE otherwise) ...
                consumer.acknowledge(message)
                done += 1
            if batch:
                consumer.commit_sync()
                print(f"took {len(batch)} jobs ({done} in all)", flush=True)
    finally:
        consumer.close()
    print(f"worked {done} jobs from {args.topic} in group {args.group}", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("produce", "work"):
        p = sub.add_parser(name)
        p.add_argument("--bootstrap", default="broker:29092")
        p.add_argument("--topic", default="jobs")
    p = sub.choices["produce"]
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--partitions", type=int, default=3)
    p = sub.choices["work"]
    p.add_argument("--group", default="workers")
    p.add_argument("--expect", type=int, default=None, help="exit 0 after this many jobs (default: run for ever)")
    p.add_argument("--timeout", type=float, default=float("inf"), help="give up after this many seconds")
    args = parser.parse_args()
    return produce(args) if args.command == "produce" else work(args)


if __name__ == "__main__":
    sys.exit(main())
