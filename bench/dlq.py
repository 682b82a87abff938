"""Share-group dead-letter queue throughput (KIP-1191): a stream of rejections with a DLQ topic
configured, next to the same stream with plain ARCHIVE (no DLQ), on one broker in one run.

    python -m bench.dlq [--records N] [--partitions P] [--copy]

For each mode an explicit-acknowledgement ShareConsumer rejects every record of its own
P-partition topic. The clock runs from the first delivery until every record is settled: the share
partition start offsets reached the log end (DescribeShareGroupOffsets) and, with the DLQ, the DLQ
topic holds one record per source record. Prints records/s for both and their ratio."""

from __future__ import annotations

import argparse
import queue
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import AcknowledgeType, Consumer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from bench import clients
from sharebroker.cli.wire import Client
from sharebroker.testing import BrokerProcess


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})


def _group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    a = _admin(bootstrap)  # the handle lives until the futures resolve
    for fut in a.incremental_alter_configs([res]).values():
        fut.result(30)


def _settled(client: Client, group: str, topic: str, ends: dict[int, int]) -> bool:
    _node, conn = client.coordinator_conn(group)
    resp = conn.request(90, {"groups": [{"group_id": group, "topics": None}]})
    (g,) = resp.groups
    starts = {int(p.partition_index): int(p.start_offset) for t in g.topics if t.topic_name == topic
              for p in t.partitions}
    return all(starts.get(p, -1) >= end for p, end in ends.items())


def _dlq_count(bootstrap: str, topic: str, partitions: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-dlq-reader", "log_level": 3})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions))
    finally:
        c.close()


def run_mode(bootstrap: str, name: str, n: int, partitions: int, dlq: str | None, copy: bool) -> dict[str, Any]:
    topic, group = f"bench-{name}", f"bench-{name}-group"
    a = _admin(bootstrap)
    a.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)
    configs = {"share.auto.offset.reset": "earliest"}
    if dlq is not None:
        a.create_topics([NewTopic(dlq, num_partitions=partitions, replication_factor=1, config={
            "errors.deadletterqueue.group.enable": "true"})])[dlq].result(30)
        configs["errors.deadletterqueue.topic.name"] = dlq
        if copy:
            configs["errors.deadletterqueue.copy.record.enable"] = "true"
    _group_configs(bootstrap, group, configs)
    results: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
    clients.produce_backlog(bootstrap, topic, n, 100, partitions, results)
    if "error" in (produced := results.get()):
        raise SystemExit(produced["error"])
    ends = {p: -1 for p in range(partitions)}
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-ends", "log_level": 3})
    for p in ends:
        ends[p] = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
    c.close()
    sc = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit",
                        "log_level": 3})
    sc.subscribe([topic])
    rejected = 0
    first: float | None = None
    client = Client(bootstrap)
    try:
        deadline = time.monotonic() + 600
        while rejected < n:
            if time.monotonic() > deadline:
                raise SystemExit(f"{name}: only {rejected} of {n} records delivered")
            msgs = sc.poll(0.5)
            for m in msgs:
                if m.error() is None:
                    sc.acknowledge(m, AcknowledgeType.REJECT)
                    rejected += 1
            if msgs and first is None:
                first = time.perf_counter()
            if msgs:
                sc.commit_async()
        sc.commit_sync()
        assert first is not None
        while not _settled(client, group, topic, ends) or (
                dlq is not None and _dlq_count(bootstrap, dlq, partitions) < n):
            if time.monotonic() > deadline:
                raise SystemExit(f"{name}: records not settled in time")
            time.sleep(0.05)
        elapsed = time.perf_counter() - first
    finally:
        sc.close()
        client.close()
    out: dict[str, Any] = {"mode": name, "records": n, "seconds": round(elapsed, 3),
                           "records_per_s": round(n / elapsed)}
    if dlq is not None:
        out["dlq_records"] = _dlq_count(bootstrap, dlq, partitions)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--copy", action="store_true", help="errors.deadletterqueue.copy.record.enable=true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        broker = BrokerProcess(Path(d) / "data").start()
        try:
            plain = run_mode(broker.bootstrap, "archive", args.records, args.partitions, None, False)
            dead = run_mode(broker.bootstrap, "dlq", args.records, args.partitions, "dlq.bench", args.copy)
        finally:
            broker.stop()
    for r in (plain, dead):
        print("  ".join(f"{k}={v}" for k, v in r.items()))
    print(f"DLQ / plain ARCHIVE throughput: {dead['records_per_s'] / plain['records_per_s']:.2f}")


if __name__ == "__main__":
    main()
