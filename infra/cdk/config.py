"""Typed per-stage configuration, validated at synth (§2). Stage differences are data here,
never `if prod:` in the stacks.
"""

from __future__ import annotations

import os
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from sandbox_common import dimensions, limits
from sandbox_common import naming as n
from sandbox_common.files import normalize_prefix

KMS_KEY_ARN_RE = re.compile(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[A-Za-z0-9-]+$")

RemovalPolicyName = Literal["destroy", "retain"]
Architecture = Literal["arm64", "x86_64"]
AUDIT_RETENTION_CEILING_DAYS = 180


class ConfigError(ValueError):
    """A stage configuration that must not synthesize; the message says what to fix."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TenantData(_Model):
    """A tenant's own S3 data (SPEC §14.4): granted to its interpreter execution roles only.

    Prefixes are `s3://bucket/` or `s3://bucket/path/` (a missing trailing / is added: a prefix
    names a folder, never half a key). `kms_keys` are the ARNs of customer-managed keys that
    encrypt those objects (decrypt, plus encrypt for write prefixes); none for SSE-S3 data.
    """

    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    kms_keys: tuple[str, ...] = ()

    @field_validator("read", "write")
    @classmethod
    def _prefixes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(normalize_prefix(p) for p in value)

    @field_validator("kms_keys")
    @classmethod
    def _keys(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for arn in value:
            if not KMS_KEY_ARN_RE.match(arn):
                raise ValueError(
                    f"kms key {arn!r} must be a KMS key ARN (arn:<partition>:kms:<region>:<account>:key/<id>)"
                )
        return value

    @property
    def prefixes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*self.read, *self.write)))


class TenantConfig(_Model):
    id: str
    environments: tuple[n.Environment, ...] = ("default-public",)
    compliance_tier: n.ComplianceTier = "standard"
    # template id -> environment of its `sandbox` block (None = template without a sandbox block).
    # Published with the tenant's substrate; `sandboxctl template put` overrides at run time.
    templates: dict[str, n.Environment | None] = Field(default_factory=dict)
    data: TenantData = TenantData()  # §14.4: none by default

    @field_validator("id")
    @classmethod
    def _id_shape(cls, value: str) -> str:
        if not n.TENANT_ID_RE.match(value):
            raise ValueError(f"tenant id {value!r} must match {n.TENANT_ID_RE.pattern}")
        return value

    @field_validator("environments")
    @classmethod
    def _envs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("a tenant needs at least one environment")
        if len(set(value)) != len(value):
            raise ValueError("environments must not repeat")
        return value

    @model_validator(mode="after")
    def _templates_use_declared_environments(self) -> TenantConfig:
        for template, env in self.templates.items():
            if not n.REQUEST_ID_RE.match(template):
                raise ValueError(f"template id {template!r} must match {n.REQUEST_ID_RE.pattern}")
            if env is not None and env not in self.environments:
                raise ValueError(
                    f"template {template!r} uses environment {env!r} not declared for the tenant"
                )
        return self


class Caps(_Model):
    """The stage's value of each cap dimension (`sandbox_common.dimensions`), by name, e.g.
    `Caps(tenant_daily=500)`: a dimension not named here has its entry's default."""

    model_config = ConfigDict(extra="allow", frozen=True)

    @model_validator(mode="after")
    def _dimensions_and_values(self) -> Caps:
        for name, value in (self.model_extra or {}).items():
            if dimensions.get(name) is None:
                raise ValueError(f"{name!r} is not a cap dimension ({', '.join(dimensions.names())})")
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"cap {name} must be a non-negative integer")
        return self

    def of(self, name: str) -> int:
        dimension = dimensions.get(name)
        if dimension is None:
            raise KeyError(name)
        return int((self.model_extra or {}).get(name, dimension.default))


class AlarmThresholds(_Model):
    cap_breach_spike_per_tenant: int = Field(default=50, ge=1)  # refusals per tenant per 5 min
    dispatch_errors: int = Field(default=5, ge=1)  # Lambda errors per 5 min
    readiness_failures: int = Field(default=1, ge=1)
    quota_fail_closed: int = Field(default=1, ge=1)
    session_stop_failures: int = Field(default=1, ge=1)
    sessions_reaped: int = Field(default=10, ge=1)  # leaked sessions stopped by the reaper per 5 min
    turn_token_rejected: int = Field(default=20, ge=1)  # turn-token refusals per 5 min (a spike)
    egress_denied_burst: int = Field(default=20, ge=1)  # egress proxy refusals per 5 min, all tenants


class StageConfig(_Model):
    name: str
    account: str | None = None
    region: str | None = None
    architecture: Architecture = "arm64"
    tenants: tuple[TenantConfig, ...] = ()
    caps: Caps = Caps()
    call_timeout_seconds: int = Field(default=120, ge=1, le=840)
    session_timeout_seconds: int = Field(default=900, ge=60, le=28_800)
    # How long a paused tool call waits for its result (SPEC §15: at most 300 s).
    tool_wait_seconds: int = Field(default=limits.TOOLS_WAIT_SECONDS, ge=1, le=limits.TOOLS_WAIT_SECONDS)
    stdout_cap_bytes: int = Field(default=262_144, gt=0)
    stderr_cap_bytes: int = Field(default=32_768, gt=0)
    audit_retention_days: int = Field(default=30, ge=1)
    log_retention_days: int = 30
    removal_policy: RemovalPolicyName = "destroy"
    alarm_thresholds: AlarmThresholds = AlarmThresholds()
    alarm_emails: tuple[str, ...] = ()
    alarm_sns_subscribers: tuple[str, ...] = ()  # ARNs of existing topics/queues to notify
    cost_per_call_usd: str = "0"
    # §16.5: a stage may accept token-less turns for callers not yet upgraded (default: required)
    require_turn_token: bool = True
    # Tenants are sharded in config order: append new tenants at the end so only the last shard changes.
    tenants_per_shard: int = Field(default=40, ge=1, le=50)

    @field_validator("audit_retention_days")
    @classmethod
    def _retention_ceiling(cls, value: int) -> int:
        if value > AUDIT_RETENTION_CEILING_DAYS:
            raise ValueError(
                f"audit retention {value} days is over the {AUDIT_RETENTION_CEILING_DAYS}-day ceiling"
            )
        return value

    @field_validator("tenants")
    @classmethod
    def _unique_tenants(cls, value: tuple[TenantConfig, ...]) -> tuple[TenantConfig, ...]:
        ids = [t.id for t in value]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"tenant ids repeat: {', '.join(dupes)}")
        return value

    @model_validator(mode="after")
    def _data_prefixes_do_not_overlap(self) -> StageConfig:
        """Two tenants on one prefix (or one inside the other) would read each other's data."""
        owners = [(p, t.id) for t in self.tenants for p in t.data.prefixes]
        for i, (a, ta) in enumerate(owners):
            for b, tb in owners[i + 1 :]:
                if ta != tb and (a.startswith(b) or b.startswith(a)):
                    raise ValueError(f"data prefixes overlap between tenants {ta!r} ({a}) and {tb!r} ({b})")
        return self

    @model_validator(mode="after")
    def _timeouts(self) -> StageConfig:
        if self.call_timeout_seconds >= self.session_timeout_seconds:
            raise ValueError("call_timeout_seconds must be shorter than session_timeout_seconds")
        return self

    def shards(self) -> list[tuple[TenantConfig, ...]]:
        size = self.tenants_per_shard
        return [self.tenants[i : i + size] for i in range(0, len(self.tenants), size)]

    def tenant(self, tenant_id: str) -> TenantConfig | None:
        return next((t for t in self.tenants if t.id == tenant_id), None)


_DEMO_TENANTS = (
    TenantConfig(
        id="acme", environments=("default-public", "internal-only"), templates={"analyst": "default-public"}
    ),
    TenantConfig(id="globex", environments=("default-public",), templates={"analyst": "default-public"}),
    # `sandboxctl pilot --tenant canary` (the post-deploy canary) temporarily lowers this tenant's
    # agent_hourly cap to prove the breaker; a dedicated tenant keeps that off real tenants.
    TenantConfig(id="canary", environments=("default-public",), templates={"analyst": "default-public"}),
)

# The local stage's acme may read its folder of the demo data bucket the local stack creates
# (docs/files.md).
# acme and globex have the governed egress environment (`default-allowlist`, VPC network mode, an
# empty allow list until `sandboxctl egress set`) with its template `allowlisted`: two tenants, so
# that one tenant's policy and credentials are seen never to serve the other.
_ALLOWLISTED = ("acme", "globex")


def _local(tenant: TenantConfig) -> TenantConfig:
    update: dict = {}
    if tenant.id == "acme":
        update["data"] = TenantData(read=(f"s3://{n.demo_data_bucket_name('local')}/{tenant.id}/",))
    if tenant.id in _ALLOWLISTED:
        update["environments"] = (*tenant.environments, "default-allowlist")
        update["templates"] = {**tenant.templates, "allowlisted": "default-allowlist"}
    return tenant.model_copy(update=update)


_LOCAL_TENANTS = tuple(_local(t) for t in _DEMO_TENANTS)

# Raw stage data. Everything not named takes the StageConfig default (= SPEC §12 defaults).
STAGES: dict[str, dict] = {
    "local": {"tenants": _LOCAL_TENANTS},
    "dev": {"tenants": _DEMO_TENANTS, "log_retention_days": 14},
    "staging": {"tenants": _DEMO_TENANTS, "log_retention_days": 30},
    "prod": {
        "tenants": _DEMO_TENANTS,
        "log_retention_days": 90,
        "removal_policy": "retain",
        "audit_retention_days": 30,
    },
}


def build_config(name: str, overrides: dict | None = None) -> StageConfig:
    """Validate one stage. Unknown stage or invalid data -> ConfigError naming the fix."""
    if name not in STAGES:
        raise ConfigError(f"unknown stage {name!r}; known stages: {', '.join(sorted(STAGES))}")
    data = {
        "name": name,
        "account": os.environ.get("CDK_DEFAULT_ACCOUNT"),
        "region": os.environ.get("CDK_DEFAULT_REGION"),
        **STAGES[name],
        **(overrides or {}),
    }
    try:
        return StageConfig.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'config'}: {e['msg']}"
            for e in exc.errors(include_url=False)
        )
        raise ConfigError(f"stage {name!r} configuration is invalid: {problems}") from None
