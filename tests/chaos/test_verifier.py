"""The chaos verifier on made-up histories: each counter counts what it claims, and only that."""

from __future__ import annotations

from tests.chaos.harness import Load, Options, Summary, _verify

A, B, C = b"p0-0", b"p0-1", b"p1-0"
STORED = {(0, 0): A, (0, 1): B, (1, 0): C}


def history() -> Load:
    """Three records produced and acknowledged, all in the log, each delivered once and accepted,
    each read by the classic group, which committed after reading them."""
    load = Load("127.0.0.1:1", Options())
    load.produced = {A: (0, 0), B: (0, 1), C: (1, 0)}
    load.produced_at = dict(STORED)
    load.deliveries = [(1, (0, 0), A, 1, 0), (1, (0, 1), B, 1, 0), (2, (1, 0), C, 1, 1)]
    load.ack_sent = {A, B, C}
    load.confirmed = {A: 3, B: 3, C: 4}
    load.classic = [(5, (0, 0), A), (5, (0, 1), B), (5, (1, 0), C)]
    load.classic_seen = {A, B, C}
    load.classic_commits = [(6, (0, 2)), (6, (1, 1))]
    return load


def verify(load: Load, stored=STORED, acked=frozenset(), archived=frozenset()) -> Summary:
    s = Summary()
    _verify(load, dict(stored), set(acked), set(archived), s)
    return s


def test_a_clean_history_counts_nothing():
    s = verify(history())
    assert (s.produced, s.accepted, s.share_deliveries) == (3, 3, 3)
    assert not any(getattr(s, k) for k in ("lost", "accepted_then_redelivered", "never_delivered", "classic_missed",
                                           "log_duplicates", "classic_rewinds", "delivery_mismatch", "archived",
                                           "offset_reused"))


def test_a_record_missing_or_replaced_in_the_log_is_lost():
    s = verify(history(), stored={(0, 0): A, (0, 1): b"p9-9"})
    assert s.lost == 2
    assert s.delivery_mismatch == 2  # (0, 1) was delivered as B, the log now says p9-9; (1, 0) is gone


def test_a_reused_offset_hides_no_loss():
    """A log tail lost and its offsets handed to new records: the old record is lost although its
    offset is in the log, and the share group's 'confirmed' offset stands for another record."""
    load = history()
    load.produced[b"p0-9"] = (0, 1)
    load.offset_reused = [((0, 1), B, b"p0-9")]
    s = verify(load, stored={**STORED, (0, 1): b"p0-9"})
    assert (s.lost, s.offset_reused) == (1, 1)
    assert s.never_delivered == 1  # p0-9 was never delivered to the share group


def test_only_deliveries_after_the_confirmation_count_as_redelivered():
    load = history()
    load.deliveries += [(2, (0, 0), A, 2, 1),   # before the ACCEPT of A was confirmed (seq 3)
                        (7, (0, 1), B, 1, 1)]   # after: a defect
    s = verify(load)
    assert s.accepted_then_redelivered == 1
    assert s.examples["accepted_then_redelivered"][0][0] == B
    assert s.max_delivery_count == 2


def test_an_unconfirmed_accept_counts_only_when_sent_and_durable():
    load = history()
    del load.confirmed[B]
    assert verify(load).never_delivered == 1
    s = verify(load, acked={(0, 1)})
    assert (s.never_delivered, s.accepts_durable_unconfirmed) == (0, 1)
    load.ack_sent.discard(B)  # durable, but nobody acknowledged it: skipped by the broker
    assert verify(load, acked={(0, 1)}).never_delivered == 1
    assert verify(load, archived={(0, 1)}).archived == 1


def test_duplicates_and_classic_counters():
    load = history()
    load.classic_seen.discard(C)
    load.classic.append((8, (0, 1), B))  # below the committed offset 2 of partition 0
    s = verify(load, stored={**STORED, (1, 1): A})
    assert s.classic_missed == 1
    assert s.classic_rewinds == 1
    assert s.log_duplicates == 1


def test_a_delivery_after_a_confirmed_release_must_count_higher():
    load = history()
    load.released = {(A, 1): 3}
    load.deliveries.append((4, (0, 0), A, 2, 1))
    assert verify(load).delivery_count_regressed == 0
    load.deliveries.append((5, (0, 0), A, 1, 2))  # the persisted count of the RELEASE was forgotten
    s = verify(load)
    assert (s.released, s.delivery_count_regressed) == (1, 1)
