"""The transaction coordinator, as Kafka's TransactionCoordinator runs it for transaction version 1
clients: transactional ids map to a producer id and epoch; a transaction goes Empty -> Ongoing
(partitions added) -> PrepareCommit/PrepareAbort (the decision, durable in `__transaction_state`)
-> markers written to every partition of the transaction -> CompleteCommit/CompleteAbort.

Every state change is appended to `__transaction_state` before it takes effect in memory; while one
is being written the id answers CONCURRENT_TRANSACTIONS (Kafka's pending transition). A decided
transaction whose markers are not all written (a crash, a full disk) is completed at start-up or by
retrying. A producer that re-initialises or outlives its transaction timeout has its open
transaction aborted with a bumped epoch, which fences the old instance."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from sharebroker.broker.flusher import now_ms
from sharebroker.broker.internal_topics import AppendDurability, InternalLog, read_records
from sharebroker.broker.java_compat import partition_for_key
from sharebroker.broker.structured_log import get_logger
from sharebroker.broker.topics import is_remote
from sharebroker.broker.transactions import records as trec
from sharebroker.protocol.errors import KafkaError
from sharebroker.protocol.record_batch import encode_marker, parse_batches

if TYPE_CHECKING:
    from sharebroker.broker.topics import Partition, Topics
    from sharebroker.config import BrokerConfig

log = get_logger("sharebroker.transactions")

TRANSACTION_STATE_TOPIC = "__transaction_state"
TopicPartition = tuple[str, int]
_MAX_EPOCH = 32767
_MARKER_RETRY_S = 1.0
_END_TXN_WAIT_S = 5.0  # EndTxn answers once markers are written, or after this even if they are not yet
_COMPACT_INTERVAL_MS = 300_000
_COMPACT_AFTER_RECORDS = 1000


class TxnState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display(self) -> str:
        """The name Kafka's DescribeTransactions and ListTransactions use."""
        return _NAMES[self]


_NAMES = {TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing", TxnState.PREPARE_COMMIT: "PrepareCommit",
          TxnState.PREPARE_ABORT: "PrepareAbort", TxnState.COMPLETE_COMMIT: "CompleteCommit",
          TxnState.COMPLETE_ABORT: "CompleteAbort", TxnState.DEAD: "Dead",
          TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence"}
STATE_BY_NAME = {name: state for state, name in _NAMES.items()}


@dataclass(slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    previous_producer_id: int = -1
    last_producer_epoch: int = -1
    pending: bool = False  # a state change is being written
    completion: asyncio.Task[None] | None = None  # markers being written for a decided transaction

    @property
    def epoch_exhausted(self) -> bool:
        return self.producer_epoch >= _MAX_EPOCH - 1


@dataclass(slots=True)
class Transition:
    """The fields a state change sets; applied to the metadata once its record is durable."""

    state: TxnState
    producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    partitions: set[TopicPartition]
    start_ms: int
    last_update_ms: int
    previous_producer_id: int

    @classmethod
    def of(cls, txn: TxnMetadata, **changes: object) -> Transition:
        t = cls(txn.state, txn.producer_id, txn.producer_epoch, txn.last_producer_epoch, txn.timeout_ms,
                set(txn.partitions), txn.start_ms, txn.last_update_ms, txn.previous_producer_id)
        for name, value in changes.items():
            setattr(t, name, value)
        return t

    def value(self) -> trec.TxnLogValue:
        return trec.TxnLogValue(self.producer_id, self.producer_epoch, self.timeout_ms, int(self.state),
                                frozenset(self.partitions), self.last_update_ms, self.start_ms,
                                self.previous_producer_id)


class MarkerListener(Protocol):
    """Told of every marker written to a partition (the group coordinator completes pending
    transactional offset commits on `__consumer_offsets`)."""

    def transaction_completed(self, partition: Partition, producer_id: int, commit: bool) -> None: ...


@dataclass(slots=True)
class InitResult:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


def partition_for(transactional_id: str, num_partitions: int) -> int:
    """Kafka's Utils.abs(transactionalId.hashCode) % transaction.state.log.num.partitions."""
    return partition_for_key(transactional_id, num_partitions)


class TransactionCoordinator:
    def __init__(self, config: BrokerConfig, topics: Topics, internal: InternalLog, durability: AppendDurability,
                 next_producer_id: Callable[[], int]) -> None:
        self.config = config
        self.topics = topics
        self.internal = internal
        self.durability = durability
        self.next_producer_id = next_producer_id
        self.txns: dict[str, TxnMetadata] = {}
        self.listeners: list[MarkerListener] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._running = False
        self._since_compaction: dict[int, int] = {}  # state partition -> records appended since

    # -- start-up --------------------------------------------------------------------------------

    def load(self) -> int:
        """Rebuild every transactional id's state from `__transaction_state`; returns the count."""
        topic = self.internal.get(TRANSACTION_STATE_TOPIC)
        if topic is None:
            return 0
        for partition in topic.partitions:
            if is_remote(partition):  # another worker's (worker.processes > 1)
                continue
            for offset, key, value in read_records(partition.log):
                try:
                    txn_id = trec.decode_key(key)
                    if value is None:
                        self.txns.pop(txn_id, None)
                        continue
                    v = trec.decode_value(value)
                    state = TxnState(v.status)
                except ValueError as exc:
                    log.error("unreadable transaction record skipped", partition=partition.index, offset=offset,
                              error=str(exc))
                    continue
                txn = self.txns.get(txn_id)
                if txn is None:
                    txn = self.txns[txn_id] = TxnMetadata(txn_id, v.producer_id, v.producer_epoch, v.timeout_ms, state)
                txn.producer_id, txn.producer_epoch, txn.timeout_ms, txn.state = (
                    v.producer_id, v.producer_epoch, v.timeout_ms, state)
                txn.partitions = set(v.partitions)
                txn.start_ms, txn.last_update_ms = v.start_ms, v.last_update_ms
                txn.previous_producer_id = v.previous_producer_id
        return len(self.txns)

    def start(self) -> None:
        self._running = True
        for txn in self.txns.values():
            if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                # Decided before a crash or shutdown, markers perhaps not all written: finish it.
                log.info("completing transaction decided before start-up", transactional_id=txn.transactional_id,
                         producer_id=txn.producer_id, state=txn.state.display, partitions=len(txn.partitions))
                self._complete(txn)
        self._spawn(self._every(self.config["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
                                self.abort_timed_out))
        self._spawn(self._every(self.config["transaction.remove.expired.transaction.cleanup.interval.ms"],
                                self.expire_ids))
        self._spawn(self._every(_COMPACT_INTERVAL_MS, self.compact))

    async def stop(self) -> None:
        self._running = False
        for task in list(self._tasks):
            task.cancel()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _every(self, interval_ms: int, job: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await job()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("transaction coordinator timer failed")

    # -- the log ---------------------------------------------------------------------------------

    async def _state_partition(self, transactional_id: str) -> Partition:
        n = self.config["transaction.state.log.num.partitions"]  # the first write creates it (in slices)
        topic = await self.internal.ensure(TRANSACTION_STATE_TOPIC, n, self.config["transaction.state.log.segment.bytes"])
        return topic.partitions[partition_for(transactional_id, len(topic.partitions))]

    async def _write(self, txn: TxnMetadata, transition: Transition | None) -> None:
        """Append the transition (None: a tombstone) and apply it; the id is pending meanwhile. A
        write the disk refuses leaves the state as it was (NOT_COORDINATOR, the client retries)."""
        key = trec.encode_key(txn.transactional_id)
        value = None if transition is None else trec.encode_value(transition.value())
        partition = await self._state_partition(txn.transactional_id)
        txn.pending = True
        try:
            await self.internal.append(partition, [(key, value)])
        finally:
            txn.pending = False
        self._since_compaction[partition.index] = self._since_compaction.get(partition.index, 0) + 1
        if transition is None:
            txn.state = TxnState.DEAD
            if self.txns.get(txn.transactional_id) is txn:
                del self.txns[txn.transactional_id]
            return
        txn.state = transition.state
        txn.producer_id = transition.producer_id
        txn.producer_epoch = transition.producer_epoch
        txn.last_producer_epoch = transition.last_producer_epoch
        txn.timeout_ms = transition.timeout_ms
        txn.partitions = transition.partitions
        txn.start_ms = transition.start_ms
        txn.last_update_ms = transition.last_update_ms
        txn.previous_producer_id = transition.previous_producer_id

    # -- InitProducerId --------------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected: tuple[int, int] | None) -> InitResult:
        if transactional_id == "":
            return InitResult(ErrorCode.invalid_request)
        if not 0 < timeout_ms <= self.config["transaction.max.timeout.ms"]:
            return InitResult(ErrorCode.invalid_transaction_timeout)
        now = now_ms()
        txn = self.txns.get(transactional_id)
        if txn is None:
            txn = TxnMetadata(transactional_id, self.next_producer_id(), -1, timeout_ms, TxnState.EMPTY,
                              last_update_ms=now)
            self.txns[transactional_id] = txn
        if txn.pending or txn.completion is not None:
            return InitResult(ErrorCode.concurrent_transactions)
        if expected is not None and not (
                txn.producer_epoch == -1 or expected[0] == txn.producer_id
                or (expected[0] == txn.previous_producer_id and expected[1] >= _MAX_EPOCH - 1)):
            return InitResult(ErrorCode.producer_fenced)
        state = txn.state
        if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return InitResult(ErrorCode.concurrent_transactions)
        if state == TxnState.ONGOING:
            # Abort the open transaction with a bumped epoch (fencing the old instance); the client
            # retries and then gets an epoch bumped once more.
            log.info("open transaction aborted: the producer re-initialised", transactional_id=transactional_id,
                     producer_id=txn.producer_id, epoch=txn.producer_epoch)
            error = await self._fence_and_abort(txn)
            return InitResult(error if error != ErrorCode.none else ErrorCode.concurrent_transactions)
        if txn.epoch_exhausted and (expected is None or expected[1] == txn.producer_epoch):
            transition = Transition.of(txn, producer_id=self.next_producer_id(), producer_epoch=0,
                                       last_producer_epoch=txn.producer_epoch if expected is not None else -1,
                                       previous_producer_id=txn.producer_id, timeout_ms=timeout_ms,
                                       state=TxnState.EMPTY, partitions=set(), start_ms=-1, last_update_ms=now)
        else:
            bumped = txn.producer_epoch + 1
            if expected is None:
                epoch, last = bumped, -1
            elif txn.producer_epoch == -1 or expected[1] == txn.producer_epoch:
                epoch, last = bumped, txn.producer_epoch
            elif expected[1] == txn.last_producer_epoch:
                epoch, last = txn.producer_epoch, txn.last_producer_epoch  # a retry of a bump it never heard of
            else:
                return InitResult(ErrorCode.producer_fenced)
            transition = Transition.of(txn, producer_epoch=epoch, last_producer_epoch=last, timeout_ms=timeout_ms,
                                       state=TxnState.EMPTY, partitions=set(), start_ms=-1, last_update_ms=now)
        try:
            await self._write(txn, transition)
        except KafkaError as exc:
            if txn.producer_epoch == -1 and self.txns.get(transactional_id) is txn:
                del self.txns[transactional_id]  # never written: as if it had not been asked for
            return InitResult(exc.code)
        log.info("transactional producer initialised", transactional_id=transactional_id,
                 producer_id=txn.producer_id, epoch=txn.producer_epoch)
        return InitResult(ErrorCode.none, txn.producer_id, txn.producer_epoch)

    # -- AddPartitionsToTxn / AddOffsetsToTxn ----------------------------------------------------

    def _check_producer(self, txn: TxnMetadata | None, producer_id: int, epoch: int) -> ErrorCode | None:
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if txn.producer_epoch != epoch:
            return ErrorCode.producer_fenced
        return None

    async def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                             partitions: Iterable[TopicPartition]) -> ErrorCode:
        if not transactional_id:
            return ErrorCode.invalid_request
        txn = self.txns.get(transactional_id)
        error = self._check_producer(txn, producer_id, epoch)
        if error is not None:
            return error
        assert txn is not None
        if txn.pending or txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return ErrorCode.concurrent_transactions
        wanted = set(partitions)
        if txn.state == TxnState.ONGOING and wanted <= txn.partitions:
            return ErrorCode.none
        now = now_ms()
        starting = txn.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
        transition = Transition.of(txn, state=TxnState.ONGOING, partitions=txn.partitions | wanted,
                                   start_ms=now if starting else txn.start_ms, last_update_ms=now)
        try:
            await self._write(txn, transition)
        except KafkaError as exc:
            return exc.code
        return ErrorCode.none

    def verify_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """The verify-only path (AddPartitionsToTxn v4+, and every first transactional write to a
        partition): is each partition in the producer's open transaction?"""
        wanted = list(partitions)
        if not transactional_id:
            return dict.fromkeys(wanted, ErrorCode.invalid_request)
        txn = self.txns.get(transactional_id)
        error = self._check_producer(txn, producer_id, epoch)
        if error is None and txn is not None and txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            error = ErrorCode.concurrent_transactions
        if error is not None:
            return dict.fromkeys(wanted, error)
        assert txn is not None
        return {tp: ErrorCode.none if tp in txn.partitions else ErrorCode.transaction_abortable for tp in wanted}

    def verify_write(self, transactional_id: str, producer_id: int, epoch: int, tp: TopicPartition, *,
                     knows_abortable: bool) -> ErrorCode | None:
        """A write that opens the producer's transaction on `tp` (a produce, TxnOffsetCommit): None
        if `tp` is in it, else the error the writer gets, mapped as Kafka's AddPartitionsToTxnManager
        maps it (a fenced producer: INVALID_PRODUCER_EPOCH; a missing partition: TRANSACTION_ABORTABLE
        for clients that know it, INVALID_TXN_STATE for older ones)."""
        error = self.verify_partitions(transactional_id, producer_id, epoch, [tp])[tp]
        if error == ErrorCode.none:
            return None
        if error == ErrorCode.producer_fenced:
            return ErrorCode.invalid_producer_epoch
        if error == ErrorCode.transaction_abortable and not knows_abortable:
            return ErrorCode.invalid_txn_state
        return error

    # -- EndTxn ----------------------------------------------------------------------------------

    async def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> ErrorCode:
        if not transactional_id:
            return ErrorCode.invalid_request
        txn = self.txns.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if epoch != txn.producer_epoch:
            return ErrorCode.producer_fenced
        if txn.pending:
            return ErrorCode.concurrent_transactions
        state = txn.state
        if state == TxnState.ONGOING:
            error = await self._decide(txn, commit)
            if error != ErrorCode.none:
                return error
            completion = txn.completion
            if completion is not None:
                # Markers are local appends: answer once they are written, as the client will
                # otherwise only be told CONCURRENT_TRANSACTIONS on its next call.
                await asyncio.wait({asyncio.shield(completion)}, timeout=_END_TXN_WAIT_S)
            return ErrorCode.none
        if state == TxnState.COMPLETE_COMMIT:
            return ErrorCode.none if commit else ErrorCode.invalid_txn_state
        if state == TxnState.COMPLETE_ABORT:
            return ErrorCode.none if not commit else ErrorCode.invalid_txn_state
        if state == TxnState.PREPARE_COMMIT:
            return ErrorCode.concurrent_transactions if commit else ErrorCode.invalid_txn_state
        if state == TxnState.PREPARE_ABORT:
            return ErrorCode.concurrent_transactions if not commit else ErrorCode.invalid_txn_state
        return ErrorCode.invalid_txn_state  # Empty

    async def _decide(self, txn: TxnMetadata, commit: bool, *, epoch: int | None = None) -> ErrorCode:
        """Write PrepareCommit/PrepareAbort (at `epoch` when fencing), then complete in the background."""
        state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        changes: dict[str, object] = {"state": state, "last_update_ms": now_ms()}
        if epoch is not None:
            changes.update(producer_epoch=epoch, last_producer_epoch=-1)
        try:
            await self._write(txn, Transition.of(txn, **changes))
        except KafkaError as exc:
            return exc.code
        log.info("transaction decided", transactional_id=txn.transactional_id, producer_id=txn.producer_id,
                 epoch=txn.producer_epoch, result="commit" if commit else "abort", partitions=len(txn.partitions))
        self._complete(txn)
        return ErrorCode.none

    async def _fence_and_abort(self, txn: TxnMetadata) -> ErrorCode:
        """Kafka's epoch fence: abort the open transaction at epoch + 1 so that the old producer's
        requests (and late writes) are refused from now on."""
        if txn.producer_epoch >= _MAX_EPOCH:
            return ErrorCode.invalid_producer_epoch
        return await self._decide(txn, False, epoch=txn.producer_epoch + 1)

    def _complete(self, txn: TxnMetadata) -> None:
        txn.completion = self._spawn(self._write_markers_and_complete(txn))

    async def _write_markers_and_complete(self, txn: TxnMetadata) -> None:
        commit = txn.state == TxnState.PREPARE_COMMIT
        try:
            while True:
                try:
                    self.write_markers(txn.producer_id, txn.producer_epoch, commit, txn.partitions)
                    await self._await_markers_flushed(txn.partitions)
                    done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
                    await self._write(txn, Transition.of(txn, state=done, partitions=set(), last_update_ms=now_ms()))
                    return
                except (OSError, KafkaError) as exc:
                    log.warning("transaction markers not written yet, retrying", transactional_id=txn.transactional_id,
                                producer_id=txn.producer_id, error=f"{type(exc).__name__}: {exc}")
                    if not self._running:
                        return
                    await asyncio.sleep(_MARKER_RETRY_S)
        finally:
            txn.completion = None

    def write_markers(self, producer_id: int, epoch: int, commit: bool, partitions: Iterable[TopicPartition], *,
                      coordinator_epoch: int = 0) -> None:
        """Append a commit or abort marker for the producer to each partition that still exists
        (Kafka drops markers for deleted partitions). This node's coordinator epoch is always 0."""
        now = now_ms()
        for topic, index in sorted(partitions):
            partition = self.topics.partition(topic, index)
            if partition is None:
                continue
            partition.producers.check_marker(producer_id, epoch, coordinator_epoch)
            buf = encode_marker(producer_id, epoch, commit, coordinator_epoch=coordinator_epoch, timestamp_ms=now)
            result = partition.log.append(buf, parse_batches(buf, verify_crc=False),
                                          leader_epoch=partition.leader_epoch, now_ms=now)
            aborted = partition.producers.complete_txn(producer_id, epoch, result.first_offset, commit, now,
                                                       coordinator_epoch)
            if aborted is not None:
                partition.log.append_aborted_txn(aborted)
            if result.rolled:
                self.durability.segment_rolled(partition)
            for listener in self.listeners:
                listener.transaction_completed(partition, producer_id, commit)

    async def _await_markers_flushed(self, partitions: Iterable[TopicPartition]) -> None:
        waits = []
        for topic, index in partitions:
            partition = self.topics.partition(topic, index)
            if partition is not None:
                flushed = self.durability.after_append(partition, wait=True)
                if flushed is not None:
                    waits.append(flushed)
        if waits:
            await asyncio.gather(*waits)

    # -- timers ----------------------------------------------------------------------------------

    async def abort_timed_out(self) -> None:
        """Abort (with an epoch fence) every open transaction older than its timeout."""
        now = now_ms()
        for txn in list(self.txns.values()):
            if (txn.state == TxnState.ONGOING and not txn.pending and txn.completion is None
                    and txn.start_ms >= 0 and txn.start_ms + txn.timeout_ms < now):
                log.info("transaction timed out, aborting", transactional_id=txn.transactional_id,
                         producer_id=txn.producer_id, epoch=txn.producer_epoch, timeout_ms=txn.timeout_ms,
                         open_ms=now - txn.start_ms)
                await self._fence_and_abort(txn)

    async def expire_ids(self) -> None:
        """transactional.id.expiration.ms: forget ids idle that long with no open transaction."""
        now = now_ms()
        expiry = self.config["transactional.id.expiration.ms"]
        for txn in list(self.txns.values()):
            if (txn.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
                    and not txn.pending and txn.completion is None and txn.last_update_ms + expiry <= now):
                try:
                    await self._write(txn, None)
                except KafkaError:
                    continue
                log.info("transactional id expired", transactional_id=txn.transactional_id,
                         producer_id=txn.producer_id)

    async def compact(self, *, force: bool = False) -> None:
        """Kafka compacts `__transaction_state`; here a busy partition gets every live id's current
        state written again and everything before that dropped (as the group log is compacted).
        Skipped while an id of the partition has a write in flight: its new record could precede
        the restatement of its old state."""
        topic = self.internal.get(TRANSACTION_STATE_TOPIC)
        if topic is None:
            return
        n = len(topic.partitions)
        for partition in topic.partitions:
            index = partition.index
            if not force and self._since_compaction.get(index, 0) < _COMPACT_AFTER_RECORDS:
                continue
            here = [t for t in self.txns.values() if partition_for(t.transactional_id, n) == index and t.producer_epoch >= 0]
            if any(t.pending for t in here):
                continue
            start = partition.log.high_watermark
            records: list[tuple[bytes, bytes | None]] = [
                (trec.encode_key(t.transactional_id), trec.encode_value(Transition.of(t).value())) for t in here]
            if records:
                await self.internal.append(partition, records)
            partition.log.delete_records(start)
            self._since_compaction[index] = 0
            log.info("transaction log compacted", partition=index, records=len(records), log_start_offset=start)

    # -- admin -----------------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> tuple[ErrorCode, TxnMetadata | None]:
        if not transactional_id:
            return ErrorCode.invalid_request, None
        txn = self.txns.get(transactional_id)
        if txn is None or txn.state == TxnState.DEAD or txn.producer_epoch < 0:
            return ErrorCode.transactional_id_not_found, None
        return ErrorCode.none, txn

    def listing(self, *, states: set[str], producer_ids: set[int], min_duration_ms: int = -1,
                id_pattern: str | None = None) -> tuple[list[TxnMetadata], list[str]]:
        """The ids matching every filter (empty filters match all), and the state names asked for
        that Kafka does not know."""
        unknown = sorted(s for s in states if s not in STATE_BY_NAME)
        wanted = {STATE_BY_NAME[s] for s in states if s in STATE_BY_NAME}
        pattern = re.compile(id_pattern) if id_pattern else None
        now = now_ms()
        out = []
        for txn in self.txns.values():
            if txn.producer_epoch < 0 or txn.state == TxnState.DEAD:
                continue
            if states and txn.state not in wanted:
                continue
            if producer_ids and txn.producer_id not in producer_ids:
                continue
            if min_duration_ms >= 0 and now - txn.start_ms <= min_duration_ms:
                continue  # Kafka keeps those running longer than the filter (an unstarted one counts as old)
            if pattern is not None and not pattern.fullmatch(txn.transactional_id):
                continue
            out.append(txn)
        return out, unknown

