"""`sandboxctl doctor --stage NAME` against moto (STS, SSM with AWS's public global-infrastructure
parameters, IAM) and a stand-in Service Quotas (moto serves only VPC quotas): one line per check,
exit 1 naming what fails."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from sandbox_common import naming as n

from infra.cdk import config as config_mod
from infra.cdk.config import build_config
from infra.cdk.constructs.definitions import stage_roles
from infra.sandboxctl.doctor import MIN_BOOTSTRAP_VERSION, lambda_concurrency_needed
from tests.support.service_quotas import ServiceQuotasStub, serving

REGION = "eu-west-1"  # AgentCore is offered here
NO_AGENTCORE = "af-south-1"  # ... and not here (AWS's public global-infrastructure parameters)
SESSION_QUOTA = "Concurrent sessions of Code Interpreter per account"
MOTO_ACCOUNT = "123456789012"


@pytest.fixture
def quotas(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServiceQuotasStub]:
    """A prepared account: bootstrapped in REGION and NO_AGENTCORE, quotas at AWS's defaults."""
    stub = ServiceQuotasStub()
    stub.set("iam", "L-FE177D64", "Roles per account", 1000, "us-east-1")
    for region in (REGION, NO_AGENTCORE):
        stub.set("lambda", "L-B99A9384", "Concurrent executions", 1000, region)
        stub.set("bedrock-agentcore", "L-SESSIONS1", SESSION_QUOTA, 1000, region)
        stub.set("bedrock-agentcore", "L-RATE0001", "Rate of StartCodeInterpreterSession requests", 5, region)
        boto3.client("ssm", region_name=region).put_parameter(
            Name="/cdk-bootstrap/hnb659fds/version", Type="String", Value="27"
        )
    with serving(stub) as endpoint:
        monkeypatch.setenv("AWS_ENDPOINT_URL_SERVICE_QUOTAS", endpoint)
        yield stub


def _doctor(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    from infra.sandboxctl.main import main

    code = main(["--stage", "dev", "doctor", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _lines(out: str) -> dict[str, str]:
    """check name -> status of the report's check lines."""
    found = {}
    for line in out.splitlines():
        status, _, rest = line.partition("  ")
        if status in ("PASS", "FAIL", "WARN"):
            found[rest.split(":", 1)[0]] = status
    return found


CHECKS = [
    "credentials",
    "agentcore-region",
    "cdk-bootstrap",
    "iam-roles",
    "lambda-concurrency",
    "agentcore-sessions",
    "agent-principals",
]


def test_doctor_passes_on_a_prepared_account(quotas: ServiceQuotasStub, capsys) -> None:
    # Given a bootstrapped account in a region with AgentCore, quotas above the stage's needs
    # When doctor runs for dev
    code, out, err = _doctor(capsys, "--region", REGION)
    # Then every check passes, one line each, and it exits 0
    assert code == 0, out + err
    assert _lines(out) == dict.fromkeys(CHECKS, "PASS")
    assert "doctor: all checks passed" in out and err == ""
    # And the quotas were read from Service Quotas: IAM's (global) in us-east-1, the others in REGION
    asked = {(op, region, body.get("ServiceCode")) for op, region, body in quotas.requests}
    assert ("GetServiceQuota", "us-east-1", "iam") in asked
    assert ("GetServiceQuota", REGION, "lambda") in asked
    assert ("ListServiceQuotas", REGION, "bedrock-agentcore") in asked


def test_doctor_fails_naming_the_check_in_a_region_without_agentcore(
    quotas: ServiceQuotasStub, capsys
) -> None:
    # When doctor checks a region AgentCore is not offered in (bootstrapped, quotas fine)
    code, out, err = _doctor(capsys, "--region", NO_AGENTCORE)
    # Then it exits 1 and names the one check that failed, on its line and on stderr
    assert code == 1
    assert _lines(out)["agentcore-region"] == "FAIL"
    assert [k for k, v in _lines(out).items() if v == "FAIL"] == ["agentcore-region"]
    assert f"not offered in {NO_AGENTCORE}" in out
    assert err.strip() == "sandboxctl: doctor: failed: agentcore-region"


def test_doctor_fails_on_a_role_quota_below_the_stages_need(quotas: ServiceQuotasStub, capsys) -> None:
    # Given an account whose role quota leaves one role fewer than the stage creates
    iam = boto3.client("iam", region_name="us-east-1")
    in_use = iam.get_account_summary()["SummaryMap"]["Roles"]
    need = stage_roles(build_config("dev"))
    quotas.set("iam", "L-FE177D64", "Roles per account", in_use + need - 1, "us-east-1")
    # When doctor runs
    code, out, err = _doctor(capsys, "--region", REGION)
    # Then iam-roles fails, saying what the stage needs and what is free
    assert code == 1 and err.strip() == "sandboxctl: doctor: failed: iam-roles"
    (line,) = [x for x in out.splitlines() if x.startswith("FAIL  iam-roles")]
    assert f"needs {need} roles" in line and f"{need - 1} available" in line


def test_doctor_counts_the_stages_own_roles_as_available(quotas: ServiceQuotasStub, capsys) -> None:
    # Given the stage already deployed (its roles exist) and a quota exactly full
    iam = boto3.client("iam", region_name="us-east-1")
    trust = json.dumps({"Version": "2012-10-17", "Statement": []})
    for name in (n.function_role_name("dev", f) for f in n.FUNCTIONS):
        iam.create_role(RoleName=name, AssumeRolePolicyDocument=trust)
    iam.create_role(RoleName="someone-elses-role", AssumeRolePolicyDocument=trust)
    in_use = iam.get_account_summary()["SummaryMap"]["Roles"]
    need = stage_roles(build_config("dev"))
    quotas.set("iam", "L-FE177D64", "Roles per account", in_use - len(n.FUNCTIONS) + need, "us-east-1")
    # When doctor runs / Then a redeploy fits: the stage's own roles are replaced, not added
    code, out, _ = _doctor(capsys, "--region", REGION)
    assert code == 0 and _lines(out)["iam-roles"] == "PASS", out


@pytest.mark.parametrize("version", [None, str(MIN_BOOTSTRAP_VERSION - 1)])
def test_doctor_fails_without_a_recent_cdk_bootstrap(quotas: ServiceQuotasStub, capsys, version) -> None:
    ssm = boto3.client("ssm", region_name=REGION)
    if version is None:
        ssm.delete_parameter(Name="/cdk-bootstrap/hnb659fds/version")
    else:
        ssm.put_parameter(
            Name="/cdk-bootstrap/hnb659fds/version", Type="String", Value=version, Overwrite=True
        )
    code, out, err = _doctor(capsys, "--region", REGION)
    assert code == 1 and err.strip() == "sandboxctl: doctor: failed: cdk-bootstrap"
    assert "cdk bootstrap" in out


def test_doctor_fails_when_lambda_concurrency_cannot_hold_the_session_cap(
    quotas: ServiceQuotasStub, capsys
) -> None:
    # Given a new account's low concurrency quota
    quotas.set("lambda", "L-B99A9384", "Concurrent executions", 10, REGION)
    code, out, err = _doctor(capsys, "--region", REGION)
    assert code == 1 and err.strip() == "sandboxctl: doctor: failed: lambda-concurrency"
    assert f"needs {lambda_concurrency_needed(build_config('dev'))}" in out


def test_doctor_session_quota_below_the_cap_fails_and_an_unlisted_one_warns(
    quotas: ServiceQuotasStub, capsys
) -> None:
    # Given an AgentCore session quota under the stage's global_sessions cap
    cap = build_config("dev").caps.of("global_sessions")
    quotas.set("bedrock-agentcore", "L-SESSIONS1", SESSION_QUOTA, cap - 1, REGION)
    code, out, _ = _doctor(capsys, "--region", REGION)
    assert code == 1 and _lines(out)["agentcore-sessions"] == "FAIL"
    # When Service Quotas lists no such quota at all
    quotas.quotas = [q for q in quotas.quotas if q.service != "bedrock-agentcore"]
    code, out, _ = _doctor(capsys, "--region", REGION)
    # Then it is a warning, not a failure
    assert code == 0 and _lines(out)["agentcore-sessions"] == "WARN"


def test_doctor_fails_on_a_same_account_agent_principal_that_does_not_exist(
    quotas: ServiceQuotasStub, capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given dev's tenants file with an agent principal of this (moto's) account
    document = json.loads((config_mod.REPO_ROOT / "infra/tenants/dev.json").read_text())
    document["agents"].append({"principal": f"arn:aws:iam::{MOTO_ACCOUNT}:role/team/runtime"})
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(document))
    monkeypatch.setitem(config_mod.STAGES, "dev", {**config_mod.STAGES["dev"], "tenants_file": str(path)})
    # When the role does not exist / Then the check fails naming it
    code, out, _ = _doctor(capsys, "--region", REGION)
    assert code == 1 and _lines(out)["agent-principals"] == "FAIL"
    assert f"arn:aws:iam::{MOTO_ACCOUNT}:role/team/runtime" in out
    # When it is created (path and all) / Then it passes; the example principals of other
    # accounts are reported as not checkable here
    boto3.client("iam", region_name="us-east-1").create_role(
        RoleName="runtime",
        Path="/team/",
        AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
    )
    code, out, _ = _doctor(capsys, "--region", REGION)
    assert code == 0 and "2 in other accounts" in out


def test_doctor_json_and_bad_usage(quotas: ServiceQuotasStub, capsys) -> None:
    from infra.sandboxctl.main import main

    # --json: the same checks as data
    code, out, _ = _doctor(capsys, "--region", REGION, "--json")
    report: dict[str, Any] = json.loads(out)
    assert code == 0 and report["ok"] is True and report["account"] == MOTO_ACCOUNT
    assert [c["name"] for c in report["checks"]] == CHECKS
    # The local stage has no account to check
    assert main(["--stage", "local", "doctor"]) == 1
    assert "needs no AWS account" in capsys.readouterr().err
