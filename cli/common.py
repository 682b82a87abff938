"""Shared pieces of the tools: common options, the error/exit-code wrapper, tables in the column
layout of Kafka's tools, and properties files."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sharebroker.cli.client_security import ClientSecurity
from sharebroker.cli.wire import Client, ToolError, code_of

DEFAULT_TIMEOUT_MS = 30000
MISSING = "-"


def add_connection_options(p: argparse.ArgumentParser, *, timeout_help: str | None = None,
                           bootstrap_required: bool = True) -> None:
    p.add_argument("--bootstrap-server", required=bootstrap_required, metavar="HOST:PORT[,...]",
                   help="REQUIRED: the server(s) to connect to")
    p.add_argument("--command-config", metavar="FILE",
                   help="client properties file, as Kafka's tools take: client.id, request.timeout.ms, "
                        "security.protocol, ssl.truststore.*, ssl.keystore.*, sasl.mechanism, sasl.jaas.config")
    p.add_argument("--timeout", type=non_negative_int, default=DEFAULT_TIMEOUT_MS, metavar="MS",
                   help=timeout_help or "give up when the cluster cannot be reached or does not answer within "
                                        "this many milliseconds (default 30000)")


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer value: '{text}'") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {value}")
    return value


def int_value(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer value: '{text}'") from None


def load_properties(path: str) -> dict[str, str]:
    """A Java .properties file (key=value or key:value, # and ! comments, no line continuations
    beyond the simple trailing backslash)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ToolError(f"Cannot read {path}: {exc.strerror or exc}") from None
    props: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        for i, ch in enumerate(line):
            if ch in "=:":
                props[line[:i].strip()] = line[i + 1:].strip()
                break
        else:
            props[line] = ""
    return props


def client_from_args(args: argparse.Namespace, *, default_client_id: str = "sharebroker-cli",
                     extra_props: dict[str, str] | None = None) -> Client:
    props = load_properties(args.command_config) if getattr(args, "command_config", None) else {}
    props.update(extra_props or {})
    security = ClientSecurity.from_properties(props)
    timeout = args.timeout
    if "request.timeout.ms" in props and timeout == DEFAULT_TIMEOUT_MS:
        try:
            timeout = int(props["request.timeout.ms"])
        except ValueError:
            raise ToolError(f"request.timeout.ms must be an integer, got '{props['request.timeout.ms']}'", 2) from None
    return Client(args.bootstrap_server, timeout_ms=timeout, client_id=props.get("client.id", default_client_id),
                  security=security if security.protocol != "PLAINTEXT" else None)


def run_tool(fn: Callable[[argparse.Namespace], int | None], args: argparse.Namespace, *,
             error_prefix: str = "Error: ") -> int:
    """Run a tool body: ToolError -> 'Error: ...' (or another prefix) on stderr with its exit code."""
    try:
        code = fn(args)
        sys.stdout.flush()
        return 0 if code is None else code
    except ToolError as exc:
        sys.stdout.flush()
        print(f"{error_prefix}{exc.message}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        return 1
    except KeyboardInterrupt:
        return 130
    except TimeoutError as exc:
        sys.stdout.flush()
        print(f"Error: The broker did not answer within {args.timeout} ms ({exc}).", file=sys.stderr)
        return 1
    except (OSError, ConnectionError) as exc:
        sys.stdout.flush()
        print(f"Error: Connection to the broker failed: {exc.strerror or exc if isinstance(exc, OSError) else exc}",
              file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - a tool reports, it does not dump a traceback
        sys.stdout.flush()
        print(f"Error: {type(exc).__name__}: {exc}", file=sys.stderr)
        if os.environ.get("SHAREBROKER_DEBUG"):
            traceback.print_exc()
        return 1


def table(header: Sequence[str], rows: Sequence[Sequence[Any]], widths: Sequence[int | None]) -> str:
    """Rows laid out like Kafka's printf("%-Ns ...") tables: each column padded to its width
    (None: last column, no padding), one space between columns, a blank line before the table."""
    lines = []
    for row in [header, *rows]:
        cells = []
        for value, width in zip(row, widths):
            text = MISSING if value is None else str(value)
            cells.append(text if width is None else text.ljust(width))
        lines.append(" ".join(cells))
    return "\n" + "\n".join(lines) + "\n"


def width(values: Sequence[Any], minimum: int = 15) -> int:
    return max([minimum, *(len(str(v)) for v in values)])


def usage_error(parser: argparse.ArgumentParser, message: str) -> None:
    parser.error(message)  # exits 2 with the usage line


# -- pieces shared by the group tools (consumer-groups, share-groups) ------------------------------


def has_option(args: argparse.Namespace, name: str) -> bool:
    v = getattr(args, name)
    return v is not None and v is not False and v != []


def check_describe_options(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if sum(1 for o in ("members", "offsets") if has_option(args, o)) + (args.state is not None) > 1:
        usage_error(p, "Option [describe] takes at most one of these options: [members], [offsets], [state]")
    if args.state:
        usage_error(p, "Option [describe] does not take a value for [state]")


def check_action_options(p: argparse.ArgumentParser, args: argparse.Namespace, action: str) -> None:
    """The describe/list-only options used with another action."""
    if action != "describe":
        for opt in ("members", "offsets", "verbose"):
            if has_option(args, opt):
                usage_error(p, f"Option [{opt}] can only be used with [describe]")
    if args.state is not None and action not in ("describe", "list"):
        usage_error(p, "Option [state] can only be used with [describe] or [list]")
    if action == "list" and (args.group or args.all_groups):
        usage_error(p, "Option [group] and [all-groups] cannot be used with [list]")


def states_from_string(text: str, valid_states: Sequence[str]) -> list[str]:
    out = []
    for s in text.split(","):
        match = [v for v in valid_states if v.lower() == s.strip().lower()]
        if not match:
            raise ToolError(f"Invalid state list '{text}'. Valid states are: {', '.join(valid_states)}")
        out.append(match[0])
    return out


def print_group_list(list_groups: Callable[..., list[tuple[str, str]]], state: str | None,
                     valid_states: Sequence[str]) -> int:
    """--list: group ids, or with --state a GROUP/STATE table (optionally filtered)."""
    if state is not None:
        states = states_from_string(state, valid_states) if state else []
        groups = list_groups(states)
        gw = width([g for g, _ in groups])
        print(f"{'GROUP'.ljust(gw)} STATE")
        for g, group_state in groups:
            print(f"{g.ljust(gw)} {group_state}")
    else:
        for g, _ in list_groups():
            print(g)
    return 0


def delete_groups(client: Client, groups: list[str], failed: dict[str, str],
                  exception_text: Callable[[int, str | None], str]) -> list[str]:
    """DeleteGroups, one group at a time; failures go into `failed`, the deleted groups are returned."""
    succeeded = []
    for group in groups:
        _node, conn = client.coordinator_conn(group)
        resp = conn.request(42, {"groups_names": [group]})
        (r,) = resp.results
        code = code_of(r.error_code)
        if code:
            failed[group] = exception_text(code, getattr(r, "error_message", None))
        else:
            succeeded.append(group)
    return succeeded


def print_delete_result(kind: str, succeeded: list[str], failed: dict[str, str]) -> int:
    """Kafka's summary of a group deletion; `kind` is "consumer" or "share"."""
    if not failed:
        print(f"Deletion of requested {kind} groups (" + ", ".join(f"'{g}'" for g in succeeded) + ") was successful.")
        return 0
    print(f"\nError: Deletion of some {kind} groups failed:", file=sys.stderr)
    for group, text in failed.items():
        print(f"* Group '{group}' could not be deleted due to: {text}", file=sys.stderr)
    if succeeded:
        print(f"\nThese {kind} groups were deleted successfully: " + ", ".join(f"'{g}'" for g in succeeded))
    return 1
