"""`sharebroker acls` (kafka-acls.sh): add, list and remove ACLs on a live broker with
CreateAcls (30), DescribeAcls (29) and DeleteAcls (31), with Kafka's flags, messages and output
(`Current ACLs for resource `ResourcePattern(...)`:` and `(principal=..., host=..., ...)` lines)."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable
from typing import Any
from dataclasses import dataclass

from sharebroker.broker.security.acl_store import CLUSTER_NAME, AclOperation, AclPermissionType, PatternType, ResourceType
from sharebroker.broker.security.authorizer import SUPPORTED_OPERATIONS
from sharebroker.broker.security.principal import KafkaPrincipal
from sharebroker.cli.common import add_connection_options, client_from_args, run_tool, usage_error
from sharebroker.cli.wire import Connection, ToolError, code_of, exception_text

@dataclass(frozen=True)
class Pattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __str__(self) -> str:
        return f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, " \
               f"patternType={self.pattern_type.name})"

    def filter_text(self) -> str:
        return f"ResourcePatternFilter(resourceType={self.resource_type.name}, name={self.name}, " \
               f"patternType={self.pattern_type.name})"


@dataclass(frozen=True)
class Entry:
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def __str__(self) -> str:
        return f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, " \
               f"permissionType={self.permission.name})"


def _operation(text: str) -> AclOperation:
    """Kafka's SecurityUtils.operation: `Read`, `IdempotentWrite`, `idempotent_write`, `READ`."""
    name = re.sub(r"([a-z])([A-Z])", r"\1_\2", text.strip()).upper()
    try:
        op = AclOperation[name]
    except KeyError:
        raise ToolError(f"Unknown operation: {text}") from None
    if op in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise ToolError(f"Unknown operation: {text}")
    return op


def _pattern_type(text: str) -> PatternType:
    try:
        value = PatternType[text.strip().upper()]
    except KeyError:
        raise argparse.ArgumentTypeError(f"Unknown resource-pattern-type: {text}") from None
    if value is PatternType.UNKNOWN:
        raise argparse.ArgumentTypeError(f"Unknown resource-pattern-type: {text}")
    return value


def _principal(text: str) -> str:
    try:
        return str(KafkaPrincipal.parse(text.strip()))
    except ValueError as exc:
        raise ToolError(str(exc)) from None


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("acls", help="add, list and remove ACLs (kafka-acls.sh)",
                       description="This tool helps to manage acls on kafka.")
    add_connection_options(p)
    actions = p.add_mutually_exclusive_group()
    actions.add_argument("--add", action="store_true", help="Indicates you are trying to add ACLs.")
    actions.add_argument("--remove", action="store_true", help="Indicates you are trying to remove ACLs.")
    actions.add_argument("--list", action="store_true", help="List ACLs for the specified resource, use --topic "
                                                             "<topic> or --group <group> or --cluster to specify a resource.")
    p.add_argument("--topic", action="append", help="topic to which ACLs should be added or removed. A value of "
                                                    "'*' indicates ACL should apply to all topics.")
    p.add_argument("--cluster", action="store_true", help="Add/Remove cluster ACLs.")
    p.add_argument("--group", action="append", help="Consumer Group to which the ACLs should be added or removed. "
                                                    "A value of '*' indicates the ACLs should apply to all groups.")
    p.add_argument("--transactional-id", action="append", help="The transactionalId to which ACLs should be added "
                                                               "or removed. A value of '*' indicates the ACLs should "
                                                               "apply to all transactionalIds.")
    p.add_argument("--delegation-token", action="append", help="Delegation token to which ACLs should be added or "
                                                               "removed. A value of '*' indicates ACL should apply to "
                                                               "all tokens.")
    p.add_argument("--user-principal", action="append", help="Specifies a user principal as a resource in relation "
                                                             "with the operation.")
    p.add_argument("--resource-pattern-type", type=_pattern_type, default=PatternType.LITERAL,
                   metavar="ANY|MATCH|LITERAL|PREFIXED",
                   help="The type of the resource pattern or pattern filter (default: LITERAL). When adding acls: "
                        "'literal' or 'prefixed'; when listing or removing also 'any' or 'match'.")
    p.add_argument("--operation", action="append", help="Operation that is being allowed or denied (default: All).")
    p.add_argument("--allow-principal", action="append", help="principal is in principalType:name format.")
    p.add_argument("--deny-principal", action="append", help="principal is in principalType:name format.")
    p.add_argument("--principal", action="append", help="List ACLs for the specified principal.")
    p.add_argument("--allow-host", action="append", help="Host from which principals listed in --allow-principal "
                                                         "will have access (default: *).")
    p.add_argument("--deny-host", action="append", help="Host from which principals listed in --deny-principal will "
                                                        "be denied access (default: *).")
    p.add_argument("--producer", action="store_true", help="Convenience option to add/remove ACLs for producer role.")
    p.add_argument("--consumer", action="store_true", help="Convenience option to add/remove ACLs for consumer role.")
    p.add_argument("--idempotent", action="store_true", help="Enable idempotence for the producer.")
    p.add_argument("--force", action="store_true", help="Assume Yes to all queries and do not prompt.")
    p.set_defaults(handler=lambda args: _checked(p, args))
    return p


def _checked(p: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """kafka-acls.sh's AclCommandOptions.checkArgs."""
    if sum((args.add, args.remove, args.list)) != 1:
        usage_error(p, "Command must include exactly one action: --list, --add, --remove. ")
    if args.list:
        for flag in ("producer", "consumer", "allow_host", "allow_principal", "deny_host", "deny_principal"):
            if getattr(args, flag):
                usage_error(p, f"Option \"[list]\" can't be used with option \"[{flag.replace('_', '-')}]\"")
    for role in ("producer", "consumer"):
        if getattr(args, role):
            for flag in ("operation", "deny_principal", "deny_host"):
                if getattr(args, flag):
                    usage_error(p, f"Option \"[{role}]\" can't be used with option \"[{flag.replace('_', '-')}]\"")
    if args.principal and not args.list:
        usage_error(p, "The --principal option is only available if --list is set")
    if args.producer and not args.topic:
        usage_error(p, "With --producer you must specify a --topic")
    if args.idempotent and not args.producer:
        usage_error(p, "The --idempotent option is only available if --producer is set")
    if args.consumer and (not args.topic or not args.group or (
            not args.producer and (args.cluster or args.transactional_id))):
        usage_error(p, "With --consumer you must specify a --topic and a --group and no --cluster or "
                       "--transactional-id option should be specified.")
    if args.add and args.resource_pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        usage_error(p, f"A '--resource-pattern-type' value of '{args.resource_pattern_type.name}' is not valid when "
                       "adding acls.")
    try:
        plan = _plan(args, die_if_no_resource=not args.list)
    except _Usage as exc:
        usage_error(p, str(exc))
        return 2
    if args.add and any(not entries for entries in plan.values()):
        usage_error(p, "You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
    # as kafka-acls.sh: a failure is "Error while executing ACL command: ..." and exit code 1
    prefix = "Error while executing ACL command: "
    if args.add:
        return run_tool(lambda a: _add(a, plan), args, error_prefix=prefix)
    if args.remove:
        return run_tool(lambda a: _remove(a, plan), args, error_prefix=prefix)
    return run_tool(lambda a: _list(a, list(plan)), args, error_prefix=prefix)


class _Usage(Exception):
    pass


def _resources(args: argparse.Namespace, die_if_no_resource: bool) -> list[Pattern]:
    ptype = args.resource_pattern_type
    found: list[Pattern] = [Pattern(ResourceType.TOPIC, t.strip(), ptype) for t in args.topic or ()]
    if ptype is PatternType.LITERAL and (args.cluster or args.idempotent):
        found.append(Pattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    found += [Pattern(ResourceType.GROUP, g.strip(), ptype) for g in args.group or ()]
    found += [Pattern(ResourceType.TRANSACTIONAL_ID, t, ptype) for t in args.transactional_id or ()]
    found += [Pattern(ResourceType.DELEGATION_TOKEN, t.strip(), ptype) for t in args.delegation_token or ()]
    found += [Pattern(ResourceType.USER, u.strip(), ptype) for u in args.user_principal or ()]
    if not found and die_if_no_resource:
        raise _Usage("You must provide at least one resource: --topic <topic> or --cluster or --group <group> or "
                     "--delegation-token <Delegation Token ID>")
    return list(dict.fromkeys(found))


def _entries(args: argparse.Namespace, operations: Iterable[AclOperation]) -> set[Entry]:
    allowed = {_principal(x) for x in args.allow_principal or ()}
    denied = {_principal(x) for x in args.deny_principal or ()}
    allow_hosts = {h.strip() for h in args.allow_host or ()} or ({"*"} if allowed else set())
    deny_hosts = {h.strip() for h in args.deny_host or ()} or ({"*"} if denied else set())
    ops = list(operations)
    return ({Entry(p, h, op, AclPermissionType.ALLOW) for p in allowed for h in allow_hosts for op in ops}
            | {Entry(p, h, op, AclPermissionType.DENY) for p in denied for h in deny_hosts for op in ops})


def _plan(args: argparse.Namespace, die_if_no_resource: bool) -> dict[Pattern, set[Entry]]:
    """Resource (pattern or filter) -> the ACL entries of the command, with --producer/--consumer."""
    A = AclOperation
    resources = _resources(args, die_if_no_resource)
    plan: dict[Pattern, set[Entry]] = {}
    if not args.producer and not args.consumer:
        ops = [_operation(o) for o in (args.operation or ["All"])]
        entries = _entries(args, ops)
        plan = {r: set(entries) for r in resources}
    if args.producer:
        for r in resources:
            if r.resource_type is ResourceType.TOPIC:
                plan[r] = _entries(args, (A.WRITE, A.DESCRIBE, A.CREATE))
            elif r.resource_type is ResourceType.TRANSACTIONAL_ID:
                plan[r] = _entries(args, (A.WRITE, A.DESCRIBE))
        if args.idempotent:
            plan[Pattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)] = _entries(args, (A.IDEMPOTENT_WRITE,))
    if args.consumer:
        for r in resources:
            if r.resource_type is ResourceType.TOPIC:
                plan.setdefault(r, set()).update(_entries(args, (A.READ, A.DESCRIBE)))
            elif r.resource_type is ResourceType.GROUP:
                plan.setdefault(r, set()).update(_entries(args, (A.READ,)))
    for r, entries in plan.items():
        valid = set(SUPPORTED_OPERATIONS[r.resource_type]) | {A.ALL}
        if any(e.operation not in valid for e in entries):
            names = ", ".join(op.name for op in sorted(valid))
            raise _Usage(f"ResourceType {r.resource_type.name} only supports operations {names}")
    return plan


# -- the three actions ------------------------------------------------------------------------------


def _describe(conn: Connection, flt: Pattern | None) -> dict[Pattern, set[Entry]]:
    data = {"resource_type_filter": ResourceType.ANY if flt is None else flt.resource_type,
            "resource_name_filter": None if flt is None else flt.name,
            "pattern_type_filter": PatternType.ANY if flt is None else flt.pattern_type,
            "principal_filter": None, "host_filter": None, "operation": AclOperation.ANY,
            "permission_type": AclPermissionType.ANY}
    resp = conn.request(29, data)
    if code_of(resp.error_code):
        raise ToolError(exception_text(code_of(resp.error_code), resp.error_message))
    found: dict[Pattern, set[Entry]] = {}
    for r in resp.resources:
        pattern = Pattern(ResourceType(int(r.resource_type)), r.resource_name, PatternType(int(r.pattern_type)))
        found.setdefault(pattern, set()).update(
            Entry(a.principal, a.host, AclOperation(int(a.operation)), AclPermissionType(int(a.permission_type)))
            for a in r.acls)
    return found


def _entry_order(e: Entry) -> tuple[str, str, int, int]:
    return (e.principal, e.host, int(e.operation), int(e.permission))


def _print_resources(found: dict[Pattern, set[Entry]]) -> None:
    for pattern in sorted(found, key=lambda r: (int(r.resource_type), r.name, int(r.pattern_type))):
        lines = "\n".join(f"\t{e}" for e in sorted(found[pattern], key=_entry_order))
        print(f"Current ACLs for resource `{pattern}`:\n{lines}\n")


def _add(args: argparse.Namespace, plan: dict[Pattern, set[Entry]]) -> None:
    conn = client_from_args(args).boot()
    for pattern, entries in plan.items():
        existing = _describe(conn, pattern).get(pattern, set())
        new = []
        for e in sorted(entries, key=_entry_order):
            if e in existing:
                print(f"Acl (pattern={pattern}, entry={e}) already exists.")
            else:
                new.append(e)
        if not new:
            continue
        lines = "\n".join(f"\t{e}" for e in new)
        print(f"Adding ACLs for resource `{pattern}`: \n {lines}\n")
        resp = conn.request(30, {"creations": [
            {"resource_type": pattern.resource_type, "resource_name": pattern.name,
             "resource_pattern_type": pattern.pattern_type, "principal": e.principal, "host": e.host,
             "operation": e.operation, "permission_type": e.permission} for e in new]})
        for result in resp.results:
            if code_of(result.error_code):
                raise ToolError(exception_text(code_of(result.error_code), result.error_message))
    _list(args, list(plan), conn)


def _confirm(args: argparse.Namespace, message: str) -> bool:
    if args.force:
        return True
    print(message)
    sys.stdout.flush()
    return sys.stdin.readline().strip().lower() == "y"


def _remove(args: argparse.Namespace, plan: dict[Pattern, set[Entry]]) -> None:
    conn = client_from_args(args).boot()
    for pattern, entries in plan.items():
        if not entries:
            if not _confirm(args, f"Are you sure you want to delete all ACLs for resource filter "
                                  f"`{pattern.filter_text()}`? (y/n)"):
                continue
            filters: list[dict[str, Any]] = [{"principal_filter": None, "host_filter": None, "operation": AclOperation.ANY,
                        "permission_type": AclPermissionType.ANY}]
        else:
            ordered = sorted(entries, key=_entry_order)
            lines = "\n".join(f"\t{e}" for e in ordered)
            if not _confirm(args, f"Are you sure you want to remove ACLs: \n {lines}\n from resource filter "
                                  f"`{pattern.filter_text()}`? (y/n)"):
                continue
            filters = [{"principal_filter": e.principal, "host_filter": e.host, "operation": e.operation,
                        "permission_type": e.permission} for e in ordered]
        resp = conn.request(31, {"filters": [
            {"resource_type_filter": pattern.resource_type, "resource_name_filter": pattern.name,
             "pattern_type_filter": pattern.pattern_type, **f} for f in filters]})
        for result in resp.filter_results:
            if code_of(result.error_code):
                raise ToolError(exception_text(code_of(result.error_code), result.error_message))


def _list(args: argparse.Namespace, resources: list[Pattern], conn: Connection | None = None) -> None:
    conn = conn or client_from_args(args).boot()
    found: dict[Pattern, set[Entry]] = {}
    filters: list[Pattern | None] = list(resources) or [None]
    for flt in filters:
        for pattern, entries in _describe(conn, flt).items():
            found.setdefault(pattern, set()).update(entries)
    principals = [_principal(p) for p in args.principal or ()] if args.list else []
    if not principals:
        _print_resources(found)
        return
    for principal in principals:
        print(f"ACLs for principal `{principal}`")
        _print_resources({r: mine for r, entries in found.items()
                          if (mine := {e for e in entries if e.principal == principal})})
