"""`sharebroker consumer-groups`: kafka-consumer-groups.sh over the wire for both kinds of consumer
group — classic groups (JoinGroup/SyncGroup) and KIP-848 consumer groups (`group.protocol=consumer`)
— list (with --type and --state), describe (offsets, members, state), reset offsets, delete offsets
and delete, with that tool's columns and messages.

A group is described as the Java admin client's describeConsumerGroups does: ConsumerGroupDescribe
first, DescribeGroups when the coordinator answers GROUP_ID_NOT_FOUND (a classic group, or none) or
does not know ConsumerGroupDescribe. Consumer groups get the columns of Kafka 4.x's tool
(ConsumerGroupCommand with KIP-1099: epochs and target assignments with --verbose); the classic
output is the one this tool always printed. Errors go to stderr with exit code 1; argument errors
exit 2."""

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
    states_from_string,
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
    parse_topic_args,
    print_reset_table,
    reset_partitions,
    reset_topics,
)
from sharebroker.cli.share_groups import exception_text
from sharebroker.cli.wire import (
    Client,
    Connection,
    KafkaApiError,
    Node,
    ToolError,
    code_of,
    error_message,
)


ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")
VALID_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty", "Assigning", "Reconciling")
REBALANCING = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")
# Kafka's GroupType names (toString) of the types this tool lists (consumerGroupTypesFromString).
GROUP_TYPES = {"classic": "Classic", "consumer": "Consumer"}
MISSING = "-"


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("consumer-groups", help="list, describe, reset and delete consumer groups "
                                               "(kafka-consumer-groups.sh)",
                       description="List, describe, reset the offsets of, and delete consumer groups "
                                   "(classic and consumer-protocol groups).")
    add_connection_options(p)
    p.add_argument("--list", action="store_true", help="list all consumer groups")
    p.add_argument("--describe", action="store_true", help="describe consumer group and list offset lag")
    p.add_argument("--delete", action="store_true", help="delete consumer groups (they must be empty)")
    p.add_argument("--delete-offsets", action="store_true",
                   help="delete offsets of consumer group (one group at a time, several topics)")
    p.add_argument("--group", action="append", default=[], metavar="GROUP", help="the consumer group to act on")
    p.add_argument("--all-groups", action="store_true", help="apply to all consumer groups")
    p.add_argument("--topic", action="append", default=[], metavar="TOPIC",
                   help="topic for --reset-offsets or --delete-offsets ('topic' or 'topic:0,1,2')")
    p.add_argument("--members", action="store_true", help="describe members of the group (--describe)")
    p.add_argument("--offsets", action="store_true", help="describe offsets (the default view of --describe)")
    p.add_argument("--state", nargs="?", const="", default=None, metavar="STATES",
                   help="with --describe: the group state; with --list: state column, optionally filtered")
    p.add_argument("--type", nargs="?", const="", default=None, metavar="TYPES",
                   help="with --list: type column, optionally filtered (comma-separated: classic, consumer)")
    p.add_argument("--verbose", action="store_true",
                   help="more columns (--describe; epochs and target assignments of consumer groups)")
    add_reset_options(p, shift_by=True)
    p.set_defaults(handler=lambda args: run(p, args))
    return p


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    actions = [a for a in ACTIONS if has_option(args, a)]
    if len(actions) != 1:
        usage_error(p, "Command must include exactly one action: --list, --describe, --delete, --reset-offsets, "
                       "--delete-offsets")
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
        if args.topic:
            usage_error(p, "The consumer does not support topic-specific offset deletion from a consumer group.")
    if action == "delete_offsets":
        if not args.group or not args.topic:
            usage_error(p, "Option [delete-offsets] takes the following options: [group], [topic]")
        if len(args.group) > 1 or args.all_groups:
            usage_error(p, "Option [delete-offsets] supports one consumer group at a time")
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
        if args.topic and action != "delete_offsets":
            usage_error(p, "Option [topic] can only be used with [reset-offsets] or [delete-offsets]")
    if args.type is not None and action != "list":
        usage_error(p, "Option [type] can only be used with [list]")
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
        if action == "delete_offsets":
            return svc.delete_offsets()
        return svc.reset_offsets()


def types_from_string(text: str) -> list[str]:
    """Kafka's consumerGroupTypesFromString: classic and consumer, case-insensitive."""
    out = []
    for t in text.lower().split(","):
        t = t.strip()
        if t not in GROUP_TYPES:
            raise ToolError(f"Invalid types list '{text}'. Valid types are: {', '.join(GROUP_TYPES.values())}")
        out.append(t)
    return out


def assignment_text(assignment: dict[str, list[int]]) -> str:
    """Kafka 4.x's getAssignmentString: `topic:0,1;other:2`, topics sorted."""
    if not any(assignment.values()):
        return MISSING
    return ";".join(sorted(f"{t}:{','.join(str(p) for p in sorted(ps))}" for t, ps in assignment.items() if ps))


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    assignment: dict[str, list[int]] = field(default_factory=dict)
    # consumer groups (ConsumerGroupDescribe) only
    member_epoch: int | None = None
    target: dict[str, list[int]] = field(default_factory=dict)
    upgraded: bool | None = None  # member_type: consumer protocol (True) or a classic member (False)


@dataclass
class Description:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    coordinator: Node
    members: list[Member]
    kind: str = "classic"  # or "consumer"
    group_epoch: int | None = None
    assignment_epoch: int | None = None


@dataclass
class Listing:
    group_id: str
    group_type: str | None  # "classic", "consumer", or None when the broker did not say (ListGroups < v5)
    state: str


class ConsumerGroupService:
    def __init__(self, client: Client, args: argparse.Namespace) -> None:
        self.client = client
        self.args = args

    def list_listings(self, states: list[str] | None = None, types: list[str] | None = None) -> list[Listing]:
        """Kafka's ListGroupsOptions.forConsumerGroups(): classic groups of protocol type consumer
        (or none) and consumer groups, on every broker, optionally filtered by state and type."""
        found: dict[str, Listing] = {}
        for conn, version, resp in self.client.list_groups(states, types):
            if types and version < 5:
                raise ToolError(f"The broker at {conn.address} does not support listing groups by type "
                                f"(ListGroups v5).")
            for g in resp.groups:
                gtype = (getattr(g, "group_type", "") or "").lower()
                ptype = getattr(g, "protocol_type", "")
                if gtype == "consumer" or (gtype in ("", "classic") and ptype in ("consumer", "")):
                    state = getattr(g, "group_state", "") or "Unknown"
                    if states and version < 4 and state not in states:
                        continue
                    if types and gtype not in types:
                        continue
                    found[g.group_id] = Listing(g.group_id, gtype or None, state)
        return [found[g] for g in sorted(found)]

    def list_consumer_groups(self, states: list[str] | None = None) -> list[tuple[str, str]]:
        return [(x.group_id, x.state) for x in self.list_listings(states)]

    def describe(self, group: str) -> Description | None:
        """None when the group does not exist (Dead). ConsumerGroupDescribe, then DescribeGroups for
        a group the coordinator does not know as a consumer group."""
        node, conn = self.client.coordinator_conn(group)
        if conn.supports(69):
            desc = self._describe_consumer_group(group, node, conn)
            if desc is not None:
                return desc
        return self._describe_classic_group(group, node, conn)

    def _describe_consumer_group(self, group: str, node: Node, conn: Connection) -> Description | None:
        resp = conn.request(69, {"group_ids": [group], "include_authorized_operations": False})
        (g,) = resp.groups
        code = code_of(g.error_code)
        if code == ErrorCode.group_id_not_found or (not code and g.group_state == "Dead"):
            return None  # a classic group, or no group: DescribeGroups tells
        if code:
            raise KafkaApiError(code, getattr(g, "error_message", None), f"Cannot describe consumer group '{group}': ")

        def partitions(a: Any) -> dict[str, list[int]]:
            out: dict[str, list[int]] = {}
            for tp in (a.topic_partitions if a is not None else ()):
                out.setdefault(tp.topic_name, []).extend(int(p) for p in tp.partitions)
            return out

        members = []
        for m in g.members:
            member_type = int(getattr(m, "member_type", -1))
            members.append(Member(m.member_id, m.instance_id, m.client_id, m.client_host, partitions(m.assignment),
                                  int(m.member_epoch), partitions(m.target_assignment),
                                  None if member_type < 0 else member_type == 1))
        return Description(group, g.group_state, "consumer", g.assignor_name or "", node, members, "consumer",
                           int(g.group_epoch), int(g.assignment_epoch))

    def _describe_classic_group(self, group: str, node: Node, conn: Connection) -> Description | None:
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

    def committed(self, group: str) -> dict[tuple[str, int], tuple[int, int]]:
        """{(topic, partition): (committed offset, committed leader epoch)} (OffsetFetch)."""
        _node, conn = self.client.coordinator_conn(group)
        version, resp = conn.request_v(9, {"group_id": group, "topics": None, "require_stable": False,
                                           "groups": [{"group_id": group, "topics": None}]})
        if version >= 8:
            (g,) = resp.groups
            gcode, tlist = code_of(g.error_code), g.topics
        else:
            gcode, tlist = code_of(getattr(resp, "error_code", 0)), resp.topics
        if gcode:
            raise KafkaApiError(gcode, None, f"Cannot fetch the committed offsets of group '{group}': ")
        out: dict[tuple[str, int], tuple[int, int]] = {}
        for t in tlist:
            for p in t.partitions:
                if code_of(p.error_code):
                    raise KafkaApiError(p.error_code, None,
                                        f"Cannot fetch the committed offset of {t.name}-{p.partition_index}: ")
                if int(p.committed_offset) >= 0:
                    out[(t.name, int(p.partition_index))] = (int(p.committed_offset),
                                                             int(getattr(p, "committed_leader_epoch", -1)))
        return out

    def _group_ids(self) -> list[str]:
        if self.args.all_groups:
            return [g for g, _ in self.list_consumer_groups()]
        return list(dict.fromkeys(self.args.group))

    # -- --list
    def list_groups(self) -> int:
        if self.args.type is None:
            return print_group_list(self.list_consumer_groups, self.args.state, VALID_STATES)
        # Kafka's printGroupInfo: GROUP padded to the longest id (at least 15) plus 10, TYPE and
        # STATE %-20s.
        states = states_from_string(self.args.state, VALID_STATES) if self.args.state else []
        types = types_from_string(self.args.type) if self.args.type else []
        listings = self.list_listings(states, types)
        with_state = self.args.state is not None
        gw = max([15, *(len(x.group_id) for x in listings)]) + 10
        header = ["GROUP", "TYPE"] + (["STATE"] if with_state else [])
        rows = [[x.group_id, GROUP_TYPES.get(x.group_type or "", "Unknown")] + ([x.state] if with_state else [])
                for x in listings]
        sys.stdout.write(table(header, rows, [gw, 20, None] if with_state else [gw, None])[1:])
        return 0

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
                if desc.kind == "consumer":
                    self.print_consumer_members(desc)
                else:
                    self.print_members(desc)
            elif self.args.state is not None:
                if desc.kind == "consumer":
                    self.print_consumer_state(desc)
                else:
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
        # LEADER-EPOCH (--verbose) is Kafka 4.x's; classic groups keep this tool's columns.
        verbose = self.args.verbose and desc.kind == "consumer"
        if desc.kind == "consumer":
            full = self.committed(group)
            committed = {tp: o for tp, (o, _e) in full.items()}
            epochs = {tp: e for tp, (_o, e) in full.items() if e >= 0}
        else:
            committed, epochs = fetch_committed(self.client, group, None), {}
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
            rows.append([group, t, p] + ([epochs.get((t, p))] if verbose else []) +
                        [cur, leo, lag, member.member_id if member else None,
                         member.host if member else None, member.client_id if member else None])
        gw = width([group])
        tw = width([r[1] for r in rows])
        cw = width([r[-3] or "-" for r in rows])
        hw = width([r[-2] or "-" for r in rows])
        header = ["GROUP", "TOPIC", "PARTITION"] + (["LEADER-EPOCH"] if verbose else []) + \
                 ["CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
        widths = [gw, tw, 10] + ([15] if verbose else []) + [15, 15, 15, cw, hw, None]
        sys.stdout.write(table(header, rows, widths))

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

    def print_consumer_members(self, desc: Description) -> None:
        """Kafka 4.x's printMembers: with --verbose the member epoch and current assignment, the
        group's target assignment epoch and the member's target assignment (and UPGRADED when
        classic and consumer-protocol members share the group)."""
        self._state_notes(desc)
        if not desc.members:
            return
        verbose = self.args.verbose
        members = desc.members
        with_instance = any(m.instance_id for m in members)
        migrating = any(m.upgraded is False for m in members) and any(m.upgraded is True for m in members)
        header = ["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if with_instance else []) + \
                 ["HOST", "CLIENT-ID", "#PARTITIONS"]
        widths: list[int | None] = [width([desc.group_id]), width([m.member_id for m in members])]
        if with_instance:
            widths.append(width([m.instance_id or "" for m in members], 17))
        widths += [width([m.host for m in members]), width([m.client_id for m in members])]
        rows = []
        for m in members:
            row: list[Any] = [desc.group_id, m.member_id] + ([m.instance_id or ""] if with_instance else []) + \
                             [m.host, m.client_id, sum(len(ps) for ps in m.assignment.values())]
            if verbose:
                row += [m.member_epoch, assignment_text(m.assignment), desc.assignment_epoch,
                        assignment_text(m.target)]
                if migrating:
                    row.append(MISSING if m.upgraded is None else str(m.upgraded).lower())
            rows.append(row)
        if verbose:
            header += ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
            current_w = width([r[-3 - migrating] for r in rows], 20)
            target_w = width([r[-1 - migrating] for r in rows], 20)
            widths += [15, 15, current_w, 15, target_w if migrating else None]
            if migrating:
                header.append("UPGRADED")
                widths.append(None)
        else:
            widths.append(None)
        sys.stdout.write(table(header, rows, widths))

    def print_state(self, desc: Description) -> None:
        coordinator = f"{desc.coordinator.host}:{desc.coordinator.port}  ({desc.coordinator.node_id})"
        gw = max(25, len(desc.group_id))
        sys.stdout.write(table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                               [[desc.group_id, coordinator, desc.protocol, desc.state, len(desc.members)]],
                               [gw, 25, 20, 15, None]))

    def print_consumer_state(self, desc: Description) -> None:
        """Kafka 4.x's printStates; --verbose adds GROUP-EPOCH and TARGET-ASSIGNMENT-EPOCH."""
        self._state_notes(desc)
        coordinator = f"{desc.coordinator.host}:{desc.coordinator.port}  ({desc.coordinator.node_id})"
        gw, cw = max(15, len(desc.group_id)), max(25, len(coordinator))
        strategy = desc.protocol or MISSING
        if self.args.verbose:
            sys.stdout.write(table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH",
                                    "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"],
                                   [[desc.group_id, coordinator, strategy, desc.state, desc.group_epoch,
                                     desc.assignment_epoch, len(desc.members)]],
                                   [gw, cw, 20, 20, 15, 25, None]))
        else:
            sys.stdout.write(table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                                   [[desc.group_id, coordinator, strategy, desc.state, len(desc.members)]],
                                   [gw, cw, 20, 20, None]))

    # -- --delete
    def delete_groups(self) -> int:
        groups = self._group_ids()
        failed: dict[str, str] = {}
        succeeded = delete_groups(self.client, groups, failed, exception_text)
        return print_delete_result("consumer", succeeded, failed)

    # -- --delete-offsets
    def delete_offsets(self) -> int:
        """Kafka's ConsumerGroupService.deleteOffsets: OffsetDelete for the partitions of the named
        topics ('topic' = every partition, 'topic:0,1' = those), then a TOPIC/PARTITION/STATUS table."""
        group = self.args.group[0]
        topic_args = list(dict.fromkeys(self.args.topic))
        results: dict[tuple[str, int], str | None] = {}
        whole = sorted({t for t in topic_args if ":" not in t})
        known = [tp for tp in parse_topic_args(self.client, [t for t in topic_args if ":" in t], {})]
        partitions = list(dict.fromkeys(known))
        infos = self.client.metadata(whole) if whole else {}
        for name in whole:
            info = infos.get(name)
            code = info.error if info is not None else int(ErrorCode.unknown_topic_or_partition)
            if code or info is None:
                results[(name, -1)] = exception_text(code or int(ErrorCode.unknown_topic_or_partition), None)
            else:
                partitions.extend((name, p) for p in sorted(info.partitions) if (name, p) not in partitions)
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        _node, conn = self.client.coordinator_conn(group)
        resp = conn.request(47, {"group_id": group, "topics": [
            {"name": t, "partitions": [{"partition_index": p} for p in ps]} for t, ps in by_topic.items()]})
        top = code_of(resp.error_code)
        partition_errors = {(t.name, int(p.partition_index)): code_of(p.error_code)
                            for t in resp.topics for p in t.partitions if code_of(p.error_code)}
        for tp in partitions:
            code = top or partition_errors.get(tp, 0)
            results[tp] = exception_text(code, None) if code else None
        # The admin client's all(): the group-level error, else the first partition's.
        overall = top or next((partition_errors[tp] for tp in partitions if tp in partition_errors), 0)
        if not overall:
            print(f"Request succeeded for deleting offsets from group {group}.")
        elif overall in (ErrorCode.invalid_group_id, ErrorCode.group_id_not_found, ErrorCode.group_authorization_failed,
                         ErrorCode.non_empty_group):
            print(f"\nError: {error_message(overall)}", file=sys.stderr)
        elif overall in (ErrorCode.group_subscribed_to_topic, ErrorCode.topic_authorization_failed,
                         ErrorCode.unknown_topic_or_partition):
            print("\nError: Encountered some partition-level error, see the follow-up details.", file=sys.stderr)
        else:
            print(f"\nError: Encountered some unknown error: {ErrorCode(overall).name.upper()}", file=sys.stderr)
        rows = [[t, p if p >= 0 else MISSING, "Successful" if err is None else f"Error: {err}"]
                for (t, p), err in sorted(results.items(), key=lambda kv: f"{kv[0][0]}{kv[0][1]}")]
        sys.stdout.write(table(["TOPIC", "PARTITION", "STATUS"], rows, [width([t for t, _ in results]), 10, None]))
        return 1 if overall or any(err is not None for err in results.values()) else 0

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
                # The admin path (alterConsumerGroupOffsets): OffsetCommit with generation / member
                # epoch -1 and no member id, which an empty group of either kind accepts.
                errors = commit_offsets(self.client, group, offsets)
                if errors:
                    raise ToolError(f"Resetting the offsets of consumer group '{group}' failed for " + "; ".join(
                        f"{t}-{p}: {error_message(c)}" for (t, p), c in sorted(errors.items())))
            print_reset_table(group, offsets, args.export)
        return 1 if failed else 0
