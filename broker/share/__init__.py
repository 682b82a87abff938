"""Share-partition leader: the pure in-flight state machine (partition.py, inflight.py)."""

from sharebroker.broker.share.partition import (
    INVALID_RECORD_STATE,
    INVALID_REQUEST,
    AcknowledgeType,
    AcquiredRange,
    AcquireMode,
    LogBatch,
    PersistedBatch,
    RecordState,
    ShareError,
    ShareLimits,
    SharePartition,
    StateWrite,
    validate_acknowledgement_batches,
)

__all__ = [
    "INVALID_RECORD_STATE",
    "INVALID_REQUEST",
    "AcknowledgeType",
    "AcquireMode",
    "AcquiredRange",
    "LogBatch",
    "PersistedBatch",
    "RecordState",
    "ShareError",
    "ShareLimits",
    "SharePartition",
    "StateWrite",
    "validate_acknowledgement_batches",
]
