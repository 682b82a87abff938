"""Many share consumers joining one group at the same moment, across several topics, while
producers run (issue 10 defect 2): every record is delivered, none twice as a first delivery, and
no share partition is initialized again under a loaded leader (no fenced state writes)."""

from __future__ import annotations

import threading
import time
from collections import Counter

from confluent_kafka import Producer

from tests.integration.clients import create_topic, producer_conf
from tests.integration.share_helpers import FAST_SHARE_BROKER, new_group, set_earliest, share_conf
from confluent_kafka import ShareConsumer

TOPICS = 4
PARTITIONS = 4
PRODUCERS = 4
CONSUMERS = 16
PER_PRODUCER = 1500


def test_many_members_joining_at_once_never_get_one_record_as_new_twice(make_broker, topic_name):
    b = make_broker(FAST_SHARE_BROKER)
    topics = [f"{topic_name}-{i}" for i in range(TOPICS)]
    for t in topics:
        create_topic(b.bootstrap, t, PARTITIONS)
    group = new_group()
    set_earliest(b.bootstrap, group)

    start = threading.Barrier(PRODUCERS + CONSUMERS)
    stop = threading.Event()
    lock = threading.Lock()
    produced: set[bytes] = set()
    first_deliveries: Counter[bytes] = Counter()
    deliveries: Counter[bytes] = Counter()
    errors: list[str] = []

    def produce(index: int) -> None:
        p = Producer(producer_conf(b.bootstrap, **{"linger.ms": 0, "enable.idempotence": True}))
        start.wait()
        sent = []
        for i in range(PER_PRODUCER):
            value = f"p{index}-{i}".encode()
            p.produce(topics[i % TOPICS], value, on_delivery=lambda err, msg, v=value: (
                errors.append(str(err)) if err is not None else sent.append(v)))
            p.poll(0)
        p.flush(30)
        with lock:
            produced.update(sent)

    def consume(index: int) -> None:
        c = ShareConsumer(share_conf(b.bootstrap, group, **{"client.id": f"c{index}"}))
        c.subscribe(topics)
        start.wait()
        try:
            while not stop.is_set():
                for m in c.poll(0.2):
                    if m.error() is not None:
                        continue
                    with lock:
                        deliveries[m.value()] += 1
                        if m.delivery_count() == 1:
                            first_deliveries[m.value()] += 1
        finally:
            c.close()

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(PRODUCERS)]
    threads += [threading.Thread(target=consume, args=(i,)) for i in range(CONSUMERS)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 90
        total = PRODUCERS * PER_PRODUCER
        while time.monotonic() < deadline:
            with lock:
                if len(produced) == total and produced <= set(deliveries):
                    break
            time.sleep(0.2)  # polling a condition with a deadline
    finally:
        stop.set()
        for t in threads:
            t.join(30)

    assert not errors, errors[:5]
    assert len(produced) == PRODUCERS * PER_PRODUCER
    missing = produced - set(deliveries)
    assert not missing, f"{len(missing)} records never delivered, e.g. {sorted(missing)[:5]}"
    twice_new = {v: n for v, n in first_deliveries.items() if n > 1}
    assert not twice_new, f"{len(twice_new)} records delivered twice with delivery count 1, e.g. {list(twice_new)[:5]}"
    log = b.log_text()
    assert "fenced_state_epoch" not in log, [line for line in log.splitlines() if "fenced" in line][:5]
    assert "Traceback" not in log
