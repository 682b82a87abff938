"""The group coordinator for classic groups (JoinGroup/SyncGroup protocol) and committed offsets:
owns every ClassicGroup, fires their timers, persists group metadata and offsets in
`__consumer_offsets` with Kafka's record formats, and rebuilds them at start-up.

The committed-offsets store (`offsets`, by group id) serves every kind of group, as Kafka's
OffsetMetadataManager does: classic and simple groups through their ClassicGroup (whose `offsets`
is that group's entry of the store), consumer groups (KIP-848) after their coordinator validated the
member, and transactional commits through `store_offsets`.

Parked JoinGroup/SyncGroup requests wait on futures the group answers through its outbox. Offset
commits are applied to memory once their append returned (a failed write changes nothing; GroupLog
keeps compaction from restating while one is in flight); the rest of what is persisted is updated
in memory in the same step as its append. Responses that acknowledge a write are sent after it."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.clock import STALL_MS, ExpiryHold
from sharebroker.broker.metrics import NULL_RECORDER, Recorder
from sharebroker.broker.groups import classic_records as crec
from sharebroker.broker.groups.classic_group import (
    DEAD,
    EMPTY,
    STABLE,
    ClassicGroup,
    ClassicSettings,
    JoinRequest,
    JoinResult,
    ClassicMember,
    MetadataWrite,
    SyncResult,
)
from sharebroker.broker.groups.consumer_protocol import assignment_version, encode_assignment
from sharebroker.broker.groups.group_log import OFFSETS_TOPIC
from sharebroker.broker.structured_log import get_logger

if TYPE_CHECKING:
    from sharebroker.broker.clock import Clock, TimerHandle
    from sharebroker.broker.groups.directory import GroupDirectory
    from sharebroker.broker.groups.group_log import GroupLog
    from sharebroker.broker.topics import Partition, Topics
    from sharebroker.config import BrokerConfig

log = get_logger("sharebroker.groups")

Record = tuple[bytes, bytes | None]
# (topic, partition, offset, leader epoch, metadata)
OffsetToCommit = tuple[str, int, int, int, str | None]
# (partition, committed offset, leader epoch, metadata, error)
FetchedOffset = tuple[int, int, int, str, ErrorCode]


class ClassicGroupCoordinator:
    metrics: Recorder = NULL_RECORDER  # counts rebalances; the broker sets its recorder

    def __init__(self, config: BrokerConfig, clock: Clock, topics: Topics, group_log: GroupLog,
                 groups: GroupDirectory) -> None:
        self.config = config
        # Group deadlines (sessions, rebalance and join timers) on the monotonic clock, so a step
        # of the wall clock neither expires members nor stretches them; commit timestamps and
        # the persisted state timestamp are wall time, as Kafka writes them.
        self.clock = clock
        self.topics = topics
        self.group_log = group_log
        self.directory = groups
        self.groups: dict[str, ClassicGroup] = {}
        self.offsets: dict[str, dict[tuple[str, int], crec.CommittedOffset]] = {}
        # TxnOffsetCommit offsets waiting for their transaction's end: producer id -> group -> offsets
        self.pending_txn: dict[int, dict[str, dict[tuple[str, int], crec.CommittedOffset]]] = {}
        self._persisted: dict[str, bytes] = {}  # group id -> last GroupMetadata value appended
        self._timers: dict[str, TimerHandle] = {}
        self._holds: dict[str, ExpiryHold] = {}  # groups whose timer ran late, held back since
        self._tasks: set[asyncio.Task[None]] = set()
        self._inflight: dict[str, set[asyncio.Future[None]]] = {}
        self._seen: dict[str, tuple[str, int]] = {}
        self._running = False
        self._cleanup: asyncio.Task[None] | None = None
        # Offset expiry of the other kinds of group whose offsets live in this store, run after ours.
        self.retention_hooks: list[Callable[[int], Awaitable[None]]] = []

    # -- configuration ---------------------------------------------------------------------------

    def settings(self) -> ClassicSettings:
        cfg = self.config
        return ClassicSettings(initial_rebalance_delay_ms=cfg["group.initial.rebalance.delay.ms"],
                               max_size=cfg["group.max.size"])

    def _offsets_of(self, group_id: str) -> dict[tuple[str, int], crec.CommittedOffset]:
        found = self.offsets.get(group_id)
        if found is None:
            found = self.offsets[group_id] = {}
        return found

    def _new_group(self, group_id: str, snapshot: crec.GroupSnapshot | None = None) -> ClassicGroup:
        """A classic group whose offsets are its entry of the shared store."""
        group = (ClassicGroup(group_id, self.settings()) if snapshot is None
                 else ClassicGroup.from_snapshot(group_id, snapshot, self.settings()))
        group.offsets = self._offsets_of(group_id)
        return group

    def _group(self, group_id: str) -> ClassicGroup | None:
        group = self.groups.get(group_id)
        if group is not None:
            group.settings = self.settings()
        return group

    # The group keeps its state timestamp on the monotonic clock, like its deadlines; the record
    # holds wall time (Kafka's currentStateTimestamp), converted at the boundary.

    def _wall_ms(self, monotonic_ms: int | None) -> int | None:
        if monotonic_ms is None:
            return None
        return monotonic_ms + self.clock.wall_ms() - self.clock.monotonic_ms()

    def _wall(self, snap: crec.GroupSnapshot) -> crec.GroupSnapshot:
        if snap.state_timestamp_ms == -1:
            return snap
        return dataclasses.replace(snap, state_timestamp_ms=snap.state_timestamp_ms + self.clock.wall_ms()
                                   - self.clock.monotonic_ms())

    def _monotonic(self, snap: crec.GroupSnapshot) -> crec.GroupSnapshot:
        if snap.state_timestamp_ms == -1:
            return snap
        return dataclasses.replace(snap, state_timestamp_ms=snap.state_timestamp_ms + self.clock.monotonic_ms()
                                   - self.clock.wall_ms())

    # -- lifecycle -------------------------------------------------------------------------------

    def begin_load(self) -> dict[int, Callable[[bytes, bytes | None], None]]:
        """The handlers of this coordinator's record types for the broker's replay of
        `__consumer_offsets` (offsets of still-open transactions go to `replay_pending`)."""
        self.group_log.register(self._restate)
        return {t: self._replay for t in (0, crec.OFFSET_COMMIT, crec.GROUP_METADATA)}

    def finish_load(self) -> None:
        """After the replay: offsets without membership become simple groups; timers start."""
        for group_id, committed in list(self.offsets.items()):
            if group_id in self.groups:
                continue
            if not committed:
                del self.offsets[group_id]
            elif self.directory.group_type(group_id) is None:
                self.groups[group_id] = self._new_group(group_id)  # offsets without membership: a "simple" group
        now = self.clock.monotonic_ms()
        for group in self.groups.values():
            group.settings = self.settings()
            group.loaded(now)
            self._seen[group.group_id] = (group.state, group.generation_id)
        if self.groups:
            log.info("classic groups loaded", groups=len(self.groups),
                     members=sum(len(g.members) for g in self.groups.values()),
                     offsets=sum(len(g.offsets) for g in self.groups.values()))

    def _replay(self, key: bytes, value: bytes | None) -> None:
        try:
            record_type, group_id, topic, partition = crec.decode_key(key)
            if record_type == crec.OFFSET_COMMIT:
                assert topic is not None and partition is not None
                if value is None:
                    self.offsets.get(group_id, {}).pop((topic, partition), None)
                    return
                self._offsets_of(group_id)[(topic, partition)] = crec.decode_offset_commit_value(value)
                return
            self.groups.pop(group_id, None)
            if value is None:
                self._persisted.pop(group_id, None)
                return
            self.groups[group_id] = self._new_group(group_id, self._monotonic(crec.decode_group_metadata_value(value)))
            self._persisted[group_id] = value
        except (ValueError, AssertionError, IndexError) as exc:
            log.warning("unreadable classic group record skipped", error=str(exc), key=key.hex()[:80])

    def replay_pending(self, partition: int, producer_id: int, key: bytes, value: bytes | None) -> None:
        """An offset committed in a transaction still open at start-up: pending until its marker."""
        try:
            record_type, group_id, topic, index = crec.decode_key(key)
            if record_type == crec.OFFSET_COMMIT and topic is not None and index is not None and value is not None:
                self.pending_txn.setdefault(producer_id, {}).setdefault(group_id, {})[(topic, index)] = (
                    crec.decode_offset_commit_value(value))
        except (ValueError, IndexError) as exc:
            log.warning("unreadable transactional offset record skipped", error=str(exc), key=key.hex()[:80])

    def _restate(self, in_partition: Callable[[str], bool]) -> list[Record]:
        out: list[Record] = []
        for group_id in self.groups:
            if in_partition(group_id) and group_id in self._persisted:
                out.append((crec.group_metadata_key(group_id), self._persisted[group_id]))
        for group_id, committed_offsets in self.offsets.items():
            if not in_partition(group_id):
                continue
            for (topic, partition), committed in committed_offsets.items():
                out.append((crec.offset_commit_key(group_id, topic, partition), crec.offset_commit_value(committed)))
        return out

    def start(self) -> None:
        self._running = True
        for group in self.groups.values():
            self._reschedule(group)
        self._cleanup = asyncio.get_running_loop().create_task(self._expire_offsets_forever(),
                                                               name="classic-offsets-expiry")

    async def stop(self) -> None:
        self._running = False
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        if self._cleanup is not None:
            self._cleanup.cancel()
        for task in list(self._tasks):
            task.cancel()

    # -- plumbing between the state machines and the loop ----------------------------------------

    def _after(self, group: ClassicGroup) -> None:
        """Deliver the group's answers, start its metadata writes, re-arm its timer."""
        for waiter, result in group.take_replies():
            if not waiter.done():
                waiter.set_result(result)
        writes = group.take_writes()
        if writes:
            self._spawn(self._write_metadata(group, writes))
        seen = (group.state, group.generation_id)
        previous = self._seen.get(group.group_id)
        if previous != seen:
            if (previous is None or previous[1] != seen[1]) and seen[1] > 0 and group.members:
                self.metrics.rebalance("classic")  # a new generation with members: a rebalance completed its join
            self._seen[group.group_id] = seen
            log.info("classic group state", group=group.group_id, state=group.state,
                     generation=group.generation_id, members=len(group.members),
                     protocol=group.protocol_name, leader=group.leader_id)
        self._reschedule(group)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _reschedule(self, group: ClassicGroup) -> None:
        handle = self._timers.pop(group.group_id, None)
        if handle is not None:
            handle.cancel()
        if not self._running or self.groups.get(group.group_id) is not group:
            return
        deadline = group.next_deadline()
        if deadline is None:
            return
        # A millisecond past the deadline, and never sooner than one from now: a zero-delay join
        # timer still lets JoinGroups already on their way in join the same generation.
        due = max(deadline, self.clock.monotonic_ms()) + 1
        self._timers[group.group_id] = self.clock.call_at(due, lambda: self._fire(group.group_id, due))

    def _fire(self, group_id: str, due: int) -> None:
        self._timers.pop(group_id, None)
        group = self._group(group_id)
        if group is None:
            return
        now = self.clock.monotonic_ms()
        hold = self._holds.setdefault(group_id, ExpiryHold())
        if hold.holds(due, now):
            # After a stall this timer runs before the loop reads the sockets: heartbeats that
            # arrived meanwhile are served first (one that comes re-arms this timer).
            retry = now + STALL_MS
            self._timers[group_id] = self.clock.call_at(retry, lambda: self._fire(group_id, retry))
            return
        self._holds.pop(group_id, None)
        try:
            group.tick(now)
        except Exception:
            log.exception("classic group timer failed", group=group_id)
        self._after(group)

    async def _write_metadata(self, group: ClassicGroup, writes: list[MetadataWrite]) -> None:
        for write in writes:
            ok = True
            try:
                if self.groups.get(group.group_id) is group:
                    value = crec.group_metadata_value(self._wall(write.snapshot))
                    await self._append(group.group_id, [(crec.group_metadata_key(group.group_id), value)])
                    if self.groups.get(group.group_id) is group:  # not deleted meanwhile
                        self._persisted[group.group_id] = value  # compaction restates what the log holds
            except Exception as exc:  # noqa: BLE001 - a failed write is answered to the members, not raised
                ok = False
                log.error("classic group metadata write failed", group=group.group_id, error=str(exc))
            group.write_done(write, ok, self.clock.monotonic_ms())
            self._after(group)

    async def _append(self, group_id: str, records: list[Record]) -> int:
        """Append and wait for the flush policy; returns the first record's offset. OffsetFetch
        with RequireStable waits for these."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        pending = self._inflight.setdefault(group_id, set())
        pending.add(done)
        try:
            return await self.group_log.append(group_id, records)
        finally:
            done.set_result(None)
            pending.discard(done)
            if not pending:
                self._inflight.pop(group_id, None)

    # -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ------------------------------------------

    async def join(self, *, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
                   client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                   protocols: tuple[tuple[str, bytes], ...], version: int) -> JoinResult:
        if not group_id:
            return JoinResult(ErrorCode.invalid_group_id, member_id)
        if not self.session_timeout_allowed(session_timeout_ms):
            return JoinResult(ErrorCode.invalid_session_timeout, member_id)
        if self.directory.group_type(group_id) not in (None, "classic"):
            return JoinResult(ErrorCode.inconsistent_group_protocol, "")
        group = self._group(group_id)
        created = False
        if group is None:
            if member_id:  # a known member id for a group that does not exist
                return JoinResult(ErrorCode.unknown_member_id, member_id)
            group = self.groups[group_id] = self._new_group(group_id)
            created = True
            log.info("classic group created", group=group_id)
        waiter: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        group.join(JoinRequest(member_id, group_instance_id, client_id, client_host, session_timeout_ms,
                               rebalance_timeout_ms, protocol_type, protocols, version), waiter,
                   self.clock.monotonic_ms())
        if created:
            group.writes.insert(0, MetadataWrite(group.snapshot()))
        self._after(group)
        return await waiter

    async def sync(self, *, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int,
                   protocol_type: str | None, protocol_name: str | None,
                   assignments: dict[str, bytes]) -> SyncResult:
        if not group_id:
            return SyncResult(ErrorCode.invalid_group_id)
        group = self._group(group_id)
        if group is None:
            return SyncResult(ErrorCode.unknown_member_id)
        waiter: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        group.sync(member_id=member_id, group_instance_id=group_instance_id, generation_id=generation_id,
                   protocol_type=protocol_type, protocol_name=protocol_name, assignments=assignments,
                   waiter=waiter, now_ms=self.clock.monotonic_ms())
        self._after(group)
        return await waiter

    def heartbeat(self, *, group_id: str, member_id: str, group_instance_id: str | None,
                  generation_id: int) -> ErrorCode:
        if not group_id:
            return ErrorCode.invalid_group_id
        group = self._group(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        code = group.heartbeat(member_id=member_id, group_instance_id=group_instance_id,
                               generation_id=generation_id, now_ms=self.clock.monotonic_ms())
        self._after(group)
        return code

    def leave(self, group_id: str, identities: list[tuple[str, str | None]]
              ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        if not group_id:
            return ErrorCode.invalid_group_id, []
        group = self._group(group_id)
        if group is None:  # Kafka answers a missing group per member
            return ErrorCode.none, [(m, i, ErrorCode.unknown_member_id) for m, i in identities]
        if group.state == DEAD:
            return ErrorCode.coordinator_not_available, []
        results = group.leave(identities, self.clock.monotonic_ms())
        for member_id, _instance, code in results:
            if code == ErrorCode.none:
                log.info("classic group member left", group=group_id, member=member_id)
        self._after(group)
        return ErrorCode.none, results

    # -- offsets ---------------------------------------------------------------------------------

    def _partition_exists(self, topic: str, partition: int) -> bool:
        t = self.topics.get(topic)
        return t is not None and 0 <= partition < len(t.partitions)

    async def commit_offsets(self, *, group_id: str, member_id: str, group_instance_id: str | None,
                             generation_id: int, offsets: list[OffsetToCommit],
                             version: int) -> dict[tuple[str, int], ErrorCode]:
        valid, errors = self._existing(offsets)
        if not valid:
            return errors
        group, error = self._group_for_commit(group_id, generation_id, version)
        if group is not None and error is None:
            error = group.validate_offset_commit(member_id=member_id, group_instance_id=group_instance_id,
                                                 generation_id=generation_id)
        if error is not None or group is None:
            for topic, partition, *_ in valid:
                errors[(topic, partition)] = error or ErrorCode.unknown_server_error
            return errors
        staged: dict[tuple[str, int], crec.CommittedOffset] = {}
        records = self._offset_records(group_id, valid, errors, self.clock.wall_ms(), staged)
        if not records and group.is_simple() and not group.offsets:
            self._forget(group_id)  # nothing committed: the simple group was never there
        group.offset_committed(member_id, self.clock.monotonic_ms())
        self._after(group)
        try:
            await self._commit(group_id, records, staged)
        except BaseException:
            if group.is_simple() and not group.offsets and self.groups.get(group_id) is group:
                self._forget(group_id)  # made for this commit, which did not happen
            raise
        return errors

    async def _commit(self, group_id: str, records: list[Record],
                      staged: dict[tuple[str, int], crec.CommittedOffset]) -> None:
        """Append offset commits, then apply them: a failed append (raised) changes nothing. An
        offset that changed while the append was in flight keeps what the log replays to: a commit
        whose record is later, or a deletion."""
        if not records:
            return
        before = {key: self.offsets.get(group_id, {}).get(key) for key in staged}
        first = await self._append(group_id, records)
        store = self._offsets_of(group_id)
        for key, committed in staged.items():
            current = store.get(key)
            if current is before[key] or (current is not None and current.log_offset < first + committed.log_offset):
                store[key] = dataclasses.replace(committed, log_offset=first + committed.log_offset)

    def _existing(self, offsets: list[OffsetToCommit]) -> tuple[list[OffsetToCommit], dict[tuple[str, int], ErrorCode]]:
        """The offsets of partitions that exist, and UNKNOWN_TOPIC_OR_PARTITION for the others."""
        valid: list[OffsetToCommit] = []
        errors: dict[tuple[str, int], ErrorCode] = {}
        for item in offsets:
            if self._partition_exists(item[0], item[1]):
                valid.append(item)
            else:
                errors[(item[0], item[1])] = ErrorCode.unknown_topic_or_partition
        return valid, errors

    def _offset_records(self, group_id: str, offsets: list[OffsetToCommit], errors: dict[tuple[str, int], ErrorCode],
                        now: int, store: dict[tuple[str, int], crec.CommittedOffset]) -> list[Record]:
        """Stage the offsets in `store` (applied once their records are appended) and return their
        records (oversized metadata refused)."""
        max_metadata = self.config["offset.metadata.max.bytes"]
        records: list[Record] = []
        for topic, partition, offset, leader_epoch, metadata in offsets:
            if metadata is not None and len(metadata) > max_metadata:
                errors[(topic, partition)] = ErrorCode.offset_metadata_too_large
                continue
            # log_offset: the record's place in this append, until the append gives its offset
            committed = crec.CommittedOffset(offset, leader_epoch, metadata or "", now, log_offset=len(records))
            store[(topic, partition)] = committed
            records.append((crec.offset_commit_key(group_id, topic, partition), crec.offset_commit_value(committed)))
            errors[(topic, partition)] = ErrorCode.none
        return records

    async def store_offsets(self, group_id: str, offsets: list[OffsetToCommit]) -> dict[tuple[str, int], ErrorCode]:
        """Commit a batch of offsets for a group without member validation: for callers that
        validated already (consumer groups, a committing transaction's TxnOffsetCommit offsets).
        Unknown partitions and oversized metadata are refused per partition."""
        valid, errors = self._existing(offsets)
        staged: dict[tuple[str, int], crec.CommittedOffset] = {}
        records = self._offset_records(group_id, valid, errors, self.clock.wall_ms(), staged)
        await self._commit(group_id, records, staged)
        return errors

    async def txn_commit_offsets(self, *, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                                 group_instance_id: str | None, generation_id: int,
                                 offsets: list[OffsetToCommit]) -> dict[tuple[str, int], ErrorCode]:
        """TxnOffsetCommit for a classic (or simple) group: the offsets are written now as the
        producer's transactional batch and become committed when its commit marker reaches this
        `__consumer_offsets` partition (`transaction_completed`); an abort drops them."""
        valid, errors = self._existing(offsets)
        if not valid:
            return errors
        group = self._group(group_id)
        error: ErrorCode | None = None
        if group is not None:
            # Kafka's ClassicGroup.validateOffsetCommit with isTransactional: a commit without
            # membership is accepted whatever the state; one naming a member is checked.
            if group.state == DEAD:
                error = ErrorCode.coordinator_not_available
            elif not (generation_id < 0 and group.state == EMPTY) and (
                    generation_id >= 0 or member_id or group_instance_id is not None):
                error = group.validate_member(member_id, group_instance_id)
                if error is None and generation_id != group.generation_id:
                    error = ErrorCode.illegal_generation
        if error is not None:
            return {**errors, **{(t, p): error for t, p, *_ in valid}}
        staged: dict[tuple[str, int], crec.CommittedOffset] = {}
        records = self._offset_records(group_id, valid, errors, self.clock.wall_ms(), staged)
        if records:
            first = await self.group_log.append(group_id, records, transaction=(producer_id, producer_epoch))
            self.pending_txn.setdefault(producer_id, {}).setdefault(group_id, {}).update(
                {key: dataclasses.replace(c, log_offset=first + c.log_offset) for key, c in staged.items()})
        return errors

    def transaction_completed(self, partition: Partition, producer_id: int, commit: bool) -> None:
        """A transaction marker reached `partition`: the producer's pending offsets of the groups
        living there are committed (or dropped). Their records are already in the log before the
        marker, so nothing more is written."""
        if partition.topic.name != OFFSETS_TOPIC:
            return
        by_group = self.pending_txn.get(producer_id)
        if not by_group:
            return
        for group_id in [g for g in by_group if self.group_log.partition_of(g) == partition.index]:
            staged = by_group.pop(group_id)
            if not commit:
                continue
            if group_id not in self.groups and self.directory.group_type(group_id) is None:
                self.groups[group_id] = self._new_group(group_id)  # offsets without membership: a simple group
            self._offsets_of(group_id).update(staged)
            log.info("transactional offsets committed", group=group_id, producer_id=producer_id,
                     partitions=len(staged))
        if not by_group:
            del self.pending_txn[producer_id]

    async def delete_all_offsets(self, group_id: str) -> None:
        """Tombstone every committed offset of a group (DeleteGroups of another kind of group)."""
        committed = self.offsets.pop(group_id, {})
        if committed:
            await self._append(group_id, [(crec.offset_commit_key(group_id, t, p), None) for t, p in committed])

    def is_empty_group(self, group_id: str) -> bool:
        """Kafka's ClassicGroup.isEmpty: in the Empty state. A member only told MEMBER_ID_REQUIRED
        is not a member yet: a consumer group may take the id, and its JoinGroup then goes there."""
        group = self.groups.get(group_id)
        return group is not None and group.state == EMPTY

    def session_timeout_allowed(self, session_timeout_ms: int) -> bool:
        return self.config["group.min.session.timeout.ms"] <= session_timeout_ms <= self.config["group.max.session.timeout.ms"]

    def take_over(self, group_id: str) -> list[Record]:
        """A consumer group takes over this classic group's id (empty, or upgraded with its members;
        or an `adopt` whose record could not be appended is undone): whoever waits in JoinGroup or
        SyncGroup is told to rejoin, the group goes from memory, and the returned tombstone is for
        the caller to append in the same step. Committed offsets stay in the store."""
        group = self.groups.get(group_id)
        if group is None:
            return []
        group.mark_dead(self.clock.monotonic_ms(), ErrorCode.rebalance_in_progress)
        self._after(group)
        self._forget(group_id, keep_offsets=True)
        return [(crec.group_metadata_key(group_id), None)]

    def adopt(self, group_id: str, generation: int, members: list[ClassicMember],
              assigned: Mapping[str, Iterable[tuple[str, Iterable[int]]]]) -> list[Record]:
        """A consumer group downgraded to a classic group: install it Stable at `generation` with
        `members` (every protocol they support) holding `assigned` (partitions by topic name, per
        member id) in the protocol they vote for, and return its record for the caller to append
        in the same step; `rebalance` then starts the rebalance Kafka triggers (and `take_over`
        removes it again if the append fails)."""
        now = self.clock.monotonic_ms()
        group = ClassicGroup.stable(group_id, self.settings(), generation, members, now)
        for m in group.members.values():
            m.assignment = encode_assignment(assigned.get(m.member_id, ()),
                                             assignment_version(m.metadata(group.protocol_name)))
        group.offsets = self._offsets_of(group_id)
        value = crec.group_metadata_value(self._wall(group.snapshot({m.member_id: m.assignment
                                                                     for m in group.members.values()})))
        self.groups[group_id] = group
        self._persisted[group_id] = value
        group.loaded(now)
        self._after(group)  # its members' session timers run from now
        return [(crec.group_metadata_key(group_id), value)]

    def rebalance(self, group_id: str) -> None:
        group = self._group(group_id)
        if group is not None:
            group.rebalance(self.clock.monotonic_ms())
            self._after(group)

    def _group_for_commit(self, group_id: str, generation_id: int,
                          version: int) -> tuple[ClassicGroup | None, ErrorCode | None]:
        if self.directory.group_type(group_id) not in (None, "classic"):
            return None, ErrorCode.group_id_not_found
        group = self._group(group_id)
        if group is not None:
            return group, None
        if generation_id < 0:
            # Admin tools and manually assigned consumers commit without membership.
            group = self.groups[group_id] = self._new_group(group_id)
            return group, None
        return None, ErrorCode.group_id_not_found if version >= 9 else ErrorCode.illegal_generation

    async def fetch_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None,
                            require_stable: bool) -> list[tuple[str, list[FetchedOffset]]]:
        """Committed offsets of the requested partitions (-1 where none), or of every partition
        when `topics` is None. Unknown groups and other groups' ids have no offsets, as in Kafka."""
        if require_stable:
            pending = list(self._inflight.get(group_id, ()))
            if pending:
                await asyncio.wait(pending)
        offsets = self.offsets.get(group_id, {})
        # Kafka: with require_stable, a partition whose offset a transaction has pending answers
        # UNSTABLE_OFFSET_COMMIT (the consumer retries until the transaction ends).
        unstable = {tp for by_group in self.pending_txn.values() for tp in by_group.get(group_id, ())} \
            if require_stable and self.pending_txn else set()
        out: list[tuple[str, list[FetchedOffset]]] = []
        if topics is None:
            by_topic: dict[str, list[FetchedOffset]] = {}
            for (topic, partition), c in sorted(offsets.items()):
                by_topic.setdefault(topic, []).append((partition, c.offset, c.leader_epoch, c.metadata, ErrorCode.none))
            return list(by_topic.items())
        for topic, partitions in topics:
            rows: list[FetchedOffset] = []
            for partition in partitions:
                found = offsets.get((topic, partition))
                if (topic, partition) in unstable:
                    rows.append((partition, -1, -1, "", ErrorCode.unstable_offset_commit))
                elif found is None:
                    rows.append((partition, -1, -1, "", ErrorCode.none))
                else:
                    rows.append((partition, found.offset, found.leader_epoch, found.metadata, ErrorCode.none))
            out.append((topic, rows))
        return out

    async def delete_offsets(self, group_id: str, topics: list[tuple[str, list[int]]],
                             subscribed: Callable[[str], bool] | None = None
                             ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """OffsetDelete: a group-level error, and per-partition results. `subscribed` tells, for a
        consumer group, whether a member subscribes to a topic (Kafka refuses those)."""
        if not group_id:
            return ErrorCode.invalid_group_id, {}
        errors: dict[tuple[str, int], ErrorCode] = {}
        valid: list[tuple[str, int]] = []
        for topic, partitions in topics:
            for partition in partitions:
                if self._partition_exists(topic, partition):
                    valid.append((topic, partition))
                else:
                    errors[(topic, partition)] = ErrorCode.unknown_topic_or_partition
        if self.directory.group_type(group_id) == "consumer" and subscribed is not None:
            return await self._delete_offsets(group_id, valid, errors, subscribed)
        group = self._group(group_id)
        if group is None or self.directory.group_type(group_id) != "classic":
            return ErrorCode.group_id_not_found, errors
        error = group.validate_offset_delete()
        if error is not None:
            return error, errors
        return await self._delete_offsets(group_id, valid, errors, group.is_subscribed_to)

    async def _delete_offsets(self, group_id: str, partitions: list[tuple[str, int]],
                              errors: dict[tuple[str, int], ErrorCode], subscribed: Callable[[str], bool]
                              ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        store = self.offsets.get(group_id, {})
        records: list[Record] = []
        for topic, partition in partitions:
            if subscribed(topic):
                errors[(topic, partition)] = ErrorCode.group_subscribed_to_topic
                continue
            errors[(topic, partition)] = ErrorCode.none
            if store.pop((topic, partition), None) is not None:
                records.append((crec.offset_commit_key(group_id, topic, partition), None))
        if records:
            log.info("classic group offsets deleted", group=group_id, partitions=len(records))
            await self._append(group_id, records)
        return ErrorCode.none, errors

    # -- describe, list, delete ------------------------------------------------------------------

    def describe(self, group_id: str) -> ClassicGroup | None:
        group = self.groups.get(group_id)
        return group if group is not None and group.state != DEAD else None

    def listing(self) -> list[tuple[str, str, str, str]]:
        """(group id, protocol type, state, "classic") for ListGroups."""
        return [(g.group_id, g.protocol_type or "", g.state, "classic")
                for g in self.groups.values() if g.state != DEAD]

    async def delete_group(self, group_id: str) -> tuple[ErrorCode, str | None]:
        """DeleteGroups for a classic group: only an empty group goes, with all its offsets."""
        group = self.groups.get(group_id)
        if group is None or group.state == DEAD:
            return ErrorCode.group_id_not_found, f"Group {group_id} not found."
        if group.state != EMPTY:
            return ErrorCode.non_empty_group, f"Group {group_id} is not empty."
        records: list[Record] = [(crec.offset_commit_key(group_id, t, p), None) for t, p in group.offsets]
        records.append((crec.group_metadata_key(group_id), None))
        group.offsets.clear()
        group.mark_dead(self.clock.monotonic_ms())
        self._after(group)
        self._forget(group_id)
        log.info("classic group deleted", group=group_id)
        await self._append(group_id, records)
        return ErrorCode.none, None

    def _forget(self, group_id: str, *, keep_offsets: bool = False) -> None:
        self.groups.pop(group_id, None)
        if not keep_offsets:
            self.offsets.pop(group_id, None)
        self._persisted.pop(group_id, None)
        self._seen.pop(group_id, None)
        self._holds.pop(group_id, None)
        handle = self._timers.pop(group_id, None)
        if handle is not None:
            handle.cancel()

    async def topic_deleted(self, name: str) -> None:
        """A deleted topic's committed offsets go with it (tombstoned in every group)."""
        for group_id, committed in list(self.offsets.items()):
            gone = [key for key in committed if key[0] == name]
            if not gone:
                continue
            for key in gone:
                del committed[key]
            await self._append(group_id, [(crec.offset_commit_key(group_id, t, p), None) for t, p in gone])
            log.info("classic group offsets of deleted topic removed", group=group_id, topic=name,
                     partitions=len(gone))

    # -- offset retention ------------------------------------------------------------------------

    async def _expire_offsets_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config["offsets.retention.check.interval.ms"] / 1000)
            try:
                await self.expire_offsets(self.clock.wall_ms())
            except Exception:
                log.exception("classic offsets expiry failed")

    async def expire_offsets(self, now: int) -> None:
        """Kafka's offsets.retention.minutes: offsets of empty groups (counted from when the group
        became empty), of simple groups and of topics a stable consumer group no longer subscribes
        to (counted from the commit) expire; empty groups left without offsets are deleted. Then the
        other kinds of group that keep offsets here (`retention_hooks`) run theirs."""
        for group_id, group in list(self.groups.items()):
            base_of = _expiry_base(group, self._wall_ms(group.state_timestamp_ms))
            records: list[Record] = []
            if base_of is not None:
                records, _ = self.expire_unsubscribed(group_id, group.is_subscribed_to, base_of, now)
            if group.state == EMPTY and not group.offsets and not group.pending_members:
                records.append((crec.group_metadata_key(group_id), None))
                group.mark_dead(self.clock.monotonic_ms())
                self._after(group)
                self._forget(group_id)
                log.info("classic group expired", group=group_id)
            if records:
                await self._append(group_id, records)
        for hook in self.retention_hooks:
            await hook(now)

    def expire_unsubscribed(self, group_id: str, subscribed: Callable[[str], bool],
                            base_of: Callable[[crec.CommittedOffset], int], now: int) -> tuple[list[Record], bool]:
        """Drop the group's expired offsets of topics it does not subscribe to (but for partitions a
        transaction has offsets pending for): their tombstones, for the caller to append, and whether
        every offset of the group is gone and no transaction holds any for it (Kafka's
        OffsetMetadataManager.cleanupExpiredOffsets)."""
        retention_ms = self.config["offsets.retention.minutes"] * 60_000
        committed = self.offsets.get(group_id, {})
        pending = {tp for by_group in self.pending_txn.values() for tp in by_group.get(group_id, ())}
        records: list[Record] = []
        for (topic, partition), c in list(committed.items()):
            if (topic, partition) in pending or subscribed(topic):
                continue
            expired = (now >= c.expire_timestamp_ms if c.expire_timestamp_ms >= 0
                       else now - base_of(c) >= retention_ms)
            if expired:
                del committed[(topic, partition)]
                records.append((crec.offset_commit_key(group_id, topic, partition), None))
        return records, not committed and not pending


def _expiry_base(group: ClassicGroup, became_empty: int | None) -> Callable[[crec.CommittedOffset], int] | None:
    """What an offset's age counts from (wall time): `became_empty` is the group's state timestamp."""
    if group.protocol_type is None:
        return lambda c: c.commit_timestamp_ms
    if group.state == EMPTY:
        return lambda c: became_empty if became_empty is not None else c.commit_timestamp_ms
    if group.protocol_type == "consumer" and group.subscribed_topics is not None and group.state == STABLE:
        return lambda c: c.commit_timestamp_ms
    return None


def member_rows(group: ClassicGroup) -> Iterable[tuple[str, str | None, str, str, bytes, bytes]]:
    """(member id, instance id, client id, client host, metadata, assignment) for DescribeGroups:
    metadata only when the group is Stable."""
    stable = group.state == STABLE
    for m in group.members.values():
        yield (m.member_id, m.group_instance_id, m.client_id, m.client_host,
               m.metadata(group.protocol_name) if stable else b"", m.assignment)
