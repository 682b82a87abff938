"""A share-group consumer on the wire (KIP-932) for `sharebroker share-consume`: joins with
ShareGroupHeartbeat, fetches with one share session per partition leader (ShareFetch), delivers
only the acquired records, and acknowledges explicitly — piggybacked on the next ShareFetch, or
with ShareAcknowledge when the session closes (or at once, with `acknowledge_now`, which can also
renew locks). On close the member leaves the group."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from sharebroker.cli.records import Record, decode
from sharebroker.cli.wire import Client, KafkaApiError, Node, ToolError, code_of, error_message, new_member_id

GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
INT32_MAX = 2**31 - 1


@dataclass
class Session:
    epoch: int = 0
    partitions: set[tuple[uuid.UUID, int]] = field(default_factory=set)  # in the broker's session


class ShareConsumer:
    def __init__(self, client: Client, group: str, topics: list[str], *, max_records: int = 500,
                 max_wait_ms: int = 500, warn: Callable[[str], None] | None = None) -> None:
        self.client = client
        self.group = group
        self.topic_names = topics
        self.max_records = max_records
        self.max_wait_ms = max_wait_ms
        self.member_id = new_member_id()
        self.epoch = 0
        self.heartbeat_interval = 5.0
        self.next_heartbeat = 0.0
        self.assignment: dict[uuid.UUID, set[int]] = {}
        self.names: dict[uuid.UUID, str] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.leaders: dict[tuple[uuid.UUID, int], int] = {}
        self.sessions: dict[int, Session] = {}
        # node -> (topic id, partition) -> [(offset, acknowledge type)] not yet sent
        self.pending: dict[int, dict[tuple[uuid.UUID, int], list[tuple[int, int]]]] = {}
        # (topic id, partition, offset) -> the node whose session delivered the record
        self.owner: dict[tuple[uuid.UUID, int, int], int] = {}
        self.coordinator: Node | None = None
        self.warn = warn or (lambda text: None)
        self.ack_failures = 0
        self._rr = 0
        self.joined = False
        # The lock the broker last reported (ShareFetch/ShareAcknowledge AcquisitionLockTimeoutMs),
        # and when the last ShareFetch that acquired records was sent: their locks started after.
        self.acquisition_lock_ms: int | None = None
        self.acquired_at = 0.0

    # -- group membership
    def start(self) -> None:
        self._refresh_metadata()
        self.coordinator = self.client.find_coordinator(self.group)
        self._heartbeat()

    def _refresh_metadata(self) -> None:
        topics = self.client.metadata(self.topic_names)
        for name in self.topic_names:
            info = topics.get(name)
            if (info is None or info.error == ErrorCode.unknown_topic_or_partition
                    or (not info.error and not info.partitions)):
                raise ToolError(f"Topic '{name}' does not exist.")
            if info.error:
                raise KafkaApiError(info.error, None, f"Cannot get metadata for topic '{name}': ")
            if info.topic_id is None:
                raise ToolError("The broker does not report topic ids (Metadata v10+ is needed for share groups).")
            self.names[info.topic_id] = name
            self.topic_ids[name] = info.topic_id
            for p in info.partitions.values():
                self.leaders[(info.topic_id, p.index)] = p.leader

    def _coordinator_request(self, key: int, data: dict[str, Any]) -> Any:
        """The response (a kio entity of the version spoken) from the group coordinator."""
        coordinator = self.coordinator or self.client.find_coordinator(self.group)
        try:
            return self.client.conn_to(coordinator).request(key, data)
        except (OSError, ConnectionError):
            self.client.drop(coordinator.node_id)
            self.coordinator = self.client.find_coordinator(self.group)
            return self.client.conn_to(self.coordinator).request(key, data)

    def _heartbeat(self) -> None:
        joining = self.epoch == 0
        resp = self._coordinator_request(76, {
            "group_id": self.group, "member_id": self.member_id, "member_epoch": self.epoch, "rack_id": None,
            "subscribed_topic_names": self.topic_names if joining else None})
        code = code_of(resp.error_code)
        if code in (ErrorCode.unknown_member_id, ErrorCode.fenced_member_epoch):
            self.epoch = 0  # rejoin with the same member id
            self.next_heartbeat = 0.0
            return
        if code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                    ErrorCode.coordinator_load_in_progress):
            self.coordinator = self.client.find_coordinator(self.group)
            self.next_heartbeat = time.monotonic() + 0.1
            return
        if code == ErrorCode.unsupported_version:
            raise ToolError("The broker does not support share groups (ShareGroupHeartbeat: UNSUPPORTED_VERSION).")
        if code:
            raise KafkaApiError(code, resp.error_message, f"Share group '{self.group}' heartbeat failed: ")
        self.joined = True
        self.epoch = int(resp.member_epoch)
        if resp.member_id:
            self.member_id = resp.member_id
        self.heartbeat_interval = max(0.05, resp.heartbeat_interval.total_seconds())
        self.next_heartbeat = time.monotonic() + self.heartbeat_interval
        if resp.assignment is not None:
            new: dict[uuid.UUID, set[int]] = {}
            for tp in resp.assignment.topic_partitions:
                new.setdefault(tp.topic_id, set()).update(int(p) for p in tp.partitions)
            if any(tid not in self.names for tid in new):
                self._refresh_metadata()
            self.assignment = new

    def heartbeat_if_due(self) -> None:
        if time.monotonic() >= self.next_heartbeat:
            self._heartbeat()

    # -- fetching
    def _by_leader(self) -> dict[int, set[tuple[uuid.UUID, int]]]:
        out: dict[int, set[tuple[uuid.UUID, int]]] = {}
        for tid, parts in self.assignment.items():
            for p in parts:
                leader = self.leaders.get((tid, p), -1)
                if leader >= 0:
                    out.setdefault(leader, set()).add((tid, p))
        return out

    def poll(self, timeout_ms: int, max_records: int | None = None) -> list[Record]:
        """Records acquired for this member within `timeout_ms` (possibly none)."""
        deadline = time.monotonic() + timeout_ms / 1000.0
        while True:
            self.heartbeat_if_due()
            by_leader = self._by_leader()
            # Nodes that still hold a session but lead none of our partitions: close with their acks.
            for node in [n for n in self.sessions if n not in by_leader]:
                self._close_session(node)
            if by_leader:
                nodes = sorted(by_leader)
                node = nodes[self._rr % len(nodes)]
                self._rr += 1
                remaining = max(0, int((deadline - time.monotonic()) * 1000))
                wait = min(self.max_wait_ms, remaining, max(0, int((self.next_heartbeat - time.monotonic()) * 1000)))
                got = self._fetch(node, by_leader[node], wait, max_records or self.max_records)
                if got:
                    return got
            else:
                pause = min(deadline, self.next_heartbeat) - time.monotonic()
                if pause > 0:
                    time.sleep(min(pause, 0.1))
            if time.monotonic() >= deadline:
                return []

    def _ack_batches(self, acks: list[tuple[int, int]]) -> list[dict]:
        batches: list[dict] = []
        for offset, kind in sorted(acks):
            if batches and batches[-1]["last_offset"] == offset - 1 and batches[-1]["acknowledge_types"] == [kind]:
                batches[-1]["last_offset"] = offset
            else:
                batches.append({"first_offset": offset, "last_offset": offset, "acknowledge_types": [kind]})
        return batches

    def _fetch(self, node: int, wanted: set[tuple[uuid.UUID, int]], wait_ms: int, max_records: int) -> list[Record]:
        session = self.sessions.setdefault(node, Session())
        pending = self.pending.get(node, {})
        if session.epoch == 0:
            pending = {}
            self.pending.pop(node, None)  # acks for an older session cannot be sent any more
            send = set(wanted)
        else:
            send = (wanted - session.partitions) | (set(pending) & wanted)
        forget = session.partitions - wanted
        topics: dict[uuid.UUID, list[dict]] = {}
        for tid, p in sorted(send, key=lambda x: (str(x[0]), x[1])):
            topics.setdefault(tid, []).append({"partition_index": p,
                                               "acknowledgement_batches": self._ack_batches(pending.get((tid, p), []))})
        forgotten: dict[uuid.UUID, list[int]] = {}
        for tid, p in forget:
            forgotten.setdefault(tid, []).append(p)
        data = {"group_id": self.group, "member_id": self.member_id, "share_session_epoch": session.epoch,
                "max_wait": wait_ms, "min_bytes": 1, "max_bytes": 52428800, "max_records": max_records,
                "batch_size": max_records,
                "topics": [{"topic_id": tid, "partitions": ps} for tid, ps in topics.items()],
                "forgotten_topics_data": [{"topic_id": tid, "partitions": sorted(ps)} for tid, ps in forgotten.items()]}
        sent_at = time.monotonic()
        try:
            conn = self.client.conn(node)
            resp = conn.request(78, data, timeout=self.client.timeout + wait_ms / 1000.0)
        except (OSError, ConnectionError):
            self.client.drop(node)
            self.sessions.pop(node, None)
            self.pending.pop(node, None)
            self._refresh_metadata()
            return []
        sent_acks = {tp: acks for tp, acks in pending.items() if tp in send}
        for tp in sent_acks:
            pending.pop(tp, None)
        code = code_of(resp.error_code)
        if code in (ErrorCode.share_session_not_found, ErrorCode.invalid_share_session_epoch,
                    ErrorCode.share_session_limit_reached):
            self.sessions[node] = Session()
            if sent_acks:
                self._ack_failed(sum(len(a) for a in sent_acks.values()), code, resp.error_message)
            return []
        if code:
            raise KafkaApiError(code, resp.error_message, "ShareFetch failed: ")
        session.partitions = (session.partitions | send) - forget
        session.epoch = 1 if session.epoch >= INT32_MAX else session.epoch + 1
        self._note_lock(resp)
        out: list[Record] = []
        refresh = False
        for t in resp.responses:
            name = self.names.get(t.topic_id, str(t.topic_id))
            for p in t.partitions:
                tp = (t.topic_id, int(p.partition_index))
                ack_code = int(p.acknowledge_error_code or 0)
                if ack_code and tp in sent_acks:
                    self._ack_failed(len(sent_acks[tp]), ack_code, p.acknowledge_error_message)
                pcode = code_of(p.error_code)
                if pcode in (ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition,
                             ErrorCode.fenced_leader_epoch, ErrorCode.leader_not_available):
                    refresh = True
                    session.partitions.discard(tp)
                    continue
                if pcode:
                    raise KafkaApiError(pcode, p.error_message, f"ShareFetch of {name}-{tp[1]} failed: ")
                if not p.acquired_records:
                    continue
                by_offset = {r.offset: r for r in decode(p.records, topic=name, partition=tp[1]).records}
                for rng in p.acquired_records:
                    for offset in range(int(rng.first_offset), int(rng.last_offset) + 1):
                        rec = by_offset.get(offset)
                        if rec is None:  # a hole (control record, compaction): acknowledge as GAP
                            self.pending.setdefault(node, {}).setdefault(tp, []).append((offset, GAP))
                            continue
                        rec.delivery_count = int(rng.delivery_count)
                        self.owner[(tp[0], tp[1], offset)] = node
                        out.append(rec)
        if refresh:
            self._refresh_metadata()
        if out:
            self.acquired_at = sent_at
        out.sort(key=lambda r: (r.topic, r.partition, r.offset))
        return out

    def _note_lock(self, resp: Any) -> None:
        lock = getattr(resp, "acquisition_lock_timeout", None)  # a timedelta in kio
        ms = int(lock.total_seconds() * 1000) if isinstance(lock, datetime.timedelta) else 0
        if ms > 0:
            self.acquisition_lock_ms = ms

    def _ack_failed(self, count: int, code: int, message: str | None) -> None:
        self.ack_failures += count
        self.warn(f"WARN: acknowledgement of {count} record(s) failed: {error_message(code, message)}")

    def acknowledge(self, record: Record, kind: int) -> None:
        tid = self.topic_ids[record.topic]
        node = self.owner.pop((tid, record.partition, record.offset), None)
        if node is None:
            return
        self.pending.setdefault(node, {}).setdefault((tid, record.partition), []).append((record.offset, kind))

    def acknowledge_now(self, offsets: Mapping[tuple[str, int], Iterable[int]], kind: int
                        ) -> dict[tuple[str, int], str]:
        """Acknowledge records delivered to this member at once with ShareAcknowledge on the share
        session that acquired them, along with what is still pending there; with RENEW, restart
        their locks instead (they stay this member's). The partitions the broker refused, with why."""
        renew = kind == RENEW
        by_node: dict[int, dict[tuple[uuid.UUID, int], list[tuple[int, int]]]] = {}
        refused: dict[tuple[str, int], str] = {}
        for (topic, partition), offs in offsets.items():
            tid = self.topic_ids[topic]
            for offset in offs:
                key = (tid, partition, offset)
                node = self.owner.get(key) if renew else self.owner.pop(key, None)
                if node is None:
                    refused[(topic, partition)] = f"offset {offset} was not delivered to this member"
                    continue
                by_node.setdefault(node, {}).setdefault((tid, partition), []).append((offset, kind))
        for node, acks in by_node.items():
            for tp, more in self.pending.pop(node, {}).items():
                acks.setdefault(tp, []).extend(more)
            refused.update(self._acknowledge_on(node, acks, renew))
        return refused

    def _acknowledge_on(self, node: int, acks: dict[tuple[uuid.UUID, int], list[tuple[int, int]]],
                        renew: bool) -> dict[tuple[str, int], str]:
        def named(failure: str) -> dict[tuple[str, int], str]:
            return {(self.names.get(tid, str(tid)), p): failure for tid, p in acks}

        session = self.sessions.get(node)
        if session is None or session.epoch == 0:
            return named("the share session that acquired the records is gone (the broker released them)")
        topics: dict[uuid.UUID, list[dict]] = {}
        for (tid, p), items in sorted(acks.items(), key=lambda x: (str(x[0][0]), x[0][1])):
            topics.setdefault(tid, []).append({"partition_index": p, "acknowledgement_batches": self._ack_batches(items)})
        data = {"group_id": self.group, "member_id": self.member_id, "share_session_epoch": session.epoch,
                "is_renew_ack": renew, "topics": [{"topic_id": tid, "partitions": ps} for tid, ps in topics.items()]}
        try:
            resp = self.client.conn(node).request(79, data, min_version=2 if renew else None)
        except (OSError, ConnectionError) as exc:
            # The session belonged to that connection: the broker released its records.
            self.client.drop(node)
            self.sessions.pop(node, None)
            return named(f"the connection to broker {node} failed ({exc}); the broker released the session's records")
        except ToolError as exc:  # no ShareAcknowledge v2: the broker predates KIP-1222
            return named(exc.message)
        code = code_of(resp.error_code)
        if code:
            if code in (ErrorCode.share_session_not_found, ErrorCode.invalid_share_session_epoch):
                self.sessions[node] = Session()
            return named(error_message(code, resp.error_message))
        session.epoch = 1 if session.epoch >= INT32_MAX else session.epoch + 1
        self._note_lock(resp)
        refused: dict[tuple[str, int], str] = {}
        for t in resp.responses:
            for p in t.partitions:
                if code_of(p.error_code):
                    refused[(self.names.get(t.topic_id, str(t.topic_id)), int(p.partition_index))] = \
                        f"{ErrorCode(int(p.error_code)).name.upper()}: {error_message(p.error_code, p.error_message)}"
        return refused

    # -- closing
    def _close_session(self, node: int) -> None:
        session = self.sessions.pop(node, None)
        pending = self.pending.pop(node, {})
        if session is None or session.epoch == 0:
            return
        topics: dict[uuid.UUID, list[dict]] = {}
        for (tid, p), acks in pending.items():
            topics.setdefault(tid, []).append({"partition_index": p,
                                               "acknowledgement_batches": self._ack_batches(acks)})
        try:
            resp = self.client.conn(node).request(79, {
                "group_id": self.group, "member_id": self.member_id, "share_session_epoch": -1,
                "topics": [{"topic_id": tid, "partitions": ps} for tid, ps in topics.items()]})
        except (OSError, ConnectionError) as exc:
            if pending:
                self.warn(f"WARN: could not send the final acknowledgements: {exc}")
            return
        code = code_of(resp.error_code)
        if code:
            if pending:
                self._ack_failed(sum(len(a) for a in pending.values()), code, resp.error_message)
            return
        for t in resp.responses:
            for p in t.partitions:
                if code_of(p.error_code):
                    self._ack_failed(len(pending.get((t.topic_id, int(p.partition_index)), [])), p.error_code,
                                     p.error_message)

    def close(self) -> None:
        for node in list(self.sessions):
            try:
                self._close_session(node)
            except Exception as exc:  # noqa: BLE001 - closing must go on to leave the group
                self.warn(f"WARN: closing the share session failed: {exc}")
        if self.joined and self.coordinator is not None:
            try:
                self._coordinator_request(76, {"group_id": self.group, "member_id": self.member_id,
                                               "member_epoch": -1, "rack_id": None, "subscribed_topic_names": None})
            except Exception as exc:  # noqa: BLE001
                self.warn(f"WARN: leaving the share group failed: {exc}")
