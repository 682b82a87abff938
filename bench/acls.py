"""What authorization costs with 1,000 ACLs: the authorizer's decision alone (in-process, per check)
and whole requests against a broker without an authorizer, with the StandardAuthorizer and no
ACLs but super users, and with 1,000 ACLs (literal and prefixed, many principals), in alternating
runs so that the machine's noise falls on all alike.

    python -m bench.acls [--acls 1000] [--requests 3000] [--runs 3]

Per request: one Metadata for one topic (DESCRIBE on it) and one Produce of one small batch (WRITE
on it), sent back to back on one connection; the figure is the median round trip in microseconds."""

from __future__ import annotations

import argparse
import datetime
import random
import shutil
import socket
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kio.index import load_request_schema

from sharebroker.broker.security.acl_store import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AclStore,
    PatternType,
    ResourceType,
)
from sharebroker.broker.security.authorizer import Authorizer
from sharebroker.protocol.client import ClientCodec
from sharebroker.protocol.codec import build
from sharebroker.protocol.record_batch import encode_batch
from sharebroker.testing import BrokerProcess

AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
ME = "User:ANONYMOUS"
TOPIC = "bench-acl-topic"


def acl_set(n: int, rng: random.Random) -> list[AclBinding]:
    """n ACLs over topics, groups and transactional ids: literal and prefixed, ALLOW and DENY, for
    200 principals, plus the ones the benchmark's own client needs."""
    acls = [AclBinding(ResourceType.TOPIC, TOPIC, PatternType.LITERAL, ME, "*", AclOperation.WRITE,
                       AclPermissionType.ALLOW),
            AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, ME, "*", AclOperation.ALTER,
                       AclPermissionType.ALLOW)]
    types = [ResourceType.TOPIC, ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID]
    ops = [AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.ALL]
    while len(acls) < n:
        prefixed = rng.random() < 0.3
        name = f"{rng.choice(['orders', 'payments', 'bench-acl', 'audit', 'events'])}-{rng.randrange(10_000)}"
        acls.append(AclBinding(rng.choice(types), name[: rng.randint(4, len(name))] if prefixed else name,
                               PatternType.PREFIXED if prefixed else PatternType.LITERAL,
                               f"User:u{rng.randrange(200)}", rng.choice(["*", "10.0.0.1"]), rng.choice(ops),
                               AclPermissionType.DENY if rng.random() < 0.1 else AclPermissionType.ALLOW))
    return acls


def micro(n: int) -> None:
    rng = random.Random(7)
    store = AclStore([], lambda rows: None)
    store.add(acl_set(n, rng))
    az = Authorizer(store, super_users=(), allow_if_no_acl=False)
    checks: list[tuple[str, Callable[[], bool]]] = [
        ("literal hit (WRITE on the topic)", lambda: az.authorize(ME, "127.0.0.1", AclOperation.WRITE,
                                                                  ResourceType.TOPIC, TOPIC)),
        ("implied (DESCRIBE from WRITE)", lambda: az.authorize(ME, "127.0.0.1", AclOperation.DESCRIBE,
                                                               ResourceType.TOPIC, TOPIC)),
        ("miss: denied by default", lambda: az.authorize(ME, "127.0.0.1", AclOperation.READ, ResourceType.TOPIC,
                                                         "orders-12345-long-topic-name")),
        ("group name under prefixes", lambda: az.authorize("User:u3", "10.0.0.1", AclOperation.READ,
                                                           ResourceType.GROUP, "payments-4242")),
    ]
    print(f"authorizer decision with {len(store)} ACLs (in-process, per check; first uncached, then as "
          "repeated):")
    for label, fn in checks:
        az._decisions.clear()
        rounds = 2_000
        started = time.perf_counter()
        for _ in range(rounds):
            az._decisions.clear()
            fn()
        print(f"  {label + ', uncached':48} {(time.perf_counter() - started) / rounds * 1e9:8.0f} ns")
        rounds = 200_000
        started = time.perf_counter()
        for _ in range(rounds):
            fn()
        print(f"  {label + ', repeated':48} {(time.perf_counter() - started) / rounds * 1e9:8.0f} ns")
    off = None
    rounds = 1_000_000
    started = time.perf_counter()
    for _ in range(rounds):
        if off is not None:
            pass
    print(f"  {'ACLs off (the handlers attribute test)':48} {(time.perf_counter() - started) / rounds * 1e9:8.0f} ns")


class _Wire:
    """One blocking connection sending prebuilt requests, for round-trip timing."""

    def __init__(self, bootstrap: str) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.codec = ClientCodec("bench-acls")

    def request(self, key: int, version: int, data: dict[str, Any]) -> Any:
        _, frame = self.codec.encode(build(load_request_schema(key, version), data))
        self.sock.sendall(frame)
        while (got := self.codec.next_response()) is None:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("closed")
            self.codec.receive(chunk)
        return got[1]

    def close(self) -> None:
        self.sock.close()


def _batch() -> bytes:
    return bytes(encode_batch([(None, b"v" * 100)], timestamp_ms=int(time.time() * 1000)))


def wire(label: str, overrides: dict[str, str], acls: list[AclBinding], requests: int) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="sharebroker-bench-acls-"))
    try:
        if acls:  # set up as a super user, then measured without one
            boot = BrokerProcess(tmp / "data", {**AUTHORIZER, "super.users": ME}).start()
            w = _Wire(boot.bootstrap)
            for i in range(0, len(acls), 100):
                w.request(30, 3, {"creations": [
                    {"resource_type": a.resource_type, "resource_name": a.resource_name,
                     "resource_pattern_type": a.pattern_type, "principal": a.principal, "host": a.host,
                     "operation": a.operation, "permission_type": a.permission} for a in acls[i:i + 100]]})
            w.request(19, 7, {"topics": [{"name": TOPIC, "num_partitions": 1, "replication_factor": 1,
                                          "assignments": (), "configs": ()}],
                              "timeout": datetime.timedelta(seconds=10), "validate_only": False})
            w.close()
            boot.stop()
        b = BrokerProcess(tmp / "data", overrides).start()
        try:
            w = _Wire(b.bootstrap)
            if not acls:
                w.request(19, 7, {"topics": [{"name": TOPIC, "num_partitions": 1, "replication_factor": 1,
                                              "assignments": (), "configs": ()}],
                                  "timeout": datetime.timedelta(seconds=10), "validate_only": False})
            batch = _batch()
            metadata = {"topics": [{"name": TOPIC, "topic_id": None}], "allow_auto_topic_creation": False,
                        "include_topic_authorized_operations": False}
            produce = {"transactional_id": None, "acks": 1, "timeout": datetime.timedelta(seconds=5),
                       "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}]}
            times: dict[str, list[float]] = {"metadata": [], "produce": []}
            for i in range(requests + 200):
                started = time.perf_counter()
                resp = w.request(3, 12, metadata)
                t_meta = time.perf_counter() - started
                assert int(resp.topics[0].error_code) == 0, resp
                started = time.perf_counter()
                resp = w.request(0, 9, produce)
                t_prod = time.perf_counter() - started
                assert int(resp.responses[0].partition_responses[0].error_code) == 0, resp
                if i >= 200:  # warmed up
                    times["metadata"].append(t_meta)
                    times["produce"].append(t_prod)
            w.close()
            return {k: statistics.median(v) * 1e6 for k, v in times.items()}
        finally:
            b.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--acls", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    micro(args.acls)
    acls = acl_set(args.acls, random.Random(7))
    setups = [("no authorizer", {}, []),
              ("StandardAuthorizer, super user", {**AUTHORIZER, "super.users": ME}, []),
              (f"StandardAuthorizer, {len(acls)} ACLs", AUTHORIZER, acls)]
    results: dict[str, list[dict[str, float]]] = {label: [] for label, _, _ in setups}
    for _ in range(args.runs):
        for label, overrides, bindings in setups:
            results[label].append(wire(label, overrides, bindings, args.requests))
    print(f"\nround trip per request, median of {args.requests} (best of {args.runs} runs), microseconds:")
    print(f"  {'':36} {'Metadata':>10} {'Produce':>10}")
    for label, runs in results.items():
        best = {k: min(r[k] for r in runs) for k in ("metadata", "produce")}
        print(f"  {label:36} {best['metadata']:10.0f} {best['produce']:10.0f}")


if __name__ == "__main__":
    main()
