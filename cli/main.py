"""The `sharebroker` command line. `serve` runs the broker; the other subcommands are the tools,
which talk to any broker."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path

from sharebroker.broker.structured_log import configure_logging, get_logger


def _serve_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the broker",
                       description="Run the broker. Settings use Kafka's names; precedence: defaults < "
                                   "--config file < KAFKA_* environment variables < flags.")
    p.add_argument("--config", "-c", metavar="FILE", help="a Kafka server.properties-style file")
    p.add_argument("--listeners", metavar="URL", help="e.g. PLAINTEXT://127.0.0.1:9092 (port 0 = ephemeral)")
    p.add_argument("--advertised-listeners", metavar="URL", help="address clients are told to use")
    p.add_argument("--data-dir", "--log-dirs", dest="log_dirs", metavar="DIR", help="log directory (log.dirs)")
    p.add_argument("--node-id", type=int, help="node.id")
    p.add_argument("--fsync", action="store_true",
                   help="acknowledge writes only once they are on disk (log.flush.interval.messages=1, group commit)")
    p.add_argument("--override", "-o", action="append", default=[], metavar="NAME=VALUE",
                   help="any setting, repeatable, e.g. -o num.partitions=3")
    p.add_argument("--log-format", choices=["console", "json"], default=os.environ.get("SHAREBROKER_LOG_FORMAT", "console"))
    p.add_argument("--log-level", default=os.environ.get("SHAREBROKER_LOG_LEVEL", "info"))
    p.add_argument("--metrics-listener", metavar="HOST:PORT",
                   help="serve Prometheus metrics at http://HOST:PORT/metrics (metrics.listener; off by default)")
    p.add_argument("--admin-ui-write", action="store_true",
                   help="let the live view on the metrics listener reset and delete empty groups "
                        "(admin.ui.write.enable; read-only by default)")
    p.add_argument("--workers", type=int, metavar="N",
                   help="experimental: serve from N worker processes (worker.processes; see README 'More than one core')")
    p.add_argument("--ready-file", metavar="FILE", help="write host:port here once listening (for tests and scripts)")


def _serve(args: argparse.Namespace) -> int:
    from sharebroker.config import BrokerConfig, ConfigError

    configure_logging(args.log_format, args.log_level)
    log = get_logger("sharebroker")
    overrides: dict[str, str] = {}
    for item in args.override:
        if "=" not in item:
            print(f"sharebroker: --override expects NAME=VALUE, got {item!r}", file=sys.stderr)
            return 2
        name, value = item.split("=", 1)
        overrides[name.strip()] = value.strip()
    if args.listeners:
        overrides["listeners"] = args.listeners
    if args.metrics_listener:
        overrides["metrics.listener"] = args.metrics_listener
    if args.admin_ui_write:
        overrides["admin.ui.write.enable"] = "true"
    if args.advertised_listeners:
        overrides["advertised.listeners"] = args.advertised_listeners
    if args.log_dirs:
        overrides["log.dirs"] = args.log_dirs
    if args.node_id is not None:
        overrides["node.id"] = str(args.node_id)
    if args.fsync:
        overrides["log.flush.interval.messages"] = "1"
    if args.workers is not None:
        overrides["worker.processes"] = str(args.workers)
    try:
        config = BrokerConfig.load(args.config, os.environ, overrides)
    except ConfigError as exc:
        log.error("invalid configuration", setting=getattr(exc, "name", None), error=str(exc))
        print(f"sharebroker: invalid configuration: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"sharebroker: cannot read configuration: {exc}", file=sys.stderr)
        return 2

    if config["worker.processes"] > 1 and not os.environ.get("SHAREBROKER_WORKER"):
        from sharebroker.broker.workers.supervisor import supervise

        try:
            return supervise(config, Path(args.ready_file) if args.ready_file else None)
        except (ConfigError, OSError) as exc:
            log.error("cannot start", error=str(exc))
            print(f"sharebroker: cannot start: {exc}", file=sys.stderr)
            return 1 if isinstance(exc, OSError) else 2

    from sharebroker.broker.server import run

    runner: Callable[..., object]
    try:
        import uvloop
        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency
        runner = asyncio.run
    try:
        runner(run(config, ready_file=Path(args.ready_file) if args.ready_file else None))
    except OSError as exc:
        from sharebroker.broker.open_files import exhausted, startup_advice

        # Out of descriptors: say how many the data directory needs and which limit to raise.
        message = startup_advice(config.log_dir, exc) if exhausted(exc) else str(exc)
        log.error("cannot start", error=message)
        print(f"sharebroker: cannot start: {message}", file=sys.stderr)
        return 1
    return 0


def add_tool_parsers(sub: argparse._SubParsersAction) -> None:
    """Add every tool's subcommand to the `sharebroker` parser."""
    from sharebroker.cli import (
        acls,
        certs,
        configs,
        console,
        consumer_groups,
        features,
        healthcheck,
        share_groups,
        topics,
        transactions,
        verify,
    )
    from sharebroker.pipeline.cli import add_parser as add_pipeline_parser

    topics.add_parser(sub)
    acls.add_parser(sub)
    share_groups.add_parser(sub)
    consumer_groups.add_parser(sub)
    configs.add_parser(sub)
    console.add_parsers(sub)
    verify.add_parser(sub)
    healthcheck.add_parser(sub)
    transactions.add_parser(sub)
    certs.add_parser(sub)
    features.add_parser(sub)
    add_pipeline_parser(sub)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sharebroker", description="A Kafka-compatible broker with share groups.")
    sub = parser.add_subparsers(dest="command", required=True)
    _serve_parser(sub)
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] != ["serve"]:
        # The tools import their wire client and codecs; `serve` skips them to start sooner.
        add_tool_parsers(sub)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        # A tool may report them in its own way (configs exits 1, as kafka-configs.sh does).
        on_unknown = getattr(args, "on_unknown_args", None)
        if on_unknown is None:
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        return int(on_unknown(unknown))
    args.command_args = argv[1:]  # the tool's own arguments, for messages that quote them (configs)
    if args.command == "serve":
        return _serve(args)
    handler = getattr(args, "handler", None)
    if handler is not None:
        return handler(args)
    parser.error(f"unknown command {args.command}")
    return 2


def run() -> None:
    """The process entry point (`sharebroker`, `python -m sharebroker`): `main` in a process of
    its own, which never needs hypothesis. kio registers hypothesis strategies for its types when
    hypothesis is importable, and building them costs about 0.1 s plus, in a working directory
    without a `.hypothesis` cache, about 1.3 s for hypothesis' Unicode table: a broker started
    next to an application's test tools took 1.6 s instead of 0.3 s."""
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]  # None: "import hypothesis" fails
    sys.exit(main())


if __name__ == "__main__":
    run()
