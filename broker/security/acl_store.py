"""ACL bindings and their durable store, with Kafka's codes, validation and filter matching.

The store keeps the bindings indexed for the authorizer: per resource type, literal names in a
dict and prefixed names in a dict keyed by prefix plus the set of prefix lengths present, so a
check costs a few dict lookups whatever the number of ACLs. Every change is written to the
metadata file (write, fsync, rename) before the in-memory view changes."""

from __future__ import annotations

import enum
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from sharebroker.protocol.errors import KafkaError

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def _enum(cls: type[enum.IntEnum], code: int) -> Any:
    """Kafka's fromCode: a code it does not know is UNKNOWN."""
    try:
        return cls(code)
    except ValueError:
        return cls(0)


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def to_json(self) -> list[Any]:
        return [self.resource_type.name, self.resource_name, self.pattern_type.name, self.principal, self.host,
                self.operation.name, self.permission.name]

    @classmethod
    def from_json(cls, row: list[Any]) -> AclBinding:
        rtype, name, ptype, principal, host, op, perm = row
        return cls(ResourceType[rtype], str(name), PatternType[ptype], str(principal), str(host),
                   AclOperation[op], AclPermissionType[perm])

    @classmethod
    def from_wire(cls, creation: Any) -> AclBinding:
        return cls(_enum(ResourceType, creation.resource_type), creation.resource_name,
                   _enum(PatternType, creation.resource_pattern_type), creation.principal, creation.host,
                   _enum(AclOperation, creation.operation), _enum(AclPermissionType, creation.permission_type))


def validate_new_acl(acl: AclBinding) -> None:
    """Kafka's checks of a CreateAcls entry (AclApis, then the controller's validateNewAcl), each an
    INVALID_REQUEST with Kafka's message."""
    def invalid(message: str) -> KafkaError:
        return KafkaError(ErrorCode.invalid_request, message)

    if acl.resource_type is ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        raise invalid(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if acl.resource_name == "":
        raise invalid("Invalid empty resource name")
    if acl.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise invalid(f"Invalid resourceType {acl.resource_type.name}")
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise invalid(f"Invalid patternType {acl.pattern_type.name}")
    if acl.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise invalid(f"Invalid operation {acl.operation.name}")
    if acl.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise invalid(f"Invalid permissionType {acl.permission.name}")
    if ":" not in acl.principal:
        raise invalid(f"Could not parse principal from `{acl.principal}` (no colon is present separating the "
                      "principal type from the principal name)")


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Kafka's AclBindingFilter: None matches any name, principal or host; ANY any enum value;
    MATCH patterns select the ACLs that would apply to the named resource."""

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: AclPermissionType

    @classmethod
    def from_wire(cls, f: Any) -> AclFilter:
        return cls(_enum(ResourceType, f.resource_type_filter), f.resource_name_filter,
                   _enum(PatternType, f.pattern_type_filter), f.principal_filter, f.host_filter,
                   _enum(AclOperation, f.operation), _enum(AclPermissionType, f.permission_type))

    def validate(self) -> None:
        if ResourceType.UNKNOWN == self.resource_type or PatternType.UNKNOWN == self.pattern_type:
            raise KafkaError(ErrorCode.invalid_request, "Unknown patternFilter.")
        if AclOperation.UNKNOWN == self.operation or AclPermissionType.UNKNOWN == self.permission:
            raise KafkaError(ErrorCode.invalid_request, "Unknown entryFilter.")

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type is not acl.resource_type:
            return False
        ptype = self.pattern_type
        if ptype not in (PatternType.ANY, PatternType.MATCH) and ptype is not acl.pattern_type:
            return False
        if self.resource_name is not None:
            if ptype is PatternType.ANY or ptype is acl.pattern_type:
                if self.resource_name != acl.resource_name:
                    return False
            elif acl.pattern_type is PatternType.LITERAL:
                if acl.resource_name not in (self.resource_name, WILDCARD):
                    return False
            elif not self.resource_name.startswith(acl.resource_name):
                return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation is not AclOperation.ANY and self.operation is not acl.operation:
            return False
        return self.permission is AclPermissionType.ANY or self.permission is acl.permission


class _TypeIndex:
    """The ACLs of one resource type, by literal name and by prefix, each by principal: a check
    costs a few dict lookups per pattern that covers the name, however many ACLs there are."""

    __slots__ = ("literal", "prefixed", "prefixes")

    def __init__(self) -> None:
        self.literal: dict[str, dict[str, list[AclBinding]]] = {}
        self.prefixed: dict[str, dict[str, list[AclBinding]]] = {}
        self.prefixes: list[str] = []  # the prefixed names, sorted

    def add(self, acl: AclBinding) -> None:
        table = self.literal if acl.pattern_type is PatternType.LITERAL else self.prefixed
        table.setdefault(acl.resource_name, {}).setdefault(acl.principal, []).append(acl)

    def reindex(self) -> None:
        self.prefixes = sorted(self.prefixed)

    def matching(self, name: str) -> Iterator[dict[str, list[AclBinding]]]:
        """The ACLs (by principal) of every pattern that covers `name`: the literal name, the
        literal `*`, and each prefix of it."""
        literal = self.literal
        found = literal.get(name)
        if found:
            yield found
        if name != WILDCARD:
            found = literal.get(WILDCARD)
            if found:
                yield found
        prefixes = self.prefixes
        # Walk down the sorted prefixes from `name`: an entry that is a prefix of it matches; one
        # that is not shares some leading characters with it, and only prefixes of those can
        # still match, so bisect straight to them (a few steps per match, whatever the count).
        hi = bisect_right(prefixes, name)
        while hi:
            candidate = prefixes[hi - 1]
            if name.startswith(candidate):
                yield self.prefixed[candidate]
                hi = bisect_right(prefixes, candidate[:-1], 0, hi - 1)
            else:
                common = 0
                for a, b in zip(name, candidate):
                    if a != b:
                        break
                    common += 1
                hi = bisect_right(prefixes, name[:common], 0, hi - 1)

    def all(self) -> Iterator[AclBinding]:
        for table in (self.literal, self.prefixed):
            for by_principal in table.values():
                for acls in by_principal.values():
                    yield from acls


class AclStore:
    """Every ACL binding, durable through `persist(rows)`, indexed for matching."""

    def __init__(self, rows: Iterable[list[Any]], persist: Callable[[list[list[Any]]], None]) -> None:
        self._persist = persist
        self._acls: dict[AclBinding, None] = {}  # insertion-ordered set
        for row in rows:
            self._acls[AclBinding.from_json(row)] = None
        self.index: dict[ResourceType, _TypeIndex] = {}
        self.on_change: list[Callable[[], None]] = []  # after every change (the authorizer's cache)
        self._reindex()

    def __len__(self) -> int:
        return len(self._acls)

    def _reindex(self) -> None:
        index: dict[ResourceType, _TypeIndex] = {}
        for acl in self._acls:
            index.setdefault(acl.resource_type, _TypeIndex()).add(acl)
        for entry in index.values():
            entry.reindex()
        self.index = index

    def _commit(self, acls: dict[AclBinding, None]) -> None:
        self._persist([acl.to_json() for acl in acls])
        self._acls = acls
        self._reindex()
        for callback in self.on_change:
            callback()

    def acls(self, flt: AclFilter | None = None) -> list[AclBinding]:
        return [acl for acl in self._acls if flt is None or flt.matches(acl)]

    def add(self, bindings: Iterable[AclBinding]) -> None:
        acls = dict(self._acls)
        for acl in bindings:
            acls[acl] = None
        if len(acls) != len(self._acls):
            self._commit(acls)

    def remove(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        """Delete what each filter matches; per filter, the bindings it deleted (an ACL matched by
        two filters is reported by both, as Kafka does)."""
        matched = [[acl for acl in self._acls if f.matches(acl)] for f in filters]
        gone = {acl for group in matched for acl in group}
        if gone:
            self._commit({acl: None for acl in self._acls if acl not in gone})
        return matched


__all__ = ["CLUSTER_NAME", "WILDCARD", "WILDCARD_PRINCIPAL", "AclBinding", "AclFilter", "AclOperation",
           "AclPermissionType", "AclStore", "PatternType", "ResourceType", "validate_new_acl"]
