"""Classic consumers on the wire for `sharebroker consume`: a fetcher for assigned partitions
(Fetch + ListOffsets, positions kept by the tool) and classic group membership (JoinGroup /
SyncGroup / Heartbeat / OffsetCommit / OffsetFetch / LeaveGroup with the range assignor), plus the
consumer-protocol subscription and assignment encodings the admin tools decode."""

from __future__ import annotations

import struct
import time
from typing import Any

from kio.schema.errors import ErrorCode

from sharebroker.cli.records import Record, decode
from sharebroker.cli.wire import Client, Connection, KafkaApiError, Node, ToolError, TopicInfo, code_of

TP = tuple[str, int]
_RETRY_FETCH = (ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition, ErrorCode.leader_not_available,
                ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch, ErrorCode.kafka_storage_error,
                ErrorCode.replica_not_available)


# ------------------------------------------------------------------------------------------
# Consumer protocol (ConsumerProtocolSubscription / ConsumerProtocolAssignment)


def _str(out: bytearray, s: str) -> None:
    b = s.encode()
    out += struct.pack(">h", len(b)) + b


def encode_subscription(topics: list[str]) -> bytes:
    out = bytearray(struct.pack(">hi", 0, len(topics)))
    for t in topics:
        _str(out, t)
    out += struct.pack(">i", -1)  # user data: null
    return bytes(out)


def _read_str(buf: bytes, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from(">h", buf, pos)
    pos += 2
    return buf[pos:pos + n].decode("utf-8", "replace"), pos + max(n, 0)


def decode_subscription(buf: bytes | None) -> list[str]:
    if not buf or len(buf) < 6:
        return []
    pos = 2
    (n,) = struct.unpack_from(">i", buf, pos)
    pos += 4
    topics = []
    for _ in range(max(n, 0)):
        t, pos = _read_str(buf, pos)
        topics.append(t)
    return topics


def encode_assignment(assignment: dict[str, list[int]]) -> bytes:
    out = bytearray(struct.pack(">hi", 0, len(assignment)))
    for t, parts in sorted(assignment.items()):
        _str(out, t)
        out += struct.pack(">i", len(parts))
        for p in sorted(parts):
            out += struct.pack(">i", p)
    out += struct.pack(">i", -1)
    return bytes(out)


def decode_assignment(buf: bytes | None) -> dict[str, list[int]]:
    if not buf or len(buf) < 6:
        return {}
    pos = 2
    (n,) = struct.unpack_from(">i", buf, pos)
    pos += 4
    out: dict[str, list[int]] = {}
    for _ in range(max(n, 0)):
        t, pos = _read_str(buf, pos)
        (m,) = struct.unpack_from(">i", buf, pos)
        pos += 4
        parts = list(struct.unpack_from(f">{max(m, 0)}i", buf, pos))
        pos += 4 * max(m, 0)
        out[t] = parts
    return out


def range_assign(members: dict[str, list[str]], partitions: dict[str, int]) -> dict[str, dict[str, list[int]]]:
    """Kafka's RangeAssignor: per topic, sorted subscribers get consecutive ranges, the first
    (partitions % subscribers) one extra."""
    out: dict[str, dict[str, list[int]]] = {m: {} for m in members}
    for topic, count in sorted(partitions.items()):
        subs = sorted(m for m, topics in members.items() if topic in topics)
        if not subs:
            continue
        per, extra = divmod(count, len(subs))
        start = 0
        for i, m in enumerate(subs):
            n = per + (1 if i < extra else 0)
            if n:
                out[m][topic] = list(range(start, start + n))
            start += n
    return out


# ------------------------------------------------------------------------------------------
# Committed offsets (OffsetFetch / OffsetCommit), shared with the admin tool


def fetch_committed(client: Client, group: str, partitions: dict[str, list[int]] | None,
                    conn: Connection | None = None) -> dict[TP, int]:
    """{(topic, partition): committed offset} (partitions None = every committed partition)."""
    if conn is None:
        _node, conn = client.coordinator_conn(group)
    topics = None if partitions is None else [{"name": t, "partition_indexes": sorted(ps)}
                                               for t, ps in sorted(partitions.items())]
    version, resp = conn.request_v(9, {"group_id": group, "topics": topics, "require_stable": False,
                                       "groups": [{"group_id": group, "topics": topics}]})
    if version >= 8:
        (g,) = resp.groups
        gcode, tlist = code_of(g.error_code), g.topics
    else:
        gcode, tlist = code_of(getattr(resp, "error_code", 0)), resp.topics
    if gcode:
        raise KafkaApiError(gcode, None, f"Cannot fetch the committed offsets of group '{group}': ")
    out: dict[TP, int] = {}
    for t in tlist:
        for p in t.partitions:
            if code_of(p.error_code):
                raise KafkaApiError(p.error_code, None,
                                    f"Cannot fetch the committed offset of {t.name}-{p.partition_index}: ")
            if int(p.committed_offset) >= 0:
                out[(t.name, int(p.partition_index))] = int(p.committed_offset)
    return out


def commit_offsets(client: Client, group: str, offsets: dict[TP, int], *, generation: int = -1, member_id: str = "",
                   conn: Connection | None = None) -> dict[TP, int]:
    """OffsetCommit; returns {(topic, partition): error code} for the partitions that failed."""
    if conn is None:
        _node, conn = client.coordinator_conn(group)
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (t, p), o in sorted(offsets.items()):
        by_topic.setdefault(t, []).append((p, o))
    resp = conn.request(8, {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
                            "group_instance_id": None, "topics": [
                                {"name": t, "partitions": [{"partition_index": p, "committed_offset": o,
                                                            "committed_leader_epoch": -1, "committed_metadata": ""}
                                                           for p, o in ps]} for t, ps in by_topic.items()]})
    failed = {}
    for t in resp.topics:
        for p in t.partitions:
            if code_of(p.error_code):
                failed[(t.name, int(p.partition_index))] = code_of(p.error_code)
    return failed


# ------------------------------------------------------------------------------------------
# Fetching assigned partitions


class Fetcher:
    """Positions per partition and Fetch requests to the leaders (no fetch sessions)."""

    def __init__(self, client: Client, topics: dict[str, TopicInfo], *, reset: str = "latest",
                 max_wait_ms: int = 500) -> None:
        self.client = client
        self.topics = topics
        self.reset = reset
        self.max_wait_ms = max_wait_ms
        self.positions: dict[TP, int] = {}
        self._rr = 0

    def assign(self, starts: dict[TP, int | str]) -> None:
        """Start positions: an offset, or 'earliest' / 'latest'."""
        self.positions = {}
        resolve: dict[str, list[TP]] = {"earliest": [], "latest": []}
        for tp, start in starts.items():
            if isinstance(start, str):
                resolve[start].append(tp)
            else:
                self.positions[tp] = start
        for spec, tps in resolve.items():
            self._resolve(tps, -2 if spec == "earliest" else -1)

    def _resolve(self, tps: list[TP], spec: int) -> None:
        if not tps:
            return
        parts: dict[str, list[int]] = {}
        for t, p in tps:
            parts.setdefault(t, []).append(p)
        got = self.client.list_offsets(parts, spec, self.topics)
        for tp in tps:
            code, offset = got.get(tp, (int(ErrorCode.unknown_topic_or_partition), -1))
            if code:
                raise KafkaApiError(code, None, f"Cannot list the offsets of {tp[0]}-{tp[1]}: ")
            self.positions[tp] = offset

    def _refresh(self) -> None:
        self.topics.update(self.client.metadata(sorted({t for t, _ in self.positions})))

    def fetch(self, wait_ms: int) -> list[Record]:
        by_leader: dict[int, list[TP]] = {}
        for tp in self.positions:
            info = self.topics.get(tp[0])
            p = info.partitions.get(tp[1]) if info else None
            if p is not None and p.leader >= 0:
                by_leader.setdefault(p.leader, []).append(tp)
        if not by_leader:
            time.sleep(min(wait_ms, 200) / 1000.0)
            self._refresh()
            return []
        nodes = sorted(by_leader)
        node = nodes[self._rr % len(nodes)]
        self._rr += 1
        wanted = by_leader[node]
        topics: dict[str, list[dict]] = {}
        for t, part in sorted(wanted):
            topics.setdefault(t, []).append({"partition": part, "fetch_offset": self.positions[(t, part)],
                                             "partition_max_bytes": 1048576, "current_leader_epoch": -1,
                                             "log_start_offset": -1, "last_fetched_epoch": -1})
        data = {"replica_id": -1, "max_wait": min(wait_ms, self.max_wait_ms), "min_bytes": 1, "max_bytes": 52428800,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
                "forgotten_topics_data": [], "rack_id": ""}
        try:
            resp = self.client.conn(node).request(1, data, timeout=self.client.timeout + wait_ms / 1000.0)
        except (OSError, ConnectionError):
            self.client.drop(node)
            self._refresh()
            return []
        if code_of(resp.error_code):
            raise KafkaApiError(resp.error_code, None, "Fetch failed: ")
        out: list[Record] = []
        refresh = False
        for t in resp.responses:
            for p in t.partitions:
                tp = (t.topic, int(p.partition_index))
                code = code_of(p.error_code)
                if code == ErrorCode.offset_out_of_range:
                    self._resolve([tp], -2 if self.reset == "earliest" else -1)
                    continue
                if code in _RETRY_FETCH:
                    refresh = True
                    continue
                if code:
                    raise KafkaApiError(code, None, f"Fetch of {tp[0]}-{tp[1]} failed: ")
                decoded = decode(p.records, topic=tp[0], partition=tp[1])
                pos = self.positions[tp]
                got = [r for r in decoded.records if r.offset >= pos]
                out.extend(got)
                if decoded.next_offset is not None and decoded.next_offset > pos:
                    self.positions[tp] = decoded.next_offset
        if refresh:
            self._refresh()
        return out


# ------------------------------------------------------------------------------------------
# Classic group membership


class GroupMember:
    """One member of a classic consumer group ("consumer" protocol, range assignor)."""

    def __init__(self, client: Client, group: str, topics: list[str], *, session_timeout_ms: int = 45000,
                 rebalance_timeout_ms: int = 60000, heartbeat_ms: int = 3000) -> None:
        self.client = client
        self.group = group
        self.topics = topics
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_s = heartbeat_ms / 1000.0
        self.member_id = ""
        self.generation = -1
        self.next_heartbeat = 0.0
        self.coordinator: Node | None = None
        self.conn: Connection | None = None

    def _coordinator(self) -> Any:
        if self.conn is None:
            self.coordinator, self.conn = self.client.coordinator_conn(self.group)
        return self.conn

    def _lost_coordinator(self) -> None:
        if self.coordinator is not None:
            self.client.drop(self.coordinator.node_id)
        self.coordinator = self.conn = None

    def join(self, partition_counts: dict[str, int]) -> dict[str, list[int]]:
        """Join (or rejoin) and return this member's assignment."""
        deadline = time.monotonic() + self.client.timeout + self.rebalance_timeout_ms / 1000.0
        while True:
            if time.monotonic() > deadline:
                raise ToolError(f"Timed out joining consumer group '{self.group}'.")
            conn = self._coordinator()
            resp = conn.request(11, {
                "group_id": self.group, "session_timeout": self.session_timeout_ms,
                "rebalance_timeout": self.rebalance_timeout_ms, "member_id": self.member_id, "group_instance_id": None,
                "protocol_type": "consumer", "reason": None,
                "protocols": [{"name": "range", "metadata": encode_subscription(self.topics)}]},
                timeout=self.client.timeout + self.rebalance_timeout_ms / 1000.0)
            code = code_of(resp.error_code)
            if code == ErrorCode.member_id_required:
                self.member_id = resp.member_id
                continue
            if code == ErrorCode.unknown_member_id:
                self.member_id = ""
                continue
            if code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                        ErrorCode.coordinator_load_in_progress):
                self._lost_coordinator()
                time.sleep(0.1)
                continue
            if code == ErrorCode.rebalance_in_progress:
                continue
            if code:
                raise KafkaApiError(code, None, f"Joining consumer group '{self.group}' failed: ")
            self.member_id = resp.member_id
            self.generation = int(resp.generation_id)
            assignments: list[dict] = []
            if resp.leader == resp.member_id:
                subs = {m.member_id: decode_subscription(m.metadata) for m in resp.members}
                wanted = {t for ts in subs.values() for t in ts}
                counts = dict(partition_counts)
                missing = sorted(wanted - set(counts))
                if missing:
                    for name, info in self.client.metadata(missing).items():
                        if not info.error:
                            counts[name] = len(info.partitions)
                plan = range_assign(subs, {t: n for t, n in counts.items() if t in wanted})
                assignments = [{"member_id": m, "assignment": encode_assignment(a)} for m, a in plan.items()]
            sresp = conn.request(14, {"group_id": self.group, "generation_id": self.generation,
                                      "member_id": self.member_id, "group_instance_id": None,
                                      "protocol_type": "consumer", "protocol_name": resp.protocol_name or "range",
                                      "assignments": assignments},
                                 timeout=self.client.timeout + self.rebalance_timeout_ms / 1000.0)
            scode = code_of(sresp.error_code)
            if scode in (ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation):
                continue
            if scode == ErrorCode.unknown_member_id:
                self.member_id = ""
                continue
            if scode:
                raise KafkaApiError(scode, None, f"Joining consumer group '{self.group}' failed (SyncGroup): ")
            self.next_heartbeat = time.monotonic() + self.heartbeat_s
            return decode_assignment(sresp.assignment)

    def heartbeat_if_due(self) -> bool:
        """True when the group is rebalancing and the member must rejoin."""
        if time.monotonic() < self.next_heartbeat:
            return False
        try:
            resp = self._coordinator().request(12, {"group_id": self.group, "generation_id": self.generation,
                                                    "member_id": self.member_id, "group_instance_id": None})
        except (OSError, ConnectionError):
            self._lost_coordinator()
            return True
        self.next_heartbeat = time.monotonic() + self.heartbeat_s
        code = code_of(resp.error_code)
        if code in (ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation):
            return True
        if code in (ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id):
            self.member_id = ""
            return True
        if code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available):
            self._lost_coordinator()
            return True
        if code:
            raise KafkaApiError(code, None, f"Heartbeat to consumer group '{self.group}' failed: ")
        return False

    def committed(self, partitions: dict[str, list[int]]) -> dict[TP, int]:
        return fetch_committed(self.client, self.group, partitions, self._coordinator())

    def commit(self, offsets: dict[TP, int]) -> dict[TP, int]:
        if not offsets:
            return {}
        return commit_offsets(self.client, self.group, offsets, generation=self.generation, member_id=self.member_id,
                              conn=self._coordinator())

    def leave(self) -> None:
        if not self.member_id or self.conn is None:
            return
        try:
            self.conn.request(13, {"group_id": self.group, "member_id": self.member_id,
                                   "members": [{"member_id": self.member_id, "group_instance_id": None,
                                                "reason": None}]})
        except (OSError, ConnectionError):
            pass
