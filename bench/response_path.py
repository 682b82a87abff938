"""`python -m bench.response_path`: the cost of turning a Fetch or ShareFetch answer into the bytes
for the socket, kio's way (codec.build of the handler's dicts, then codec.encode_response) next to
the direct encoders of protocol/fetch_responses.py, in one run. Pure CPU, no broker; prints its
figures and writes nothing.

Each figure is the best of several rounds, in microseconds per response. "copied" is the record
bytes copied on the way out: encode_response writes them into a BytesIO and copies them out again;
the direct encoders hand them to the transport untouched."""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from sharebroker.protocol.codec import build, encode_response, response_class
from sharebroker.protocol.fetch_responses import (
    AcquiredRecords,
    FetchPartition,
    FetchTopic,
    ShareFetchPartition,
    ShareFetchTopic,
    encode_fetch_response,
    encode_share_fetch_response,
    frame_size,
)

RECORDS = 16 * 1024


def _best_us(fn: Callable[[], object], rounds: int, budget_s: float) -> float:
    """Best per-call time over `rounds` rounds, each long enough to be measured."""
    n = 1
    while True:  # calls per round: about budget_s / rounds each
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        if time.perf_counter() - t0 > budget_s / rounds / 4 or n >= 1 << 20:
            break
        n *= 2
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter_ns() - t0) / n / 1000)
    return best


def _fetch_case(version: int, partitions: int) -> tuple[Callable[[], object], Callable[[], object], Callable[[], object]]:
    """(kio build only, kio build + encode, direct encode) for one Fetch response."""
    topic_id = uuid.uuid4()
    data = [bytes([i % 251]) * RECORDS for i in range(partitions)]
    cls = response_class(1, version)

    def as_dicts() -> dict[str, Any]:
        return {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": 0, "node_endpoints": (),
                "responses": [{"topic": "bench", "topic_id": topic_id, "partitions": [
                    {"partition_index": i, "error_code": ErrorCode.none, "high_watermark": 1000 + i,
                     "last_stable_offset": 1000 + i, "log_start_offset": 0, "aborted_transactions": None,
                     "preferred_read_replica": -1, "records": data[i]} for i in range(partitions)]}]}

    def kio_build() -> object:
        return build(cls, as_dicts())

    def kio_path() -> object:
        return encode_response(7, build(cls, as_dicts()))

    def direct() -> object:
        topics = [FetchTopic("bench", topic_id, [
            FetchPartition(i, ErrorCode.none, 1000 + i, 1000 + i, 0, None, -1, data[i]) for i in range(partitions)])]
        return encode_fetch_response(7, version, topics)

    assert b"".join(encode_fetch_response(7, version, [FetchTopic("bench", topic_id, [
        FetchPartition(i, 0, 1000 + i, 1000 + i, 0, None, -1, data[i]) for i in range(partitions)])])) == kio_path()
    return kio_build, kio_path, direct


def _share_fetch_case(version: int, partitions: int) -> tuple[Callable[[], object], Callable[[], object],
                                                                Callable[[], object]]:
    topic_id = uuid.uuid4()
    data = [bytes([i % 251]) * RECORDS for i in range(partitions)]
    cls = response_class(78, version)

    def as_dicts() -> dict[str, Any]:
        return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
                "acquisition_lock_timeout": 30_000, "node_endpoints": (),
                "responses": [{"topic_id": topic_id, "partitions": [
                    {"partition_index": i, "error_code": ErrorCode.none, "error_message": None,
                     "acknowledge_error_code": 0, "acknowledge_error_message": None,
                     "current_leader": {"leader_id": 1, "leader_epoch": 0}, "records": data[i],
                     "acquired_records": [{"first_offset": 100, "last_offset": 149, "delivery_count": 1}]}
                    for i in range(partitions)]}]}

    def kio_build() -> object:
        return build(cls, as_dicts())

    def kio_path() -> object:
        return encode_response(7, build(cls, as_dicts()))

    def direct() -> object:
        topics = [ShareFetchTopic(topic_id, [
            ShareFetchPartition(i, current_leader=(1, 0), records=data[i],
                                acquired_records=[AcquiredRecords(100, 149, 1)]) for i in range(partitions)])]
        return encode_share_fetch_response(7, version, topics, acquisition_lock_timeout_ms=30_000)

    frame = direct()
    assert isinstance(frame, list) and b"".join(frame) == kio_path()
    return kio_build, kio_path, direct


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=0.5, help="time budget per figure")
    args = ap.parse_args(argv)
    cases = [
        ("Fetch v11", 1, _fetch_case(11, 1)), ("Fetch v11", 50, _fetch_case(11, 50)),
        ("Fetch v18", 1, _fetch_case(18, 1)), ("Fetch v18", 50, _fetch_case(18, 50)),
        ("ShareFetch v2", 1, _share_fetch_case(2, 1)), ("ShareFetch v2", 50, _share_fetch_case(2, 50)),
    ]
    print(f"records: {RECORDS // 1024} KiB per partition; best of {args.rounds} rounds; µs per response")
    print("| response | partitions | kio build | kio build+encode | direct encode | speed-up | frame bytes | "
          "record bytes copied kio / direct | buffers |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, partitions, (kio_build, kio_path, direct) in cases:
        b = _best_us(kio_build, args.rounds, args.seconds)
        k = _best_us(kio_path, args.rounds, args.seconds)
        d = _best_us(direct, args.rounds, args.seconds)
        frame = direct()
        assert isinstance(frame, list)
        print(f"| {name} | {partitions} | {b:,.1f} | {k:,.1f} | {d:,.1f} | {k / d:,.1f}x | {frame_size(frame):,} | "
              f"{2 * RECORDS * partitions:,} / 0 | {len(frame)} |")


if __name__ == "__main__":
    main()
