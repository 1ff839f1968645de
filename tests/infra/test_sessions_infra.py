"""Managed sessions in the synthesized stages: the reaper's schedule, role and trust, the
session ledger table, the session-cap parameters."""

from __future__ import annotations

import pytest
from sandbox_common import dimensions, limits
from sandbox_common import naming as n

from infra.cdk.config import STAGES, build_config
from infra.cdk.constructs.definitions import global_parameters
from tests.infra._cfn import resources


def _core(all_stages, stage: str) -> dict:
    return all_stages[stage][n.stack_name(stage, "Core")]


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_reaper_runs_every_five_minutes(all_stages, stage: str) -> None:
    core = _core(all_stages, stage)
    rules = list(resources(core, "AWS::Events::Rule").values())
    reaper_id = next(
        rid
        for rid, r in resources(core, "AWS::Lambda::Function").items()
        if r["Properties"]["FunctionName"] == n.function_name(stage, n.REAPER)
    )
    (schedule,) = [r for r in rules if "ScheduleExpression" in r["Properties"]]
    assert schedule["Properties"]["ScheduleExpression"] == f"rate({limits.REAPER_SCHEDULE_MINUTES} minutes)"
    assert schedule["Properties"]["Targets"][0]["Arn"] == {"Fn::GetAtt": [reaper_id, "Arn"]}


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_reaper_hears_every_change_that_may_kill_a_tenant(all_stages, stage: str) -> None:
    # Given the reaper of a stage
    core = _core(all_stages, stage)
    reaper_id = next(
        rid
        for rid, r in resources(core, "AWS::Lambda::Function").items()
        if r["Properties"]["FunctionName"] == n.function_name(stage, n.REAPER)
    )
    # Then a rule sends it every change of the stage's caps parameters (any writer)
    (changes,) = [
        r for r in resources(core, "AWS::Events::Rule").values() if "EventPattern" in r["Properties"]
    ]
    assert changes["Properties"]["EventPattern"] == {
        "source": ["aws.ssm"],
        "detail-type": ["Parameter Store Change"],
        "detail": {"name": [{"prefix": f"{n.ssm_prefix(stage)}/caps/"}]},
    }
    assert changes["Properties"]["Targets"][0]["Arn"] == {"Fn::GetAtt": [reaper_id, "Arn"]}
    # And the tenants table's stream (keys only) sends it every write of a tenant's policy item
    tenants_id, tenants = next(
        (rid, r)
        for rid, r in resources(core, "AWS::DynamoDB::Table").items()
        if r["Properties"]["TableName"] == n.TENANTS.physical(stage)
    )
    assert tenants["Properties"]["StreamSpecification"] == {"StreamViewType": "KEYS_ONLY"}
    (mapping,) = resources(core, "AWS::Lambda::EventSourceMapping").values()
    props = mapping["Properties"]
    assert props["EventSourceArn"] == {"Fn::GetAtt": [tenants_id, "StreamArn"]}
    assert props["FunctionName"] == {"Ref": reaper_id}
    assert props["FilterCriteria"] == {
        "Filters": [{"Pattern": '{"dynamodb":{"Keys":{"item":{"S":["policy"]}}}}'}]
    }


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_session_caps_are_deployed_with_config_defaults(stage: str) -> None:
    params = global_parameters(build_config(stage))
    assert params[dimensions.parameter(stage, dimensions.TENANT_SESSIONS.name)] == "20"
    assert params[dimensions.parameter(stage, dimensions.GLOBAL_SESSIONS.name)] == "200"
