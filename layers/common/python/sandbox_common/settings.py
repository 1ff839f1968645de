"""Each Lambda's environment as a typed model: CDK builds the env dict from these models
(`to_env`), the Lambdas read them once through cached getters, and the local stack and the
tests compare the two. Logic never reads os.environ directly.
"""

from __future__ import annotations

import os
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field

from . import limits
from . import naming as n


class _Settings(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    def to_env(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.model_dump(by_alias=True).items()}


class QuotaSettings(_Settings):
    stage: str = Field(alias=n.ENV_STAGE)
    tenant_daily_table: str = Field(alias=n.ENV_TENANT_DAILY_TABLE)
    agent_hourly_table: str = Field(alias=n.ENV_AGENT_HOURLY_TABLE)
    cache_ttl_seconds: int = Field(alias=n.ENV_CACHE_TTL, default=60, ge=0, le=60)
    # the turn guard's ConditionCheck (read only: ConditionCheckItem)
    turns_table: str = Field(alias=n.ENV_TURNS_TABLE, default="")
    # the tenant policy's ConditionCheck (read only: ConditionCheckItem): a disabled tenant is
    # refused inside the count's transaction
    tenants_table: str = Field(alias=n.ENV_TENANTS_TABLE, default="")

    def counters_table(self, spec: n.TableSpec) -> str:
        """The stage's name of a counters table (a calls dimension's `table`)."""
        tables = {
            n.TENANT_DAILY_COUNTERS.logical: self.tenant_daily_table,
            n.AGENT_HOURLY_COUNTERS.logical: self.agent_hourly_table,
        }
        return tables[spec.logical]


class EgressSettings(_Settings):
    """Where `allowlist` sessions go out (empty: no egress proxy in this stage, and such sessions
    cannot start): the per-session egress table, the proxy URL as sessions see it (no credential),
    the proxy's CA bundle inside the session and the stage's package index."""

    egress_table: str = Field(alias=n.ENV_EGRESS_TABLE, default="")
    egress_proxy_url: str = Field(alias=n.ENV_EGRESS_PROXY_URL, default="")
    egress_ca_bundle: str = Field(alias=n.ENV_EGRESS_CA_BUNDLE, default="")
    egress_index_url: str = Field(alias=n.ENV_EGRESS_INDEX_URL, default="")


class DispatchSettings(EgressSettings):
    stage: str = Field(alias=n.ENV_STAGE)
    turns_table: str = Field(alias=n.ENV_TURNS_TABLE)
    tenants_table: str = Field(alias=n.ENV_TENANTS_TABLE)
    invocations_table: str = Field(alias=n.ENV_INVOCATIONS_TABLE)
    idempotency_table: str = Field(alias=n.ENV_IDEMPOTENCY_TABLE)
    quota_function_name: str = Field(alias=n.ENV_QUOTA_FUNCTION)
    audit_dlq_url: str = Field(alias=n.ENV_AUDIT_DLQ_URL)
    call_timeout_seconds: int = Field(alias=n.ENV_CALL_TIMEOUT, default=120, gt=0)
    session_timeout_seconds: int = Field(alias=n.ENV_SESSION_TIMEOUT, default=900, gt=0)
    audit_retention_days: int = Field(alias=n.ENV_AUDIT_RETENTION_DAYS, default=30, ge=1, le=180)
    stdout_cap_bytes: int = Field(alias=n.ENV_STDOUT_CAP, default=262_144, gt=0)
    stderr_cap_bytes: int = Field(alias=n.ENV_STDERR_CAP, default=32_768, gt=0)
    cache_ttl_seconds: int = Field(alias=n.ENV_CACHE_TTL, default=60, ge=0, le=60)
    # Local stack only ("" = none): see AuditWriter.spool_path.
    audit_spool_path: str = Field(alias=n.ENV_AUDIT_SPOOL, default="")
    artifacts_bucket: str = Field(alias=n.ENV_ARTIFACTS_BUCKET, default="")
    jobs_table: str = Field(alias=n.ENV_JOBS_TABLE, default="")  # background jobs
    # the live-session ledger and the turn token rule
    sessions_table: str = Field(alias=n.ENV_SESSIONS_TABLE, default="")
    require_turn_token: bool = Field(alias=n.ENV_REQUIRE_TURN_TOKEN, default=True)

    # programmatic tool calling
    continuations_table: str = Field(alias=n.ENV_CONTINUATIONS_TABLE)
    tool_wait_seconds: int = Field(
        alias=n.ENV_TOOL_WAIT_SECONDS, default=limits.TOOLS_WAIT_SECONDS, ge=1, le=limits.TOOLS_WAIT_SECONDS
    )


class ReaperSettings(EgressSettings):
    """The reaper and warm-pool refill: what it reads and whom it may stop."""

    stage: str = Field(alias=n.ENV_STAGE)
    sessions_table: str = Field(alias=n.ENV_SESSIONS_TABLE)
    turns_table: str = Field(alias=n.ENV_TURNS_TABLE)
    tenants_table: str = Field(alias=n.ENV_TENANTS_TABLE)
    call_timeout_seconds: int = Field(alias=n.ENV_CALL_TIMEOUT, default=120, gt=0)
    session_timeout_seconds: int = Field(alias=n.ENV_SESSION_TIMEOUT, default=900, gt=0)
    cache_ttl_seconds: int = Field(alias=n.ENV_CACHE_TTL, default=60, ge=0, le=60)
    # Background jobs: the reaper ends jobs nobody polls (job_sweep) — their one audit
    # row, shaped with the stage's output caps exactly as dispatch would answer them.
    jobs_table: str = Field(alias=n.ENV_JOBS_TABLE, default="")
    invocations_table: str = Field(alias=n.ENV_INVOCATIONS_TABLE, default="")
    audit_dlq_url: str = Field(alias=n.ENV_AUDIT_DLQ_URL, default="")
    audit_retention_days: int = Field(alias=n.ENV_AUDIT_RETENTION_DAYS, default=30, ge=1, le=180)
    audit_spool_path: str = Field(alias=n.ENV_AUDIT_SPOOL, default="")  # local stack only
    stdout_cap_bytes: int = Field(alias=n.ENV_STDOUT_CAP, default=262_144, gt=0)
    stderr_cap_bytes: int = Field(alias=n.ENV_STDERR_CAP, default=32_768, gt=0)
    # Interrupted calls: the reaper finishes calls whose dispatch died (interrupted_sweep)
    # on the idempotency table; their row goes through the audit table/DLQ settings above.
    idempotency_table: str = Field(alias=n.ENV_IDEMPOTENCY_TABLE, default="")
    # Paused tool calls: the reaper asks dispatch to end those past their wait bound.
    dispatch_function_name: str = Field(alias=n.ENV_DISPATCH_FUNCTION, default="")
    # Jobs the reaper ends: their files are stored as artifacts here, as dispatch stores them.
    artifacts_bucket: str = Field(alias=n.ENV_ARTIFACTS_BUCKET, default="")


class BackstopSettings(_Settings):
    stage: str = Field(alias=n.ENV_STAGE)
    findings_table: str = Field(alias=n.ENV_FINDINGS_TABLE)


@lru_cache(maxsize=1)
def quota_settings() -> QuotaSettings:
    return QuotaSettings.model_validate(dict(os.environ))


@lru_cache(maxsize=1)
def dispatch_settings() -> DispatchSettings:
    return DispatchSettings.model_validate(dict(os.environ))


@lru_cache(maxsize=1)
def backstop_settings() -> BackstopSettings:
    return BackstopSettings.model_validate(dict(os.environ))


@lru_cache(maxsize=1)
def reaper_settings() -> ReaperSettings:
    return ReaperSettings.model_validate(dict(os.environ))


def clear_caches() -> None:
    for getter in (quota_settings, dispatch_settings, backstop_settings, reaper_settings):
        getter.cache_clear()
