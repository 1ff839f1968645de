"""The environment each Lambda gets, built in ONE place for both the CDK stacks (values are
CDK tokens) and the local stack (values are concrete names). The typed models live in
sandbox_common.settings, so a Lambda reads back exactly what this writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sandbox_common import naming as n
from sandbox_common.settings import (
    BackstopSettings,
    DispatchSettings,
    EgressSettings,
    QuotaSettings,
    ReaperSettings,
)

from infra.cdk.config import StageConfig


@dataclass(frozen=True)
class EgressEndpoints:
    """How a session of an allowlist environment reaches the egress path: the proxy's URL (no
    credential, `http://HOST:PORT`), the proxy CA bundle's path inside the session, the package
    index URL."""

    proxy_url: str = ""
    ca_bundle: str = ""
    index_url: str = ""

    def as_env(self) -> dict[str, str]:
        return {
            n.ENV_EGRESS_PROXY_URL: self.proxy_url,
            n.ENV_EGRESS_CA_BUNDLE: self.ca_bundle,
            n.ENV_EGRESS_INDEX_URL: self.index_url,
        }


SERVICE_NAMES: dict[str, str] = {
    n.DISPATCH: "sandbox-dispatch",
    n.QUOTA_CHECK: "sandbox-quota-check",
    n.BACKSTOP: "sandbox-backstop",
    n.REAPER: "sandbox-reaper",
}


def function_environment(
    config: StageConfig,
    logical: str,
    *,
    tables: Mapping[str, str],
    quota_function_name: str = "",
    audit_dlq_url: str = "",
    artifacts_bucket: str = "",
    egress: EgressEndpoints | None = None,
) -> dict[str, str]:
    """`tables` maps TableSpec.logical -> physical name (or token). `egress`: where the stage's
    `allowlist` sessions reach the egress proxy (None: the stage has none, and such sessions are
    refused); dispatch and the reaper give those sessions their credentials and proxy settings."""
    egress_env = EgressSettings(
        egress_table=tables.get(n.EGRESS.logical, ""),
        egress_proxy_url=egress.proxy_url if egress else "",
        egress_ca_bundle=egress.ca_bundle if egress else "",
        egress_index_url=egress.index_url if egress else "",
    ).model_dump()
    common = {
        "POWERTOOLS_SERVICE_NAME": SERVICE_NAMES[logical],
        "POWERTOOLS_METRICS_NAMESPACE": n.METRICS_NAMESPACE,
        "POWERTOOLS_LOG_LEVEL": "INFO",
    }
    if logical == n.DISPATCH:
        settings: DispatchSettings | QuotaSettings | BackstopSettings | ReaperSettings = DispatchSettings(
            stage=config.name,
            turns_table=tables[n.TURNS.logical],
            tenants_table=tables[n.TENANTS.logical],
            invocations_table=tables[n.INVOCATIONS.logical],
            idempotency_table=tables[n.IDEMPOTENCY.logical],
            quota_function_name=quota_function_name,
            audit_dlq_url=audit_dlq_url,
            call_timeout_seconds=config.call_timeout_seconds,
            session_timeout_seconds=config.session_timeout_seconds,
            audit_retention_days=config.audit_retention_days,
            stdout_cap_bytes=config.stdout_cap_bytes,
            stderr_cap_bytes=config.stderr_cap_bytes,
            artifacts_bucket=artifacts_bucket,
            jobs_table=tables[n.JOBS.logical],
            sessions_table=tables[n.SESSIONS.logical],
            require_turn_token=config.require_turn_token,
            continuations_table=tables[n.CONTINUATIONS.logical],
            tool_wait_seconds=config.tool_wait_seconds,
            **egress_env,
        )
    elif logical == n.QUOTA_CHECK:
        settings = QuotaSettings(
            stage=config.name,
            tenant_daily_table=tables[n.TENANT_DAILY_COUNTERS.logical],
            agent_hourly_table=tables[n.AGENT_HOURLY_COUNTERS.logical],
            turns_table=tables[n.TURNS.logical],
            tenants_table=tables[n.TENANTS.logical],
        )
    elif logical == n.BACKSTOP:
        settings = BackstopSettings(stage=config.name, findings_table=tables[n.FINDINGS.logical])
    elif logical == n.REAPER:
        settings = ReaperSettings(
            stage=config.name,
            sessions_table=tables[n.SESSIONS.logical],
            turns_table=tables[n.TURNS.logical],
            tenants_table=tables[n.TENANTS.logical],
            call_timeout_seconds=config.call_timeout_seconds,
            session_timeout_seconds=config.session_timeout_seconds,
            jobs_table=tables[n.JOBS.logical],
            invocations_table=tables[n.INVOCATIONS.logical],
            audit_dlq_url=audit_dlq_url,
            audit_retention_days=config.audit_retention_days,
            stdout_cap_bytes=config.stdout_cap_bytes,
            stderr_cap_bytes=config.stderr_cap_bytes,
            idempotency_table=tables[n.IDEMPOTENCY.logical],  # interrupted_sweep
            dispatch_function_name=n.function_name(config.name, n.DISPATCH),  # paused_sweep
            artifacts_bucket=artifacts_bucket,  # job_sweep: an ended job's files
            **egress_env,  # warm sessions of allowlist environments get their credentials too
        )
    else:
        raise ValueError(f"unknown function {logical!r}")
    return {**common, **settings.to_env()}


PROXY_SERVICE_NAME = "sandbox-egress-proxy"
# Inside the proxy's container: the only writable directory is /tmp (its root file system is
# read-only); the CA is written there from Secrets Manager at start.
PROXY_CONFDIR = "/tmp/egress-ca"


def proxy_environment(region: str) -> dict[str, str]:
    """The egress proxy container's environment: what its logger, metrics and AWS clients read
    (the proxy's own settings are its command line, `proxy_command`)."""
    return {
        "POWERTOOLS_SERVICE_NAME": PROXY_SERVICE_NAME,
        "POWERTOOLS_METRICS_NAMESPACE": n.METRICS_NAMESPACE,
        "POWERTOOLS_LOG_LEVEL": "INFO",
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
    }


def proxy_command(
    config: StageConfig,
    *,
    tables: Mapping[str, str],
    port: int,
    index_url: str,
    codeartifact_domain: str,
    account: str,
) -> list[str]:
    """`python -m egress_proxy`'s arguments on AWS (functions/egress_proxy/config.py): listen on
    every address of the task, read the CA from Secrets Manager, add the CodeArtifact token to the
    index's requests. `tables` maps TableSpec.logical -> physical name (or token)."""
    return [
        "--stage",
        config.name,
        "--listen-host",
        "0.0.0.0",  # noqa: S104 - the task's own ENI; its security group admits the load balancer only
        "--port",
        str(port),
        "--confdir",
        PROXY_CONFDIR,
        "--ca-from-secrets",
        "--egress-table",
        tables.get(n.EGRESS.logical, n.EGRESS.physical(config.name)),
        "--counters-table",
        tables[n.TENANT_DAILY_COUNTERS.logical],
        "--tenants-table",
        tables[n.TENANTS.logical],
        "--index-url",
        index_url,
        "--codeartifact",
        f"{codeartifact_domain}:{account}",
    ]
