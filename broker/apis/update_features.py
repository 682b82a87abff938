"""UpdateFeatures (57) v0–1: raise or lower finalized feature levels (kafka-features.sh --upgrade,
--downgrade). One node is the whole quorum, so the controller's checks run here and the levels
are written to the data directory before the answer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import Op, refuse_cluster
from sharebroker.broker.features import UPGRADE, UNSAFE_DOWNGRADE, FeatureUpdate
from sharebroker.broker.structured_log import get_logger
from sharebroker.protocol.codec import DecodedRequest, build, response_class
from sharebroker.protocol.errors import KafkaError

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

log = get_logger("sharebroker.features")


@api(57)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    if (denied := refuse_cluster(broker, conn, req, Op.ALTER)) is not None:
        return denied  # as Kafka's ControllerApis: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED
    body = req.body
    updates: list[FeatureUpdate] = []
    for u in body.feature_updates:
        if req.api_version == 0:  # v0: allow_downgrade instead of an upgrade type
            kind = UNSAFE_DOWNGRADE if getattr(u, "allow_downgrade", False) else UPGRADE
        else:
            kind = int(u.upgrade_type)
        updates.append(FeatureUpdate(u.feature, int(u.max_version_level), kind))
    results = []
    failed = False
    seen: set[str] = set()
    for u in updates:
        try:
            if u.feature in seen:
                raise KafkaError(ErrorCode.invalid_request, f"Feature {u.feature} was specified more than once.")
            seen.add(u.feature)
            broker.features.check(u)
            results.append({"feature": u.feature, "error_code": ErrorCode.none, "error_message": None})
        except KafkaError as exc:
            failed = True
            results.append({"feature": u.feature, "error_code": exc.code, "error_message": exc.message})
            log.warning("feature update refused", feature=u.feature, level=u.level, upgrade_type=u.upgrade_type,
                        error=exc.code.name, message=exc.message, conn=conn.id)
    if failed:
        # The controller applies all of a request or none of it.
        results = [r if r["error_code"] != ErrorCode.none else
                   {**r, "error_code": ErrorCode.invalid_update_version,
                    "error_message": "Not applied: another update of the request was refused."} for r in results]
    elif not body.validate_only:
        before = {u.feature: broker.features.level(u.feature) for u in updates}
        broker.features.apply(updates)
        for u in updates:
            if before[u.feature] != u.level:
                log.info("feature level finalized", feature=u.feature, level=u.level, was=before[u.feature],
                         epoch=broker.features.epoch)
    return build(response_class(57, req.api_version), {
        "throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "results": results})
