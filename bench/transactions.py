"""Transactional produce next to idempotent produce, in one run against one fresh broker: the same
confluent-kafka producer settings, records of 100 bytes to one partition; the transactional
producer commits every `--per-txn` records (begin, produce, commit). Prints records/s and the
broker's CPU per 1,000 records for each.

    python -m bench.transactions [--records N] [--per-txn K]"""

from __future__ import annotations

import argparse
import time
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.cpu import cpu_seconds as _cpu_seconds
from sharebroker.testing import running_broker

def _run(bootstrap: str, pid: int, topic: str, records: int, per_txn: int | None) -> tuple[float, float]:
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True, "log_level": 3}
    if per_txn is not None:
        conf["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
    p = Producer(conf)
    if per_txn is not None:
        p.init_transactions(10)
    value = b"x" * 100
    cpu0, t0 = _cpu_seconds(pid), time.perf_counter()
    sent = 0
    while sent < records:
        n = min(per_txn or records, records - sent)
        if per_txn is not None:
            p.begin_transaction()
        for _ in range(n):
            while True:
                try:
                    p.produce(topic, value=value, partition=0)
                    break
                except BufferError:
                    p.poll(0.01)
        if per_txn is not None:
            p.commit_transaction(30)
        sent += n
    p.flush(30)
    elapsed, cpu = time.perf_counter() - t0, _cpu_seconds(pid) - cpu0
    return records / elapsed, cpu / records * 1000 * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--per-txn", type=int, default=1000)
    args = parser.parse_args()
    with running_broker() as broker:
        assert broker.proc is not None
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topics = {name: NewTopic(name, 1, 1) for name in ("bench-idempotent", "bench-txn", "bench-txn-small")}
        for f in admin.create_topics(list(topics.values())).values():
            f.result(10)
        rows = [("idempotent", *_run(broker.bootstrap, broker.proc.pid, "bench-idempotent", args.records, None)),
                (f"transactional, {args.per_txn} per txn",
                 *_run(broker.bootstrap, broker.proc.pid, "bench-txn", args.records, args.per_txn)),
                ("transactional, 10 per txn",
                 *_run(broker.bootstrap, broker.proc.pid, "bench-txn-small", args.records // 20, 10))]
    print(f"{'producer':32} {'records/s':>12} {'broker CPU ms / 1k records':>28}")
    for name, rate, cpu_ms in rows:
        print(f"{name:32} {rate:12,.0f} {cpu_ms:28.2f}")


if __name__ == "__main__":
    main()
