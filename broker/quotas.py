"""Client quotas as Kafka keeps and applies them: per user / client-id (and ip) entities with
defaults, set with AlterClientQuotas and read with DescribeClientQuotas, durable in the metadata
file; `producer_byte_rate` (request bytes of Produce), `consumer_byte_rate` (response bytes of
Fetch), `request_percentage` (time spent handling a client's requests, 100 = one thread) measured
as Kafka's windowed Rate, and `controller_mutation_rate` (partitions created or deleted per second)
as its token bucket. A client over its quota gets the delay in `throttle_time_ms` and its
connection is not read from until the delay has passed (KIP-219).

With no quota configured `ClientQuotas.active` is False and the connection skips everything here."""

from __future__ import annotations

import math
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from sharebroker.protocol.errors import KafkaError

USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCE, FETCH, REQUEST, MUTATION = ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
                                     "controller_mutation_rate")
# Kafka's QuotaConfig: the keys of user/client-id entities and of ip entities, with their types.
CLIENT_KEYS = {PRODUCE: "long", FETCH: "long", REQUEST: "double", MUTATION: "double"}
IP_RATE = "connection_creation_rate"
IP_KEYS = {IP_RATE: "int"}
_LIMITS = {"short": 2**15 - 1, "int": 2**31 - 1, "long": 2**63 - 1}
_ARTICLE = {"short": "a SHORT", "int": "an INT", "long": "a LONG"}
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
_SENSORS_KEPT = 10_000  # client rates kept before idle ones are dropped

Entity = tuple[tuple[str, str | None], ...]  # ((entity type, name or None for the default), ...), sorted


def entity_text(entity: Entity) -> str:
    """ClientQuotaEntity.toString: ClientQuotaEntity(entries={user=alice, client-id=null})."""
    return "ClientQuotaEntity(entries={" + ", ".join(f"{t}={'null' if n is None else n}" for t, n in entity) + "})"


def _valid_ip(name: str | None) -> bool:
    if name is None:
        return True
    try:
        socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
        return True
    except (OSError, UnicodeError):
        return False


class QuotaStore:
    """Every configured quota, by entity; changes are durable (write, fsync, rename) before they
    are visible."""

    def __init__(self, persist: Callable[[list[dict[str, Any]]], None]) -> None:
        self._persist = persist
        self.entities: dict[Entity, dict[str, float]] = {}
        self.on_change: list[Callable[[], None]] = []

    def load(self, rows: Iterable[dict[str, Any]]) -> None:
        """The quotas read from the metadata file at start."""
        entities: dict[Entity, dict[str, float]] = {}
        for row in rows:
            entity = tuple(sorted((str(t), None if n is None else str(n)) for t, n in row["entity"]))
            entities[entity] = {str(k): float(v) for k, v in row["values"].items()}
        self.entities = entities
        for callback in self.on_change:
            callback()

    def _rows(self, entities: dict[Entity, dict[str, float]]) -> list[dict[str, Any]]:
        return [{"entity": [list(pair) for pair in entity], "values": values} for entity, values in entities.items()]

    # -- DescribeClientQuotas -------------------------------------------------------------------

    def describe(self, components: Iterable[Any], strict: bool) -> list[tuple[Entity, dict[str, float]]]:
        """Kafka's ClientQuotasImage.describe; the filter is validated by the caller."""
        exact: dict[str, str | None] = {}
        typed: set[str] = set()
        for c in components:
            if int(c.match_type) == MATCH_SPECIFIED:
                typed.add(c.entity_type)
            else:
                exact[c.entity_type] = c.match if int(c.match_type) == MATCH_EXACT else None
        found = []
        for entity, values in self.entities.items():
            names = dict(entity)
            if strict and len(names) != len(exact) + len(typed):
                continue
            if any(t not in names or names[t] != n for t, n in exact.items()):
                continue
            if any(t not in names for t in typed):
                continue
            found.append((entity, dict(values)))
        return found

    # -- AlterClientQuotas ----------------------------------------------------------------------

    def alter(self, entries: list[tuple[list[tuple[str, str | None]], list[tuple[str, float, bool]]]],
              validate_only: bool) -> list[tuple[ErrorCode, str | None]]:
        """Kafka's ClientQuotaControlManager.alterClientQuotas: each entry validated alone, the
        valid ones applied together."""
        planned = {entity: dict(values) for entity, values in self.entities.items()}
        results: list[tuple[ErrorCode, str | None]] = []
        seen: set[Entity] = set()
        for pairs, ops in entries:
            entity = tuple(sorted(dict(pairs).items()))
            try:
                if entity in seen:
                    raise KafkaError(ErrorCode.invalid_request, f"Ignoring duplicate entity {entity_text(entity)}")
                seen.add(entity)
                changes = self._validate(entity, pairs, ops)
            except KafkaError as exc:
                results.append((exc.code, exc.message))
                continue
            values = planned.setdefault(entity, {})
            for key, value in changes.items():
                if value is None:
                    values.pop(key, None)
                else:
                    values[key] = value
            if not values:
                planned.pop(entity, None)
            results.append((ErrorCode.none, None))
        if not validate_only and planned != self.entities:
            self._persist(self._rows(planned))
            self.entities = planned
            for callback in self.on_change:
                callback()
        return results

    @staticmethod
    def _validate(entity: Entity, pairs: list[tuple[str, str | None]],
                  ops: list[tuple[str, float, bool]]) -> dict[str, float | None]:
        def invalid(message: str) -> KafkaError:
            return KafkaError(ErrorCode.invalid_request, message)

        changes: dict[str, float | None] = {}
        for key, value, remove in ops:
            if key in changes:
                raise invalid(f"Duplicate quota key {key} not updating quota for this entity {entity_text(entity)}")
            changes[key] = None if remove else value
        if not pairs:
            raise invalid("Invalid empty client quota entity")
        names: dict[str, str | None] = {}
        for etype, name in pairs:
            if etype in names:
                raise invalid(f"Invalid client quota entity, duplicate entity entry {etype}")
            if etype not in (USER, CLIENT_ID, IP):
                raise invalid(f"Unhandled client quota entity type: {etype}")
            names[etype] = name
            if name is not None and name == "":
                raise invalid(f"Empty {etype} not supported")
        if IP in names:
            if USER in names or CLIENT_ID in names:
                raise invalid("Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId")
            if not _valid_ip(names[IP]):
                raise invalid(f"{names[IP]} is not a valid IP or resolvable host.")
            keys = IP_KEYS
        else:
            keys = CLIENT_KEYS
        for key, change in changes.items():
            if change is None:
                continue
            value = change
            kind = keys.get(key)
            if kind is None:
                raise invalid(f"Invalid configuration key {key}")
            if value <= 0.0:
                raise invalid(f"Quota {key} must be greater than 0")
            if kind != "double":
                if value > _LIMITS[kind]:
                    raise invalid(f"Proposed value for {key} is too large for {_ARTICLE[kind]}.")
                if abs(math.fmod(value, 1.0)) > 1e-6:
                    raise invalid(f"{key} cannot be a fractional value.")
        return changes

    # -- which quota applies --------------------------------------------------------------------

    def quota_for(self, key: str, user: str, client_id: str) -> tuple[float, tuple[str, str]] | None:
        """Kafka's DefaultQuotaCallback: the most specific entity with `key`, in Kafka's order, and
        the (user, client-id) tags of the bucket the client shares with others under it."""
        e = self.entities
        order: tuple[tuple[Entity, tuple[str, str]], ...] = (
            (((CLIENT_ID, client_id), (USER, user)), (user, client_id)),
            (((CLIENT_ID, None), (USER, user)), (user, client_id)),
            (((USER, user),), (user, "")),
            (((CLIENT_ID, client_id), (USER, None)), (user, client_id)),
            (((CLIENT_ID, None), (USER, None)), (user, client_id)),
            (((USER, None),), (user, "")),
            (((CLIENT_ID, client_id),), ("", client_id)),
            (((CLIENT_ID, None),), ("", client_id)),
        )
        for entity, tags in order:
            values = e.get(entity)
            if values is not None and key in values:
                return values[key], tags
        return None


@dataclass(slots=True)
class _Rate:
    """Kafka's Rate over SampledStat: `samples` windows of `window_ms`; the measured window is
    never shorter than samples-1 whole windows."""

    samples: int
    window_ms: int
    windows: list[list[float]] = field(default_factory=list)  # [start ms, total]

    def record(self, value: float, now: float) -> None:
        self._purge(now)
        if not self.windows or now - self.windows[-1][0] >= self.window_ms:
            self.windows.append([now, 0.0])
        self.windows[-1][1] += value

    def _purge(self, now: float) -> None:
        horizon = now - self.samples * self.window_ms
        while self.windows and self.windows[0][0] + self.window_ms <= horizon:
            self.windows.pop(0)
        del self.windows[:-self.samples]

    def window_size(self, now: float) -> float:
        self._purge(now)
        oldest = self.windows[0][0] if self.windows else now
        elapsed = now - oldest
        full = int(elapsed // self.window_ms)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1.0)

    def rate(self, now: float) -> float:
        """Per second."""
        total = sum(w[1] for w in self.windows)
        return total / (self.window_size(now) / 1000.0)


@dataclass(slots=True)
class _TokenBucket:
    """Kafka's TokenBucket: a burst of quota × samples × window seconds, refilled at the quota."""

    quota: float
    burst: float
    tokens: float
    last_ms: float

    def refill(self, now: float) -> None:
        self.tokens = min(self.burst, self.tokens + self.quota * max(0.0, now - self.last_ms) / 1000.0)
        self.last_ms = now

    def throttle_ms(self, now: float) -> int:
        self.refill(now)
        return round(-self.tokens / self.quota * 1000) if self.tokens < 0 else 0


class MutationQuota:
    """One CreateTopics/CreatePartitions/DeleteTopics request's view of controller_mutation_rate:
    strict (v6/v3/v5 on) refuses a topic once the bucket is empty; permissive records only."""

    def __init__(self, bucket: _TokenBucket | None, strict: bool, now: Callable[[], float]) -> None:
        self._bucket = bucket
        self._strict = strict
        self._now = now

    def check(self) -> None:
        """Raise THROTTLING_QUOTA_EXCEEDED when the quota is used up (strict requests only)."""
        if self._bucket is not None and self._strict and self._bucket.throttle_ms(self._now()) > 0:
            raise KafkaError(ErrorCode.throttling_quota_exceeded, "The throttling quota has been exceeded.")

    def record(self, partitions: int) -> None:
        if self._bucket is not None:
            self._bucket.refill(self._now())
            self._bucket.tokens -= partitions

    def throttle_ms(self) -> int:
        return 0 if self._bucket is None else self._bucket.throttle_ms(self._now())


class ClientQuotas:
    """The sensors of every (user, client-id) bucket and the throttle they ask for."""

    def __init__(self, store: QuotaStore, *, samples: int, window_s: int, clock: Callable[[], float]) -> None:
        self.store = store
        self.samples = samples
        self.window_ms = window_s * 1000
        self.max_throttle_ms = samples * window_s * 1000
        self._clock = clock  # milliseconds, monotonic
        self._rates: dict[tuple[str, tuple[str, str]], _Rate] = {}
        self._buckets: dict[tuple[str, str], _TokenBucket] = {}
        self._cache: dict[tuple[str, str, str], tuple[float, tuple[str, str]] | None] = {}
        self.active = bool(store.entities)
        store.on_change.append(self._changed)

    def _changed(self) -> None:
        self._cache.clear()
        self.active = bool(self.store.entities)

    def _quota(self, key: str, user: str, client_id: str) -> tuple[float, tuple[str, str]] | None:
        cache_key = (key, user, client_id)
        try:
            return self._cache[cache_key]
        except KeyError:
            found = self._cache[cache_key] = self.store.quota_for(key, user, client_id)
            return found

    def record(self, key: str, user: str, client_id: str, value: float) -> int:
        """Record `value` against the client's bucket for `key`; the throttle time it has earned
        (0 when within quota or without one), as Kafka's maybeRecordAndGetThrottleTimeMs."""
        quota = self._quota(key, user, client_id)
        if quota is None:
            return 0
        bound, tags = quota
        now = self._clock()
        rate = self._rates.get((key, tags))
        if rate is None:
            if len(self._rates) >= _SENSORS_KEPT:
                self._expire(now)
            rate = self._rates[(key, tags)] = _Rate(self.samples, self.window_ms)
        rate.record(value, now)
        observed = rate.rate(now)
        if observed <= bound:
            return 0
        throttle = round((observed - bound) / bound * rate.window_size(now))
        return min(throttle, self.max_throttle_ms)

    def _expire(self, now: float) -> None:
        """Forget the rates of clients idle for all the windows (Kafka expires idle sensors)."""
        horizon = now - self.samples * self.window_ms
        self._rates = {k: r for k, r in self._rates.items() if r.windows and r.windows[-1][0] > horizon}

    def connection_throttle(self, ip: str) -> int:
        """connection_creation_rate of an `ip` entity (or the ip default), as Kafka's
        ConnectionQuotas: a new connection over it is not accepted, and is closed after this
        many milliseconds (at most one window); 0 lets it in."""
        values = self.store.entities.get(((IP, ip),))
        if values is None or IP_RATE not in values:
            values = self.store.entities.get(((IP, None),))
            if values is None or IP_RATE not in values:
                return 0
        bound = values[IP_RATE]
        now = self._clock()
        rate = self._rates.get((IP_RATE, (ip, "")))
        if rate is None:
            rate = self._rates[(IP_RATE, (ip, ""))] = _Rate(self.samples, self.window_ms)
        rate.record(1.0, now)
        observed = rate.rate(now)
        if observed <= bound:
            return 0
        rate.record(-1.0, now)  # a refused connection does not count
        return min(round((observed - bound) / bound * rate.window_size(now)), self.window_ms)

    def mutation(self, user: str, client_id: str, *, strict: bool) -> MutationQuota:
        quota = self._quota(MUTATION, user, client_id)
        if quota is None:
            return MutationQuota(None, strict, self._clock)
        bound, tags = quota
        bucket = self._buckets.get(tags)
        burst = bound * self.samples * self.window_ms / 1000
        if bucket is None or bucket.quota != bound:
            bucket = self._buckets[tags] = _TokenBucket(bound, burst, burst, self._clock())
        return MutationQuota(bucket, strict, self._clock)


__all__ = ["CLIENT_ID", "FETCH", "IP", "MUTATION", "PRODUCE", "REQUEST", "USER", "ClientQuotas", "MutationQuota",
           "QuotaStore", "entity_text"]
