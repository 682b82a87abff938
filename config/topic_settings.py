"""The topic-level settings (``TOPIC_CONFIGS``), each falling back to broker synonyms, and the value sets
that topic settings share with their broker-wide defaults (compression, cleanup, timestamps)."""

from __future__ import annotations

from sharebroker.config.definitions import LONG_MAX, AtLeast, Between, Check, ListOf, OneOf, TopicConfigDef

__all__ = ["CLEANUP_POLICIES", "COMPRESSION_TYPES", "GZIP_LEVEL", "TIMESTAMP_TYPES", "TOPIC_CONFIGS"]

MS_PER_MINUTE = 60_000
MS_PER_HOUR = 3_600_000

COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
CLEANUP_POLICIES = ("compact", "delete")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


def _gzip_level(value: int) -> bool:
    return value == -1 or 1 <= value <= 9


GZIP_LEVEL = Check(_gzip_level, "Value must be between 1 and 9, or -1", "[1,...,9] or -1")


def _topic_defs() -> list[TopicConfigDef]:
    t = TopicConfigDef
    return [
        t("cleanup.policy", "list", ("delete",), "delete and/or compact.", ListOf(*CLEANUP_POLICIES),
          synonyms=(("log.cleanup.policy", 1),)),
        t("compression.type", "string", "producer", "Compression of stored batches; 'producer' keeps the producer's.",
          OneOf(*COMPRESSION_TYPES), synonyms=(("compression.type", 1),)),
        t("compression.gzip.level", "int", -1, "gzip level.", GZIP_LEVEL, synonyms=(("compression.gzip.level", 1),)),
        t("compression.lz4.level", "int", 9, "lz4 level.", Between(1, 17), synonyms=(("compression.lz4.level", 1),)),
        t("compression.zstd.level", "int", 3, "zstd level.", Between(-131072, 22), synonyms=(("compression.zstd.level", 1),)),
        t("delete.retention.ms", "long", 86400000, "How long tombstones are kept in a compacted topic.", AtLeast(0),
          synonyms=(("log.cleaner.delete.retention.ms", 1),)),
        t("errors.deadletterqueue.group.enable", "boolean", False, "Whether share groups may use this topic as their "
          "dead-letter queue (KIP-1191); writes to a topic without it are refused and the records only archived."),
        t("file.delete.delay.ms", "long", 60000, "Delay before a deleted segment's files are removed.", AtLeast(0),
          synonyms=(("log.segment.delete.delay.ms", 1),)),
        t("flush.messages", "long", LONG_MAX, "fsync after this many appended messages.", AtLeast(1),
          synonyms=(("log.flush.interval.messages", 1),)),
        t("flush.ms", "long", LONG_MAX, "fsync once the oldest unflushed message is this old.", AtLeast(0),
          synonyms=(("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1))),
        t("index.interval.bytes", "int", 4096, "Bytes of log between offset index entries.", AtLeast(0),
          synonyms=(("log.index.interval.bytes", 1),)),
        t("max.compaction.lag.ms", "long", LONG_MAX, "Maximum time a record stays ineligible for compaction.", AtLeast(1),
          synonyms=(("log.cleaner.max.compaction.lag.ms", 1),)),
        t("max.message.bytes", "int", 1048588, "Largest record batch accepted.", AtLeast(0),
          synonyms=(("message.max.bytes", 1),)),
        t("message.timestamp.after.max.ms", "long", 3600000, "With CreateTime, most ms a timestamp may be ahead of the broker.",
          AtLeast(0), synonyms=(("log.message.timestamp.after.max.ms", 1),)),
        t("message.timestamp.before.max.ms", "long", LONG_MAX, "With CreateTime, most ms a timestamp may be behind the broker.",
          AtLeast(0), synonyms=(("log.message.timestamp.before.max.ms", 1),)),
        t("message.timestamp.type", "string", "CreateTime", "CreateTime or LogAppendTime.", OneOf(*TIMESTAMP_TYPES),
          synonyms=(("log.message.timestamp.type", 1),)),
        t("min.cleanable.dirty.ratio", "double", 0.5, "Minimum dirty ratio before compaction.", Between(0, 1),
          synonyms=(("log.cleaner.min.cleanable.ratio", 1),)),
        t("min.compaction.lag.ms", "long", 0, "Minimum age of a record before it may be compacted.", AtLeast(0),
          synonyms=(("log.cleaner.min.compaction.lag.ms", 1),)),
        t("min.insync.replicas", "int", 1, "Replicas that must acknowledge an acks=all produce.", AtLeast(1),
          synonyms=(("min.insync.replicas", 1),)),
        t("preallocate", "boolean", False, "Preallocate segment files.", synonyms=(("log.preallocate", 1),)),
        t("retention.bytes", "long", -1, "Partition size above which old segments are deleted; -1 means no limit.",
          synonyms=(("log.retention.bytes", 1),)),
        t("retention.ms", "long", 604800000, "Age after which segments are deleted; -1 means forever.", AtLeast(-1),
          synonyms=(("log.retention.ms", 1), ("log.retention.minutes", MS_PER_MINUTE), ("log.retention.hours", MS_PER_HOUR))),
        t("segment.bytes", "int", 1073741824, "Maximum size of one segment file.", AtLeast(1048576),
          synonyms=(("log.segment.bytes", 1),)),
        t("segment.index.bytes", "int", 10485760, "Maximum size of an offset index file.", AtLeast(4),
          synonyms=(("log.index.size.max.bytes", 1),)),
        t("segment.jitter.ms", "long", 0, "Most jitter subtracted from segment.ms.", AtLeast(0),
          synonyms=(("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", MS_PER_HOUR))),
        t("segment.ms", "long", 604800000, "Roll a new segment after this many milliseconds.", AtLeast(1),
          synonyms=(("log.roll.ms", 1), ("log.roll.hours", MS_PER_HOUR))),
        t("unclean.leader.election.enable", "boolean", False, "Allow out-of-sync replicas to become leader.",
          synonyms=(("unclean.leader.election.enable", 1),)),
    ]


TOPIC_CONFIGS: dict[str, TopicConfigDef] = {c.name: c for c in _topic_defs()}
