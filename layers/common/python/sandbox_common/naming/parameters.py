"""SSM parameters (the caps' are their dimensions': sandbox_common.dimensions)."""

from __future__ import annotations

from .environments import ENVIRONMENTS
from .ids import PROJECT, REQUEST_ID_RE


def ssm_prefix(stage: str) -> str:
    return f"/{PROJECT}/{stage}/sandbox"


def tenant_parameters_prefix(stage: str) -> str:
    """Every per-tenant parameter is under it: `{prefix}{tenant}/...`."""
    return f"{ssm_prefix(stage)}/tenants/"


def _tenant_parameter(stage: str, tenant_id: str, leaf: str) -> str:
    if not REQUEST_ID_RE.match(tenant_id):
        raise ValueError("tenant id not valid for an SSM path")
    return f"{tenant_parameters_prefix(stage)}{tenant_id}/{leaf}"


def cost_per_call_parameter(stage: str) -> str:
    return f"{ssm_prefix(stage)}/cost_per_call_usd"


def tenant_substrate_parameter(stage: str, tenant_id: str) -> str:
    """JSON published by the tenant's shard stack: tier, templates, interpreter ids, runner role."""
    return _tenant_parameter(stage, tenant_id, "substrate")


def warm_sessions_parameter(stage: str, tenant_id: str, environment: str) -> str:
    """Warm pool size of one tenant × environment (docs/sessions.md); absent = 0."""
    path = _tenant_parameter(stage, tenant_id, f"warm/{environment}")
    if environment not in ENVIRONMENTS:
        raise ValueError(f"unknown environment {environment!r}")
    return path


def tenant_daily_budget_parameter(stage: str, tenant_id: str) -> str:
    """Optional daily budget in USD (a non-negative decimal); absent = no budget. Crossing it is
    reported (metric + alarm), never refused: the caps are the refusal mechanism."""
    return _tenant_parameter(stage, tenant_id, "daily_budget_usd")


def egress_policy_parameter(stage: str, tenant_id: str, environment: str) -> str:
    """One tenant × environment's egress policy (JSON, sandbox_common.egress_policy): written by
    CDK from the stage's tenants, replaced by `sandboxctl egress set`, read by the egress proxy."""
    if environment not in ENVIRONMENTS:
        raise ValueError(f"unknown environment {environment!r}")
    return _tenant_parameter(stage, tenant_id, f"egress/{environment}")


def egress_network_parameter(stage: str, leaf: str) -> str:
    """What the core stack publishes about the stage's egress path for the tenant shards to read
    at deploy (shards take them as SSM-typed stack parameters, so adding a tenant needs no
    cross-stack export): see EGRESS_NETWORK_PARAMETERS."""
    if leaf not in EGRESS_NETWORK_PARAMETERS:
        raise ValueError(f"unknown egress network parameter {leaf!r}")
    return f"{ssm_prefix(stage)}/egress/{leaf}"


# The sessions VPC's isolated subnets (StringList) and id, the managed prefix list of the region's
# S3 gateway endpoint, and the ARN of the proxy CA's certificate secret.
EGRESS_SESSION_SUBNETS = "session-subnets"
EGRESS_SESSIONS_VPC = "sessions-vpc"
EGRESS_S3_PREFIX_LIST = "s3-prefix-list"
EGRESS_CA_CERT_ARN = "ca-cert-secret-arn"
EGRESS_NETWORK_PARAMETERS: tuple[str, ...] = (
    EGRESS_SESSION_SUBNETS,
    EGRESS_SESSIONS_VPC,
    EGRESS_S3_PREFIX_LIST,
    EGRESS_CA_CERT_ARN,
)
