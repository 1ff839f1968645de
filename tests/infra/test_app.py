"""The app synthesizes every stage, passes cdk-nag and cfn-lint, and refuses bad configuration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sandbox_common import naming as n

from infra.cdk.config import STAGES as CONFIG_STAGES
from infra.cdk.config import ConfigError
from tests.infra.conftest import STAGES

REPO = Path(__file__).resolve().parents[2]


def test_stages_fixture_covers_every_configured_stage() -> None:
    # Given / When / Then: a stage added to the config is synthesized by these tests too.
    assert set(STAGES) == set(CONFIG_STAGES)


@pytest.mark.parametrize("stage", STAGES)
def test_synth_stage_every_stage_has_core_and_shards(all_stages, stage: str) -> None:
    # Given the stage's config
    from infra.cdk.config import build_config

    config = build_config(stage)
    # When it is synthesized (cdk-nag runs inside synth and raises on any finding)
    templates = all_stages[stage]
    # Then there is the core stack and one stack per shard, nothing else
    expected = {n.stack_name(stage, "Core")} | {n.shard_stack_name(stage, i) for i, _ in config.shards()}
    assert set(templates) == expected


@pytest.mark.parametrize("stage", STAGES)
def test_cfn_lint_every_template_has_no_error(all_stages, stage: str) -> None:
    from cfnlint.api import ManualArgs, lint

    # Given the synthesized templates of the stage
    assert all_stages[stage]  # the loop below must run
    for name, template in all_stages[stage].items():
        # When cfn-lint checks them for a region where AgentCore exists
        matches = lint(json.dumps(template), config=ManualArgs(regions=["us-east-1"]))
        # Then there is no error-level finding (warnings are CDK's own DependsOn duplicates)
        errors = [f"{m.rule.id}: {m.message}" for m in matches if m.rule.id.startswith("E")]
        assert errors == [], f"{name}: {errors}"


def test_build_app_cdk_nag_rejects_an_unacknowledged_finding(tmp_path) -> None:
    from aws_cdk import aws_sqs as sqs

    from infra.cdk.app_factory import OFFLINE_CONTEXT, build_app

    # Given a composed app with one resource that breaks AwsSolutions rules (no SSL, no DLQ)
    app = build_app("dev", context=OFFLINE_CONTEXT, outdir=str(tmp_path))
    core = app.node.find_child(n.stack_name("dev", "Core"))
    sqs.Queue(core, "NotCompliant")
    # When it is synthesized / Then cdk-nag fails the synth
    with pytest.raises(Exception, match="AwsSolutions-SQS4"):
        app.synth()


def test_acknowledge_without_a_real_reason_is_refused() -> None:
    import aws_cdk as cdk

    from infra.cdk.constructs.nag import acknowledge

    # Given a construct / When acknowledging a rule with a throwaway reason / Then it is refused
    stack = cdk.Stack(cdk.App(), "S")
    with pytest.raises(ValueError, match="real reason"):
        acknowledge(stack, "AwsSolutions-L1", "ok")


@pytest.mark.parametrize(
    ("stage", "overrides", "message"),
    [
        ("nope", None, "known stages: dev, local, prod, staging"),
        ("dev", {"audit_retention_days": 181}, "180-day ceiling"),
        ("dev", {"tenants": ({"id": "Bad_Tenant"},)}, "must match"),
        ("dev", {"log_retention_days": 42}, "not a CloudWatch Logs value"),
    ],
)
def test_build_app_bad_config_raises_config_error(stage: str, overrides, message: str) -> None:
    from infra.cdk.app_factory import build_app

    # Given an invalid stage or configuration / When the app is built / Then a clear ConfigError
    with pytest.raises(ConfigError, match=message):
        build_app(stage, overrides=overrides)


@pytest.mark.parametrize(
    ("context", "message"),
    [({"stage": "bogus"}, "known stages: dev, local, prod, staging"), ({}, "pass -c stage=NAME")],
)
def test_app_py_without_a_known_stage_exits_2_naming_the_stages(tmp_path, context, message: str) -> None:
    # Given the CDK CLI's way of passing context to app.py
    env = {**os.environ, "CDK_CONTEXT_JSON": json.dumps(context), "CDK_OUTDIR": str(tmp_path)}
    # When app.py runs
    result = subprocess.run(
        [sys.executable, "app.py"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    # Then it exits 2 with a one-line reason naming the known stages, no traceback
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_cdk_json_runs_the_venv_and_disables_notices_and_telemetry() -> None:
    # Given cdk.json / Then the CLI uses the project's venv, no notices, no telemetry
    data = json.loads((REPO / "cdk.json").read_text())
    assert data["app"] == ".venv/bin/python app.py"
    assert data["notices"] is False
    assert data["context"]["cli-telemetry"] is False


def test_synth_stage_is_deterministic_including_asset_hashes() -> None:
    from infra.cdk.app_factory import synth_stage

    # Given one synth of dev / When dev is synthesized again right away (back to back, so that
    # nobody editing functions/ meanwhile changes a code asset)
    first = synth_stage("dev")
    again = synth_stage("dev")
    # Then every template is identical (asset hashes included: no random ids, no caches)
    assert again == first
    code_keys = [
        r["Properties"]["Code"]["S3Key"]
        for r in again[n.stack_name("dev", "Core")]["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function"
    ]
    functions = len(n.FUNCTIONS) + 1  # and the egress path's deploy-time custom resource
    assert len(code_keys) == functions and len(set(code_keys)) == functions  # own asset each


@pytest.mark.parametrize("stage", STAGES)
def test_templates_require_the_bootstrap_version_doctor_checks(all_stages, stage: str) -> None:
    from infra.sandboxctl.doctor import BOOTSTRAP_QUALIFIER, MIN_BOOTSTRAP_VERSION

    # Given every template of the stage / Then each reads the bootstrap version `doctor` reads and
    # refuses exactly the versions below the one `doctor` requires
    for template in all_stages[stage].values():
        assert (
            template["Parameters"]["BootstrapVersion"]["Default"]
            == f"/cdk-bootstrap/{BOOTSTRAP_QUALIFIER}/version"
        )
        (assertion,) = template["Rules"]["CheckBootstrapVersion"]["Assertions"]
        refused = assertion["Assert"]["Fn::Not"][0]["Fn::Contains"][0]
        assert refused == [str(v) for v in range(1, MIN_BOOTSTRAP_VERSION)]
