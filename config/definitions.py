"""What a setting is: its definition (Kafka name, type, default, doc, validator), typed parsing of raw
strings with Kafka's ConfigDef rules, the validators, and ConfigError.

Error messages follow Kafka's ConfigDef wording ("Invalid value 0 for configuration num.partitions:
Value must be at least 1") so clients see what a Kafka broker would say.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "INT_MAX",
    "LONG_MAX",
    "AtLeast",
    "Between",
    "Check",
    "ConfigDef",
    "ConfigError",
    "ConfigSource",
    "ConfigType",
    "GroupConfigDef",
    "ListOf",
    "OneOf",
    "SettingLookup",
    "TopicConfigDef",
    "Validator",
    "require",
    "split_list",
]

SHORT_MAX = (1 << 15) - 1
INT_MAX = (1 << 31) - 1
LONG_MAX = (1 << 63) - 1
_BOUNDS = {
    "short": (-(1 << 15), SHORT_MAX),
    "int": (-(1 << 31), INT_MAX),
    "long": (-(1 << 63), LONG_MAX),
}

# A setting's effective typed value by name (lists as tuples); values differ in type per setting.
SettingLookup = Callable[[str], Any]


class ConfigSource(enum.IntEnum):
    """DescribeConfigs ConfigSource ids, as on the wire."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1  # the admin client calls it DYNAMIC_TOPIC_CONFIG
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class ConfigType(enum.IntEnum):
    """DescribeConfigs ConfigType ids (v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


_TYPES = frozenset(t.name.lower() for t in ConfigType if t is not ConfigType.UNKNOWN)


class ConfigError(ValueError):
    """An invalid or unknown setting. ``str(error)`` is the Kafka-style message; ``name`` the setting."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name
        self.message = message

    @classmethod
    def invalid(cls, name: str, value: Any, reason: str | None = None) -> ConfigError:
        text = f"Invalid value {_display(value)} for configuration {name}"
        return cls(name, f"{text}: {reason}" if reason else text)


def require(ok: bool, name: str, message: str) -> None:
    """Raise ConfigError(name, message) unless ``ok``: the form of every cross-setting rule."""
    if not ok:
        raise ConfigError(name, message)


def _display(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


# ---------------------------------------------------------------------------------------------
# Typed parsing (Kafka ConfigDef.parseType rules) and validators
# ---------------------------------------------------------------------------------------------

_INTEGER_RE = re.compile(r"[+-]?[0-9]+")
_DOUBLE_RE = re.compile(r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?")
_LIST_SPLIT = re.compile(r"\s*,\s*")


def split_list(text: str) -> list[str]:
    """Kafka's comma-separated list syntax: blanks around commas are dropped; blank text is empty."""
    text = text.strip()
    return _LIST_SPLIT.split(text) if text else []


def _parse_typed(name: str, type_: str, raw: str) -> Any:
    """Parse a raw string to the Python value for ``type_``; lists become tuples."""
    text = raw.strip()
    if type_ == "boolean":
        low = text.lower()
        if low == "true":
            return True
        if low == "false":
            return False
        raise ConfigError.invalid(name, text, "Expected value to be either true or false")
    if type_ in _BOUNDS:
        if _INTEGER_RE.fullmatch(text):
            value = int(text)
            low_bound, high_bound = _BOUNDS[type_]
            if low_bound <= value <= high_bound:
                return value
        raise ConfigError.invalid(name, text, f"Not a number of type {type_.upper()}")
    if type_ == "double":
        if _DOUBLE_RE.fullmatch(text):
            return float(text.rstrip("fFdD").replace("Infinity", "inf"))
        raise ConfigError.invalid(name, text, "Not a number of type DOUBLE")
    if type_ == "list":
        return tuple(split_list(text))
    return text  # string, password, class


class AtLeast:
    """Kafka ``Range.atLeast``."""

    def __init__(self, low: int | float) -> None:
        self.low = low

    def __call__(self, name: str, value: Any) -> None:
        if value < self.low:
            raise ConfigError.invalid(name, value, f"Value must be at least {self.low}")

    def describe(self) -> str:
        return f"[{self.low},...]"


class Between:
    """Kafka ``Range.between`` (inclusive)."""

    def __init__(self, low: int | float, high: int | float) -> None:
        self.low = low
        self.high = high

    def __call__(self, name: str, value: Any) -> None:
        if value < self.low:
            raise ConfigError.invalid(name, value, f"Value must be at least {self.low}")
        if value > self.high:
            raise ConfigError.invalid(name, value, f"Value must be no more than {self.high}")

    def describe(self) -> str:
        return f"[{self.low},...,{self.high}]"


class OneOf:
    """Kafka ``ValidString.in`` (case-sensitive)."""

    def __init__(self, *values: str) -> None:
        self.values = values

    def __call__(self, name: str, value: Any) -> None:
        if value not in self.values:
            raise ConfigError.invalid(name, value, f"String must be one of: {', '.join(self.values)}")

    def describe(self) -> str:
        return f"[{', '.join(self.values)}]"


class ListOf:
    """Kafka ``ValidList.in``: every element must be one of ``values`` (an empty list is allowed)."""

    def __init__(self, *values: str) -> None:
        self.values = values

    def __call__(self, name: str, value: Any) -> None:
        for item in value:
            if item not in self.values:
                raise ConfigError.invalid(name, item, f"String must be one of: {', '.join(self.values)}")

    def describe(self) -> str:
        return f"[{', '.join(self.values)}]"


class Check:
    """A validator from a predicate, with a Kafka-style reason and range text."""

    def __init__(self, ok: Callable[[Any], bool], reason: str, text: str) -> None:
        self.ok = ok
        self.reason = reason
        self.text = text

    def __call__(self, name: str, value: Any) -> None:
        if not self.ok(value):
            raise ConfigError.invalid(name, value, self.reason)

    def describe(self) -> str:
        return self.text


Validator = Callable[[str, Any], None]


# ---------------------------------------------------------------------------------------------
# Definitions
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigDef:
    """One setting: Kafka name, type, typed default (None = no default), doc, validator."""

    name: str
    type: str
    default: Any
    doc: str
    validator: Validator | None = None
    dynamic: bool = False

    def __post_init__(self) -> None:
        if self.type not in _TYPES:
            raise ValueError(f"{self.name}: unknown config type {self.type!r}")
        if isinstance(self.default, list):
            object.__setattr__(self, "default", tuple(self.default))

    def parse(self, raw: str) -> Any:
        """Raw string -> validated typed value (lists as tuples); raises ConfigError."""
        value = _parse_typed(self.name, self.type, raw)
        if self.validator is not None:
            self.validator(self.name, value)
        return value

    def describe_range(self) -> str:
        describe = getattr(self.validator, "describe", None)
        return describe() if describe is not None else ""

    @property
    def config_type(self) -> int:
        return int(ConfigType[self.type.upper()])

    @property
    def is_sensitive(self) -> bool:
        return self.type == "password"

    def to_string(self, value: Any) -> str | None:
        """Kafka's ``ConfigDef.convertToString``; None stays None."""
        if value is None:
            return None
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (list, tuple)):
            return ",".join(str(v) for v in value)
        if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
            return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
        return str(value)

    def shown(self, value: Any) -> str | None:
        """The value as DescribeConfigs shows it: the string form, hidden (None) for a password."""
        return None if self.is_sensitive else self.to_string(value)


@dataclass(frozen=True)
class TopicConfigDef(ConfigDef):
    """A topic-level setting; ``synonyms`` are the broker settings it falls back to, with the factor
    that converts each to the topic unit (e.g. log.retention.hours x 3600000 -> retention.ms)."""

    synonyms: tuple[tuple[str, int], ...] = ()

    @property
    def synonym(self) -> str | None:
        return self.synonyms[0][0] if self.synonyms else None

    @property
    def broker_synonyms(self) -> tuple[str, ...]:
        """The broker settings this one falls back to, most specific first."""
        return tuple(name for name, _ in self.synonyms)

    @property
    def attribute(self) -> str:
        return self.name.replace(".", "_")


@dataclass(frozen=True)
class GroupConfigDef(ConfigDef):
    """A group-level setting; its default is the broker ``synonym``, its value must lie within the
    broker settings ``min_config`` / ``max_config`` when those are named."""

    synonym: str | None = None
    min_config: str | None = None
    max_config: str | None = None

    @property
    def attribute(self) -> str:
        return self.name.replace(".", "_")
