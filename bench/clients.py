"""Client-side entry points of the benchmark. Each function runs in its own process (the runner
starts them with the multiprocessing "spawn" context), so the clients never share an interpreter
with the runner or with each other. Times are `time.monotonic_ns()` / `time.perf_counter()`,
which on Linux read CLOCK_MONOTONIC and are comparable across processes."""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import struct
import time
from collections.abc import Iterator
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, ShareConsumer, TopicPartition

QUIET = {"log_level": 3}


def make_producer(bootstrap: str, failed: list[int] | None = None, **extra: Any) -> Producer:
    """A producer tuned so the benchmark's own Python work stays out of the figures: delivery
    reports only for failures (counted into `failed`), so successful records cost no callback."""
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "queue.buffering.max.messages": 1_000_000,
                            "queue.buffering.max.kbytes": 1_048_576, **QUIET}
    if failed is not None:
        def on_delivery(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                failed[0] += 1

        conf.update({"delivery.report.only.error": True, "on_delivery": on_delivery})
    conf.update(extra)
    return Producer(conf)


def produce_when_room(p: Producer, topic: str, value: bytes, backoff: float, **kw: Any) -> None:
    """produce(), serving delivery reports for `backoff` seconds at a time while the local queue
    is full."""
    while True:
        try:
            p.produce(topic, value, **kw)
            return
        except BufferError:
            p.poll(backoff)


def _produce_loop(p: Producer, topic: str, n: int, payload: bytes, partitions: int | None) -> None:
    """The timed loop: `produce_when_room` inlined, one call less per record."""
    produce = p.produce
    for i in range(n):
        while True:
            try:
                if partitions:
                    produce(topic, payload, partition=i % partitions)
                else:
                    produce(topic, payload)
                break
            except BufferError:
                p.poll(0.005)
        if i % 5000 == 0:
            p.poll(0)


def _timed_produce(p: Producer, failed: list[int], what: str, topic: str, n: int, payload: bytes,
                   partitions: int | None) -> dict[str, Any]:
    """`n` records timed from the first produce() to the end of flush(): {"elapsed": s}, or
    {"error": ...} when any was not delivered."""
    t0 = time.perf_counter()
    _produce_loop(p, topic, n, payload, partitions)
    left = p.flush(300)
    elapsed = time.perf_counter() - t0
    if left or failed[0]:
        return {"error": f"{what}: {left} undelivered, {failed[0]} failed"}
    return {"elapsed": elapsed}


def produce_backlog(bootstrap: str, topic: str, n: int, size: int, partitions: int, out) -> None:
    """Untimed set-up: write `n` records of `size` bytes round-robin over the partitions."""
    try:
        failed = [0]
        p = make_producer(bootstrap, failed, **{"linger.ms": 20, "batch.num.messages": 10000, "batch.size": 1_000_000,
                                            "acks": 1})
        out.put(_timed_produce(p, failed, "backlog produce", topic, n, b"x" * size, partitions))
    except Exception as e:  # noqa: BLE001 - reported to the runner
        out.put({"error": f"backlog produce: {e!r}"})


def produce_timed(bootstrap: str, topic: str, n: int, size: int, out) -> None:
    """Workload 3: acks=all, linger 5 ms; timed from the first produce() to the end of flush()."""
    try:
        failed = [0]
        p = make_producer(bootstrap, failed, **{"acks": "all", "linger.ms": 5})
        p.list_topics(topic, timeout=10)  # metadata fetched before the clock starts
        out.put(_timed_produce(p, failed, "produce", topic, n, os.urandom(size), None))
    except Exception as e:  # noqa: BLE001
        out.put({"error": f"produce: {e!r}"})


@contextlib.contextmanager
def share_consumer(bootstrap: str, group: str, client_id: str, topic: str, **extra: Any) -> Iterator[ShareConsumer]:
    """A quiet ShareConsumer subscribed to `topic`, closed on the way out."""
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id, **QUIET, **extra})
    c.subscribe([topic])
    try:
        yield c
    finally:
        c.close()


def polls(c: ShareConsumer, stop: Any, timeout: float) -> Iterator[list[Any]]:
    """Each non-empty poll of `c` until the event `stop` is set."""
    while not stop.is_set():
        msgs = c.poll(timeout)
        if msgs:
            yield msgs


def commit_quietly(c: ShareConsumer, timeout: float = 5) -> None:
    """commit_sync after the measurement (in implicit mode it accepts what the last poll returned);
    a failure there is not a figure."""
    try:
        c.commit_sync(timeout)
    except Exception:  # noqa: BLE001
        pass


def share_drain(bootstrap: str, topic: str, group: str, index: int, n: int, per_partition: int,
                bitmaps, counters, marks, lock, stop) -> None:
    """Workload 1 (and the mock peer): an implicit-acknowledgement ShareConsumer that marks each
    (partition, offset) it receives in shared bitmaps; whichever consumer completes the set
    stamps marks[1] and sets `stop`. counters = [distinct, deliveries, redelivered, errors];
    marks = [first delivery, drained]."""
    with share_consumer(bootstrap, group, f"bench-{index}", topic) as c:
        for msgs in polls(c, stop, 0.2):
            now = time.perf_counter()
            with lock:
                if marks[0] == 0.0:
                    marks[0] = now
                for m in msgs:
                    if m.error() is not None:
                        counters[3] += 1
                        continue
                    counters[1] += 1
                    part, off = m.partition(), m.offset()
                    if part >= len(bitmaps) or off >= per_partition:
                        continue
                    bits = bitmaps[part]
                    if bits[off]:
                        counters[2] += 1
                    else:
                        bits[off] = 1
                        counters[0] += 1
                if counters[0] >= n and marks[1] == 0.0:
                    marks[1] = time.perf_counter()
                    stop.set()
        commit_quietly(c)


def classic_drain(bootstrap: str, topic: str, partitions: int, n: int, out) -> None:
    """Workload 4: one classic consumer reading every partition from the beginning by assign."""
    try:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-classic", "enable.auto.commit": False,
                      **QUIET})
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got = 0
        t0 = time.perf_counter()
        first = 0.0
        deadline = time.monotonic() + 300
        while got < n and time.monotonic() < deadline:
            for m in c.consume(1000, 0.2):
                if m.error() is None:
                    if not first:
                        first = time.perf_counter()
                    got += 1
        done = time.perf_counter()
        c.close()
        if got < n:
            out.put({"error": f"classic fetch: {got}/{n} records before the deadline"})
        else:
            out.put({"elapsed": done - first, "elapsed_from_assign": done - t0, "records": got})
    except Exception as e:  # noqa: BLE001
        out.put({"error": f"classic fetch: {e!r}"})


LIVE_HEADER = struct.Struct(">qq")  # sequence number, send time (monotonic ns)


def live_producer(bootstrap: str, topic: str, rate: int, warmup_s: float, measure_s: float, size: int, linger_ms: int,
                  out) -> None:
    """Workload 2: paced producer; the value carries its sequence number and send time (taken at
    produce(), so the figure includes the producer's linger)."""
    try:
        p = make_producer(bootstrap, **{"linger.ms": linger_ms, "acks": 1})
        p.list_topics(topic, timeout=10)
        pad = b"x" * (size - LIVE_HEADER.size)
        total = int(rate * (warmup_s + measure_s))
        t0 = time.monotonic_ns()
        step = 1_000_000_000 / rate
        i = 0
        while i < total:
            now = time.monotonic_ns()
            due = min(total, int((now - t0) / step) + 1)
            while i < due:
                p.produce(topic, value=LIVE_HEADER.pack(i, time.monotonic_ns()) + pad)
                i += 1
            p.poll(0)
            nxt = t0 + i * step
            delay = (nxt - time.monotonic_ns()) / 1e9
            if delay > 0:
                time.sleep(min(delay, 0.001))
        achieved = total / ((time.monotonic_ns() - t0) / 1e9)
        left = p.flush(30)
        out.put({"produced": total, "warmup_records": int(rate * warmup_s), "achieved_rate": achieved,
                 "undelivered": left})
    except Exception as e:  # noqa: BLE001
        out.put({"error": f"live producer: {e!r}"})


def live_consumer(bootstrap: str, topic: str, group: str, index: int, warmup_records: int, stop, received, out) -> None:
    """Workload 2: implicit-ack ShareConsumer recording produce-to-receive latency (ms) of every
    record sent after the warm-up."""
    lat: list[float] = []
    try:
        c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": f"live-{index}", **QUIET})
        c.subscribe([topic])
        for msgs in polls(c, stop, 0.1):
            now = time.monotonic_ns()
            k = 0
            for m in msgs:
                if m.error() is not None:
                    continue
                seq, sent = LIVE_HEADER.unpack_from(m.value())
                k += 1
                if seq >= warmup_records:
                    lat.append((now - sent) / 1e6)
            with received.get_lock():
                received.value += k
        commit_quietly(c)
        c.close()
        out.put({"latencies_ms": lat})
    except Exception as e:  # noqa: BLE001
        out.put({"error": f"live consumer {index}: {e!r}", "latencies_ms": lat})


def mock_cluster(topic: str, partitions: int, out, stop) -> None:
    """librdkafka's built-in mock cluster (client-interop.md section 6) in its own process:
    one broker, the topic pre-created, share.auto.offset.reset = earliest."""
    import confluent_kafka

    try:
        libs = glob.glob(os.path.dirname(confluent_kafka.__file__) + ".libs/librdkafka*.so*")
        lib = ctypes.CDLL(libs[0])
        V = ctypes.c_void_p
        lib.rd_kafka_conf_new.restype = V
        lib.rd_kafka_new.restype = V
        lib.rd_kafka_new.argtypes = [ctypes.c_int, V, ctypes.c_char_p, ctypes.c_size_t]
        lib.rd_kafka_mock_cluster_new.restype = V
        lib.rd_kafka_mock_cluster_new.argtypes = [V, ctypes.c_int]
        lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
        lib.rd_kafka_mock_cluster_bootstraps.argtypes = [V]
        lib.rd_kafka_mock_topic_create.argtypes = [V, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        lib.rd_kafka_mock_sharegroup_set_auto_offset_reset.argtypes = [V, ctypes.c_int]
        lib.rd_kafka_mock_cluster_destroy.argtypes = [V]
        lib.rd_kafka_destroy.argtypes = [V]
        lib.rd_kafka_conf_set.argtypes = [V, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        err = ctypes.create_string_buffer(512)
        conf = lib.rd_kafka_conf_new()
        lib.rd_kafka_conf_set(conf, b"log_level", b"3", err, 512)  # no "no bootstrap.servers" warning
        rk = lib.rd_kafka_new(0, conf, err, 512)  # host handle for the mock
        mc = lib.rd_kafka_mock_cluster_new(rk, 1)
        lib.rd_kafka_mock_topic_create(mc, topic.encode(), partitions, 1)
        lib.rd_kafka_mock_sharegroup_set_auto_offset_reset(mc, 1)  # 1 = earliest
        out.put({"bootstrap": lib.rd_kafka_mock_cluster_bootstraps(mc).decode(), "pid": os.getpid()})
    except Exception as e:  # noqa: BLE001
        out.put({"error": f"mock cluster: {e!r}"})
        return
    stop.wait()
    lib.rd_kafka_mock_cluster_destroy(mc)
    lib.rd_kafka_destroy(rk)
