"""Managed sessions (SPEC §16) in the synthesized stages: the reaper's schedule, role and trust, the
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
    assert len(rules) == 1
    assert rules[0]["Properties"]["ScheduleExpression"] == f"rate({limits.REAPER_SCHEDULE_MINUTES} minutes)"
    assert rules[0]["Properties"]["Targets"][0]["Arn"] == {"Fn::GetAtt": [reaper_id, "Arn"]}


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_session_caps_are_deployed_with_config_defaults(stage: str) -> None:
    params = global_parameters(build_config(stage))
    assert params[dimensions.parameter(stage, dimensions.TENANT_SESSIONS.name)] == "20"
    assert params[dimensions.parameter(stage, dimensions.GLOBAL_SESSIONS.name)] == "200"
