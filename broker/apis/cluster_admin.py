"""Cluster-level describe calls that admin tools make besides topics and groups, answered as a
single combined Kafka 4.2 node (broker + controller, PLAINTEXT) answers them:

- DescribeQuorum (55) v0–2: the `__cluster_metadata` partition 0 with this node as leader and only
  voter (KafkaRaftClient.handleDescribeQuorumRequest, RaftUtil.singletonDescribeQuorumResponse).
- DescribeClientQuotas (48) v0–1 and AlterClientQuotas (49) v0–1: the broker's client quotas
  (broker/quotas.py), the filter validated as ClientQuotasImage.describe validates it.
- DescribeUserScramCredentials (50) v0: no SCRAM users exist (ScramImage.describe).
- DescribeDelegationToken (41) v1–3: refused on a PLAINTEXT channel (KafkaApis.allowTokenRequests).

Empty strings where Kafka's generated message classes leave a nullable string at its default ("")."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.structured_log import get_logger

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import Op, refuse_cluster
from sharebroker.broker.flusher import now_ms
from sharebroker.broker.java_compat import string_hash
from sharebroker.broker.security.scram import MECHANISM_TYPES
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

log = get_logger("sharebroker.quotas")

# -- DescribeQuorum (55) -------------------------------------------------------------------------

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
# A freshly formatted single-voter quorum elects itself in epoch 1 (unattached at 0, candidate at 1).
QUORUM_LEADER_EPOCH = 1
# There is no metadata log: its end offset (= high watermark on one voter) stays at 0.
METADATA_LOG_END_OFFSET = 0
# The voter's directory id with a static quorum (kraft.version 0, not finalized here): none.
NO_DIRECTORY_ID = uuid.UUID(int=0)
UNKNOWN_TOPIC_OR_PARTITION_MESSAGE = "This server does not host this topic-partition."


@api(55)
async def describe_quorum(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    cls = response_class(55, req.api_version)
    if (denied := refuse_cluster(broker, conn, req, Op.DESCRIBE)) is not None:
        return denied
    topics = req.body.topics
    if not (len(topics) == 1 and topics[0].topic_name == METADATA_TOPIC and len(topics[0].partitions) == 1
            and topics[0].partitions[0].partition_index == METADATA_PARTITION):
        # Anything but exactly __cluster_metadata-0: every asked partition answers the error,
        # with the other partition fields at their zero defaults.
        return build(cls, {"error_code": ErrorCode.none, "error_message": "", "nodes": (), "topics": [
            {"topic_name": t.topic_name, "partitions": [
                {"partition_index": p.partition_index, "error_code": ErrorCode.unknown_topic_or_partition,
                 "error_message": UNKNOWN_TOPIC_OR_PARTITION_MESSAGE, "leader_id": 0, "leader_epoch": 0,
                 "high_watermark": 0, "current_voters": (), "observers": ()} for p in t.partitions]}
            for t in topics]})
    now = now_ms()
    me = broker.node_id
    # The leader reports itself as fetched and caught up now.
    leader = {"replica_id": me, "replica_directory_id": NO_DIRECTORY_ID, "log_end_offset": METADATA_LOG_END_OFFSET,
              "last_fetch_timestamp": now, "last_caught_up_timestamp": now}
    host, port = broker.endpoint(conn.listener)
    return build(cls, {
        "error_code": ErrorCode.none, "error_message": "",
        "topics": [{"topic_name": METADATA_TOPIC, "partitions": [
            {"partition_index": METADATA_PARTITION, "error_code": ErrorCode.none, "error_message": "",
             "leader_id": me, "leader_epoch": QUORUM_LEADER_EPOCH, "high_watermark": METADATA_LOG_END_OFFSET,
             "current_voters": [leader], "observers": ()}]}],
        "nodes": [{"node_id": me, "listeners": [{"name": conn.listener, "host": host, "port": port}]}],
    })


# -- DescribeClientQuotas (48) -------------------------------------------------------------------

QUOTA_ENTITY_TYPES = ("user", "client-id", "ip")
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def _quota_filter_error(components: Iterable[Any]) -> tuple[ErrorCode, str] | None:
    """The error Kafka's ClientQuotasImage.describe raises for an invalid filter, else None."""
    seen: set[str] = set()
    for c in components:
        etype = c.entity_type
        if not etype:
            return ErrorCode.invalid_request, "Invalid empty entity type."
        if etype in seen:
            return ErrorCode.invalid_request, f"Entity type {etype} cannot appear more than once in the filter."
        if etype not in QUOTA_ENTITY_TYPES:
            return ErrorCode.unsupported_version, f"Unsupported entity type {etype}"
        match_type = int(c.match_type)
        if match_type == MATCH_EXACT:
            if c.match is None:
                return ErrorCode.invalid_request, "Request specified MATCH_TYPE_EXACT, but set match string to null."
        elif match_type == MATCH_DEFAULT:
            if c.match is not None:
                return ErrorCode.invalid_request, "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
        elif match_type == MATCH_SPECIFIED:
            if c.match is not None:
                return (ErrorCode.invalid_request,
                        "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
        else:
            return ErrorCode.invalid_request, f"Unknown match type {match_type}"
        seen.add(etype)
    if "ip" in seen and ("user" in seen or "client-id" in seen):
        return (ErrorCode.invalid_request, "Invalid entity filter component combination. IP filter component "
                "should not be used with user or clientId filter component.")
    return None


@api(48)
async def describe_client_quotas(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    cls = response_class(48, req.api_version)
    if (denied := refuse_cluster(broker, conn, req, Op.DESCRIBE_CONFIGS)) is not None:
        return denied
    error = _quota_filter_error(req.body.components)
    if error is not None:
        return build(cls, {"throttle_time": 0, "error_code": error[0], "error_message": error[1], "entries": None})
    found = broker.quotas.store.describe(req.body.components, bool(req.body.strict))
    return build(cls, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": "", "entries": [
        {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
         "values": [{"key": k, "value": v} for k, v in sorted(values.items())]} for entity, values in found]})


@api(49)
async def alter_client_quotas(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    """AlterClientQuotas v0–1: each entry validated as Kafka's controller does, the valid ones made
    durable together; ALTER_CONFIGS on the cluster needed."""
    if (denied := refuse_cluster(broker, conn, req, Op.ALTER_CONFIGS)) is not None:
        return denied
    body = req.body
    entries = [([(e.entity_type, e.entity_name) for e in entry.entity],
                [(op.key, float(op.value), bool(op.remove)) for op in entry.ops]) for entry in body.entries]
    results = broker.quotas.store.alter(entries, bool(body.validate_only))
    for (pairs, ops), (code, message) in zip(entries, results):
        fields = dict(entity=str(pairs), conn=conn.id, validate_only=bool(body.validate_only))
        if code != ErrorCode.none:
            log.warning("client quota refused", error=code.name, message=message, **fields)
        elif not body.validate_only:
            log.info("client quota altered", ops=str(ops), **fields)
    return build(response_class(49, req.api_version), {"throttle_time": 0, "entries": [
        {"error_code": code, "error_message": message,
         "entity": [{"entity_type": t, "entity_name": n} for t, n in pairs]}
        for (pairs, _), (code, message) in zip(entries, results)]})


# -- DescribeUserScramCredentials (50) -----------------------------------------------------------

NO_SUCH_USER = "Attempt to describe a user credential that does not exist: "
DUPLICATE_USER = "Cannot describe SCRAM credentials for the same user twice in a single request: "


def java_hashmap_order(keys: Iterable[str]) -> list[str]:
    """Distinct `keys` in the order a java.util.HashMap<String, _> they were put into iterates them
    (by bucket of the final table, then insertion order), so the results list comes back in
    Kafka's order. A bin reaching 8 entries in a table under 64 buckets doubles the table, as
    HashMap does. Within a tree bin (9+ names of one hash in 64+ buckets) the order is only
    approximated, by insertion."""
    order: list[str] = []
    for k in keys:
        if k not in order:
            order.append(k)
    spread = {k: (h ^ (h >> 16)) for k in order for h in (string_hash(k) & 0xFFFFFFFF,)}
    capacity = 16
    bins: dict[int, int] = {}
    for size, k in enumerate(order, start=1):
        b = spread[k] & (capacity - 1)
        bins[b] = bins.get(b, 0) + 1
        grow = bins[b] >= 9 and capacity < 64  # treeifyBin on a small table resizes instead
        if size > capacity * 3 // 4 or grow:
            capacity *= 2
            bins = {}
            for done in order[:size]:
                nb = spread[done] & (capacity - 1)
                bins[nb] = bins.get(nb, 0) + 1
    position = {k: i for i, k in enumerate(order)}
    return sorted(order, key=lambda k: (spread[k] & (capacity - 1), position[k]))


@api(50)
async def describe_user_scram_credentials(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    if (denied := refuse_cluster(broker, conn, req, Op.DESCRIBE)) is not None:
        return denied
    store = broker.scram_credentials.users
    names = [u.name for u in req.body.users or ()] or list(store)  # null or empty: every user
    duplicated = {n for n, count in Counter(names).items() if count > 1}
    results = [{"user": n, "error_code": ErrorCode.duplicate_resource, "error_message": DUPLICATE_USER + n,
                "credential_infos": ()} if n in duplicated else
               {"user": n, "error_code": ErrorCode.none, "error_message": None,
                "credential_infos": [{"mechanism": MECHANISM_TYPES[m], "iterations": c.iterations}
                                     for m, c in sorted(store[n].items(), key=lambda mc: MECHANISM_TYPES[mc[0]])]}
               if store.get(n) else
               {"user": n, "error_code": ErrorCode.resource_not_found, "error_message": NO_SUCH_USER + n,
                "credential_infos": ()}
               for n in java_hashmap_order(names)]
    return build(response_class(50, req.api_version), {
        "throttle_time": 0, "error_code": ErrorCode.none, "error_message": "", "results": results})


# -- DescribeDelegationToken (41) ----------------------------------------------------------------


@api(41)
async def describe_delegation_token(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    # As Kafka: no token requests on PLAINTEXT or SSL listeners; on SASL ones, tokens are disabled
    # (there is no delegation.token.secret.key: sharebroker has no delegation tokens).
    sasl = conn.sasl_authenticated
    return build(response_class(41, req.api_version), {
        "error_code": ErrorCode.delegation_token_auth_disabled if sasl else ErrorCode.delegation_token_request_not_allowed,
        "tokens": (), "throttle_time": 0})
