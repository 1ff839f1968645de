"""The e2e suite's own helpers, checked locally (always run): a wrong payload encoder or a cap
override that forgets to restore would make the real-AWS suite lie or leave a stage changed."""

from __future__ import annotations

import json

import boto3
import pytest
from sandbox_common import dimensions
from sandbox_common import naming as n

from tests.e2e import _deployed
from tests.e2e._deployed import Deployed, subscription_event


def test_subscription_event_is_what_the_backstop_decodes():
    # Given a delivery built by the e2e helper with a token-shaped string in a JSON log line
    token = "ghp_" + "A" * 36
    line = json.dumps({"message": "sandbox_output", "session_id": "s-1", "tenant_id": "acme", "data": token})
    event = subscription_event("/aws/lambda/thinkwork-dev-dispatch", "stream-1", [line])
    # When the real backstop decoder and scanner read it
    from backstop.scanner import decode, scan_events

    result = scan_events(decode(event))
    # Then it finds exactly that token, correlated to the session and tenant
    assert [f["token_class"] for f in result.findings] == ["github"]
    assert result.findings[0]["log_stream"] == "stream-1"
    assert result.findings[0]["session_id"] == "s-1" and result.findings[0]["tenant_id"] == "acme"


@pytest.fixture
def no_cache_wait(monkeypatch):
    monkeypatch.setattr(_deployed, "CACHE_TTL_SECONDS", 0)
    monkeypatch.setattr(_deployed, "CACHE_MARGIN_SECONDS", 0)


def test_cap_override_restores_a_previous_value(moto_endpoint, no_cache_wait, monkeypatch):
    # Given a stage whose tenant already has an override of 7
    monkeypatch.setenv("SANDBOX_E2E_STAGE", "dev")
    ssm = boto3.client("ssm")
    path = dimensions.parameter("dev", dimensions.AGENT_HOURLY.name, "acme")
    ssm.put_parameter(Name=path, Value="7", Type="String")
    stage = Deployed.discover()
    # When the override is changed inside the block and the block fails
    with pytest.raises(RuntimeError), stage.cap_override(dimensions.AGENT_HOURLY.name, 2, tenant="acme"):
        assert ssm.get_parameter(Name=path)["Parameter"]["Value"] == "2"
        raise RuntimeError("test body failed")
    # Then the previous value is back
    assert ssm.get_parameter(Name=path)["Parameter"]["Value"] == "7"


def test_cap_override_removes_an_override_that_did_not_exist(moto_endpoint, no_cache_wait, monkeypatch):
    # Given a stage whose tenant has no override
    monkeypatch.setenv("SANDBOX_E2E_STAGE", "dev")
    ssm = boto3.client("ssm")
    path = dimensions.parameter("dev", dimensions.TENANT_DAILY.name, "acme")
    stage = Deployed.discover()
    # When the kill switch is set for the block
    with stage.cap_override(dimensions.TENANT_DAILY.name, 0, tenant="acme"):
        assert ssm.get_parameter(Name=path)["Parameter"]["Value"] == "0"
    # Then the override is gone again, so the global cap applies
    with pytest.raises(ssm.exceptions.ParameterNotFound):
        ssm.get_parameter(Name=path)


def test_discover_prefers_stack_outputs_and_falls_back_to_naming(moto_endpoint, monkeypatch):
    # Given a stage with no stacks deployed, and then one whose stack publishes outputs
    monkeypatch.setenv("SANDBOX_E2E_STAGE", "dev")
    bare = Deployed.discover()
    cfn = boto3.client("cloudformation")
    template = (
        '{"Resources": {"Q": {"Type": "AWS::SQS::Queue"}}, "Outputs": {'
        f'"{n.OUTPUT_DISPATCH_FUNCTION}": {{"Value": "custom-dispatch"}},'
        f'"{n.OUTPUT_TABLE_PREFIX}{n.INVOCATIONS.logical}": {{"Value": "custom-invocations"}}}}}}'
    )
    cfn.create_stack(StackName=n.stack_name("dev", "Core"), TemplateBody=template)
    cfn.create_stack(StackName=n.stack_name("prod", "Core"), TemplateBody=template.replace("custom", "other"))
    # When discovering again
    deployed = Deployed.discover()
    # Then names come from naming.py without outputs, and from this stage's outputs when present
    assert bare.function(n.DISPATCH) == n.function_name("dev", n.DISPATCH)
    assert bare.table(n.INVOCATIONS) == n.INVOCATIONS.physical("dev")
    assert deployed.function(n.DISPATCH) == "custom-dispatch"
    assert deployed.table(n.INVOCATIONS) == "custom-invocations"
    assert deployed.function(n.BACKSTOP) == n.function_name("dev", n.BACKSTOP)
