"""`sharebroker produce`, `consume` and `share-consume`: the console producer, consumer and share
consumer (kafka-console-producer.sh, kafka-console-consumer.sh, kafka-console-share-consumer.sh)."""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import time
from typing import Any

from kio.schema.errors import ErrorCode

from sharebroker.cli.common import add_connection_options, client_from_args, int_value, run_tool, usage_error
from sharebroker.cli.consumers import Fetcher, GroupMember
from sharebroker.cli.formatter import MessageFormatter, parse_properties
from sharebroker.cli.records import CODECS, encode
from sharebroker.cli.share_consumer import ACCEPT, REJECT, RELEASE, ShareConsumer
from sharebroker.cli.wire import Client, KafkaApiError, ToolError, TopicInfo, code_of, error_message

DEFAULT_SHARE_GROUP = "console-share-consumer"


def add_parsers(sub: argparse._SubParsersAction) -> None:
    _produce_parser(sub)
    _consume_parser(sub)
    _share_consume_parser(sub)


class _StopFlag:
    """SIGINT/SIGTERM: the first one asks the consume loop to finish (acknowledge, commit, leave the
    group); a second one interrupts whatever is running."""

    requested = False

    @classmethod
    def install(cls) -> None:
        cls.requested = False

        def stop(signum: int, frame: Any) -> None:
            if cls.requested:
                raise KeyboardInterrupt
            cls.requested = True

        try:
            signal.signal(signal.SIGTERM, stop)
            signal.signal(signal.SIGINT, stop)
        except ValueError:  # not the main thread
            pass


# ------------------------------------------------------------------------------------------
# produce


def _produce_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("produce", help="produce lines from stdin (kafka-console-producer.sh)",
                       description="Read lines from standard input and produce each as a record.")
    add_connection_options(p)
    p.add_argument("--topic", required=True, help="REQUIRED: the topic to produce to")
    p.add_argument("--property", action="append", default=[], metavar="K=V",
                   help="reader properties: parse.key=true, key.separator (default tab), ignore.error, null.marker")
    p.add_argument("--reader-property", action="append", default=[], metavar="K=V", help="same as --property")
    p.add_argument("--producer-property", "--command-property", action="append", default=[], metavar="K=V",
                   dest="producer_property", help="producer settings: acks, compression.type, client.id")
    p.add_argument("--request-required-acks", default=None, metavar="ACKS", help="-1/all (default), 1 or 0")
    p.add_argument("--compression-codec", nargs="?", const="gzip", default=None, metavar="CODEC",
                   help="none, gzip (default when given without a value), snappy, lz4 or zstd")
    p.add_argument("--partition", type=int_value, default=None, help="produce every record to this partition")
    p.set_defaults(handler=lambda args: run_tool(produce, args))


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (the default partitioner's hash for keyed records), as a signed int32."""
    mask = 0xFFFFFFFF
    length = len(data)
    m, r = 0x5BD1E995, 24
    h = (0x9747B28C ^ length) & mask
    for i in range(length // 4):
        k = int.from_bytes(data[i * 4:i * 4 + 4], "little")
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    rem = length % 4
    tail = length & ~3
    if rem == 3:
        h ^= data[tail + 2] << 16
    if rem >= 2:
        h ^= data[tail + 1] << 8
    if rem >= 1:
        h ^= data[tail]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def _unescape(text: str) -> str:
    return text.encode("utf-8").decode("unicode_escape") if "\\" in text else text


def produce(args: argparse.Namespace) -> int:
    props = parse_properties(args.property + args.reader_property, "--property")
    pprops = parse_properties(args.producer_property, "--producer-property")
    parse_key = props.get("parse.key", "false").strip().lower() == "true"
    key_sep = _unescape(props.get("key.separator", "\t")).encode()
    ignore_error = props.get("ignore.error", "false").strip().lower() == "true"
    null_marker = props.get("null.marker")
    null_marker_b = null_marker.encode() if null_marker is not None else None
    acks_text = args.request_required_acks or pprops.get("acks", "-1")
    acks = {"all": -1, "-1": -1, "1": 1, "0": 0}.get(str(acks_text).strip().lower())
    if acks is None:
        raise ToolError(f"Invalid acks '{acks_text}': use all, -1, 1 or 0", 2)
    codec_name = (args.compression_codec or pprops.get("compression.type", "none")).lower()
    if codec_name not in CODECS:
        raise ToolError(f"Unknown compression codec '{codec_name}' (none, gzip, snappy, lz4, zstd)", 2)
    codec = CODECS[codec_name]
    extra = {"client.id": pprops["client.id"]} if "client.id" in pprops else None
    with client_from_args(args, default_client_id="console-producer", extra_props=extra) as client:
        info = client.topic(args.topic, allow_auto=True)
        if args.partition is not None and args.partition not in info.partitions:
            raise ToolError(f"Partition {args.partition} of topic '{args.topic}' does not exist.")
        producer = _Producer(client, info, acks, codec, args.partition)
        fd = sys.stdin.fileno()
        buf = b""
        line_no = 0
        while True:
            chunk = os.read(fd, 1 << 16)
            if chunk:
                buf += chunk
                *lines, buf = buf.split(b"\n")
            else:
                lines, buf = ([buf] if buf else []), b""
            batch = []
            for raw in lines:
                line_no += 1
                line = raw[:-1] if raw.endswith(b"\r") else raw
                key: bytes | None = None
                value: bytes | None = line
                if parse_key:
                    idx = line.find(key_sep)
                    if idx < 0:
                        if not ignore_error:
                            producer.flush()
                            raise ToolError(f"No key separator found on line number {line_no}: "
                                            f"'{line.decode('utf-8', 'replace')}'")
                    else:
                        key, value = line[:idx], line[idx + len(key_sep):]
                if null_marker_b is not None:
                    key = None if key == null_marker_b else key
                    value = None if value == null_marker_b else value
                batch.append((key, value))
            if batch:
                producer.send(batch)
            if not chunk:
                break
        producer.flush()
    return 0


class _Producer:
    def __init__(self, client: Client, info: TopicInfo, acks: int, codec: int, partition: int | None) -> None:
        self.client, self.info, self.acks, self.codec, self.partition = client, info, acks, codec, partition
        self.sticky = random.choice(sorted(info.partitions))

    def _partition_of(self, key: bytes | None) -> int:
        if self.partition is not None:
            return self.partition
        n = len(self.info.partitions)
        if key is not None:
            return (murmur2(key) & 0x7FFFFFFF) % n
        return self.sticky

    def send(self, items: list[tuple[bytes | None, bytes | None]]) -> None:
        by_partition: dict[int, list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int | None]]] = {}
        for key, value in items:
            by_partition.setdefault(self._partition_of(key), []).append((key, value, [], None))
        if self.partition is None and len(self.info.partitions) > 1:
            self.sticky = random.choice(sorted(self.info.partitions))  # the next batch of unkeyed records moves on
        now = int(time.time() * 1000)
        by_leader: dict[int, dict[int, bytes]] = {}
        for p, recs in by_partition.items():
            leader = self.info.partitions[p].leader
            if leader < 0:
                raise ToolError(f"Partition {self.info.name}-{p} has no leader.")
            by_leader.setdefault(leader, {})[p] = encode(recs, timestamp_ms=now, compression=self.codec)
        for leader, parts in by_leader.items():
            data = {"transactional_id": None, "acks": self.acks, "timeout": self.client.timeout_ms,
                    "topic_data": [{"name": self.info.name, "partition_data": [{"index": p, "records": b}
                                                                              for p, b in sorted(parts.items())]}]}
            conn = self.client.conn(leader)
            if self.acks == 0:
                conn.request(0, data, expect_response=False)
                continue
            resp = conn.request(0, data)
            for t in resp.responses:
                for p in t.partition_responses:
                    code = code_of(p.error_code)
                    if code:
                        raise ToolError(f"Error when sending message to topic {self.info.name} partition {p.index} "
                                        f"with error: {error_name_text(code, getattr(p, 'error_message', None))}")

    def flush(self) -> None:
        pass


def error_name_text(code: int, message: str | None) -> str:
    try:
        name = ErrorCode(int(code)).name.upper()
    except ValueError:
        name = str(code)
    return f"{name}: {error_message(code, message)}"


# ------------------------------------------------------------------------------------------
# consume


def _consume_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("consume", help="print records of a topic (kafka-console-consumer.sh)",
                       description="Print the records of a topic. Without --group the partitions are assigned "
                                   "directly; with --group the tool joins that classic consumer group and commits "
                                   "what it printed.")
    add_connection_options(p)
    p.add_argument("--topic", required=True, help="REQUIRED: the topic to consume")
    p.add_argument("--group", help="join this consumer group (classic protocol) and commit offsets")
    p.add_argument("--from-beginning", action="store_true",
                   help="start with the earliest record when there is no committed offset")
    p.add_argument("--partition", type=int_value, help="consume only this partition")
    p.add_argument("--offset", default=None, metavar="OFFSET",
                   help="with --partition: earliest, latest (default) or an offset")
    p.add_argument("--max-messages", type=int_value, default=-1, metavar="N", help="exit after N records")
    p.add_argument("--timeout-ms", type=int_value, default=-1, metavar="MS",
                   help="exit when no record arrived for this long")
    p.add_argument("--property", "--formatter-property", action="append", default=[], dest="property",
                   metavar="K=V", help="formatter settings: print.key, print.offset, print.partition, "
                                       "print.timestamp, print.headers, key.separator, ...")
    p.add_argument("--consumer-property", "--command-property", action="append", default=[],
                   dest="consumer_property", metavar="K=V", help="client.id, group.id, auto.offset.reset")
    p.set_defaults(handler=lambda args: _consume_entry(p, args))


def _consume_entry(p: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.offset is not None and args.partition is None:
        usage_error(p, "The partition is required when offset is specified.")
    if args.offset is not None and args.group:
        usage_error(p, "Options --group and --offset cannot be specified together.")
    if args.partition is not None and args.group:
        usage_error(p, "Options --group and --partition cannot be specified together.")
    if args.from_beginning and args.offset is not None:
        usage_error(p, "Options --from-beginning and --offset cannot be specified together.")
    if args.offset is not None and args.offset not in ("earliest", "latest"):
        try:
            if int(args.offset) < 0:
                raise ValueError
        except ValueError:
            usage_error(p, f"The provided offset value '{args.offset}' is incorrect. Valid values are 'earliest', "
                           f"'latest', or a non-negative long.")
    return run_tool(consume, args)


def consume(args: argparse.Namespace) -> int:
    fprops = parse_properties(args.property, "--property")
    cprops = parse_properties(args.consumer_property, "--consumer-property")
    formatter = MessageFormatter(fprops)
    group = args.group or cprops.get("group.id")
    if args.group and cprops.get("group.id") and cprops["group.id"] != args.group:
        raise ToolError(f"The group ids provided in different places do not match: '{args.group}' and "
                        f"'{cprops['group.id']}'.", 2)
    reset = "earliest" if args.from_beginning else cprops.get("auto.offset.reset", "latest")
    if reset not in ("earliest", "latest"):
        raise ToolError(f"Invalid auto.offset.reset '{reset}': use earliest or latest", 2)
    extra = {"client.id": cprops["client.id"]} if "client.id" in cprops else None
    count = 0
    _StopFlag.install()
    out = sys.stdout.buffer
    client = client_from_args(args, default_client_id="console-consumer", extra_props=extra)
    member: GroupMember | None = None
    consumed: dict[tuple[str, int], int] = {}
    try:
        info = client.topic(args.topic)
        topics = {args.topic: info}
        fetcher = Fetcher(client, topics, reset=reset)
        if group:
            member = GroupMember(client, group, [args.topic])

            def rejoin() -> None:
                if consumed:
                    member.commit(dict(consumed))
                assignment = member.join({args.topic: len(info.partitions)})
                tps = [(t, p) for t, ps in assignment.items() for p in ps]
                committed = member.committed({t: ps for t, ps in assignment.items()}) if tps else {}
                fetcher.assign({tp: committed.get(tp, reset) for tp in tps})

            rejoin()
        else:
            if args.partition is not None:
                if args.partition not in info.partitions:
                    raise ToolError(f"Partition {args.partition} of topic '{args.topic}' does not exist.")
                start: int | str = "latest"
                if args.offset is not None:
                    start = args.offset if args.offset in ("earliest", "latest") else int(args.offset)
                elif args.from_beginning:
                    start = "earliest"
                fetcher.assign({(args.topic, args.partition): start})
            else:
                fetcher.assign({(args.topic, p): reset for p in sorted(info.partitions)})
        idle_deadline = time.monotonic() + args.timeout_ms / 1000.0 if args.timeout_ms >= 0 else None
        last_commit = time.monotonic()
        while (args.max_messages < 0 or count < args.max_messages) and not _StopFlag.requested:
            if member is not None:
                if member.heartbeat_if_due():
                    rejoin()
                if time.monotonic() - last_commit >= 5.0 and consumed:
                    member.commit(dict(consumed))
                    last_commit = time.monotonic()
            wait = 500
            if idle_deadline is not None:
                wait = max(0, min(wait, int((idle_deadline - time.monotonic()) * 1000)))
            records = fetcher.fetch(wait)
            for r in records:
                if 0 <= args.max_messages <= count:
                    break
                formatter.write(r, out)
                consumed[(r.topic, r.partition)] = r.offset + 1
                count += 1
            idle_deadline, idle = _idle_deadline(bool(records), args.timeout_ms, idle_deadline)
            if idle:
                break  # --timeout-ms without a record: stop, like the Kafka tools' TimeoutException
    except KeyboardInterrupt:
        pass
    finally:
        try:
            if member is not None:
                try:
                    if consumed:
                        failed = member.commit(dict(consumed))
                        if failed:
                            text = ", ".join(f"{t}-{p}: {ErrorCode(c).name.upper()}" for (t, p), c in failed.items())
                            print(f"WARN: committing offsets failed for {text}", file=sys.stderr)
                finally:
                    member.leave()
        finally:
            client.close()
            print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


# ------------------------------------------------------------------------------------------
# share-consume


def _share_consume_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("share-consume", help="consume as a member of a share group (kafka-console-share-consumer.sh)",
                       description="Consume a topic as a member of a share group. Each record is acknowledged "
                                   "explicitly after it is printed (ACCEPT, or RELEASE/REJECT with --release/"
                                   "--reject).")
    add_connection_options(p)
    p.add_argument("--topic", required=True, help="REQUIRED: the topic to consume")
    p.add_argument("--group", default=None, help=f"the share group (default {DEFAULT_SHARE_GROUP})")
    p.add_argument("--max-messages", type=int_value, default=-1, metavar="N", help="exit after N records")
    p.add_argument("--timeout-ms", type=int_value, default=-1, metavar="MS",
                   help="exit when no record arrived for this long")
    p.add_argument("--release", action="store_true", help="acknowledge every record with RELEASE")
    p.add_argument("--reject", action="store_true", help="acknowledge every record with REJECT")
    p.add_argument("--reject-message-on-error", action="store_true",
                   help="REJECT a record that cannot be printed instead of exiting")
    p.add_argument("--formatter-property", "--property", action="append", default=[], dest="formatter_property",
                   metavar="K=V", help="print.delivery, print.key, print.offset, print.partition, ...")
    p.add_argument("--command-property", "--consumer-property", action="append", default=[], dest="command_property",
                   metavar="K=V", help="client.id, group.id, max.poll.records")
    p.set_defaults(handler=lambda args: _share_consume_entry(p, args))


def _share_consume_entry(p: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.release and args.reject:
        usage_error(p, "At most one of --reject and --release may be specified.")
    return run_tool(share_consume, args)


def share_consume(args: argparse.Namespace) -> int:
    fprops = parse_properties(args.formatter_property, "--formatter-property")
    cprops = parse_properties(args.command_property, "--command-property")
    props_group = cprops.get("group.id")
    if args.group and props_group and props_group != args.group:
        raise ToolError(f"The group ids provided in different places (directly using '--group', via "
                        f"'--command-property', or via '--command-config') do not match. Detected group ids: "
                        f"'{args.group}', '{props_group}'", 2)
    group = args.group or props_group or DEFAULT_SHARE_GROUP
    formatter = MessageFormatter(fprops)
    kind = RELEASE if args.release else REJECT if args.reject else ACCEPT
    try:
        max_poll = int(cprops.get("max.poll.records", "500"))
    except ValueError:
        raise ToolError("max.poll.records must be an integer", 2) from None
    client_id = cprops.get("client.id", "console-share-consumer")
    count = 0
    _StopFlag.install()
    out = sys.stdout.buffer
    client = client_from_args(args, default_client_id=client_id, extra_props={"client.id": client_id})
    consumer = ShareConsumer(client, group, [args.topic], max_records=max_poll,
                             warn=lambda text: print(text, file=sys.stderr))
    try:
        consumer.start()
        idle_deadline = time.monotonic() + args.timeout_ms / 1000.0 if args.timeout_ms >= 0 else None
        while (args.max_messages < 0 or count < args.max_messages) and not _StopFlag.requested:
            wait = 500
            if idle_deadline is not None:
                wait = max(0, min(wait, int((idle_deadline - time.monotonic()) * 1000)))
            limit = max_poll if args.max_messages < 0 else max(1, min(max_poll, args.max_messages - count))
            records = consumer.poll(wait, limit)
            for r in records:
                if 0 <= args.max_messages <= count:
                    break  # not printed: left unacknowledged, released when the session closes
                try:
                    formatter.write(r, out)
                except BrokenPipeError:
                    raise
                except Exception as exc:
                    if args.reject_message_on_error:
                        print(f"ERROR Error processing message, rejecting this message: {exc}", file=sys.stderr)
                        consumer.acknowledge(r, REJECT)
                        count += 1
                        continue
                    raise
                consumer.acknowledge(r, kind)
                count += 1
            idle_deadline, idle = _idle_deadline(bool(records), args.timeout_ms, idle_deadline)
            if idle:
                break  # --timeout-ms without a record: stop, like the Kafka tools' TimeoutException
    except KeyboardInterrupt:
        pass
    finally:
        try:
            consumer.close()
        finally:
            client.close()
            print(f"Processed a total of {count} messages", file=sys.stderr)
    return 1 if consumer.ack_failures else 0


__all__ = ["KafkaApiError", "add_parsers", "murmur2"]


def _idle_deadline(got_records: bool, timeout_ms: int, deadline: float | None) -> tuple[float | None, bool]:
    """The --timeout-ms deadline after a fetch, and whether it passed without a record."""
    if got_records:
        return (time.monotonic() + timeout_ms / 1000.0 if timeout_ms >= 0 else deadline), False
    return deadline, deadline is not None and time.monotonic() >= deadline
