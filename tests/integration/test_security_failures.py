"""Authentication failures, each a clear error for the client, one structured line in the broker's
log, and nothing for the other connections: wrong password, unknown user, an unsupported mechanism
(and GSSAPI), a plaintext client on a TLS port and a TLS client on a plaintext port, requests before
authentication, sessions that expire without re-authentication (KIP-368) and those that are
renewed; handshake v0 (raw tokens) and SaslAuthenticate framing on the wire; start-up errors for
settings that cannot be served."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from kafka import KafkaProducer

from sharebroker.testing import BrokerProcess, BrokerSecurity, unique_name, wait_for
from sharebroker.testing.security import unsecured_jwt
from sharebroker.testing.plugin import BrokerFactory, broker_for_tests
from tests.integration import rawkafka as rk

pytestmark = pytest.mark.timeout(120)

SECURITY = BrokerSecurity(listeners=("SSL", "SASL_PLAINTEXT", "SASL_SSL"), users={"alice": "alice-secret"},
                          settings={"listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
                                    "listener.name.ssl.ssl.client.auth": "required"})


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = broker_for_tests(tmp_path_factory.mktemp("failures") / "data", security=SECURITY)
    assert isinstance(broker, BrokerProcess)
    yield broker
    broker.stop()
    assert "Traceback" not in broker.log_text(), broker.log_text()[-4000:]


@pytest.fixture
def healthy(secured: BrokerProcess) -> Iterator[Producer]:
    """An authenticated producer, connected before the failure and checked after it."""
    producer = Producer({**SECURITY.confluent(secured, "SASL_SSL", "SCRAM-SHA-256"), "message.timeout.ms": 15000})
    topic = unique_name("ok")
    producer.produce(topic, b"before")
    assert producer.flush(20) == 0
    yield producer
    errors: list[Any] = []
    producer.produce(topic, b"after", on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(20) == 0
    assert errors == [None]


def _client_error(conf: dict[str, Any], what: str) -> list[KafkaError]:
    """Errors the client reports (error_cb) while trying to produce, until one arrives."""
    errors: list[KafkaError] = []
    producer = Producer({**conf, "error_cb": errors.append, "message.timeout.ms": 3000,
                         "reconnect.backoff.ms": 1000, "log_level": 0})
    producer.produce(unique_name("bad"), b"x")
    wait_for(lambda: producer.poll(0.2) is not None and errors, 20, message=what)
    producer.flush(0)
    return errors


def _log_events(broker: BrokerProcess, event: str, since: int, **match: Any) -> list[dict[str, Any]]:
    return [e for e in broker.log_events(event)[since:] if all(e.get(k) == v for k, v in match.items())]


def test_wrong_password(secured: BrokerProcess, healthy: Producer) -> None:
    before = len(secured.log_events("SASL authentication failed, closing connection"))
    errors = _client_error(SECURITY.confluent(secured, "SASL_SSL", "PLAIN", "alice", "wrong"), "an auth error")
    assert errors[0].code() == KafkaError._AUTHENTICATION
    assert "Authentication failed: Invalid username or password" in errors[0].str()
    events = _log_events(secured, "SASL authentication failed, closing connection", before, mechanism="PLAIN")
    assert events and events[0]["error"] == "SASL_AUTHENTICATION_FAILED"
    assert events[0]["message"] == "Authentication failed: Invalid username or password"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_unknown_user_and_wrong_password_scram(secured: BrokerProcess, healthy: Producer, mechanism: str) -> None:
    generic = f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"
    for user, password in (("mallory", "x"), ("alice", "wrong")):
        before = len(secured.log_events("SASL authentication failed, closing connection"))
        errors = _client_error(SECURITY.confluent(secured, "SASL_SSL", mechanism, user, password), "an auth error")
        assert errors[0].code() == KafkaError._AUTHENTICATION
        assert generic in errors[0].str()  # as Kafka: the same text whether the user exists or not
        events = _log_events(secured, "SASL authentication failed, closing connection", before, mechanism=mechanism)
        assert events and events[0]["message"] == generic


def test_unsupported_mechanism(secured: BrokerProcess, healthy: Producer) -> None:
    before = len(secured.log_events("unsupported SASL mechanism, closing connection"))
    errors = _client_error(SECURITY.confluent(secured, "SASL_PLAINTEXT", "SCRAM-SHA-256"), "a handshake error")
    assert errors[0].code() == KafkaError._AUTHENTICATION
    assert "SCRAM-SHA-256" in errors[0].str() and "PLAIN" in errors[0].str()
    events = _log_events(secured, "unsupported SASL mechanism, closing connection", before)
    assert events and events[0]["enabled"] == "PLAIN" and events[0]["mechanism"] == "SCRAM-SHA-256"


def test_expired_oauthbearer_token(secured: BrokerProcess, healthy: Producer) -> None:
    """RFC 7628 as Kafka's OAuthBearerSaslServer: an invalid token is answered with the JSON error
    as a challenge; the client's %x01 reply gets SASL_AUTHENTICATION_FAILED with that JSON."""
    before = len(secured.log_events("SASL authentication failed, closing connection"))
    token = unsecured_jwt("alice", lifetime_s=-60)
    with rk.RawClient(secured.listener_bootstrap("SASL_SSL")) as client:
        client.sock = SECURITY.ssl_context().wrap_socket(client.sock, server_hostname="localhost")
        assert client.request(rk.req_cls(17, 1)(mechanism="OAUTHBEARER")).error_code == 0
        first = client.request(rk.req_cls(36, 2)(auth_bytes=f"n,,\x01auth=Bearer {token}\x01\x01".encode()))
        assert (first.error_code, first.auth_bytes) == (0, b'{"status":"invalid_token"}')
        final = client.request(rk.req_cls(36, 2)(auth_bytes=b"\x01"))
        assert (final.error_code, final.error_message) == (58, '{"status":"invalid_token"}')
        assert client.wait_closed()
    events = _log_events(secured, "SASL authentication failed, closing connection", before, mechanism="OAUTHBEARER")
    assert len(events) == 1 and "Expiration Time" in events[0]["detail"]


def test_gssapi_answered_unsupported_with_enabled_mechanisms(secured: BrokerProcess) -> None:
    with rk.RawClient(secured.listener_bootstrap("SASL_PLAINTEXT")) as client:
        resp = client.request(rk.req_cls(17, 1)(mechanism="GSSAPI"))
        assert resp.error_code == 33  # UNSUPPORTED_SASL_MECHANISM
        assert list(resp.mechanisms) == ["PLAIN"]
        assert client.wait_closed()


def test_plaintext_client_on_tls_port(secured: BrokerProcess, healthy: Producer) -> None:
    before = len(secured.log_events("TLS handshake failed, closing connection"))
    conf = {"bootstrap.servers": secured.listener_bootstrap("SSL"), "security.protocol": "PLAINTEXT"}
    errors = _client_error(conf, "a transport error")
    assert errors[0].code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
    wait_for(lambda: _log_events(secured, "TLS handshake failed, closing connection", before), 10,
             message="the broker's log line")


def test_tls_client_on_plaintext_port(secured: BrokerProcess, healthy: Producer) -> None:
    before = len(secured.log_events("invalid frame size, closing connection"))
    conf = {**SECURITY.confluent(secured, "SSL"), "bootstrap.servers": secured.bootstrap}
    errors = _client_error(conf, "a TLS error")
    assert any(e.code() in (KafkaError._SSL, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN) for e in errors)
    wait_for(lambda: _log_events(secured, "invalid frame size, closing connection", before), 10,
             message="the broker's log line")


def test_client_certificate_required(secured: BrokerProcess, healthy: Producer) -> None:
    """listener.name.ssl.ssl.client.auth=required: a client without a certificate is refused in the
    handshake; with one (signed by the trusted CA) it is served."""
    before = len(secured.log_events("TLS handshake failed, closing connection"))
    errors = _client_error(SECURITY.confluent(secured, "SSL"), "a TLS error")
    assert errors[0].code() in (KafkaError._SSL, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
    wait_for(lambda: _log_events(secured, "TLS handshake failed, closing connection", before), 10,
             message="the broker's log line")
    producer = Producer({**SECURITY.confluent(secured, "SSL", client_cert=True), "message.timeout.ms": 15000})
    producer.produce(unique_name("mtls"), b"x")
    assert producer.flush(20) == 0


def test_request_before_authentication_closes(secured: BrokerProcess) -> None:
    before = len(secured.log_events("request before authentication, closing connection"))
    with rk.RawClient(secured.listener_bootstrap("SASL_PLAINTEXT")) as client:
        client.send(rk.metadata_request(None))
        assert client.wait_closed()
    events = _log_events(secured, "request before authentication, closing connection", before)
    assert len(events) == 1 and events[0]["api_key"] == 3


def test_other_request_during_authentication_gets_illegal_sasl_state(secured: BrokerProcess) -> None:
    with rk.RawClient(secured.listener_bootstrap("SASL_PLAINTEXT")) as client:
        assert client.request(rk.req_cls(17, 1)(mechanism="PLAIN")).error_code == 0
        resp = client.request(rk.metadata_request(["some-topic"]))
        assert [t.error_code for t in resp.topics] == [34]  # ILLEGAL_SASL_STATE
        assert client.wait_closed()


def test_handshake_v1_authenticate_then_requests(secured: BrokerProcess) -> None:
    with rk.RawClient(secured.listener_bootstrap("SASL_PLAINTEXT")) as client:
        # An ApiVersions version the broker does not know: answered (v0, UNSUPPORTED_VERSION), and the
        # client may retry lower before its handshake, as with Kafka.
        client.send_bytes(rk.encode_request(rk.api_versions_request(3), 99)[:6] + (99).to_bytes(2, "big")
                          + rk.encode_request(rk.api_versions_request(3), 99)[8:])
        corr, body = rk.decode_response(client.recv_frame(), 18, 0)
        assert (corr, body.error_code) == (99, 35)
        assert client.request(rk.api_versions_request()).error_code == 0
        assert client.request(rk.req_cls(17, 1)(mechanism="PLAIN")).error_code == 0
        resp = client.request(rk.req_cls(36, 2)(auth_bytes=b"\0alice\0alice-secret"))
        assert resp.error_code == 0 and resp.session_lifetime.total_seconds() == 0
        assert client.request(rk.metadata_request([])).brokers
        # A second SaslAuthenticate after success: ILLEGAL_SASL_STATE, as Kafka's KafkaApis answers.
        again = client.request(rk.req_cls(36, 2)(auth_bytes=b"\0alice\0alice-secret"))
        assert again.error_code == 34
        # No connections.max.reauth.ms: no re-authentication, the handshake is ILLEGAL_SASL_STATE.
        assert client.request(rk.req_cls(17, 1)(mechanism="PLAIN")).error_code == 34
        assert client.request(rk.metadata_request([])).brokers


def test_handshake_v0_raw_tokens(secured: BrokerProcess) -> None:
    """Handshake v0: the token goes as a bare size-prefixed frame (4 bytes here, shorter than any
    request header), answered in kind."""
    with rk.RawClient(secured.listener_bootstrap("SASL_PLAINTEXT")) as client:
        assert client.request(rk.req_cls(17, 0)(mechanism="PLAIN")).error_code == 0
        token = b"\0alice\0alice-secret"
        client.send_bytes(len(token).to_bytes(4, "big") + token)
        assert client.recv_frame() == b""
        assert client.request(rk.metadata_request([])).brokers
    with rk.RawClient(secured.listener_bootstrap("SASL_PLAINTEXT")) as client:
        assert client.request(rk.req_cls(17, 0)(mechanism="PLAIN")).error_code == 0
        client.send_bytes((4).to_bytes(4, "big") + b"\0a\0b")
        assert client.wait_closed()  # a failed raw exchange is closed without a word, as Kafka does


def test_session_expiry_and_reauthentication(make_broker: BrokerFactory) -> None:
    """connections.max.reauth.ms: the lifetime goes to the client in SaslAuthenticate v1+; librdkafka
    and kafka-python re-authenticate in time and keep producing; a connection that does not is
    closed on its first request after expiry."""
    security = BrokerSecurity(listeners=("SASL_PLAINTEXT",), mechanisms=("PLAIN", "SCRAM-SHA-256"),
                              users={"alice": "alice-secret", "bob": "bob-secret"},
                              settings={"connections.max.reauth.ms": "1500"})
    broker = make_broker(security=security)
    assert isinstance(broker, BrokerProcess)
    with rk.RawClient(broker.listener_bootstrap("SASL_PLAINTEXT")) as client:
        assert client.request(rk.req_cls(17, 1)(mechanism="PLAIN")).error_code == 0
        resp = client.request(rk.req_cls(36, 1)(auth_bytes=b"\0alice\0alice-secret"))
        assert resp.error_code == 0 and resp.session_lifetime.total_seconds() == 1.5
        expires = time.monotonic() + 1.5
        assert client.request(rk.metadata_request([])).brokers
        wait_for(lambda: time.monotonic() > expires + 0.1, 5, message="the session to expire")
        client.send(rk.metadata_request([]))
        assert client.wait_closed()
    assert len(broker.log_events("authentication session expired, closing connection")) == 1

    def reauthenticated(mechanism: str, principal: str) -> bool:
        return any(e.get("mechanism") == mechanism and e.get("principal") == principal
                   for e in broker.log_events("SASL re-authentication succeeded"))

    for mechanism in ("PLAIN", "SCRAM-SHA-256"):  # librdkafka
        producer = Producer({**security.confluent(broker, "SASL_PLAINTEXT", mechanism, "alice"), "linger.ms": 0})
        topic, errors = unique_name("reauth"), []

        def produced(producer: Producer = producer, topic: str = topic, mechanism: str = mechanism,
                     errors: list[Any] = errors) -> bool:
            producer.produce(topic, b"x", on_delivery=lambda err, msg: errors.append(err))
            producer.flush(10)
            return reauthenticated(mechanism, "User:alice")

        wait_for(produced, 20, interval=0.2, message=f"a {mechanism} re-authentication")
        assert errors and all(e is None for e in errors)
    kp = KafkaProducer(**security.kafka_python(broker, "SASL_PLAINTEXT", "SCRAM-SHA-256", "bob"))
    try:
        wait_for(lambda: kp.send(unique_name("reauth"), b"y").get(timeout=10) and
                 reauthenticated("SCRAM-SHA-256", "User:bob"), 20, interval=0.2,
                 message="kafka-python's re-authentication")
    finally:
        kp.close()
    assert len(broker.log_events("authentication session expired, closing connection")) == 1


def test_reauthentication_rules(make_broker: BrokerFactory) -> None:
    """KIP-368 on the wire: a session that expires may be renewed with the same mechanism and
    principal (Kafka's messages otherwise), at most once a second (else ILLEGAL_SASL_STATE); without
    connections.max.reauth.ms a handshake on an authenticated connection is ILLEGAL_SASL_STATE."""
    security = BrokerSecurity(listeners=("SASL_PLAINTEXT",), mechanisms=("PLAIN", "SCRAM-SHA-256"),
                              users={"alice": "alice-secret", "bob": "bob-secret"},
                              settings={"connections.max.reauth.ms": "600000"})
    broker = make_broker(security=security)
    assert isinstance(broker, BrokerProcess)
    bootstrap = broker.listener_bootstrap("SASL_PLAINTEXT")

    def authenticated(user: str) -> rk.RawClient:
        client = rk.RawClient(bootstrap)
        assert client.request(rk.req_cls(17, 1)(mechanism="PLAIN")).error_code == 0
        token = f"\0{user}\0{user}-secret".encode()
        assert client.request(rk.req_cls(36, 2)(auth_bytes=token)).session_lifetime.total_seconds() == 600
        return client

    with authenticated("alice") as client:  # same mechanism and principal: renewed, requests go on
        assert client.request(rk.req_cls(17, 1)(mechanism="PLAIN")).error_code == 0
        resp = client.request(rk.req_cls(36, 2)(auth_bytes=b"\0alice\0alice-secret"))
        assert resp.error_code == 0 and resp.session_lifetime.total_seconds() == 600
        assert client.request(rk.req_cls(17, 1)(mechanism="PLAIN")).error_code == 34  # within a second
        assert client.request(rk.metadata_request([])).brokers
    with authenticated("alice") as client:
        assert client.request(rk.req_cls(17, 1)(mechanism="PLAIN")).error_code == 0
        resp = client.request(rk.req_cls(36, 2)(auth_bytes=b"\0bob\0bob-secret"))
        assert (resp.error_code, resp.error_message) == (58, "Cannot change principals during re-authentication "
                                                             "from User.alice: User.bob")
        assert client.wait_closed()
    with authenticated("alice") as client:
        assert client.request(rk.req_cls(17, 1)(mechanism="SCRAM-SHA-256")).error_code == 0
        resp = client.request(rk.req_cls(36, 2)(auth_bytes=b"n,,n=alice,r=abc"))
        assert (resp.error_code, resp.error_message) == (58, "SASL mechanism 'SCRAM-SHA-256' requested by client "
                                                             "is not supported for re-authentication of mechanism "
                                                             "'PLAIN'")
        assert client.wait_closed()


def _start_fails(tmp_path: Path, security: BrokerSecurity, overrides: dict[str, str]) -> str:
    broker = BrokerProcess(tmp_path / unique_name("data"), overrides, security=security)
    with pytest.raises(RuntimeError) as failed:
        broker.start()
    return str(failed.value)


@pytest.mark.needs_own_broker("starts brokers with settings that fail")
def test_settings_that_cannot_be_served_stop_the_start(tmp_path: Path) -> None:
    sasl = BrokerSecurity(listeners=("SASL_PLAINTEXT",))
    assert "GSSAPI (Kerberos) is not supported" in _start_fails(tmp_path, sasl, {"sasl.enabled.mechanisms": "GSSAPI"})
    tls = BrokerSecurity(listeners=("SSL",))
    text = _start_fails(tmp_path, tls, {"ssl.keystore.type": "JKS", "ssl.keystore.location": "/dev/null"})
    assert "JKS stores are not readable" in text and "PKCS12" in text
    text = _start_fails(tmp_path, tls, {"ssl.client.auth": "required", "ssl.truststore.location": ""})
    assert "needs a trust store" in text
