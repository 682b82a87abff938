"""A client's round trip through a broker, for `make compose-test`: create a topic, produce, read it
back with a classic consumer group and with a share group. Exit 0 when every record came back both
ways. Run from the host (localhost:9092) and from a container on the compose network (broker:29092):
each must reach the broker at the address that listener advertises. With `--ca FILE --user NAME
--password PW [--mechanism M]`, every client connects with SASL_SSL (the compose file's SECURE
listener)."""

from __future__ import annotations

import argparse
import sys
import time
import uuid

from confluent_kafka import Consumer, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

RECORDS = 20
DEADLINE_S = 30.0


def main(bootstrap: str, where: str, security: dict[str, str] | None = None) -> int:
    run = uuid.uuid4().hex[:8]
    topic, group, share_group = f"smoke-{where}-{run}", f"smoke-{run}", f"smoke-share-{run}"
    base = {"bootstrap.servers": bootstrap, **(security or {})}
    admin = AdminClient(base)
    (created,) = admin.create_topics([NewTopic(topic, num_partitions=2)]).values()
    created.result(timeout=DEADLINE_S)
    (altered,) = admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, share_group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])]).values()
    altered.result(timeout=DEADLINE_S)

    sent = {f"{where}-{i}".encode() for i in range(RECORDS)}
    producer = Producer(base)
    for value in sent:
        producer.produce(topic, value)
    assert producer.flush(DEADLINE_S) == 0, "records not delivered"

    consumer = Consumer({**base, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    classic = _drain(lambda: [m for m in [consumer.poll(0.5)] if m is not None], len(sent))
    consumer.close()

    share = ShareConsumer({**base, "group.id": share_group})
    share.subscribe([topic])
    shared = _drain(lambda: list(share.poll(0.5)), len(sent))
    share.close()

    ok = classic == sent and shared == sent
    print(f"{where} client at {bootstrap}: produced {len(sent)}, classic group read {len(classic)}, "
          f"share group read {len(shared)}: {'ok' if ok else 'MISMATCH'}", flush=True)
    return 0 if ok else 1


def _drain(poll, expected: int) -> set[bytes]:
    got: set[bytes] = set()
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < expected and time.monotonic() < deadline:
        for message in poll():
            if message.error() is not None:
                raise SystemExit(f"consumer error: {message.error()}")
            got.add(message.value())
    return got


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("where", nargs="?", default="client")
    parser.add_argument("--ca", help="CA file: connect with SASL_SSL")
    parser.add_argument("--user")
    parser.add_argument("--password")
    parser.add_argument("--mechanism", default="PLAIN")
    args = parser.parse_args()
    security = None
    if args.ca:
        security = {"security.protocol": "SASL_SSL", "ssl.ca.location": args.ca, "sasl.mechanism": args.mechanism,
                    "sasl.username": args.user, "sasl.password": args.password}
    sys.exit(main(args.bootstrap, args.where, security))
