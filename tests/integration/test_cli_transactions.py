"""`sharebroker transactions` (kafka-transactions.sh) as a subprocess against a live broker, with real
transactions made by confluent-kafka producers: list (and its filters), describe, describe-producers,
abort (by start offset and by producer id/epoch), find-hanging, and the errors and usage errors.
Nothing waits on a sleep, only on conditions with deadlines."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Producer

from sharebroker.broker.transactions import records as trec
from sharebroker.protocol.record_batch import encode_batch, parse_batches
from sharebroker.storage import LogConfig, PartitionLog
from sharebroker.testing import wait_for
from tests.integration import rawkafka as rk
from tests.integration.clients import create_topic, producer_conf

ROOT = Path(__file__).resolve().parents[2]
TXN_SCRIPT = Path(__file__).with_name("txn_producer_script.py")

LIST_HEADERS = ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
DESCRIBE_HEADERS = ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"]
PRODUCERS_HEADERS = ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                     "CurrentTransactionStartOffset"]
HANGING_HEADERS = ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                   "LastTimestamp", "Duration(min)"]


# -- running the tool ------------------------------------------------------------------------


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sharebroker", *args], check=False, capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout)


def txn(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return cli("transactions", "--bootstrap-server", bootstrap, "--timeout", "10000", *args)


def ok(r: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert r.stderr == "", r.stderr
    return r


def fails(r: subprocess.CompletedProcess[str], code: int, *fragments: str) -> subprocess.CompletedProcess[str]:
    assert r.returncode == code, f"exit {r.returncode} (wanted {code})\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    for f in fragments:
        assert f in r.stderr, f"{f!r} not in stderr:\n{r.stderr}"
    assert "Traceback" not in r.stderr, r.stderr
    return r


def table(text: str, headers: list[str]) -> list[dict[str, str]]:
    """A prettyPrintTable table: every cell padded to its column and followed by a tab."""
    lines = text.splitlines()
    assert lines, "no output"
    widths = []
    rows = []
    for line in lines:
        assert line.endswith("\t"), f"{line!r} does not end with a tab"
        cells = line.split("\t")[:-1]
        assert len(cells) == len(headers), f"{cells} do not match {headers}"
        widths.append([len(c) for c in cells])
        rows.append([c.rstrip(" ") for c in cells])
    assert rows[0] == headers
    assert all(w == widths[0] for w in widths), f"columns not aligned:\n{text}"  # each cell padded to its column
    return [dict(zip(headers, r)) for r in rows[1:]]


def run_table(bootstrap: str, headers: list[str], *args: str) -> list[dict[str, str]]:
    return table(ok(txn(bootstrap, *args)).stdout, headers)


# -- transactions ----------------------------------------------------------------------------


def new_txn_id() -> str:
    return f"tx-{uuid.uuid4().hex[:10]}"


def txn_producer(bootstrap: str, txn_id: str) -> Producer:
    p = Producer(producer_conf(bootstrap, **{"transactional.id": txn_id}))
    p.init_transactions(10)
    return p


def committed(bootstrap: str, topic: str, txn_id: str, partition: int = 0, n: int = 2) -> Producer:
    p = txn_producer(bootstrap, txn_id)
    p.begin_transaction()
    for i in range(n):
        p.produce(topic, value=b"c-%d" % i, partition=partition)
    p.flush(10)
    p.commit_transaction(10)
    return p


def open_txn(bootstrap: str, topic: str, txn_id: str, partition: int = 0, n: int = 3) -> Producer:
    p = txn_producer(bootstrap, txn_id)
    p.begin_transaction()
    for i in range(n):
        p.produce(topic, value=b"o-%d" % i, partition=partition)
    assert p.flush(10) == 0
    return p


@contextmanager
def hanging_producer(bootstrap: str, topic: str, txn_id: str, partition: int = 0, n: int = 3) -> Iterator[None]:
    """A transactional producer in a process of its own that opens a transaction on the partition,
    writes `n` records and then is killed before it ends it."""
    proc = subprocess.Popen([sys.executable, str(TXN_SCRIPT), bootstrap, topic, txn_id, str(n), str(partition)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            cwd=ROOT)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        proc.kill()
        proc.wait(10)
        yield
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def plain_records(bootstrap: str, topic: str, n: int, partition: int = 0) -> None:
    p = Producer(producer_conf(bootstrap, **{"enable.idempotence": True}))
    for i in range(n):
        p.produce(topic, value=b"p-%d" % i, partition=partition)
    assert p.flush(10) == 0


def latest(bootstrap: str, topic: str, partition: int, isolation_level: int) -> int:
    """ListOffsets latest: the last stable offset for read_committed (1), else the high watermark."""
    cls = rk.req_cls(2, 7)
    tcls = rk._nested(cls, "topics")
    pcls = rk._nested(tcls, "partitions")
    req = cls(replica_id=-1, isolation_level=isolation_level, topics=(tcls(name=topic, partitions=(
        pcls(partition_index=partition, current_leader_epoch=-1, timestamp=-1),)),))
    with rk.RawClient(bootstrap) as raw:
        (p,) = raw.request(req).topics[0].partitions
    assert int(p.error_code) == 0, p
    return int(p.offset)


def node_id(bootstrap: str) -> str:
    with rk.RawClient(bootstrap) as raw:
        (b,) = raw.request(rk.metadata_request([])).brokers
    return str(int(b.node_id))


def producers(bootstrap: str, topic: str, partition: int = 0) -> list[dict[str, str]]:
    return run_table(bootstrap, PRODUCERS_HEADERS, "describe-producers", "--topic", topic,
                     "--partition", str(partition))


def ours(rows: list[dict[str, str]], *txn_ids: str) -> dict[str, dict[str, str]]:
    """The rows of these transactional ids (the module's broker holds other tests' ids too)."""
    return {r["TransactionalId"]: r for r in rows if r["TransactionalId"] in txn_ids}


# -- list ------------------------------------------------------------------------------------


def test_list_shows_transactions_with_their_coordinator_and_state(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name)
    prefix = f"tx-{uuid.uuid4().hex[:8]}"
    a, b, e = f"{prefix}-open", f"{prefix}-done", f"{prefix}-empty"
    pa = open_txn(broker.bootstrap, topic_name, a)
    committed(broker.bootstrap, topic_name, b)
    txn_producer(broker.bootstrap, e)
    node = node_id(broker.bootstrap)

    rows = ours(run_table(broker.bootstrap, LIST_HEADERS, "list"), a, b, e)
    assert {k: (r["Coordinator"], r["TransactionState"]) for k, r in rows.items()} == {
        a: (node, "Ongoing"), b: (node, "CompleteCommit"), e: (node, "Empty")}
    assert len({r["ProducerId"] for r in rows.values()}) == 3
    assert all(r["ProducerId"].isdigit() for r in rows.values())

    # KIP-1152: only the ids the regular expression matches
    only = run_table(broker.bootstrap, LIST_HEADERS, "list", "--transactional-id-pattern", f"{prefix}-(open|done)")
    assert {r["TransactionalId"] for r in only} == {a, b}
    assert run_table(broker.bootstrap, LIST_HEADERS, "list", "--transactional-id-pattern", "no-such-id-.*") == []

    # --duration-filter: only transactions running longer than that; a negative one filters nothing
    wait_for(lambda: a in ours(run_table(broker.bootstrap, LIST_HEADERS, "list", "--duration-filter", "1"), a),
             10, message="the open transaction to run longer than 1 ms")
    # (Kafka's coordinator also lists an Empty id here: its start time is -1)
    assert ours(run_table(broker.bootstrap, LIST_HEADERS, "list", "--duration-filter", "3600000",
                          "--transactional-id-pattern", f"{prefix}.*"), a, b) == {}
    assert set(ours(run_table(broker.bootstrap, LIST_HEADERS, "list", "--duration-filter", "-1"), a, b, e)) == {a, b, e}
    pa.abort_transaction(10)


def test_list_with_an_invalid_pattern_fails(broker) -> None:
    r = fails(txn(broker.bootstrap, "list", "--transactional-id-pattern", "(unclosed"), 1,
              "Failed to list transactions: ", "Enable debug logging for additional detail.")
    assert r.stdout == ""


# -- describe --------------------------------------------------------------------------------


def test_describe_ongoing_committed_and_empty_transactions(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name, partitions=2)
    a, b, e = new_txn_id(), new_txn_id(), new_txn_id()
    pa = txn_producer(broker.bootstrap, a)
    pa.begin_transaction()
    for partition in (0, 1):
        pa.produce(topic_name, value=b"x", partition=partition)
    assert pa.flush(10) == 0
    committed(broker.bootstrap, topic_name, b, partition=1)
    txn_producer(broker.bootstrap, e)
    node = node_id(broker.bootstrap)
    listed = ours(run_table(broker.bootstrap, LIST_HEADERS, "list"), a, b, e)

    before = int(time.time() * 1000)
    (row,) = run_table(broker.bootstrap, DESCRIBE_HEADERS, "describe", "--transactional-id", a)
    assert row["CoordinatorId"] == node
    assert row["TransactionalId"] == a
    assert row["ProducerId"] == listed[a]["ProducerId"]
    assert row["ProducerEpoch"] == "0"
    assert row["TransactionState"] == "Ongoing"
    assert row["TransactionTimeoutMs"] == "60000"  # librdkafka's transaction.timeout.ms
    start, duration = int(row["CurrentTransactionStartTimeMs"]), int(row["TransactionDurationMs"])
    assert 0 < start <= before and duration >= 0
    assert sorted(row["TopicPartitions"].split(",")) == [f"{topic_name}-0", f"{topic_name}-1"]

    (row,) = run_table(broker.bootstrap, DESCRIBE_HEADERS, "describe", "--transactional-id", b)
    assert (row["TransactionalId"], row["ProducerId"], row["TransactionState"]) == (
        b, listed[b]["ProducerId"], "CompleteCommit")
    assert row["TopicPartitions"] == ""  # the markers are written: no partition left
    assert int(row["CurrentTransactionStartTimeMs"]) > 0 and int(row["TransactionDurationMs"]) >= 0

    # After InitProducerId alone no transaction has started: Kafka's "None" columns
    (row,) = run_table(broker.bootstrap, DESCRIBE_HEADERS, "describe", "--transactional-id", e)
    assert (row["TransactionState"], row["CurrentTransactionStartTimeMs"], row["TransactionDurationMs"],
            row["TopicPartitions"]) == ("Empty", "None", "None", "")

    pa.commit_transaction(10)
    wait_for(lambda: run_table(broker.bootstrap, DESCRIBE_HEADERS, "describe", "--transactional-id", a)[0][
        "TransactionState"] == "CompleteCommit", 10, message="the commit to complete")


def test_describe_unknown_transactional_id_prints_kafkas_error(broker) -> None:
    missing = new_txn_id()
    r = fails(txn(broker.bootstrap, "describe", "--transactional-id", missing), 1)
    assert r.stdout == ""
    assert r.stderr.strip() == (
        f"Error: Failed to describe transaction state of transactional-id `{missing}`: DescribeTransactions request "
        f"for transactionalId `{missing}` failed because the ID could not be found. Enable debug logging for "
        f"additional detail.")


# -- describe-producers ----------------------------------------------------------------------


def test_describe_producers_shows_the_open_transactions_start_offset(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name)
    plain_records(broker.bootstrap, topic_name, 2)  # an idempotent producer: offsets 0-1
    txn_id = new_txn_id()
    p = open_txn(broker.bootstrap, topic_name, txn_id, n=3)  # offsets 2-4
    pid = ours(run_table(broker.bootstrap, LIST_HEADERS, "list"), txn_id)[txn_id]["ProducerId"]

    rows = {r["ProducerId"]: r for r in producers(broker.bootstrap, topic_name)}
    assert len(rows) == 2
    mine = rows.pop(pid)
    assert (mine["ProducerEpoch"], mine["LastSequence"], mine["CurrentTransactionStartOffset"]) == ("0", "2", "2")
    assert int(mine["LastTimestamp"]) > 0
    (plain,) = rows.values()
    assert (plain["LastSequence"], plain["CurrentTransactionStartOffset"], plain["LatestCoordinatorEpoch"]) == (
        "1", "None", "-1")
    # the same from the one broker named by --broker-id
    same = run_table(broker.bootstrap, PRODUCERS_HEADERS, "describe-producers", "--topic", topic_name,
                     "--partition", "0", "--broker-id", node_id(broker.bootstrap))
    assert {r["ProducerId"]: r["CurrentTransactionStartOffset"] for r in same}[pid] == "2"

    p.commit_transaction(10)
    wait_for(lambda: {r["ProducerId"]: r for r in producers(broker.bootstrap, topic_name)}[pid][
        "CurrentTransactionStartOffset"] == "None", 10, message="the commit marker to close the transaction")


def test_describe_producers_of_an_unknown_partition_fails(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name)
    fails(txn(broker.bootstrap, "describe-producers", "--topic", topic_name, "--partition", "5"), 1,
          f"Failed to describe producers for partition {topic_name}-5 on leader: "
          "This server does not host this topic-partition. Enable debug logging for additional detail.")
    fails(txn(broker.bootstrap, "describe-producers", "--topic", f"{topic_name}-nope", "--partition", "0"), 1,
          f"Failed to describe producers for partition {topic_name}-nope-0 on leader: ")


# -- abort -----------------------------------------------------------------------------------


def test_abort_by_start_offset_ends_a_hanging_transaction(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name)
    plain_records(broker.bootstrap, topic_name, 2)
    with hanging_producer(broker.bootstrap, topic_name, new_txn_id(), n=3):
        assert (latest(broker.bootstrap, topic_name, 0, 1), latest(broker.bootstrap, topic_name, 0, 0)) == (2, 5)
        open_rows = [r for r in producers(broker.bootstrap, topic_name) if r["CurrentTransactionStartOffset"] != "None"]
        assert [r["CurrentTransactionStartOffset"] for r in open_rows] == ["2"]

        fails(txn(broker.bootstrap, "abort", "--topic", topic_name, "--partition", "0", "--start-offset", "1"), 1,
              f"Could not find any open transactions starting at offset 1 on partition {topic_name}-0")
        r = ok(txn(broker.bootstrap, "abort", "--topic", topic_name, "--partition", "0", "--start-offset", "2"))
        assert r.stdout == ""

        hw = latest(broker.bootstrap, topic_name, 0, 0)
        assert hw == 6  # the three records and the abort marker after the two plain ones
        assert latest(broker.bootstrap, topic_name, 0, 1) == hw  # nothing open holds the LSO back any more
        assert all(r["CurrentTransactionStartOffset"] == "None" for r in producers(broker.bootstrap, topic_name))
        fails(txn(broker.bootstrap, "abort", "--topic", topic_name, "--partition", "0", "--start-offset", "2"), 1,
              "Could not find any open transactions starting at offset 2")


def test_abort_by_producer_id_and_epoch(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name, partitions=2)
    with hanging_producer(broker.bootstrap, topic_name, new_txn_id(), partition=1, n=2):
        (row,) = producers(broker.bootstrap, topic_name, 1)
        assert row["CurrentTransactionStartOffset"] == "0"
        assert latest(broker.bootstrap, topic_name, 1, 1) == 0
        # -1 (no marker written yet for a new producer id) is sent as coordinator epoch 0, as Kafka's tool does
        ok(txn(broker.bootstrap, "abort", "--topic", topic_name, "--partition", "1", "--producer-id",
               row["ProducerId"], "--producer-epoch", row["ProducerEpoch"], "--coordinator-epoch", "-1"))
        assert latest(broker.bootstrap, topic_name, 1, 1) == latest(broker.bootstrap, topic_name, 1, 0) == 3
        (row,) = producers(broker.bootstrap, topic_name, 1)
        assert row["CurrentTransactionStartOffset"] == "None"


def test_abort_on_an_unknown_partition_fails(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name)
    fails(txn(broker.bootstrap, "abort", "--topic", topic_name, "--partition", "3", "--producer-id", "7",
              "--producer-epoch", "0", "--coordinator-epoch", "0"), 1,
          f"Failed to abort transaction AbortTransactionSpec(topicPartition={topic_name}-3, producerId=7, "
          "producerEpoch=0, coordinatorEpoch=0): This server does not host this topic-partition.")
    fails(txn(broker.bootstrap, "abort", "--topic", topic_name, "--partition", "3", "--start-offset", "0"), 1,
          f"Failed to validate producer state for partition {topic_name}-3: ")


# -- find-hanging ----------------------------------------------------------------------------


def test_find_hanging_reports_nothing_for_transactions_the_coordinator_knows(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name, partitions=2)
    p = open_txn(broker.bootstrap, topic_name, new_txn_id(), partition=1)
    (row,) = producers(broker.bootstrap, topic_name, 1)
    last = int(row["LastTimestamp"])
    wait_for(lambda: time.time() * 1000 > last + 1, 5, message="the open transaction to age")
    # under the default 15 minutes: not even a candidate
    assert run_table(broker.bootstrap, HANGING_HEADERS, "find-hanging", "--topic", topic_name) == []
    # older than a zero timeout, but the coordinator lists its partition as part of the ongoing transaction
    assert run_table(broker.bootstrap, HANGING_HEADERS, "find-hanging", "--topic", topic_name,
                     "--max-transaction-timeout", "0") == []
    assert run_table(broker.bootstrap, HANGING_HEADERS, "find-hanging", "--topic", topic_name, "--partition", "1",
                     "--max-transaction-timeout", "0") == []
    hanging = run_table(broker.bootstrap, HANGING_HEADERS, "find-hanging", "--broker-id", node_id(broker.bootstrap),
                        "--max-transaction-timeout", "0")
    assert [r for r in hanging if r["Topic"] == topic_name] == []
    p.commit_transaction(10)


def test_find_hanging_reports_a_transaction_the_coordinator_lost(make_broker, topic_name) -> None:
    """The coordinator's record of the id is gone (a tombstone in `__transaction_state`, written
    while the broker is down, as if the id had expired) while the partition still holds the open
    transaction: the hanging transaction of KIP-664, which find-hanging reports and abort ends."""
    broker = make_broker({"transaction.state.log.num.partitions": 1})
    create_topic(broker.bootstrap, topic_name)
    plain_records(broker.bootstrap, topic_name, 1)
    txn_id = new_txn_id()
    with hanging_producer(broker.bootstrap, topic_name, txn_id, n=2):
        (pid,) = [r["ProducerId"] for r in run_table(broker.bootstrap, LIST_HEADERS, "list") if r["TransactionalId"]
                  == txn_id]
    broker.stop()
    now = int(time.time() * 1000)
    buf = encode_batch([(trec.encode_key(txn_id), None)], timestamp_ms=now)
    plog = PartitionLog.open(broker.data_dir / "__transaction_state-0", LogConfig(), recovery_point=0,
                             clean_shutdown=False, now_ms=now)
    try:
        plog.append(buf, parse_batches(buf, verify_crc=False), leader_epoch=0, now_ms=now)
    finally:
        plog.close()
    broker.start()

    fails(txn(broker.bootstrap, "describe", "--transactional-id", txn_id), 1, "could not be found")
    (row,) = [r for r in producers(broker.bootstrap, topic_name) if r["ProducerId"] == pid]
    assert row["CurrentTransactionStartOffset"] == "1"
    last = int(row["LastTimestamp"])
    wait_for(lambda: time.time() * 1000 > last + 1, 5, message="the open transaction to age")

    assert run_table(broker.bootstrap, HANGING_HEADERS, "find-hanging", "--topic", topic_name) == []
    for scope in (["--topic", topic_name], ["--topic", topic_name, "--partition", "0"],
                  ["--broker-id", node_id(broker.bootstrap)]):
        (hang,) = run_table(broker.bootstrap, HANGING_HEADERS, "find-hanging", *scope, "--max-transaction-timeout", "0")
        assert hang == {"Topic": topic_name, "Partition": "0", "ProducerId": pid, "ProducerEpoch": row["ProducerEpoch"],
                        "CoordinatorEpoch": row["LatestCoordinatorEpoch"], "StartOffset": "1",
                        "LastTimestamp": row["LastTimestamp"], "Duration(min)": "0"}

    assert latest(broker.bootstrap, topic_name, 0, 1) == 1
    ok(txn(broker.bootstrap, "abort", "--topic", topic_name, "--partition", "0", "--start-offset", "1"))
    assert latest(broker.bootstrap, topic_name, 0, 1) == latest(broker.bootstrap, topic_name, 0, 0) == 4
    assert run_table(broker.bootstrap, HANGING_HEADERS, "find-hanging", "--topic", topic_name,
                     "--max-transaction-timeout", "0") == []


def test_find_hanging_on_an_unknown_topic_fails(broker, topic_name) -> None:
    fails(txn(broker.bootstrap, "find-hanging", "--topic", topic_name), 1,
          "Failed to describe 1 topics: ", "Enable debug logging for additional detail.")


# -- usage errors ----------------------------------------------------------------------------


def test_missing_and_inconsistent_options_are_usage_errors(broker) -> None:
    b = broker.bootstrap
    cases = [
        (["describe"], "--transactional-id"),
        (["describe-producers", "--partition", "0"], "--topic"),
        (["describe-producers", "--topic", "foo"], "--partition"),
        (["abort", "--partition", "0", "--start-offset", "9990"], "--topic"),
        (["abort", "--topic", "foo", "--start-offset", "9990"], "--partition"),
        (["abort", "--topic", "foo", "--partition", "0"],
         "The transaction to abort must be identified either with --start-offset (for brokers on 3.0 or above) or "
         "with --producer-id, --producer-epoch, and --coordinator-epoch (for older brokers)"),
        (["abort", "--topic", "foo", "--partition", "0", "--producer-id", "12345"],
         "Missing required argument --producer-epoch"),
        (["abort", "--topic", "foo", "--partition", "0", "--producer-id", "12345", "--producer-epoch", "15"],
         "Missing required argument --coordinator-epoch"),
        (["abort", "--topic", "foo", "--partition", "0", "--producer-id", "1", "--producer-epoch", "40000",
          "--coordinator-epoch", "0"], "could not convert '40000' to Short"),
        (["find-hanging"],
         "The `find-hanging` command requires either --topic or --broker-id to limit the scope of the search"),
        (["find-hanging", "--broker-id", "0", "--partition", "5"],
         "The --partition argument requires --topic to be provided"),
        (["find-hanging", "--topic", "foo", "--max-transaction-timeout", "x"], "invalid integer value: 'x'"),
        (["list", "--duration-filter", "soon"], "invalid integer value: 'soon'"),
        ([], "COMMAND"),
        (["rollback"], "invalid choice: 'rollback'"),
    ]
    for args, fragment in cases:
        r = fails(txn(b, *args), 2, fragment, "usage: sharebroker transactions")
        assert r.stdout == "", args
    fails(cli("transactions", "list"), 2, "--bootstrap-server")
