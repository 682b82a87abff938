"""`sharebroker healthcheck`: exit 0 when a broker answers a Kafka Metadata request, 1 when it does
not. The container image's HEALTHCHECK runs it; it works the same against any Kafka broker.

Without --bootstrap-server it asks the broker this machine's configuration describes: the first
listener of `listeners` (from --config and the KAFKA_* environment, as `serve` reads them), with a
wildcard host (0.0.0.0, ::, empty) replaced by the loopback address. So inside the container it
checks the broker that container runs, whatever the compose file set."""

from __future__ import annotations

import argparse
import os
import sys
import time

from sharebroker.cli.common import non_negative_int
from sharebroker.cli.wire import Client, ToolError

DEFAULT_TIMEOUT_MS = 5000
_WILDCARD_HOSTS = ("", "0.0.0.0", "::")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("healthcheck", help="exit 0 when a broker answers a Metadata request",
                       description="Connect, send ApiVersions and Metadata, and exit 0 when the broker answers with "
                                   "itself in the broker list; exit 1 (with the reason on stderr) otherwise.")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT",
                   help="the broker to check (default: the first listener of this machine's configuration: "
                        "--config and KAFKA_* variables, as `serve` reads them)")
    p.add_argument("--config", "-c", metavar="FILE", help="a server.properties-style file to take the listener from")
    p.add_argument("--timeout", type=non_negative_int, default=DEFAULT_TIMEOUT_MS, metavar="MS",
                   help=f"give up after this many milliseconds (default {DEFAULT_TIMEOUT_MS})")
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing on success")
    p.set_defaults(handler=healthcheck)


def configured_bootstrap(properties_file: str | None) -> str:
    """host:port of the first listener the local configuration serves, wildcard hosts as loopback."""
    from sharebroker.config import BrokerConfig

    listener = BrokerConfig.load(properties_file, os.environ, {}).listeners[0]
    if listener.port == 0:
        raise ToolError(f"The first listener ({listener}) has an ephemeral port; pass --bootstrap-server.")
    host = "127.0.0.1" if listener.host in _WILDCARD_HOSTS else listener.host
    return f"[{host}]:{listener.port}" if ":" in host else f"{host}:{listener.port}"


def check(bootstrap: str, timeout_ms: int) -> str:
    """One ApiVersions + Metadata round trip; a one-line description of the answer, or ToolError."""
    started = time.monotonic()
    with Client(bootstrap, timeout_ms=timeout_ms, client_id="sharebroker-healthcheck") as client:
        client.metadata([])
        if not client.nodes:
            raise ToolError(f"{bootstrap} answered Metadata with no brokers.")
        elapsed_ms = (time.monotonic() - started) * 1000
        nodes = ", ".join(f"{n.node_id} at {n.address}" for n in client.nodes.values())
        return f"{bootstrap} answered Metadata in {elapsed_ms:.0f} ms (cluster {client.cluster_id}; broker {nodes})"


def healthcheck(args: argparse.Namespace) -> int:
    from sharebroker.config import ConfigError

    try:
        bootstrap = args.bootstrap_server or configured_bootstrap(args.config)
        answer = check(bootstrap, args.timeout)
    except (ToolError, ConfigError, OSError) as exc:
        print(f"unhealthy: {getattr(exc, 'message', None) or exc}", file=sys.stderr)
        return 1
    if not args.quiet:
        print(f"healthy: {answer}")
    return 0
