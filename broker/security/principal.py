"""Kafka principals: `User:alice`, and `User:ANONYMOUS` for a PLAINTEXT connection."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """`User:alice` → KafkaPrincipal("User", "alice"); Kafka's SecurityUtils.parseKafkaPrincipal."""
        kind, sep, name = text.partition(":")
        if not sep or not kind:
            raise ValueError(f"Expected a string in format principalType:principalName but got {text}")
        return cls(kind, name)


ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")
