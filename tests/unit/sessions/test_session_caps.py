"""Session caps from SSM: override wins, defaults, last good value, fail closed."""

from __future__ import annotations

from typing import Any

import pytest
from sandbox_common import aws, dimensions
from sandbox_common.sessions.caps import SessionCapReader, SessionCapsUnavailable
from sandbox_common.sessions.ledger import SessionCaps

STAGE = "test"


def _put(name: str, value: str) -> None:
    aws.client("ssm").put_parameter(Name=name, Value=value, Type="String", Overwrite=True)


@pytest.fixture
def ssm(moto_endpoint: str) -> Any:
    _put(dimensions.parameter(STAGE, dimensions.TENANT_SESSIONS.name), "20")
    _put(dimensions.parameter(STAGE, dimensions.GLOBAL_SESSIONS.name), "200")
    return aws.client("ssm")


def test_caps_for_uses_globals_then_tenant_override(ssm: Any) -> None:
    reader = SessionCapReader(stage=STAGE, ssm=ssm, ttl_seconds=0)
    assert reader.caps_for("acme") == SessionCaps(20, 200)
    _put(dimensions.parameter(STAGE, dimensions.TENANT_SESSIONS.name, "acme"), "0")
    assert reader.caps_for("acme") == SessionCaps(0, 200)
    assert reader.caps_for("globex") == SessionCaps(20, 200)


def test_caps_for_malformed_value_keeps_last_good_else_fails_closed(ssm: Any) -> None:
    reader = SessionCapReader(stage=STAGE, ssm=ssm, ttl_seconds=0)
    assert reader.caps_for("acme").for_dimension(dimensions.GLOBAL_SESSIONS.name) == 200
    # When the global becomes garbage, the last good value stands
    _put(dimensions.parameter(STAGE, dimensions.GLOBAL_SESSIONS.name), "-1")
    assert reader.caps_for("acme").for_dimension(dimensions.GLOBAL_SESSIONS.name) == 200
    # A fresh reader (a new container) has no last good value: fail closed
    with pytest.raises(SessionCapsUnavailable):
        SessionCapReader(stage=STAGE, ssm=ssm, ttl_seconds=0).caps_for("acme")


def test_caps_for_missing_global_fails_closed(moto_endpoint: str) -> None:
    with pytest.raises(SessionCapsUnavailable):
        SessionCapReader(stage=STAGE, ssm=aws.client("ssm"), ttl_seconds=0).caps_for("acme")


def test_caps_for_unreachable_store_fails_closed(ssm: Any) -> None:
    import boto3

    dead = boto3.client("ssm", endpoint_url="http://127.0.0.1:9", region_name="us-east-1")
    with pytest.raises(SessionCapsUnavailable):
        SessionCapReader(stage=STAGE, ssm=dead, ttl_seconds=0).caps_for("acme")


def test_caps_for_caches_within_ttl(ssm: Any) -> None:
    clock = [0.0]
    reader = SessionCapReader(stage=STAGE, ssm=ssm, ttl_seconds=60, clock=lambda: clock[0])
    assert reader.caps_for("acme").for_dimension(dimensions.TENANT_SESSIONS.name) == 20
    _put(dimensions.parameter(STAGE, dimensions.TENANT_SESSIONS.name), "5")
    clock[0] = 59
    assert reader.caps_for("acme").for_dimension(dimensions.TENANT_SESSIONS.name) == 20
    clock[0] = 61
    assert reader.caps_for("acme").for_dimension(dimensions.TENANT_SESSIONS.name) == 5
