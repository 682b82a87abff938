"""Command-line tools that talk to any Kafka-compatible broker over the wire: `topics`,
`share-groups`, `consumer-groups`, `produce`, `consume` and `share-consume` (modelled on
kafka-topics.sh / kafka-configs.sh, kafka-share-groups.sh, kafka-consumer-groups.sh and the console
producer and consumers). They depend only on kio and this package, never on a client library.
`verify` works offline on a data directory (kafka-dump-log.sh --verify); `pipeline` runs Spark
jobs (pipeline/cli.py)."""

from __future__ import annotations

import argparse


def add_tool_parsers(sub: argparse._SubParsersAction) -> None:
    """Add every tool's subcommand to the `sharebroker` parser."""
    from sharebroker.broker.tools import console, consumer_groups, share_groups, topics, verify

    topics.add_parser(sub)
    share_groups.add_parser(sub)
    consumer_groups.add_parser(sub)
    console.add_parsers(sub)
    verify.add_parser(sub)

    from sharebroker.pipeline.cli import add_parser as add_pipeline_parser

    add_pipeline_parser(sub)
