"""Fuzzing of authentication: malformed SaslHandshake/SaslAuthenticate frames and raw tokens,
truncated and mutated SCRAM and OAUTHBEARER messages fed to a connection's SASL exchange (every
input ends in an answer or a close, never another exception, and memory stays bounded); and, on a
live broker, TLS and SASL handshakes that stall or send garbage, while another client is served.
`make fuzz` runs the in-process properties with FUZZ_EXAMPLES."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import resource
import socket
import ssl
from pathlib import Path

import pytest
from confluent_kafka import Producer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharebroker.broker.security.oauthbearer import UnsecuredValidator, unsecured_token
from sharebroker.broker.security.sasl import ListenerSecurity, Outcome, SaslSession
from sharebroker.broker.security.scram import ScramCredentials, credential_from_password
from sharebroker.testing import BrokerProcess, BrokerSecurity, unique_name, wait_for
from sharebroker.testing.plugin import BrokerFactory
from tests.integration import rawkafka as rk

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "1000"))
def _security() -> ListenerSecurity:
    store = ScramCredentials(Path("/nonexistent"))  # credentials in memory only: nothing is written
    assert not store.users
    store.users = {"alice": {"SCRAM-SHA-256": credential_from_password("SCRAM-SHA-256", "pw"),
                             "SCRAM-SHA-512": credential_from_password("SCRAM-SHA-512", "pw")}}
    return ListenerSecurity("SASL_SSL", "SASL_SSL", mechanisms=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"],
                            plain_users={"alice": "pw"}, oauth=UnsecuredValidator({}), scram=store)


SECURITY = _security()


def _frame(req: object) -> bytes:
    return rk.encode_request(req, 1)[4:]


def _scram_final(first: bytes) -> bytes:
    nonce = first.split(b",")[0][2:]
    return b"c=biws,r=" + nonce + b",p=" + base64.b64encode(hmac.new(b"k", nonce, hashlib.sha256).digest())


# Messages of each mechanism, well-formed, for the mutator to start from.
TOKENS = [b"\0alice\0pw", b"n,,n=alice,r=abcdef", b"n,a=alice,n=alice,r=xyz", b"c=biws,r=abc,p=AAAA",
          f"n,,\x01auth=Bearer {unsecured_token('alice')}\x01\x01".encode(), b"\x01",
          f"n,,\x01auth=Bearer {unsecured_token('a', exp=1e308)}\x01\x01".encode()]
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI", ""]


def _mutate(draw: st.DrawFn, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(("set", "insert", "delete", "truncate")))
        pos = draw(st.integers(0, max(len(buf) - 1, 0)))
        if op == "set" and buf:
            buf[pos] = draw(st.integers(0, 255))
        elif op == "insert":
            buf[pos:pos] = draw(st.binary(min_size=1, max_size=6))
        elif op == "delete" and buf:
            del buf[pos:pos + draw(st.integers(1, 8))]
        elif op == "truncate":
            del buf[pos:]
    return bytes(buf)


@st.composite
def exchanges(draw: st.DrawFn) -> list[bytes]:
    """A handshake (v0 or v1) then a few tokens, each frame possibly mutated."""
    version = draw(st.integers(0, 1))
    frames = [_mutate(draw, _frame(rk.req_cls(17, version)(mechanism=draw(st.sampled_from(MECHANISMS)))))]
    for _ in range(draw(st.integers(1, 3))):
        token = _mutate(draw, draw(st.sampled_from(TOKENS)))
        if version == 0:
            frames.append(token)
        else:
            frames.append(_mutate(draw, _frame(rk.req_cls(36, draw(st.integers(0, 2)))(auth_bytes=token))))
    return frames


@settings(max_examples=EXAMPLES // 3, deadline=None, derandomize=EXAMPLES <= 3000,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(frames=exchanges())
def test_sasl_exchanges_answer_or_close(frames: list[bytes]) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    session = SaslSession(SECURITY, 1, "fuzz:1", lambda principal: None)
    for frame in frames:
        outcome = session.check(frame) if session.authenticated else session.handle(frame)
        assert isinstance(outcome, Outcome)
        if outcome.close:
            break
        if not session.authenticated and session.state == "authenticate" and session.mechanism and \
                session.mechanism.startswith("SCRAM") and outcome.response:
            # Answer the server-first message as a client would (with a wrong proof), then mutate.
            frames.append(_scram_final(outcome.response))
    grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kb < 64 * 1024


# -- live: stalled and garbage handshakes ------------------------------------------------------


@pytest.fixture
def secured(sharebroker_factory: BrokerFactory) -> BrokerProcess:
    broker = sharebroker_factory({"connections.max.idle.ms": 1500},
                                 security=BrokerSecurity(listeners=("SSL", "SASL_PLAINTEXT")))
    assert isinstance(broker, BrokerProcess)
    return broker


def _connect(bootstrap: str) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=5)


def test_stalled_and_garbage_handshakes_cost_only_themselves(secured: BrokerProcess) -> None:
    import random

    rng = random.Random(26)
    stalled: list[socket.socket] = []
    # TLS: half a ClientHello then silence; random bytes; a TLS record header claiming 16 KB.
    for _ in range(5):
        s = _connect(secured.listener_bootstrap("SSL"))
        outgoing = ssl.MemoryBIO()
        hello = ssl.create_default_context().wrap_bio(ssl.MemoryBIO(), outgoing, server_hostname="localhost")
        try:
            hello.do_handshake()
        except ssl.SSLWantReadError:
            pass
        client_hello = outgoing.read()
        s.sendall(client_hello[:rng.randint(1, len(client_hello) - 1)])
        stalled.append(s)
    for _ in range(5):
        s = _connect(secured.listener_bootstrap("SSL"))
        s.sendall(bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 300))))
        stalled.append(s)
    # SASL: a handshake then nothing; half a frame; a frame declaring more than sasl.server.max.receive.size.
    for payload in (_frame(rk.req_cls(17, 1)(mechanism="PLAIN")), b"\x00\x00\x01\x00\x00\x11",
                    (10 << 20).to_bytes(4, "big")):
        s = _connect(secured.listener_bootstrap("SASL_PLAINTEXT"))
        s.sendall(payload if len(payload) < 10 else len(payload).to_bytes(4, "big") + payload)
        stalled.append(s)
    # Meanwhile an authenticated client is served.
    producer = Producer({**BrokerSecurity(listeners=("SSL", "SASL_PLAINTEXT")).confluent(secured, "SASL_PLAINTEXT",
                                                                                        "PLAIN", "alice",
                                                                                        "alice-secret"),
                         "message.timeout.ms": 10000})
    producer.produce(unique_name("fuzz"), b"ok")
    assert producer.flush(15) == 0

    def closed(s: socket.socket) -> bool:
        s.settimeout(0.05)
        try:
            return s.recv(65536) == b""
        except (TimeoutError, socket.timeout):
            return False
        except OSError:
            return True

    wait_for(lambda: all(closed(s) for s in stalled), 20, interval=0.1, message="every stalled connection closed")
    for s in stalled:
        s.close()
    assert secured.alive()
    assert "Traceback" not in secured.log_text()
    assert secured.log_events("TLS handshake failed, closing connection")
