"""protocol.record_batch: header parsing, CRC, Kafka's produce checks, offset rewrite."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from kio.records.readers import read_batch

from sharebroker.protocol.errors import ErrorCode
from sharebroker.protocol.record_batch import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    InvalidRecordError,
    assign_offsets,
    encode_batch,
    iter_batch_headers,
    parse_batches,
    parse_produce_records,
    record_timestamps,
)


def batch(n: int = 3, *, ts: int = 1_700_000_000_000, **kw) -> bytearray:
    return encode_batch([(f"k{i}".encode(), f"value-{i}".encode()) for i in range(n)], timestamp_ms=ts, **kw)


def set_field(buf: bytearray, fmt: str, at: int, value: int, *, fix_crc: bool = False) -> bytearray:
    struct.pack_into(fmt, buf, at, value)
    if fix_crc:
        struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return buf


def test_encode_batch_is_a_valid_kafka_batch() -> None:
    buf = encode_batch([(b"a", b"1"), (None, b"2", [("h", b"x")]), (b"c", None, (), 1_700_000_000_500)],
                       timestamp_ms=1_700_000_000_000, producer_id=7, producer_epoch=2, base_sequence=10)
    decoded, size = read_batch(bytes(buf), 0)  # kio's independent reader checks CRC and lengths
    assert size == len(buf)
    assert [r.value for r in decoded.records] == [b"1", b"2", None]
    assert decoded.records[1].headers[0].key == b"h"
    assert [r.offset for r in decoded.records] == [0, 1, 2]
    assert decoded.max_timestamp == 1_700_000_000_500


def test_parse_single_batch_header_fields() -> None:
    buf = batch(4, producer_id=42, producer_epoch=3, base_sequence=100, partition_leader_epoch=9)
    [h] = parse_batches(buf, verify_crc=True)
    assert h.position == 0
    assert h.size == len(buf) and h.batch_length == len(buf) - 12
    assert h.magic == 2
    assert h.record_count == 4 and h.last_offset_delta == 3
    assert h.base_offset == 0 and h.last_offset == 3 and h.next_offset == 4
    assert h.producer_id == 42 and h.producer_epoch == 3 and h.base_sequence == 100
    assert h.last_sequence == 103
    assert h.partition_leader_epoch == 9
    assert h.base_timestamp == h.max_timestamp == 1_700_000_000_000
    assert h.compression == 0 and h.timestamp_type == 0
    assert not h.is_transactional and not h.is_control


def test_attribute_properties() -> None:
    [h] = parse_batches(batch(1, transactional=True, log_append_time=True, compression=1), verify_crc=True)
    assert h.compression == 1 and h.is_transactional and h.timestamp_type == 1 and not h.is_control
    [c] = parse_batches(batch(1, control=True), verify_crc=True)
    assert c.is_control


def test_last_sequence_wraps_and_no_sequence() -> None:
    h = BatchHeader(0, 49, 0, 2, 0, 0, 4, 0, 0, 1, 0, 2147483646, 5)
    assert h.last_sequence == 2  # ...646, ...647, 0, 1, 2: wraps past Int.MAX like Kafka
    h.base_sequence = -1
    assert h.last_sequence == -1


def test_multiple_batches_back_to_back() -> None:
    a, b, c = batch(1), batch(5), batch(2)
    buf = a + b + c
    hs = parse_batches(buf, verify_crc=True)
    assert [h.position for h in hs] == [0, len(a), len(a) + len(b)]
    assert [h.record_count for h in hs] == [1, 5, 2]
    assert parse_batches(b"", verify_crc=True) == []


def test_crc_mismatch_is_corrupt_message() -> None:
    buf = batch(3)
    buf[-1] ^= 0xFF
    with pytest.raises(InvalidRecordError) as exc:
        parse_batches(buf, verify_crc=True)
    assert exc.value.code == ErrorCode.corrupt_message
    assert "crc" in str(exc.value).lower()
    parse_batches(buf, verify_crc=False)  # header alone is fine


def test_crc_covers_attributes_but_not_offset_or_epoch() -> None:
    buf = batch(2)
    set_field(buf, ">q", 0, 12345)
    set_field(buf, ">i", 12, 77)
    parse_batches(buf, verify_crc=True)
    set_field(buf, ">h", 21, 0x10)
    with pytest.raises(InvalidRecordError):
        parse_batches(buf, verify_crc=True)


@pytest.mark.parametrize("cut", [1, 30, 60])
def test_truncated_batch_is_corrupt(cut: int) -> None:
    buf = batch(3)
    with pytest.raises(InvalidRecordError) as exc:
        parse_batches(buf[:-cut], verify_crc=False)
    assert exc.value.code == ErrorCode.corrupt_message


@pytest.mark.parametrize("extra", [1, 11, 16, 40])
def test_trailing_partial_batch_is_corrupt(extra: int) -> None:
    buf = batch(2) + batch(2)[:extra]
    with pytest.raises(InvalidRecordError) as exc:
        parse_batches(buf, verify_crc=True)
    assert exc.value.code == ErrorCode.corrupt_message


def test_length_below_header_and_overflow() -> None:
    with pytest.raises(InvalidRecordError) as exc:
        parse_batches(set_field(batch(1), ">i", 8, 30), verify_crc=False)
    assert exc.value.code == ErrorCode.corrupt_message
    with pytest.raises(InvalidRecordError) as exc:
        parse_batches(set_field(batch(1), ">i", 8, 10_000), verify_crc=False)
    assert exc.value.code == ErrorCode.corrupt_message


def test_magic_values() -> None:
    for magic, code in ((0, ErrorCode.invalid_record), (1, ErrorCode.invalid_record),
                        (3, ErrorCode.corrupt_message), (-1, ErrorCode.corrupt_message)):
        with pytest.raises(InvalidRecordError) as exc:
            parse_batches(set_field(batch(1), ">b", 16, magic), verify_crc=False)
        assert exc.value.code == code, magic


def test_negative_count_delta_and_unknown_compression_are_corrupt() -> None:
    for fmt, at, value in ((">i", 57, -1), (">i", 23, -1), (">h", 21, 5)):
        with pytest.raises(InvalidRecordError) as exc:
            parse_batches(set_field(batch(1), fmt, at, value, fix_crc=True), verify_crc=True)
        assert exc.value.code == ErrorCode.corrupt_message


def test_produce_records_accepts_one_valid_batch() -> None:
    [h] = parse_produce_records(batch(3, producer_id=1, producer_epoch=0, base_sequence=0), api_version=9)
    assert h.record_count == 3


@pytest.mark.parametrize("make, code", [
    (lambda: b"", ErrorCode.invalid_record),
    (lambda: batch(2) + batch(1), ErrorCode.invalid_record),
    (lambda: batch(2)[:-3], ErrorCode.invalid_record),  # no whole batch at all
    (lambda: batch(2) + b"\x00\x01", ErrorCode.corrupt_message),
    (lambda: set_field(batch(2), ">q", 0, 5), ErrorCode.invalid_record),  # baseOffset must be 0
    (lambda: set_field(batch(2), ">i", 57, 3, fix_crc=True), ErrorCode.invalid_record),  # count != delta + 1
    (lambda: set_field(batch(2), ">i", 57, 0, fix_crc=True), ErrorCode.invalid_record),
    (lambda: batch(1, control=True), ErrorCode.invalid_record),
    (lambda: batch(1, producer_id=5, producer_epoch=0, base_sequence=-1), ErrorCode.invalid_record),
    (lambda: set_field(batch(1), ">b", 16, 1), ErrorCode.invalid_record),
    (lambda: set_field(batch(1), ">i", 8, 5), ErrorCode.corrupt_message),  # below Kafka's minimum record size
    (lambda: set_field(batch(1), ">i", 8, 40), ErrorCode.corrupt_message),  # whole but smaller than a v2 header
    (lambda: set_field(batch(2), ">i", 30, 1), ErrorCode.corrupt_message),  # CRC
])
def test_produce_records_refusals(make, code) -> None:
    with pytest.raises(InvalidRecordError) as exc:
        parse_produce_records(make())
    assert exc.value.code == code


def test_produce_records_size_and_zstd_version() -> None:
    buf = batch(3)
    with pytest.raises(InvalidRecordError) as exc:
        parse_produce_records(buf, max_message_bytes=len(buf) - 1)
    assert exc.value.code == ErrorCode.message_too_large
    parse_produce_records(buf, max_message_bytes=len(buf))
    zstd = set_field(batch(1), ">h", 21, 4, fix_crc=True)
    with pytest.raises(InvalidRecordError) as exc:
        parse_produce_records(zstd, api_version=6)
    assert exc.value.code == ErrorCode.unsupported_compression_type
    parse_produce_records(zstd, api_version=7)


def test_iter_batch_headers_stops_at_truncated_tail() -> None:
    a, b = batch(1), batch(2)
    buf = a + b + batch(1)[:20]
    walk = iter_batch_headers(buf)
    assert [h.position for h in walk] == [0, len(a)]
    assert walk.position == len(a) + len(b)
    assert walk.stopped_by is not None and "truncated" in walk.stopped_by
    clean = iter_batch_headers(a + b)
    assert len(list(clean)) == 2 and clean.stopped_by is None and clean.position == len(a) + len(b)


def test_iter_batch_headers_stops_at_garbage_and_honours_start() -> None:
    a = batch(1)
    walk = iter_batch_headers(a + a + bytes(200), start=len(a))
    assert [h.position for h in walk] == [len(a)]
    assert walk.position == 2 * len(a) and "magic" in walk.stopped_by
    partial = iter_batch_headers(a + a[:-1])
    assert len(list(partial)) == 1 and partial.position == len(a)


def test_assign_offsets_rewrites_offsets_and_epoch_keeping_crc() -> None:
    a, b, c = batch(3), batch(1), batch(4)
    buf = bytearray(a + b + c)
    hs = parse_batches(buf, verify_crc=True)
    crcs = [h.crc for h in hs]
    nxt = assign_offsets(buf, hs, 100, 7)
    assert nxt == 108
    again = parse_batches(buf, verify_crc=True)
    assert [h.base_offset for h in again] == [100, 103, 104]
    assert [h.partition_leader_epoch for h in again] == [7, 7, 7]
    assert [h.crc for h in again] == crcs  # CRC unchanged: both fields lie outside it
    assert [h.base_offset for h in hs] == [100, 103, 104]
    decoded, _ = read_batch(bytes(buf), hs[2].position)
    assert [r.offset for r in decoded.records] == [104, 105, 106, 107]


def test_assign_offsets_log_append_time_recomputes_crc() -> None:
    buf = bytearray(batch(2) + batch(1))
    hs = parse_batches(buf, verify_crc=True)
    assign_offsets(buf, hs, 0, 1, log_append_time_ms=1_800_000_000_000)
    again = parse_batches(buf, verify_crc=True)  # CRC valid after the rewrite
    assert all(h.timestamp_type == 1 and h.max_timestamp == 1_800_000_000_000 for h in again)
    assert hs[0].max_timestamp == 1_800_000_000_000 and hs[0].crc == again[0].crc


def test_assign_offsets_create_time_clears_log_append_time_bit() -> None:
    buf = bytearray(batch(2, log_append_time=True))
    hs = parse_batches(buf, verify_crc=True)
    assign_offsets(buf, hs, 5, 1)
    [h] = parse_batches(buf, verify_crc=True)
    assert h.timestamp_type == 0 and h.base_offset == 5


def test_header_size_constant() -> None:
    assert BATCH_HEADER_SIZE == 61
    assert len(batch(1)) > BATCH_HEADER_SIZE


@pytest.mark.parametrize("compression", [0, 1, 2, 3, 4])
def test_record_timestamps(compression: int) -> None:
    stamps = [1_000, 900, 5_000, 5_000]
    buf = encode_batch([(b"k", b"v" * 50, [("h", b"x")], t) for t in stamps], timestamp_ms=0,
                       compression=compression)
    assign_offsets(buf, parse_batches(buf, verify_crc=True), 40, 0)
    assert record_timestamps(buf) == [(40, 1_000), (41, 900), (42, 5_000), (43, 5_000)]


def test_record_timestamps_xerial_snappy_and_log_append_time() -> None:
    import snappy

    body = bytes(encode_batch([(None, b"a", (), 7), (None, b"b", (), 9)], timestamp_ms=0)[BATCH_HEADER_SIZE:])
    block = snappy.compress(body)
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", len(block)) + block
    header = bytearray(encode_batch([(None, b"a", (), 7), (None, b"b", (), 9)], timestamp_ms=0)[:BATCH_HEADER_SIZE])
    struct.pack_into(">i", header, 8, BATCH_HEADER_SIZE - 12 + len(framed))
    struct.pack_into(">h", header, 21, 2)
    assert record_timestamps(bytes(header) + framed) == [(0, 7), (1, 9)]
    lat = bytearray(batch(3))
    assign_offsets(lat, parse_batches(lat, verify_crc=True), 10, 0, log_append_time_ms=123)
    assert record_timestamps(lat) == [(10, 123), (11, 123), (12, 123)]


def test_record_timestamps_of_garbage_records_is_corrupt() -> None:
    buf = bytearray(batch(3))
    del buf[70:]
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    with pytest.raises(InvalidRecordError) as exc:
        record_timestamps(buf)
    assert exc.value.code == ErrorCode.corrupt_message


def test_first_keyless_record_finds_records_without_a_key_in_any_codec() -> None:
    from sharebroker.protocol.record_batch import GZIP, LZ4, NONE, SNAPPY, ZSTD, first_keyless_record

    for codec in (NONE, GZIP, SNAPPY, LZ4, ZSTD):
        assert first_keyless_record(encode_batch([(b"k", b"v"), (b"", None)], timestamp_ms=1, compression=codec)) is None
        assert first_keyless_record(encode_batch([(b"k", b"v"), (None, b"v")], timestamp_ms=1, compression=codec)) == 1
