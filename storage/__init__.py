"""Everything durable: partition logs in Kafka's on-disk layout (segments, offset and time
indexes, recovery, retention), the per-directory checkpoints, and topic metadata.

Storage knows record-batch headers only (protocol.record_batch); it never imports asyncio,
sockets, kio or config. Settings arrive as a LogConfig of plain values.
"""

from sharebroker.storage.file_cache import FileCache
from sharebroker.storage.files import CheckpointError, fsync_dir, write_atomic
from sharebroker.storage.log_config import LogConfig
from sharebroker.storage.log_manager import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    LogManager,
    parse_partition_dir,
    read_partition_metadata,
    topic_id_base64,
    topic_id_from_base64,
    write_partition_metadata,
)
from sharebroker.storage.partition_log import (
    AppendResult,
    LogClosedError,
    OffsetOutOfRange,
    PartitionLog,
    ReadResult,
)
from sharebroker.storage.segment import CorruptLogError, LogSegment
from sharebroker.storage.topics import (
    METADATA_FILE,
    MetadataError,
    TopicMeta,
    TopicStore,
    random_kafka_uuid,
)

__all__ = [
    "AppendResult",
    "CLEAN_SHUTDOWN_FILE",
    "CheckpointError",
    "CorruptLogError",
    "FileCache",
    "LOG_START_OFFSET_CHECKPOINT",
    "LogClosedError",
    "LogConfig",
    "LogManager",
    "LogSegment",
    "METADATA_FILE",
    "MetadataError",
    "OffsetOutOfRange",
    "PARTITION_METADATA",
    "PartitionLog",
    "RECOVERY_POINT_CHECKPOINT",
    "ReadResult",
    "TopicMeta",
    "TopicStore",
    "fsync_dir",
    "parse_partition_dir",
    "random_kafka_uuid",
    "read_partition_metadata",
    "topic_id_base64",
    "topic_id_from_base64",
    "write_atomic",
    "write_partition_metadata",
]
