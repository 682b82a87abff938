"""The seam between the group coordinators (share, classic, consumer): a group id belongs to one
kind of group, so each asks the broker's directory before it creates a group (Kafka answers
GROUP_ID_NOT_FOUND or INCONSISTENT_GROUP_PROTOCOL when the id is taken by another kind)."""

from __future__ import annotations

from typing import Literal, Protocol

GroupType = Literal["share", "classic", "consumer"]


class GroupDirectory(Protocol):
    def group_type(self, group_id: str) -> GroupType | None:
        """Which kind of group owns this id, or None if no group has it."""
        ...
