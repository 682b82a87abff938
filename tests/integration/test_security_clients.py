"""TLS and SASL listeners with the three PyPI clients: produce, consume and share-consume over SSL
(with and without a client certificate), SASL_PLAINTEXT and SASL_SSL with PLAIN, SCRAM-SHA-256,
SCRAM-SHA-512 and OAUTHBEARER (unsecured JWTs); the principal each connection authenticated as
(from the broker's log); SCRAM users managed with the AdminClient and kept across a restart."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka import KafkaConsumer, KafkaProducer

from sharebroker.testing import BrokerProcess, BrokerSecurity, unique_name, wait_for
from sharebroker.testing.plugin import BrokerFactory, broker_for_tests
from tests.integration.clients import admin, create_topic
from tests.integration.share_helpers import poll_until, set_earliest, share_consumer, values

pytestmark = pytest.mark.timeout(120)

SECURITY = BrokerSecurity(listeners=("SSL", "SASL_PLAINTEXT", "SASL_SSL"),
                          users={"alice": "alice-secret", "bob": "bob-secret"}, client_auth="requested",
                          settings={"ssl.principal.mapping.rules": "RULE:^CN=([a-z]+),O=.*$/$1/U,DEFAULT"})
CASES = [("SSL", None), ("SASL_PLAINTEXT", "PLAIN"), ("SASL_SSL", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-256"),
         ("SASL_SSL", "SCRAM-SHA-512"), ("SASL_PLAINTEXT", "SCRAM-SHA-512"), ("SASL_SSL", "OAUTHBEARER")]
IDS = [f"{p}-{m}" if m else p for p, m in CASES]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = broker_for_tests(tmp_path_factory.mktemp("secured") / "data", security=SECURITY)
    assert isinstance(broker, BrokerProcess)
    yield broker
    broker.stop()
    assert "Traceback" not in broker.log_text(), broker.log_text()[-4000:]


def _authenticated(broker: BrokerProcess, principal: str, mechanism: str | None) -> bool:
    if mechanism is None:
        return any(e.get("principal") == principal for e in broker.log_events("connection opened"))
    return any(e.get("principal") == principal and e.get("mechanism") == mechanism
               for e in broker.log_events("SASL authentication succeeded"))


@pytest.mark.parametrize(("protocol", "mechanism"), CASES, ids=IDS)
def test_confluent_produce_consume(secured: BrokerProcess, protocol: str, mechanism: str | None) -> None:
    topic = unique_name("sec")
    conf = SECURITY.confluent(secured, protocol, mechanism, "bob")
    producer = Producer({**conf, "message.timeout.ms": 15000})
    errors: list[Any] = []
    for i in range(5):
        producer.produce(topic, f"v{i}".encode(), on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(20) == 0
    assert errors == [None] * 5
    consumer = Consumer({**conf, "group.id": unique_name("g"), "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        wait_for(lambda: got.extend(m.value() for m in consumer.consume(5, 0.5) if m.error() is None)
                 or len(got) >= 5, 20, message="5 records")
    finally:
        consumer.close()
    assert sorted(got) == [f"v{i}".encode() for i in range(5)]
    assert _authenticated(secured, "User:ANONYMOUS" if mechanism is None else "User:bob", mechanism)


def test_ssl_client_certificate_principal(secured: BrokerProcess) -> None:
    """ssl.client.auth=requested: a client certificate's DN goes through ssl.principal.mapping.rules
    (CN=client,O=... -> CLIENT); without one the connection is ANONYMOUS (the test above)."""
    producer = Producer({**SECURITY.confluent(secured, "SSL", client_cert=True), "message.timeout.ms": 15000})
    producer.produce(unique_name("sec"), b"x")
    assert producer.flush(20) == 0
    assert _authenticated(secured, "User:CLIENT", None)


def test_share_consumer_over_sasl_ssl(secured: BrokerProcess) -> None:
    topic, group = unique_name("sec"), unique_name("sg")
    create_topic(secured.bootstrap, topic)
    set_earliest(secured.bootstrap, group)
    conf = SECURITY.confluent(secured, "SASL_SSL", "SCRAM-SHA-256", "alice")
    producer = Producer(conf)
    for i in range(10):
        producer.produce(topic, f"s{i}".encode())
    assert producer.flush(20) == 0
    extra = {k: v for k, v in conf.items() if k != "bootstrap.servers"}
    consumer = share_consumer(conf["bootstrap.servers"], group, [topic], **extra)
    try:
        got = poll_until(consumer, lambda got: len(got) >= 10)
    finally:
        consumer.close()
    assert sorted(values(got)) == sorted(f"s{i}".encode() for i in range(10))


@pytest.mark.parametrize(("protocol", "mechanism"), CASES, ids=IDS)
def test_kafka_python_produce_consume(secured: BrokerProcess, protocol: str, mechanism: str | None) -> None:
    topic = unique_name("sec")
    conf = SECURITY.kafka_python(secured, protocol, mechanism, "alice")
    producer = KafkaProducer(request_timeout_ms=10000, **conf)
    try:
        for i in range(3):
            producer.send(topic, f"k{i}".encode()).get(timeout=20)
    finally:
        producer.close()
    consumer = KafkaConsumer(topic, group_id=unique_name("g"), auto_offset_reset="earliest",
                             consumer_timeout_ms=500, **conf)
    got: list[bytes] = []
    try:
        wait_for(lambda: got.extend(m.value for m in consumer) or len(got) >= 3, 30, message="3 records")
    finally:
        consumer.close()
    assert sorted(got) == [b"k0", b"k1", b"k2"]
    assert _authenticated(secured, "User:ANONYMOUS" if mechanism is None else "User:alice", mechanism)


@pytest.mark.parametrize(("protocol", "mechanism"), CASES, ids=IDS)
def test_aiokafka_produce_consume(secured: BrokerProcess, protocol: str, mechanism: str | None) -> None:
    topic = unique_name("sec")
    conf = SECURITY.aiokafka(secured, protocol, mechanism, "bob")

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**conf)
        await producer.start()
        try:
            for i in range(3):
                await producer.send_and_wait(topic, f"a{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, group_id=unique_name("g"), auto_offset_reset="earliest", **conf)
        await consumer.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(30):
                while len(got) < 3:
                    batch = await consumer.getmany(timeout_ms=500)
                    got.extend(m.value for msgs in batch.values() for m in msgs)
        finally:
            await consumer.stop()
        return got

    assert sorted(asyncio.run(run())) == [b"a0", b"a1", b"a2"]
    assert _authenticated(secured, "User:ANONYMOUS" if mechanism is None else "User:bob", mechanism)


def test_scram_users_with_admin_client_survive_restart(make_broker: BrokerFactory) -> None:
    """AlterUserScramCredentials/DescribeUserScramCredentials through confluent-kafka's AdminClient;
    the credential survives a kill -9 (kept in the data directory) and authenticates; its deletion is
    durable too."""
    security = BrokerSecurity(listeners=("SASL_PLAINTEXT",), mechanisms=("SCRAM-SHA-512",), users={})
    broker = make_broker(security=security)
    assert isinstance(broker, BrokerProcess)
    a = admin(broker.bootstrap)
    futures = a.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"carol-secret")])
    for future in futures.values():
        future.result(10)
    described = a.describe_user_scram_credentials(["carol"])["carol"].result(10)
    assert [(c.mechanism, c.iterations) for c in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 8192)]
    broker.kill()
    broker.start()
    conf = {"bootstrap.servers": broker.listener_bootstrap("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "carol", "sasl.password": "carol-secret"}
    producer = Producer({**conf, "message.timeout.ms": 15000})
    producer.produce(unique_name("sec"), b"x")
    assert producer.flush(20) == 0
    a = admin(broker.bootstrap)
    futures = a.alter_user_scram_credentials([UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_512)])
    for future in futures.values():
        future.result(10)
    assert "carol" not in a.describe_user_scram_credentials().result(10)
    broker.kill()
    broker.start()  # the deletion is durable too
    a = admin(broker.bootstrap)
    assert "carol" not in a.describe_user_scram_credentials().result(10)


def test_scram_users_with_configs_command(secured: BrokerProcess) -> None:
    """`sharebroker configs --entity-type users` adds, describes and deletes SCRAM credentials as
    kafka-configs.sh does; the user it adds authenticates."""
    def configs(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sharebroker", "configs", "--bootstrap-server", secured.bootstrap,
                               "--entity-type", "users", *args], capture_output=True, text=True, timeout=60)

    added = configs("--entity-name", "dan", "--alter", "--add-config", "SCRAM-SHA-256=[iterations=8192,password=dan-pw]")
    assert added.returncode == 0 and added.stdout == "Completed updating config for user dan.\n", added
    described = configs("--entity-name", "dan", "--describe")
    assert described.stdout == "SCRAM credential configs for user-principal 'dan' are SCRAM-SHA-256=iterations=8192\n"
    producer = Producer({**SECURITY.confluent(secured, "SASL_SSL", "SCRAM-SHA-256", "dan", "dan-pw"),
                         "message.timeout.ms": 15000})
    producer.produce(unique_name("sec"), b"x")
    assert producer.flush(20) == 0
    deleted = configs("--entity-name", "dan", "--alter", "--delete-config", "SCRAM-SHA-256")
    assert deleted.returncode == 0, deleted
    assert configs("--entity-name", "dan", "--describe").stdout == ""


def test_pkcs12_and_inline_pem_stores(make_broker: BrokerFactory, tmp_path: Any) -> None:
    """Key and trust stores as PKCS12 files (read with `cryptography`) and as PEM text in the
    settings themselves (ssl.keystore.certificate.chain/key on one line, as in a properties file)."""
    base = BrokerSecurity(listeners=("SSL",), client_auth="required")
    base.prepare(tmp_path)
    certs = base.certs
    assert certs is not None
    one_line = " ".join(certs.broker_chain.read_text().split("\n"))
    variants = [
        {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(certs.broker_p12),
         "ssl.keystore.password": "changeit", "ssl.truststore.type": "PKCS12",
         "ssl.truststore.location": str(certs.client_p12), "ssl.truststore.password": "changeit"},
        {"ssl.keystore.location": "", "ssl.keystore.certificate.chain": one_line,
         "ssl.keystore.key": certs.broker_key.read_text(), "ssl.truststore.location": "",
         "ssl.truststore.certificates": certs.ca.read_text()},
    ]
    for index, settings in enumerate(variants):
        security = BrokerSecurity(listeners=("SSL",), client_auth="required", settings=settings, certs=certs)
        broker = make_broker(security=security, name=f"stores-{index}")
        assert isinstance(broker, BrokerProcess)
        producer = Producer({**security.confluent(broker, "SSL", client_cert=True), "message.timeout.ms": 15000})
        producer.produce(unique_name("sec"), b"x")
        assert producer.flush(20) == 0, settings
        assert _authenticated(broker, "User:CN=client,O=sharebroker dev", None)
        broker.kill()


@pytest.fixture
def jwks_server() -> Iterator[tuple[str, Any]]:
    """An identity provider's JWKS endpoint (an RSA key made for the test), over HTTP."""
    import http.server
    import json
    import threading

    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    body = json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/jwks", key
    server.shutdown()


def test_oauthbearer_with_jwks(make_broker: BrokerFactory, jwks_server: tuple[str, Any]) -> None:
    """Kafka's OAuthBearerValidatorCallbackHandler: RS256 JWTs checked against the JWKS endpoint,
    audience and issuer; confluent-kafka's oauth_cb supplies them. Unsigned, wrongly signed, expired
    tokens and a wrong audience are refused with invalid_token."""
    import time

    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa

    from sharebroker.config.security_settings import JWKS_VALIDATOR
    from sharebroker.testing.security import unsecured_jwt
    from tests.integration import rawkafka as rk

    url, key = jwks_server
    security = BrokerSecurity(listeners=("SASL_SSL",), mechanisms=("OAUTHBEARER",), users={}, settings={
        "listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class": JWKS_VALIDATOR,
        "sasl.oauthbearer.jwks.endpoint.url": url, "sasl.oauthbearer.expected.audience": "kafka",
        "sasl.oauthbearer.expected.issuer": "https://idp.example"})
    broker = make_broker(security=security)
    assert isinstance(broker, BrokerProcess)

    def token(signer: Any = key, **claims: Any) -> str:
        body = {"sub": "erin", "aud": "kafka", "iss": "https://idp.example", "exp": time.time() + 3600, **claims}
        return jwt.encode(body, signer, algorithm="RS256", headers={"kid": "k1"})

    assert security.certs is not None
    conf = {"bootstrap.servers": broker.listener_bootstrap("SASL_SSL"), "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(security.certs.ca), "sasl.mechanism": "OAUTHBEARER",
            "oauth_cb": lambda _config: (token(), time.time() + 3600), "message.timeout.ms": 15000}
    producer = Producer(conf)
    producer.produce(unique_name("sec"), b"x")
    assert producer.flush(20) == 0
    assert _authenticated(broker, "User:erin", "OAUTHBEARER")

    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    for bad in (unsecured_jwt("erin"), token(signer=other_key), token(exp=time.time() - 600), token(aud="other")):
        with rk.RawClient(broker.listener_bootstrap("SASL_SSL")) as client:
            client.sock = security.ssl_context().wrap_socket(client.sock, server_hostname="localhost")
            assert client.request(rk.req_cls(17, 1)(mechanism="OAUTHBEARER")).error_code == 0
            first = client.request(rk.req_cls(36, 2)(auth_bytes=f"n,,\x01auth=Bearer {bad}\x01\x01".encode()))
            assert first.auth_bytes == b'{"status":"invalid_token"}'
            assert client.request(rk.req_cls(36, 2)(auth_bytes=b"\x01")).error_code == 58
