"""Stacks, queues, topics, log groups, and the outputs sandboxctl reads on a deployed stage."""

from __future__ import annotations

import re

from .ids import PROJECT

SECURITY_ALERTS_TOPIC = "security-alerts"
OUTPUT_STAGE = "SandboxStage"
OUTPUT_DISPATCH_FUNCTION = "DispatchFunctionName"
OUTPUT_QUOTA_FUNCTION = "QuotaFunctionName"
OUTPUT_AUDIT_DLQ_URL = "AuditDlqUrl"
OUTPUT_SECURITY_TOPIC = "SecurityAlertsTopicArn"
OUTPUT_ARTIFACTS_BUCKET = "ArtifactsBucketName"
OUTPUT_TABLE_PREFIX = "Table"  # table outputs: f"{OUTPUT_TABLE_PREFIX}{spec.logical}"
# A stage with an egress path: the proxy's URL as sessions use it, and the package index URL.
OUTPUT_EGRESS_PROXY_URL = "EgressProxyUrl"
OUTPUT_PACKAGE_INDEX_URL = "PackageIndexUrl"
# The managed policy a same-account agent runtime's role attaches to invoke dispatch (every tenant).
OUTPUT_AGENT_INVOKE_POLICY = "AgentInvokePolicyArn"


def stack_name(stage: str, part: str) -> str:
    return f"Sandbox-{stage}-{part}"


def shard_stack_name(stage: str, shard: int) -> str:
    return stack_name(stage, f"Tenants{shard:03d}")


def agent_invoke_policy_name(stage: str, tenant_id: str | None = None) -> str:
    """The managed policy that lets a same-account agent runtime invoke dispatch: every tenant
    (the function), or one tenant's scope (that tenant's alias of dispatch)."""
    base = f"{PROJECT}-{stage}-invoke-dispatch"
    return base if tenant_id is None else f"{base}-{tenant_id}"


def security_topic_name(stage: str) -> str:
    return f"{PROJECT}-{stage}-{SECURITY_ALERTS_TOPIC}"


def audit_dlq_name(stage: str) -> str:
    return f"{PROJECT}-{stage}-sandbox-audit-dlq"


def backstop_failures_queue_name(stage: str) -> str:
    """Where a log batch goes when the backstop still fails after Lambda's async retries."""
    return f"{PROJECT}-{stage}-sandbox-backstop-failures"


def table_output_key(logical: str) -> str:
    """CloudFormation output keys are alphanumeric only: CDK drops the underscores of
    `OUTPUT_TABLE_PREFIX + logical`, so readers look outputs up with this."""
    return OUTPUT_TABLE_PREFIX + re.sub(r"[^A-Za-z0-9]", "", logical)


def findings_audit_log_group(stage: str) -> str:
    """Where the CloudWatch Logs data protection policy sends its findings (docs/redaction.md)."""

    return f"/{PROJECT}/{stage}/sandbox/data-protection-findings"
