"""Reading raw settings: Java ``.properties`` files and ``KAFKA_*`` environment variables.

Both produce plain ``name -> raw string`` maps; typing and validation happen in ``definitions``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

__all__ = ["ENV_PREFIX", "PropertiesError", "env_to_config_name", "load_properties", "parse_properties"]

ENV_PREFIX = "KAFKA_"

# java.util.Properties treats only these as blanks (not \v or Unicode spaces).
_BLANKS = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class PropertiesError(ValueError):
    """A properties file that cannot be read or parsed (bad \\u escape)."""


def env_to_config_name(variable: str) -> str | None:
    """Map an Apache Kafka image style variable to a config name, or None if it has no KAFKA_ prefix.

    ``KAFKA_LOG_RETENTION_MS`` -> ``log.retention.ms``; ``___`` -> ``-``, ``__`` -> ``_``, ``_`` -> ``.``.
    """
    if not variable.startswith(ENV_PREFIX) or len(variable) == len(ENV_PREFIX):
        return None
    body = variable[len(ENV_PREFIX):]
    # Longest runs first, through placeholders that cannot occur in an environment variable name.
    body = body.replace("___", "\x00").replace("__", "\x01").replace("_", ".")
    return body.replace("\x00", "-").replace("\x01", "_").lower()


def load_properties(path: str | Path) -> dict[str, str]:
    """Read a Kafka ``server.properties``-style file; later keys win, as in Java."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        # Java reads .properties as ISO-8859-1; accept such files too.
        text = data.decode("latin-1")
    return parse_properties(text)


def parse_properties(text: str) -> dict[str, str]:
    """Parse ``.properties`` text with java.util.Properties rules.

    Comments start with ``#`` or ``!``; a key ends at the first unescaped ``=``, ``:`` or blank;
    a line ending in an odd number of backslashes continues on the next line (whose leading blanks
    are dropped); ``\\t \\n \\r \\f \\uXXXX`` escapes are decoded and any other escaped character
    stands for itself.
    """
    result: dict[str, str] = {}
    lines = re.split(r"\r\n|\r|\n", text)
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(_BLANKS)
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line):
            line = line[:-1]
            if i >= len(lines):
                break
            line += lines[i].lstrip(_BLANKS)
            i += 1
        key, value = _split(line)
        result[_unescape(key)] = _unescape(value)
    return result


def _continues(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _split(line: str) -> tuple[str, str]:
    n = len(line)
    pos = 0
    while pos < n:
        ch = line[pos]
        if ch == "\\":
            pos += 2
            continue
        if ch in "=:" or ch in _BLANKS:
            break
        pos += 1
    key = line[:pos]
    rest = pos
    while rest < n and line[rest] in _BLANKS:
        rest += 1
    if rest < n and line[rest] in "=:":
        rest += 1
        while rest < n and line[rest] in _BLANKS:
            rest += 1
    return key, line[rest:]


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        if i + 1 >= n:
            # A lone trailing backslash (end of file after a continuation) is dropped, as in Java.
            break
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2:i + 6]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise PropertiesError(f"Malformed \\uxxxx encoding in {text!r}")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def kafka_env(env: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """``config name -> (value, variable)`` for every KAFKA_* variable (known or not)."""
    found: dict[str, tuple[str, str]] = {}
    for variable in sorted(env):
        name = env_to_config_name(variable)
        if name is not None:
            found[name] = (env[variable], variable)
    return found
