"""A transaction decided (PrepareCommit / PrepareAbort durable in `__transaction_state`) whose
markers were never written — the broker died between the two — is completed at start-up, as
Kafka's coordinator completes it when it loads the partition."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from sharebroker.broker.transactions import records as trec
from sharebroker.broker.transactions.coordinator import TxnState
from sharebroker.protocol.record_batch import encode_batch, parse_batches
from sharebroker.storage import LogConfig, PartitionLog
from sharebroker.testing import wait_for
from tests.integration import rawkafka as rk
from tests.integration.clients import consume_from_beginning, create_topic, producer_conf
from tests.integration.test_transactions import describe_txn, list_offset


def _latest(bootstrap: str, topic: str, isolation_level: int) -> int:
    with rk.RawClient(bootstrap) as raw:
        return list_offset(raw, topic, 0, isolation_level)


def _append_decision(data_dir: Path, txn_id: str, state: object, topic: str) -> None:
    """What the coordinator writes before it writes markers, appended while the broker is down."""
    now = int(time.time() * 1000)
    value = trec.TxnLogValue(producer_id=state.producer_id, producer_epoch=state.producer_epoch,  # type: ignore[attr-defined]
                             timeout_ms=60000, status=int(TxnState.PREPARE_COMMIT),
                             partitions=frozenset({(topic, 0)}), last_update_ms=now, start_ms=now)
    buf = encode_batch([(trec.encode_key(txn_id), trec.encode_value(value))], timestamp_ms=now)
    plog = PartitionLog.open(data_dir / "__transaction_state-0", LogConfig(), recovery_point=0,
                             clean_shutdown=False, now_ms=now)
    try:
        plog.append(buf, parse_batches(buf, verify_crc=False), leader_epoch=0, now_ms=now)
    finally:
        plog.close()


@pytest.mark.parametrize("fsync", [False, True])
def test_commit_decided_before_a_crash_is_completed_at_start_up(make_broker, topic_name, fsync) -> None:
    broker = make_broker({"transaction.state.log.num.partitions": 1}, fsync=fsync)
    create_topic(broker.bootstrap, topic_name)
    txn_id = f"tx-{uuid.uuid4().hex[:8]}"
    p = Producer(producer_conf(broker.bootstrap, **{"transactional.id": txn_id}))
    p.init_transactions(10)
    p.begin_transaction()
    for i in range(4):
        p.produce(topic_name, value=b"in-doubt-%d" % i, partition=0)
    p.flush(10)
    open_state = describe_txn(broker.bootstrap, txn_id)
    assert open_state.transaction_state == "Ongoing"
    assert _latest(broker.bootstrap, topic_name, 1) == 0  # the open transaction holds the LSO
    broker.kill()
    del p
    _append_decision(broker.data_dir, txn_id, open_state, topic_name)
    broker.start()
    wait_for(lambda: describe_txn(broker.bootstrap, txn_id).transaction_state == "CompleteCommit", 10,
             message="the decided transaction to complete after the restart")
    after = describe_txn(broker.bootstrap, txn_id)
    assert (after.producer_id, after.producer_epoch) == (open_state.producer_id, open_state.producer_epoch)
    assert _latest(broker.bootstrap, topic_name, 1) == _latest(broker.bootstrap, topic_name, 0) == 5  # 4 + marker
    msgs = consume_from_beginning(broker.bootstrap, topic_name, 4, **{"isolation.level": "read_committed"})
    assert [m.value() for m in msgs] == [b"in-doubt-%d" % i for i in range(4)]
