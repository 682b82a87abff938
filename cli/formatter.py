"""Kafka's DefaultMessageFormatter for the console consumers: print.timestamp/partition/offset/
delivery/epoch/headers/key/value, key.separator, line.separator, headers.separator, null.literal."""

from __future__ import annotations

from typing import BinaryIO

from sharebroker.cli.records import Record
from sharebroker.cli.wire import ToolError

KNOWN = {"print.timestamp", "print.key", "print.offset", "print.delivery", "print.epoch", "print.partition",
         "print.headers", "print.value", "key.separator", "line.separator", "headers.separator", "null.literal"}


def parse_properties(items: list[str], what: str = "--formatter-property") -> dict[str, str]:
    out = {}
    for item in items:
        if "=" not in item:
            raise ToolError(f"Invalid {what} '{item}': expected key=value", 2)
        k, v = item.split("=", 1)
        out[k.strip()] = v
    return out


def _unescape(text: str) -> str:
    """The console tools' separators may be given as escapes: \\t, \\n, \\r, \\\\."""
    return text.encode("utf-8").decode("unicode_escape") if "\\" in text else text


class MessageFormatter:
    def __init__(self, props: dict[str, str]) -> None:
        def flag(name: str, default: bool) -> bool:
            return props[name].strip().lower() == "true" if name in props else default

        self.print_timestamp = flag("print.timestamp", False)
        self.print_key = flag("print.key", False)
        self.print_value = flag("print.value", True)
        self.print_partition = flag("print.partition", False)
        self.print_offset = flag("print.offset", False)
        self.print_delivery = flag("print.delivery", False)
        self.print_epoch = flag("print.epoch", False)
        self.print_headers = flag("print.headers", False)
        self.key_separator = _unescape(props.get("key.separator", "\t")).encode()
        self.line_separator = _unescape(props.get("line.separator", "\n")).encode()
        self.headers_separator = _unescape(props.get("headers.separator", ",")).encode()
        self.null_literal = props.get("null.literal", "null").encode()

    def format(self, r: Record) -> bytes:
        cols: list[bytes] = []
        if self.print_timestamp:
            kind = "LogAppendTime" if r.timestamp_type == 1 else "CreateTime"
            cols.append(f"{kind}:{r.timestamp}".encode() if r.timestamp >= 0 else b"NO_TIMESTAMP")
        if self.print_partition:
            cols.append(f"Partition:{r.partition}".encode())
        if self.print_offset:
            cols.append(f"Offset:{r.offset}".encode())
        if self.print_delivery:
            cols.append(f"Delivery:{r.delivery_count if r.delivery_count is not None else 'NOT_PRESENT'}".encode())
        if self.print_epoch:
            cols.append(f"Epoch:{r.leader_epoch if r.leader_epoch >= 0 else 'NOT_PRESENT'}".encode())
        if self.print_headers:
            if not r.headers:
                cols.append(b"NO_HEADERS")
            else:
                cols.append(self.headers_separator.join(
                    k.encode() + b":" + (v if v is not None else self.null_literal) for k, v in r.headers))
        if self.print_key:
            cols.append(r.key if r.key is not None else self.null_literal)
        out = self.key_separator.join(cols)
        if self.print_value:
            if cols:
                out += self.key_separator
            out += (r.value if r.value is not None else self.null_literal) + self.line_separator
        elif cols:
            out += self.line_separator
        return out

    def write(self, r: Record, stream: BinaryIO) -> None:
        stream.write(self.format(r))
        stream.flush()
