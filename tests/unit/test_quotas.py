"""Client quotas on the pure objects, with an explicit clock: which entity's quota applies (Kafka's
precedence), the windowed rate and the throttle time it earns, the controller-mutation token
bucket, and the store's rows round trip."""

from __future__ import annotations

from typing import Any

import pytest

from sharebroker.broker.quotas import MUTATION, PRODUCE, REQUEST, ClientQuotas, QuotaStore
from sharebroker.protocol.errors import KafkaError


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000.0

    def __call__(self) -> float:
        return self.ms


def quotas(*entries: tuple[list[tuple[str, str | None]], str, float], samples: int = 11) -> tuple[ClientQuotas, Clock]:
    saved: list[Any] = []
    store = QuotaStore(saved.append)
    clock = Clock()
    q = ClientQuotas(store, samples=samples, window_s=1, clock=clock)
    assert all(code == 0 for code, _ in store.alter([(e, [(k, v, False)]) for e, k, v in entries], False))
    return q, clock


def test_the_most_specific_entity_applies() -> None:
    q, _ = quotas(([("user", None)], PRODUCE, 1), ([("user", "alice")], PRODUCE, 2),
                  ([("user", "alice"), ("client-id", "app")], PRODUCE, 3), ([("client-id", None)], PRODUCE, 4))
    store = q.store
    assert store.quota_for(PRODUCE, "alice", "app") == (3, ("alice", "app"))
    assert store.quota_for(PRODUCE, "alice", "other") == (2, ("alice", ""))
    assert store.quota_for(PRODUCE, "bob", "app") == (1, ("bob", ""))  # the user default, per user
    assert store.quota_for(REQUEST, "bob", "app") is None
    q2, _ = quotas(([("client-id", None)], PRODUCE, 4))
    assert q2.store.quota_for(PRODUCE, "bob", "app") == (4, ("", "app"))


def test_throttle_time_is_kafkas() -> None:
    q, clock = quotas(([("user", "alice")], PRODUCE, 1000), samples=11)
    # 1,000 bytes/s measured over at least 10 windows: 5,000 bytes at once are 500 bytes/s
    assert q.record(PRODUCE, "alice", "c", 5000) == 0
    # 20,000 in all: 2,000 bytes/s over 10 s, throttle (2000 - 1000) / 1000 * 10 s
    assert q.record(PRODUCE, "alice", "c", 15000) == 10_000
    # capped at all the windows (11 s)
    assert q.record(PRODUCE, "alice", "c", 100_000) == 11_000
    # another client id of alice shares the user's bucket; bob has none
    assert q.record(PRODUCE, "alice", "d", 1) > 0
    assert q.record(PRODUCE, "bob", "c", 10**9) == 0
    clock.ms += 60_000  # all windows expired
    assert q.record(PRODUCE, "alice", "c", 10) == 0


def test_mutation_token_bucket() -> None:
    q, clock = quotas(([("client-id", "ops")], MUTATION, 2), samples=2)  # 2 per second, burst 4
    m = q.mutation("u", "ops", strict=True)
    m.check()
    m.record(6)  # accepted though it overdraws: -2 tokens
    assert m.throttle_ms() == 1000
    with pytest.raises(KafkaError) as info:
        q.mutation("u", "ops", strict=True).check()
    assert info.value.message == "The throttling quota has been exceeded."
    q.mutation("u", "ops", strict=False).check()  # permissive: never refuses
    clock.ms += 1000
    q.mutation("u", "ops", strict=True).check()  # refilled


def test_store_rows_round_trip_and_removal() -> None:
    saved: list[Any] = []
    store = QuotaStore(saved.append)
    store.alter([([("user", "alice"), ("client-id", None)], [(PRODUCE, 10, False), (REQUEST, 12.5, False)])], False)
    other = QuotaStore(saved.append)
    other.load(saved[-1])
    assert other.entities == store.entities == {(("client-id", None), ("user", "alice")): {PRODUCE: 10, REQUEST: 12.5}}
    store.alter([([("user", "alice"), ("client-id", None)], [(PRODUCE, 0, True), (REQUEST, 0, True)])], False)
    assert store.entities == {} and saved[-1] == []
    # validate_only changes nothing
    store.alter([([("user", "x")], [(PRODUCE, 10, False)])], True)
    assert store.entities == {}
