"""`sharebroker features`: kafka-features.sh over the wire — describe the supported and finalized
feature levels (ApiVersions), upgrade or downgrade them (UpdateFeatures 57), with the tool's output.

    sharebroker features --bootstrap-server HOST:PORT describe
    sharebroker features --bootstrap-server HOST:PORT upgrade --feature share.version=2
    sharebroker features --bootstrap-server HOST:PORT downgrade --feature share.version=1 [--unsafe]
"""

from __future__ import annotations

import argparse
import sys

from sharebroker.cli.common import add_connection_options, client_from_args, run_tool
from sharebroker.cli.wire import ToolError, code_of, error_message

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("features", help="describe, upgrade and downgrade feature levels (kafka-features.sh)",
                       description="This tool manages feature flags (share.version 2: share-group dead-letter "
                                   "queues).")
    add_connection_options(p)
    ops = p.add_subparsers(dest="operation", required=True)
    ops.add_parser("describe", help="describe the supported and finalized features")
    for name in ("upgrade", "downgrade"):
        op = ops.add_parser(name, help=f"{name} one or more feature flags")
        op.add_argument("--feature", action="append", default=[], metavar="NAME=LEVEL", help="a feature and its level")
        op.add_argument("--dry-run", action="store_true", help="validate only, change nothing")
        if name == "downgrade":
            op.add_argument("--unsafe", action="store_true", help="allow a lossy downgrade")
    p.set_defaults(handler=lambda args: run_tool(_run, args))
    return p


def _run(args: argparse.Namespace) -> int:
    with client_from_args(args, default_client_id="sharebroker-features") as client:
        conn = client.boot()
        if args.operation == "describe":
            resp = conn.request(18, {"client_software_name": "sharebroker-features", "client_software_version": "1"})
            finalized = {f.name: int(f.max_version_level) for f in resp.finalized_features}
            epoch = int(resp.finalized_features_epoch)
            for f in sorted(resp.supported_features, key=lambda f: f.name):
                print(f"Feature: {f.name:<40}  SupportedMinVersion: {int(f.min_version):<15}  "
                      f"SupportedMaxVersion: {int(f.max_version):<15}  "
                      f"FinalizedVersionLevel: {finalized.get(f.name, 0):<15}  Epoch: {epoch if epoch >= 0 else '-'}")
            return 0
        updates: dict[str, int] = {}
        for item in args.feature:
            name, sep, level = item.partition("=")
            if not sep or not level.strip().lstrip("-").isdigit():
                raise ToolError(f"Can't parse feature={item}. Expected format: NAME=LEVEL")
            if name in updates:
                raise ToolError(f"Feature {name} was specified more than once.")
            updates[name.strip()] = int(level)
        if not updates:
            raise ToolError(f"You must specify at least one feature to {args.operation}")
        kind = UPGRADE if args.operation == "upgrade" else (UNSAFE_DOWNGRADE if args.unsafe else SAFE_DOWNGRADE)
        resp = conn.request(57, {"timeout": 60000, "validate_only": args.dry_run, "feature_updates": [
            {"feature": n, "max_version_level": v, "upgrade_type": kind}
            for n, v in updates.items()]})
        top = code_of(resp.error_code)
        results = {r.feature: r for r in resp.results}
        failures = 0
        for name in sorted(updates):
            r = results.get(name)
            code = top or (code_of(r.error_code) if r is not None else 0)
            level = updates[name]
            if code:
                message = resp.error_message if top else (r.error_message if r is not None else None)
                print(f"{'Can not' if args.dry_run else 'Could not'} {args.operation} {name} to {level}. "
                      f"{error_message(code, message)}")
                failures += 1
            else:
                print(f"{name}{' can be ' if args.dry_run else ' was '}{args.operation}d to {level}.")
        if failures:
            print(f"{failures} out of {len(updates)} operation(s) failed.", file=sys.stderr)
            return 1
        return 0
