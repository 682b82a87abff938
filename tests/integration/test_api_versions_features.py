"""ApiVersions' supported features as Kafka 4.2 sends them: from v4 every feature, below v4 none
whose lowest version is 0 (Java clients 3.3–3.7 cannot parse such a range: KAFKA-17492)."""

from __future__ import annotations

import pytest

from tests.integration import rawkafka as rk


def _features(bootstrap: str, version: int) -> dict[str, tuple[int, int]]:
    with rk.RawClient(bootstrap) as raw:
        resp = raw.request(rk.api_versions_request(version))
    assert int(resp.error_code) == 0
    return {f.name: (f.min_version, f.max_version) for f in resp.supported_features}


@pytest.mark.parametrize("version", [3])
def test_old_requests_get_no_feature_starting_at_zero(broker, version) -> None:
    features = _features(broker.bootstrap, version)
    assert "metadata.version" in features
    assert all(lo > 0 for lo, _hi in features.values()), features


def test_v4_requests_get_every_feature(broker) -> None:
    features = _features(broker.bootstrap, 4)
    assert features["group.version"] == (0, 1)
    assert features["share.version"] == (0, 2)  # 2: share-group dead-letter queues (KIP-1191)


def _finalized(bootstrap: str) -> dict[str, int]:
    with rk.RawClient(bootstrap) as raw:
        resp = raw.request(rk.api_versions_request(3))
    return {f.name: f.max_version_level for f in resp.finalized_features}


@pytest.mark.needs_own_broker("restarts its broker on an older data directory")
def test_new_directory_finalizes_share_version_2_an_existing_one_keeps_1(make_broker) -> None:
    from sharebroker.broker.features import FEATURES_FILE

    b = make_broker()
    assert _finalized(b.bootstrap)["share.version"] == 2
    b.stop()
    (b.data_dir / FEATURES_FILE).unlink()  # a data directory written before feature levels were kept
    b.start()
    assert _finalized(b.bootstrap)["share.version"] == 1
    b.restart()
    assert _finalized(b.bootstrap)["share.version"] == 1
