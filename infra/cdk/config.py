"""Typed per-stage configuration, validated at synth. Stage differences are data here, never
`if prod:` in the stacks.

A stage's tenants and agent principals are deployment data, not code: each stage names a JSON
file (`tenants_file`, under `infra/tenants/`) that `build_config` reads and validates through the
same models; `docs/tenants.md` describes the file. Every refusal names the field at fault
(`tenants[2].environments[0]: ...`).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from sandbox_common import dimensions, egress_policy, limits
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
    """A tenant's own S3 data: granted to its interpreter execution roles only.

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
    data: TenantData = TenantData()  # none by default
    # The short names of the tenant's own secrets (`sandboxctl secrets put`): the only secrets an
    # egress credential template of this tenant may name.
    secrets: tuple[str, ...] = ()
    # The initial egress policy of each `allowlist` environment (sandbox_common.egress_policy's
    # JSON shape), written to the policy store at deploy; an allowlist environment not named here
    # starts with an empty allowlist. `sandboxctl egress set` replaces it at run time.
    egress: dict[str, dict[str, Any]] = Field(default_factory=dict)

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

    @field_validator("secrets")
    @classmethod
    def _secret_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not n.SECRET_NAME_RE.match(name):
                raise ValueError(f"secret name {name!r} must match {n.SECRET_NAME_RE.pattern}")
        if len(set(value)) != len(value):
            raise ValueError("secret names must not repeat")
        return value

    @model_validator(mode="after")
    def _egress_policies(self) -> TenantConfig:
        """Each policy names an `allowlist` environment the tenant declares and parses against the
        tenant's own secrets; the message names the field (`egress.default-allowlist.allow[0].host`)."""
        for env, raw in self.egress.items():
            where = f"egress.{env}"
            if env not in self.environments:
                raise ValueError(f"{where}: environment {env!r} is not declared for the tenant")
            if n.EGRESS_MODE.get(env) != egress_policy.ALLOWLIST:
                raise ValueError(
                    f"{where}: environment {env!r} has egress {n.EGRESS_MODE.get(env)!r}; "
                    "only an allowlist environment has a policy"
                )
            try:
                egress_policy.parse_policy(raw, secrets=self.secrets)
            except egress_policy.PolicyError as exc:
                raise ValueError(f"{where}.{exc.field}: {exc.reason}") from None
        return self

    def initial_policy(self, environment: str) -> egress_policy.EgressPolicy:
        """The initial policy of one of the tenant's allowlist environments (empty if not given)."""
        raw = self.egress.get(environment)
        if raw is None:
            return egress_policy.EMPTY_ALLOWLIST
        return egress_policy.parse_policy(raw, secrets=self.secrets)

    @property
    def allowlist_environments(self) -> tuple[str, ...]:
        return tuple(e for e in self.environments if n.EGRESS_MODE[e] == egress_policy.ALLOWLIST)

    @model_validator(mode="after")
    def _templates_use_declared_environments(self) -> TenantConfig:
        for template, env in self.templates.items():
            if not n.REQUEST_ID_RE.match(template):
                raise ValueError(f"templates.{template}: template id must match {n.REQUEST_ID_RE.pattern}")
            if env is not None and env not in self.environments:
                raise ValueError(
                    f"templates.{template}: environment {env!r} is not declared in the tenant's "
                    f"environments ({', '.join(self.environments)})"
                )
        return self


ROLE_ARN_RE = re.compile(r"^arn:aws[a-z-]*:iam::(?P<account>\d{12}):role/(?:[\w+=,.@-]+/)*[\w+=,.@-]{1,64}$")


class AgentPrincipal(_Model):
    """An agent runtime allowed to invoke dispatch: the IAM role it runs as (this account or
    another), and optionally the tenants it may act for. A scoped principal is granted only the
    per-tenant aliases of dispatch (`sandbox_common.agent_scope`); dispatch refuses a call through
    such an alias for any other tenant. `tenants` omitted = every tenant (the unqualified function).
    """

    principal: str
    tenants: tuple[str, ...] | None = None

    @field_validator("principal")
    @classmethod
    def _role_arn(cls, value: str) -> str:
        if not ROLE_ARN_RE.match(value):
            raise ValueError(
                f"{value!r} is not an IAM role ARN (arn:aws:iam::<12-digit account>:role/<name>)"
            )
        return value

    @field_validator("tenants")
    @classmethod
    def _scope(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("an empty scope grants nothing; omit `tenants` to allow every tenant")
        for index, tenant in enumerate(value):
            if not n.TENANT_ID_RE.match(tenant):
                raise ValueError(f"[{index}] {tenant!r} is not a tenant id ({n.TENANT_ID_RE.pattern})")
        if len(set(value)) != len(value):
            raise ValueError("tenants must not repeat")
        return value

    @property
    def account(self) -> str:
        match = ROLE_ARN_RE.match(self.principal)
        assert match is not None  # validated
        return match["account"]


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


# Fargate's valid memory sizes (MiB) for each CPU size (units of 1/1024 vCPU).
FARGATE_MEMORY_MIB: dict[int, range] = {
    256: range(512, 2049, 512),
    512: range(1024, 4097, 1024),
    1024: range(2048, 8193, 1024),
}
AZ_ID_RE = re.compile(r"^[a-z]{2,6}[0-9]-az[0-9]{1,2}$")
MAX_AVAILABILITY_ZONES = 3


class EgressStage(_Model):
    """The stage's egress path on AWS (docs/egress.md): a sessions VPC with isolated subnets only
    (VPC-mode interpreters), an egress VPC (the proxy service, its internal load balancer and the
    NAT gateways, the only way out), peered to it, and the proxy service's size."""

    sessions_cidr: str = "10.64.0.0/16"
    egress_cidr: str = "10.65.0.0/16"
    availability_zones: int = Field(default=2, ge=2, le=MAX_AVAILABILITY_ZONES)
    # AgentCore places VPC-mode sessions only in the AZ IDs it supports in the region (use1-az1,
    # use1-az2, use1-az4 in us-east-1): name them here (`aws ec2 describe-availability-zones`);
    # empty = the region's first AZs by name, which differ per account.
    availability_zone_ids: tuple[str, ...] = ()
    nat_gateways: int = Field(default=1, ge=1, le=3)
    proxy_port: int = Field(default=8080, ge=1024, le=65535)
    proxy_cpu: Literal[256, 512, 1024] = 256
    proxy_memory_mib: int = 512
    proxy_min_tasks: int = Field(default=1, ge=1, le=20)
    proxy_max_tasks: int = Field(default=3, ge=1, le=20)
    proxy_cpu_target_percent: int = Field(default=60, ge=10, le=90)
    # The proxy CA made at the first deploy (a new CA means new sessions trust only the new one).
    ca_validity_days: int = Field(default=1095, ge=30, le=3650)

    @field_validator("sessions_cidr", "egress_cidr")
    @classmethod
    def _cidr(cls, value: str) -> str:
        try:
            net = ipaddress.IPv4Network(value)
        except ValueError:
            raise ValueError(f"{value!r} is not an IPv4 network (a.b.c.d/n)") from None
        if not net.is_private or not 16 <= net.prefixlen <= 20:
            raise ValueError(f"{value!r} must be a private network of size /16 to /20")
        return str(net)

    @field_validator("availability_zone_ids")
    @classmethod
    def _az_ids(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for az in value:
            if not AZ_ID_RE.match(az):
                raise ValueError(f"{az!r} is not an availability zone id (e.g. use1-az1)")
        if len(set(value)) != len(value):
            raise ValueError("availability zone ids must not repeat")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> EgressStage:
        if ipaddress.IPv4Network(self.sessions_cidr).overlaps(ipaddress.IPv4Network(self.egress_cidr)):
            raise ValueError("sessions_cidr and egress_cidr overlap (the VPCs are peered)")
        if self.availability_zone_ids and len(self.availability_zone_ids) != self.availability_zones:
            raise ValueError(
                f"availability_zone_ids names {len(self.availability_zone_ids)} zones; "
                f"availability_zones is {self.availability_zones}"
            )
        if self.nat_gateways > self.availability_zones:
            raise ValueError("nat_gateways: at most one per availability zone")
        if self.proxy_memory_mib not in FARGATE_MEMORY_MIB[self.proxy_cpu]:
            sizes = FARGATE_MEMORY_MIB[self.proxy_cpu]
            raise ValueError(
                f"proxy_memory_mib {self.proxy_memory_mib} is not a Fargate size for proxy_cpu "
                f"{self.proxy_cpu} ({sizes.start} to {sizes.stop - 1} in steps of {sizes.step})"
            )
        if self.proxy_min_tasks > self.proxy_max_tasks:
            raise ValueError("proxy_min_tasks is above proxy_max_tasks")
        return self


class StageConfig(_Model):
    name: str
    account: str | None = None
    region: str | None = None
    architecture: Architecture = "arm64"
    tenants: tuple[TenantConfig, ...] = ()
    caps: Caps = Caps()
    call_timeout_seconds: int = Field(default=120, ge=1, le=840)
    session_timeout_seconds: int = Field(default=900, ge=60, le=28_800)
    # How long a paused tool call waits for its result (at most 300 s).
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
    # a stage may accept token-less turns for callers not yet upgraded (default: required)
    require_turn_token: bool = True
    # Tenants are sharded in config order: append new tenants at the end so only the last shard changes.
    tenants_per_shard: int = Field(default=40, ge=1, le=50)
    # Agent runtimes granted lambda:InvokeFunction on dispatch (see AgentPrincipal).
    agents: tuple[AgentPrincipal, ...] = ()
    # Where the stage's tenants and agents come from (repo-relative JSON; None = given inline).
    tenants_file: str | None = None
    # Every tenant id of the tenants file in order, removed ones included: a removed tenant keeps
    # its slot, so no later tenant moves to another shard stack (empty = the order of `tenants`).
    tenant_slots: tuple[str, ...] = ()
    # The egress path of `allowlist` environments; None = no VPC, proxy or package index (then no
    # tenant may declare an allowlist environment).
    egress: EgressStage | None = EgressStage()

    @field_validator("audit_retention_days")
    @classmethod
    def _retention_ceiling(cls, value: int) -> int:
        if value > AUDIT_RETENTION_CEILING_DAYS:
            raise ValueError(
                f"audit retention {value} days is over the {AUDIT_RETENTION_CEILING_DAYS}-day ceiling"
            )
        return value

    @model_validator(mode="after")
    def _unique_tenants(self) -> StageConfig:
        first: dict[str, int] = {}
        for index, tenant in enumerate(self.tenants):
            if tenant.id in first:
                raise ValueError(
                    f"tenants[{index}].id: tenant id {tenant.id!r} repeats tenants[{first[tenant.id]}]"
                )
            first[tenant.id] = index
        missing = [t.id for t in self.tenants if self.tenant_slots and t.id not in self.tenant_slots]
        if missing or len(set(self.tenant_slots)) != len(self.tenant_slots):
            raise ValueError(f"tenant_slots: must list every tenant once (missing {missing})")
        return self

    @model_validator(mode="after")
    def _agents_name_known_tenants(self) -> StageConfig:
        """A scope naming a tenant the stage does not deploy would grant an alias that cannot exist."""
        known = {t.id for t in self.tenants}
        seen: dict[str, int] = {}
        for index, agent in enumerate(self.agents):
            if agent.principal in seen:
                raise ValueError(
                    f"agents[{index}].principal: {agent.principal!r} repeats agents[{seen[agent.principal]}]"
                )
            seen[agent.principal] = index
            for position, tenant in enumerate(agent.tenants or ()):
                if tenant not in known:
                    raise ValueError(
                        f"agents[{index}].tenants[{position}]: unknown tenant {tenant!r} "
                        "(not one of this stage's tenants)"
                    )
        return self

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
    def _allowlist_needs_egress(self) -> StageConfig:
        if self.egress is None:
            for i, tenant in enumerate(self.tenants):
                if tenant.allowlist_environments:
                    raise ValueError(
                        f"tenants[{i}].environments: tenant {tenant.id!r} declares "
                        f"{tenant.allowlist_environments[0]!r} (egress allowlist) but the stage has no "
                        "egress (egress: null)"
                    )
        return self

    @model_validator(mode="after")
    def _timeouts(self) -> StageConfig:
        if self.call_timeout_seconds >= self.session_timeout_seconds:
            raise ValueError("call_timeout_seconds must be shorter than session_timeout_seconds")
        return self

    def shards(self) -> list[tuple[int, tuple[TenantConfig, ...]]]:
        """(shard index, its tenants) in slot order, shards left empty by removals omitted."""
        by_id = {t.id: t for t in self.tenants}
        slots = self.tenant_slots or tuple(by_id)
        size = self.tenants_per_shard
        shards = []
        for index, start in enumerate(range(0, len(slots), size)):
            tenants = tuple(by_id[i] for i in slots[start : start + size] if i in by_id)
            if tenants:
                shards.append((index, tenants))
        return shards

    def shard_of(self, tenant_id: str) -> int:
        """The shard index a tenant's slot falls in (its stack is naming.shard_stack_name)."""
        slots = self.tenant_slots or tuple(t.id for t in self.tenants)
        return slots.index(tenant_id) // self.tenants_per_shard

    def scoped_tenants(self) -> tuple[str, ...]:
        """Tenants some scoped agent principal may act for: each gets its alias of dispatch."""
        return tuple(sorted({t for a in self.agents for t in (a.tenants or ())}))

    def tenant(self, tenant_id: str) -> TenantConfig | None:
        return next((t for t in self.tenants if t.id == tenant_id), None)


REPO_ROOT = Path(__file__).resolve().parents[2]
TENANTS_DIR = "infra/tenants"

# Raw stage data. Everything not named takes the StageConfig default; the tenants and agent
# principals come from each stage's tenants file (`docs/tenants.md`).
STAGES: dict[str, dict[str, Any]] = {
    "local": {"tenants_file": f"{TENANTS_DIR}/local.json"},
    "dev": {"tenants_file": f"{TENANTS_DIR}/dev.json", "log_retention_days": 14},
    "staging": {"tenants_file": f"{TENANTS_DIR}/staging.json", "log_retention_days": 30},
    "prod": {
        "tenants_file": f"{TENANTS_DIR}/prod.json",
        "log_retention_days": 90,
        "removal_policy": "retain",
        "audit_retention_days": 30,
        # Two proxy tasks in two AZs behind the load balancer, one NAT gateway per AZ: losing an
        # AZ does not close egress.
        "egress": EgressStage(
            nat_gateways=2, proxy_cpu=512, proxy_memory_mib=1024, proxy_min_tasks=2, proxy_max_tasks=6
        ),
    },
}
# The keys of a tenants file (anything else is refused, like any unknown field).
TENANTS_FILE_KEYS = ("tenants", "agents")


def tenants_file_path(path: str) -> Path:
    """A tenants file named in a stage's config: relative to the repository, or absolute."""
    candidate = Path(path)
    return candidate if candidate.is_absolute() else REPO_ROOT / candidate


def read_tenants_file(path: str) -> dict[str, Any]:
    """The file's raw document: `{"tenants": [...], "agents": [...]}`; ConfigError if unreadable."""
    file = tenants_file_path(path)
    try:
        document = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError("not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"unreadable ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(document, dict):
        raise ConfigError("must be a JSON object with `tenants` and `agents`")
    unknown = sorted(set(document) - set(TENANTS_FILE_KEYS))
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown key (expected tenants, agents)")
    return document


def stage_data(document: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
    """StageConfig fields from a tenants file: the tenants in order (removed ones, written
    `{"id": ..., "removed": true}`, leave only their slot) and the agents; and for each tenant
    kept, its index in the file (so a refusal names the entry as written)."""
    raw = document.get("tenants", [])
    if not isinstance(raw, list):
        raise ConfigError("tenants: must be a list")
    tenants: list[Any] = []
    positions: list[int] = []
    slots: list[Any] = []
    first: dict[str, int] = {}
    for index, entry in enumerate(raw):
        if not isinstance(entry, dict):
            raise ConfigError(f"tenants[{index}]: must be an object with an `id`")
        tenant_id = entry.get("id")
        if isinstance(tenant_id, str) and tenant_id in first:
            raise ConfigError(
                f"tenants[{index}].id: tenant id {tenant_id!r} repeats tenants[{first[tenant_id]}]"
            )
        if isinstance(tenant_id, str):
            first[tenant_id] = index
        if "removed" in entry:
            if entry["removed"] is not True or set(entry) != {"id", "removed"}:
                raise ConfigError(
                    f'tenants[{index}]: a removed tenant is written {{"id": ..., "removed": true}} only'
                )
        else:
            tenants.append(entry)
            positions.append(index)
        slots.append(tenant_id)
    return {"tenants": tenants, "agents": document.get("agents", []), "tenant_slots": slots}, positions


def _describe(errors: list[Any], positions: list[int] | None = None) -> str:
    """Pydantic errors as `field.path: problem`, the path as written in the file (`positions`:
    a kept tenant's index in the file)."""
    problems = []
    for error in errors:
        path = ""
        loc = list(error["loc"])
        if positions and len(loc) > 1 and loc[0] == "tenants" and isinstance(loc[1], int):
            loc[1] = positions[loc[1]]
        for part in loc:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "literal_error":
            message = f"{error['input']!r} is not one of {error['ctx']['expected']}"
        sub = _SUBPATH_RE.match(message)
        if sub:  # a model-level check that names the field it refuses
            path = f"{path}{'' if sub['path'].startswith('[') or not path else '.'}{sub['path']}"
            message = message[sub.end() :]
        problems.append(f"{path or 'config'}: {message}")
    return "; ".join(problems)


_SUBPATH_RE = re.compile(r"^(?P<path>(?:[a-z_]+|\[\d+\])(?:\[\d+\]|\.[A-Za-z0-9_.:-]+?)*): ")


def build_config(
    name: str, overrides: dict[str, Any] | None = None, *, document: dict[str, Any] | None = None
) -> StageConfig:
    """Validate one stage. Unknown stage or invalid data -> ConfigError naming the fix.

    The stage's tenants file is read unless `overrides` gives the tenants (tests, benchmarks);
    `overrides["tenants_file"]` points the stage at another file (`cdk synth -c tenants_file=`);
    `document` is a tenants file's content not yet written (`sandboxctl tenant add` checks it)."""
    if name not in STAGES:
        raise ConfigError(f"unknown stage {name!r}; known stages: {', '.join(sorted(STAGES))}")
    data: dict[str, Any] = {
        "name": name,
        "account": os.environ.get("CDK_DEFAULT_ACCOUNT"),
        "region": os.environ.get("CDK_DEFAULT_REGION"),
        **STAGES[name],
        **(overrides or {}),
    }
    source = ""
    positions: list[int] | None = None
    if data.get("tenants_file") and "tenants" not in (overrides or {}):
        try:
            fields, positions = stage_data(
                read_tenants_file(data["tenants_file"]) if document is None else document
            )
        except ConfigError as exc:
            raise ConfigError(f"stage {name!r} tenants file {data['tenants_file']}: {exc}") from None
        data.update(fields)
        source = f" (tenants file {data['tenants_file']})"
    elif "tenants" in (overrides or {}):
        data["tenants_file"] = None  # given inline: `sandboxctl tenant add` has no file to edit
    try:
        return StageConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            f"stage {name!r} configuration is invalid{source}: "
            + _describe(exc.errors(include_url=False), positions)
        ) from None
