"""Kafka's rule for topic names (clients' `Topic.validate`), shared by the broker and the tools so
that both refuse a name with Kafka 4.2's words."""

from __future__ import annotations

import re

from sharebroker.protocol.errors import ErrorCode, KafkaError

__all__ = ["MAX_TOPIC_NAME", "invalid_topic_reason", "validate_topic_name"]

MAX_TOPIC_NAME = 249
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")


def invalid_topic_reason(name: str) -> str | None:
    """Why `name` cannot be a topic name, or None if it can."""
    if not name:
        return "the empty string is not allowed"
    if name in (".", ".."):
        return f"'{name}' is not allowed"
    if len(name) > MAX_TOPIC_NAME:
        return f"the length of '{name}' is longer than the max allowed length {MAX_TOPIC_NAME}"
    if not _LEGAL_TOPIC.fullmatch(name):
        return f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    return None


def validate_topic_name(name: str | None) -> None:
    """INVALID_TOPIC_EXCEPTION "Topic name is invalid: ..." for a name Kafka refuses."""
    reason = invalid_topic_reason(name or "")
    if reason is not None:
        raise KafkaError(ErrorCode.invalid_topic_exception, f"Topic name is invalid: {reason}")
