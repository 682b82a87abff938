"""`sharebroker share-groups`: kafka-share-groups.sh (ShareGroupCommand) over the wire — list,
describe (offsets, members, state), reset offsets, delete offsets and delete share groups, with the
tool's options, argument rules, columns and messages (share-groups-spec §14.1, admin APIs §11).

Errors go to stderr with exit code 1 (Kafka's tool prints some of them on stdout); argument
errors are usage errors with exit code 2."""

from __future__ import annotations

import argparse
import json
import sys
import time
from urllib.error import HTTPError, URLError
from urllib.parse import urlencode
from urllib.request import urlopen
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
from sharebroker.cli.offsets_common import (
    add_reset_options,
    check_partitions_exist,
    check_range,
    parse_topic_args,
    check_reset_scope,
    chosen_scenarios,
    compute_offsets,
    is_dry_run,
    print_reset_table,
    reset_partitions,
    reset_topics,
)
from sharebroker.cli.configs import GROUP_RESOURCE
from sharebroker.cli.consumers import Fetcher
from sharebroker.cli.wire import Client, KafkaApiError, Node, ToolError, code_of, error_message, exception_text

MAX_TRACED_RECORDS = 100_000  # one line each: --offsets FIRST-LAST is for looking at records, not dumping a log


def parse_record_range(text: str) -> tuple[int, int]:
    """FIRST-LAST (or one offset) of --offsets."""
    first, sep, last = text.partition("-")
    try:
        lo = int(first)
        hi = int(last) if sep else lo
    except ValueError:
        raise ValueError(f"Invalid offset range '{text}': expected FIRST-LAST, e.g. 0-99") from None
    if lo < 0 or hi < lo:
        raise ValueError(f"Invalid offset range '{text}': FIRST must be >= 0 and <= LAST")
    if hi - lo + 1 > MAX_TRACED_RECORDS:
        raise ValueError(f"Invalid offset range '{text}': at most {MAX_TRACED_RECORDS} records at a time")
    return lo, hi


ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")
VALID_STATES = ("Empty", "Stable", "Dead")
SHARE_SCENARIOS = ("to_offset", "to_earliest", "to_latest", "to_current", "to_datetime", "by_duration", "from_file",
                   "from_consumer_group")

def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("share-groups", help="list, describe, reset and delete share groups (kafka-share-groups.sh)",
                       description="This tool helps to list, describe, reset and delete share groups.")
    add_connection_options(p)
    p.add_argument("--list", action="store_true", help="list all share groups")
    p.add_argument("--describe", action="store_true", help="describe share group, members and offset information")
    p.add_argument("--delete", action="store_true", help="delete share group")
    p.add_argument("--delete-offsets", action="store_true",
                   help="delete offsets of share group (one group at a time, several topics)")
    p.add_argument("--group", action="append", default=[], metavar="GROUP", help="the share group to act on")
    p.add_argument("--all-groups", action="store_true", help="apply to all share groups")
    p.add_argument("--topic", action="append", default=[], metavar="TOPIC",
                   help="topic for --delete-offsets or --reset-offsets (reset: 'topic' or 'topic:0,1,2')")
    p.add_argument("--members", action="store_true", help="describe members of the group (--describe)")
    p.add_argument("--offsets", nargs="?", const=True, default=False, metavar="FIRST-LAST",
                   help="describe offsets (the default view of --describe); with FIRST-LAST (and --topic, "
                        "--partition), each record's state, delivery count and holder, from the live broker "
                        "(sharebroker only: read from its metrics.listener endpoint)")
    p.add_argument("--partition", type=int, metavar="PARTITION", help="the partition of --offsets FIRST-LAST")
    p.add_argument("--admin-url", metavar="URL",
                   help="the broker's metrics.listener endpoint for --offsets FIRST-LAST, e.g. http://127.0.0.1:9404 "
                        "(default: the broker's metrics.listener setting, read with DescribeConfigs)")
    p.add_argument("--state", nargs="?", const="", default=None, metavar="STATES",
                   help="with --describe: the group state; with --list: state column, optionally filtered "
                        "(comma-separated: Empty, Stable, Dead)")
    p.add_argument("--verbose", action="store_true", help="more columns (--describe)")
    add_reset_options(p)
    p.add_argument("--from-consumer-group", metavar="GROUP",
                   help="reset to the committed offsets of this classic or consumer group (KIP-1323), for its "
                        "partitions of --topic, or all of them")
    p.set_defaults(handler=lambda args: run(p, args))
    return p


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    actions = [a for a in ACTIONS if has_option(args, a)]
    if len(actions) != 1:
        usage_error(p, "Command must include exactly one action: --list, --describe, --delete, --reset-offsets, "
                       "--delete-offsets.")
    action = actions[0]
    groups, all_groups, topics = args.group, args.all_groups, args.topic
    if action == "describe":
        if not groups and not all_groups:
            usage_error(p, "Option [describe] takes one of these options: [group], [all-groups]")
        check_describe_options(p, args)
    if action == "delete":
        if not groups and not all_groups:
            usage_error(p, "Option [delete] takes the options [group] or [all-groups]")
        if groups and all_groups:
            usage_error(p, "Option [delete] takes either [group] or [all-groups], not both.")
        if topics:
            usage_error(p, "Option [delete] does not take the option: [topic]")
    if action == "delete_offsets":
        if not groups or not topics:
            usage_error(p, "Option [delete-offsets] takes the following options: [group], [topic]")
        if len(groups) > 1:
            usage_error(p, "Option [delete-offsets] supports one share group at a time")
    if action == "reset_offsets":
        if args.dry_run and args.execute:
            usage_error(p, "Option [reset-offsets] only accepts one of [execute] and [dry-run]")
        if not groups:
            usage_error(p, "Option [reset-offsets] takes the option: [group]")
        if len(groups) > 1 or all_groups:
            usage_error(p, "Option [reset-offsets] supports one share group at a time")
        scenarios = [s for s in chosen_scenarios(args) if s in SHARE_SCENARIOS]
        if args.from_consumer_group:
            scenarios.append("from_consumer_group")
            if args.from_file:
                usage_error(p, "Option [from-consumer-group] takes either [topic] or [all-topics], not [from-file].")
        else:
            check_reset_scope(p, args)
        if len(scenarios) != 1:
            usage_error(p, "Option [reset-offsets] requires exactly one of these scenarios: [to-offset], "
                           "[to-earliest], [to-latest], [to-current], [to-datetime], [by-duration], [from-file], "
                           "[from-consumer-group]")
    else:
        for opt in ("dry_run", "execute", "export", "all_topics", *SHARE_SCENARIOS):
            if has_option(args, opt):
                usage_error(p, f"Option [{opt.replace('_', '-')}] can only be used with [reset-offsets]")
    check_action_options(p, args, action)
    tracing = action == "describe" and isinstance(args.offsets, str)
    if tracing:
        if len(groups) != 1 or all_groups or len(topics) != 1 or args.partition is None:
            usage_error(p, "Option [offsets] with a range takes exactly one [group], one [topic] and [partition]")
        try:
            args.record_range = parse_record_range(args.offsets)
        except ValueError as exc:
            usage_error(p, str(exc))
    elif args.partition is not None or args.admin_url:
        usage_error(p, "Options [partition] and [admin-url] can only be used with [describe] [offsets] FIRST-LAST")
    if topics and action not in ("delete_offsets", "reset_offsets") and not tracing:
        usage_error(p, "Option [topic] can only be used with [delete-offsets] or [reset-offsets]")
    return action


def run(p: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    action = check_args(p, args)
    if action == "list" and args.state:
        try:
            states_from_string(args.state, VALID_STATES)
        except ToolError as exc:
            print(exc.message, file=sys.stderr)
            return 1
    return run_tool(lambda a: _run(action, a), args)


def _run(action: str, args: argparse.Namespace) -> int:
    with client_from_args(args, default_client_id="sharebroker-share-groups") as client:
        svc = ShareGroupService(client, args)
        if action == "list":
            return svc.list_groups()
        if action == "describe" and isinstance(args.offsets, str):
            return svc.describe_records()
        if action == "describe":
            return svc.describe_groups()
        if action == "delete":
            return svc.delete_groups()
        if action == "reset_offsets":
            return svc.reset_offsets()
        return svc.delete_offsets()


# ------------------------------------------------------------------------------------------


@dataclass
class Member:
    member_id: str
    client_id: str
    host: str
    epoch: int
    assignment: dict[str, list[int]] = field(default_factory=dict)


@dataclass
class Description:
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    coordinator: Node
    members: list[Member]


@dataclass
class OffsetRow:
    topic: str
    partition: int
    start_offset: int | None
    leader_epoch: int | None
    lag: int | None


class ShareGroupService:
    def __init__(self, client: Client, args: argparse.Namespace) -> None:
        self.client = client
        self.args = args

    # -- admin calls
    def list_share_groups(self, states: list[str] | None = None) -> list[tuple[str, str]]:
        """(group id, state) of every share group on every broker (ListGroups, type filter share)."""
        found: dict[str, str] = {}
        for conn, version, resp in self.client.list_groups(states, ["share"]):
            typed = conn.supports(16, 5)
            for g in resp.groups:
                if not typed and getattr(g, "protocol_type", "") != "share":
                    continue
                state = getattr(g, "group_state", "") or "Unknown"
                if states and version < 4 and state not in states:
                    continue
                found[g.group_id] = state
        return sorted(found.items())

    def describe(self, group: str) -> tuple[Description | None, int, str | None]:
        """(description, error code, error message) from ShareGroupDescribe at the coordinator."""
        node, conn = self.client.coordinator_conn(group)
        resp = conn.request(77, {"group_ids": [group], "include_authorized_operations": False})
        (g,) = resp.groups
        code = code_of(g.error_code)
        if code:
            return None, code, g.error_message
        members = []
        for m in g.members:
            assignment: dict[str, list[int]] = {}
            for tp in m.assignment.topic_partitions:
                assignment.setdefault(tp.topic_name, []).extend(int(x) for x in tp.partitions)
            members.append(Member(m.member_id, m.client_id, m.client_host, int(m.member_epoch), assignment))
        return Description(group, g.group_state, int(g.group_epoch), int(g.assignment_epoch), node, members), 0, None

    def share_offsets(self, group: str) -> list[OffsetRow]:
        """DescribeShareGroupOffsets with Topics null: every initialized partition of the group."""
        _node, conn = self.client.coordinator_conn(group)
        resp = conn.request(90, {"groups": [{"group_id": group, "topics": None}]})
        (g,) = resp.groups
        if code_of(g.error_code):
            raise KafkaApiError(g.error_code, g.error_message,
                                f"Cannot describe the offsets of share group '{group}': ")
        rows = []
        for t in g.topics:
            for p in t.partitions:
                if code_of(p.error_code):
                    continue  # the admin client skips partitions with errors
                start = int(p.start_offset)
                if start < 0:
                    rows.append(OffsetRow(t.topic_name, int(p.partition_index), None, None, None))
                else:
                    lag = int(getattr(p, "lag", -1))
                    epoch = int(p.leader_epoch)
                    rows.append(OffsetRow(t.topic_name, int(p.partition_index), start, epoch if epoch >= 0 else None,
                                          lag if lag >= 0 else None))
        rows.sort(key=lambda r: (r.topic, r.partition))
        return rows

    # -- --list
    def list_groups(self) -> int:
        return print_group_list(self.list_share_groups, self.args.state, VALID_STATES)

    # -- --describe
    def _group_ids(self) -> list[str]:
        if self.args.all_groups:
            return [g for g, _ in self.list_share_groups()]
        return list(dict.fromkeys(self.args.group))

    def _described(self, group: str) -> Description | None:
        """The description, or None after printing the does-not-exist error."""
        desc, code, message = self.describe(group)
        if desc is None:
            if code == ErrorCode.group_id_not_found:
                print(f"\nError: Share group '{group}' does not exist.", file=sys.stderr)
                return None
            raise KafkaApiError(code, message, f"Cannot describe share group '{group}': ")
        if desc.state == "Dead":
            print(f"\nError: Share group '{group}' does not exist.", file=sys.stderr)
            return None
        return desc

    def admin_url(self, group: str) -> str:
        """--admin-url, else http://<metrics.listener> as the group's coordinator (the broker
        leading its share partitions) reports it; a host of 0.0.0.0 or none is the broker's own."""
        if self.args.admin_url:
            return str(self.args.admin_url).rstrip("/")
        node, conn = self.client.coordinator_conn(group)
        resp = conn.request(32, {"resources": [{"resource_type": 4, "resource_name": str(node.node_id),
                                                "configuration_keys": ["metrics.listener"]}],
                                 "include_synonyms": False, "include_documentation": False})
        (result,) = resp.results
        value = next((c.value for c in result.configs if c.name == "metrics.listener"), None)
        host, _, port = (value or "").rpartition(":")
        if not value or not port.isdigit() or port == "0":
            raise ToolError("The broker serves no metrics.listener endpoint (or only on an ephemeral port): start it "
                            "with --metrics-listener HOST:PORT, or pass --admin-url. A record's in-flight state lives "
                            "in the broker's memory and no Kafka API carries it.")
        host = host.strip("[]")
        if host in ("", "0.0.0.0", "::"):
            host = node.host
        return f"http://{host}:{port}"

    def describe_records(self) -> int:
        """Each record of --offsets FIRST-LAST: its state, delivery count, holder and lock time left."""
        (group,), (topic,) = self.args.group, self.args.topic
        first, last = self.args.record_range
        url = self.admin_url(group) + "/api/records?" + urlencode(
            {"group": group, "topic": topic, "partition": self.args.partition, "first": first, "last": last})
        try:
            with urlopen(url, timeout=10) as resp:  # noqa: S310 - a URL the user gave or the broker reported
                found = json.loads(resp.read())
        except HTTPError as exc:
            found = json.loads(exc.read() or b"{}")
        except (URLError, OSError) as exc:
            raise ToolError(f"Cannot read {url}: {exc}") from None
        if found.get("error") != "NONE":
            raise ToolError(f"Error: {found.get('error')}: {found.get('message')}")
        if found["source"] == "none":
            print(f"\nShare group '{group}' has no state for {topic}-{self.args.partition}.")
            return 0
        rows = []
        for r in found["ranges"]:
            lock = "" if r["lock_left_ms"] is None else f"{max(r['lock_left_ms'], 0) / 1000:.1f}s"
            count = "-" if r["delivery_count"] < 0 else r["delivery_count"]
            for offset in range(r["first"], r["last"] + 1):
                rows.append([topic, self.args.partition, offset, r["state"].upper(), count, r["member"] or "-", lock])
        if not rows:
            print(f"\nNo records of {topic}-{self.args.partition} in {first}-{last} "
                  f"(high watermark {found['high_watermark']}).")
            return 0
        sys.stdout.write(table(["TOPIC", "PARTITION", "OFFSET", "STATE", "DELIVERY-COUNT", "MEMBER", "LOCK-LEFT"],
                               rows, [width([topic]), 10, 10, 13, 15, 24, None]))
        return 0

    def describe_groups(self) -> int:
        verbose = self.args.verbose
        failed = False
        for group in sorted(self._group_ids()):
            desc = self._described(group)
            if desc is None:
                failed = True
                continue
            if self.args.members:
                self.print_members(desc, verbose)
            elif self.args.state is not None:
                self.print_state(desc, verbose)
            else:
                self.print_offsets(group, self.share_offsets(group), verbose, self.dlq_counts(group))
        return 1 if failed else 0

    def dlq_counts(self, group: str) -> dict[tuple[str, int], int] | None:
        """Records of the group's dead-letter queue (KIP-1191) per source partition, counted from the
        DLQ topic's ``__dlq.errors.*`` headers; None when the group has no DLQ topic."""
        resp = self.client.request(32, {"resources": [{"resource_type": GROUP_RESOURCE, "resource_name": group,
                                                       "configuration_keys": ["errors.deadletterqueue.topic.name"]}],
                                        "include_synonyms": False, "include_documentation": False})
        (result,) = resp.results
        if code_of(result.error_code):
            return None  # a broker without group configs
        name = next((c.value for c in result.configs if c.name == "errors.deadletterqueue.topic.name"), None)
        if not name:
            return None
        topics = self.client.metadata([name])
        info = topics.get(name)
        counts: dict[tuple[str, int], int] = {}
        if info is None or info.error:
            return counts
        parts = {name: sorted(info.partitions)}
        ends = {tp: off for tp, (code, off) in self.client.list_offsets(parts, -1, topics).items() if not code}
        fetcher = Fetcher(self.client, topics)
        fetcher.assign({tp: "earliest" for tp in ends})
        deadline = time.monotonic() + self.client.timeout
        want = group.encode()
        while any(fetcher.positions.get(tp, 0) < end for tp, end in ends.items()) and time.monotonic() < deadline:
            for r in fetcher.fetch(100):
                h = dict(r.headers)
                if h.get("__dlq.errors.group") != want:
                    continue
                try:
                    key = ((h.get("__dlq.errors.topic") or b"").decode(), int(h.get("__dlq.errors.partition") or b"-1"))
                except ValueError:
                    continue
                counts[key] = counts.get(key, 0) + 1
        return counts

    @staticmethod
    def _maybe_print_empty(desc: Description) -> None:
        if desc.state == "Empty":
            print(f"\nShare group '{desc.group_id}' has no active members.", file=sys.stderr)

    def print_offsets(self, group: str, rows: list[OffsetRow], verbose: bool,
                      dlq: dict[tuple[str, int], int] | None = None) -> None:
        """Kafka's columns; with a DLQ topic configured, DLQ-RECORDS (records of the partition on it)."""
        if not rows:
            print(f"\nShare group '{group}' has no offset information.")
            return
        gw, tw = width([group]), width([r.topic for r in rows])
        if verbose:
            header = ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"]
            body = [[group, r.topic, r.partition, r.leader_epoch, r.start_offset, r.lag] for r in rows]
            widths: list[int | None] = [gw, tw, 10, 13, 13, None]
        else:
            header = ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
            body = [[group, r.topic, r.partition, r.start_offset, r.lag] for r in rows]
            widths = [gw, tw, 10, 13, None]
        if dlq is not None:
            header.append("DLQ-RECORDS")
            for row, r in zip(body, rows):
                row.append(dlq.get((r.topic, r.partition), 0))
            widths[-1] = 6
            widths.append(None)
        sys.stdout.write(table(header, body, widths))

    def print_state(self, desc: Description, verbose: bool) -> None:
        self._maybe_print_empty(desc)
        coordinator = f"{desc.coordinator.host}:{desc.coordinator.port}  ({desc.coordinator.node_id})"
        gw, cw = width([desc.group_id]), width([coordinator], 25)
        if verbose:
            header = ["GROUP", "COORDINATOR (ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"]
            row = [desc.group_id, coordinator, desc.state, desc.group_epoch, desc.assignment_epoch, len(desc.members)]
            sys.stdout.write(table(header, [row], [gw, cw, 15, 12, 17, None]))
        else:
            sys.stdout.write(table(["GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS"],
                                   [[desc.group_id, coordinator, desc.state, len(desc.members)]], [gw, cw, 15, None]))

    @staticmethod
    def assignment_text(assignment: dict[str, list[int]]) -> str:
        return ";".join(sorted(f"{t}:{','.join(str(p) for p in sorted(ps))}" for t, ps in assignment.items()))

    def print_members(self, desc: Description, verbose: bool) -> None:
        self._maybe_print_empty(desc)
        if not desc.members:
            return
        members = sorted(desc.members, key=lambda m: m.member_id)
        gw = width([desc.group_id])
        cw = width([m.member_id for m in members])
        hw = width([m.host for m in members])
        iw = width([m.client_id for m in members])
        rows = []
        for m in members:
            count = sum(len(ps) for ps in m.assignment.values())
            row: list[Any] = [desc.group_id, m.member_id, m.host, m.client_id, count]
            if verbose:
                row.append(m.epoch)
            row.append(self.assignment_text(m.assignment))
            rows.append(row)
        if verbose:
            sys.stdout.write(table(["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "MEMBER-EPOCH",
                                    "ASSIGNMENT"], rows, [gw, cw, hw, iw, 12, 13, None]))
        else:
            sys.stdout.write(table(["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"], rows,
                                   [gw, cw, hw, iw, 12, None]))

    # -- --delete
    def delete_groups(self) -> int:
        listed = dict(self.list_share_groups())
        requested = list(listed) if self.args.all_groups else list(dict.fromkeys(self.args.group))
        failed: dict[str, str] = {}
        to_delete = []
        for group in requested:
            state = listed.get(group)
            if state is None:
                failed[group] = f"GroupIdNotFoundException: Group '{group}' is not a share group."
            elif state == "Dead":
                failed[group] = f"IllegalStateException: Share group '{group}' group state is DEAD."
            elif state != "Empty":
                failed[group] = f"GroupNotEmptyException: Share group '{group}' is not EMPTY."
            else:
                to_delete.append(group)
        succeeded = delete_groups(self.client, to_delete, failed, exception_text)
        return print_delete_result("share", succeeded, failed)

    # -- --delete-offsets
    def delete_offsets(self) -> int:
        group = self.args.group[0]
        topics = list(dict.fromkeys(self.args.topic))
        _node, conn = self.client.coordinator_conn(group)
        resp = conn.request(92, {"group_id": group, "topics": [{"topic_name": t} for t in topics]})
        top = code_of(resp.error_code)
        results: dict[str, str | None] = {}
        failed = False
        if top:
            failed = True
            text = error_message(top, resp.error_message)
            if top in (ErrorCode.invalid_group_id, ErrorCode.group_id_not_found, ErrorCode.group_authorization_failed,
                       ErrorCode.non_empty_group):
                print(f"\nError: {text}", file=sys.stderr)
            else:
                print(f"\nError: Encounter some unknown error: {exception_text(top, resp.error_message)}",
                      file=sys.stderr)
            for t in topics:
                results[t] = text
        else:
            by_name = {r.topic_name: r for r in resp.responses}
            for t in topics:
                r = by_name.get(t)
                if r is None:
                    results[t] = "The server did not report on this topic."
                elif code_of(r.error_code):
                    results[t] = error_message(r.error_code, r.error_message)
                else:
                    results[t] = None
            failed = any(v is not None for v in results.values())
        tw = width(list(results))
        rows = [[t, "Successful" if err is None else f"Error: {err}"] for t, err in sorted(results.items())]
        sys.stdout.write(table(["TOPIC", "STATUS"], rows, [tw, None]))
        return 1 if failed else 0

    # -- --reset-offsets
    def reset_offsets(self) -> int:
        args = self.args
        group = args.group[0]
        desc, code, message = self.describe(group)
        if desc is not None and desc.state not in ("Empty", "Dead"):
            raise ToolError(f"Share group '{group}' is not empty.")
        if desc is None and code != ErrorCode.group_id_not_found:
            raise KafkaApiError(code, message, f"Cannot describe share group '{group}': ")
        if args.from_consumer_group:
            offsets = self.consumer_group_offsets(args.from_consumer_group)
            if not is_dry_run(args) and offsets:
                self.alter_offsets(group, offsets)
            print_reset_table(group, offsets, args.export)
            return 0
        names: set[str] = set()
        current: dict[tuple[str, int], int] = {}
        if args.all_topics or args.to_current:
            rows = self.share_offsets(group) if desc is not None else []
            current = {(r.topic, r.partition): r.start_offset for r in rows if r.start_offset is not None}
            names = {r.topic for r in rows}
        topics = reset_topics(self.client, args, group, names)

        def all_partitions() -> set[tuple[str, int]]:
            return {(r.topic, r.partition) for r in (self.share_offsets(group) if desc is not None else [])}

        partitions = reset_partitions(self.client, args, topics, all_partitions)
        offsets = compute_offsets(self.client, args, group, partitions, topics, current)
        if not is_dry_run(args) and offsets:
            self.alter_offsets(group, offsets)
        print_reset_table(group, offsets, args.export)
        return 0

    def consumer_group_offsets(self, source: str) -> dict[tuple[str, int], int]:
        """The committed offsets of a classic/consumer group (OffsetFetch), in the --topic scope when
        given, clamped to the log range as every reset is: the share group starts where it left off."""
        from sharebroker.cli.consumer_groups import ConsumerGroupService

        committed = {tp: off for tp, (off, _epoch) in ConsumerGroupService(self.client, self.args).committed(source).items()}
        if not committed:
            raise ToolError(f"Consumer group '{source}' has no committed offsets.")
        topics = self.client.metadata(sorted({t.split(":")[0] for t in self.args.topic} | {t for t, _p in committed}))
        if self.args.topic:
            wanted = set(parse_topic_args(self.client, self.args.topic, topics))
            committed = {tp: off for tp, off in committed.items() if tp in wanted}
        check_partitions_exist(list(committed), topics)
        return check_range(self.client, committed, topics)

    def alter_offsets(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for (t, p), o in sorted(offsets.items()):
            by_topic.setdefault(t, []).append((p, o))
        _node, conn = self.client.coordinator_conn(group)
        resp = conn.request(91, {"group_id": group, "topics": [
            {"topic_name": t, "partitions": [{"partition_index": p, "start_offset": o} for p, o in ps]}
            for t, ps in by_topic.items()]})
        top = code_of(resp.error_code)
        if top == ErrorCode.non_empty_group:
            raise ToolError(f"Share group '{group}' is not empty.")
        if top:
            raise KafkaApiError(top, resp.error_message, f"Resetting the offsets of share group '{group}' failed: ")
        errors = [f"{t.topic_name}-{p.partition_index}: {error_message(p.error_code, p.error_message)}"
                  for t in resp.responses for p in t.partitions if code_of(p.error_code)]
        if errors:
            raise ToolError(f"Resetting the offsets of share group '{group}' failed for " + "; ".join(errors))
