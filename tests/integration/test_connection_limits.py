"""Memory and lifetime of connections (issue 11 defect 2): a frame that declares a large size
and stalls costs what it sent, not what it declared; idle connections are closed after
`connections.max.idle.ms`; the memory of many idle connections comes back when they go."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

from confluent_kafka import Producer

from tests.integration.clients import consume_from_beginning, create_topic, produce_sync, producer_conf
from sharebroker.testing import wait_for


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _connect(bootstrap: str) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def test_stalled_frames_declaring_100_mib_cost_only_what_they_sent(make_broker, topic_name):
    b = make_broker({"socket.request.max.bytes": str(104857600 + 100)})
    create_topic(b.bootstrap, topic_name)
    p = Producer(producer_conf(b.bootstrap))
    produce_sync(p, topic_name, [{"value": b"before", "partition": 0}])
    base = rss_mb(b.proc.pid)
    stalled = []
    try:
        for _ in range(40):
            s = _connect(b.bootstrap)
            # a Produce header and a few body bytes of a frame declared as 100 MiB, then nothing
            s.sendall(struct.pack(">ihhih", 104857600, 0, 9, 1, 3) + b"neg" + b"\x00" * 90)
            stalled.append(s)
        wait_for(lambda: b.log_text().count("connection opened") >= 41, 10, message="40 stalled connections")
        # before: every connection reserved and zero-filled its declared 100 MiB (4 GB in all);
        # watched for a second so a slow read cannot pass it
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            grown = rss_mb(b.proc.pid) - base
            assert grown < 100, f"40 stalled frames grew the broker by {grown:.0f} MB"
        produce_sync(p, topic_name, [{"value": b"during", "partition": 0}])
        assert [m.value() for m in consume_from_beginning(b.bootstrap, topic_name, 2)] == [b"before", b"during"]
    finally:
        for s in stalled:
            s.close()


def test_idle_connections_are_closed_after_connections_max_idle_ms(make_broker):
    b = make_broker({"connections.max.idle.ms": "1000"})
    s = _connect(b.bootstrap)
    s.settimeout(10)
    t0 = time.monotonic()
    assert s.recv(1) == b""  # closed by the broker
    assert 0.9 <= time.monotonic() - t0 < 5
    assert "closing idle connection" in b.log_text()


def test_memory_of_many_idle_connections_comes_back(make_broker):
    b = make_broker({"connections.max.idle.ms": "600000"})
    base = rss_mb(b.proc.pid)
    socks = [_connect(b.bootstrap) for _ in range(600)]
    try:
        wait_for(lambda: b.log_text().count("connection opened") >= 600, 20, message="600 connections opened")
        held = rss_mb(b.proc.pid) - base
        assert held / 600 * 1024 < 64, f"{held / 600 * 1024:.0f} KB per idle connection"
    finally:
        for s in socks:
            s.close()
    wait_for(lambda: b.log_text().count("connection closed") >= 600, 20, message="600 connections closed")
    # their buffers are freed and handed back to the OS (malloc_trim) soon after they go
    wait_for(lambda: rss_mb(b.proc.pid) - base < max(held / 2, 8), 10, message="memory back after the close")


def test_max_connections_and_per_ip_limits_close_new_connections(make_broker):
    b = make_broker({"max.connections": "5", "max.connections.per.ip.overrides": "127.0.0.1:3"})
    kept = [_connect(b.bootstrap) for _ in range(3)]
    try:
        wait_for(lambda: b.log_text().count("connection opened") >= 3, 10, message="3 connections")
        extra = _connect(b.bootstrap)
        extra.settimeout(5)
        assert extra.recv(1) == b""  # closed at once: the per-IP override is 3
        assert "max.connections.per.ip (3) reached for 127.0.0.1" in b.log_text()
        extra.close()
    finally:
        for s in kept:
            s.close()


def test_two_hundred_members_in_one_share_group_with_memory_bounded(make_broker, topic_name):
    """group.share.max.size (200) members join one share group at once; every partition is
    assigned, the group describes all of them, and the broker's memory stays bounded."""
    from tests.integration import rawkafka as rk
    from tests.integration.share_helpers import FAST_SHARE_BROKER, describe_share_group, heartbeat_request, new_group

    b = make_broker({**FAST_SHARE_BROKER, "group.share.session.timeout.ms": "45000",
                     "group.share.max.session.timeout.ms": "60000"})
    create_topic(b.bootstrap, topic_name, 8)
    group = new_group()
    base = rss_mb(b.proc.pid)
    members = [f"member-{i:03d}-{'x' * 10}" for i in range(200)]
    epochs: dict[str, int] = {}
    with rk.RawClient(b.bootstrap, timeout=30) as c:
        for m in members:
            r = c.request(heartbeat_request(group, m, 0, [topic_name]))
            assert int(r.error_code) == 0, r
            epochs[m] = r.member_epoch
        assigned: dict[str, set[int]] = {}

        def everyone_assigned() -> bool:
            for m in members:
                r = c.request(heartbeat_request(group, m, epochs[m], [topic_name]))
                assert int(r.error_code) == 0, r
                epochs[m] = r.member_epoch
                if r.assignment is not None:
                    assigned[m] = {p for tp in r.assignment.topic_partitions for p in tp.partitions}
            return len(assigned) == 200 and set().union(*assigned.values()) == set(range(8))

        wait_for(everyone_assigned, 30, 0.2, "200 members with assignments covering 8 partitions")
        # the 201st is refused: group.share.max.size
        r = c.request(heartbeat_request(group, "member-extra-xxxxxxxxxx", 0, [topic_name]))
        assert int(r.error_code) == 81, r  # GROUP_MAX_SIZE_REACHED
    g = describe_share_group(b.bootstrap, group)
    assert len(g.members) == 200
    grown = rss_mb(b.proc.pid) - base
    assert grown < 60, f"200 members grew the broker by {grown:.0f} MB"


def test_queued_max_request_bytes_bounds_partial_requests_across_connections(make_broker, topic_name):
    b = make_broker({"socket.request.max.bytes": str(104857600 + 100), "queued.max.request.bytes": str(8 << 20),
                     "message.max.bytes": str(4 << 20)})
    create_topic(b.bootstrap, topic_name)
    base = rss_mb(b.proc.pid)
    stalled = []
    try:
        for _ in range(20):
            s = _connect(b.bootstrap)
            s.settimeout(1.0)
            try:  # a 100 MiB Produce frame, 3 MiB of it sent; the broker stops reading when memory is full
                s.sendall(struct.pack(">ihhih", 104857600, 0, 9, 1, 3) + b"neg" + b"\x00" * (3 << 20))
            except (TimeoutError, socket.timeout):
                pass
            stalled.append(s)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            grown = rss_mb(b.proc.pid) - base
            # unbounded, each connection's buffer would grow to 4 MiB as its 3 MiB arrive: 80 MB;
            # here the first claims the pool (100 MiB declared) and the others wait unread
            assert grown < 40, f"20 partial 100 MiB requests grew the broker by {grown:.0f} MB"
    finally:
        for s in stalled:
            s.close()
    # once they are gone the memory is free again: a large produce goes through
    p = Producer(producer_conf(b.bootstrap, **{"message.max.bytes": 3 << 20}))
    produce_sync(p, topic_name, [{"value": b"x" * (2 << 20), "partition": 0}])
    assert len(consume_from_beginning(b.bootstrap, topic_name, 1)[0].value()) == 2 << 20
