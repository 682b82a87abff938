"""Owner of every share-partition leader on this broker, the share-session cache, and the wake-ups
that complete delayed (long-polling) ShareFetch requests."""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any, Protocol

from sharebroker.broker.clock import Clock
from sharebroker.broker.metrics import NULL_RECORDER, Recorder
from sharebroker.broker.share.dead_letters import DeadLetters
from sharebroker.broker.share.leader import OffsetReset, SharePartitionLeader
from sharebroker.broker.share.partition import ShareLimits
from sharebroker.broker.share_state.persister import Persister
from sharebroker.broker.share.sessions import ShareSession, ShareSessionCache
from sharebroker.broker.structured_log import get_logger

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection

log = get_logger("sharebroker.share")

LeaderKey = tuple[str, uuid.UUID, int]


class GroupShareSettings(Protocol):
    """The per-group settings the leaders apply (the share group coordinator holds the group configs)."""

    def limits(self, group_id: str) -> ShareLimits: ...

    def auto_offset_reset(self, group_id: str) -> OffsetReset: ...


class SharePartitions:
    def __init__(self, settings: GroupShareSettings, persister: Persister, clock: Clock, *, max_sessions: int,
                 dead_letters: DeadLetters) -> None:
        self.settings = settings
        self.persister = persister
        self.clock = clock
        self.leaders: dict[LeaderKey, SharePartitionLeader] = {}
        self.sessions = ShareSessionCache(max_sessions)  # group.share.max.share.sessions
        self._waiters: dict[LeaderKey, set[asyncio.Future[None]]] = {}
        self._bound: set[int] = set()  # ids of connections whose close releases their sessions
        self.metrics: Recorder = NULL_RECORDER  # the broker's, when metrics.listener is set
        self.dead_letters = dead_letters  # share-group DLQ writes (KIP-1191)
        self.history = False  # leaders keep a bounded record history (the admin view is on)
        self.traced_groups: set[str] = set()  # groups with share.record.trace.enable=true

    def set_traced(self, group_id: str, enabled: bool) -> None:
        """Switch a group's record trace log lines on or off, for its leaders now and later."""
        if enabled == (group_id in self.traced_groups):
            return
        if enabled:
            self.traced_groups.add(group_id)
        else:
            self.traced_groups.discard(group_id)
        for leader in self.leaders.values():
            if leader.group_id == group_id:
                leader.observe(history=self.history, trace=enabled)

    # -- configuration the leaders read -----------------------------------------------------------

    def limits(self, group_id: str) -> ShareLimits:
        return self.settings.limits(group_id)

    def auto_offset_reset(self, group_id: str) -> OffsetReset:
        return self.settings.auto_offset_reset(group_id)

    # -- leaders ---------------------------------------------------------------------------------

    def leader(self, group_id: str, partition: Any) -> SharePartitionLeader:
        key = (group_id, partition.topic.topic_id, partition.index)
        leader = self.leaders.get(key)
        if leader is None:
            leader = SharePartitionLeader(self, self.persister, self.clock, group_id, partition, metrics=self.metrics)
            if self.history or self.traced_groups:
                leader.observe(history=self.history, trace=group_id in self.traced_groups)
            self.leaders[key] = leader
        return leader

    def existing_leader(self, group_id: str, topic_id: uuid.UUID, index: int) -> SharePartitionLeader | None:
        return self.leaders.get((group_id, topic_id, index))

    def drop(self, leader: SharePartitionLeader) -> None:
        if self.leaders.get(leader.key) is leader:
            del self.leaders[leader.key]
        leader.close()
        self.wake(leader)

    def drop_topic(self, topic_id: uuid.UUID) -> None:
        for key, leader in list(self.leaders.items()):
            if key[1] == topic_id:
                self.drop(leader)

    # -- delayed fetch wake-ups ------------------------------------------------------------------

    def waiter(self, key: LeaderKey) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        bucket = self._waiters.setdefault(key, set())
        bucket.add(fut)

        def _gone(f: asyncio.Future[None], k: LeaderKey = key) -> None:
            b = self._waiters.get(k)
            if b is not None:
                b.discard(f)
                if not b:
                    del self._waiters[k]
        fut.add_done_callback(_gone)
        return fut

    def wake(self, leader: SharePartitionLeader) -> None:
        bucket = self._waiters.get(leader.key)
        if bucket:
            for fut in list(bucket):
                if not fut.done():
                    fut.set_result(None)

    # -- sessions bound to connections -----------------------------------------------------------

    async def release_session(self, session: ShareSession) -> None:
        """Release every record the member holds in the session's partitions (§5.9)."""
        self.sessions.remove(session)
        for topic_id, index in list(session.partitions):
            leader = self.existing_leader(session.group_id, topic_id, index)
            if leader is not None:
                await leader.release_member(session.member_id)
        if session.group_id not in self.sessions.groups_with_sessions():
            self._unload_group_if_idle(session.group_id)

    def _unload_group_if_idle(self, group_id: str) -> None:
        """With no session of the group left here, its leaders leave memory; the state stays
        with the persister and is read again on next use. Leaders that still hold acquired
        records (of members that left without closing) stay, so their locks can expire."""
        for key, leader in list(self.leaders.items()):
            if key[0] == group_id and (leader.sp is None or not leader.sp.in_flight_ranges()):
                self.drop(leader)

    def bind_connection(self, conn: Connection) -> None:
        """A session belongs to its connection: closing the connection releases the member's records."""
        if conn.id not in self._bound:
            self._bound.add(conn.id)
            conn.on_close(self.connection_closed)

    async def connection_closed(self, conn: Connection) -> None:
        self._bound.discard(conn.id)
        for session in self.sessions.of_connection(conn.id):
            log.info("share session closed with its connection", group=session.group_id,
                     member=session.member_id, conn=conn.id)
            await self.release_session(session)

    def close(self) -> None:
        for leader in list(self.leaders.values()):
            leader.close()
        self.leaders.clear()
