"""Share sessions (share-groups-spec §6): one per (group, member) on this broker, holding the
partitions the member fetches and the epoch both ShareFetch and ShareAcknowledge advance. A
session belongs to the connection that opened it; when that connection closes the session goes
and the member's records are released."""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode
from sharebroker.protocol.errors import KafkaError

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_INT32_MAX = 2**31 - 1

TopicPartitionKey = tuple[uuid.UUID, int]


@dataclass(eq=False)
class ShareSession:
    group_id: str
    member_id: str
    conn_id: int
    epoch: int = 1  # the epoch the next request must carry
    partitions: OrderedDict[TopicPartitionKey, None] = field(default_factory=OrderedDict)
    # partitions added since the last response; a full response must list them
    pending_new: set[TopicPartitionKey] = field(default_factory=set)
    errored: set[TopicPartitionKey] = field(default_factory=set)
    # The keys of the per-topic fetch request counters (("fetch", topic name) for each of its
    # topics), kept so that a fetch does not resolve its topics again; None when stale.
    fetch_metric_keys: tuple[tuple[str, str], ...] | None = None

    def bump(self) -> None:
        self.epoch = 1 if self.epoch >= _INT32_MAX else self.epoch + 1

    def add(self, key: TopicPartitionKey) -> None:
        if key not in self.partitions:
            self.partitions[key] = None
            self.pending_new.add(key)
            self.fetch_metric_keys = None

    def forget(self, key: TopicPartitionKey) -> None:
        if self.partitions.pop(key, 0) is None:
            self.fetch_metric_keys = None
        self.pending_new.discard(key)
        self.errored.discard(key)

    def move_to_end(self, key: TopicPartitionKey) -> None:
        if key in self.partitions:
            self.partitions.move_to_end(key)


class ShareSessionCache:
    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.get((group_id, member_id))

    def open(self, group_id: str, member_id: str, conn_id: int) -> tuple[ShareSession, ShareSession | None]:
        """Epoch 0: replace any session of this member (without releasing it) with a new one."""
        key = (group_id, member_id)
        old = self.sessions.pop(key, None)
        if old is None and len(self.sessions) >= self.max_sessions:
            raise KafkaError(ErrorCode.share_session_limit_reached,
                             f"The share session cache is full ({self.max_sessions} sessions).")
        session = ShareSession(group_id, member_id, conn_id)
        self.sessions[key] = session
        return session, old

    def check(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        """Validate a non-initial epoch (N > 0 or -1)."""
        session = self.sessions.get((group_id, member_id))
        if session is None:
            raise KafkaError(ErrorCode.share_session_not_found,
                             f"Share session for member {member_id} of group {group_id} was not found.")
        if epoch != FINAL_EPOCH and epoch != session.epoch:
            raise KafkaError(ErrorCode.invalid_share_session_epoch,
                             f"Share session epoch {epoch} does not match the expected {session.epoch}.")
        return session

    def remove(self, session: ShareSession) -> None:
        if self.sessions.get((session.group_id, session.member_id)) is session:
            del self.sessions[(session.group_id, session.member_id)]

    def of_connection(self, conn_id: int) -> list[ShareSession]:
        return [s for s in self.sessions.values() if s.conn_id == conn_id]

    def groups_with_sessions(self) -> set[str]:
        return {g for g, _ in self.sessions}
