"""Many groups on one broker (issue 24): for each count N, a fresh broker with N classic groups
(offsets committed by a simple consumer: OffsetCommit with generation -1) and N share groups (one
member joins and leaves), all idle afterwards. Then: the broker's CPU while they sit idle, its RSS,
an active share member's heartbeat latency and a classic group's commit latency beside them, and a
restart (every group replayed from its internal topic).

    python -m bench.groups [--counts 1 1000 10000] [--idle-seconds 5]"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from kio.index import load_request_schema

from bench.connections import percentile
from bench.cpu import cpu_seconds as _cpu_seconds
from bench.partitions import Wire, _nested, create_topics, rss_mb
from sharebroker.testing import BrokerProcess

TOPIC = "groups-bench"


def _commit_req(group: str) -> Any:
    cls = load_request_schema(8, 9)
    tcls, pcls = _nested(8, 9, "OffsetCommitRequestTopic"), _nested(8, 9, "OffsetCommitRequestPartition")
    return cls(group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
               topics=(tcls(name=TOPIC, partitions=(pcls(partition_index=0, committed_offset=1,
                                                         committed_leader_epoch=-1, committed_metadata=""),)),))


def _heartbeat_req(group: str, member: str, epoch: int) -> Any:
    cls = load_request_schema(76, 1)
    return cls(group_id=group, member_id=member, member_epoch=epoch, rack_id=None,
               subscribed_topic_names=(TOPIC,) if epoch == 0 else None)


def populate(wire: Wire, n: int) -> None:
    for i in range(n):
        resp = wire.request(_commit_req(f"classic-{i}"))
        code = int(resp.topics[0].partitions[0].error_code)
        if code:
            raise RuntimeError(f"OffsetCommit failed: {code}")
        member = str(uuid.uuid4())
        joined = wire.request(_heartbeat_req(f"share-{i}", member, 0))
        if int(joined.error_code):
            raise RuntimeError(f"ShareGroupHeartbeat failed: {joined.error_code} {joined.error_message}")
        wire.request(_heartbeat_req(f"share-{i}", member, -1))


def latencies(wire: Wire, requests: list[Any], rounds: int) -> list[float]:
    took = []
    for i in range(rounds):
        t0 = time.perf_counter()
        wire.request(requests[i % len(requests)])
        took.append((time.perf_counter() - t0) * 1000)
    return took


def run(n: int, idle_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="sharebroker-groups-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data").start()
        try:
            wire = Wire(broker.bootstrap)
            create_topics(wire, [TOPIC], 1)
            t0 = time.perf_counter()
            populate(wire, n)
            made_s = time.perf_counter() - t0
            time.sleep(1.0)  # what the last leaves set off settles
            cpu0 = _cpu_seconds(broker.proc.pid)
            time.sleep(idle_s)
            idle_pct = (_cpu_seconds(broker.proc.pid) - cpu0) / idle_s * 100
            member = str(uuid.uuid4())
            joined = wire.request(_heartbeat_req("active", member, 0))
            beat = _heartbeat_req("active", member, joined.member_epoch)
            hb = latencies(wire, [beat], 500)
            commits = latencies(wire, [_commit_req("classic-active")], 500)
            rss = rss_mb(broker.proc.pid)
            wire.close()
            broker.stop()
            t1 = time.perf_counter()
            broker.start()
            restart_s = time.perf_counter() - t1
            return {"groups": n, "create_s": made_s, "idle_cpu_pct": idle_pct, "rss_mb": rss,
                    "hb_p50": statistics.median(hb), "hb_p99": percentile(hb, 0.99),
                    "commit_p50": statistics.median(commits), "commit_p99": percentile(commits, 0.99), "restart_s": restart_s}
        finally:
            broker.stop()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", type=int, nargs="+", default=[1, 1000, 10000])
    ap.add_argument("--idle-seconds", type=float, default=5.0)
    args = ap.parse_args(argv)
    print(f"{'groups':>7} {'create s':>8} {'idle CPU%':>9} {'RSS MB':>7} {'hb p50':>7} {'hb p99':>7} "
          f"{'commit p50':>10} {'commit p99':>10} {'restart s':>9}")
    for n in args.counts:
        r = run(n, args.idle_seconds)
        print(f"{n:>7} {r['create_s']:>8.1f} {r['idle_cpu_pct']:>9.1f} {r['rss_mb']:>7.1f} {r['hb_p50']:>7.2f} "
              f"{r['hb_p99']:>7.2f} {r['commit_p50']:>10.2f} {r['commit_p99']:>10.2f} {r['restart_s']:>9.2f}")


if __name__ == "__main__":
    main()
