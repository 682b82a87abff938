"""The StandardAuthorizer rules on the pure ACL store: implied operations, DENY over ALLOW, literal,
wildcard and prefixed patterns, principal and host wildcards, the no-ACL default, filters, and
authorizeByResourceType."""

from __future__ import annotations

from typing import Any

import pytest

from sharebroker.broker.security.acl_store import (
    AclBinding,
    AclFilter,
    AclOperation as Op,
    AclPermissionType as Perm,
    AclStore,
    PatternType as Pat,
    ResourceType as Res,
)
from sharebroker.broker.security.authorizer import Authorizer

ALICE = "User:alice"
HOST = "10.0.0.1"


def binding(rtype: Res, name: str, op: Op, perm: Perm = Perm.ALLOW, pattern: Pat = Pat.LITERAL,
            principal: str = ALICE, host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def authorizer(*acls: AclBinding, allow_if_no_acl: bool = False, super_users: tuple[str, ...] = ()) -> Authorizer:
    saved: list[Any] = []
    store = AclStore([], saved.append)
    store.add(acls)
    return Authorizer(store, super_users=super_users, allow_if_no_acl=allow_if_no_acl)


def allowed(az: Authorizer, op: Op, name: str = "orders", rtype: Res = Res.TOPIC, principal: str = ALICE,
            host: str = HOST) -> bool:
    return az.authorize(principal, host, op, rtype, name)


@pytest.mark.parametrize("granted, asked, expected", [
    (Op.READ, Op.DESCRIBE, True), (Op.WRITE, Op.DESCRIBE, True), (Op.DELETE, Op.DESCRIBE, True),
    (Op.ALTER, Op.DESCRIBE, True), (Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS, True), (Op.ALL, Op.WRITE, True),
    (Op.DESCRIBE, Op.READ, False), (Op.CREATE, Op.DESCRIBE, False), (Op.READ, Op.WRITE, False),
])
def test_implied_operations(granted: Op, asked: Op, expected: bool) -> None:
    assert allowed(authorizer(binding(Res.TOPIC, "orders", granted)), asked) is expected


def test_deny_wins_and_does_not_imply() -> None:
    az = authorizer(binding(Res.TOPIC, "orders", Op.ALL), binding(Res.TOPIC, "ord", Op.WRITE, Perm.DENY, Pat.PREFIXED))
    assert not allowed(az, Op.WRITE)
    assert allowed(az, Op.READ)
    assert allowed(az, Op.DESCRIBE)  # a DENY of WRITE does not deny the DESCRIBE it would imply
    az = authorizer(binding(Res.TOPIC, "orders", Op.READ), binding(Res.TOPIC, "*", Op.ALL, Perm.DENY))
    assert not allowed(az, Op.READ)


def test_patterns_principals_and_hosts() -> None:
    az = authorizer(binding(Res.GROUP, "pay-", Op.READ, pattern=Pat.PREFIXED),
                    binding(Res.TOPIC, "*", Op.READ, principal="User:*", host=HOST))
    assert allowed(az, Op.READ, "pay-eu", Res.GROUP)
    assert not allowed(az, Op.READ, "pa", Res.GROUP)
    assert not allowed(az, Op.READ, "pay-eu", Res.GROUP, principal="User:bob")
    assert allowed(az, Op.READ, "anything", principal="User:bob")
    assert not allowed(az, Op.READ, "anything", host="10.0.0.2")
    # a literal ACL named like a prefix covers only that name
    az = authorizer(binding(Res.TOPIC, "pay-", Op.READ))
    assert not allowed(az, Op.READ, "pay-eu")


def test_no_acl_default_and_super_users() -> None:
    assert not allowed(authorizer(), Op.READ)
    assert allowed(authorizer(allow_if_no_acl=True), Op.READ)
    # any ACL on the resource, whoever it is for, takes the default away
    az = authorizer(binding(Res.TOPIC, "orders", Op.READ, principal="User:bob"), allow_if_no_acl=True)
    assert not allowed(az, Op.READ)
    assert allowed(az, Op.READ, "other")
    assert allowed(authorizer(super_users=(ALICE,)), Op.ALTER, "kafka-cluster", Res.CLUSTER)


def test_filters() -> None:
    prefixed = binding(Res.TOPIC, "pay-", Op.READ, pattern=Pat.PREFIXED)
    literal = binding(Res.TOPIC, "pay-eu", Op.WRITE, Perm.DENY)
    wildcard = binding(Res.TOPIC, "*", Op.DESCRIBE)
    store = AclStore([], lambda rows: None)
    store.add([prefixed, literal, wildcard])
    match = AclFilter(Res.TOPIC, "pay-eu", Pat.MATCH, None, None, Op.ANY, Perm.ANY)
    assert store.acls(match) == [prefixed, literal, wildcard]
    exact = AclFilter(Res.ANY, "pay-", Pat.ANY, None, None, Op.ANY, Perm.ANY)
    assert store.acls(exact) == [prefixed]
    only_deny = AclFilter(Res.ANY, None, Pat.ANY, ALICE, "*", Op.ANY, Perm.DENY)
    assert store.acls(only_deny) == [literal]
    assert store.remove([only_deny, only_deny]) == [[literal], [literal]]
    assert store.acls() == [prefixed, wildcard]


def test_store_round_trips_through_its_rows() -> None:
    saved: list[Any] = []
    store = AclStore([], saved.append)
    acls = [binding(Res.TRANSACTIONAL_ID, "tx-", Op.WRITE, pattern=Pat.PREFIXED), binding(Res.CLUSTER, "kafka-cluster",
                                                                                         Op.ALTER, Perm.DENY)]
    store.add(acls)
    assert AclStore(saved[-1], saved.append).acls() == acls


def test_authorize_by_resource_type() -> None:
    class Conn:
        principal = ALICE
        client_host = f"/{HOST}"
        id = 1

    conn: Any = Conn()
    assert not authorizer().authorize_by_resource_type(conn, Op.WRITE, Res.TOPIC)
    assert authorizer(binding(Res.TOPIC, "orders", Op.WRITE)).authorize_by_resource_type(conn, Op.WRITE, Res.TOPIC)
    denied = authorizer(binding(Res.TOPIC, "orders", Op.WRITE), binding(Res.TOPIC, "ord", Op.WRITE, Perm.DENY,
                                                                          Pat.PREFIXED))
    assert not denied.authorize_by_resource_type(conn, Op.WRITE, Res.TOPIC)
    assert not authorizer(binding(Res.TOPIC, "orders", Op.READ)).authorize_by_resource_type(conn, Op.WRITE, Res.TOPIC)
