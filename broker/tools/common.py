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

from broker.tools.wire import Client, ToolError

DEFAULT_TIMEOUT_MS = 30000
MISSING = "-"


def add_connection_options(p: argparse.ArgumentParser, *, timeout_help: str | None = None) -> None:
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]",
                   help="REQUIRED: the server(s) to connect to")
    p.add_argument("--command-config", metavar="FILE",
                   help="client properties file (client.id, request.timeout.ms; only PLAINTEXT is supported)")
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
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol != "PLAINTEXT":
        raise ToolError(f"security.protocol={protocol} is not supported by these tools (PLAINTEXT only).")
    timeout = args.timeout
    if "request.timeout.ms" in props and timeout == DEFAULT_TIMEOUT_MS:
        try:
            timeout = int(props["request.timeout.ms"])
        except ValueError:
            raise ToolError(f"request.timeout.ms must be an integer, got '{props['request.timeout.ms']}'", 2) from None
    return Client(args.bootstrap_server, timeout_ms=timeout, client_id=props.get("client.id", default_client_id))


def run_tool(fn: Callable[[argparse.Namespace], int | None], args: argparse.Namespace) -> int:
    """Run a tool body: ToolError -> 'Error: ...' on stderr with its exit code."""
    try:
        code = fn(args)
        sys.stdout.flush()
        return 0 if code is None else code
    except ToolError as exc:
        sys.stdout.flush()
        print(f"Error: {exc.message}", file=sys.stderr)
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


def split_csv(values: Sequence[str] | None) -> list[str]:
    out: list[str] = []
    for v in values or ():
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return out
