"""`sharebroker transactions`: kafka-transactions.sh — list and describe transactions, describe the
producers of a partition, find hanging transactions and abort them.

The subcommands, options, table columns and messages are those of Kafka's TransactionsCommand; the
requests are the ones its AdminClient sends: ListTransactions to every broker, DescribeTransactions
to the transaction coordinator, DescribeProducers and WriteTxnMarkers to the partition leader (or
to `--broker-id`). Tables are printed as Kafka's ToolsUtils.prettyPrintTable prints them: every
cell padded to its column's width and followed by a tab."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from kio.schema.errors import ErrorCode

from sharebroker.cli.common import add_connection_options, client_from_args, int_value, run_tool, usage_error
from sharebroker.cli.wire import Client, Connection, KafkaApiError, ToolError, code_of, error_message

MAX_BATCH_SIZE = 500
DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15
_RETRY_S = 0.1

LIST_HEADERS = ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
DESCRIBE_HEADERS = ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                    "TopicPartitions"]
DESCRIBE_PRODUCERS_HEADERS = ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                              "LastTimestamp", "CurrentTransactionStartOffset"]
FIND_HANGING_HEADERS = ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                        "LastTimestamp", "Duration(min)"]

# Errors after which Kafka's AdminClient asks again (a coordinator or leader moving or loading).
_COORDINATOR_RETRIABLE = {ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator,
                          ErrorCode.coordinator_not_available}

TopicPartition = tuple[str, int]


# ------------------------------------------------------------------------------------------
# Parsers


def _typed(kind: str, lo: int, hi: int) -> Callable[[str], int]:
    """Java's Integer/Long/Short argument types: an integer within the type's range."""

    def parse(text: str) -> int:
        value = int_value(text)
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"could not convert '{text}' to {kind}")
        return value

    parse.__name__ = kind
    return parse


java_short = _typed("Short", -(2**15), 2**15 - 1)
java_int = _typed("Integer", -(2**31), 2**31 - 1)
java_long = _typed("Long", -(2**63), 2**63 - 1)


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("transactions", help="analyze transactions; find and abort hanging ones (kafka-transactions.sh)",
                       description="This tool is used to analyze the transactional state of producers in the "
                                   "cluster. It can be used to detect and recover from hanging transactions. "
                                   "The connection options come before the command.")
    add_connection_options(p)
    cmds = p.add_subparsers(dest="txn_command", title="commands", metavar="COMMAND", required=True)

    lst = cmds.add_parser("list", help="list transactions", description="List transactions.")
    lst.add_argument("--duration-filter", type=java_long, metavar="MS",
                     help="Duration (in millis) to filter by: if < 0, all transactions will be returned; otherwise, "
                          "only transactions running longer than this duration will be returned")
    lst.add_argument("--transactional-id-pattern", metavar="REGEX",
                     help="Transactional id regular expression pattern to filter by")
    lst.set_defaults(handler=lambda args: run_tool(list_transactions, args))

    desc = cmds.add_parser("describe", help="describe the state of an active transactional-id",
                           description="Describe the state of an active transactional-id.")
    desc.add_argument("--transactional-id", required=True, help="transactional id")
    desc.set_defaults(handler=lambda args: run_tool(describe_transaction, args))

    dp = cmds.add_parser("describe-producers", help="describe the states of active producers for a topic partition",
                         description="Describe the states of active producers for a topic partition.")
    dp.add_argument("--broker-id", type=java_int,
                    help="optional broker id to describe the producer state on a specific replica")
    dp.add_argument("--topic", required=True, help="topic name")
    dp.add_argument("--partition", type=java_int, required=True, help="partition number")
    dp.set_defaults(handler=lambda args: run_tool(describe_producers, args))

    ab = cmds.add_parser("abort", help="abort a hanging transaction (requires administrative privileges)",
                         description="Abort a hanging transaction (requires administrative privileges).")
    ab.add_argument("--topic", required=True, help="topic name")
    ab.add_argument("--partition", type=java_int, required=True, help="partition number")
    new = ab.add_argument_group("Brokers on versions 3.0 and above",
                                "For newer brokers, only the start offset of the transaction to be aborted is required")
    new.add_argument("--start-offset", type=java_long, help="start offset of the transaction to abort")
    old = ab.add_argument_group("Brokers on versions older than 3.0",
                                "For older brokers, you must provide all of these arguments")
    old.add_argument("--producer-id", type=java_long, help="producer id")
    old.add_argument("--producer-epoch", type=java_short, help="producer epoch")
    old.add_argument("--coordinator-epoch", type=java_int, help="coordinator epoch")
    ab.set_defaults(handler=lambda args: _abort_checked(ab, args))

    fh = cmds.add_parser("find-hanging", help="find hanging transactions", description="Find hanging transactions.")
    fh.add_argument("--broker-id", type=java_int, help="broker id to search for hanging transactions")
    fh.add_argument("--max-transaction-timeout", type=java_int, default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN,
                    metavar="MINUTES",
                    help="maximum transaction timeout in minutes to limit the scope of the search "
                         "(15 minutes by default)")
    fh.add_argument("--topic", help="topic name to limit search to (required if --partition is specified)")
    fh.add_argument("--partition", type=java_int, help="partition number")
    fh.set_defaults(handler=lambda args: _find_hanging_checked(fh, args))
    return p


def _abort_checked(p: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.start_offset is None and args.producer_id is None:
        usage_error(p, "The transaction to abort must be identified either with --start-offset (for brokers on "
                       "3.0 or above) or with --producer-id, --producer-epoch, and --coordinator-epoch (for older "
                       "brokers)")
    if args.start_offset is None:
        if args.producer_epoch is None:
            usage_error(p, "Missing required argument --producer-epoch")
        if args.coordinator_epoch is None:
            usage_error(p, "Missing required argument --coordinator-epoch")
    return run_tool(abort_transaction, args)


def _find_hanging_checked(p: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.topic is None and args.broker_id is None:
        usage_error(p, "The `find-hanging` command requires either --topic or --broker-id to limit the scope of "
                       "the search")
    if args.partition is not None and args.topic is None:
        usage_error(p, "The --partition argument requires --topic to be provided")
    return run_tool(find_hanging, args)


# ------------------------------------------------------------------------------------------
# Output and errors


def pretty_print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """ToolsUtils.prettyPrintTable: each cell left-aligned to its column's width, then a tab."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    for row in [headers, *rows]:
        sys.stdout.write("".join(cell.ljust(w) + "\t" for cell, w in zip(row, widths)) + "\n")


def fail(message: str, cause: str | None = None) -> NoReturn:
    """TransactionsCommand.printErrorAndExit: the message (with its cause) on stderr, exit 1."""
    if cause is not None:
        message = f"{message}: {cause.rstrip('.')}. Enable debug logging for additional detail."
    raise ToolError(message, 1)


def tp_text(tp: TopicPartition) -> str:
    """Kafka's TopicPartition.toString."""
    return f"{tp[0]}-{tp[1]}"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def java_minutes(ms: int) -> int:
    """TimeUnit.MILLISECONDS.toMinutes: division truncated towards zero."""
    return int(ms / 60000) if abs(ms) < 2**52 else (abs(ms) // 60000) * (1 if ms >= 0 else -1)


class CauseError(Exception):
    """A failure of one admin call, in the words of Kafka's AdminClient exception (the cause the
    tool appends to its own message)."""


# ------------------------------------------------------------------------------------------
# Requests, as Kafka's AdminClient handlers make them


@dataclass
class ProducerState:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int  # -1: none
    txn_start_offset: int  # -1: none


@dataclass
class TxnDescription:
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_ms: int  # -1: none
    partitions: list[TopicPartition]


def _deadline(client: Client) -> float:
    return time.monotonic() + client.timeout


def leaders_of(client: Client, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
    """The leader of each partition, retried while a leader is not known (PartitionLeaderStrategy);
    CauseError for a partition that does not exist."""
    wanted = list(partitions)
    deadline = _deadline(client)
    while True:
        topics = client.metadata(sorted({t for t, _ in wanted}))
        out: dict[TopicPartition, int] = {}
        waiting = None
        for tp in wanted:
            info = topics.get(tp[0])
            code = ErrorCode.unknown_topic_or_partition if info is None else info.error
            if code == ErrorCode.none:
                pinfo = info.partitions.get(tp[1]) if info is not None else None
                if pinfo is None:
                    code = ErrorCode.unknown_topic_or_partition
                elif pinfo.leader < 0:
                    code = ErrorCode.leader_not_available
                else:
                    out[tp] = pinfo.leader
                    continue
            if code in (ErrorCode.leader_not_available, ErrorCode.not_leader_or_follower):
                waiting = code
                continue
            if code == ErrorCode.invalid_topic_exception:
                raise CauseError(f"Failed to fetch metadata for partition {tp_text(tp)} due to invalid topic error: "
                                 f"{error_message(code)}")
            raise CauseError(error_message(code))
        if waiting is None:
            return out
        if time.monotonic() >= deadline:
            raise CauseError(f"Timed out waiting for a node assignment ({error_message(waiting)})")
        time.sleep(_RETRY_S)


def describe_producers_of(client: Client, partitions: Sequence[TopicPartition], broker_id: int | None
                          ) -> dict[TopicPartition, list[ProducerState]]:
    """DescribeProducers for the partitions, at their leaders or all at `broker_id`; CauseError on
    the first partition that fails (DescribeProducersHandler's messages)."""
    deadline = _deadline(client)
    pending = list(partitions)
    out: dict[TopicPartition, list[ProducerState]] = {}
    while pending:
        if broker_id is not None:
            by_node = {broker_id: pending}
        else:
            by_node = {}
            for tp, leader in leaders_of(client, pending).items():
                by_node.setdefault(leader, []).append(tp)
        retry: list[TopicPartition] = []
        for node, tps in by_node.items():
            topics: dict[str, list[int]] = {}
            for t, p in tps:
                topics.setdefault(t, []).append(p)
            resp = client.conn(node).request(61, {"topics": [{"name": t, "partition_indexes": ps}
                                                             for t, ps in topics.items()]})
            for t in resp.topics:
                for part in t.partitions:
                    tp = (t.name, int(part.partition_index))
                    code = code_of(part.error_code)
                    if code == ErrorCode.none:
                        out[tp] = [ProducerState(int(s.producer_id), int(s.producer_epoch), int(s.last_sequence),
                                                 int(s.last_timestamp), int(s.coordinator_epoch),
                                                 int(s.current_txn_start_offset)) for s in part.active_producers]
                    elif code == ErrorCode.not_leader_or_follower and broker_id is None:
                        retry.append(tp)
                    else:
                        raise CauseError(_producers_error(tp, code, part.error_message, broker_id))
        missing = [tp for tp in pending if tp not in out and tp not in retry]
        if missing:
            raise CauseError(f"DescribeProducers response had no entry for partition {tp_text(missing[0])}")
        if retry and time.monotonic() >= deadline:
            raise CauseError(f"Timed out waiting for the leader of partition {tp_text(retry[0])}")
        if retry:
            time.sleep(_RETRY_S)
        pending = retry
    return out


def _producers_error(tp: TopicPartition, code: int, message: str | None, broker_id: int | None) -> str:
    if code == ErrorCode.not_leader_or_follower:
        return f"Failed to describe active producers for partition {tp_text(tp)} on brokerId {broker_id}"
    if code == ErrorCode.invalid_topic_exception:
        return (f"Failed to fetch metadata for partition {tp_text(tp)} due to invalid topic error: "
                f"{error_message(code, message)}")
    if code == ErrorCode.topic_authorization_failed:
        return (f"Failed to describe active producers for partition {tp_text(tp)} due to authorization failure "
                f"on topic `{tp[0]}`")
    if code == ErrorCode.unknown_topic_or_partition:
        # Kafka's AdminClient retries this until its timeout; the tools say so at once.
        return error_message(code, message)
    return (f"Failed to describe active producers for partition {tp_text(tp)} due to unexpected error: "
            f"{error_message(code, message)}")


def describe_transactions_of(client: Client, transactional_ids: Iterable[str]) -> dict[str, TxnDescription | int]:
    """DescribeTransactions of each id at its coordinator: its description, or the error code."""
    out: dict[str, TxnDescription | int] = {}
    for txn_id in dict.fromkeys(transactional_ids):
        deadline = _deadline(client)
        while True:
            try:
                node = client.find_coordinator(txn_id, key_type=1)
            except KafkaApiError as exc:
                raise CauseError(error_message(exc.code, exc.broker_message)) from None
            # protocol.client reads this answer itself (kio refuses a start time of -1)
            answer = client.conn_to(node).request(65, {"transactional_ids": [txn_id]})
            state = next((st for st in answer.transaction_states if st.transactional_id == txn_id), None)
            if state is None:
                raise CauseError(f"DescribeTransactions response had no entry for transactionalId `{txn_id}`")
            code = state.error_code
            if code in _COORDINATOR_RETRIABLE and time.monotonic() < deadline:
                time.sleep(_RETRY_S)
                continue
            if code != ErrorCode.none:
                out[txn_id] = code
            else:
                out[txn_id] = TxnDescription(node.node_id, state.transaction_state, state.producer_id,
                                             state.producer_epoch, state.transaction_timeout_ms,
                                             state.transaction_start_time_ms,
                                             [(t.topic, p) for t in state.topics for p in t.partitions])
            break
    return out


def _describe_txn_error(txn_id: str, code: int) -> str:
    """DescribeTransactionsHandler's exception message for an error code."""
    if code == ErrorCode.transactional_id_not_found:
        return f"DescribeTransactions request for transactionalId `{txn_id}` failed because the ID could not be found"
    if code == ErrorCode.transactional_id_authorization_failed:
        return f"DescribeTransactions request for transactionalId `{txn_id}` failed due to authorization failure"
    return (f"DescribeTransactions request for transactionalId `{txn_id}` failed due to unexpected error: "
            f"{error_message(code)}")


def list_transactions_of(client: Client, *, producer_ids: Sequence[int] = (), duration_filter: int | None = None,
                         pattern: str | None = None) -> dict[int, list[tuple[str, int, str]]]:
    """ListTransactions at every broker: {broker id: [(transactional id, producer id, state)]}."""
    client.metadata([])
    data: dict[str, Any] = {"state_filters": [], "producer_id_filters": list(producer_ids)}
    min_version = 0
    if duration_filter is not None:
        data["duration_filter"] = duration_filter
        if duration_filter >= 0:
            min_version = 1
    if pattern is not None:
        data["transactional_id_pattern"] = pattern
        if pattern:
            min_version = 2
    out: dict[int, list[tuple[str, int, str]]] = {}
    for node_id in sorted(client.nodes):
        conn = client.conn(node_id)
        _require_version(conn, 66, min_version, duration_filter, pattern)
        deadline = _deadline(client)
        while True:
            resp = conn.request(66, data, min_version=min_version)
            code = code_of(resp.error_code)
            if code in _COORDINATOR_RETRIABLE and time.monotonic() < deadline:
                time.sleep(_RETRY_S)
                continue
            if code != ErrorCode.none:
                raise CauseError(error_message(code))
            break
        out[node_id] = [(s.transactional_id, int(s.producer_id), s.transaction_state) for s in resp.transaction_states]
    return out


def _require_version(conn: Connection, key: int, min_version: int, duration_filter: int | None,
                     pattern: str | None) -> None:
    if min_version == 0 or conn.supports(key, min_version):
        return
    if min_version >= 2 and pattern:
        raise CauseError("Transactional ID pattern filter can be set only when using API version 2 or higher. "
                         "If client is connected to an older broker, do not specify the pattern filter.")
    raise CauseError("Duration filter can be set only when using API version 1 or higher. If client is connected to "
                     "an older broker, do not specify duration filter or set duration filter to -1.")


# ------------------------------------------------------------------------------------------
# list


def list_transactions(args: argparse.Namespace) -> int:
    with client_from_args(args, default_client_id="sharebroker-transactions") as client:
        try:
            by_broker = list_transactions_of(client, duration_filter=args.duration_filter,
                                             pattern=args.transactional_id_pattern)
        except (CauseError, KafkaApiError) as exc:
            fail("Failed to list transactions", _text(exc))
    rows = [[txn_id, str(broker), str(pid), state]
            for broker, listings in by_broker.items() for txn_id, pid, state in listings]
    pretty_print_table(LIST_HEADERS, rows)
    return 0


def _text(exc: Exception) -> str:
    return exc.message if isinstance(exc, ToolError) else str(exc)


# ------------------------------------------------------------------------------------------
# describe


def describe_transaction(args: argparse.Namespace) -> int:
    txn_id = args.transactional_id
    with client_from_args(args, default_client_id="sharebroker-transactions") as client:
        try:
            result = describe_transactions_of(client, [txn_id])[txn_id]
        except (CauseError, KafkaApiError) as exc:
            result = None
            cause = _text(exc)
        else:
            cause = _describe_txn_error(txn_id, result) if isinstance(result, int) else ""
        if not isinstance(result, TxnDescription):
            fail(f"Failed to describe transaction state of transactional-id `{txn_id}`", cause)
    if result.start_ms >= 0:
        start, duration = str(result.start_ms), str(now_ms() - result.start_ms)
    else:
        start = duration = "None"
    row = [str(result.coordinator_id), txn_id, str(result.producer_id), str(result.producer_epoch), result.state,
           str(result.timeout_ms), start, duration, ",".join(tp_text(tp) for tp in result.partitions)]
    pretty_print_table(DESCRIBE_HEADERS, [row])
    return 0


# ------------------------------------------------------------------------------------------
# describe-producers


def describe_producers(args: argparse.Namespace) -> int:
    tp = (args.topic, args.partition)
    with client_from_args(args, default_client_id="sharebroker-transactions") as client:
        try:
            producers = describe_producers_of(client, [tp], args.broker_id)[tp]
        except (CauseError, KafkaApiError) as exc:
            where = f"broker {args.broker_id}" if args.broker_id is not None else "leader"
            fail(f"Failed to describe producers for partition {tp_text(tp)} on {where}", _text(exc))
    rows = [[str(s.producer_id), str(s.producer_epoch), str(s.coordinator_epoch if s.coordinator_epoch >= 0 else -1),
             str(s.last_sequence), str(s.last_timestamp),
             str(s.txn_start_offset) if s.txn_start_offset >= 0 else "None"] for s in producers]
    pretty_print_table(DESCRIBE_PRODUCERS_HEADERS, rows)
    return 0


# ------------------------------------------------------------------------------------------
# abort


@dataclass
class AbortSpec:
    tp: TopicPartition
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int

    def __str__(self) -> str:
        return (f"AbortTransactionSpec(topicPartition={tp_text(self.tp)}, producerId={self.producer_id}, "
                f"producerEpoch={self.producer_epoch}, coordinatorEpoch={self.coordinator_epoch})")


def abort_transaction(args: argparse.Namespace) -> int:
    tp = (args.topic, args.partition)
    with client_from_args(args, default_client_id="sharebroker-transactions") as client:
        if args.start_offset is None:
            # A transaction that hung before its first commit or abort shows coordinator epoch -1
            # in DescribeProducers: 0 is no greater than any coordinator epoch.
            spec = AbortSpec(tp, args.producer_id, args.producer_epoch, max(args.coordinator_epoch, 0))
        else:
            spec = _abort_spec_at(client, tp, args.start_offset)
        try:
            _write_abort_marker(client, spec)
        except (CauseError, KafkaApiError) as exc:
            fail(f"Failed to abort transaction {spec}", _text(exc))
    return 0


def _abort_spec_at(client: Client, tp: TopicPartition, start_offset: int) -> AbortSpec:
    try:
        producers = describe_producers_of(client, [tp], None)[tp]
    except (CauseError, KafkaApiError) as exc:
        fail(f"Failed to validate producer state for partition {tp_text(tp)}", _text(exc))
    for s in producers:
        if s.txn_start_offset >= 0 and s.txn_start_offset == start_offset:
            return AbortSpec(tp, s.producer_id, s.producer_epoch, s.coordinator_epoch if s.coordinator_epoch >= 0 else 0)
    fail(f"Could not find any open transactions starting at offset {start_offset} on partition {tp_text(tp)}")


def _write_abort_marker(client: Client, spec: AbortSpec) -> None:
    """WriteTxnMarkers (abort) for the one partition at its leader (AbortTransactionHandler)."""
    deadline = _deadline(client)
    while True:
        leader = leaders_of(client, [spec.tp])[spec.tp]
        resp = client.conn(leader).request(27, {"markers": [{
            "producer_id": spec.producer_id, "producer_epoch": spec.producer_epoch, "transaction_result": False,
            "coordinator_epoch": spec.coordinator_epoch, "transaction_version": 0,
            "topics": [{"name": spec.tp[0], "partition_indexes": [spec.tp[1]]}]}]})
        markers = list(resp.markers)
        if len(markers) != 1 or int(markers[0].producer_id) != spec.producer_id:
            raise CauseError(f"WriteTxnMarkers response included unexpected marker entries (expected to find exactly "
                             f"one entry with producerId {spec.producer_id})")
        topics = list(markers[0].topics)
        if len(topics) != 1 or topics[0].name != spec.tp[0]:
            raise CauseError(f"WriteTxnMarkers response included unexpected topic entries (expected to find exactly "
                             f"one entry with topic partition {tp_text(spec.tp)})")
        parts = list(topics[0].partitions)
        if len(parts) != 1 or int(parts[0].partition_index) != spec.tp[1]:
            raise CauseError(f"WriteTxnMarkers response included unexpected partition entries for topic "
                             f"{spec.tp[0]} (expected to find exactly one entry with partition {spec.tp[1]})")
        code = code_of(parts[0].error_code)
        if code == ErrorCode.none:
            return
        if code in (ErrorCode.not_leader_or_follower, ErrorCode.replica_not_available,
                    ErrorCode.broker_not_available) and time.monotonic() < deadline:
            time.sleep(_RETRY_S)
            continue
        raise CauseError(_abort_error(spec, code))


def _abort_error(spec: AbortSpec, code: int) -> str:
    if code == ErrorCode.cluster_authorization_failed:
        return f"WriteTxnMarkers request with {spec} failed due to cluster authorization error"
    if code == ErrorCode.invalid_producer_epoch:
        return f"WriteTxnMarkers request with {spec} failed due an invalid producer epoch"
    if code == ErrorCode.transaction_coordinator_fenced:
        return (f"WriteTxnMarkers request with {spec} failed since the provided coordinator epoch "
                f"{spec.coordinator_epoch} has been fenced by the active coordinator")
    if code == ErrorCode.unknown_topic_or_partition:
        # Kafka's AdminClient retries this until its timeout; the tools say so at once.
        return error_message(code)
    return f"WriteTxnMarkers request with {spec} failed due to unexpected error: {error_message(code)}"


# ------------------------------------------------------------------------------------------
# find-hanging


@dataclass
class OpenTransaction:
    tp: TopicPartition
    state: ProducerState


def find_hanging(args: argparse.Namespace) -> int:
    broker_id: int | None = args.broker_id
    max_timeout_ms = args.max_transaction_timeout * 60_000
    with client_from_args(args, default_client_id="sharebroker-transactions") as client:
        partitions = _partitions_to_search(client, args.topic, args.partition, broker_id)
        candidates: list[OpenTransaction] = []
        for i in range(0, len(partitions), MAX_BATCH_SIZE):
            batch = partitions[i:i + MAX_BATCH_SIZE]
            try:
                states = describe_producers_of(client, batch, broker_id)
            except (CauseError, KafkaApiError) as exc:
                fail(f"Failed to describe producers for {len(batch)} partitions on broker "
                     f"{'Optional.empty' if broker_id is None else f'Optional[{broker_id}]'}", _text(exc))
            now = now_ms()
            for tp in batch:
                for s in states.get(tp, []):
                    if s.txn_start_offset >= 0 and now - s.last_timestamp > max_timeout_ms:
                        candidates.append(OpenTransaction(tp, s))
        hanging: list[OpenTransaction] = []
        if candidates:
            by_pid: dict[int, list[OpenTransaction]] = {}
            for c in candidates:
                by_pid.setdefault(c.state.producer_id, []).append(c)
            txn_ids = _lookup_transactional_ids(client, set(by_pid))
            descriptions = _describe_for_hanging(client, list(txn_ids.values()))
            for pid, opens in by_pid.items():
                txn_id = txn_ids.get(pid)
                description = descriptions.get(txn_id) if txn_id is not None else None
                if description is None:
                    hanging.extend(opens)  # no transactional id, or the coordinator does not know it
                else:
                    # Ongoing transactions list every partition written to, PrepareCommit/PrepareAbort
                    # the ones still waiting for a marker: the coordinator will still end those.
                    hanging.extend(o for o in opens if o.tp not in description.partitions)
    now = now_ms()
    rows = [[o.tp[0], str(o.tp[1]), str(o.state.producer_id), str(o.state.producer_epoch),
             str(o.state.coordinator_epoch if o.state.coordinator_epoch >= 0 else -1),
             str(o.state.txn_start_offset if o.state.txn_start_offset >= 0 else -1), str(o.state.last_timestamp),
             str(java_minutes(now - o.state.last_timestamp))] for o in hanging]
    pretty_print_table(FIND_HANGING_HEADERS, rows)
    return 0


def _partitions_to_search(client: Client, topic: str | None, partition: int | None,
                          broker_id: int | None) -> list[TopicPartition]:
    if topic is not None and partition is not None:
        return [(topic, partition)]
    if topic is not None:
        topics = [topic]
    else:
        try:
            topics = sorted(client.metadata(None))  # every topic, internal ones too
        except KafkaApiError as exc:
            fail("Failed to list topics", exc.message)
    out: list[TopicPartition] = []
    for i in range(0, len(topics), MAX_BATCH_SIZE):
        batch = topics[i:i + MAX_BATCH_SIZE]
        try:
            infos = client.metadata(batch)
        except KafkaApiError as exc:
            fail(f"Failed to describe {len(batch)} topics", exc.message)
        for name in batch:
            info = infos.get(name)
            code = ErrorCode.unknown_topic_or_partition if info is None else info.error
            if code != ErrorCode.none or info is None:
                fail(f"Failed to describe {len(batch)} topics", error_message(code))
            for index in sorted(info.partitions):
                if broker_id is None or broker_id in info.partitions[index].replicas:
                    out.append((name, index))
    return out


def _lookup_transactional_ids(client: Client, producer_ids: set[int]) -> dict[int, str]:
    try:
        by_broker = list_transactions_of(client, producer_ids=sorted(producer_ids))
    except (CauseError, KafkaApiError) as exc:
        fail(f"Failed to list transactions for {len(producer_ids)} producers", _text(exc))
    out: dict[int, str] = {}
    for listings in by_broker.values():
        for txn_id, pid, _state in listings:
            if pid in producer_ids:  # a listing of another producer id is ignored, as Kafka's tool does
                out[pid] = txn_id
    return out


def _describe_for_hanging(client: Client, transactional_ids: list[str]) -> dict[str, TxnDescription | None]:
    try:
        results = describe_transactions_of(client, transactional_ids)
    except (CauseError, KafkaApiError) as exc:
        fail(f"Failed to describe {len(transactional_ids)} transactions", _text(exc))
    out: dict[str, TxnDescription | None] = {}
    for txn_id, result in results.items():
        if isinstance(result, TxnDescription):
            out[txn_id] = result
        elif result == ErrorCode.transactional_id_not_found:
            out[txn_id] = None
        else:
            fail(f"Failed to describe {len(transactional_ids)} transactions", _describe_txn_error(txn_id, result))
    return out
