"""Kafka's `sasl.jaas.config` values: `<LoginModule class> <flag> key="value" ...;` (Kafka's
JaasConfig parser, without a JAAS file: the broker reads only the property values)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sharebroker.config.definitions import ConfigError

_FLAGS = ("required", "requisite", "sufficient", "optional")
_TOKEN = re.compile(r'\s*(?:"((?:\\.|[^"\\])*)"|([^\s=;"]+)|(=)|(;))', re.DOTALL)


@dataclass(frozen=True)
class LoginModule:
    name: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def _tokens(text: str, setting: str) -> list[tuple[str, str]]:
    """(kind, text) with kind "q" (quoted), "w" (word), "=" or ";"."""
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ConfigError(setting, f"Value not specified for key or unexpected character in JAAS config near "
                              f"{text[pos:pos + 20]!r}")
        pos = m.end()
        if m.group(1) is not None:
            out.append(("q", re.sub(r"\\(.)", r"\1", m.group(1))))
        elif m.group(2) is not None:
            out.append(("w", m.group(2)))
        elif m.group(3):
            out.append(("=", "="))
        elif m.group(4):
            out.append((";", ";"))
    return out


def parse_jaas(text: str, setting: str = "sasl.jaas.config") -> list[LoginModule]:
    """Every login module of a JAAS configuration value; ConfigError as Kafka rejects it."""
    tokens = _tokens(text, setting)
    modules: list[LoginModule] = []
    i = 0
    while i < len(tokens):
        if tokens[i][0] != "w" or i + 1 >= len(tokens) or tokens[i + 1][0] != "w":
            raise ConfigError(setting, "JAAS config entry not terminated by semi-colon or missing login module "
                              "name and control flag")
        name, flag = tokens[i][1], tokens[i + 1][1].lower()
        if flag not in _FLAGS:
            raise ConfigError(setting, f"Invalid login module control flag '{tokens[i + 1][1]}' in JAAS config")
        i += 2
        options: dict[str, str] = {}
        while i < len(tokens) and tokens[i][0] != ";":
            if i + 2 >= len(tokens) or tokens[i][0] != "w" or tokens[i + 1][0] != "=" or tokens[i + 2][0] not in "qw":
                raise ConfigError(setting, "Value not specified for key in JAAS config")
            options[tokens[i][1]] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise ConfigError(setting, "JAAS config entry not terminated by semi-colon")
        i += 1
        modules.append(LoginModule(name, flag, options))
    if not modules:
        raise ConfigError(setting, "JAAS config property does not contain any login modules")
    return modules


def single_module(text: str, setting: str) -> LoginModule:
    """Kafka requires exactly one login module in a listener's JAAS configuration."""
    modules = parse_jaas(text, setting)
    if len(modules) != 1:
        raise ConfigError(setting, f"JAAS config property contains {len(modules)} login modules, should be 1 module")
    return modules[0]


__all__ = ["LoginModule", "parse_jaas", "single_module"]
