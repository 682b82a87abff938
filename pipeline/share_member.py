"""The `sharegroup` source's share-group member, and the timer that keeps its records' locks.

A micro-batch's records are acquired by a ShareFetch and must be acknowledged by the same member,
on the same share session, once Spark has committed the batch; a first batch or a slow sink easily
takes longer than the record lock (`share.record.lock.duration.ms`, 30 s by default, 15 s at least
in Kafka). So the member renews the locks of the batch it holds (AcknowledgeType RENEW, KIP-1222)
every third of the lock until the batch is accepted or released, and heartbeats meanwhile.

The member is sharebroker's own wire client (cli/share_consumer.py), not confluent-kafka's
ShareConsumer: librdkafka 2.16 cannot send RENEW, and it keeps ShareFetches in flight ahead of
`poll`, so that a poll can return records whose locks started during the previous batch. Here one
`poll` is one ShareFetch, sent by the caller, and the locks start no earlier than its sending."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from sharebroker.cli.records import Record
from sharebroker.cli.share_consumer import RENEW, ShareConsumer
from sharebroker.cli.wire import Client, ToolError, code_of

log = logging.getLogger(__name__)
GROUP_RESOURCE = 32
RENEW_SETTING = "share.renew.acknowledge.enable"
LOCK_SETTING = "share.record.lock.duration.ms"


@dataclass
class HeldBatch:
    """The records of one spooled micro-batch, acquired and not yet acknowledged."""

    seq: int
    offsets: dict[tuple[str, int], list[int]]
    count: int
    acquired_at: float  # monotonic; the ShareFetch that acquired them was sent then
    locked_since: float  # when the broker last (re)started their locks: acquisition or a renewal
    renewals: int = 0
    failures: list[str] = field(default_factory=list)  # renewals the broker refused, and why
    lost: set[tuple[str, int]] = field(default_factory=set)  # partitions whose locks were refused renewal


class SourceMember:
    """One share-group member for a streaming query's source runner. Not the caller's thread
    only: a timer thread heartbeats and renews, so every use of the wire client is under a lock."""

    def __init__(self, bootstrap: str, group: str, topics: Sequence[str], *, max_records: int,
                 lock_ms: int | None = None, client_id: str = "sharebroker-pipeline") -> None:
        self.group = group
        self.client = Client(bootstrap, timeout_ms=30_000, client_id=client_id)
        self.consumer = ShareConsumer(self.client, group, list(topics), max_records=max_records,
                                      warn=log.warning)
        self._lock_override = lock_ms
        self._mutex = threading.Lock()
        self._closing = threading.Event()
        self._keeper: threading.Thread | None = None
        self.held: HeldBatch | None = None
        self.cannot_renew: str | None = None  # why locks cannot be renewed, if they cannot
        self._old_broker = False

    # -- life cycle

    def start(self) -> None:
        with self._mutex:
            self.consumer.start()
            self.cannot_renew = self._renewal_refusal()
        if self.cannot_renew:
            log.warning("Share group '%s': record locks cannot be renewed (%s), so every micro-batch must be "
                        "committed within the record lock (%s) of its records' acquisition, or they are delivered "
                        "again. %s", self.group, self.cannot_renew, LOCK_SETTING, self.renewal_advice())
        self._keeper = threading.Thread(target=self._keep, name=f"sharegroup-{self.group}-locks", daemon=True)
        self._keeper.start()

    def close(self) -> None:
        self._closing.set()
        if self._keeper is not None:
            self._keeper.join(timeout=60)
        with self._mutex:
            try:
                self.consumer.close()
            finally:
                self.client.close()

    @property
    def lock_ms(self) -> int:
        """The record lock: the shorter of what the broker last reported and the source's
        lockDurationMs (Kafka's default before either is known)."""
        known = [ms for ms in (self.consumer.acquisition_lock_ms, self._lock_override) if ms]
        return min(known) if known else 30_000

    def renewal_advice(self) -> str:
        longer = f"raise the group's {LOCK_SETTING} above the longest micro-batch"
        if self._old_broker:
            return f"Use brokers with KIP-1222 (Apache Kafka 4.2 or newer), or {longer}."
        return (f"Set {RENEW_SETTING}=true on the group (kafka-configs.sh --alter --entity-type groups --entity-name "
                f"{self.group} --add-config {RENEW_SETTING}=true), or {longer}.")

    def _renewal_refusal(self) -> str | None:
        """Why this member will not be able to renew locks, as far as can be told before trying."""
        for node in sorted({n for n in self.consumer.leaders.values() if n >= 0}):
            conn = self.client.conn(node)
            if not conn.supports(79, 2):
                self._old_broker = True
                return (f"the broker at {conn.address} does not support RENEW acknowledgements "
                        "(ShareAcknowledge v2, KIP-1222, Apache Kafka 4.2+)")
        try:
            resp = self.client.request(32, {"resources": [{"resource_type": GROUP_RESOURCE, "resource_name": self.group,
                                                           "configuration_keys": [RENEW_SETTING]}],
                                            "include_synonyms": False, "include_documentation": False})
        except (ToolError, OSError, ConnectionError):
            return None  # no group configs to read: the broker decides at the first renewal
        for r in resp.results:
            if code_of(r.error_code):
                continue
            for c in r.configs:
                if c.name == RENEW_SETTING and (c.value or "").strip().lower() == "false":
                    return f"the group's {RENEW_SETTING} is false"
        return None

    # -- records

    def poll(self, timeout_ms: int) -> list[Record]:
        """One ShareFetch's records (possibly none); `acquired_at` is when it was sent."""
        with self._mutex:
            return self.consumer.poll(timeout_ms)

    @property
    def acquired_at(self) -> float:
        return self.consumer.acquired_at

    def hold(self, seq: int, records: Sequence[Record], acquired_at: float) -> HeldBatch:
        """Keep these records' locks from now until `settle`."""
        offsets: dict[tuple[str, int], list[int]] = {}
        for r in records:
            offsets.setdefault((r.topic, r.partition), []).append(r.offset)
        with self._mutex:
            self.held = HeldBatch(seq, offsets, len(records), acquired_at, acquired_at)
            return self.held

    def settle(self, kind: int) -> tuple[HeldBatch | None, dict[tuple[str, int], str]]:
        """Acknowledge the held batch with `kind`: the batch and the partitions the broker refused."""
        with self._mutex:
            held, self.held = self.held, None
            if held is None:
                return None, {}
            return held, self.consumer.acknowledge_now(held.offsets, kind)

    # -- the timer

    def _keep(self) -> None:
        while not self._closing.is_set():
            with self._mutex:
                try:
                    self.consumer.heartbeat_if_due()
                except Exception as exc:  # noqa: BLE001 - the timer must outlive a failed request
                    log.warning("Share group '%s': heartbeat failed: %s", self.group, exc)
                try:
                    wait = self._tick(time.monotonic())
                except Exception as exc:  # noqa: BLE001 - renewing goes on at the next tick
                    log.warning("Share group '%s': renewing record locks failed: %s", self.group, exc)
                    if self.held is not None:
                        self.held.failures.append(f"{type(exc).__name__}: {exc}")
                    wait = 1.0
            self._closing.wait(wait)

    def _renew_every(self) -> float:
        # A third of the lock leaves two chances before it runs out on a busy machine.
        return self.lock_ms / 3000

    def _tick(self, now: float) -> float:
        """Renew the held batch's locks if due; seconds until the next heartbeat or renewal."""
        c = self.consumer
        waits = [c.next_heartbeat - time.monotonic()]
        held = self.held
        live = {tp: offs for tp, offs in held.offsets.items() if tp not in held.lost} if held is not None else {}
        if held is not None and live and self.cannot_renew is None:
            due = held.locked_since + self._renew_every()
            if now >= due:
                sent = time.monotonic()
                refused = c.acknowledge_now(live, RENEW)
                for tp, why in refused.items():
                    held.failures.append(f"the renewal of {tp[0]}-{tp[1]} {sent - held.acquired_at:.1f} s after "
                                         f"acquisition was refused: {why}")
                    held.lost.add(tp)  # not renewed again: the commit will report it
                    if "not enabled" in why:
                        self.cannot_renew = f"the broker refused RENEW ({why})"
                if len(refused) < len(live):
                    held.locked_since = sent
                    held.renewals += 1
                due = held.locked_since + self._renew_every()
            waits.append(due - time.monotonic())
        return min(1.0, max(0.05, min(waits)))

