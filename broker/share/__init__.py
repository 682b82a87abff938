"""Share-partition leader: the pure in-flight state machine (partition.py, inflight.py)."""

from sharebroker.broker.share.partition import (
    AcknowledgeType,
    AcquiredRange,
    AcquireMode,
    LogBatch,
    PersistedBatch,
    RecordState,
    ShareLimits,
    SharePartition,
    StateWrite,
    validate_acknowledgement_batches,
)

__all__ = [
    "AcknowledgeType",
    "AcquireMode",
    "AcquiredRange",
    "LogBatch",
    "PersistedBatch",
    "RecordState",
    "ShareLimits",
    "SharePartition",
    "StateWrite",
    "validate_acknowledgement_batches",
]
