"""What TLS and SASL cost: produce and share-consume throughput over PLAINTEXT, SSL and SASL_SSL
(SCRAM-SHA-256) listeners of one broker in one run, and the connection set-up time of each
listener and mechanism (TCP connect, TLS handshake, SASL exchange, first Metadata answered).

    python -m bench.security [--records 200000] [--size 100] [--connections 30]

Throughput: one confluent-kafka Producer (linger.ms=5) sends the records, then one ShareConsumer
(implicit acknowledgement) reads them all; both rates are records per second. Set-up: a blocking
client connects `--connections` times per listener and mechanism and the median and p90 are
printed. The listeners alternate within the run, so the machine's noise falls on all alike."""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import os
import shutil
import socket
import ssl
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from kio.index import load_request_schema

from sharebroker.broker.security.oauthbearer import unsecured_token
from sharebroker.protocol.client import ResponseStream, decode_response, encode_request
from sharebroker.testing import BrokerProcess, BrokerSecurity

USERS = {"bench": "bench-secret"}
THROUGHPUT = [("PLAINTEXT", None), ("SSL", None), ("SASL_SSL", "SCRAM-SHA-256")]
SETUP = [("PLAINTEXT", None), ("SSL", None), ("SASL_PLAINTEXT", "PLAIN"), ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
         ("SASL_PLAINTEXT", "SCRAM-SHA-512"), ("SASL_PLAINTEXT", "OAUTHBEARER"), ("SASL_SSL", "PLAIN"),
         ("SASL_SSL", "SCRAM-SHA-256"), ("SASL_SSL", "SCRAM-SHA-512"), ("SASL_SSL", "OAUTHBEARER")]


def _label(protocol: str, mechanism: str | None) -> str:
    return f"{protocol}/{mechanism}" if mechanism else protocol


# -- throughput ----------------------------------------------------------------------------------


def _conf(security: BrokerSecurity, broker: BrokerProcess, protocol: str, mechanism: str | None) -> dict[str, Any]:
    if protocol == "PLAINTEXT":
        return {"bootstrap.servers": broker.bootstrap}
    return security.confluent(broker, protocol, mechanism, "bench")


def throughput(security: BrokerSecurity, broker: BrokerProcess, protocol: str, mechanism: str | None,
               records: int, size: int) -> tuple[float, float]:
    run = os.urandom(4).hex()
    topic, group = f"bench-sec-{run}", f"bench-sec-{run}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(topic, num_partitions=4)])[topic].result(30)
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for fut in admin.incremental_alter_configs([res]).values():
        fut.result(30)
    conf = _conf(security, broker, protocol, mechanism)
    producer = Producer({**conf, "linger.ms": 5, "batch.size": 1 << 20, "queue.buffering.max.messages": 1_000_000})
    payload = os.urandom(size)
    producer.list_topics(topic, timeout=30)  # connected and authenticated before the clock starts
    t0 = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, payload)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120) != 0:
        raise RuntimeError(f"{_label(protocol, mechanism)}: records not delivered")
    produce_rate = records / (time.perf_counter() - t0)
    consumer = ShareConsumer({**conf, "group.id": group, "log_level": 3})
    consumer.subscribe([topic])
    got = 0
    started = None
    deadline = time.monotonic() + 300
    while got < records and time.monotonic() < deadline:
        batch = consumer.poll(0.5)
        if batch and started is None:
            started = time.perf_counter()
        got += sum(1 for m in batch if m.error() is None)
    consumer.close()
    if got < records or started is None:
        raise RuntimeError(f"{_label(protocol, mechanism)}: share-consumed {got}/{records}")
    return produce_rate, records / (time.perf_counter() - started)


# -- connection set-up ---------------------------------------------------------------------------


class _Wire:
    def __init__(self, sock: socket.socket | ssl.SSLSocket) -> None:
        self.sock, self.stream, self.corr = sock, ResponseStream(), 0

    def request(self, api_key: int, version: int, **fields: Any) -> Any:
        self.corr += 1
        self.sock.sendall(encode_request(load_request_schema(api_key, version)(**fields), self.corr, "bench"))
        while (frame := self.stream.next_frame()) is None:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("closed by the broker")
            self.stream.feed(chunk)
        return decode_response(frame, api_key, version)[1]


def _scram(wire: _Wire, mechanism: str, user: str, password: str) -> None:
    digest = "sha256" if mechanism.endswith("256") else "sha512"
    nonce = base64.b64encode(os.urandom(18)).decode()
    bare = f"n={user},r={nonce}"
    first = wire.request(36, 2, auth_bytes=f"n,,{bare}".encode()).auth_bytes.decode()
    attrs = dict(part.split("=", 1) for part in first.split(","))
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth_message = f"{bare},{first},{without_proof}".encode()
    signature = hmac.new(hashlib.new(digest, client_key).digest(), auth_message, digest).digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    if wire.request(36, 2, auth_bytes=f"{without_proof},p={proof}".encode()).error_code:
        raise RuntimeError("SCRAM authentication failed")


def connect_once(host: str, port: int, protocol: str, mechanism: str | None, ctx: ssl.SSLContext | None) -> float:
    """Seconds from connect() to the first Metadata answer, authenticated."""
    t0 = time.perf_counter()
    sock: socket.socket | ssl.SSLSocket = socket.create_connection((host, port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if protocol.endswith("SSL"):
        assert ctx is not None
        sock = ctx.wrap_socket(sock, server_hostname="localhost")
    wire = _Wire(sock)
    try:
        if mechanism is not None:
            if wire.request(17, 1, mechanism=mechanism).error_code:
                raise RuntimeError(f"{mechanism} not enabled")
            user, password = next(iter(USERS.items()))
            if mechanism == "PLAIN":
                wire.request(36, 2, auth_bytes=f"\0{user}\0{password}".encode())
            elif mechanism == "OAUTHBEARER":
                wire.request(36, 2, auth_bytes=f"n,,\x01auth=Bearer {unsecured_token(user)}\x01\x01".encode())
            else:
                _scram(wire, mechanism, user, password)
        wire.request(3, 12, topics=[], allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        return time.perf_counter() - t0
    finally:
        sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--connections", type=int, default=30)
    parser.add_argument("--runs", type=int, default=3, help="throughput runs per listener (median printed)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sharebroker-bench-security-"))
    security = BrokerSecurity(listeners=("SSL", "SASL_PLAINTEXT", "SASL_SSL"), users=dict(USERS))
    broker = BrokerProcess(tmp / "data", security=security)
    try:
        broker.start()
        throughput(security, broker, "PLAINTEXT", None, max(1000, args.records // 5), args.size)  # warm-up
        rates: dict[str, list[tuple[float, float]]] = {_label(p, m): [] for p, m in THROUGHPUT}
        for _ in range(args.runs):  # round robin, as the set-up times below
            for protocol, mechanism in THROUGHPUT:
                rates[_label(protocol, mechanism)].append(
                    throughput(security, broker, protocol, mechanism, args.records, args.size))
        print(f"records: {args.records} x {args.size} B, 4 partitions; one Producer, one ShareConsumer; "
              f"median of {args.runs} runs")
        print(f"{'listener':<28}{'produce rec/s':>16}{'share-consume rec/s':>22}")
        for label, runs in rates.items():
            produce = statistics.median(r[0] for r in runs)
            consume = statistics.median(r[1] for r in runs)
            print(f"{label:<28}{produce:>16,.0f}{consume:>22,.0f}", flush=True)
        assert security.certs is not None
        ctx = ssl.create_default_context(cafile=str(security.certs.ca))
        times: dict[str, list[float]] = {_label(p, m): [] for p, m in SETUP}
        for _ in range(args.connections):  # round robin: noise falls on every kind alike
            for protocol, mechanism in SETUP:
                port = broker.listener_bootstrap(protocol).rsplit(":", 1)[1]
                times[_label(protocol, mechanism)].append(
                    connect_once(broker.host, int(port), protocol, mechanism, ctx))
        print(f"\nconnection set-up (connect to first Metadata answer), {args.connections} each")
        print(f"{'listener/mechanism':<28}{'median ms':>12}{'p90 ms':>10}")
        for label, samples in times.items():
            samples.sort()
            p90 = samples[min(len(samples) - 1, int(len(samples) * 0.9))]
            print(f"{label:<28}{statistics.median(samples) * 1000:>12.2f}{p90 * 1000:>10.2f}")
    finally:
        try:
            broker.stop()
        except Exception:  # noqa: BLE001
            broker.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
