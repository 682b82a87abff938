"""ACLs over authenticated listeners: SASL users and certificate principals authorized as Kafka's
StandardAuthorizer authorizes them. A broker with SSL (client certificates requested) and SASL_SSL
listeners, users alice, bob and admin (PLAIN and SCRAM), `super.users=User:admin` and ACLs set up by
the pytest plugin's `BrokerSecurity(acls=..., super_users=...)`: alice may read and write one topic
and read a consumer group and a share group, bob has no ACL at all. Real clients throughout
(confluent-kafka Producer, Consumer, ShareConsumer, AdminClient; kafka-python; aiokafka), and the
`sharebroker acls` / `sharebroker configs` tools with `--command-config` as Kafka's tools take it.
Also: a quota on user alice throttles alice (authenticated with SASL) and not bob."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaProducer
from kafka.errors import TopicAuthorizationFailedError

from sharebroker.testing import Acl, BrokerProcess, BrokerSecurity, unique_name, wait_for
from sharebroker.testing.plugin import BrokerFactory, broker_for_tests
from tests.integration.share_helpers import FAST_SHARE_BROKER, poll_until, share_consumer

pytestmark = [pytest.mark.needs_own_broker("starts a broker with ACLs and SASL/TLS listeners"),
              pytest.mark.timeout(180)]

TOPIC_AUTHZ, GROUP_AUTHZ, SASL_AUTH_FAILED = 29, 30, 58
TIMEOUT = 20.0

TOPIC = unique_name("orders")           # alice: READ, WRITE
GROUP = unique_name("workers")          # alice: READ (a consumer group)
SHARE_GROUP = unique_name("queue")      # alice: READ (a share group)
DENIED = unique_name("audit")           # alice: ALLOW WRITE from anywhere, DENY WRITE from 127.0.0.1
DENIED_ELSEWHERE = unique_name("ledger")  # alice: ALLOW WRITE from anywhere, DENY WRITE from 10.99.0.1
PREFIX = unique_name("alice") + "-"     # alice: WRITE on every topic starting with it (PREFIXED)
CERT_TOPIC = unique_name("certs")       # User:CLIENT (the mapped client certificate): WRITE
OTHER = unique_name("other")            # nobody

SECURITY = BrokerSecurity(
    listeners=("SSL", "SASL_SSL"), mechanisms=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
    users={"alice": "alice-secret", "bob": "bob-secret", "admin": "admin-secret"}, client_auth="requested",
    settings={"ssl.principal.mapping.rules": "RULE:^CN=([a-z]+),O=.*$/$1/U,DEFAULT"},
    super_users=["User:admin"],
    acls=[Acl("User:alice", "READ", "TOPIC", TOPIC), Acl("User:alice", "WRITE", "TOPIC", TOPIC),
          Acl("User:alice", "READ", "GROUP", GROUP), Acl("User:alice", "READ", "GROUP", SHARE_GROUP),
          Acl("User:alice", "WRITE", "TOPIC", DENIED),
          Acl("User:alice", "WRITE", "TOPIC", DENIED, permission="DENY", host="127.0.0.1"),
          Acl("User:alice", "WRITE", "TOPIC", DENIED_ELSEWHERE),
          Acl("User:alice", "WRITE", "TOPIC", DENIED_ELSEWHERE, permission="DENY", host="10.99.0.1"),
          Acl("User:alice", "WRITE", "TOPIC", PREFIX, pattern_type="PREFIXED"),
          Acl("User:CLIENT", "WRITE", "TOPIC", CERT_TOPIC)])


def conf(broker: BrokerProcess, user: str, mechanism: str = "SCRAM-SHA-256", **extra: Any) -> dict[str, Any]:
    return {**SECURITY.confluent(broker, "SASL_SSL", mechanism, user), "socket.timeout.ms": 5000, "log_level": 3,
            **extra}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = broker_for_tests(tmp_path_factory.mktemp("security-acls") / "data", FAST_SHARE_BROKER, security=SECURITY)
    assert isinstance(proc, BrokerProcess)
    # the super user sets up the topics and the share group's start offset, over SASL_SSL
    admin = AdminClient(conf(proc, "admin"))
    topics = [TOPIC, DENIED, DENIED_ELSEWHERE, PREFIX + "a", CERT_TOPIC, OTHER]
    for fut in admin.create_topics([NewTopic(t, 1, 1) for t in topics], request_timeout=10).values():
        fut.result(timeout=TIMEOUT)
    resource = ConfigResource(ResourceType.GROUP, SHARE_GROUP, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for fut in admin.incremental_alter_configs([resource], request_timeout=10).values():
        fut.result(timeout=TIMEOUT)
    yield proc
    proc.stop()
    assert "Traceback" not in proc.log_text(), proc.log_text()[-4000:]


def produce(config: dict[str, Any], topic: str, values: list[bytes]) -> list[Any]:
    """Deliver the values; each delivery's error (None when delivered)."""
    producer = Producer({**config, "message.timeout.ms": 15000, "linger.ms": 0})
    errors: list[Any] = []
    for v in values:
        producer.produce(topic, v, on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(TIMEOUT) == 0
    return errors


def error_codes(errors: list[Any]) -> list[int | None]:
    return [None if e is None else e.code() for e in errors]


def consumer_errors_until(consumer: Consumer, code: int) -> set[int]:
    """Poll until `code` is reported; every error seen. Any record fails the test."""
    seen: set[int] = set()
    deadline = time.monotonic() + TIMEOUT
    while code not in seen:
        assert time.monotonic() < deadline, f"no error {code} reported, saw {seen}"
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        assert msg.error() is not None, f"a record came through: {msg.value()!r}"
        seen.add(msg.error().code())
    return seen


def denials(broker: BrokerProcess, principal: str, resource: str) -> list[dict[str, Any]]:
    return [e for e in broker.log_events("authorization denied")
            if e.get("principal") == principal and resource in str(e.get("resource") or e.get("resources"))]


# -- alice, granted, and bob, not ---------------------------------------------------------------------


def test_alice_produces_consumes_and_share_consumes(broker: BrokerProcess) -> None:
    values = [f"a{i}".encode() for i in range(5)]
    assert produce(conf(broker, "alice"), TOPIC, values) == [None] * 5
    consumer = Consumer(conf(broker, "alice", "SCRAM-SHA-512", **{"group.id": GROUP, "auto.offset.reset": "earliest",
                                                                  "enable.auto.commit": False}))
    consumer.subscribe([TOPIC])
    got: list[bytes] = []
    try:
        wait_for(lambda: got.extend(m.value() for m in consumer.consume(5, 0.3) if m.error() is None)
                 or len(got) >= 5, TIMEOUT, message="alice's records")
    finally:
        consumer.close()
    assert sorted(got) == values
    extra = {k: v for k, v in conf(broker, "alice", "PLAIN").items() if k != "bootstrap.servers"}
    share = share_consumer(broker.listener_bootstrap("SASL_SSL"), SHARE_GROUP, [TOPIC], **extra)
    try:
        shared = poll_until(share, lambda got: len(got) >= 5, timeout=TIMEOUT)
    finally:
        share.close()
    assert sorted(m.value() for m in shared) == values
    succeeded = {(e["principal"], e["mechanism"]) for e in broker.log_events("SASL authentication succeeded")}
    assert {("User:alice", "SCRAM-SHA-256"), ("User:alice", "SCRAM-SHA-512"), ("User:alice", "PLAIN")} <= succeeded


def test_aiokafka_consumer_as_alice(broker: BrokerProcess) -> None:
    produce(conf(broker, "alice"), TOPIC, [b"for-aiokafka"])

    async def run() -> list[bytes]:
        consumer = AIOKafkaConsumer(TOPIC, group_id=GROUP, auto_offset_reset="earliest", enable_auto_commit=False,
                                    **SECURITY.aiokafka(broker, "SASL_SSL", "SCRAM-SHA-512", "alice"))
        await consumer.start()
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + TIMEOUT
            while b"for-aiokafka" not in got:
                assert time.monotonic() < deadline, got
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got.extend(r.value for r in records)
        finally:
            await consumer.stop()
        return got

    assert b"for-aiokafka" in asyncio.run(run())


def test_bob_gets_authorization_errors_and_no_data(broker: BrokerProcess) -> None:
    """Bob authenticates (SaslHandshake and SaslAuthenticate are never authorized) and is refused
    everything: TOPIC_AUTHORIZATION_FAILED producing, GROUP_AUTHORIZATION_FAILED in his consumer
    and share consumer, no record."""
    assert error_codes(produce(conf(broker, "bob"), TOPIC, [b"bob"])) == [TOPIC_AUTHZ]
    consumer = Consumer(conf(broker, "bob", **{"group.id": GROUP, "auto.offset.reset": "earliest"}))
    consumer.subscribe([TOPIC])
    try:
        assert GROUP_AUTHZ in consumer_errors_until(consumer, GROUP_AUTHZ)
    finally:
        consumer.close()
    extra = {k: v for k, v in conf(broker, "bob").items() if k != "bootstrap.servers"}
    share = share_consumer(broker.listener_bootstrap("SASL_SSL"), SHARE_GROUP, [TOPIC], **extra)
    try:
        deadline = time.monotonic() + TIMEOUT
        code = None
        while code is None:
            assert time.monotonic() < deadline, "no error for bob's share consumer"
            try:
                batch = share.poll(0.3)
            except KafkaException as exc:  # a fatal group error is raised by poll
                code = exc.args[0].code()
                break
            for m in batch:
                assert m.error() is not None, f"a record came through: {m.value()!r}"
                code = m.error().code()
        assert code == GROUP_AUTHZ
    finally:
        share.close()
    # as Kafka: the principal is User:bob and the host the client's IP address
    assert all(e["host"] == "127.0.0.1" for e in denials(broker, "User:bob", TOPIC))
    assert denials(broker, "User:bob", TOPIC) and denials(broker, "User:bob", GROUP)


def test_kafka_python_producer_as_bob_is_refused(broker: BrokerProcess) -> None:
    producer = KafkaProducer(max_block_ms=10000, **SECURITY.kafka_python(broker, "SASL_SSL", "SCRAM-SHA-256", "bob"))
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(TOPIC, b"bob").get(timeout=TIMEOUT)
    finally:
        producer.close(timeout=5)


# -- the rules with SASL principals and hosts --------------------------------------------------------


def test_deny_from_her_host_beats_her_allow(broker: BrokerProcess) -> None:
    """Hosts match the client's IP address: a DENY from 127.0.0.1 (where she connects from) beats
    her ALLOW from *, a DENY from another address leaves it standing."""
    assert error_codes(produce(conf(broker, "alice"), DENIED, [b"x"])) == [TOPIC_AUTHZ]
    assert produce(conf(broker, "alice"), DENIED_ELSEWHERE, [b"x"]) == [None]
    assert [e["host"] for e in denials(broker, "User:alice", DENIED)][:1] == ["127.0.0.1"]


def test_prefixed_acl_for_a_user_principal(broker: BrokerProcess) -> None:
    assert produce(conf(broker, "alice"), PREFIX + "a", [b"p"]) == [None]
    assert error_codes(produce(conf(broker, "alice"), OTHER, [b"p"])) == [TOPIC_AUTHZ]


def test_client_certificate_principal_is_authorized_by_its_mapped_name(broker: BrokerProcess) -> None:
    """ssl.principal.mapping.rules maps CN=client,O=... to CLIENT; ACLs for User:CLIENT apply to it,
    and a TLS client without a certificate is User:ANONYMOUS, which has none."""
    with_cert = {**SECURITY.confluent(broker, "SSL", client_cert=True), "log_level": 3}
    assert produce(with_cert, CERT_TOPIC, [b"c"]) == [None]
    without = {**SECURITY.confluent(broker, "SSL"), "log_level": 3}
    assert error_codes(produce(without, CERT_TOPIC, [b"c"])) == [TOPIC_AUTHZ]
    assert denials(broker, "User:ANONYMOUS", CERT_TOPIC)


def test_acls_name_sasl_principals_as_kafka_does(broker: BrokerProcess) -> None:
    """DescribeAcls shows User:alice, the name the SASL exchange gave; an ACL for the same name in
    another case is another principal (Kafka compares principals exactly)."""
    admin = AdminClient(conf(broker, "admin"))
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice", None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    found = admin.describe_acls(everything, request_timeout=10).result(timeout=TIMEOUT)
    assert {(b.name, b.operation) for b in found if b.restype == ResourceType.TOPIC and b.name == TOPIC} == {
        (TOPIC, AclOperation.READ), (TOPIC, AclOperation.WRITE)}
    assert all(b.principal == "User:alice" for b in found)
    from confluent_kafka.admin import AclBinding
    upper = AclBinding(ResourceType.TOPIC, OTHER, ResourcePatternType.LITERAL, "User:ALICE", "*", AclOperation.WRITE,
                       AclPermissionType.ALLOW)
    for fut in admin.create_acls([upper], request_timeout=10).values():
        fut.result(timeout=TIMEOUT)
    assert error_codes(produce(conf(broker, "alice"), OTHER, [b"case"])) == [TOPIC_AUTHZ]


# -- the tools over SASL_SSL -------------------------------------------------------------------------


def tool(broker: BrokerProcess, tmp_path: Path, user: str, password: str | None, *args: str,
         mechanism: str = "SCRAM-SHA-512") -> subprocess.CompletedProcess[str]:
    props = SECURITY.properties(broker, "SASL_SSL", mechanism, user, password)
    config = tmp_path / f"{user}-{mechanism}.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items() if k != "bootstrap.servers"))
    return subprocess.run([sys.executable, "-m", "sharebroker", args[0], "--bootstrap-server",
                           props["bootstrap.servers"], "--command-config", str(config), *args[1:]],
                          capture_output=True, text=True, timeout=60)


def test_acls_and_configs_tools_with_command_config(broker: BrokerProcess, tmp_path: Path) -> None:
    listed = tool(broker, tmp_path, "admin", None, "acls", "--list", "--topic", TOPIC)
    assert listed.returncode == 0, listed
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in listed.stdout
    # the admin grants bob WRITE with the tool (PLAIN this time); bob's producer then delivers
    granted = tool(broker, tmp_path, "admin", None, "acls", "--add", "--allow-principal", "User:bob",
                   "--operation", "Write", "--topic", PREFIX + "a", mechanism="PLAIN")
    assert granted.returncode == 0, granted
    assert produce(conf(broker, "bob"), PREFIX + "a", [b"bob"]) == [None]
    # bob may not list ACLs (DESCRIBE on the cluster) nor read SCRAM users
    refused = tool(broker, tmp_path, "bob", None, "acls", "--list")
    assert refused.returncode == 1 and "ClusterAuthorizationException" in refused.stderr, refused
    refused = tool(broker, tmp_path, "bob", None, "configs", "--entity-type", "users", "--describe")
    assert refused.returncode == 1 and "Cluster authorization failed" in refused.stderr, refused
    users = tool(broker, tmp_path, "admin", None, "configs", "--entity-type", "users", "--entity-name", "alice",
                 "--describe")
    assert users.returncode == 0, users
    assert users.stdout == ("SCRAM credential configs for user-principal 'alice' are "
                            "SCRAM-SHA-256=iterations=4096, SCRAM-SHA-512=iterations=4096\n")
    # records through the console tools, as alice; bob's produce is refused
    produce(conf(broker, "alice"), TOPIC, [b"for-the-tool"])
    consumed = tool(broker, tmp_path, "alice", None, "consume", "--topic", TOPIC, "--group", GROUP,
                    "--from-beginning", "--max-messages", "1", "--timeout-ms", "15000")
    assert consumed.returncode == 0 and consumed.stdout.count("\n") == 1, consumed
    produced = subprocess.run([sys.executable, "-m", "sharebroker", "produce", "--bootstrap-server",
                               broker.listener_bootstrap("SASL_SSL"), "--command-config",
                               str(tmp_path / "bob-SCRAM-SHA-512.properties"), "--topic", TOPIC],
                              input="bob\n", capture_output=True, text=True, timeout=60)
    assert produced.returncode != 0 and "authorization failed" in produced.stderr.lower(), produced
    started = time.monotonic()
    wrong = tool(broker, tmp_path, "admin", "not-the-password", "acls", "--list")
    assert wrong.returncode == 1 and "Authentication failed" in wrong.stderr, wrong
    assert time.monotonic() - started < 15  # refused at once, not retried until the timeout


# -- quotas for a SASL user ----------------------------------------------------------------------------


def test_user_quota_throttles_alice_not_bob(make_broker: BrokerFactory, tmp_path: Path) -> None:
    """A producer_byte_rate quota on the `user` entity alice applies to the SASL user alice (as Kafka's
    quota managers key it by the principal's name), and not to bob."""
    security = BrokerSecurity(listeners=("SASL_PLAINTEXT",), mechanisms=("SCRAM-SHA-256",),
                              users={"alice": "alice-secret", "bob": "bob-secret"})
    b = make_broker({"quota.window.num": "2", "quota.window.size.seconds": "1"}, security=security)
    assert isinstance(b, BrokerProcess)
    set_quota = subprocess.run([sys.executable, "-m", "sharebroker", "configs", "--bootstrap-server", b.bootstrap,
                                "--entity-type", "users", "--entity-name", "alice", "--alter", "--add-config",
                                "producer_byte_rate=10000"], capture_output=True, text=True, timeout=60)
    assert set_quota.returncode == 0, set_quota
    topic = unique_name("quota")

    def throttles_of(user: str) -> list[int]:
        throttles: list[int] = []
        producer = Producer({**security.confluent(b, "SASL_PLAINTEXT", "SCRAM-SHA-256", user), "linger.ms": 0,
                             "log_level": 3, "throttle_cb": lambda e: throttles.append(int(e.throttle_time * 1000))})
        for _ in range(8):
            producer.produce(topic, b"y" * 20_000)
            producer.poll(0)
        assert producer.flush(30) == 0
        producer.poll(0.5)  # callbacks of the last responses
        return throttles

    assert max(throttles_of("alice"), default=0) > 0
    assert throttles_of("bob") == []
    assert {"User:alice", "User:bob"} <= {e["principal"] for e in b.log_events("SASL authentication succeeded")}
