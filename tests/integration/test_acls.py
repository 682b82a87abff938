"""ACLs with Kafka's StandardAuthorizer (authorizer.class.name): CreateAcls/DescribeAcls/DeleteAcls
through the PyPI admin clients, validation as Kafka answers it, DENY over ALLOW, prefixed and
wildcard patterns, super users, implied operations, and ACLs that survive a restart and kill -9.

On PLAINTEXT every client is User:ANONYMOUS, as in Kafka, so the tests vary the ACLs granted to it.
The module's broker starts once as a super user to grant ANONYMOUS ALTER on the cluster (what the
ACL APIs need) and CREATE (what topic set-up needs), then runs without super users."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)
from kafka.admin import ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType, KafkaAdminClient
from kafka.admin import ResourcePatternFilter
from kafka.admin import ResourceType as KpResourceType

from sharebroker.testing.plugin import Broker, broker_for_tests
from tests.integration import rawkafka as rk
from tests.integration.acl_helpers import (
    AUTHORIZER,
    CLUSTER_AUTHZ,
    INVALID_REQUEST,
    ME,
    TIMEOUT,
    TOPIC_AUTHZ,
    _key,
    acl,
    admin_acls,
    all_topic_names,
    create_acls,
    delete_acls,
    describe_all,
    metadata_error,
    start_acl_broker,
    unique,
)
from tests.integration.clients import admin, create_topic, produce_sync, producer_conf


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    proc = start_acl_broker(tmp_path_factory.mktemp("acls") / "data", admin_acls(create=True))
    yield proc
    proc.stop()
    assert "Traceback" not in proc.log_text(), proc.log_text()[-4000:]



pytestmark = pytest.mark.needs_own_broker("starts brokers with an authorizer and super users")

# -- the ACL APIs ---------------------------------------------------------------------------------


def test_create_describe_delete_with_both_admin_clients(acl_broker) -> None:
    b = acl_broker.bootstrap
    topic = unique("orders")
    read = acl(ResourceType.TOPIC, topic, AclOperation.READ, principal="User:alice", host="10.0.0.1")
    deny = acl(ResourceType.GROUP, "pay-", AclOperation.ALL, AclPermissionType.DENY, ResourcePatternType.PREFIXED,
               principal="User:bob")
    create_acls(b, read, deny)
    assert {_key(read), _key(deny)} <= describe_all(b)

    # DescribeAcls with a MATCH filter: the ACLs that apply to a named resource (literal and prefixed)
    match = AclBindingFilter(ResourceType.GROUP, "pay-eu", ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    a = admin(b)
    found = a.describe_acls(match, request_timeout=10).result(timeout=TIMEOUT)
    assert [_key(x) for x in found] == [_key(deny)]

    # kafka-python sees the same ACLs
    client = KafkaAdminClient(bootstrap_servers=b, request_timeout_ms=10000)
    try:
        listed, error = client.describe_acls(ACLFilter(
            principal="User:alice", host=None, operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(KpResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL)))
        assert [(a.principal, a.host, a.operation, a.resource_pattern.resource_name) for a in listed] == [
            ("User:alice", "10.0.0.1", ACLOperation.READ, topic)]
    finally:
        client.close()

    assert delete_acls(b, read, deny) == 2
    assert not {_key(read), _key(deny)} & describe_all(b)


def _raw_create(bootstrap: str, *, rtype: int = 2, name: str = "t", pattern: int = 3, principal: str = ME,
                op: int = 3, perm: int = 3) -> tuple[int, str | None]:
    """CreateAcls v3 with one creation, as raw frames (the clients refuse these values themselves)."""
    with rk.RawClient(bootstrap) as raw:
        cls = rk.req_cls(30, 3)
        creation_cls = rk._nested(cls, "creations")
        (result,) = raw.request(cls(creations=(creation_cls(
            resource_type=rtype, resource_name=name, resource_pattern_type=pattern, principal=principal,
            host="*", operation=op, permission_type=perm),))).results
    return int(result.error_code), result.error_message


@pytest.mark.parametrize("fields, message", [
    ({"rtype": 4, "name": "other-cluster", "op": 7}, "The only valid name for the CLUSTER resource is kafka-cluster"),
    ({"name": ""}, "Invalid empty resource name"),
    ({"rtype": 1}, "Invalid resourceType ANY"),
    ({"pattern": 2}, "Invalid patternType MATCH"),
    ({"pattern": 1}, "Invalid patternType ANY"),
    ({"op": 1}, "Invalid operation ANY"),
    ({"perm": 1}, "Invalid permissionType ANY"),
    ({"principal": "alice"}, "Could not parse principal from `alice` (no colon is present separating the principal "
                             "type from the principal name)"),
])
def test_invalid_acls_are_refused_as_kafka_refuses_them(acl_broker, fields: dict, message: str) -> None:
    assert _raw_create(acl_broker.bootstrap, **fields) == (INVALID_REQUEST, message)


def test_acl_apis_need_cluster_alter_and_describe(tmp_path: Path) -> None:
    proc = broker_for_tests(tmp_path / "data", AUTHORIZER)  # no ACLs, no super users
    try:
        a = admin(proc.bootstrap)
        (fut,) = a.create_acls([acl(ResourceType.TOPIC, "t", AclOperation.READ)], request_timeout=10).values()
        with pytest.raises(KafkaException) as info:
            fut.result(timeout=TIMEOUT)
        assert info.value.args[0].code() == CLUSTER_AUTHZ
        with rk.RawClient(proc.bootstrap) as raw:
            resp = raw.request(rk.req_cls(29, 3)(resource_type_filter=1, resource_name_filter=None,
                                                 pattern_type_filter=1, principal_filter=None, host_filter=None,
                                                 operation=1, permission_type=1))
        assert (int(resp.error_code), resp.resources) == (CLUSTER_AUTHZ, ())
    finally:
        proc.stop()


def _alter_scram(raw: rk.RawClient, user: str):
    cls = rk.req_cls(51, 0)
    upsert = rk._nested(cls, "upsertions")
    return raw.request(cls(deletions=(), upsertions=(upsert(name=user, mechanism=1, iterations=4096, salt=b"s" * 16,
                                                             salted_password=b"p" * 32),)))


def _update_share_version(raw: rk.RawClient, level: int):
    cls = rk.req_cls(57, 1)
    key = rk._nested(cls, "feature_updates")
    return raw.request(cls(timeout=datetime.timedelta(seconds=10), validate_only=True,
                           feature_updates=(key(feature="share.version", max_version_level=level, upgrade_type=1),)))


def test_scram_users_and_features_need_cluster_alter(tmp_path: Path) -> None:
    """AlterUserScramCredentials and UpdateFeatures, as Kafka: ALTER on the cluster, else
    CLUSTER_AUTHORIZATION_FAILED (for each user of the former, at the top of the latter)."""
    proc = broker_for_tests(tmp_path / "data", AUTHORIZER)  # no ACLs, no super users
    try:
        with rk.RawClient(proc.bootstrap) as raw:
            resp = _alter_scram(raw, "alice")
            assert [(r.user, int(r.error_code)) for r in resp.results] == [("alice", CLUSTER_AUTHZ)]
            assert int(_update_share_version(raw, 2).error_code) == CLUSTER_AUTHZ
    finally:
        proc.stop()
    proc = start_acl_broker(tmp_path / "data", admin_acls())
    try:
        with rk.RawClient(proc.bootstrap) as raw:
            assert [(r.user, int(r.error_code)) for r in _alter_scram(raw, "alice").results] == [("alice", 0)]
            assert int(_update_share_version(raw, 2).error_code) == 0
    finally:
        proc.stop()


# -- authorization rules --------------------------------------------------------------------------


def test_deny_beats_allow(acl_broker) -> None:
    b = acl_broker.bootstrap
    topic = unique("deny")
    create_topic(b, topic)
    allow = acl(ResourceType.TOPIC, topic, AclOperation.DESCRIBE)
    assert metadata_error(b, topic) == TOPIC_AUTHZ
    create_acls(b, allow)
    assert metadata_error(b, topic) == 0
    # a DENY on a prefix covering the topic, for every host, outweighs the literal ALLOW
    deny = acl(ResourceType.TOPIC, topic[:6], AclOperation.DESCRIBE, AclPermissionType.DENY,
               ResourcePatternType.PREFIXED)
    create_acls(b, deny)
    assert metadata_error(b, topic) == TOPIC_AUTHZ
    assert topic not in all_topic_names(b)
    delete_acls(b, deny)
    assert metadata_error(b, topic) == 0


def test_prefixed_and_wildcard_patterns_and_implied_describe(acl_broker) -> None:
    b = acl_broker.bootstrap
    prefix = unique("pfx")
    inside, outside = f"{prefix}.a", unique("other")
    for t in (inside, outside):
        create_topic(b, t)
    # WRITE implies DESCRIBE; a PREFIXED ACL covers topics starting with the prefix only
    create_acls(b, acl(ResourceType.TOPIC, prefix, AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED))
    assert metadata_error(b, inside) == 0
    assert metadata_error(b, outside) == TOPIC_AUTHZ
    names = all_topic_names(b)
    assert inside in names and outside not in names
    # a host that is not the client's does not match
    create_acls(b, acl(ResourceType.TOPIC, outside, AclOperation.DESCRIBE, host="10.9.9.9"))
    assert metadata_error(b, outside) == TOPIC_AUTHZ
    # the literal `*` matches every topic; User:* every principal
    wildcard = acl(ResourceType.TOPIC, "*", AclOperation.DESCRIBE, principal="User:*")
    create_acls(b, wildcard)
    assert metadata_error(b, outside) == 0
    delete_acls(b, wildcard)
    assert metadata_error(b, outside) == TOPIC_AUTHZ


def test_super_users_and_allow_everyone_if_no_acl_found(tmp_path: Path) -> None:
    proc = broker_for_tests(tmp_path / "su", {**AUTHORIZER, "super.users": f"User:admin;{ME}"})
    try:
        topic = unique("su")
        create_topic(proc.bootstrap, topic)  # no ACLs at all: a super user may still do anything
        produce_sync(Producer(producer_conf(proc.bootstrap)), topic, [{"value": b"x"}])
    finally:
        proc.stop()
    proc = broker_for_tests(tmp_path / "open", {**AUTHORIZER, "allow.everyone.if.no.acl.found": "true"})
    try:
        topic = unique("open")
        create_topic(proc.bootstrap, topic)
        assert metadata_error(proc.bootstrap, topic) == 0
        # an ACL on the resource, for someone else, takes the "no ACL found" default away
        create_acls(proc.bootstrap, acl(ResourceType.TOPIC, topic, AclOperation.READ, principal="User:alice"))
        assert metadata_error(proc.bootstrap, topic) == TOPIC_AUTHZ
    finally:
        proc.stop()


def test_acls_survive_restart_and_kill_9(make_broker) -> None:
    proc = make_broker(AUTHORIZER, name="data", **{"super.users": ME})
    b = proc.bootstrap
    bindings = [acl(ResourceType.TOPIC, f"durable-{i}", AclOperation.READ, principal=f"User:u{i}")
                for i in range(20)]
    create_acls(b, *bindings)
    proc.kill()  # SIGKILL right after the answer: it was fsynced before the answer went out
    proc.start()
    assert {_key(x) for x in bindings} <= describe_all(proc.bootstrap)
    delete_acls(proc.bootstrap, *bindings[:5])
    proc.kill()
    proc.start()
    left = describe_all(proc.bootstrap)
    assert not {_key(x) for x in bindings[:5]} & left
    assert {_key(x) for x in bindings[5:]} <= left


def test_acl_authorizer_of_zookeeper_days_is_refused_at_start(tmp_path: Path) -> None:
    from sharebroker.config import BrokerConfig, ConfigError

    with pytest.raises(ConfigError, match="AclAuthorizer was removed with ZooKeeper"):
        BrokerConfig.load(env={}, overrides={"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                                             "log.dirs": str(tmp_path)})


def test_idempotent_producer_needs_idempotent_write_or_write_on_some_topic(tmp_path: Path) -> None:
    proc = start_acl_broker(tmp_path / "data", admin_acls(create=True))
    b = proc.bootstrap
    try:
        def init_producer_id() -> int:
            with rk.RawClient(b) as raw:
                return int(raw.request(rk.init_producer_id_request()).error_code)

        assert init_producer_id() == CLUSTER_AUTHZ
        write = acl(ResourceType.TOPIC, "events-", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED)
        create_acls(b, write)
        assert init_producer_id() == 0  # WRITE on some topic is enough (Kafka 3+)
        deny = acl(ResourceType.TOPIC, "ev", AclOperation.WRITE, AclPermissionType.DENY, ResourcePatternType.PREFIXED)
        create_acls(b, deny)
        assert init_producer_id() == CLUSTER_AUTHZ  # that ALLOW is cancelled by a DENY covering it
        create_acls(b, acl(ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE))
        assert init_producer_id() == 0
        # a real idempotent producer
        create_acls(b, acl(ResourceType.TOPIC, "idem", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED))
        topic = unique("idem")
        create_topic(b, topic)
        produce_sync(Producer(producer_conf(b, **{"enable.idempotence": True})), topic, [{"value": b"once"}])
    finally:
        proc.stop()
