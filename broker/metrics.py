"""What the broker counts for its Prometheus endpoint (`metrics.listener`), and the null recorder
used when that is off.

The hot paths call a recorder once per request, per partition of a request, or per state write,
never per record; a recorder only adds to plain dicts and lists, which the collector
(`metrics_endpoint.py`) turns into metric families at scrape time. Gauges (log offsets, in-flight
records, groups by state, connections) are not recorded at all: they are read from the broker's
state when scraped. With metrics off the broker holds `NULL_RECORDER`, whose methods do nothing, and
the connection does not even read the clock (`enabled` is False)."""

from __future__ import annotations

import dataclasses
import typing
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from operator import countOf
from typing import Any

from kio.schema.errors import ErrorCode

__all__ = ["FOLD_AT", "LATENCY_BUCKETS_MS", "NULL_RECORDER", "Histogram", "MetricsRecorder", "Recorder",
           "RequestSlot", "ShareFacts", "all_none", "count_errors", "error_name"]

# Upper bounds (ms) of the request latency buckets: long polls (Fetch, ShareFetch) wait up to
# their MaxWaitMs, so the buckets reach well past the clients' default 500 ms.
LATENCY_BUCKETS_MS = (0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0,
                      10000.0, 30000.0)
# Share-partition load time (a __share_group_state read): usually well under a millisecond.
LOAD_BUCKETS_MS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 1000.0, 5000.0)

# The acknowledgement types Kafka's ShareGroupMetrics counts (AcknowledgeType ids; gaps are not counted).
ACK_TYPE_NAMES = {1: "Accept", 2: "Release", 3: "Reject", 4: "Renew"}

ShareKey = tuple[str, str, int]  # (group, topic, partition)

# What a ShareFetch or ShareAcknowledge asked of each topic, noted with its request and counted
# when its slot is folded (Kafka's Total/Failed ShareFetch and ShareAcknowledgement requests
# per topic): the fetch, as the session's ("fetch", topic) counter keys when no partition failed,
# else {topic: whether a partition of it failed}, None without a fetch; and the acknowledgements,
# {topic: whether a partition's failed}, None without any. (The bytes and records they moved are
# counted at once, on the partitions and in `ack_counts`.)
ShareFacts = tuple[tuple[tuple[str, str], ...] | dict[str, bool] | None, dict[str, bool] | None]


# Per response class: whether it has an error_code, the fields holding tuples of entities, and those
# holding one entity. Built once per class from kio's dataclass field types.
_ErrorPlan = tuple[bool, tuple[str, ...], tuple[str, ...]]
_PLANS: dict[type, _ErrorPlan] = {}


def _plan(cls: type) -> _ErrorPlan:
    many: list[str] = []
    one: list[str] = []
    names = set()
    for f in dataclasses.fields(cls):
        names.add(f.name)
        tp: Any = f.type
        args = typing.get_args(tp)
        if typing.get_origin(tp) is tuple and args and dataclasses.is_dataclass(args[0]):
            many.append(f.name)
        elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
            one.append(f.name)
    plan = _PLANS[cls] = ("error_code" in names, tuple(many), tuple(one))
    return plan


_ERROR_NAMES: dict[int, str] = {int(code): code.name.upper() for code in ErrorCode}


def error_name(code: Any) -> str:
    """Kafka's name of an error code (an ErrorCode or an int): NONE, UNKNOWN_TOPIC_OR_PARTITION, ..."""
    name = _ERROR_NAMES.get(code)
    return name if name is not None else str(code)


# {"NONE": n} for the responses whose every error code is NONE (nearly all): one shared dict per n,
# which the recorder only reads, instead of a new one per request.
_ALL_NONE = [{"NONE": n} for n in range(65)]


def all_none(n: int) -> dict[str, int]:
    """The error counts of a response with n error codes, all NONE."""
    return _ALL_NONE[n] if n < len(_ALL_NONE) else {"NONE": n}


def count_errors(entity: Any, counts: dict[str, int]) -> None:
    """Every error_code of a kio response, NONE included, by name: what Kafka's
    AbstractResponse.errorCounts gives ErrorsPerSec (the top level, each topic, each partition)."""
    cls = type(entity)
    has_error, many, one = _PLANS.get(cls) or _plan(cls)
    if has_error:
        name = error_name(entity.error_code)
        counts[name] = counts.get(name, 0) + 1
    for field in many:
        for child in getattr(entity, field) or ():
            count_errors(child, counts)
    for field in one:
        child = getattr(entity, field)
        if child is not None:
            count_errors(child, counts)


class Histogram:
    """Cumulative-at-scrape bucket counts and a sum; `observe` is one bisect and two additions."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def add_sorted(self, values: list[float]) -> None:
        """`observe` each of `values`, which are sorted: one bisect per bucket, not one per value."""
        counts, below = self.counts, 0
        for i, bound in enumerate(self.bounds):
            upto = bisect_right(values, bound, below)  # values <= bound, where observe's bisect_left puts them
            counts[i] += upto - below
            below = upto
        counts[-1] += len(values) - below
        self.sum += sum(values)

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, count) pairs as Prometheus wants them: cumulative, ending with +Inf."""
        out: list[tuple[str, int]] = []
        total = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts):
            total += n
            out.append(("+Inf" if bound == float("inf") else repr(bound), total))
        return out


_T = typing.TypeVar("_T")
_TALLY_ROUNDS = 4


def _tally(objects: list[_T]) -> Iterator[tuple[_T, int]]:
    """Each distinct value of `objects` (by equality) with how many times it occurs. A fold's
    error counts and share facts are nearly all alike (all NONE; a session's topics), so each
    round counts one value in a C pass; past a few rounds the rest are taken one by one."""
    rest = objects
    for _ in range(_TALLY_ROUNDS):
        if not rest:
            return
        first = rest[0]
        n = countOf(rest, first)
        yield first, n
        if n == len(rest):
            return
        rest = [o for o in rest if o != first]
    for o in rest:
        yield o, 1


class RequestSlot:
    """The requests of one (API key, version) noted since the last fold, in three lists the
    connection appends to: each request's time (ms) and the error codes of its response by name,
    and for ShareFetch and ShareAcknowledge what it asked of which topics. Appending to the slot
    the connection already holds is all a request costs; the fold counts the lists in C loops."""

    __slots__ = ("key", "times", "errors", "facts")

    def __init__(self, key: tuple[int, int]) -> None:
        self.key = key
        self.times: list[float] = []
        self.errors: list[dict[str, int]] = []
        self.facts: list[ShareFacts] = []


class Recorder:
    """The null recorder: every hook does nothing (metrics.listener unset)."""

    enabled = False

    def slot(self, api_key: int, version: int) -> RequestSlot:
        """Where a connection notes the requests of an API version (a counting recorder's only)."""
        raise TypeError("requests are not noted with metrics off")

    def fold(self) -> None:
        """Count the requests noted in the slots."""

    def request(self, key: tuple[int, int], elapsed_ms: float, errors: dict[str, int],
                share: ShareFacts | None = None) -> None:
        """One request ((API key, version)) answered (or closed on): its API, version, time, the error codes of its
        response by name (NONE included), and for ShareFetch and ShareAcknowledge the topics it asked of."""

    def fetched(self, topic: str, size: int) -> None:
        """Record bytes answered to a Fetch for one partition (BytesOutPerSec; ShareFetch counts
        them on the partition)."""

    def forget_topic(self, topic: str) -> None:
        """A topic was deleted: its per-topic counts go, as Kafka removes its BrokerTopicMetrics
        (those counted on its partitions went with them)."""

    def share_acknowledged(self, batches: list[tuple[int, int, list[int]]]) -> None:
        """One partition's acknowledgement batches ((first offset, last offset, acknowledge types))
        were applied: records per acknowledge type (gaps are not counted)."""

    def share_partition_loaded(self, elapsed_ms: float) -> None:
        """A share partition's state was read from the share coordinator (PartitionLoadTimeMs)."""

    def locks_expired(self, key: ShareKey, records: int) -> None:
        """Acquisition locks ran out on `records` records (AcquisitionLockTimeoutPerSec)."""

    def archived_at_limit(self, key: ShareKey, records: int) -> None:
        """Records archived because they reached share.delivery.count.limit."""

    def rebalance(self, protocol: str) -> None:
        """A group's epoch (or a classic group's generation) moved on."""


# Requests of one API version a recorder notes before it folds them into its counts (a scrape
# folds them at once).
FOLD_AT = 2048


class MetricsRecorder(Recorder):
    """The counting recorder (metrics.listener set).

    A request is only noted in its API version's slot (a few list appends), with the topics a
    ShareFetch or ShareAcknowledge asked of: folding it into the per-API counts, the latency
    histogram, the error counts and the per-topic share counters touches several dicts, which
    between two requests have left the CPU's caches, so done one at a time it cost several times
    its in-loop price. A slot is folded when it fills, all of them when the counts are read. What
    needs no lookup is counted at once: bytes and records on the partition, acknowledged records
    in a list."""

    enabled = True

    def __init__(self) -> None:
        super().__init__()
        # api key -> {version: slot}: finding a request's slot builds no key (any int16 API key
        # of a refused request has its own)
        self.slots_by_api: dict[int, dict[int, RequestSlot]] = {}
        self._requests: dict[tuple[int, int], int] = {}
        self._latency: dict[int, Histogram] = {}
        self._errors: dict[tuple[int, str], int] = {}
        self.bytes_out: dict[str, int] = {}  # Fetch's, by topic (Produce and ShareFetch count on the partitions)
        # ("fetch" | "acknowledgement", topic) -> requests, and those with a failed partition
        self._share_total: dict[tuple[str, str], int] = {}
        self._share_failed: dict[tuple[str, str], int] = {}
        self.ack_counts = [0] * (max(ACK_TYPE_NAMES) + 1)  # records by acknowledge type (index)
        self.partition_load = Histogram(LOAD_BUCKETS_MS)
        self.lock_timeouts: dict[ShareKey, int] = {}
        self.at_limit: dict[ShareKey, int] = {}
        self.rebalances: dict[str, int] = {"classic": 0, "consumer": 0, "share": 0}

    @property
    def requests(self) -> dict[tuple[int, int], int]:
        """(api key, version) -> requests answered."""
        self.fold()
        return self._requests

    @property
    def latency(self) -> dict[int, Histogram]:
        """api key -> request time histogram (ms)."""
        self.fold()
        return self._latency

    @property
    def errors(self) -> dict[tuple[int, str], int]:
        """(api key, error name) -> error codes in responses, NONE included."""
        self.fold()
        return self._errors

    @property
    def share_requests_total(self) -> dict[tuple[str, str], int]:
        """("fetch" | "acknowledgement", topic) -> share requests naming the topic."""
        self.fold()
        return self._share_total

    @property
    def share_requests_failed(self) -> dict[tuple[str, str], int]:
        """The same, counting only those in which a partition of the topic failed."""
        self.fold()
        return self._share_failed

    @property
    def record_acks(self) -> dict[int, int]:
        """acknowledge type -> records acknowledged with it (gaps are not counted)."""
        return {t: self.ack_counts[t] for t in ACK_TYPE_NAMES}

    def slot(self, api_key: int, version: int) -> RequestSlot:
        by_version = self.slots_by_api.get(api_key)
        if by_version is None:
            by_version = self.slots_by_api[api_key] = {}
        slot = by_version.get(version)
        if slot is None:
            slot = by_version[version] = RequestSlot((api_key, version))
        return slot

    def request(self, key: tuple[int, int], elapsed_ms: float, errors: dict[str, int],
                share: ShareFacts | None = None) -> None:
        slot = self.slot(*key)
        slot.times.append(elapsed_ms)
        slot.errors.append(errors)
        if share is not None:
            slot.facts.append(share)
        if len(slot.times) >= FOLD_AT:
            self.fold()

    def fold(self) -> None:
        """Count the requests noted in the slots since the last fold.

        Each slot's lists are counted by C loops (a sort, `countOf`): its times are bucketed by
        bisecting their sorted list, and its error counts and share facts, nearly all alike, are
        tallied by value."""
        requests, latency, counted = self._requests, self._latency, self._errors
        for by_version in self.slots_by_api.values():
            for slot in by_version.values():
                times = slot.times
                if not times:
                    continue
                errors_noted, facts = slot.errors, slot.facts
                slot.times, slot.errors, slot.facts = [], [], []
                key = slot.key
                requests[key] = requests.get(key, 0) + len(times)
                api_key = key[0]
                hist = latency.get(api_key)
                if hist is None:
                    hist = latency[api_key] = Histogram(LATENCY_BUCKETS_MS)
                times.sort()
                hist.add_sorted(times)
                for errors, n in _tally(errors_noted):
                    for name, c in errors.items():
                        ekey = (api_key, name)
                        counted[ekey] = counted.get(ekey, 0) + c * n
                if facts:
                    self._count_facts(facts)

    def _count_facts(self, facts: list[ShareFacts]) -> None:
        for fetch, n in _tally([f for f, _ in facts if f]):
            if isinstance(fetch, tuple):  # no partition failed: the session's keys
                total = self._share_total
                for tkey in fetch:
                    total[tkey] = total.get(tkey, 0) + n
            else:
                self._count_topics("fetch", fetch, n)
        for acknowledged, n in _tally([a for _, a in facts if a]):
            self._count_topics("acknowledgement", acknowledged, n)

    def _count_topics(self, kind: str, topics: dict[str, bool], n: int) -> None:
        total, failed = self._share_total, self._share_failed
        for topic, any_failed in topics.items():
            tkey = (kind, topic)
            total[tkey] = total.get(tkey, 0) + n
            if any_failed:
                failed[tkey] = failed.get(tkey, 0) + n

    def fetched(self, topic: str, size: int) -> None:
        self.bytes_out[topic] = self.bytes_out.get(topic, 0) + size

    def forget_topic(self, topic: str) -> None:
        self.fold()
        self.bytes_out.pop(topic, None)
        for counts in (self._share_total, self._share_failed):
            for key in [k for k in counts if k[1] == topic]:
                del counts[key]

    def share_acknowledged(self, batches: list[tuple[int, int, list[int]]]) -> None:
        counts = self.ack_counts
        for first, last, types in batches:
            if len(types) == 1:  # one type for the whole batch: one addition
                t = types[0]
                if 0 < t < len(counts):
                    counts[t] += last - first + 1
            else:  # a type per record: a C-level count per type (gaps, 0, are not counted)
                for t in set(types):
                    if 0 < t < len(counts):
                        counts[t] += types.count(t)

    def share_partition_loaded(self, elapsed_ms: float) -> None:
        self.partition_load.observe(elapsed_ms)

    def locks_expired(self, key: ShareKey, records: int) -> None:
        self.lock_timeouts[key] = self.lock_timeouts.get(key, 0) + records

    def archived_at_limit(self, key: ShareKey, records: int) -> None:
        self.at_limit[key] = self.at_limit.get(key, 0) + records

    def rebalance(self, protocol: str) -> None:
        self.rebalances[protocol] = self.rebalances.get(protocol, 0) + 1


NULL_RECORDER = Recorder()
