"""Incremental fetch sessions (KIP-227): what a session saves the broker on a topic of many
partitions of which a few receive records.

A topic of 1,000 partitions, 5 of them with a backlog of equal record batches. One raw connection
sends Fetch v12 requests, one in flight, each returning one batch from each of the 5 partitions
(partition_max_bytes is one batch), in three modes of the same request count:

  (a) full fetches of all 1,000 partitions, no session (session id 0, epoch -1): what a
      sessionless client (librdkafka, aiokafka) sends;
  (b) an incremental session (opened by one full fetch, not timed): each request names only the
      5 partitions whose fetch offset moved, each answer lists only them;
  (c) the same session once the backlog is read: nothing new anywhere, an empty answer.

For each: requests per second and the broker process's CPU time per fetch (user + system, from
/proc/<pid>/stat before and after). Requests are encoded once and patched (fetch offsets, epoch,
correlation id) so the client costs little next to the broker.

    python -m bench.fetch_sessions [--partitions 1000] [--active 5] [--requests 2000]"""

from __future__ import annotations

import argparse
import datetime
import socket
import struct
import sys
import time
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from kio.index import load_request_schema

from bench.cpu import cpu_seconds as _cpu_seconds
from sharebroker.protocol.client import ResponseStream, decode_response, encode_request
from sharebroker.protocol.record_batch import encode_batch
from sharebroker.testing import running_broker

TOPIC = "bench-fetch-sessions"
VERSION = 12
RECORDS_PER_BATCH = 10
VALUE = b"v" * 100
_OFFSET_MARK = 0x5A5A5A5A00000000  # sentinel fetch offsets, found in the encoded request and patched
_EPOCH_MARK = 0x3C3C3C3C
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class Wire:
    """One blocking connection: frames out, frames in."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.stream = ResponseStream()

    def roundtrip(self, frame: bytes | bytearray) -> bytes:
        self.sock.sendall(frame)
        return self.receive()

    def receive(self) -> bytes:
        while (got := self.stream.next_frame()) is None:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            self.stream.feed(chunk)
        return got

    def request(self, req: Any, correlation_id: int = 1) -> Any:
        frame = self.roundtrip(encode_request(req, correlation_id, "bench-fetch-sessions"))
        _, body = decode_response(frame, type(req).__api_key__, type(req).__version__)
        return body


def _nested(version: int, api_key: int, name: str) -> Any:
    cls = load_request_schema(api_key, version)
    return getattr(sys.modules[cls.__module__], name)


def fetch_request(parts: list[tuple[int, int]], *, session_id: int, epoch: int, max_bytes: int, partition_max_bytes: int) -> Any:
    cls = load_request_schema(1, VERSION)
    pcls, tcls = _nested(VERSION, 1, "FetchPartition"), _nested(VERSION, 1, "FetchTopic")
    partitions = tuple(pcls(partition=p, current_leader_epoch=-1, fetch_offset=o, last_fetched_epoch=-1,
                            log_start_offset=-1, partition_max_bytes=partition_max_bytes) for p, o in parts)
    topics = (tcls(topic=TOPIC, partitions=partitions),) if partitions else ()
    return cls(cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=max_bytes,
               isolation_level=0, session_id=session_id, session_epoch=epoch, topics=topics, forgotten_topics_data=(),
               rack_id="")


class Template:
    """An encoded Fetch request whose active partitions' fetch offsets (and session epoch) are
    patched in place for each request."""

    def __init__(self, req: Any, active: list[int], with_epoch: bool) -> None:
        self.frame = bytearray(encode_request(req, 0, "bench-fetch-sessions"))
        self.offset_at = {p: self._find(_I64.pack(_OFFSET_MARK + p)) for p in active}
        self.epoch_at = self._find(_I32.pack(_EPOCH_MARK)) if with_epoch else -1

    def _find(self, needle: bytes) -> int:
        at = self.frame.find(needle)
        assert at > 0 and self.frame.find(needle, at + 1) < 0, "sentinel not unique in the encoded request"
        return at

    def frame_for(self, correlation_id: int, offset: int, epoch: int) -> bytearray:
        frame = self.frame
        _I32.pack_into(frame, 8, correlation_id)  # size, api key, api version, then the correlation id
        for at in self.offset_at.values():
            _I64.pack_into(frame, at, offset)
        if self.epoch_at >= 0:
            _I32.pack_into(frame, self.epoch_at, epoch)
        return frame


@dataclass
class Figures:
    mode: str
    requests: int
    seconds: float
    cpu_seconds: float
    response_bytes: int

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    @property
    def cpu_us_per_fetch(self) -> float:
        return self.cpu_seconds / self.requests * 1e6


def _check(wire_body: bytes, expect: dict[int, bool], listed_only: bool) -> None:
    """A response lists each active partition with (True) or without (False) records; with
    `listed_only`, nothing else."""
    _, resp = decode_response(wire_body, 1, VERSION)
    assert int(resp.error_code) == 0, resp.error_code
    got = {p.partition_index: bool(p.records) for t in resp.responses for p in t.partitions}
    errors = [p.error_code for t in resp.responses for p in t.partitions if int(p.error_code)]
    assert not errors, errors
    for p, with_records in expect.items():
        assert got.get(p) == with_records, (p, got.get(p), with_records)
    if listed_only:
        assert set(got) == set(expect), sorted(got)


def _run(wire: Wire, pid: int, mode: str, template: Template, requests: int, first_offset: int, first_epoch: int,
         check: Callable[[bytes], None]) -> Figures:
    """`requests` fetches, request i at fetch offset first_offset + i batches and (in a session)
    epoch first_epoch + i; the first and last answers are checked."""
    received = 0
    answers: list[bytes] = []
    cpu0, t0 = _cpu_seconds(pid), time.perf_counter()
    for i in range(requests):
        body = wire.roundtrip(template.frame_for(i + 1, first_offset + i * RECORDS_PER_BATCH, first_epoch + i))
        received += len(body) + 4
        if i == 0 or i == requests - 1:
            answers.append(body)
    seconds, cpu = time.perf_counter() - t0, _cpu_seconds(pid) - cpu0
    for body in answers:
        check(body)
    return Figures(mode, requests, seconds, cpu, received // requests)


def measure(partitions: int = 1000, active_count: int = 5, requests: int = 2000) -> list[Figures]:
    active = [i * partitions // active_count + partitions // (2 * active_count) for i in range(active_count)]
    batch = bytes(encode_batch([(None, VALUE)] * RECORDS_PER_BATCH, timestamp_ms=1_700_000_000_000))
    backlog = 2 * requests + 1  # batches per active partition: (a) reads `requests`, (b) the next ones
    end = backlog * RECORDS_PER_BATCH
    with running_broker() as broker:
        assert broker.proc is not None
        pid = broker.proc.pid
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})
        admin.create_topics([NewTopic(TOPIC, num_partitions=partitions, replication_factor=1)])[TOPIC].result(60)
        del admin  # before the broker stops, or librdkafka logs the refused reconnects
        wire = Wire(broker.bootstrap)
        pcls, tcls = _nested(9, 0, "PartitionProduceData"), _nested(9, 0, "TopicProduceData")
        produce_cls = load_request_schema(0, 9)
        # Kafka takes one batch per partition per Produce: pipelined, 200 requests at a time
        for p in active:
            req = produce_cls(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=30),
                              topic_data=(tcls(name=TOPIC, partition_data=(pcls(index=p, records=batch),)),))
            frame = encode_request(req, 1, "bench-fetch-sessions")
            for first in range(0, backlog, 200):
                n = min(200, backlog - first)
                wire.sock.sendall(frame * n)
                for _ in range(n):
                    _, resp = decode_response(wire.receive(), 0, 9)
                    assert int(resp.responses[0].partition_responses[0].error_code) == 0, resp

        def every_partition(body: bytes) -> None:
            _check(body, {p: True for p in active}, listed_only=False)
            _, resp = decode_response(body, 1, VERSION)
            assert sum(len(t.partitions) for t in resp.responses) == partitions

        def only(expect: dict[int, bool]) -> Callable[[bytes], None]:
            return lambda body: _check(body, expect, listed_only=True)

        one_batch = len(batch)
        budget = 1 << 24
        full = Template(fetch_request([(p, _OFFSET_MARK + p if p in active else 0) for p in range(partitions)],
                                      session_id=0, epoch=-1, max_bytes=budget, partition_max_bytes=one_batch),
                        active, with_epoch=False)
        results = [_run(wire, pid, "(a) full fetch, no session", full, requests, 0, 0, every_partition)]

        # (b) a session, opened (not timed) by a full fetch of the batch after those (a) read
        start = requests * RECORDS_PER_BATCH
        opened = wire.request(fetch_request([(p, start if p in active else 0) for p in range(partitions)], session_id=0,
                                            epoch=0, max_bytes=budget, partition_max_bytes=one_batch))
        assert int(opened.error_code) == 0 and opened.session_id > 0, "the broker opened no fetch session"
        session_id = opened.session_id
        moved = Template(fetch_request([(p, _OFFSET_MARK + p) for p in active], session_id=session_id, epoch=_EPOCH_MARK,
                                       max_bytes=budget, partition_max_bytes=one_batch), active, with_epoch=True)
        with_records = {p: True for p in active}
        results.append(_run(wire, pid, "(b) incremental session", moved, requests - 1, start + RECORDS_PER_BATCH, 1,
                            only(with_records)))

        # (c) the session once the backlog is read: nothing new anywhere
        epoch = requests
        wire.roundtrip(moved.frame_for(1, end, epoch))
        idle = Template(fetch_request([], session_id=session_id, epoch=_EPOCH_MARK, max_bytes=budget,
                                      partition_max_bytes=one_batch), [], with_epoch=True)
        results.append(_run(wire, pid, "(c) incremental, nothing new", idle, requests, 0, epoch + 1, only({})))
        wire.sock.close()
    return results


def table(results: list[Figures]) -> str:
    head = f"{'mode':<32} {'requests':>8} {'seconds':>8} {'req/s':>8} {'broker CPU s':>12} {'CPU µs/fetch':>12} {'bytes/resp':>10}"
    lines = [head, "-" * len(head)]
    for r in results:
        lines.append(f"{r.mode:<32} {r.requests:>8} {r.seconds:>8.2f} {r.rate:>8.0f} {r.cpu_seconds:>12.2f} "
                     f"{r.cpu_us_per_fetch:>12.0f} {r.response_bytes:>10}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--active", type=int, default=5)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    results = measure(args.partitions, args.active, args.requests)
    print(f"Fetch v{VERSION}, one topic of {args.partitions} partitions, {args.active} with records "
          f"(one {RECORDS_PER_BATCH}-record batch each per fetch), one request in flight")
    print(table(results))
    a, b = results[0], results[1]
    print(f"incremental vs full: {a.cpu_us_per_fetch / b.cpu_us_per_fetch:.1f}x less broker CPU per fetch, "
          f"{b.rate / a.rate:.1f}x the requests per second")


if __name__ == "__main__":
    main()
