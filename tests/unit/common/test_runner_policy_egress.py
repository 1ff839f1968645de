"""The runner's session policy also lets it read the stage's egress CA certificate (AgentCore reads
a VPC-mode interpreter's `certificates` with the caller's credentials), and nothing else of
Secrets Manager; the stage comes from the runner role's own name."""

from __future__ import annotations

import json

import pytest
from sandbox_common import naming as n
from sandbox_common.runner_policy import (
    SESSION_POLICY_MAX_CHARS,
    SessionPolicyError,
    session_policy,
    session_policy_json,
)

ARN = "arn:aws:bedrock-agentcore:eu-west-1:123456789012:code-interpreter-custom/sbx_dev_acme_alw-AbCdEf1234"


@pytest.mark.parametrize("stage", ["dev", "prod", "my-stage", "a"])
def test_stage_of_runner_role_reads_back_the_name_it_made(stage: str) -> None:
    # Given the stage's runner role ARN / Then its stage comes back, exactly
    assert n.stage_of_runner_role(f"arn:aws:iam::123456789012:role/{n.runner_role_name(stage)}") == stage


@pytest.mark.parametrize(
    "arn",
    [
        "arn:aws:iam::123456789012:role/some-other-role",
        "arn:aws:iam::123456789012:role/thinkwork--sbx-runner",
        "arn:aws:iam::123456789012:role/thinkwork-dev-sbx-runner-acme",
        "arn:aws:iam::123456789012:user/thinkwork-dev-sbx-runner",
        "",
    ],
)
def test_stage_of_runner_role_is_none_for_any_other_arn(arn: str) -> None:
    assert n.stage_of_runner_role(arn) is None


def test_session_policy_with_the_stage_adds_its_ca_certificate_only() -> None:
    # Given a tenant's interpreter ARN and its stage
    policy = session_policy([ARN], stage="dev")
    # Then besides the interpreter statement there is one: reading the stage's CA certificate in
    # the interpreter's partition, region and account, by name and Secrets Manager's suffix
    runner, certificate = policy["Statement"]
    assert runner["Resource"] == [ARN]
    assert certificate["Action"] == ["secretsmanager:GetSecretValue"]
    assert certificate["Resource"] == [
        f"arn:aws:secretsmanager:eu-west-1:123456789012:secret:{n.egress_ca_cert_secret_name('dev')}-??????"
    ]
    # And no '*' anywhere (the key secret, other stages' and tenants' secrets stay out)
    assert "*" not in json.dumps(policy)
    # And without the stage the policy is the interpreters' alone
    assert session_policy([ARN])["Statement"] == [runner]


def test_session_policy_stays_within_the_sts_limit_with_every_environment() -> None:
    arns = [ARN.replace("_alw", f"_{env}") for env in ("pub", "int", "alw")]
    assert len(session_policy_json(arns, stage="a-long-stage-name")) < SESSION_POLICY_MAX_CHARS


def test_session_policy_refuses_an_arn_it_cannot_place() -> None:
    with pytest.raises(SessionPolicyError, match="not an interpreter ARN"):
        session_policy(["arn:aws:bedrock-agentcore"], stage="dev")
