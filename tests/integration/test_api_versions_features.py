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
    assert features["share.version"] == (0, 1)
