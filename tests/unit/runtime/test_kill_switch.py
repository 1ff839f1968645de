"""The kill switch's view of a tenant, on moto's SSM and DynamoDB: a call cap at 0 (the
tenant's override or the stage-wide value) or the tenant disabled kills its admitted work; a
change is seen once the cached read expires (≤ the TTL, ≤ 60 s) and not before; a cap or policy
that cannot be read is not a kill."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sandbox_common import aws, dimensions
from sandbox_common import naming as n
from sandbox_common.cap_values import CallCapValues
from sandbox_common.errors import SandboxCapExceeded, SandboxProvisioning
from sandbox_runtime.kill_switch import Kill, KillSwitch
from sandbox_runtime.preflight import PreflightReader

from .conftest import STAGE


def _put(name: str, value: str) -> None:
    aws.client("ssm").put_parameter(Name=name, Value=value, Type="String", Overwrite=True)


@pytest.fixture
def published(tables: dict[str, str]) -> dict[str, str]:
    """The stage's call caps and acme's substrate (standard tier), as CDK and its shard publish them."""
    for d in dimensions.calls():
        _put(dimensions.parameter(STAGE, d.name), str(d.default))
    substrate = {
        "tenant_id": "acme",
        "compliance_tier": "standard",
        "environments": ["default-public"],
        "templates": {"analyst": "default-public"},
        "interpreters": {"default-public": "sbx_acme"},
        "runner_role_arn": "arn:aws:iam::123456789012:role/runner-acme",
    }
    _put(n.tenant_substrate_parameter(STAGE, "acme"), json.dumps(substrate))
    return tables


def _switch(tables: dict[str, str], clock: list[float], *, ssm: Any = None, ttl: int = 60) -> KillSwitch:
    ssm = ssm or aws.client("ssm")
    return KillSwitch(
        caps=CallCapValues(stage=STAGE, ssm=ssm, ttl_seconds=ttl, clock=lambda: clock[0]),
        preflight=PreflightReader(
            stage=STAGE,
            tenants_table=tables[n.TENANTS.logical],
            ttl_seconds=ttl,
            ssm=ssm,
            ddb=aws.client("dynamodb"),
        ),
    )


def _disable(tables: dict[str, str], tenant_id: str) -> None:
    aws.client("dynamodb").put_item(
        TableName=tables[n.TENANTS.logical],
        Item={
            n.TENANTS.pk: {"S": tenant_id},
            n.TENANTS.sk: {"S": n.TENANT_POLICY_ITEM},
            "sandbox_enabled": {"BOOL": False},
        },
    )


def test_kill_switch_names_the_zero_cap_of_the_override_or_the_stage(published: dict[str, str]) -> None:
    clock = [0.0]
    # Given caps above 0: nothing is killed
    assert _switch(published, clock, ttl=0).check("acme") is None
    # When acme's own tenant_daily override is 0 / Then acme is killed on tenant_daily
    _put(dimensions.parameter(STAGE, "tenant_daily", "acme"), "0")
    assert _switch(published, clock, ttl=0).check("acme") == Kill("acme", "tenant_daily")
    # When instead the stage-wide agent_hourly is 0 / Then every tenant is killed on agent_hourly
    _put(dimensions.parameter(STAGE, "tenant_daily", "acme"), "5")
    _put(dimensions.parameter(STAGE, "agent_hourly"), "0")
    assert _switch(published, clock, ttl=0).check("acme") == Kill("acme", "agent_hourly")


def test_kill_switch_sees_a_disabled_and_an_unknown_tenant(published: dict[str, str]) -> None:
    clock = [0.0]
    # Given acme disabled by its operator policy item
    _disable(published, "acme")
    # Then acme is killed as disabled, and so is a tenant nobody published
    assert _switch(published, clock, ttl=0).check("acme") == Kill("acme")
    assert _switch(published, clock, ttl=0).check("nobody") == Kill("nobody")


def test_kill_switch_change_is_seen_when_the_cached_read_expires(published: dict[str, str]) -> None:
    clock = [0.0]
    switch = _switch(published, clock, ttl=60)
    assert switch.check("acme") is None
    # When the cap goes to 0 and the tenant is disabled
    _put(dimensions.parameter(STAGE, "tenant_daily"), "0")
    _disable(published, "acme")
    # Then within the TTL the cached view stands, and at the TTL the change is seen
    clock[0] = 59.0
    assert switch.check("acme") is None
    clock[0] = 60.0
    assert switch.check("acme") == Kill("acme", "tenant_daily")


def test_kill_switch_unreadable_caps_and_policy_are_not_a_kill(published: dict[str, str]) -> None:
    import boto3

    dead = boto3.client("ssm", endpoint_url="http://127.0.0.1:9", region_name="us-east-1")
    # Given SSM unreachable (caps and substrate unreadable) / Then admitted work is not ended
    assert _switch(published, [0.0], ssm=dead, ttl=0).check("acme") is None


def test_kill_failure_is_the_refusal_a_new_call_gets() -> None:
    # Given a cap kill and a disabled tenant / Then each maps to its named refusal
    cap = Kill("acme", "tenant_daily").failure()
    assert isinstance(cap, SandboxCapExceeded)
    assert (cap.fields["dimension"], cap.fields["failure_reason"]) == (
        "tenant_daily",
        "kill_switch:tenant_daily",
    )
    assert cap.fields["resets_at"].endswith("T00:00:00Z")
    disabled = Kill("acme").failure()
    assert isinstance(disabled, SandboxProvisioning)
    assert disabled.fields["reason"] == "tenant_disabled"
