"""Plain-data definitions that the CDK constructs deploy and the local stack recreates.

Stdlib + config only (no aws_cdk import), so the local stack can use the exact same values
without paying for jsii; tests/infra compares them with the synthesized templates.
"""

from __future__ import annotations

from typing import Any

from sandbox_common import naming as n

from infra.config import StageConfig, TenantConfig

# Beyond the user's call: Start (~30 s worst case with retries), the readiness preamble (its own
# 30 s deadline), a concurrent first call's wait, and answering (audit, logs, stop). Dispatch also
# bounds every wait by the Lambda's remaining time, so an overrun still answers as `timeout`.
CALL_TIMEOUT_MARGIN_SECONDS = 120
LAMBDA_MAX_TIMEOUT_SECONDS = 900


# What a tenant's session-runner role may do, on its own tenant's interpreter ARNs only (§6.4).
# List is there so a Start whose answer was lost can be found by name and stopped (no orphan).
RUNNER_ACTIONS: tuple[str, ...] = (
    "bedrock-agentcore:StartCodeInterpreterSession",
    "bedrock-agentcore:InvokeCodeInterpreter",
    "bedrock-agentcore:StopCodeInterpreterSession",
    "bedrock-agentcore:ListCodeInterpreterSessions",
)


def runner_trust(principal: dict[str, object], tenant_id: str) -> dict[str, object]:
    """Trust policy of a tenant's session-runner role: the dispatch role may assume it only
    while tagging the session `tenant_id` = this tenant (issue 10). `sts:TagSession` must be
    allowed for a tagged AssumeRole; the condition on `aws:RequestTag` makes the tag required
    (an untagged or differently tagged request does not match), and `aws:TagKeys` allows no
    other tag."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": principal,
                "Action": ["sts:AssumeRole", "sts:TagSession"],
                "Condition": {
                    "StringEquals": {f"aws:RequestTag/{n.RUNNER_SESSION_TAG_TENANT}": tenant_id},
                    "ForAllValues:StringEquals": {"aws:TagKeys": [n.RUNNER_SESSION_TAG_TENANT]},
                },
            }
        ],
    }


def function_timeout_seconds(config: StageConfig, logical: str) -> int:
    """Lambda timeouts: dispatch outlives one call's deadline plus session start and audit."""
    return {
        n.DISPATCH: min(config.call_timeout_seconds + CALL_TIMEOUT_MARGIN_SECONDS, LAMBDA_MAX_TIMEOUT_SECONDS),
        n.QUOTA_CHECK: 10,
        n.BACKSTOP: 60,
    }[logical]


def global_parameters(config: StageConfig) -> dict[str, str]:
    """SSM path -> String value for the stage-wide parameters (caps §5.2, price §9)."""
    return {
        n.cap_parameter(config.name, n.DIM_TENANT_DAILY): str(config.caps.tenant_daily),
        n.cap_parameter(config.name, n.DIM_AGENT_HOURLY): str(config.caps.agent_hourly),
        n.cost_per_call_parameter(config.name): config.cost_per_call_usd,
    }


def tenant_substrate(
    config: StageConfig,
    tenant: TenantConfig,
    *,
    interpreters: dict[str, Any],
    runner_role_arn: Any,
) -> dict[str, Any]:
    """The JSON body of naming.tenant_substrate_parameter (fields of models.TenantSubstrate).

    `interpreters` / `runner_role_arn` are CDK tokens in the stack and concrete ids locally.
    """
    return {
        "tenant_id": tenant.id,
        "compliance_tier": tenant.compliance_tier,
        "environments": list(tenant.environments),
        "templates": dict(tenant.templates),
        "interpreters": dict(interpreters),
        "runner_role_arn": runner_role_arn,
    }


def interpreter_names(config: StageConfig, tenant: TenantConfig) -> dict[str, str]:
    """environment -> Code Interpreter name for one tenant."""
    return {env: n.interpreter_name(config.name, tenant.id, env) for env in tenant.environments}
