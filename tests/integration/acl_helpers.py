"""Helpers of the ACL tests: bindings for User:ANONYMOUS (every PLAINTEXT client), creating and
deleting them with confluent-kafka's AdminClient, and a broker started with ACLs on."""

from __future__ import annotations

import uuid
from pathlib import Path

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from sharebroker.testing import BrokerSecurity
from sharebroker.testing.plugin import Broker, broker_for_tests
from tests.integration import rawkafka as rk
from tests.integration.clients import admin

AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
ME = "User:ANONYMOUS"
TIMEOUT = 15.0
INVALID_REQUEST, TOPIC_AUTHZ, GROUP_AUTHZ, CLUSTER_AUTHZ, TXN_AUTHZ = 42, 29, 30, 31, 53


def acl(rtype: ResourceType, name: str | None, op: AclOperation, perm: AclPermissionType = AclPermissionType.ALLOW,
        pattern: ResourcePatternType = ResourcePatternType.LITERAL, principal: str = ME, host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def create_acls(bootstrap: str, *bindings: AclBinding) -> None:
    a = admin(bootstrap)
    for fut in a.create_acls(list(bindings), request_timeout=10).values():
        fut.result(timeout=TIMEOUT)


def delete_acls(bootstrap: str, *bindings: AclBinding) -> int:
    """Delete exactly these bindings; how many went."""
    a = admin(bootstrap)
    filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                                b.permission_type) for b in bindings]
    return sum(len(fut.result(timeout=TIMEOUT)) for fut in a.delete_acls(filters, request_timeout=10).values())


def describe_all(bootstrap: str) -> set[tuple]:
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    a = admin(bootstrap)  # keep the handle alive until the future resolves
    found = a.describe_acls(everything, request_timeout=10).result(timeout=TIMEOUT)
    return {_key(b) for b in found}


def _key(b: AclBinding) -> tuple:
    return (b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation, b.permission_type)


def admin_acls(*, create: bool = False) -> list[AclBinding]:
    """ALTER on the cluster (the ACL APIs; it implies DESCRIBE), and CREATE (any topic) if asked."""
    return [acl(ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER)] + (
        [acl(ResourceType.BROKER, "kafka-cluster", AclOperation.CREATE)] if create else [])


def start_acl_broker(data: Path, bindings: list[AclBinding], **extra: object) -> Broker:
    """A broker with ACLs on and these ACLs (the plugin's BrokerSecurity sets them up; PLAINTEXT only)."""
    return broker_for_tests(data, extra, security=BrokerSecurity(listeners=(), acls=bindings, authorizer=True))


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def metadata_error(bootstrap: str, topic: str, allow_auto: bool = False) -> int:
    with rk.RawClient(bootstrap) as raw:
        (t,) = raw.request(rk.metadata_request([topic], allow_auto=allow_auto)).topics
        return int(t.error_code)


def all_topic_names(bootstrap: str) -> set[str]:
    with rk.RawClient(bootstrap) as raw:
        return {t.name for t in raw.request(rk.metadata_request(None)).topics}


