"""Kafka's StandardAuthorizer semantics over the ACL store.

A request is allowed for a super user; otherwise a matching DENY (same operation or ALL) refuses
it, a matching ALLOW (the operation, ALL, or one that implies it: READ/WRITE/DELETE/ALTER imply
DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS) allows it, and a resource no ACL mentions at all
follows `allow.everyone.if.no.acl.found`. Principals match exactly or through `User:*`, hosts
exactly or through `*`. The broker has an Authorizer only when `authorizer.class.name` is set, so
with ACLs off a handler's check is one attribute test."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from sharebroker.broker.security.acl_store import (
    CLUSTER_NAME,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclOperation,
    AclPermissionType,
    AclStore,
    PatternType,
    ResourceType,
)
from sharebroker.broker.structured_log import get_logger

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection

log = get_logger("sharebroker.authorizer")


_A = AclOperation
_DECISIONS_KEPT = 100_000
_IMPLIES_DESCRIBE = frozenset((_A.DESCRIBE, _A.READ, _A.WRITE, _A.DELETE, _A.ALTER))
_IMPLIES_DESCRIBE_CONFIGS = frozenset((_A.DESCRIBE_CONFIGS, _A.ALTER_CONFIGS))

# AclEntry.supportedOperations: what authorized_operations reports on, per resource type.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (_A.READ, _A.WRITE, _A.CREATE, _A.DESCRIBE, _A.DELETE, _A.ALTER, _A.DESCRIBE_CONFIGS,
                         _A.ALTER_CONFIGS),
    ResourceType.GROUP: (_A.READ, _A.DESCRIBE, _A.DELETE, _A.DESCRIBE_CONFIGS, _A.ALTER_CONFIGS),
    ResourceType.CLUSTER: (_A.CREATE, _A.CLUSTER_ACTION, _A.DESCRIBE_CONFIGS, _A.ALTER_CONFIGS, _A.IDEMPOTENT_WRITE,
                           _A.ALTER, _A.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (_A.DESCRIBE, _A.WRITE, _A.TWO_PHASE_COMMIT),
    ResourceType.DELEGATION_TOKEN: (_A.DESCRIBE,),
    ResourceType.USER: (_A.CREATE_TOKENS, _A.DESCRIBE_TOKENS),
}


def all_operations_bits(resource_type: ResourceType) -> int:
    """authorized_operations without an authorizer: every supported operation (Kafka's AuthHelper)."""
    bits = 0
    for op in SUPPORTED_OPERATIONS[resource_type]:
        bits |= 1 << op
    return bits


def _verdict(acl: AclBinding, op: AclOperation) -> bool | None:
    """True (allow), False (deny) or None (this ACL says nothing about `op`); principal and host
    already matched."""
    acl_op = acl.operation
    if acl_op is not _A.ALL:
        if acl.permission is AclPermissionType.ALLOW:
            if op is _A.DESCRIBE:
                if acl_op not in _IMPLIES_DESCRIBE:
                    return None
            elif op is _A.DESCRIBE_CONFIGS:
                if acl_op not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif acl_op is not op:
                return None
        elif acl_op is not op:
            return None
    return acl.permission is AclPermissionType.ALLOW


class Authorizer:
    def __init__(self, store: AclStore, *, super_users: Iterable[str], allow_if_no_acl: bool) -> None:
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        # Decisions by (principal, host, operation, resource type, name), dropped whenever the
        # ACLs change: a client repeats the same checks on every request.
        self._decisions: dict[tuple[str, str, AclOperation, ResourceType, str], bool] = {}
        store.on_change.append(self._decisions.clear)

    # -- the checks handlers make ---------------------------------------------------------------

    def allows(self, conn: Connection, op: AclOperation, rtype: ResourceType, name: str, *,
               log_denied: bool = True) -> bool:
        """Whether the connection's principal may do `op` on the named resource (logs a denial)."""
        principal = str(conn.principal)
        if principal in self.super_users:
            return True
        allowed = self.authorize(principal, conn.client_host[1:], op, rtype, name)
        if not allowed and log_denied:
            log.info("authorization denied", principal=principal, host=conn.client_host[1:], operation=op.name,
                     resource_type=rtype.name, resource=name, conn=conn.id)
        return allowed

    def allows_cluster(self, conn: Connection, op: AclOperation, *, log_denied: bool = True) -> bool:
        return self.allows(conn, op, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=log_denied)

    def filter(self, conn: Connection, op: AclOperation, rtype: ResourceType, names: Iterable[str], *,
               log_denied: bool = True) -> set[str]:
        """The names among `names` the principal may do `op` on (each distinct name checked once)."""
        principal = str(conn.principal)
        unique = set(names)
        if principal in self.super_users:
            return unique
        host = conn.client_host[1:]
        allowed = {n for n in unique if self.authorize(principal, host, op, rtype, n)}
        if log_denied and len(allowed) != len(unique):
            log.info("authorization denied", principal=principal, host=host, operation=op.name,
                     resource_type=rtype.name, resources=",".join(sorted(unique - allowed)[:20]), conn=conn.id)
        return allowed

    def operations_bits(self, conn: Connection, rtype: ResourceType, name: str) -> int:
        """authorized_operations of a resource for this connection: a bit per allowed operation."""
        principal = str(conn.principal)
        if principal in self.super_users:
            return all_operations_bits(rtype)
        host = conn.client_host[1:]
        bits = 0
        for op in SUPPORTED_OPERATIONS[rtype]:
            if self.authorize(principal, host, op, rtype, name):
                bits |= 1 << op
        return bits

    # -- the rule -------------------------------------------------------------------------------

    def authorize(self, principal: str, host: str, op: AclOperation, rtype: ResourceType, name: str) -> bool:
        """StandardAuthorizer's decision for a literal resource (super users handled by callers
        that have a connection; checked here too for direct use)."""
        if principal in self.super_users:
            return True
        key = (principal, host, op, rtype, name)
        decision = self._decisions.get(key)
        if decision is None:
            if len(self._decisions) >= _DECISIONS_KEPT:
                self._decisions.clear()
            decision = self._decisions[key] = self._decide(principal, host, op, rtype, name)
        return decision

    def _decide(self, principal: str, host: str, op: AclOperation, rtype: ResourceType, name: str) -> bool:
        index = self.store.index.get(rtype)
        if index is None:
            return self.allow_if_no_acl
        found_any = False
        allowed = False
        for by_principal in index.matching(name):
            found_any = True
            for who in (principal, WILDCARD_PRINCIPAL):
                acls = by_principal.get(who)
                if acls is None:
                    continue
                for acl in acls:
                    if acl.host != WILDCARD and acl.host != host:
                        continue
                    verdict = _verdict(acl, op)
                    if verdict is False:
                        return False
                    if verdict:
                        allowed = True
        if allowed:
            return True
        return not found_any and self.allow_if_no_acl

    def authorize_by_resource_type(self, conn: Connection, op: AclOperation, rtype: ResourceType) -> bool:
        """Kafka's Authorizer.authorizeByResourceType: may the principal do `op` on at least one
        resource of the type (an ALLOW not cancelled by a DENY covering it)."""
        principal = str(conn.principal)
        host = conn.client_host[1:]
        if self.authorize(principal, host, op, rtype, "hardcode"):
            return True
        deny: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        allow: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        index = self.store.index.get(rtype)
        if index is None:
            return False
        for acl in index.all():
            if acl.host not in (host, WILDCARD) or acl.principal not in (principal, WILDCARD_PRINCIPAL):
                continue
            if acl.operation is not op and acl.operation is not _A.ALL:
                continue
            if acl.permission is AclPermissionType.DENY:
                if acl.pattern_type is PatternType.LITERAL and acl.resource_name == WILDCARD:
                    return False
                deny[acl.pattern_type].add(acl.resource_name)
            elif acl.pattern_type is PatternType.LITERAL and acl.resource_name == WILDCARD:
                return True
            else:
                allow[acl.pattern_type].add(acl.resource_name)
        for ptype, names in allow.items():
            for name in names:
                if ptype is PatternType.LITERAL and name in deny[PatternType.LITERAL]:
                    continue
                if not any(name[:i] in deny[PatternType.PREFIXED] for i in range(1, len(name) + 1)):
                    return True
        return False


def parse_super_users(value: Any) -> list[str]:
    """`super.users` is `;`-separated principals (User:alice;User:bob), as in Kafka."""
    if not value:
        return []
    return [p.strip() for p in str(value).split(";") if p.strip()]


__all__ = ["SUPPORTED_OPERATIONS", "Authorizer", "all_operations_bits", "parse_super_users"]
