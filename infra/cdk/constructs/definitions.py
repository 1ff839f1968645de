"""Plain-data definitions that the CDK constructs deploy and the local stack recreates.

Stdlib + config only (no aws_cdk import), so the local stack can use the exact same values
without paying for jsii; tests/infra compares them with the synthesized templates.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sandbox_common import dimensions
from sandbox_common import naming as n
from sandbox_common.agent_scope import alias_for
from sandbox_common.runner_policy import RUNNER_ACTIONS

from infra.cdk.config import StageConfig, TenantConfig

# Beyond the user's call: Start (~30 s worst case with retries), the readiness preamble (its own
# 30 s deadline), a concurrent first call's wait, and answering (audit, logs, stop). Dispatch also
# bounds every wait by the Lambda's remaining time, so an overrun still answers as `timeout`.
CALL_TIMEOUT_MARGIN_SECONDS = 120
LAMBDA_MAX_TIMEOUT_SECONDS = 900


def runner_trust(principal: Mapping[str, object]) -> dict[str, object]:
    """Trust policy of the stage's session-runner role: `principal` (the dispatch and reaper roles)
    may assume it only while tagging the session with the tenant it serves (`sts:TagSession` must
    be allowed for a tagged AssumeRole; `Null: false` makes the tag required, `aws:TagKeys` allows
    no other tag). The tag is for the audit trail: what confines a session to one tenant is the
    session policy every AssumeRole carries (`sandbox_common.runner_policy`)."""
    tag = f"aws:RequestTag/{n.RUNNER_SESSION_TAG_TENANT}"
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": principal,
                "Action": ["sts:AssumeRole", "sts:TagSession"],
                "Condition": {
                    "Null": {tag: "false"},
                    "ForAllValues:StringEquals": {"aws:TagKeys": [n.RUNNER_SESSION_TAG_TENANT]},
                },
            }
        ],
    }


def runner_role_statements(interpreter_arn_patterns: list[str]) -> list[dict[str, Any]]:
    """The runner role's own policy: RUNNER_ACTIONS on the stage's interpreters (by name prefix).
    Never used alone: every AssumeRole narrows it to one tenant with a session policy."""
    return [
        {
            "Sid": "StageInterpreters",
            "Effect": "Allow",
            "Action": list(RUNNER_ACTIONS),
            "Resource": interpreter_arn_patterns,
        }
    ]


def interpreter_arn_patterns(stage: str, *, partition: str, region: str, account: str) -> list[str]:
    """Every interpreter ARN of the stage. A custom interpreter's ARN is
    `...:code-interpreter-custom/{id}` (the control plane's pattern allows `code-interpreter` too,
    the service's IAM examples use it), and its id starts with its name."""
    prefix = n.interpreter_name_prefix(stage)
    return [
        f"arn:{partition}:bedrock-agentcore:{region}:{account}:{kind}/{prefix}*"
        for kind in ("code-interpreter-custom", "code-interpreter")
    ]


def has_own_execution_role(tenant: TenantConfig) -> bool:
    """Only a tenant with data grants needs a role of its own; the others share the stage's
    no-permission execution role."""
    return bool(tenant_data_statements(tenant))


# Besides the function roles: the session-runner role and the shared execution role (Core stack).
STAGE_FIXED_EXTRA_ROLES = 2
# A stage with an egress path adds: the VPC flow logs', the setup custom resource's, and the proxy
# task's and task execution roles (infra/cdk/constructs/egress*.py).
EGRESS_ROLES = 4


def stage_roles(config: StageConfig) -> int:
    """IAM roles the stage creates: one per function, the session-runner role, the shared
    execution role, the egress path's (if any), and one per tenant with data grants (tests/infra
    holds this to the synthesized templates; `sandboxctl doctor` compares it with the account's
    role quota)."""
    egress = EGRESS_ROLES if config.egress is not None else 0
    return (
        len(n.FUNCTIONS)
        + STAGE_FIXED_EXTRA_ROLES
        + egress
        + sum(has_own_execution_role(t) for t in config.tenants)
    )


def dispatch_aliases(config: StageConfig) -> tuple[str, ...]:
    """The aliases of dispatch: one per tenant some scoped agent principal acts for (each points
    to $LATEST; its resource policy names the principals scoped to that tenant)."""
    return tuple(alias_for(t) for t in config.scoped_tenants())


def function_timeout_seconds(config: StageConfig, logical: str) -> int:
    """Lambda timeouts: dispatch outlives one call's deadline plus session start and audit."""
    return {
        n.DISPATCH: min(
            config.call_timeout_seconds + CALL_TIMEOUT_MARGIN_SECONDS, LAMBDA_MAX_TIMEOUT_SECONDS
        ),
        n.QUOTA_CHECK: 10,
        n.BACKSTOP: 60,
        # a sweep stops sessions and refills warm pools (each start ≤ ~60 s with its preamble)
        n.REAPER: 300,
    }[logical]


def global_parameters(config: StageConfig) -> dict[str, str]:
    """SSM path -> String value for the stage-wide parameters (the global caps, the per-call price)."""
    return {
        **{d.parameter(config.name): str(config.caps.of(d.name)) for d in dimensions.dimensions()},
        n.cost_per_call_parameter(config.name): config.cost_per_call_usd,
    }


def tenant_substrate(
    config: StageConfig,
    tenant: TenantConfig,
    *,
    interpreters: dict[str, Any],
    interpreter_arns: dict[str, Any],
    runner_role_arn: Any,
) -> dict[str, Any]:
    """The JSON body of naming.tenant_substrate_parameter (fields of models.TenantSubstrate).

    `interpreters` / `interpreter_arns` / `runner_role_arn` are CDK tokens in the stack and
    concrete values locally. The ARNs are what the runner's session policy names.
    """
    return {
        "tenant_id": tenant.id,
        "compliance_tier": tenant.compliance_tier,
        "environments": list(tenant.environments),
        "templates": dict(tenant.templates),
        "interpreters": dict(interpreters),
        "interpreter_arns": dict(interpreter_arns),
        "runner_role_arn": runner_role_arn,
        "data_read": list(tenant.data.read),  # where s3_uri inputs may come from
    }


def interpreter_names(config: StageConfig, tenant: TenantConfig) -> dict[str, str]:
    """environment -> Code Interpreter name for one tenant."""
    return {env: n.interpreter_name(config.name, tenant.id, env) for env in tenant.environments}


# --- tenant data grants -------------------------------------------------
def _s3_parts(prefix: str) -> tuple[str, str]:
    bucket, _, path = prefix[len("s3://") :].partition("/")
    return bucket, path


def tenant_data_statements(tenant: TenantConfig, partition: str = "aws") -> list[dict[str, Any]]:
    """IAM statements of a tenant's interpreter execution roles: exactly its `data` prefixes.

    Reads: GetObject on `bucket/path*` and ListBucket on the bucket limited to `path*`.
    Writes: PutObject on `bucket/path*`. KMS: Decrypt (reads) / Encrypt + GenerateDataKey
    (writes) on the named keys, only through S3 (kms:ViaService). Empty when no data is declared.
    """
    data = tenant.data
    statements: list[dict[str, Any]] = []

    def objects(prefixes: tuple[str, ...]) -> list[str]:
        return [f"arn:{partition}:s3:::{b}/{p}*" for b, p in map(_s3_parts, prefixes)]

    if data.read:
        statements.append(
            {
                "Sid": "ReadTenantData",
                "Effect": "Allow",
                "Action": ["s3:GetObject"],
                "Resource": objects(data.read),
            }
        )
        buckets: dict[str, list[str]] = {}
        for bucket, path in map(_s3_parts, data.read):
            buckets.setdefault(bucket, []).append(f"{path}*")
        for index, (bucket, paths) in enumerate(sorted(buckets.items())):
            statements.append(
                {
                    "Sid": f"ListTenantData{index}",
                    "Effect": "Allow",
                    "Action": ["s3:ListBucket"],
                    "Resource": [f"arn:{partition}:s3:::{bucket}"],
                    "Condition": {"StringLike": {"s3:prefix": paths}},
                }
            )
    if data.write:
        statements.append(
            {
                "Sid": "WriteTenantData",
                "Effect": "Allow",
                "Action": ["s3:PutObject"],
                "Resource": objects(data.write),
            }
        )
    if data.kms_keys and (data.read or data.write):
        actions = (["kms:Decrypt"] if data.read else []) + (
            ["kms:Encrypt", "kms:GenerateDataKey"] if data.write else []
        )
        statements.append(
            {
                "Sid": "TenantDataKeys",
                "Effect": "Allow",
                "Action": actions,
                "Resource": list(data.kms_keys),
                "Condition": {"StringLike": {"kms:ViaService": "s3.*.amazonaws.com"}},
            }
        )
    return statements


# --- artifacts bucket: what CDK deploys and the local stack recreates ----
def artifacts_bucket_settings(config: StageConfig) -> dict[str, Any]:
    """Encryption, public access block and lifecycle of the stage's artifacts bucket."""
    return {
        "sse_algorithm": "aws:kms",
        "block_public_access": {
            "BlockPublicAcls": True,
            "IgnorePublicAcls": True,
            "BlockPublicPolicy": True,
            "RestrictPublicBuckets": True,
        },
        "expiration_days": config.audit_retention_days,
    }
