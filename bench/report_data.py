"""A broker data directory at the size of a real client test suite's, written straight to files in
the broker's layout, for `sharebroker pipeline report` (and bench.pipeline_report):

    python -m bench.report_data --out /tmp/report-data [--topics 500] [--groups 1000] [--mb 110]

Topics of one to three partitions whose sizes follow a long tail (a few big, most small), records of
100-400 bytes in batches of 50 over two hours (each topic with its own rate), segments rolled at
4 MiB; share groups (70% of the groups) with `__share_group_state` histories of their own (an
initializing snapshot, then updates moving the start offset forward with acknowledged, redelivered
and archived ranges above it), and classic groups (the rest) with `__consumer_offsets` commits.
Deterministic for a given --seed."""

from __future__ import annotations

import argparse
import json
import random
import time
import uuid
from pathlib import Path

from sharebroker.broker.groups.classic_records import CommittedOffset, offset_commit_key, offset_commit_value
from sharebroker.broker.groups.records import offsets_partition
from sharebroker.broker.share_state.records import encode_record, state_partition
from sharebroker.broker.share_state.store import SNAPSHOT, UPDATE, SnapshotValue, StateBatch, StateRecord, UpdateValue
from sharebroker.protocol.record_batch import encode_batch
from sharebroker.storage.log_manager import write_partition_metadata

SEGMENT_BYTES = 4 * 1024 * 1024
BATCH_RECORDS = 50
INTERNAL_PARTITIONS = 50
SPAN_MS = 2 * 3600 * 1000


class PartitionWriter:
    """Appends batches to `<topic>-<n>/<base offset>.log`, rolling at SEGMENT_BYTES."""

    def __init__(self, data: Path, topic: str, index: int, topic_id: uuid.UUID) -> None:
        self.dir = data / f"{topic}-{index}"
        self.dir.mkdir(parents=True, exist_ok=True)
        write_partition_metadata(self.dir, topic_id)
        self.next_offset = 0
        self._file = open(self.dir / f"{0:020d}.log", "wb")  # noqa: SIM115 - closed in close()
        self._size = 0
        self.segments = 1

    def append(self, records: list[tuple[bytes | None, bytes | None, tuple[()], int]], timestamp_ms: int) -> None:
        if self._size >= SEGMENT_BYTES:
            self._file.close()
            self._file = open(self.dir / f"{self.next_offset:020d}.log", "wb")  # noqa: SIM115
            self._size = 0
            self.segments += 1
        batch = encode_batch(records, timestamp_ms=timestamp_ms, base_offset=self.next_offset)
        self._file.write(batch)
        self._size += len(batch)
        self.next_offset += len(records)

    def close(self) -> None:
        self._file.close()


def generate(out: Path, *, topics: int, groups: int, megabytes: float, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    now = int(time.time() * 1000)
    t0 = now - SPAN_MS
    # A long tail of topic sizes: weight 1/rank^0.9, shuffled so names say nothing.
    weights = [1 / (rank + 1) ** 0.9 for rank in range(topics)]
    rng.shuffle(weights)
    total_w = sum(weights)
    budget = megabytes * 1024 * 1024
    ends: dict[tuple[str, int], int] = {}
    ids: dict[str, uuid.UUID] = {}
    segments = records = 0
    for t in range(topics):
        name = f"topic-{t:04d}"
        ids[name] = uuid.UUID(int=rng.getrandbits(128) | (1 << 64))
        parts = 1 + t % 3
        topic_bytes = budget * weights[t] / total_w
        start = t0 + rng.randrange(0, SPAN_MS // 2)
        length = rng.randrange(SPAN_MS // 8, SPAN_MS - (start - t0))
        for p in range(parts):
            w = PartitionWriter(out, name, p, ids[name])
            written = 0.0
            target = topic_bytes / parts
            while written < target:
                ts = start + int(length * written / max(target, 1))
                size = rng.randrange(100, 400)
                body = (f'{{"topic":"{name}","n":{w.next_offset},"pad":"' + "x" * size + '"}').encode()
                batch = [(f"k{w.next_offset + i}".encode(), body, (), ts + i) for i in range(BATCH_RECORDS)]
                w.append(batch, ts)
                written += BATCH_RECORDS * (len(body) + 20)
            w.close()
            ends[(name, p)] = w.next_offset
            segments += w.segments
            records += w.next_offset

    state: dict[int, list[tuple[bytes, bytes | None, int]]] = {}
    offsets: dict[int, list[tuple[bytes, bytes | None, int]]] = {}
    configs: dict[str, dict[str, str]] = {}
    names = sorted(ids)
    share_groups = int(groups * 0.7)
    for g in range(groups):
        subscribed = rng.sample(names, 1 + (g % 2))
        if g < share_groups:
            group = f"share-{g:04d}"
            configs[group] = {"share.auto.offset.reset": "earliest"}
            for topic in subscribed:
                for p in range(1 + int(topic[-4:]) % 3):
                    end = ends[(topic, p)]
                    _share_history(rng, state, group, ids[topic], p, end, t0, now)
        else:
            group = f"classic-{g:04d}"
            for topic in subscribed:
                for p in range(1 + int(topic[-4:]) % 3):
                    committed = int(ends[(topic, p)] * rng.random() ** 0.3)
                    ts = rng.randrange(t0, now)
                    offsets.setdefault(offsets_partition(group, INTERNAL_PARTITIONS), []).append(
                        (offset_commit_key(group, topic, p),
                         offset_commit_value(CommittedOffset(committed, -1, "", ts, -1)), ts))
    for topic_name, by_partition in (("__share_group_state", state), ("__consumer_offsets", offsets)):
        for p in range(INTERNAL_PARTITIONS):
            d = out / f"{topic_name}-{p}"
            d.mkdir(exist_ok=True)
            items = sorted(by_partition.get(p, []), key=lambda kv: kv[2])
            with open(d / f"{0:020d}.log", "wb") as f:
                for i in range(0, len(items), 100):
                    chunk = items[i:i + 100]
                    f.write(encode_batch([(k, v, (), ts) for k, v, ts in chunk], timestamp_ms=chunk[0][2],
                                         base_offset=i))
            segments += 1
    (out / "share-group-configs.json").write_text(json.dumps(configs))
    return {"topics": topics, "partitions": len(ends), "segments": segments, "records": records,
            "share_groups": share_groups, "classic_groups": groups - share_groups,
            "bytes": sum(f.stat().st_size for f in out.rglob("*.log"))}


def _share_history(rng: random.Random, state: dict[int, list[tuple[bytes, bytes | None, int]]], group: str,
                   topic_id: uuid.UUID, partition: int, end: int, t0: int, now: int) -> None:
    """An initializing snapshot at 0, then a few updates: the start offset moves up to somewhere
    before the end (a long tail of lag), with acknowledged, redelivered and archived ranges above."""
    key = (group, topic_id, partition)
    sp = state_partition(group, topic_id, partition, INTERNAL_PARTITIONS)
    ts = rng.randrange(t0, now - 60_000)
    records = [StateRecord(key, SNAPSHOT, SnapshotValue(0, 1, 0, 0, 0, ts, ts, []))]
    final_start = int(end * (1 - rng.random() ** 3 * 0.9))
    steps = 1 + rng.randrange(4)
    for step in range(1, steps + 1):
        start = final_start * step // steps
        batches: list[StateBatch] = []
        cursor = start
        for _ in range(rng.randrange(0, 4)):
            first = cursor + rng.randrange(0, 50)
            last = first + rng.randrange(0, 20)
            if last >= end:
                break
            kind = rng.random()
            if kind < 0.3:
                batches.append(StateBatch(first, last, 4, 5))  # archived at the delivery limit
            elif kind < 0.7:
                batches.append(StateBatch(first, last, 0, 1 + rng.randrange(1, 4)))  # released: redelivered
            else:
                batches.append(StateBatch(first, last, 2, 1 + rng.randrange(0, 3)))  # acknowledged
            cursor = last + 1
        records.append(StateRecord(key, UPDATE, UpdateValue(0, 0, start, 0, batches)))
    for i, rec in enumerate(records):
        k, v = encode_record(rec)
        state.setdefault(sp, []).append((k, v, ts + i * 1000))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--topics", type=int, default=500)
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--mb", type=float, default=110.0, help="megabytes of user-topic records (about)")
    ap.add_argument("--seed", type=int, default=25)
    args = ap.parse_args()
    started = time.perf_counter()
    figures = generate(args.out, topics=args.topics, groups=args.groups, megabytes=args.mb, seed=args.seed)
    print(json.dumps({**figures, "seconds": round(time.perf_counter() - started, 1)}))


if __name__ == "__main__":
    main()
