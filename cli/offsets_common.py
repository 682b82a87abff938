"""Offset arithmetic shared by `share-groups --reset-offsets` and `consumer-groups --reset-offsets`
(Kafka's GroupOffsetsResetter): scopes, scenarios, range checks and the NEW-OFFSET table."""

from __future__ import annotations

import argparse
import datetime
import re
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from sharebroker.cli.common import table, usage_error, width
from sharebroker.cli.wire import Client, KafkaApiError, ToolError, TopicInfo, error_message

SCENARIOS = ("to_offset", "to_earliest", "to_latest", "to_current", "to_datetime", "by_duration", "from_file",
             "shift_by")

TP = tuple[str, int]


def add_reset_options(p: argparse.ArgumentParser, *, shift_by: bool = False) -> None:
    p.add_argument("--reset-offsets", action="store_true", help="reset the offsets of an inactive group")
    p.add_argument("--dry-run", action="store_true", help="only show the new offsets (the default)")
    p.add_argument("--execute", action="store_true", help="apply the new offsets")
    p.add_argument("--export", action="store_true", help="print the new offsets as CSV (topic,partition,offset)")
    p.add_argument("--all-topics", action="store_true", help="reset every topic partition the group has offsets for")
    p.add_argument("--to-offset", type=int, metavar="OFFSET", help="reset to this offset (clamped to the log range)")
    p.add_argument("--to-earliest", action="store_true", help="reset to the earliest offset")
    p.add_argument("--to-latest", action="store_true", help="reset to the latest offset")
    p.add_argument("--to-current", action="store_true", help="reset to the current offset")
    p.add_argument("--to-datetime", metavar="YYYY-MM-DDThh:mm:ss.sss",
                   help="reset to the first offset at or after this time (local time unless a zone is given)")
    p.add_argument("--by-duration", metavar="PnDTnHnMnS",
                   help="reset to the first offset at or after now minus this ISO-8601 duration")
    p.add_argument("--from-file", metavar="CSV", help="reset to the offsets in a CSV file (topic,partition,offset)")
    if shift_by:
        p.add_argument("--shift-by", type=int, metavar="N", help="move the current offsets by N (may be negative)")


def chosen_scenarios(args: argparse.Namespace) -> list[str]:
    out = []
    for s in SCENARIOS:
        v = getattr(args, s, None)
        if v is not None and v is not False:
            out.append(s)
    return out


def parse_datetime_ms(text: str) -> int:
    """Kafka's Utils.getDateTime: 'YYYY-MM-DDThh:mm:ss[.sss][zone]'; local time without a zone."""
    s = text.strip()
    m = re.fullmatch(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(\.\d{1,3})?(Z|[+-]\d{2}:?\d{2})?", s)
    if not m:
        raise ToolError(f"Error parsing timestamp '{text}': expected the format YYYY-MM-DDThh:mm:ss.sss "
                        f"(optionally followed by a zone such as Z or +01:00).")
    base = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")
    ms = int((m.group(2) or ".0")[1:].ljust(3, "0"))
    zone = m.group(3)
    if zone:
        if zone == "Z":
            tz = datetime.UTC
        else:
            sign = -1 if zone[0] == "-" else 1
            digits = zone[1:].replace(":", "")
            tz = datetime.timezone(sign * datetime.timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
        base = base.replace(tzinfo=tz)
    else:
        base = base.astimezone()  # local time
    return int(base.timestamp() * 1000) + ms


_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?"
                       r"(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+(?:[.,]\d{0,9})?)S)?)?", re.IGNORECASE)


def parse_duration_ms(text: str) -> int:
    """java.time.Duration.parse: PnDTnHnMn.nS."""
    m = _DURATION.fullmatch(text.strip())
    if not m or not any(m.group(i) for i in range(2, 6)) or text.strip().upper().endswith("T"):
        raise ToolError(f"Text cannot be parsed to a Duration: {text}")
    days, hours, minutes = (int(m.group(i) or 0) for i in (2, 3, 4))
    seconds = float((m.group(5) or "0").replace(",", "."))
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if m.group(1) == "-":
        total = -total
    return round(total * 1000)


def parse_topic_args(client: Client, topic_args: list[str], topics: dict[str, TopicInfo]) -> list[TP]:
    """`topic` (every partition) or `topic:0,1,2`, as GroupOffsetsResetter.parseTopicPartitionsToReset."""
    specified: list[TP] = []
    whole: list[str] = []
    for arg in topic_args:
        if ":" in arg:
            parts = arg.split(":")
            if len(parts) != 2:
                raise ToolError(f"Invalid topic arg '{arg}', expected topic name and partitions")
            name, plist = parts
            for p in plist.split(","):
                try:
                    specified.append((name, int(p)))
                except ValueError:
                    raise ToolError(f"Invalid partition '{p}' specified in topic arg '{arg}''") from None
        else:
            whole.append(arg)
    for name in whole:
        info = topics.get(name)
        if info is None or info.error:
            raise ToolError(f"Topic '{name}' does not exist.")
        specified.extend((name, p) for p in sorted(info.partitions))
    return specified


def check_partitions_exist(partitions: list[TP], topics: dict[str, TopicInfo]) -> None:
    missing = [tp for tp in partitions
               if topics.get(tp[0]) is None or topics[tp[0]].error or tp[1] not in topics[tp[0]].partitions]
    if missing:
        raise ToolError("The partitions \"" + ",".join(f"{t}-{p}" for t, p in missing) + "\" do not exist")
    no_leader = [tp for tp in partitions if topics[tp[0]].partitions[tp[1]].leader < 0]
    if no_leader:
        raise ToolError("The partitions \"" + ",".join(f"{t}-{p}" for t, p in no_leader) + "\" have no leader")


def _by_topic(partitions: list[TP]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t, p in partitions:
        out.setdefault(t, []).append(p)
    return out


def log_offsets(client: Client, partitions: list[TP], spec: int, topics: dict[str, TopicInfo],
                what: str) -> dict[TP, int]:
    if not partitions:
        return {}
    got = client.list_offsets(_by_topic(partitions), spec, topics)
    out = {}
    for tp in partitions:
        code, offset = got.get(tp, (3, -1))
        if code:
            raise KafkaApiError(code, None, f"Error getting {what} offset of topic partition: {tp[0]}-{tp[1]}: ")
        out[tp] = offset
    return out


def check_range(client: Client, requested: dict[TP, int], topics: dict[str, TopicInfo]) -> dict[TP, int]:
    parts = list(requested)
    starts = log_offsets(client, parts, -2, topics, "starting")
    ends = log_offsets(client, parts, -1, topics, "ending")
    out = {}
    for tp, offset in requested.items():
        if offset > ends[tp]:
            print(f"WARN: New offset ({offset}) is higher than latest offset for topic partition {tp[0]}-{tp[1]}. "
                  f"Value will be set to {ends[tp]}.", file=sys.stderr)
            out[tp] = ends[tp]
        elif offset < starts[tp]:
            print(f"WARN: New offset ({offset}) is lower than earliest offset for topic partition {tp[0]}-{tp[1]}. "
                  f"Value will be set to {starts[tp]}.", file=sys.stderr)
            out[tp] = starts[tp]
        else:
            out[tp] = offset
    return out


def timestamp_offsets(client: Client, partitions: list[TP], ts: int, topics: dict[str, TopicInfo]) -> dict[TP, int]:
    got = client.list_offsets(_by_topic(partitions), ts, topics)
    out: dict[TP, int] = {}
    empty = []
    for tp in partitions:
        code, offset = got.get(tp, (3, -1))
        if code:
            raise KafkaApiError(code, None, f"Error getting offset by timestamp of topic partition: {tp[0]}-{tp[1]}: ")
        if offset == -1:
            print(f"\nWarn: Partition {tp[1]} from topic {tp[0]} is empty. Falling back to latest known offset.")
            empty.append(tp)
        else:
            out[tp] = offset
    out.update(log_offsets(client, empty, -1, topics, "ending"))
    return out


def read_reset_file(path: str, group: str) -> dict[TP, int]:
    """CSV lines `topic,partition,offset` (or `group,topic,partition,offset`)."""
    try:
        lines = [ln.strip() for ln in Path(path).read_text().splitlines() if ln.strip()]
    except OSError as exc:
        raise ToolError(f"Cannot read {path}: {exc.strerror or exc}") from None
    out: dict[TP, int] = {}
    for ln in lines:
        cells = [c.strip() for c in ln.split(",")]
        try:
            if len(cells) == 3:
                out[(cells[0], int(cells[1]))] = int(cells[2])
            elif len(cells) == 4:
                if cells[0] == group:
                    out[(cells[1], int(cells[2]))] = int(cells[3])
            else:
                raise ValueError
        except ValueError:
            raise ToolError(f"Invalid line in {path}: '{ln}' (expected topic,partition,offset)") from None
    return out


def compute_offsets(client: Client, args: argparse.Namespace, group: str, partitions: list[TP],
                    topics: dict[str, TopicInfo], current: dict[TP, int]) -> dict[TP, int]:
    """New offsets for the chosen scenario. `current` = the group's current offsets (for
    --to-current / --shift-by)."""
    if args.from_file:
        requested = read_reset_file(args.from_file, group)
        check_partitions_exist(list(requested), topics)
        return check_range(client, requested, topics)
    check_partitions_exist(partitions, topics)
    if args.to_offset is not None:
        return check_range(client, {tp: args.to_offset for tp in partitions}, topics)
    if args.to_earliest:
        return log_offsets(client, partitions, -2, topics, "starting")
    if args.to_latest:
        return log_offsets(client, partitions, -1, topics, "ending")
    if args.to_datetime:
        return timestamp_offsets(client, partitions, parse_datetime_ms(args.to_datetime), topics)
    if args.by_duration:
        ts = int(time.time() * 1000) - parse_duration_ms(args.by_duration)
        return timestamp_offsets(client, partitions, ts, topics)
    if getattr(args, "shift_by", None) is not None:
        missing = [tp for tp in partitions if tp not in current]
        if missing:
            raise ToolError(f"Cannot shift offset for partition {missing[0][0]}-{missing[0][1]} since there is no "
                            f"current committed offset")
        return check_range(client, {tp: current[tp] + args.shift_by for tp in partitions}, topics)
    if args.to_current:
        with_current = {tp: current[tp] for tp in partitions if tp in current}
        rest = [tp for tp in partitions if tp not in current]
        with_current.update(log_offsets(client, rest, -1, topics, "ending"))
        return with_current
    raise ToolError("no reset scenario")  # argument checks make this unreachable


def print_reset_table(group: str, offsets: dict[TP, int], export: bool) -> None:
    rows = sorted(offsets.items())
    if export:
        print("".join(f"{t},{p},{o}\n" for (t, p), o in rows))
        return
    if not rows:
        print()
        return
    gw = width([group])
    tw = width([t for (t, _p), _o in rows])
    sys.stdout.write(table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                           [[group, t, p, o] for (t, p), o in rows], [gw, tw, 10, None]))



def check_reset_scope(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if sum(1 for s in (bool(args.topic), args.all_topics, bool(args.from_file)) if s) == 0:
        usage_error(p, "Option [reset-offsets] takes one of these options: [topic], [all-topics], [from-file]")
    if args.topic and args.all_topics:
        usage_error(p, "Option [reset-offsets] takes either [topic] or [all-topics], not both.")


def is_dry_run(args: argparse.Namespace) -> bool:
    """--dry-run is the default; without either option say so on stderr."""
    if not args.execute and not args.dry_run:
        print("WARN: No action will be performed as the --execute option is missing. Add --execute to apply "
              "the new offsets, or --dry-run to keep this behaviour explicitly.", file=sys.stderr)
    return args.dry_run or not args.execute


def reset_topics(client: Client, args: argparse.Namespace, group: str, names: set[str]) -> dict[str, TopicInfo]:
    """Metadata of the topics a reset touches: --topic, --from-file and `names`."""
    names = {t.split(":")[0] for t in args.topic} | names
    if args.from_file:
        names |= {t for t, _p in read_reset_file(args.from_file, group)}
    return client.metadata(sorted(names)) if names else {}


def reset_partitions(client: Client, args: argparse.Namespace, topics: dict[str, TopicInfo],
                     all_partitions: Callable[[], Iterable[TP]]) -> list[TP]:
    """The partitions --all-topics (`all_partitions`) or --topic name; none for --from-file."""
    if args.all_topics:
        return sorted(all_partitions())
    if args.topic:
        return parse_topic_args(client, args.topic, topics)
    return []

__all__ = [
    "add_reset_options",
    "check_partitions_exist",
    "check_reset_scope",
    "chosen_scenarios",
    "compute_offsets",
    "error_message",
    "is_dry_run",
    "parse_topic_args",
    "print_reset_table",
    "reset_partitions",
    "reset_topics",
]
