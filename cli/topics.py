"""`sharebroker topics`: create, list, describe, alter and delete topics (the behaviour and output of
kafka-topics.sh, with kafka-configs.sh's --add-config/--delete-config for --alter)."""

from __future__ import annotations

import argparse
import re

from kio.schema.errors import ErrorCode

from sharebroker.cli.common import add_connection_options, client_from_args, int_value, run_tool, usage_error
from sharebroker.cli.configs import DELETE, SET, TOPIC_RESOURCE, incremental_alter, parse_add_config
from sharebroker.cli.wire import Client, KafkaApiError, ToolError, TopicInfo, code_of, topic_id_text

DEFAULT_CONFIG_SOURCE = 5
ACTIONS = ("create", "list", "describe", "alter", "delete")


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("topics", help="create, list, describe, alter and delete topics",
                       description="Create, list, describe, alter and delete topics (like kafka-topics.sh; "
                                   "--alter also takes kafka-configs.sh's --add-config/--delete-config).")
    add_connection_options(p)
    p.add_argument("--create", action="store_true", help="create a topic")
    p.add_argument("--list", action="store_true", help="list topics")
    p.add_argument("--describe", action="store_true", help="describe topics")
    p.add_argument("--alter", action="store_true", help="change partitions or configs of a topic")
    p.add_argument("--delete", action="store_true", help="delete a topic")
    p.add_argument("--topic", metavar="TOPIC", help="the topic (for --list/--describe/--delete: a regular expression)")
    p.add_argument("--partitions", type=int_value, metavar="N",
                   help="number of partitions (--create; --alter raises it)")
    p.add_argument("--replication-factor", type=int_value, metavar="N", help="replication factor (--create)")
    p.add_argument("--config", action="append", default=[], metavar="NAME=VALUE",
                   help="a topic config override for --create (repeatable)")
    p.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V]",
                   help="configs to set (--alter); list values in brackets: k=[a,b]")
    p.add_argument("--delete-config", action="append", default=[], metavar="NAME",
                   help="config overrides to remove (--alter, repeatable or comma-separated)")
    p.add_argument("--if-exists", action="store_true",
                   help="only act if the topic exists (--alter/--delete/--describe)")
    p.add_argument("--if-not-exists", action="store_true", help="only create the topic if it does not exist")
    p.add_argument("--exclude-internal", action="store_true", help="leave internal topics out of --list/--describe")
    p.set_defaults(handler=lambda args: run(p, args))
    return p


def parse_config_pairs(items: list[str]) -> list[tuple[str, str]]:
    """--config k=v items (one pair each; the value may hold '=' and ',')."""
    pairs: list[tuple[str, str]] = []
    for item in items:
        if not item.strip():
            continue
        if "=" not in item:
            raise ToolError(f"Invalid config '{item}': all configs must be in the format \"key=val\".", 2)
        k, v = item.split("=", 1)
        pairs.append((k.strip(), v.strip()))
    return pairs


def _check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    actions = [a for a in ACTIONS if getattr(args, a)]
    if len(actions) != 1:
        usage_error(p, "Command must include exactly one action: --list, --describe, --create, --alter or --delete")
    action = actions[0]
    if action in ("create", "alter", "delete") and not args.topic:
        usage_error(p, f"Missing required argument \"[topic]\" for --{action}")
    if action == "alter" and args.partitions is None and not args.add_config and not args.delete_config:
        usage_error(p, "--alter needs --partitions, --add-config or --delete-config")
    if action != "alter" and (args.add_config or args.delete_config):
        usage_error(p, "--add-config and --delete-config are only valid with --alter")
    if action != "create" and (args.config or args.replication_factor is not None or args.if_not_exists):
        usage_error(p, "--config, --replication-factor and --if-not-exists are only valid with --create")
    if action not in ("create", "alter") and args.partitions is not None:
        usage_error(p, "--partitions is only valid with --create or --alter")
    if args.partitions is not None and args.partitions < 1:
        usage_error(p, "The partitions must be greater than 0")
    return action


def run(p: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    action = _check_args(p, args)
    return run_tool(lambda a: _run(action, a), args)


def _run(action: str, args: argparse.Namespace) -> int:
    with client_from_args(args, default_client_id="sharebroker-topics") as client:
        if action == "create":
            return create(client, args)
        if action == "list":
            return list_topics(client, args)
        if action == "describe":
            return describe(client, args)
        if action == "alter":
            return alter(client, args)
        return delete(client, args)


def _matching(client: Client, pattern: str | None, exclude_internal: bool) -> dict[str, TopicInfo]:
    topics = client.metadata(None)
    out = {}
    for name, info in topics.items():
        if exclude_internal and (info.internal or name.startswith("__")):
            continue
        if pattern is not None:
            try:
                if not re.fullmatch(pattern, name):
                    continue
            except re.error:
                if name != pattern:
                    continue
        out[name] = info
    return dict(sorted(out.items()))


def _ensure_exists(found: dict[str, TopicInfo], topic: str | None, if_exists: bool) -> bool:
    if not found and topic is not None:
        if if_exists:
            return False
        raise ToolError(f"Topic '{topic}' does not exist as expected")
    return True


def create(client: Client, args: argparse.Namespace) -> int:
    configs = parse_config_pairs(args.config)
    resp = client.request(19, {
        "topics": [{"name": args.topic, "num_partitions": args.partitions if args.partitions is not None else -1,
                    "replication_factor": args.replication_factor if args.replication_factor is not None else -1,
                    "assignments": [], "configs": [{"name": k, "value": v} for k, v in configs]}],
        "timeout": client.timeout_ms, "validate_only": False})
    (t,) = resp.topics
    code = code_of(t.error_code)
    if code == ErrorCode.topic_already_exists and args.if_not_exists:
        return 0
    if code == ErrorCode.topic_already_exists:
        raise ToolError(t.error_message or f"Topic '{args.topic}' already exists.")
    if code:
        raise KafkaApiError(code, t.error_message)
    print(f"Created topic {args.topic}.")
    return 0


def list_topics(client: Client, args: argparse.Namespace) -> int:
    for name in _matching(client, args.topic, args.exclude_internal):
        print(name)
    return 0


def describe_configs(client: Client, topics: list[str]) -> dict[str, list[tuple[str, str | None, int]]]:
    if not topics:
        return {}
    resp = client.request(32, {"resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": t,
                                              "configuration_keys": None} for t in topics],
                               "include_synonyms": False, "include_documentation": False})
    out: dict[str, list[tuple[str, str | None, int]]] = {}
    for r in resp.results:
        code = code_of(r.error_code)
        if code:
            raise KafkaApiError(code, r.error_message, f"Cannot describe the configs of topic '{r.resource_name}': ")
        entries = []
        for c in r.configs:
            source = int(getattr(c, "config_source", -1))
            if source == -1:  # DescribeConfigs v0 has is_default instead of a source
                source = DEFAULT_CONFIG_SOURCE if getattr(c, "is_default", False) else 1
            entries.append((c.name, None if c.is_sensitive else c.value, source))
        out[r.resource_name] = entries
    return out


def describe(client: Client, args: argparse.Namespace) -> int:
    found = _matching(client, args.topic, args.exclude_internal)
    if not _ensure_exists(found, args.topic, args.if_exists):
        return 0
    configs = describe_configs(client, list(found))
    for name, info in found.items():
        overridden = ",".join(f"{k}={'null' if v is None else v}" for k, v, source in configs.get(name, [])
                              if source != DEFAULT_CONFIG_SOURCE)
        parts = sorted(info.partitions.values(), key=lambda p: p.index)
        rf = len(parts[0].replicas) if parts else 0
        line = f"Topic: {name}"
        if info.topic_id is not None:
            line += f"\tTopicId: {topic_id_text(info.topic_id)}"
        line += f"\tPartitionCount: {len(parts)}\tReplicationFactor: {rf}\tConfigs: {overridden}"
        print(line)
        for pinfo in parts:
            leader = str(pinfo.leader) if pinfo.leader >= 0 else "none"
            print(f"\tTopic: {name}\tPartition: {pinfo.index}\tLeader: {leader}"
                  f"\tReplicas: {','.join(map(str, pinfo.replicas))}\tIsr: {','.join(map(str, pinfo.isr))}")
    return 0


def alter(client: Client, args: argparse.Namespace) -> int:
    found = client.metadata([args.topic]).get(args.topic)
    if found is None or found.error == ErrorCode.unknown_topic_or_partition:
        if args.if_exists:
            return 0
        raise ToolError(f"Topic '{args.topic}' does not exist as expected")
    if found.error:
        raise KafkaApiError(found.error, None, f"Cannot get metadata for topic '{args.topic}': ")
    if args.partitions is not None:
        resp = client.request(37, {"topics": [{"name": args.topic, "count": args.partitions, "assignments": None}],
                                   "timeout": client.timeout_ms, "validate_only": False})
        (r,) = resp.results
        if code_of(r.error_code):
            raise KafkaApiError(r.error_code, r.error_message)
    changes: list[tuple[str, int, str | None]] = []
    for item in args.add_config:
        try:
            changes.extend((k, SET, v) for k, v in parse_add_config(item).items())
        except ToolError as exc:
            raise ToolError(exc.message, 2) from None
    for item in args.delete_config:
        changes.extend((k.strip(), DELETE, None) for k in item.split(",") if k.strip())
    if changes:
        code, message = incremental_alter(client.boot(), TOPIC_RESOURCE, args.topic, changes)
        if code:
            raise KafkaApiError(code, message)
        print(f"Completed updating config for topic {args.topic}.")
    return 0


def delete(client: Client, args: argparse.Namespace) -> int:
    found = _matching(client, args.topic, False)
    if not _ensure_exists(found, args.topic, args.if_exists):
        return 0
    internal = [n for n, i in found.items() if i.internal]
    if internal:
        raise ToolError(f"Topic {internal[0]} is a kafka internal topic and is not allowed to be marked for deletion.")
    resp = client.request(20, {"topics": [{"name": n, "topic_id": None} for n in found], "topic_names": list(found),
                               "timeout": client.timeout_ms})
    failed = [(r.name, code_of(r.error_code), getattr(r, "error_message", None)) for r in resp.responses
              if code_of(r.error_code)]
    if failed:
        name, code, msg = failed[0]
        raise KafkaApiError(code, msg, f"Cannot delete topic '{name}': ")
    return 0
