"""`sharebroker configs`: kafka-configs.sh (Kafka's ConfigCommand) over the wire.

Topics, brokers (one, or the cluster default), broker loggers, client-metrics resources and groups
are described and altered with DescribeConfigs and IncrementalAlterConfigs; the quotas of clients,
users and ips with DescribeClientQuotas and AlterClientQuotas; users' SCRAM credentials with
Describe/AlterUserScramCredentials. Options, argument rules, output lines and messages are the
tool's, and so are the exit codes: every error exits 1, usage errors included. What the cluster
refuses is printed as the tool prints a failed future ("Error while executing config command
with args ..." and the exception), without the Java stack trace. A broker that does not serve an
API the command needs is named with the API."""

from __future__ import annotations

import argparse
import hashlib
import ipaddress
import os
import re
import socket
import sys
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, NoReturn

from kio.schema.errors import ErrorCode

from sharebroker.cli.common import add_connection_options, client_from_args, load_properties, run_tool
from sharebroker.cli.wire import Client, Connection, ToolError, api_display_name, code_of, exception_text
from sharebroker.protocol.topic_names import invalid_topic_reason

TOPICS, CLIENTS, USERS, BROKERS, IPS, CLIENT_METRICS, GROUPS = (
    "topics", "clients", "users", "brokers", "ips", "client-metrics", "groups")
BROKER_LOGGERS = "broker-loggers"
# ConfigType.values :+ broker-loggers, in Kafka's order (it is printed in a message).
ENTITY_TYPES = (TOPICS, CLIENTS, USERS, BROKERS, IPS, CLIENT_METRICS, GROUPS, BROKER_LOGGERS)
QUOTA_TYPES = (USERS, CLIENTS, BROKERS, IPS)  # the types that take --entity-default

# (option dest, entity type) of the shortcut flags, in Kafka's order.
ENTITY_FLAGS = (("topic", TOPICS), ("client", CLIENTS), ("user", USERS), ("broker", BROKERS),
                ("broker_logger", BROKER_LOGGERS), ("ip", IPS), ("client_metrics", CLIENT_METRICS), ("group", GROUPS))
DEFAULT_FLAGS = (("client_defaults", CLIENTS), ("user_defaults", USERS), ("broker_defaults", BROKERS),
                 ("ip_defaults", IPS))

# ConfigResource.Type ids
TOPIC_RESOURCE, BROKER_RESOURCE, BROKER_LOGGER_RESOURCE, CLIENT_METRICS_RESOURCE, GROUP_RESOURCE = 2, 4, 8, 16, 32
# DescribeConfigs sources on the wire, by the names the admin client gives them (ConfigEntry.ConfigSource).
SOURCE_NAMES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
                4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
                7: "DYNAMIC_CLIENT_METRICS_CONFIG", 8: "DYNAMIC_GROUP_CONFIG"}
TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, CLIENT_METRICS_CONFIG, GROUP_CONFIG = 1, 2, 3, 7, 8
SET, DELETE = 0, 1

QUOTA_CONFIGS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")
IP_QUOTA_CONFIGS = ("connection_creation_rate",)
QUOTA_ENTITY = {USERS: "user", CLIENTS: "client-id", IPS: "ip"}
QUOTA_ENTITY_LABEL = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
# SCRAM mechanism name: (wire type, enum name in messages, hash, minimum iterations)
SCRAM_MECHANISMS = {"SCRAM-SHA-256": (1, "SCRAM_SHA_256", "sha256", 4096),
                    "SCRAM-SHA-512": (2, "SCRAM_SHA_512", "sha512", 4096)}
DEFAULT_SCRAM_ITERATIONS = 4096

INCREMENTAL_ALTER_UNSUPPORTED = (
    "The INCREMENTAL_ALTER_CONFIGS API is not supported by the cluster. The API is supported starting from version "
    "2.3.0. You may want to use an older version of this tool to interact with your cluster, or upgrade your brokers "
    "to version 2.3.0 or newer to avoid this error.")


class ExecutionError(ToolError):
    """What the cluster refused, printed as ConfigCommand prints any other exception: the command
    line it ran, then the exception (a failed future is an ExecutionException around it)."""

    def __init__(self, command_args: list[str], exception: str, *, future: bool = True) -> None:
        wrapped = f"java.util.concurrent.ExecutionException: {exception}" if future else exception
        super().__init__(f"Error while executing config command with args '{' '.join(command_args)}'\n{wrapped}")


def _kafka_exception(code: int, message: str | None) -> str:
    return f"org.apache.kafka.common.errors.{exception_text(code, message)}"


class _EntityName(argparse.Action):
    """--entity-name NAME and --entity-default (a ""), kept in command-line order: with users and
    clients together, the names pair with the types in that order."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        namespace.entity_names = [*(namespace.entity_names or []), values or ""]
        if option_string == "--entity-default":
            namespace.entity_default = True
        else:
            namespace.entity_name_values = [*(namespace.entity_name_values or []), values]


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("configs", help="describe and alter configs of topics, brokers, groups, clients, users and ips "
                                       "(kafka-configs.sh)",
                       description="This tool helps to manipulate and describe entity config for a topic, client, "
                                   "user, broker, ip, client-metrics or group")
    add_connection_options(p, bootstrap_required=False)
    p.add_argument("--bootstrap-controller", metavar="HOST:PORT", help="the controllers to connect to (not supported)")
    p.add_argument("--alter", action="store_true", help="Alter the configuration for the entity.")
    p.add_argument("--describe", action="store_true", help="List configs for the given entity.")
    p.add_argument("--all", action="store_true",
                   help="List all configs for the given entity, including static configs if available.")
    p.add_argument("--entity-type", action="append", metavar="TYPE",
                   help="Type of entity (topics/clients/users/brokers/broker-loggers/ips/client-metrics/groups)")
    p.add_argument("--entity-name", action=_EntityName, dest="entity_names", metavar="NAME",
                   help="Name of entity (topic name/client id/user principal name/broker id/ip/client metrics/group id)")
    p.add_argument("--entity-default", action=_EntityName, dest="entity_names", nargs=0,
                   help="Default entity name for clients/users/brokers/ips (applies to corresponding entity type)")
    p.add_argument("--add-config", metavar="K=V[,K=V]",
                   help="Key Value pairs of configs to add. Square brackets can be used to group values which "
                        "contain commas: 'k1=v1,k2=[v1,v2,v2],k3=v3'.")
    p.add_argument("--add-config-file", metavar="FILE",
                   help="Path to a properties file with configs to add. See add-config for a list of valid configurations.")
    p.add_argument("--delete-config", action="append", metavar="K[,K]", help="config keys to remove 'k1,k2'")
    p.add_argument("--topic", help="The topic's name.")
    p.add_argument("--client", help="The client's ID.")
    p.add_argument("--client-defaults", action="store_true", help="The config defaults for all clients.")
    p.add_argument("--user", help="The user's principal name.")
    p.add_argument("--user-defaults", action="store_true", help="The config defaults for all users.")
    p.add_argument("--broker", help="The broker's ID.")
    p.add_argument("--broker-defaults", action="store_true", help="The config defaults for all brokers.")
    p.add_argument("--broker-logger", help="The broker's ID for its logger config.")
    p.add_argument("--ip-defaults", action="store_true", help="The config defaults for all IPs.")
    p.add_argument("--ip", help="The IP address.")
    p.add_argument("--group", help="The group's ID.")
    p.add_argument("--client-metrics", help="The client metrics config resource name.")
    p.set_defaults(handler=lambda args: run(p, args), entity_names=None, entity_name_values=None, entity_default=False,
                   on_unknown_args=_unrecognized)

    def error(message: str) -> NoReturn:
        # kafka-configs.sh exits 1 on every error, a bad command line included.
        print(message, file=sys.stderr)
        sys.exit(1)

    p.error = error  # type: ignore[method-assign]
    return p


def _unrecognized(unknown: list[str]) -> int:
    """joptsimple's message for an option the tool does not know."""
    print(f"{unknown[0].lstrip('-')} is not a recognized option", file=sys.stderr)
    return 1


@dataclass
class Command:
    args: argparse.Namespace
    entity_types: list[str]
    entity_names: list[str]

    @property
    def command_args(self) -> list[str]:
        return list(getattr(self.args, "command_args", []))


def _usage_exit(p: argparse.ArgumentParser, message: str) -> NoReturn:
    """CommandLineUtils.printUsageAndExit: the message and the help on stderr, exit 1."""
    print(message, file=sys.stderr)
    p.print_help(sys.stderr)
    sys.exit(1)


def _is_int(text: str) -> bool:
    return re.fullmatch(r"[+-]?\d+", text) is not None and -2**31 <= int(text) < 2**31


def _is_ip_or_host(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        pass
    try:
        socket.getaddrinfo(text, None)
        return True
    except (OSError, UnicodeError):
        return False


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> Command:
    """ConfigCommandOptions.checkArgs, in its order and with its messages."""
    if sum((args.alter, args.describe)) != 1:
        _usage_exit(p, "Command must include exactly one action: --describe, --alter")
    if args.describe:
        for opt in ("add_config", "delete_config"):
            if getattr(args, opt) is not None:
                _usage_exit(p, f"Option \"[describe]\" can't be used with option \"[{opt.replace('_', '-')}]\"")
    types = list(args.entity_type or []) + [t for opt, t in ENTITY_FLAGS if getattr(args, opt) is not None] \
        + [t for opt, t in DEFAULT_FLAGS if getattr(args, opt)]
    names = list(args.entity_names or []) + [getattr(args, opt) for opt, _ in ENTITY_FLAGS if getattr(args, opt) is not None] \
        + ["" for opt, _ in DEFAULT_FLAGS if getattr(args, opt)]
    extra = list(types)
    for t in dict.fromkeys(types):
        extra.remove(t)
    if extra:
        raise ToolError(f"Duplicate entity type(s) specified: {','.join(extra)}")
    if args.bootstrap_server is None and args.bootstrap_controller is None:
        raise ToolError("Either --bootstrap-server or --bootstrap-controller must be specified.")
    for t in types:
        if t not in ENTITY_TYPES:
            raise ToolError(f"Invalid entity type {t}, the entity type must be one of {', '.join(ENTITY_TYPES)} "
                            "with a --bootstrap-server or --bootstrap-controller argument")
    if not types:
        raise ToolError("At least one entity type must be specified")
    if len(types) > 1 and set(types) != {USERS, CLIENTS}:
        raise ToolError(f"Only '{USERS}' and '{CLIENTS}' entity types may be specified together")
    generic = args.entity_names is not None or args.entity_type is not None
    flags = any(getattr(args, opt) is not None for opt, _ in ENTITY_FLAGS) or any(getattr(args, o) for o, _ in DEFAULT_FLAGS)
    if generic and flags:
        raise ToolError("--entity-{type,name,default} should not be used in conjunction with specific entity flags")
    has_name = any(names)
    has_default = "" in names
    if args.bootstrap_server is not None and args.bootstrap_controller is not None:
        raise ToolError("Only one of --bootstrap-server or --bootstrap-controller can be specified")
    given = (args.entity_name_values or [])[:1]  # joptsimple's valueOf: the first --entity-name
    if has_name and (BROKERS in types or BROKER_LOGGERS in types):
        for broker_id in given + [v for v in (args.broker, args.broker_logger) if v is not None]:
            if not _is_int(broker_id):
                raise ToolError(f"The entity name for {types[0]} must be a valid integer broker id, but it is: {broker_id}")
    if has_name and IPS in types:
        for ip in given + ([args.ip] if args.ip is not None else []):
            if not _is_ip_or_host(ip):
                raise ToolError(f"The entity name for {types[0]} must be a valid IP or resolvable host, but it is: {ip}")
    if args.describe:
        if not any(t in types for t in QUOTA_TYPES) and args.entity_default:
            raise ToolError(f"--entity-default must not be specified with --describe of {','.join(types)}")
        if BROKER_LOGGERS in types and not has_name:
            raise ToolError(f"An entity name must be specified with --describe of {','.join(types)}")
    if args.alter:
        if any(t in types for t in QUOTA_TYPES):
            if not has_name and not has_default:
                raise ToolError("An entity-name or default entity must be specified with --alter of users, clients, "
                                "brokers or ips")
        elif not has_name:
            raise ToolError(f"An entity name must be specified with --alter of {','.join(types)}")
        if args.add_config is not None and args.add_config_file is not None:
            raise ToolError("Only one of --add-config or --add-config-file must be specified")
        if args.add_config is None and args.add_config_file is None and args.delete_config is None:
            raise ToolError("At least one of --add-config, --add-config-file, or --delete-config must be specified "
                            "with --alter")
    return Command(args, types, names)


def run(p: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if getattr(args, "command_args", None) == []:  # CommandLineUtils.maybePrintHelpOrVersion
        _usage_exit(p, p.description or "")

    def body(a: argparse.Namespace) -> int:
        command = check_args(p, a)
        if a.bootstrap_controller is not None:
            raise ToolError("--bootstrap-controller is not supported by this tool: sharebroker has no controller "
                            "listener; use --bootstrap-server.")
        with client_from_args(a, default_client_id="sharebroker-configs") as client:
            if a.alter and len(command.entity_types) != len(command.entity_names):
                raise ToolError("An entity name must be specified for every entity type")
            return alter(client, command) if a.alter else describe(client, command)

    return run_tool(body, args, error_prefix="")


# -- --add-config / --delete-config ---------------------------------------------------------------

_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"  # Kafka's lookahead: not inside [...]


def parse_add_config(text: str) -> dict[str, str]:
    """--add-config as ConfigCommand.parseConfigsToBeAdded splits it: pairs at commas outside
    brackets, key and value at an '=' outside brackets, brackets removed from the value."""
    pairs = re.split("," + _OUTSIDE_BRACKETS, text)
    while len(pairs) > 1 and pairs[-1] == "":  # Java's split drops trailing empty strings
        pairs.pop()
    split = [re.split(r"\s*=\s*" + _OUTSIDE_BRACKETS, pair) for pair in pairs]
    if not all(len(kv) == 2 for kv in split):
        raise ToolError("Invalid entity config: all configs to be added must be in the format \"key=val\" or  "
                        "\"key=[val1,val2]\" to group values which contain commas.")
    return {k.strip(): re.sub(r"\[?\]?", "", v).strip() for k, v in split}


def configs_to_add(args: argparse.Namespace) -> dict[str, str]:
    props = load_properties(args.add_config_file) if args.add_config_file is not None else {}
    if args.add_config is not None:
        props.update(parse_add_config(args.add_config))
    for key in props:
        if not re.fullmatch(r"[a-zA-Z0-9._-]*", key):
            raise ToolError(f"Invalid character found for config key: {key}")
    return props


def configs_to_delete(args: argparse.Namespace) -> list[str]:
    return [k.strip() for item in args.delete_config or [] for k in item.split(",")]


def _scala_set(items: list[str]) -> str:
    return f"Set({', '.join(items)})"


def _scala_buffer(items: list[str]) -> str:
    return f"ArrayBuffer({', '.join(items)})"


# -- DescribeConfigs / IncrementalAlterConfigs ------------------------------------------------------


@dataclass
class ConfigEntry:
    name: str
    value: str | None
    source: int
    sensitive: bool
    synonyms: list[tuple[str, str | None, int]]

    def line(self) -> str:
        synonyms = ", ".join(f"{SOURCE_NAMES.get(s, 'UNKNOWN')}:{n}={_java(v)}" for n, v, s in self.synonyms)
        return f"  {self.name}={_java(self.value)} sensitive={str(self.sensitive).lower()} synonyms={{{synonyms}}}"


def _java(value: str | None) -> str:
    return "null" if value is None else value


def _resource(command: Command, entity_type: str, name: str) -> tuple[int, int | None]:
    """(resource type, the source of a dynamic config of it), as getResourceConfig chooses them."""
    if entity_type == TOPICS:
        if name:
            reason = invalid_topic_reason(name)
            if reason is not None:
                raise ExecutionError(command.command_args, "org.apache.kafka.common.errors.InvalidTopicException: "
                                     f"Topic name is invalid: {reason}", future=False)
        return TOPIC_RESOURCE, TOPIC_CONFIG
    if entity_type == BROKERS:
        if name == "":
            return BROKER_RESOURCE, DYNAMIC_DEFAULT_BROKER_CONFIG
        _require_broker_id(entity_type, name)
        return BROKER_RESOURCE, DYNAMIC_BROKER_CONFIG
    if entity_type == BROKER_LOGGERS:
        if name:
            _require_broker_id(entity_type, name)
        return BROKER_LOGGER_RESOURCE, None
    if entity_type == CLIENT_METRICS:
        return CLIENT_METRICS_RESOURCE, CLIENT_METRICS_CONFIG
    if entity_type == GROUPS:
        return GROUP_RESOURCE, GROUP_CONFIG
    raise ToolError(f"Invalid entity type: {entity_type}")


def _require_broker_id(entity_type: str, name: str) -> None:
    if not _is_int(name):
        raise ToolError(f"The entity name for {entity_type} must be a valid integer broker id, found: {name}")


def _config_conn(client: Client, resource_type: int, name: str) -> Connection:
    """A broker's own resource goes to that broker (as the admin client sends it), the others anywhere."""
    if resource_type in (BROKER_RESOURCE, BROKER_LOGGER_RESOURCE) and name:
        return client.conn(int(name))
    return client.boot()


def resource_configs(client: Client, command: Command, entity_type: str, name: str, *, synonyms: bool,
                     describe_all: bool) -> list[ConfigEntry]:
    """ConfigCommand.getResourceConfig: the entries DescribeConfigs reports, only the dynamic ones
    unless describe_all, sorted by name."""
    resource_type, dynamic_source = _resource(command, entity_type, name)
    resp = _config_conn(client, resource_type, name).request(32, {
        "resources": [{"resource_type": resource_type, "resource_name": name, "configuration_keys": None}],
        "include_synonyms": synonyms, "include_documentation": False})
    (result,) = resp.results
    if code_of(result.error_code):
        raise ExecutionError(command.command_args, _kafka_exception(result.error_code, result.error_message))
    entries = [ConfigEntry(c.name, c.value, int(c.config_source), bool(c.is_sensitive),
                           [(s.name, s.value, int(s.source)) for s in getattr(c, "synonyms", ())])
               for c in result.configs]
    if not describe_all and dynamic_source is not None:
        entries = [e for e in entries if e.source == dynamic_source]
    return sorted(entries, key=lambda e: e.name)


def incremental_alter(conn: Connection, resource_type: int, name: str,
                      changes: list[tuple[str, int, str | None]]) -> tuple[int, str | None]:
    """One resource's IncrementalAlterConfigs: (error code, message) of its answer."""
    resp = conn.request(44, {"resources": [{"resource_type": resource_type, "resource_name": name,
                                            "configs": [{"name": k, "config_operation": op, "value": v}
                                                        for k, op, v in changes]}],
                             "validate_only": False})
    (r,) = resp.responses
    return code_of(r.error_code), r.error_message


def _alter_resource(client: Client, command: Command, entity_type: str, name: str, deletes: list[str],
                    adds: dict[str, str]) -> None:
    resource_type, _ = _resource(command, entity_type, name)
    if entity_type == BROKER_LOGGERS:
        valid = {e.name for e in resource_configs(client, command, entity_type, name, synonyms=True, describe_all=False)}
        invalid = [k for k in deletes if k not in valid] + [k for k in adds if k not in valid]
        if invalid:
            raise ToolError(f"Invalid broker logger(s): {','.join(invalid)}")
    else:
        old = {e.name for e in resource_configs(client, command, entity_type, name, synonyms=False, describe_all=False)}
        invalid = [k for k in deletes if k not in old]
        if invalid:
            raise ToolError(f"Invalid config(s): {','.join(invalid)}")
    conn = _config_conn(client, resource_type, name)
    if not conn.supports(44):
        raise ToolError(INCREMENTAL_ALTER_UNSUPPORTED)
    changes: list[tuple[str, int, str | None]] = [(k, DELETE, "") for k in deletes]
    changes += [(k, SET, v) for k, v in adds.items()]
    code, message = incremental_alter(conn, resource_type, name, changes)
    if code == ErrorCode.unsupported_version and entity_type != BROKER_LOGGERS:
        raise ToolError(INCREMENTAL_ALTER_UNSUPPORTED)
    if code:
        raise ExecutionError(command.command_args, _kafka_exception(code, message))


# -- alter -----------------------------------------------------------------------------------------


def alter(client: Client, command: Command) -> int:
    """ConfigCommand.alterConfig."""
    types, names = command.entity_types, command.entity_names
    head_type, head_name = types[0], names[0]
    adds = configs_to_add(command.args)
    deletes = configs_to_delete(command.args)
    if head_type in (TOPICS, CLIENT_METRICS, BROKERS, GROUPS, BROKER_LOGGERS):
        _alter_resource(client, command, head_type, head_name, deletes, adds)
    elif head_type in (USERS, CLIENTS):
        _alter_user_or_client(client, command, adds, deletes)
    elif head_type == IPS:
        unknown = [k for k in [*adds, *deletes] if k not in IP_QUOTA_CONFIGS]
        if unknown:
            raise ToolError(f"Only connection quota configs can be added for '{IPS}' using --bootstrap-server. "
                            f"Unexpected config names: {','.join(unknown)}")
        _alter_quotas(client, command, adds, deletes)
    else:
        raise ToolError(f"Unsupported entity type: {head_type}")
    if head_name:
        print(f"Completed updating config for {head_type[:-1]} {head_name}.")
    else:
        print(f"Completed updating default config for {head_type} in the cluster.")
    return 0


def _alter_user_or_client(client: Client, command: Command, adds: dict[str, str], deletes: list[str]) -> None:
    types, names = command.entity_types, command.entity_names
    quota_adds = any(k in QUOTA_CONFIGS for k in adds)
    quota_deletes = any(k in QUOTA_CONFIGS for k in deletes)
    scram_adds = {k: v for k, v in adds.items() if k in SCRAM_MECHANISMS}
    scram_deletes = [k for k in deletes if k in SCRAM_MECHANISMS]
    unknown_adds = [k for k in adds if k not in SCRAM_MECHANISMS and k not in QUOTA_CONFIGS]
    unknown_deletes = [k for k in deletes if k not in SCRAM_MECHANISMS and k not in QUOTA_CONFIGS]
    if types[0] == CLIENTS or len(types) == 2:
        if unknown_adds or scram_adds:
            raise ToolError(f"Only quota configs can be added for '{CLIENTS}' using --bootstrap-server. "
                            f"Unexpected config names: {_scala_set(unknown_adds + list(scram_adds))}")
        if unknown_deletes or scram_deletes:
            raise ToolError(f"Only quota configs can be deleted for '{CLIENTS}' using --bootstrap-server. "
                            f"Unexpected config names: {_scala_buffer(unknown_deletes + scram_deletes)}")
    else:
        if unknown_adds:
            raise ToolError(f"Only quota and SCRAM credential configs can be added for '{USERS}' using "
                            f"--bootstrap-server. Unexpected config names: {_scala_set(unknown_adds)}")
        if unknown_deletes:
            raise ToolError(f"Only quota and SCRAM credential configs can be deleted for '{USERS}' using "
                            f"--bootstrap-server. Unexpected config names: {_scala_buffer(unknown_deletes)}")
        if scram_adds or scram_deletes:
            if "" in names:
                raise ToolError("The use of --entity-default or --user-defaults is not allowed with User SCRAM "
                                "Credentials using --bootstrap-server.")
            if quota_adds or quota_deletes:
                raise ToolError(f"Cannot alter both quota and SCRAM credential configs simultaneously for '{USERS}' "
                                "using --bootstrap-server.")
    if quota_adds or quota_deletes:
        _alter_quotas(client, command, adds, deletes)
    else:
        _alter_scram(client, command, names[0], scram_adds, scram_deletes)


def _require_api(conn: Connection, key: int, what: str) -> None:
    """A clear refusal when the broker does not serve an API the command needs."""
    if not conn.supports(key):
        raise ToolError(f"The broker at {conn.address} does not support {api_display_name(key)} (API key {key}), "
                        f"so {what} cannot be done with it.")


# -- client quotas ---------------------------------------------------------------------------------


def _quota_components(types: list[str], names: list[str]) -> list[dict[str, Any]]:
    if len(names) > len(types):
        raise ToolError("More entity names specified than entity types")
    components = []
    for i, entity_type in enumerate(types):
        if entity_type not in QUOTA_ENTITY:
            raise ToolError(f"Unexpected entity type {entity_type}")
        name = names[i] if i < len(names) else None
        match_type = MATCH_SPECIFIED if name is None else MATCH_DEFAULT if name == "" else MATCH_EXACT
        components.append({"entity_type": QUOTA_ENTITY[entity_type], "match_type": match_type, "match": name or None})
    return components


def client_quotas(client: Client, command: Command) -> list[tuple[dict[str, str | None], dict[str, float]]]:
    """DescribeClientQuotas with ClientQuotaFilter.containsOnly of the entity types and names."""
    conn = client.boot()
    _require_api(conn, 48, "describing client quotas")
    resp = conn.request(48, {"components": _quota_components(command.entity_types, command.entity_names),
                             "strict": True})
    if code_of(resp.error_code):
        raise ExecutionError(command.command_args, _kafka_exception(resp.error_code, resp.error_message))
    return [({e.entity_type: e.entity_name for e in entry.entity}, {v.key: float(v.value) for v in entry.values})
            for entry in resp.entries or ()]


def _alter_quotas(client: Client, command: Command, adds: dict[str, str], deletes: list[str]) -> None:
    types, names = command.entity_types, command.entity_names
    if len(types) != len(names):
        raise ToolError("Exactly one entity name must be specified for every entity type")
    found = client_quotas(client, command)
    old = found[0][1] if found else {}
    invalid = [k for k in deletes if k not in old]
    if invalid:
        raise ToolError(f"Invalid config(s): {','.join(invalid)}")
    ops: list[dict[str, Any]] = []
    for key, text in adds.items():
        try:
            value = float(text)
        except ValueError:
            raise ToolError(f"Cannot parse quota configuration value for {key}: {text}") from None
        ops.append({"key": key, "value": value, "remove": False})
    ops += [{"key": key, "value": 0.0, "remove": True} for key in deletes]
    conn = client.boot()
    _require_api(conn, 49, "altering client quotas")
    resp = conn.request(49, {"entries": [{"entity": [{"entity_type": QUOTA_ENTITY[t], "entity_name": n or None}
                                                     for t, n in zip(types, names)], "ops": ops}],
                             "validate_only": False})
    for entry in resp.entries:
        if code_of(entry.error_code):
            raise ExecutionError(command.command_args, _kafka_exception(entry.error_code, entry.error_message))


def java_double(value: float) -> str:
    """Double.toString: "1000.0", "1.0E7", "1.0E-4"."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(value)
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    text = "".join(map(str, digits))
    mantissa = f"{text[0]}.{text[1:] or '0'}"
    return f"{'-' if sign else ''}{mantissa}E{len(digits) - 1 + int(exponent)}"


def describe_quotas(client: Client, command: Command) -> None:
    for entity, values in client_quotas(client, command):
        parts = []
        for entity_type in ("user", "client-id", "ip"):
            if entity_type in entity:
                name = entity[entity_type]
                label = QUOTA_ENTITY_LABEL[entity_type]
                parts.append(f"{label} '{name}'" if name is not None else f"the default {label}")
        values_text = ", ".join(f"{k}={java_double(v)}" for k, v in values.items())
        print(f"Quota configs for {', '.join(parts)} are {values_text}")


# -- SCRAM credentials -----------------------------------------------------------------------------


def _scram_credential(mechanism: str, text: str) -> tuple[int, bytes]:
    m = re.fullmatch(r"(?:iterations=(-?[0-9]*),)?password=(.*)", text, re.DOTALL)
    _, enum_name, _, minimum = SCRAM_MECHANISMS[mechanism]
    if m is None or (m.group(1) is not None and not _is_int(m.group(1))):
        raise ToolError(f"Invalid credential property {enum_name}={text}")
    iterations = int(m.group(1)) if m.group(1) not in (None, "-1") else DEFAULT_SCRAM_ITERATIONS
    if iterations < minimum:
        raise ToolError(f"Iterations {iterations} is less than the minimum {minimum} required for {mechanism}")
    return iterations, m.group(2).encode()


def _alter_scram(client: Client, command: Command, user: str, adds: dict[str, str], deletes: list[str]) -> None:
    upsertions = []
    for mechanism, text in adds.items():
        iterations, password = _scram_credential(mechanism, text)
        mtype, _, hash_name, _ = SCRAM_MECHANISMS[mechanism]
        salt = os.urandom(32)
        # The client salts and hashes (RFC 5802 Hi = PBKDF2 with HMAC); the password never leaves.
        upsertions.append({"name": user, "mechanism": mtype, "iterations": iterations, "salt": salt,
                           "salted_password": hashlib.pbkdf2_hmac(hash_name, password, salt, iterations)})
    conn = client.boot()
    _require_api(conn, 51, "altering SCRAM credentials")
    resp = conn.request(51, {"deletions": [{"name": user, "mechanism": SCRAM_MECHANISMS[m][0]} for m in deletes],
                             "upsertions": upsertions})
    for r in resp.results:
        if code_of(r.error_code):
            raise ExecutionError(command.command_args, _kafka_exception(r.error_code, r.error_message))


def describe_scram(client: Client, command: Command) -> None:
    conn = client.boot()
    _require_api(conn, 50, "describing SCRAM credentials")
    names = command.entity_names
    resp = conn.request(50, {"users": [{"name": n} for n in names] if names else None})
    if code_of(resp.error_code):
        raise ExecutionError(command.command_args, _kafka_exception(resp.error_code, resp.error_message))
    mechanism_names = {mtype: name for name, (mtype, *_rest) in SCRAM_MECHANISMS.items()}
    for r in resp.results:
        code = code_of(r.error_code)
        if code == ErrorCode.resource_not_found:
            continue
        if code:
            print(f"Error retrieving SCRAM credential configs for user-principal '{r.user}': "
                  f"{exception_text(code, r.error_message)}")
            continue
        infos = ", ".join(f"{mechanism_names.get(int(c.mechanism), 'UNKNOWN')}=iterations={c.iterations}"
                          for c in r.credential_infos)
        print(f"SCRAM credential configs for user-principal '{r.user}' are {infos}")


# -- describe --------------------------------------------------------------------------------------


def describe(client: Client, command: Command) -> int:
    """ConfigCommand.describeConfig."""
    head = command.entity_types[0]
    if head in (TOPICS, BROKERS, BROKER_LOGGERS, CLIENT_METRICS, GROUPS):
        return describe_resources(client, command, head, command.entity_names[0] if command.entity_names else None)
    if head in (USERS, CLIENTS):
        describe_quotas(client, command)
        if CLIENTS not in command.entity_types and "" not in command.entity_names:
            describe_scram(client, command)
        return 0
    describe_quotas(client, command)
    return 0


def config_resource_names(client: Client, command: Command, resource_type: int, *, required: bool) -> set[str] | None:
    """ListConfigResources (KIP-1142) of one type; None when the broker does not serve it for
    that type and it is not `required` (as the tool treats an older broker for groups)."""
    conn = client.boot()
    v1 = conn.supports(74, 1)
    if not v1 and not (resource_type == CLIENT_METRICS_RESOURCE and conn.supports(74)):
        if not required:
            return None
        _require_api(conn, 74, "listing client-metrics resources")
    resp = conn.request(74, {"resource_types": [resource_type]}, max_version=1 if v1 else 0)
    if code_of(resp.error_code):
        raise ExecutionError(command.command_args, _kafka_exception(resp.error_code, None))
    return {str(getattr(r, "resource_name", None) or getattr(r, "name", "")) for r in resp.config_resources}


def group_ids(client: Client) -> set[str]:
    """Every group of every broker (ListGroups without filters), as Admin.listGroups."""
    return {g.group_id for _conn, _version, resp in client.list_groups() for g in resp.groups}


def _exists(client: Client, command: Command, entity_type: str, name: str) -> bool:
    """Whether a named entity exists, as describeResourceConfig checks before describing its
    dynamic configs."""
    if entity_type == TOPICS:
        _resource(command, entity_type, name)  # refuses an invalid name
        return name in client.metadata(None)
    if entity_type in (BROKERS, BROKER_LOGGERS):
        client.metadata([])
        return name == "" or name in {str(n) for n in client.nodes}
    if entity_type == CLIENT_METRICS:
        return name in (config_resource_names(client, command, CLIENT_METRICS_RESOURCE, required=True) or set())
    with_configs = config_resource_names(client, command, GROUP_RESOURCE, required=False)
    return name in group_ids(client) or with_configs is None or name in with_configs


def describe_resources(client: Client, command: Command, entity_type: str, name: str | None) -> int:
    describe_all = command.args.all
    if not describe_all and name is not None and not _exists(client, command, entity_type, name):
        print(f"The {entity_type[:-1]} '{name}' doesn't exist and doesn't have dynamic config.")
        return 0
    if name is not None:
        entities = [name]
    elif entity_type == TOPICS:
        entities = sorted(client.metadata(None))
    elif entity_type in (BROKERS, BROKER_LOGGERS):
        client.metadata([])
        entities = [str(n) for n in sorted(client.nodes)] + [""]
    elif entity_type == CLIENT_METRICS:
        entities = sorted(config_resource_names(client, command, CLIENT_METRICS_RESOURCE, required=True) or ())
    else:
        entities = sorted(group_ids(client) | (config_resource_names(client, command, GROUP_RESOURCE, required=False) or set()))
    for entity in entities:
        if entity == "":
            print(f"Default configs for {entity_type} in the cluster are:")
        else:
            print(f"{'All' if describe_all else 'Dynamic'} configs for {entity_type[:-1]} {entity} are:")
        sys.stdout.flush()
        for entry in resource_configs(client, command, entity_type, entity, synonyms=True, describe_all=describe_all):
            print(entry.line())
    return 0
