"""`sharebroker consumer-groups`: kafka-consumer-groups.sh over the wire for classic consumer
groups — list, describe (offsets, members, state), reset offsets and delete, with that tool's
columns and messages. Errors go to stderr with exit code 1; argument errors exit 2."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from sharebroker.cli.common import (
    add_connection_options,
    check_action_options,
    check_describe_options,
    client_from_args,
    delete_groups,
    has_option,
    print_delete_result,
    print_group_list,
    run_tool,
    table,
    usage_error,
    width,
)
from sharebroker.cli.consumers import commit_offsets, decode_assignment, fetch_committed
from sharebroker.cli.offsets_common import (
    add_reset_options,
    check_reset_scope,
    chosen_scenarios,
    compute_offsets,
    is_dry_run,
    print_reset_table,
    reset_partitions,
    reset_topics,
)
from sharebroker.cli.share_groups import exception_text
from sharebroker.cli.wire import Client, KafkaApiError, Node, ToolError, code_of, error_message

ACTIONS = ("list", "describe", "delete", "reset_offsets")
VALID_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty", "Assigning", "Reconciling")
REBALANCING = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("consumer-groups", help="list, describe, reset and delete consumer groups "
                                               "(kafka-consumer-groups.sh)",
                       description="List, describe, reset the offsets of, and delete consumer groups.")
    add_connection_options(p)
    p.add_argument("--list", action="store_true", help="list all consumer groups")
    p.add_argument("--describe", action="store_true", help="describe consumer group and list offset lag")
    p.add_argument("--delete", action="store_true", help="delete consumer groups (they must be empty)")
    p.add_argument("--group", action="append", default=[], metavar="GROUP", help="the consumer group to act on")
    p.add_argument("--all-groups", action="store_true", help="apply to all consumer groups")
    p.add_argument("--topic", action="append", default=[], metavar="TOPIC",
                   help="topic for --reset-offsets ('topic' or 'topic:0,1,2')")
    p.add_argument("--members", action="store_true", help="describe members of the group (--describe)")
    p.add_argument("--offsets", action="store_true", help="describe offsets (the default view of --describe)")
    p.add_argument("--state", nargs="?", const="", default=None, metavar="STATES",
                   help="with --describe: the group state; with --list: state column, optionally filtered")
    p.add_argument("--verbose", action="store_true", help="more columns (--describe --members)")
    add_reset_options(p, shift_by=True)
    p.set_defaults(handler=lambda args: run(p, args))
    return p


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    actions = [a for a in ACTIONS if has_option(args, a)]
    if len(actions) != 1:
        usage_error(p, "Command must include exactly one action: --list, --describe, --delete, --reset-offsets")
    action = actions[0]
    if action == "describe":
        if not args.group and not args.all_groups:
            usage_error(p, "Option [describe] takes one of these options: [all-groups], [group]")
        check_describe_options(p, args)
    if action == "delete":
        if not args.group and not args.all_groups:
            usage_error(p, "Option [delete] takes one of these options: [all-groups], [group]")
        if args.group and args.all_groups:
            usage_error(p, "Option [delete] takes either [group] or [all-groups], not both.")
    if action == "reset_offsets":
        if args.dry_run and args.execute:
            usage_error(p, "Option [reset-offsets] only accepts one of [execute] and [dry-run]")
        if not args.group and not args.all_groups:
            usage_error(p, "Option [reset-offsets] takes one of these options: [all-groups], [group]")
        check_reset_scope(p, args)
        if len(chosen_scenarios(args)) != 1:
            usage_error(p, "Option [reset-offsets] requires exactly one of these scenarios: [to-offset], "
                           "[to-earliest], [to-latest], [to-current], [to-datetime], [by-duration], [shift-by], "
                           "[from-file]")
    else:
        for opt in ("dry_run", "execute", "export", "all_topics", "to_offset", "to_earliest", "to_latest",
                    "to_current", "to_datetime", "by_duration", "from_file", "shift_by"):
            if has_option(args, opt):
                usage_error(p, f"Option [{opt.replace('_', '-')}] can only be used with [reset-offsets]")
        if args.topic:
            usage_error(p, "Option [topic] can only be used with [reset-offsets]")
    check_action_options(p, args, action)
    return action


def run(p: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    action = check_args(p, args)
    return run_tool(lambda a: _run(action, a), args)


def _run(action: str, args: argparse.Namespace) -> int:
    with client_from_args(args, default_client_id="sharebroker-consumer-groups") as client:
        svc = ConsumerGroupService(client, args)
        if action == "list":
            return svc.list_groups()
        if action == "describe":
            return svc.describe_groups()
        if action == "delete":
            return svc.delete_groups()
        return svc.reset_offsets()


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    assignment: dict[str, list[int]] = field(default_factory=dict)


@dataclass
class Description:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    coordinator: Node
    members: list[Member]


class ConsumerGroupService:
    def __init__(self, client: Client, args: argparse.Namespace) -> None:
        self.client = client
        self.args = args

    def list_consumer_groups(self, states: list[str] | None = None) -> list[tuple[str, str]]:
        self.client.metadata([])
        found: dict[str, str] = {}
        for node_id in sorted(self.client.nodes):
            conn = self.client.conn(node_id)
            version, resp = conn.request_v(16, {"states_filter": states or [], "types_filter": []})
            if code_of(resp.error_code):
                raise KafkaApiError(resp.error_code, None, "ListGroups failed: ")
            for g in resp.groups:
                gtype = (getattr(g, "group_type", "") or "").lower()
                ptype = getattr(g, "protocol_type", "")
                if gtype == "consumer" or (gtype in ("", "classic") and ptype in ("consumer", "")):
                    state = getattr(g, "group_state", "") or "Unknown"
                    if states and version < 4 and state not in states:
                        continue
                    found[g.group_id] = state
        return sorted(found.items())

    def describe(self, group: str) -> Description | None:
        """None when the group does not exist (Dead)."""
        node, conn = self.client.coordinator_conn(group)
        resp = conn.request(15, {"groups": [group], "include_authorized_operations": False})
        (g,) = resp.groups
        code = code_of(g.error_code)
        if code == ErrorCode.group_id_not_found:
            return None
        if code:
            raise KafkaApiError(code, getattr(g, "error_message", None), f"Cannot describe consumer group '{group}': ")
        if g.group_state == "Dead":
            return None
        if g.protocol_type not in ("consumer", ""):
            raise ToolError(f"Group '{group}' is not a consumer group (protocol type '{g.protocol_type}').")
        members = [Member(m.member_id, getattr(m, "group_instance_id", None), m.client_id, m.client_host,
                          decode_assignment(m.member_assignment)) for m in g.members]
        return Description(group, g.group_state, g.protocol_type, g.protocol_data, node, members)

    def _group_ids(self) -> list[str]:
        if self.args.all_groups:
            return [g for g, _ in self.list_consumer_groups()]
        return list(dict.fromkeys(self.args.group))

    # -- --list
    def list_groups(self) -> int:
        return print_group_list(self.list_consumer_groups, self.args.state, VALID_STATES)

    # -- --describe
    def describe_groups(self) -> int:
        groups = self._group_ids()
        failed = False
        for group in sorted(groups):
            desc = self.describe(group)
            if desc is None:
                print(f"\nError: Consumer group '{group}' does not exist.", file=sys.stderr)
                failed = True
                continue
            if self.args.members:
                self.print_members(desc)
            elif self.args.state is not None:
                self.print_state(desc)
            else:
                self.print_offsets(desc)
        return 1 if failed else 0

    @staticmethod
    def _state_notes(desc: Description) -> None:
        if desc.state == "Empty":
            print(f"\nConsumer group '{desc.group_id}' has no active members.", file=sys.stderr)
        elif desc.state in REBALANCING:
            print(f"\nWarning: Consumer group '{desc.group_id}' is rebalancing.", file=sys.stderr)

    def print_offsets(self, desc: Description) -> None:
        group = desc.group_id
        self._state_notes(desc)
        committed = fetch_committed(self.client, group, None)
        rows: list[list[Any]] = []
        assigned: set[tuple[str, int]] = set()
        members = sorted((m for m in desc.members if m.assignment),
                         key=lambda m: -sum(len(ps) for ps in m.assignment.values()))
        plan: list[tuple[tuple[str, int], Member | None]] = []
        for m in members:
            for t, ps in sorted(m.assignment.items()):
                for p in sorted(ps):
                    plan.append(((t, p), m))
                    assigned.add((t, p))
        for tp in sorted(committed):
            if tp not in assigned:
                plan.append((tp, None))
        if not plan:
            return
        parts: dict[str, list[int]] = {}
        for (t, p), _m in plan:
            parts.setdefault(t, []).append(p)
        ends = self.client.list_offsets(parts, -1)
        for (t, p), member in plan:
            cur = committed.get((t, p))
            code, end = ends.get((t, p), (3, -1))
            leo = end if not code and end >= 0 else None
            lag = leo - cur if leo is not None and cur is not None else None
            rows.append([group, t, p, cur, leo, lag, member.member_id if member else None,
                         member.host if member else None, member.client_id if member else None])
        gw = width([group])
        tw = width([r[1] for r in rows])
        cw = width([r[6] or "-" for r in rows])
        hw = width([r[7] or "-" for r in rows])
        sys.stdout.write(table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                "CONSUMER-ID", "HOST", "CLIENT-ID"], rows, [gw, tw, 10, 15, 15, 15, cw, hw, None]))

    def print_members(self, desc: Description) -> None:
        self._state_notes(desc)
        if not desc.members:
            return
        verbose = self.args.verbose
        members = desc.members
        with_instance = any(m.instance_id for m in members)
        gw = width([desc.group_id])
        cw = width([m.member_id for m in members])
        iw = width([m.instance_id or "" for m in members], 17)
        hw = width([m.host for m in members])
        clw = width([m.client_id for m in members])
        header = ["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if with_instance else []) + \
                 ["HOST", "CLIENT-ID", "#PARTITIONS"] + (["ASSIGNMENT"] if verbose else [])
        widths = [gw, cw] + ([iw] if with_instance else []) + [hw, clw] + ([15, None] if verbose else [None])
        rows = []
        for m in members:
            count = sum(len(ps) for ps in m.assignment.values())
            row: list[Any] = [desc.group_id, m.member_id] + ([m.instance_id or ""] if with_instance else []) + \
                             [m.host, m.client_id, count]
            if verbose:
                row.append(",".join(f"{t}({','.join(str(p) for p in sorted(ps))})"
                                    for t, ps in sorted(m.assignment.items()) if ps) or "-")
            rows.append(row)
        sys.stdout.write(table(header, rows, widths))

    def print_state(self, desc: Description) -> None:
        coordinator = f"{desc.coordinator.host}:{desc.coordinator.port}  ({desc.coordinator.node_id})"
        gw = max(25, len(desc.group_id))
        sys.stdout.write(table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                               [[desc.group_id, coordinator, desc.protocol, desc.state, len(desc.members)]],
                               [gw, 25, 20, 15, None]))

    # -- --delete
    def delete_groups(self) -> int:
        groups = self._group_ids()
        failed: dict[str, str] = {}
        succeeded = delete_groups(self.client, groups, failed, exception_text)
        return print_delete_result("consumer", succeeded, failed)

    # -- --reset-offsets
    def reset_offsets(self) -> int:
        args = self.args
        groups = self._group_ids()
        dry_run = is_dry_run(args)
        failed = False
        for group in groups:
            desc = self.describe(group)
            if desc is not None and desc.state not in ("Empty", "Dead"):
                print(f"\nError: Assignments can only be reset if the group '{group}' is inactive, but the current "
                      f"state is {desc.state}.", file=sys.stderr)
                failed = True
                continue
            current = fetch_committed(self.client, group, None) if desc is not None else {}
            topics = reset_topics(self.client, args, group, {t for t, _ in current} if args.all_topics else set())
            partitions = reset_partitions(self.client, args, topics, current.keys)
            offsets = compute_offsets(self.client, args, group, partitions, topics, current)
            if not dry_run and offsets:
                errors = commit_offsets(self.client, group, offsets)
                if errors:
                    raise ToolError(f"Resetting the offsets of consumer group '{group}' failed for " + "; ".join(
                        f"{t}-{p}: {error_message(c)}" for (t, p), c in sorted(errors.items())))
            print_reset_table(group, offsets, args.export)
        return 1 if failed else 0
