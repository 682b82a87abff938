"""The pure parts of `sharebroker configs` (kafka-configs.sh): --add-config split as
ConfigCommand.parseConfigsToBeAdded splits it, entity types and names paired in command-line
order, and quota values printed as Java's Double.toString prints them."""

from __future__ import annotations

import argparse

import pytest

from sharebroker.cli import configs
from sharebroker.cli.wire import ToolError


@pytest.mark.parametrize("text, expected", [
    ("a=1,b=[x,y],c=3", {"a": "1", "b": "x,y", "c": "3"}),
    ("k=[a=b]", {"k": "a=b"}),                                  # an '=' inside brackets stays in the value
    ("a=1,", {"a": "1"}),                                       # Java's split drops trailing empty strings
    (" a = 1 , b= ", {"a": "1", "b": ""}),                      # an empty value is allowed
    ("SCRAM-SHA-256=[iterations=8192,password=alice-secret]",
     {"SCRAM-SHA-256": "iterations=8192,password=alice-secret"}),
    ("x=[[a]]", {"x": "a"}),                                    # every bracket goes
])
def test_add_config_is_split_as_kafka_configs_splits_it(text: str, expected: dict[str, str]) -> None:
    assert configs.parse_add_config(text) == expected


@pytest.mark.parametrize("text", ["a=b=c", "a", "", "a=1,,b=2"])
def test_add_config_without_key_value_pairs_is_refused(text: str) -> None:
    with pytest.raises(ToolError) as info:
        configs.parse_add_config(text)
    assert info.value.message == ("Invalid entity config: all configs to be added must be in the format \"key=val\" "
                                  "or  \"key=[val1,val2]\" to group values which contain commas.")


@pytest.mark.parametrize("value, text", [
    (1000.0, "1000.0"), (1.5, "1.5"), (1e7, "1.0E7"), (12345678.0, "1.2345678E7"), (1e-4, "1.0E-4"),
    (0.001, "0.001"), (0.0, "0.0"), (-2.5e10, "-2.5E10"), (float("nan"), "NaN"), (float("inf"), "Infinity"),
])
def test_quota_values_print_as_java_doubles(value: float, text: str) -> None:
    assert configs.java_double(value) == text


def _command(*argv: str) -> configs.Command:
    parser = argparse.ArgumentParser()
    p = configs.add_parser(parser.add_subparsers())
    return configs.check_args(p, p.parse_args(["--bootstrap-server", "localhost:9092", *argv]))


def test_entity_names_pair_with_types_in_command_line_order() -> None:
    c = _command("--entity-type", "users", "--entity-default", "--entity-type", "clients", "--entity-name", "c1",
                 "--describe")
    assert (c.entity_types, c.entity_names) == (["users", "clients"], ["", "c1"])
    c = _command("--user", "alice", "--client", "c1", "--describe")  # the shortcuts come in Kafka's flag order
    assert (c.entity_types, c.entity_names) == (["clients", "users"], ["c1", "alice"])
    c = _command("--broker-defaults", "--alter", "--add-config", "log.retention.ms=1")
    assert (c.entity_types, c.entity_names) == (["brokers"], [""])
