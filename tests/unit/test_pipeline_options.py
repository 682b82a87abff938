"""Spark Kafka source/sink options and planning arithmetic, without a JVM or a broker."""

from __future__ import annotations

import json

import pytest

from sharebroker.pipeline.options import (
    EARLIEST,
    LATEST,
    OffsetRange,
    OptionError,
    SourceOptions,
    client_settings,
    offsets_from_dict,
    offsets_to_json,
    parse_offset_spec,
    parse_subscription,
    rate_limit,
    split_ranges,
)

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_exactly_one_subscription_option():
    assert parse_subscription({"subscribe": "a, b"}).topics == ("a", "b")
    assert parse_subscription({"assign": json.dumps({"t": [1, 0]})}).select({"t": 5}) == [("t", 0), ("t", 1)]
    s = parse_subscription({"subscribePattern": "orders-.*"})
    assert s.select({"orders-eu": 2, "orders": 1, "__consumer_offsets": 50, "x-orders-1": 1}) == \
        [("orders-eu", 0), ("orders-eu", 1)]
    with pytest.raises(OptionError, match="One of the following options"):
        parse_subscription({})
    with pytest.raises(OptionError, match="Only one of the following options"):
        parse_subscription({"subscribe": "a", "assign": "{}"})
    with pytest.raises(OptionError, match="topicA"):
        parse_subscription({"assign": "[1, 2]"})


def test_options_are_case_insensitive_and_kafka_settings_pass_through():
    opts = SourceOptions.parse({**BOOT, "SUBSCRIBE": "t", "kafka.client.id": "me", "failondataloss": "false",
                                "includeHeaders": "TRUE", "minPartitions": "4"}, streaming=False)
    assert opts.client == {"bootstrap.servers": "127.0.0.1:9092", "client.id": "me"}
    assert (opts.fail_on_data_loss, opts.include_headers, opts.min_partitions) == (False, True, 4)
    assert opts.group_id.startswith("spark-kafka-source-")
    with pytest.raises(OptionError, match="auto.offset.reset"):
        client_settings({**BOOT, "kafka.auto.offset.reset": "earliest"})
    with pytest.raises(OptionError, match="kafka.bootstrap.servers"):
        client_settings({"subscribe": "t"})
    with pytest.raises(OptionError, match="positive integer"):
        SourceOptions.parse({**BOOT, "subscribe": "t", "minPartitions": "0"}, streaming=False)
    with pytest.raises(OptionError, match="minOffsetsPerTrigger.*not supported"):
        SourceOptions.parse({**BOOT, "subscribe": "t", "minOffsetsPerTrigger": "10"}, streaming=True)
    with pytest.raises(OptionError, match="streaming queries"):
        SourceOptions.parse({**BOOT, "subscribe": "t", "endingOffsets": "latest"}, streaming=True)


def test_offset_specs_follow_spark_defaults_and_rules():
    assert parse_offset_spec({}, "starting", streaming=False).default == EARLIEST
    assert parse_offset_spec({}, "starting", streaming=True).default == LATEST
    assert parse_offset_spec({}, "ending", streaming=False).default == LATEST
    spec = parse_offset_spec({"startingOffsets": json.dumps({"t": {"0": 5, "1": -2}})}, "starting", streaming=False)
    assert dict(spec.offsets) == {("t", 0): 5, ("t", 1): EARLIEST}
    with pytest.raises(OptionError, match="can't be latest for batch"):
        parse_offset_spec({"startingOffsets": "latest"}, "starting", streaming=False)
    with pytest.raises(OptionError, match="can't be latest for batch"):
        parse_offset_spec({"startingOffsets": json.dumps({"t": {"0": -1}})}, "starting", streaming=False)
    with pytest.raises(OptionError, match="Ending offset not valid"):
        parse_offset_spec({"endingOffsets": json.dumps({"t": {"0": -2}})}, "ending", streaming=False)
    by_ts = parse_offset_spec({"startingOffsetsByTimestamp": json.dumps({"t": {"0": 1000}}), "startingOffsets": "earliest"},
                              "starting", streaming=True)
    assert by_ts.by_timestamp and dict(by_ts.timestamps or {}) == {("t", 0): 1000}
    assert parse_offset_spec({"startingTimestamp": "77"}, "starting", streaming=True).global_timestamp == 77
    with pytest.raises(OptionError, match="'error' or 'latest'"):
        parse_offset_spec({"startingOffsetsByTimestampStrategy": "sometimes"}, "starting", streaming=True)


def test_offsets_json_round_trip():
    offsets = {("b", 1): 7, ("a", 0): 3, ("a", 10): 0}
    doc = offsets_to_json(offsets)
    assert doc == {"a": {"0": 3, "10": 0}, "b": {"1": 7}}
    assert offsets_from_dict(json.loads(json.dumps(doc))) == offsets


def test_rate_limit_shares_the_limit_in_proportion_and_never_starves():
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 5}
    latest = {("t", 0): 900, ("t", 1): 200, ("t", 2): 6}
    end = rate_limit(start, latest, 100)
    # 1,001 waiting: 900/1001*100 -> 89, 100/1001*100 -> 9, 1/1001*100 < 1 -> 1 (not starved)
    assert end == {("t", 0): 89, ("t", 1): 109, ("t", 2): 6}
    assert rate_limit(start, latest, 5000) == latest
    assert sum(end[tp] - start[tp] for tp in start) <= 100


def test_split_ranges_like_sparks_calculator():
    ranges = [OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 0, 10), OffsetRange("t", 2, 5, 5)]
    assert split_ranges(ranges, None) == ranges[:2]  # empty ranges dropped
    pieces = split_ranges(ranges, 10)
    # ideal size 101: partition 0 in round(1000/101) = 10 pieces, partition 1 stays whole
    assert [r for r in pieces if r.partition == 0][0] == OffsetRange("t", 0, 0, 100)
    assert len([r for r in pieces if r.partition == 0]) == 10 and len([r for r in pieces if r.partition == 1]) == 1
    covered = sorted((r.partition, o) for r in pieces for o in range(r.start, r.end))
    assert covered == [(0, o) for o in range(1000)] + [(1, o) for o in range(10)]
