"""Plain-data definitions that the CDK constructs deploy and the local stack recreates.

Stdlib + config only (no aws_cdk import), so the local stack can use the exact same values
without paying for jsii; tests/infra compares them with the synthesized templates.
"""

from __future__ import annotations

from typing import Any

from sandbox_common import naming as n

from infra.config import StageConfig, TenantConfig


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
