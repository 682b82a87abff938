"""Listeners: ``NAME://host:port`` endpoints, the listener -> security protocol map, which listeners this
broker serves (controller listeners skipped) and which it advertises."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sharebroker.config.definitions import ConfigError, SettingLookup, split_list

__all__ = ["SECURITY_PROTOCOLS", "Listener", "parse_listeners", "parse_protocol_map", "resolve_advertised",
           "resolve_listeners"]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_LISTENER_RE = re.compile(r"(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)")


@dataclass(frozen=True)
class Listener:
    """One endpoint. ``host`` "" means all interfaces (or, advertised, "the address the broker picks")."""

    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def parse_listeners(value: str, config_name: str = "listeners") -> list[Listener]:
    """Parse ``NAME://host:port,...`` (IPv6 hosts in brackets); names are upper-cased like Kafka's."""
    result: list[Listener] = []
    for item in split_list(value):
        match = _LISTENER_RE.fullmatch(item)
        if match is None or not match.group(1):
            raise ConfigError.invalid(config_name, value, f"Unable to parse {item} to a broker endpoint")
        port = int(match.group(3))
        if not 0 <= port <= 65535:
            raise ConfigError.invalid(config_name, value, f"Port {port} of {item} must be between 0 and 65535")
        result.append(Listener(match.group(1).upper(), match.group(2), port))
    return result


def parse_protocol_map(value: str, config_name: str) -> dict[str, str]:
    """Parse listener.security.protocol.map: ``NAME:PROTOCOL,...`` with upper-cased names and protocols."""
    mapping: dict[str, str] = {}
    for item in split_list(value):
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or not name.strip() or protocol not in SECURITY_PROTOCOLS:
            raise ConfigError.invalid(config_name, value, f"Map entry {item} must be LISTENER_NAME:PROTOCOL with PROTOCOL "
                                      f"one of {', '.join(SECURITY_PROTOCOLS)}")
        mapping[name.strip().upper()] = protocol
    return mapping


def _controller_names(get: SettingLookup) -> set[str]:
    raw = get("controller.listener.names")
    return {n.upper() for n in split_list(raw) if n} if raw else set()


def resolve_listeners(get: SettingLookup) -> list[Listener]:
    """The listeners this broker serves, with their security protocol; ConfigError if any cannot be served."""
    protocols = parse_protocol_map(get("listener.security.protocol.map"), "listener.security.protocol.map")
    controllers = _controller_names(get)
    raw = get("listeners")
    parsed = parse_listeners(raw, "listeners")
    names = [listener.name for listener in parsed]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError.invalid("listeners", raw, f"Each listener must have a different name; repeated: {', '.join(duplicates)}")
    served: list[Listener] = []
    for listener in parsed:
        if listener.name in controllers:
            continue
        protocol = protocols.get(listener.name)
        if protocol is None:
            raise ConfigError.invalid("listeners", raw, f"No security protocol defined for listener {listener.name} "
                                      "in listener.security.protocol.map")
        served.append(Listener(listener.name, listener.host, listener.port, protocol))
    if not served:
        raise ConfigError.invalid("listeners", raw, "At least one non-controller listener is required")
    ports = [(listener.host, listener.port) for listener in served if listener.port != 0]
    if len(ports) != len(set(ports)):
        raise ConfigError.invalid("listeners", raw, "Each listener must have a different host:port")
    return served


def resolve_advertised(get: SettingLookup, listeners: list[Listener]) -> list[Listener]:
    """What clients are told for each served listener; ``listeners`` themselves when none is advertised."""
    raw = get("advertised.listeners")
    if raw is None or not raw.strip():
        return list(listeners)
    known = {listener.name: listener for listener in listeners}
    controllers = _controller_names(get)
    result: list[Listener] = []
    for adv in parse_listeners(raw, "advertised.listeners"):
        if adv.name in controllers:
            continue
        if adv.name not in known:
            raise ConfigError.invalid("advertised.listeners", raw, f"Listener {adv.name} is not defined in listeners; "
                                      f"advertised listener names must be among: {', '.join(known)}")
        if adv.host in ("0.0.0.0", "::"):
            raise ConfigError.invalid("advertised.listeners", raw, f"advertised.listeners cannot use the nonroutable "
                                      f"meta-address {adv.host}. Use a routable IP address.")
        result.append(Listener(adv.name, adv.host, adv.port, known[adv.name].security_protocol))
    if not result:
        return list(listeners)
    return result
