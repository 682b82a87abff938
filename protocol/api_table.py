"""Which API keys and versions the broker serves; the single source for ApiVersions and routing.

Ranges are Kafka 4.2's, intersected with what kio can decode. Keys are added here only when
their handler is implemented (telemetry is not advertised)."""

from __future__ import annotations

from kio.schema.index import api_key_map, schema_name_map

# key: (min, max) that our handlers implement.
_IMPLEMENTED: dict[int, tuple[int, int]] = {
    0: (3, 13),    # Produce
    1: (4, 18),    # Fetch
    2: (1, 11),    # ListOffsets
    3: (0, 13),    # Metadata
    8: (2, 10),    # OffsetCommit (v10: topic ids)
    9: (1, 10),    # OffsetFetch (v10: topic ids)
    10: (0, 6),    # FindCoordinator
    11: (0, 9),    # JoinGroup
    12: (0, 4),    # Heartbeat
    13: (0, 5),    # LeaveGroup
    14: (0, 5),    # SyncGroup
    15: (0, 6),    # DescribeGroups
    16: (0, 5),    # ListGroups
    17: (0, 1),    # SaslHandshake (v0: raw tokens follow; v1: SaslAuthenticate)
    18: (0, 4),    # ApiVersions
    19: (2, 7),    # CreateTopics
    20: (1, 6),    # DeleteTopics
    21: (0, 2),    # DeleteRecords
    22: (0, 5),    # InitProducerId (v6 is unstable in Kafka 4.2)
    24: (0, 5),    # AddPartitionsToTxn (v4+: the broker-to-coordinator batch, verify-only included)
    25: (0, 4),    # AddOffsetsToTxn
    26: (0, 4),    # EndTxn (v5 is transaction version 2)
    27: (1, 1),    # WriteTxnMarkers (what kafka-transactions.sh abort sends)
    28: (0, 5),    # TxnOffsetCommit
    29: (1, 3),    # DescribeAcls (SECURITY_DISABLED: no authorizer)
    30: (1, 3),    # CreateAcls
    31: (1, 3),    # DeleteAcls
    32: (1, 4),    # DescribeConfigs
    33: (0, 2),    # AlterConfigs
    35: (1, 4),    # DescribeLogDirs
    36: (0, 2),    # SaslAuthenticate (v1+: session lifetime, KIP-368)
    37: (0, 3),    # CreatePartitions
    41: (1, 3),    # DescribeDelegationToken (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED: PLAINTEXT only)
    42: (0, 2),    # DeleteGroups
    43: (0, 2),    # ElectLeaders (never needed on one node)
    44: (0, 1),    # IncrementalAlterConfigs
    45: (0, 1),    # AlterPartitionReassignments (to the one replica: done at once)
    46: (0, 0),    # ListPartitionReassignments (none in progress)
    47: (0, 0),    # OffsetDelete
    48: (0, 1),    # DescribeClientQuotas
    49: (0, 1),    # AlterClientQuotas
    50: (0, 0),    # DescribeUserScramCredentials
    51: (0, 0),    # AlterUserScramCredentials
    57: (0, 1),    # UpdateFeatures (share.version 1-2; metadata.version fixed)
    55: (0, 2),    # DescribeQuorum (this node the only voter of __cluster_metadata-0)
    60: (0, 2),    # DescribeCluster
    68: (0, 1),    # ConsumerGroupHeartbeat
    69: (0, 1),    # ConsumerGroupDescribe
    74: (0, 1),    # ListConfigResources (v0: ListClientMetricsResources)
    61: (0, 0),    # DescribeProducers
    65: (0, 0),    # DescribeTransactions
    66: (0, 2),    # ListTransactions
    76: (1, 1),    # ShareGroupHeartbeat
    77: (1, 1),    # ShareGroupDescribe
    78: (1, 2),    # ShareFetch
    79: (1, 2),    # ShareAcknowledge
    83: (0, 0),    # InitializeShareGroupState
    84: (0, 0),    # ReadShareGroupState
    85: (0, 1),    # WriteShareGroupState
    86: (0, 0),    # DeleteShareGroupState
    87: (0, 1),    # ReadShareGroupStateSummary
    90: (0, 1),    # DescribeShareGroupOffsets
    91: (0, 0),    # AlterShareGroupOffsets
    92: (0, 0),    # DeleteShareGroupOffsets
}


def _kio_range(key: int) -> tuple[int, int] | None:
    name = api_key_map.get(key)
    if name is None or name not in schema_name_map:
        return None
    versions = sorted(schema_name_map[name])
    return versions[0], versions[-1]


def _intersect() -> dict[int, tuple[int, int]]:
    table = {}
    for key, (lo, hi) in _IMPLEMENTED.items():
        kio = _kio_range(key)
        if kio is None:
            continue
        lo, hi = max(lo, kio[0]), min(hi, kio[1])
        if lo <= hi:
            table[key] = (lo, hi)
    return table


API_VERSIONS: dict[int, tuple[int, int]] = _intersect()


def is_supported(api_key: int, api_version: int) -> str:
    rng = API_VERSIONS.get(api_key)
    if rng is None:
        return "unknown-key"
    if not rng[0] <= api_version <= rng[1]:
        return "unsupported-version"
    return "ok"


def api_name(api_key: int) -> str:
    name = api_key_map.get(api_key)
    if name is None:
        return f"api-{api_key}"
    return "".join(part.capitalize() for part in name.split("_"))
