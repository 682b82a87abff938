"""Restart and kill -9: acknowledged data and topic ids survive; recovery leaves no torn batch."""

from __future__ import annotations

import threading
import uuid
import zlib
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicCollection, TopicPartition

from tests.integration.clients import (
    admin,
    consume_from_beginning,
    consume_n,
    consumer_conf,
    create_topic,
    produce_sync,
    producer_conf,
)
from tests.integration.rawkafka import RawClient, fetch_all_batches
from sharebroker.testing import wait_for


def _topic_id(bootstrap: str, name: str) -> uuid.UUID:
    client = admin(bootstrap)  # keep the handle alive until the future resolves
    desc = client.describe_topics(TopicCollection([name]), request_timeout=10)[name].result(timeout=15)
    tid = desc.topic_id
    msb = tid.get_most_significant_bits() & (2**64 - 1)
    lsb = tid.get_least_significant_bits() & (2**64 - 1)
    return uuid.UUID(int=(msb << 64) | lsb)


def test_restart_keeps_records_and_topic_ids(make_broker, topic_name) -> None:
    broker = make_broker()
    create_topic(broker.bootstrap, topic_name, partitions=3, config={"retention.ms": "86400000"})
    p = Producer(producer_conf(broker.bootstrap))
    items = [{"key": f"k{i}".encode(), "value": f"v{i}".encode(), "partition": i % 3,
              "headers": [("h", str(i).encode())], "timestamp": 1_700_000_000_000 + i} for i in range(300)]
    produce_sync(p, topic_name, items)
    id_before = _topic_id(broker.bootstrap, topic_name)
    assert id_before.int != 0

    assert broker.stop() == 0
    assert "broker stopped" in broker.log_text()
    broker.start()

    assert _topic_id(broker.bootstrap, topic_name) == id_before
    for part in range(3):
        msgs = consume_from_beginning(broker.bootstrap, topic_name, 100, partition=part)
        assert [m.offset() for m in msgs] == list(range(100))
        expected = [i for i in range(300) if i % 3 == part]
        assert [m.value() for m in msgs] == [f"v{i}".encode() for i in expected]
        assert [m.key() for m in msgs] == [f"k{i}".encode() for i in expected]
        assert [m.timestamp()[1] for m in msgs] == [1_700_000_000_000 + i for i in expected]
        assert [m.headers() for m in msgs] == [[("h", str(i).encode())] for i in expected]
    # New records continue at the right offset after the restart.
    produce_sync(p, topic_name, [{"value": b"after", "partition": 0}])
    msgs = consume_from_beginning(broker.bootstrap, topic_name, 101, partition=0)
    assert msgs[100].offset() == 100 and msgs[100].value() == b"after"


def _produce_until_killed(bootstrap: str, topic: str, acked: dict[int, bytes], stop: threading.Event) -> None:
    p = Producer(producer_conf(bootstrap, **{"linger.ms": 2, "acks": "all", "message.timeout.ms": 3000,
                                             "retries": 0, "enable.idempotence": False}))
    seq = 0

    def on_delivery(err, msg) -> None:
        if err is None:
            acked[msg.offset()] = msg.value()

    while not stop.is_set():
        try:
            p.produce(topic, value=f"rec-{seq:08d}".encode() * 4, on_delivery=on_delivery)
            seq += 1
        except BufferError:
            p.poll(0.01)
        p.poll(0)
    p.flush(5)


def _check_log_intact(bootstrap: str, topic: str, acked: dict[int, bytes]) -> None:
    with RawClient(bootstrap) as raw:
        batches = fetch_all_batches(raw, topic, 0)
    stored: dict[int, bytes] = {}
    expected_next = 0
    for b in batches:
        assert b.crc_ok, f"batch at offset {b.base_offset} fails its CRC after recovery"
        assert b.base_offset == expected_next, "offsets are not contiguous after recovery"
        for r in b.records():
            stored[r.offset] = r.value
        expected_next = b.last_offset + 1
    missing = [o for o in acked if o not in stored]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. offsets {missing[:5]}"
    changed = [o for o, v in acked.items() if stored[o] != v]
    assert not changed, f"acknowledged records changed at offsets {changed[:5]}"


@pytest.mark.slow
@pytest.mark.parametrize("fsync", [True, False], ids=["flusher-running", "no-flusher"])
def test_process_kill_under_produce_load_keeps_acked_records_in_order_without_torn_batches(
        make_broker, topic_name, fsync: bool) -> None:
    """What a process crash can break: after SIGKILL and restart every acknowledged record is
    there, offsets are contiguous, no batch is torn or fails its CRC. Both write paths: with
    --fsync the group-commit flusher thread runs (fsync, index writes) while appends go on.

    SIGKILL leaves the page cache intact, so this cannot tell whether anything was fsynced:
    a power loss would. test_fsync_mode_answers_a_produce_only_after_the_segment_fsync checks
    what --fsync promises, from the broker's system calls."""
    broker = make_broker(fsync=fsync)
    create_topic(broker.bootstrap, topic_name, partitions=1, config={"segment.bytes": str(1024 * 1024)})
    for _round in range(3):
        acked: dict[int, bytes] = {}
        stop = threading.Event()
        before = len(acked)
        t = threading.Thread(target=_produce_until_killed, args=(broker.bootstrap, topic_name, acked, stop))
        t.start()
        try:
            wait_for(lambda acked=acked, before=before: len(acked) > before + 3000, timeout=30,
                     message="records acknowledged under load")
            broker.kill()  # SIGKILL while the producer is still sending
        finally:
            stop.set()
            t.join(15)
        broker.start()
        _check_log_intact(broker.bootstrap, topic_name, acked)


def test_torn_tail_is_truncated_and_reported(make_broker, topic_name) -> None:
    broker = make_broker()
    create_topic(broker.bootstrap, topic_name, partitions=1)
    p = Producer(producer_conf(broker.bootstrap))
    reports = produce_sync(p, topic_name, [{"value": f"good-{i}".encode()} for i in range(50)])
    acked = {m.offset(): m.value() for m in reports}
    broker.kill()
    # A crash in the middle of a write leaves part of a batch at the end of the active segment.
    part_dir = Path(broker.data_dir) / f"{topic_name}-0"
    segment = sorted(part_dir.glob("*.log"))[-1]
    good_size = segment.stat().st_size
    with open(segment, "ab") as f:
        torn = (50).to_bytes(8, "big") + (400).to_bytes(4, "big") + zlib.compress(b"half a batch")[:30]
        f.write(torn)
    broker.start()
    assert segment.stat().st_size == good_size, "the torn tail was not truncated"
    recovery_lines = [line for line in broker.log_text().splitlines() if "log recovery" in line]
    assert recovery_lines and topic_name in recovery_lines[-1], "recovery did not report the truncation"
    _check_log_intact(broker.bootstrap, topic_name, acked)
    # The log continues at the next offset after the good data.
    more = produce_sync(p := Producer(producer_conf(broker.bootstrap)), topic_name, [{"value": b"next"}])
    assert more[0].offset() == 50


def test_startup_time_on_empty_data_dir_is_reported(make_broker) -> None:
    """Start-up speed is measured by `make bench`; here only that the broker logs its figure."""
    broker = make_broker()
    started = [line for line in broker.log_text().splitlines() if '"broker started"' in line]
    assert started and '"startup_ms"' in started[-1]


def test_dynamic_broker_config_survives_restart(make_broker) -> None:
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    broker = make_broker()
    client = admin(broker.bootstrap)
    res = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("log.retention.ms", "123456", incremental_operation=AlterConfigOpType.SET)])
    for fut in client.incremental_alter_configs([res]).values():
        fut.result(timeout=15)
    broker.restart()
    client = admin(broker.bootstrap)
    (fut,) = client.describe_configs([ConfigResource(ResourceType.BROKER, "1")], request_timeout=10).values()
    entry = fut.result(timeout=15)["log.retention.ms"]
    assert entry.value == "123456"
    assert getattr(entry.source, "value", entry.source) == 2  # DYNAMIC_BROKER_CONFIG


@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
def test_idempotent_retry_after_restart_is_not_duplicated(make_broker, topic_name, stop: str) -> None:
    """Producer state survives a restart (snapshot at clean stop; log replay after a crash), so a
    batch retried across the restart is acknowledged with its original offset."""
    from tests.integration import rawkafka as rk

    broker = make_broker()
    create_topic(broker.bootstrap, topic_name)
    with rk.RawClient(broker.bootstrap) as raw:
        ip = raw.request(rk.init_producer_id_request(version=4))
        pid, epoch = ip.producer_id, ip.producer_epoch
        batches = [rk.encode_batch([rk.Rec(f"v{seq}".encode())], producer_id=pid, producer_epoch=epoch,
                                   base_sequence=seq) for seq in range(3)]
        for expected, b in enumerate(batches):
            r = rk.produce(raw, topic_name, 0, b)
            assert (int(r.error_code), r.base_offset) == (0, expected), r
    if stop == "sigterm":
        broker.stop()
    else:
        broker.kill()
    broker.start()
    with rk.RawClient(broker.bootstrap) as raw:
        r = rk.produce(raw, topic_name, 0, batches[2])  # the retry of the last batch
        assert (int(r.error_code), r.base_offset) == (0, 2), r
        r = rk.produce(raw, topic_name, 0, rk.encode_batch([rk.Rec(b"gap")], producer_id=pid, producer_epoch=epoch,
                                                             base_sequence=7))
        assert int(r.error_code) == 45, r  # OUT_OF_ORDER_SEQUENCE_NUMBER: the sequence is still known
        assert rk.fetch(raw, topic_name, 0, 0).high_watermark == 3


# ---------------------------------------------------------------------------------------------
# --fsync: the answer follows the fsync (observed in the broker's system calls)


def _syscalls(trace: Path) -> list[tuple[str, str, str]]:
    """(syscall, arguments, result) in the order they returned, from `strace -f -yy` output; a call
    split over an "unfinished ... resumed" pair is placed where it returned, and a call's entry
    is listed (with result "<entered>") where it was entered."""
    import re

    pending: dict[str, tuple[str, str]] = {}
    out: list[tuple[str, str, str]] = []
    for line in trace.read_text(errors="replace").splitlines():
        pid, _, rest = line.partition(" ")
        rest = rest.strip()
        m = re.match(r"<\.\.\. (\w+) resumed>(.*)\) += (.*)$", rest)
        if m:
            name, args = pending.pop(pid, (m.group(1), ""))
            out.append((name, args + m.group(2), m.group(3)))
            continue
        m = re.match(r"(\w+)\((.*) <unfinished \.\.\.>$", rest)
        if m:
            pending[pid] = (m.group(1), m.group(2))
            out.append((m.group(1), m.group(2), "<entered>"))
            continue
        m = re.match(r"(\w+)\((.*)\) += (.*)$", rest)
        if m:
            out.append((m.group(1), m.group(2), "<entered>"))
            out.append((m.group(1), m.group(2), m.group(3)))
    return out


@pytest.mark.needs_own_broker("traces the system calls of a broker of its own")
def test_fsync_mode_answers_a_produce_only_after_the_segment_fsync(tmp_path, topic_name) -> None:
    """--fsync (log.flush.interval.messages=1) promises that an acknowledged record is on disk.
    A crash test cannot see that (the page cache survives a process kill), the system calls can:
    the segment's fsync must have returned before the response is written to the socket."""
    import os
    import shutil
    import signal
    import subprocess
    import sys

    from tests.integration import rawkafka as rk

    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed (apt-get install strace): it is what observes the fsync")
    trace = tmp_path / "strace.txt"
    ready = tmp_path / "ready"
    data = tmp_path / "data"
    args = [strace, "-f", "-qq", "-yy", "-s", "0", "-o", str(trace), "-e",
            "trace=fsync,fdatasync,write,writev,pwrite64,sendto,sendmsg",
            sys.executable, "-m", "sharebroker", "serve", "--listeners", "PLAINTEXT://127.0.0.1:0",
            "--data-dir", str(data), "--ready-file", str(ready), "--log-format", "json", "--fsync"]
    if subprocess.run([strace, "--seccomp-bpf", "-qq", "-o", os.devnull, "true"], capture_output=True).returncode == 0:
        args.insert(1, "--seccomp-bpf")  # stop only on the traced calls: start-up stays fast
    log = open(tmp_path / "broker.log", "wb")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    log.close()
    try:
        bootstrap = wait_for(lambda: ready.exists() and ready.read_text().strip(), timeout=60,
                             message="the broker under strace to listen")
        if proc.poll() is not None:
            pytest.fail((tmp_path / "broker.log").read_text()[-3000:])
        create_topic(bootstrap, topic_name)
        with rk.RawClient(bootstrap) as raw:
            client = f"127.0.0.1:{raw.local_port}"
            for i in range(3):
                r = rk.produce(raw, topic_name, 0, rk.encode_batch([rk.Rec(b"durable-%d" % i)]))
                assert (int(r.error_code), r.base_offset) == (0, i), r
        # strace writes as the calls happen: wait until the three answers are in the trace.
        segment = f"{topic_name}-0/00000000000000000000.log>"

        def answered() -> tuple[list[tuple[str, str, str]], list[int]] | None:
            calls = _syscalls(trace)
            answers = [i for i, (name, a, res) in enumerate(calls)
                       if res == "<entered>" and name in ("write", "writev", "sendto", "sendmsg")
                       and f"->{client}]>" in a]
            return (calls, answers) if len(answers) >= 3 else None

        calls, answers = wait_for(answered, timeout=10, message="the answers in the system-call trace")
    finally:
        # Stop the broker itself (strace exits with it); strace answers a signal by hanging on.
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        for pid in (children.read_text().split() if children.exists() else []):
            os.kill(int(pid), signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            for pid in (children.read_text().split() if children.exists() else []):
                os.kill(int(pid), signal.SIGKILL)
            proc.kill()
            proc.wait()
    appends = [i for i, (name, a, res) in enumerate(calls)
               if res != "<entered>" and name in ("write", "writev", "pwrite64") and a.split(",")[0].endswith(segment)]
    fsyncs = [i for i, (name, a, res) in enumerate(calls)
              if res == "0" and name in ("fsync", "fdatasync") and a.split(",")[0].endswith(segment)]
    assert len(appends) == 3, f"expected three appends to {segment}: {appends}"
    assert len(answers) == 3, f"expected three answers to {client}: {answers}"
    for n, (append, answer) in enumerate(zip(appends, answers)):
        assert append < answer
        synced = [f for f in fsyncs if append < f < answer]
        assert synced, (f"produce {n}: answered (syscall #{answer}) with no fsync of the segment returned since its "
                        f"append (#{append}); fsyncs at {fsyncs}")


def test_producer_state_snapshot_taken_at_a_roll_includes_the_batch_that_rolled(make_broker, topic_name) -> None:
    """The snapshot written when a segment rolls is taken at the log end offset, after the batch
    that rolled it: that batch must be in it. Otherwise, after a crash, the retry of that batch is
    appended a second time instead of being recognised as a duplicate."""
    from tests.integration import rawkafka as rk

    broker = make_broker({"log.segment.bytes": str(1 << 20)})
    create_topic(broker.bootstrap, topic_name)
    with rk.RawClient(broker.bootstrap) as raw:
        ip = raw.request(rk.init_producer_id_request(version=4))
        pid, epoch = ip.producer_id, ip.producer_epoch
        batches = [rk.encode_batch([rk.Rec(bytes([65 + seq]) * 300_000)], producer_id=pid, producer_epoch=epoch,
                                   base_sequence=seq) for seq in range(5)]
        for seq in range(4):  # the fourth batch (sequence 3) rolls the 1 MiB segment
            r = rk.produce(raw, topic_name, 0, batches[seq])
            assert (int(r.error_code), r.base_offset) == (0, seq), r
    assert len(list((broker.data_dir / f"{topic_name}-0").glob("*.log"))) == 2
    broker.kill()  # no snapshot at a clean stop: the roll's snapshot is what start-up has
    broker.start()
    with rk.RawClient(broker.bootstrap) as raw:
        r = rk.produce(raw, topic_name, 0, batches[3])  # the producer retries the rolling batch
        assert (int(r.error_code), r.base_offset) == (0, 3), r
        r = rk.produce(raw, topic_name, 0, batches[4])
        assert (int(r.error_code), r.base_offset) == (0, 4), r
        assert rk.fetch(raw, topic_name, 0, 0).high_watermark == 5


def test_records_in_old_segments_are_found_after_a_kill(make_broker, topic_name) -> None:
    """Sealed segments keep no index in memory (issue 24): a lookup reads their index files back.
    After SIGKILL and a restart, fetches and ListOffsets by timestamp into old segments land on
    exactly the records asked for, in a segment whose offset index file was lost (rebuilt at
    start-up, as before) as in the others."""
    broker = make_broker()
    create_topic(broker.bootstrap, topic_name, config={"segment.bytes": str(1 << 20)})
    t0 = 1_700_000_000_000
    p = Producer(producer_conf(broker.bootstrap, **{"linger.ms": 5, "batch.num.messages": 5}))  # index entries
    count = 4000
    value = [f"{i:06d}".encode().ljust(1000, b".") for i in range(count)]
    produce_sync(p, topic_name, [{"value": value[i], "partition": 0, "timestamp": t0 + 2 * i} for i in range(count)])
    probes = [0, 17, 700, 1100, 1500, 2222, 3100, count - 1]

    def check() -> None:
        c = Consumer(consumer_conf(broker.bootstrap))
        try:
            for offset in probes:
                c.assign([TopicPartition(topic_name, 0, offset)])
                (msg,) = consume_n(c, 1)
                assert (msg.offset(), msg.value()) == (offset, value[offset])
                (found,) = c.offsets_for_times([TopicPartition(topic_name, 0, t0 + 2 * offset - 1)], timeout=10)
                assert found.error is None and found.offset == offset
        finally:
            c.close()

    check()  # reads the sealed segments' indexes back
    broker.kill()
    part_dir = Path(broker.data_dir) / f"{topic_name}-0"
    logs = sorted(part_dir.glob("*.log"))
    assert len(logs) >= 4, "the records span several segments"
    lost = logs[1].with_suffix(".index")
    lost.unlink()
    broker.start()
    assert lost.stat().st_size > 0, "the lost index of a sealed segment was rebuilt"
    check()
