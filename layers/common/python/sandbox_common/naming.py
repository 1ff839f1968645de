"""Every name of the system, declared once, grouped by kind: request ids, actions, environments,
DynamoDB tables (each with its item attributes, key values and indexes), S3 objects, SSM
parameters, Lambda functions, environment variables, metrics, alarms, stacks and their outputs,
response fields and failure reasons, reaper hooks, the local stack's. No name is bound twice.

Imported by the CDK code (infra/cdk), the Lambdas, the local stack, the CLI and the tests, so a
name changes in one place only. Limits and durations are `sandbox_common.limits`, the cap
dimensions `sandbox_common.dimensions`. Stdlib only.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

PROJECT = "thinkwork"
METRICS_NAMESPACE = "ThinkworkSandbox"


# --- ids --------------------------------------------------------------------------------------------
TENANT_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")  # config-time tenant ids (SPEC §2)
REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")  # every id in a request (§11)
INTERPRETER_NAME_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9_]{0,47}$")  # AgentCore name rule (§3)
# Turn token (§16.5): 43–128 characters of URL-safe base64 without padding (≥ 32 random bytes).
TURN_TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{43,128}$")
# A tool name as agent frameworks spell them (Anthropic/Strands: letters, digits, _ and -).
TOOL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
# A tenant secret's short name (`crm-token`), as egress credential templates name it.
SECRET_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")


# --- actions ----------------------------------------------------------------------------------------
class Action(StrEnum):
    """Every action of the dispatch event (`{"action": ...}`): each is spelled here only."""

    BEGIN_TURN = "begin_turn"
    EXECUTE_CODE = "execute_code"
    END_TURN = "end_turn"
    GET_FILE = "get_file"
    GET_JOB = "get_job"
    CANCEL_JOB = "cancel_job"
    RESUME = "resume"
    # Internal, sent by the reaper's paused-calls hook: end the paused calls past their wait bound
    # (§15). Its answer is `{"ok": true}`; it ends nothing the bound has not already ended.
    SWEEP_PAUSED_CALLS = "sweep_paused_calls"


# The actions an agent sends (an unknown action's message lists these; the internal one is not).
AGENT_ACTIONS: tuple[Action, ...] = tuple(a for a in Action if a is not Action.SWEEP_PAUSED_CALLS)


# --- environments and compliance tiers --------------------------------------------------------------
Environment = Literal["default-public", "internal-only", "default-allowlist"]
ENVIRONMENTS: tuple[str, ...] = ("default-public", "internal-only", "default-allowlist")
# The Code Interpreter network mode each environment is created with (create-only on AWS) ...
NETWORK_MODE: dict[str, str] = {
    "default-public": "PUBLIC",
    "internal-only": "SANDBOX",
    "default-allowlist": "VPC",
}
# ... and its egress (sandbox_common.egress_policy): `public` goes anywhere, `none` nowhere, and
# `allowlist` only through the stage's egress proxy, by the tenant's policy for that environment.
EGRESS_MODE: dict[str, str] = {
    "default-public": "public",
    "internal-only": "none",
    "default-allowlist": "allowlist",
}
_ENV_SHORT = {"default-public": "pub", "internal-only": "int", "default-allowlist": "alw"}

ComplianceTier = Literal["standard", "regulated", "hipaa"]
COMPLIANCE_TIERS: tuple[str, ...] = ("standard", "regulated", "hipaa")


# --- DynamoDB tables ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Index:
    name: str
    pk: str
    sk: str | None = None


# The expiry attribute (epoch seconds) of every table with a DynamoDB TTL.
TTL_ATTRIBUTE = "expires_at"


@dataclass(frozen=True)
class TableSpec:
    """Everything about a table that the CDK stack and the local stack must agree on."""

    logical: str
    pk: str
    sk: str | None = None
    ttl_attribute: str | None = None
    indexes: tuple[Index, ...] = field(default_factory=tuple)
    pitr: bool = True
    stream: str | None = None  # a DynamoDB stream's view type (KEYS_ONLY, ...), when it has one

    def physical(self, stage: str) -> str:
        return f"{PROJECT}-{stage}-{self.logical}"

    @property
    def sort_key(self) -> str:
        """The sort key's name, for tables that have one (typed `str`, unlike `sk`)."""
        if self.sk is None:
            raise ValueError(f"table {self.logical} has no sort key")
        return self.sk

    def key(self, pk: str, sk: str | None = None) -> dict[str, dict[str, str]]:
        """An item's key in DynamoDB's wire form (string attributes), given the sort key's value iff
        the table has one."""
        if (sk is None) != (self.sk is None):
            raise ValueError(f"table {self.logical}: key needs {'a' if self.sk else 'no'} sort key value")
        key = {self.pk: {"S": pk}}
        if self.sk is not None and sk is not None:
            key[self.sk] = {"S": sk}
        return key

    @property
    def ttl(self) -> str:
        if self.ttl_attribute is None:
            raise ValueError(f"table {self.logical} has no TTL attribute")
        return self.ttl_attribute


# Circuit-breaker counters (§5.1): one item per window and key (see sandbox_common.dimensions),
# written by sandbox-quota-check, read by sandboxctl. The "counted" marker of a call_id (a retry
# is never counted twice) lives in the tenant-daily table, naming the counter items it went to.
TENANT_DAILY_COUNTERS = TableSpec(
    "sandbox_tenant_daily_counters", pk="counter_key", ttl_attribute=TTL_ATTRIBUTE
)
AGENT_HOURLY_COUNTERS = TableSpec(
    "sandbox_agent_hourly_counters", pk="counter_key", ttl_attribute=TTL_ATTRIBUTE
)
COUNTER_ATTR_COUNT = "call_count"  # not "count": that is a DynamoDB reserved word
COUNTER_ATTR_TENANT = "tenant_id"
COUNTER_ATTR_AGENT = "agent_id"  # items of a dimension keyed by agent only
COUNTER_ATTR_WINDOW = "window"  # "2026-11-21" (daily) or "2026-11-21T08" (hourly)
COUNTER_ATTR_BYTES = "byte_count"  # a bytes dimension's counter (egress_daily_bytes), added by the proxy
QUOTA_MARKER_PREFIX = "counted#"
# A tenant's breaker version, also in the tenant-daily table: when a quota container refused a call
# of the tenant on caps it read at time T (epoch ms), the item holds T, and a container whose caps
# are older reads them again before it may admit (docs/circuit-breakers.md). Not a counter item.
QUOTA_BREAKER_PREFIX = "breaker#"
QUOTA_BREAKER_ATTR_SEEN = "caps_read_ms"
QUOTA_MARKER_ATTR_DAILY_KEY = "daily_key"  # the counter items this call's count went to,
QUOTA_MARKER_ATTR_HOURLY_KEY = "hourly_key"  # so a release undoes exactly that count

# The audit trail (§7.1): one row per counted call. Attributes beyond audit.AUDIT_ATTRIBUTES:
INVOCATIONS_BY_TENANT_TIME = Index("by_tenant_time", pk="tenant_id", sk="started_at")
INVOCATIONS_BY_SESSION = Index("by_session", pk="session_id", sk="started_at")
INVOCATIONS = TableSpec(
    "sandbox_invocations",
    pk="invocation_id",
    ttl_attribute=TTL_ATTRIBUTE,
    indexes=(INVOCATIONS_BY_TENANT_TIME, INVOCATIONS_BY_SESSION),
)
AUDIT_ATTR_RETRIES = "retries"  # the call's visible retries (§16.6)
AUDIT_ATTR_COST = "estimated_cost_usd"  # the price in force when the code ran, else 0 (§9)
# What left the sandbox during the call: {mode, allowed, denied, denied_hosts, bytes_out, bytes_in}
# (sandbox_common.egress_usage), on every row.
AUDIT_ATTR_EGRESS = "egress"
AUDIT_TOOL_CALLS = "tool_calls"  # a tool-calling call's count of tool calls (§15) ...
AUDIT_TOOL_CALL_RECORDS = "tool_call_records"  # ... and {name, input_sha256, duration_ms, ok} each
# `sandboxctl usage --by`: the audit attribute each grouping reads (day = started_at's UTC date).
USAGE_GROUPINGS: dict[str, str] = {"day": "started_at", "agent": "agent_id", "template": "template_id"}

# Turn -> owner agent, token hash, session (§4.5). Keyed by (tenant_id, turn_id). "_v2": the key
# schema changed from (turn_id) and CloudFormation cannot replace a table with a fixed name in
# place; turn items are 2-day state, so a deployed stage simply gets a new table.
TURNS = TableSpec("sandbox_turns_v2", pk="tenant_id", sk="turn_id", ttl_attribute=TTL_ATTRIBUTE)
TURN_ATTR_AGENT = "agent_id"
TURN_ATTR_TOKEN_HASH = "turn_token_sha256"  # the only trace of the token dispatch keeps
TURN_ATTR_ENDED = "ended"
TURN_ATTR_SESSION_STATE = "session_state"
TURN_ATTR_SESSION_ID = "session_id"
TURN_ATTR_SLOT_ID = "session_slot_id"  # the live session's ledger slot: whoever stops it frees it
# A warm session of the turn's pool that begin_turn picked (a hint, not a claim): a map
# {slot_id, session_id, interpreter_id, environment, started_at}. The turn's first call claims it
# AND binds the turn to it in one TransactWriteItems; a stale hint fails that write's condition.
TURN_ATTR_WARM_HINT = "warm_hint"
# begin_turn found the turn's pool empty: a map {environment, interpreter_id, checked_at}; the
# first call then reserves a cold slot without reading the pool again.
TURN_ATTR_POOL_EMPTY = "warm_pool_empty"
# The turn's session lease (§4.5): starting (a caller holds the lease and starts the session) ->
# active (the turn points at its live session) -> stopped.
TURN_SESSION_STARTING, TURN_SESSION_ACTIVE, TURN_SESSION_STOPPED = "starting", "active", "stopped"

# Tenant policy, template sandbox blocks and the policy change history, one item collection per tenant.
# Its stream (keys only) tells the reaper that a tenant's policy item changed, whoever wrote it:
# the kill switch then reaches the tenant's running work at once.
TENANTS = TableSpec("sandbox_tenants", pk="tenant_id", sk="item", pitr=True, stream="KEYS_ONLY")
TENANT_POLICY_ITEM = "policy"
TEMPLATE_ITEM_PREFIX = "template#"
HISTORY_ITEM_PREFIX = "history#"
TEMPLATE_TOOLS_ATTRIBUTE = "tools"  # a template's tool allowlist (§15), beside `environment`
POLICY_ATTR_ENABLED = "sandbox_enabled"  # the operator's switch (sandboxctl tenant enable|disable)
POLICY_ATTR_TIER = "compliance_tier"  # standard | regulated | hipaa: only standard runs a sandbox
TIER_STANDARD = "standard"

# Powertools idempotency persistence layer defaults: key `id`, TTL `expiration`. On the record of
# an execute_code, written with the claim itself (one PutItem): the call's audit identity (JSON)
# and, while it is claimed and not finished, the keys of the sparse `by_open_attempt` index.
IDEMPOTENCY_ATTR_ATTEMPT = "attempt"
IDEMPOTENCY_ATTR_OPEN = "attempt_open"
IDEMPOTENCY_ATTR_DEADLINE = "attempt_deadline"  # the in-progress deadline, epoch ms zero-padded (S)
IDEMPOTENCY_OPEN_VALUE = "open"
IDEMPOTENCY_BY_OPEN_ATTEMPT = Index("by_open_attempt", pk=IDEMPOTENCY_ATTR_OPEN, sk=IDEMPOTENCY_ATTR_DEADLINE)
IDEMPOTENCY = TableSpec(
    "sandbox_idempotency", pk="id", ttl_attribute="expiration", indexes=(IDEMPOTENCY_BY_OPEN_ATTEMPT,)
)

# Backstop findings (§8.4), partitioned by UTC day for `findings list --since`.
FINDINGS = TableSpec("sandbox_findings", pk="finding_date", sk="finding_key", ttl_attribute=TTL_ATTRIBUTE)

# Background jobs (§17). One table, two item kinds keyed by `job_key`:
#   job#{job_id}                    a job: owner (tenant, agent, turn), session, state, outcome
#   turn#{tenant_id}#{turn_id}      the turn's running-job slot count and open job ids
# `by_tenant` lists a tenant's jobs (sandboxctl jobs list); `by_open` is sparse (only jobs not yet
# final carry JOB_ATTR_OPEN), ordered by deadline, for the reaper's job sweep and busy sessions.
JOB_ATTR_OPEN = "open_shard"
JOB_OPEN_SHARD = "open"
JOB_ATTR_SUBMITTED_AT = "submitted_at"
JOB_ATTR_DEADLINE_AT = "deadline_at"
# The SHA-256 of the job's turn token (§16.5), copied from the turn the submit claimed: get_job /
# cancel_job check the token with the job read alone. "" = a token-less turn.
JOB_ATTR_TURN_TOKEN_HASH = "turn_token_sha256"
JOBS_BY_TENANT = Index("by_tenant", pk="tenant_id", sk=JOB_ATTR_SUBMITTED_AT)
JOBS_BY_OPEN = Index("by_open", pk=JOB_ATTR_OPEN, sk=JOB_ATTR_DEADLINE_AT)
JOBS = TableSpec(
    "sandbox_jobs", pk="job_key", ttl_attribute=TTL_ATTRIBUTE, indexes=(JOBS_BY_TENANT, JOBS_BY_OPEN)
)
JOB_KEY_PREFIX = "job#"
JOB_TURN_KEY_PREFIX = "turn#"
JOB_STATES: tuple[str, ...] = ("running", "completed", "failed", "timed_out", "cancelled")

# The live-session ledger (§16.2): one item per session slot plus one counter item per tenant and
# one for the stage, all in one table so a slot and both counters change in ONE TransactWriteItems.
#   slot item     pk "slot#{slot_id}"    state starting|warm|active, tenant_id, environment, source,
#                                        session_id, interpreter_id, turn_id, agent_id, started_at,
#                                        calls, last_call_at, lease_expires_at, recycle_at
#   counter item  pk "tenant#{tenant}"   live_count       pk "global"   live_count
# `warm_pool` ("{tenant}#{environment}") is present only while a slot is warm and unclaimed: the
# sparse `by_warm_pool` index lists exactly the sessions a first call may claim.
SESSION_ATTR_LIVE_COUNT = "live_count"
SESSION_ATTR_WARM_POOL = "warm_pool"
SESSIONS_BY_WARM_POOL = Index("by_warm_pool", pk=SESSION_ATTR_WARM_POOL, sk="started_at")
SESSIONS = TableSpec(
    "sandbox_sessions", pk="ledger_key", ttl_attribute=TTL_ATTRIBUTE, indexes=(SESSIONS_BY_WARM_POOL,)
)
SESSION_SLOT_PREFIX = "slot#"
SESSION_TENANT_COUNTER_PREFIX = "tenant#"
SESSION_GLOBAL_COUNTER_KEY = "global"
SESSION_STATES: tuple[str, ...] = ("starting", "warm", "active")
SESSION_SOURCES: tuple[str, ...] = ("warm", "cold")

# Continuations of paused tool-calling calls (§15): one item per pause, keyed by the SHA-256 of the
# secret token the agent holds. `by_turn` finds a turn's paused calls (end_turn ends them). While
# paused an item carries two sparse attributes, `wait_open` and `wait_due` (when its tool wait
# bound passes, epoch ms zero-padded): `by_wait_due` lists the paused calls past their bound.
CONTINUATION_ATTR_PAUSED_AT = "paused_at"
CONTINUATION_ATTR_WAIT_OPEN = "wait_open"
CONTINUATION_ATTR_WAIT_DUE = "wait_due"
CONTINUATION_WAIT_OPEN_VALUE = "open"
CONTINUATIONS_BY_TURN = Index("by_turn", pk="turn_id", sk=CONTINUATION_ATTR_PAUSED_AT)
CONTINUATIONS_BY_WAIT_DUE = Index(
    "by_wait_due", pk=CONTINUATION_ATTR_WAIT_OPEN, sk=CONTINUATION_ATTR_WAIT_DUE
)
CONTINUATIONS = TableSpec(
    "sandbox_continuations",
    pk="continuation_hash",
    ttl_attribute=TTL_ATTRIBUTE,
    indexes=(CONTINUATIONS_BY_TURN, CONTINUATIONS_BY_WAIT_DUE),
)

# The egress proxy's per-session state (sandbox_common.egress_policy; docs/egress.md), one item
# collection per session:
#   item "credential"        the session's proxy credential: tenant_id, environment, secret_sha256,
#                            issued_at, expires_at, revoked_at (set when the session stops), source
#                            (the client address bound at the readiness call)
#   item "counters"          allowed, denied, bytes_out, bytes_in, the last denied hosts with their
#                            sequence numbers, and cap_refused (a cap dimension that refused)
#   item "conn#{at}#{n}"     one connection or request: host, port, decision, reason, bytes
#   item "attributed"        the counters as far as the session's calls' audit rows took them
#                            (written by dispatch after each call; the next call starts from it)
EGRESS = TableSpec("sandbox_egress", pk="session_id", sk="item", ttl_attribute=TTL_ATTRIBUTE)
EGRESS_CREDENTIAL_ITEM = "credential"
EGRESS_COUNTERS_ITEM = "counters"
EGRESS_ATTRIBUTED_ITEM = "attributed"
EGRESS_CONNECTION_PREFIX = "conn#"
# The credential item's attributes (written by the session runner, read and bound by the proxy).
EGRESS_ATTR_TENANT = "tenant_id"
EGRESS_ATTR_ENVIRONMENT = "environment"
EGRESS_ATTR_SECRET_SHA256 = "secret_sha256"
EGRESS_ATTR_ISSUED_AT = "issued_at"  # epoch seconds
EGRESS_ATTR_REVOKED_AT = "revoked_at"  # epoch seconds; present = revoked
EGRESS_ATTR_SOURCE = "source"  # the client address the credential is bound to
# The counters item's attributes (written by the proxy, read into each call's audit row): numbers
# that only grow, so a call's share is its counters after minus before. `denied_hosts` is a map
# from a denial's sequence number (as a string) to {"host" (redacted), "seq"}: seq is the value
# `denied` took with that denial; the proxy keeps the last EGRESS_DENIED_HOSTS_KEPT of them (a
# flood's denials beyond the ones written one by one are counted without a host). `cap_refused` is
# {"dimension", "count", "at"}: the cap dimension that last refused the session a connection
# (egress_daily_bytes), how many refusals in all, and when the last was (epoch seconds).
EGRESS_ATTR_ALLOWED = "allowed"
EGRESS_ATTR_DENIED = "denied"
EGRESS_ATTR_BYTES_OUT = "bytes_out"
EGRESS_ATTR_BYTES_IN = "bytes_in"
EGRESS_ATTR_DENIED_HOSTS = "denied_hosts"
EGRESS_ATTR_CAP_REFUSED = "cap_refused"
EGRESS_DENIED_HOSTS_KEPT = 32
# The name the proxy answers itself (never forwarded): a session binds its credential to its
# address with a request to http(s)://egress.sandbox.internal/bind through the proxy.
EGRESS_PSEUDO_HOST = "egress.sandbox.internal"
EGRESS_BIND_PATH = "/bind"
# The local stack's package index, as sessions name it (the local egress proxy routes it to the
# stack's own index server; on AWS the index is the stage's CodeArtifact repository).
LOCAL_PACKAGE_INDEX_HOST = "packages.sandbox.internal"
LOCAL_PACKAGE_INDEX_URL = f"https://{LOCAL_PACKAGE_INDEX_HOST}/simple/"

ALL_TABLES: tuple[TableSpec, ...] = (
    TENANT_DAILY_COUNTERS,
    AGENT_HOURLY_COUNTERS,
    INVOCATIONS,
    TURNS,
    TENANTS,
    IDEMPOTENCY,
    FINDINGS,
    JOBS,
    SESSIONS,
    CONTINUATIONS,
    EGRESS,
)


# --- S3 objects: artifacts (§14) ------------------------------------------------------------------
OUTPUTS_DIR = "outputs"  # artifacts are collected from here, relative to the working directory
FIGURE_NAME = "figure-{n}.png"  # open matplotlib figures saved under this name (§14.2)
# Which version of each file under OUTPUTS_DIR the turn's calls have returned (path -> [size,
# mtime_ns]), kept in the session by the artifact collector and read by a job's supervisor (a job
# returns only what no call returned): relative to the working directory.
OUTPUTS_STATE_DIR = ".sandbox"
OUTPUTS_STATE_FILE = f"{OUTPUTS_STATE_DIR}/outputs-state.json"
# The in-session module in which each call's driver records when the call started (`started_ns`,
# the session's clock): files changed under OUTPUTS_DIR since then are the call's, not a job's.
CALL_START_MODULE = "_sbx_call"
SKIPPED_TOO_MANY = "too_many"
SKIPPED_TOO_LARGE = "too_large"
FILE_ID_PREFIX = "file-"
# Artifact objects live at {tenant}/{turn}/{invocation}/{filename}; the file_id → object pointer
# at {tenant}/_files/{file_id}.json ("_" cannot start a turn id: REQUEST_ID_RE), so a file_id
# resolves only under the tenant that asks: another tenant's id is simply absent.
FILE_POINTER_DIR = "_files"
# S3 user metadata of artifact objects (x-amz-meta-*): lower case, as S3 returns them.
META_FILE_ID = "file-id"
META_SHA256 = "sha256"
META_FILENAME = "filename"
META_CREATED_AT = "created-at"
META_REDACTED = "redacted"


def artifacts_bucket_name(stage: str, account: str) -> str:
    """Bucket names are global: the account keeps two accounts' stages apart."""
    return f"{PROJECT}-{stage}-artifacts-{account}"


def demo_data_bucket_name(stage: str) -> str:
    """The local stack's stand-in for a tenant's own data bucket (the demo reads a CSV from it)."""
    return f"{PROJECT}-{stage}-demo-tenant-data"


def artifact_key(tenant_id: str, turn_id: str, invocation_id: str, filename: str) -> str:
    return f"{tenant_id}/{turn_id}/{invocation_id}/{filename}"


def file_pointer_key(tenant_id: str, file_id: str) -> str:
    return f"{tenant_id}/{FILE_POINTER_DIR}/{file_id}.json"


# --- SSM parameters (the caps' are their dimensions': sandbox_common.dimensions) -------------------
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
    """Warm pool size of one tenant × environment (§16.1); absent = 0."""
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


def s3_endpoint_names(region: str) -> tuple[str, ...]:
    """The names an S3 client uses in a region (global and regional; a bucket's virtual host is a
    subdomain of either): what an allowlist session reaches directly, through the sessions VPC's
    S3 gateway endpoint (its DNS Firewall allows them and their subdomains, and the session's
    NO_PROXY names them) instead of through the egress proxy."""
    return ("s3.amazonaws.com", f"s3.{region}.amazonaws.com")


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


# --- Secrets Manager: the tenants' own secrets and the egress proxy's CA ---------------------------
def tenant_secrets_prefix(stage: str, tenant_id: str) -> str:
    """Every secret of one tenant is named under it; an egress credential reads only these."""
    if not REQUEST_ID_RE.match(tenant_id):
        raise ValueError("tenant id not valid for a secret name")
    return f"{PROJECT}/{stage}/tenants/{tenant_id}/"


def tenant_secret_name(stage: str, tenant_id: str, name: str) -> str:
    """A tenant secret by its short name (`crm-token`)."""
    if not SECRET_NAME_RE.match(name):
        raise ValueError(f"secret name {name!r} must match {SECRET_NAME_RE.pattern}")
    return f"{tenant_secrets_prefix(stage, tenant_id)}{name}"


def egress_ca_cert_secret_name(stage: str) -> str:
    """The egress proxy's CA certificate (PEM), given to the allowlist interpreters' `certificates`."""
    return f"{PROJECT}/{stage}/egress/ca-cert"


def egress_ca_key_secret_name(stage: str) -> str:
    """The CA's private key (PEM): read by the proxy only."""
    return f"{PROJECT}/{stage}/egress/ca-key"


# --- the egress proxy service (ECS on Fargate) and the stage's package index (CodeArtifact) -------
def egress_proxy_name(stage: str) -> str:
    """The proxy's ECS cluster and service, and its load balancer (≤ 32 characters)."""
    return f"{PROJECT}-{stage}-egress"[:32]


def egress_proxy_log_group(stage: str) -> str:
    return f"/{PROJECT}/{stage}/sandbox/egress-proxy"


def package_index_domain(stage: str) -> str:
    """CodeArtifact domain: lower-case letters, digits and hyphens, unique per account and region."""
    return f"{PROJECT}-{stage}"


PACKAGE_INDEX_REPOSITORY = "pypi"  # its one repository, with an external connection to public PyPI
PACKAGE_INDEX_UPSTREAM = "public:pypi"


# --- Lambda functions -----------------------------------------------------------------------------
DISPATCH = "dispatch"
QUOTA_CHECK = "sandbox-quota-check"
BACKSTOP = "backstop"
REAPER = "sandbox-reaper"  # the session reaper (§16.3), scheduled
FUNCTIONS: tuple[str, ...] = (DISPATCH, QUOTA_CHECK, BACKSTOP, REAPER)
# logical function name -> package under functions/ (handler is "<package>.handler.handler")
FUNCTION_PACKAGES: dict[str, str] = {
    DISPATCH: "dispatch",
    QUOTA_CHECK: "quota_check",
    BACKSTOP: "backstop",
    REAPER: "reaper",
}
# What dispatch and the reaper both run, shipped beside each one's own package (functions/).
SHARED_RUNTIME_PACKAGE = "sandbox_runtime"
# The egress proxy (functions/egress_proxy): run by the local stack and the stage's proxy
# container under its own virtual environment, never shipped in a Lambda.
EGRESS_PROXY_PACKAGE = "egress_proxy"
EGRESS_VENV_DIR = ".venv-egress"
# The session tag dispatch and the reaper set at AssumeRole of the session-runner role: the tenant
# the credentials serve (their session policy names that tenant's interpreters only). The role's
# trust requires it, so every runner session in CloudTrail says which tenant it was for.
RUNNER_SESSION_TAG_TENANT = "tenant_id"


def function_name(stage: str, logical: str) -> str:
    return f"{PROJECT}-{stage}-{logical}"


def handler_string(logical: str) -> str:
    return f"{FUNCTION_PACKAGES[logical]}.handler.handler"


def log_group_name(stage: str, logical: str) -> str:
    return f"/aws/lambda/{function_name(stage, logical)}"


def function_role_name(stage: str, logical: str) -> str:
    """Fixed role name per function, so a tenant shard can trust the dispatch role by ARN
    without a cross-stack export (adding a tenant then touches only its shard)."""
    return f"{PROJECT}-{stage}-{logical}-role"


def findings_audit_log_group(stage: str) -> str:
    """Where the CloudWatch Logs data protection policy sends its findings (§8.3)."""
    return f"/{PROJECT}/{stage}/sandbox/data-protection-findings"


def runner_role_name(stage: str) -> str:
    """The stage's one session-runner role: dispatch and the reaper assume it with a session
    policy naming only the serving tenant's interpreters (`sandbox_common.runner_policy`)."""
    return f"{PROJECT}-{stage}-sbx-runner"


def stage_of_runner_role(role_arn: str) -> str | None:
    """The stage whose session-runner role this is (`runner_role_name`), None for any other ARN."""
    name = role_arn.rpartition(":role/")[2]
    prefix, suffix = f"{PROJECT}-", "-sbx-runner"
    if not (name.startswith(prefix) and name.endswith(suffix)) or len(name) <= len(prefix + suffix):
        return None
    stage = name[len(prefix) : -len(suffix)]
    return stage if runner_role_name(stage) == name else None


def shared_execution_role_name(stage: str) -> str:
    """The interpreter execution role of every tenant without data grants: no permission at all
    (code in the sandbox gets no AWS access). A tenant with data grants has one of its own."""
    return f"{PROJECT}-{stage}-sbx-interpreter"


def tenant_execution_role_name(stage: str, tenant_id: str) -> str:
    """A tenant's own interpreter execution role (only a tenant with data grants has one).
    IAM role names are ≤ 64 chars: long tenant ids keep a prefix plus a hash suffix."""
    name = f"{PROJECT}-{stage}-sbx-data-{tenant_id}"
    if len(name) > 64:
        digest = hashlib.sha256(f"{stage}/{tenant_id}".encode()).hexdigest()[:10]
        name = f"{name[:53]}-{digest}"
    return name


def interpreter_name_prefix(stage: str) -> str:
    """What every Code Interpreter name of the stage starts with (the runner role's resources)."""
    return f"sbx_{stage}_".replace("-", "_")


def interpreter_name(stage: str, tenant_id: str, environment: str) -> str:
    """A Code Interpreter name AgentCore accepts: letters, digits, underscores, ≤ 48 chars.

    Hyphens are not allowed (a lesson from the peer system), so they become underscores; a name
    that would be too long keeps a readable prefix and a hash suffix so it stays unique.
    """
    base = f"{interpreter_name_prefix(stage)}{tenant_id}_{_ENV_SHORT[environment]}".replace("-", "_")
    if len(base) > 48:
        digest = hashlib.sha256(f"{stage}/{tenant_id}/{environment}".encode()).hexdigest()[:10]
        base = f"{base[:37]}_{digest}"
    assert INTERPRETER_NAME_RE.match(base), base
    return base


# --- environment variables (set by CDK, read through sandbox_common.settings) ---------------------
ENV_STAGE = "SANDBOX_STAGE"
ENV_TENANT_DAILY_TABLE = "TENANT_DAILY_COUNTERS_TABLE"
ENV_AGENT_HOURLY_TABLE = "AGENT_HOURLY_COUNTERS_TABLE"
ENV_INVOCATIONS_TABLE = "INVOCATIONS_TABLE"
ENV_TURNS_TABLE = "TURNS_TABLE"
ENV_TENANTS_TABLE = "TENANTS_TABLE"
ENV_IDEMPOTENCY_TABLE = "IDEMPOTENCY_TABLE"
ENV_FINDINGS_TABLE = "FINDINGS_TABLE"
ENV_JOBS_TABLE = "JOBS_TABLE"
ENV_SESSIONS_TABLE = "SESSIONS_TABLE"
ENV_CONTINUATIONS_TABLE = "CONTINUATIONS_TABLE"
ENV_ARTIFACTS_BUCKET = "ARTIFACTS_BUCKET"
ENV_QUOTA_FUNCTION = "QUOTA_FUNCTION_NAME"
ENV_DISPATCH_FUNCTION = "DISPATCH_FUNCTION_NAME"
ENV_REAPER_FUNCTION = "REAPER_FUNCTION_NAME"
ENV_AUDIT_DLQ_URL = "AUDIT_DLQ_URL"
ENV_CALL_TIMEOUT = "CALL_TIMEOUT_SECONDS"
ENV_SESSION_TIMEOUT = "SESSION_TIMEOUT_SECONDS"
ENV_AUDIT_RETENTION_DAYS = "AUDIT_RETENTION_DAYS"
ENV_STDOUT_CAP = "STDOUT_CAP_BYTES"
ENV_STDERR_CAP = "STDERR_CAP_BYTES"
ENV_CACHE_TTL = "CONFIG_CACHE_TTL_SECONDS"
ENV_REQUIRE_TURN_TOKEN = "REQUIRE_TURN_TOKEN"
ENV_TOOL_WAIT_SECONDS = "TOOL_WAIT_SECONDS"  # the stage's tool wait bound (§15)
ENV_EGRESS_TABLE = "EGRESS_TABLE"
# How a session of an `allowlist` environment reaches the egress proxy (a URL without credentials;
# the session's own credential is added at its start), where the proxy's CA bundle is inside the
# session, and the stage's package index as the session's pip sees it.
ENV_EGRESS_PROXY_URL = "SANDBOX_EGRESS_PROXY_URL"
ENV_EGRESS_CA_BUNDLE = "SANDBOX_EGRESS_CA_BUNDLE"
ENV_EGRESS_INDEX_URL = "SANDBOX_EGRESS_INDEX_URL"
# Local stack only, read by `sandboxctl local up` for the local egress proxy: `name=127.0.0.1:PORT,...`
# sends an allowed name to a loopback server, whose TLS is verified against the PEM file
# SANDBOX_EGRESS_TEST_CA. Without a route, loopback and private addresses are refused.
ENV_EGRESS_TEST_ROUTES = "SANDBOX_EGRESS_TEST_ROUTES"
ENV_EGRESS_TEST_CA = "SANDBOX_EGRESS_TEST_CA"
# Local stack only (tests): `name=ADDRESS,...` fixed answers the local proxy uses instead of DNS,
# checked like DNS answers (a name answered with a private or link-local address is refused).
ENV_EGRESS_TEST_RESOLVE = "SANDBOX_EGRESS_TEST_RESOLVE"
# Local stack only: the file the audit writer appends a row to when both the table and the
# dead-letter queue are unreachable (they live in the same emulated AWS); `audit replay` drains it.
ENV_AUDIT_SPOOL = "SANDBOX_AUDIT_SPOOL"
# Read by the local interpreter (infra/local/interpreter), passed through by the local stack.
# "1": sessions may run without isolation when bubblewrap cannot isolate them (warned on every start).
ENV_LOCAL_UNISOLATED = "SANDBOX_LOCAL_UNISOLATED"
# The Python that runs session code (a venv's python or a base interpreter); default: the local
# interpreter's own base interpreter. Bound read-only into the sandbox with its base installation.
ENV_SESSION_PYTHON = "SANDBOX_SESSION_PYTHON"
# In a session's environment: the Node.js and the `typescript` package its JavaScript and TypeScript
# programs run with (read by sandbox_session.node; the local interpreter sets them).
ENV_SESSION_NODE = "SANDBOX_NODE"
ENV_SESSION_TYPESCRIPT = "SANDBOX_TYPESCRIPT"


# --- metrics (namespace METRICS_NAMESPACE) --------------------------------------------------------
METRIC_CAP_EXCEEDED = "SandboxCapExceeded"
METRIC_TOKEN_DETECTED = "TokenShapedStringDetected"
METRIC_COST = "SandboxEstimatedCostUSD"
METRIC_CALLS = "SandboxCalls"
METRIC_DURATION = "SandboxDurationMs"
METRIC_TRUNCATED = "SandboxOutputTruncated"  # 1 when stdout or stderr was truncated, else 0: Average = rate
METRIC_INVALID_REQUEST = "SandboxInvalidRequest"
METRIC_READINESS_FAILED = "SandboxReadinessFailed"
METRIC_SESSION_STOP_FAILED = "SandboxSessionStopFailed"
METRIC_QUOTA_FAIL_CLOSED = "SandboxQuotaFailClosed"
METRIC_CAP_PARAMETER_INVALID = "SandboxCapParameterInvalid"
METRIC_AUDIT_DEAD_LETTERED = "SandboxAuditDeadLettered"
METRIC_BACKSTOP_DECODE_ERRORS = "BackstopDecodeErrors"
# Failures dispatch catches and answers with a named error (turn store, pre-flight, idempotency
# store, unexpected exceptions): Lambda's own Errors metric never sees them.
METRIC_DISPATCH_INTERNAL_ERRORS = "SandboxDispatchInternalErrors"
METRIC_JOBS_FINISHED = "SandboxJobsFinished"
METRIC_SESSIONS_REAPED = "SandboxSessionsReaped"  # property reason: turn_ended|lease_expired|unowned|recycled
METRIC_TURN_TOKEN_REJECTED = "SandboxTurnTokenRejected"
METRIC_WARM_CLAIMED = "SandboxWarmSessionClaimed"  # first calls, by source warm|cold
METRIC_DAILY_BUDGET_CROSSED = "SandboxDailyBudgetCrossed"
METRIC_BUDGET_PARAMETER_INVALID = "SandboxBudgetParameterInvalid"
# A connection or request the egress proxy refused (stage-wide for the alarm, and by tenant to say
# whose; the proxy's log line of each denial carries the reason).
METRIC_EGRESS_DENIED = "SandboxEgressDenied"
# What each metric is emitted with (alarms and dashboards use the same): a metric emitted under
# two dimension sets is emitted twice (once per set).
METRIC_DIMENSIONS: dict[str, tuple[tuple[str, ...], ...]] = {
    METRIC_CALLS: (("exit_status",),),
    METRIC_DURATION: ((),),
    METRIC_TRUNCATED: ((),),
    METRIC_COST: (("tenant_id",),),
    METRIC_CAP_EXCEEDED: (("dimension",), ("tenant_id",)),
    METRIC_TOKEN_DETECTED: (("token_class",),),
    METRIC_READINESS_FAILED: ((),),
    METRIC_SESSION_STOP_FAILED: ((),),
    METRIC_QUOTA_FAIL_CLOSED: ((),),
    METRIC_INVALID_REQUEST: ((),),
    METRIC_AUDIT_DEAD_LETTERED: ((),),
    METRIC_BACKSTOP_DECODE_ERRORS: ((),),
    METRIC_CAP_PARAMETER_INVALID: ((),),
    METRIC_DISPATCH_INTERNAL_ERRORS: ((),),
    METRIC_JOBS_FINISHED: (("job_status",),),
    METRIC_SESSIONS_REAPED: ((),),
    METRIC_TURN_TOKEN_REJECTED: ((),),
    METRIC_WARM_CLAIMED: (("source",),),
    METRIC_DAILY_BUDGET_CROSSED: ((), ("tenant_id",)),
    METRIC_BUDGET_PARAMETER_INVALID: ((),),
    METRIC_EGRESS_DENIED: ((), ("tenant_id",)),
}


# --- alarms (§9): alarm key -> runbook file under runbooks/ ---------------------------------------
# The observability construct creates exactly these alarms (description names the runbook) and
# runbooks/ holds exactly these files; tests/infra checks both directions.
OPERATOR_RUNBOOK = "sandbox-environments.md"


class Alarm(StrEnum):
    """The stage's alarms, by key (the alarm name's last part)."""

    TOKEN_SHAPED_STRING_DETECTED = "token-shaped-string-detected"
    BACKSTOP_ERRORS = "backstop-errors"
    AUDIT_DLQ_NOT_EMPTY = "audit-dlq-not-empty"
    READINESS_CHECK_FAILURES = "readiness-check-failures"
    QUOTA_CHECK_ERRORS = "quota-check-errors"
    DISPATCH_ERRORS = "dispatch-errors"
    CAP_BREACH_SPIKE = "cap-breach-spike"  # per tenant, in the tenant's shard stack
    SESSION_STOP_FAILURES = "session-stop-failures"
    SESSIONS_REAPED = "sessions-reaped"
    TURN_TOKEN_REJECTED = "turn-token-rejected"
    DAILY_BUDGET_CROSSED = "daily-budget-crossed"
    EGRESS_DENIED_BURST = "egress-denied-burst"


# Each alarm's runbook: runbooks/alarm-{key}.md.
ALARM_RUNBOOKS: dict[str, str] = {alarm: f"alarm-{alarm}.md" for alarm in Alarm}


def alarm_name(stage: str, key: str) -> str:
    return f"{PROJECT}-{stage}-sandbox-{key}"


def tenant_alarm_name(stage: str, key: str, tenant_id: str) -> str:
    """Per-tenant alarms (the cap-breach spike) live in the tenant's shard stack."""
    return f"{alarm_name(stage, key)}-{tenant_id}"


# --- stacks, queues, topics, and the outputs sandboxctl reads on a deployed stage -----------------
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


# --- response fields, statuses and failure reasons ------------------------------------------------
# Response and audit field of a call that got a new session for its turn: "warm" | "cold".
FIELD_SESSION_SOURCE = "session_source"
# The §15 response status of a paused call.
STATUS_TOOL_CALL = "tool_call"
# The code text that routes an execute_code of a template with tools through the tools driver
# (dispatch.tools.run): code without it runs as ordinary code, where every tool is ToolNotAllowed.
TOOLS_MODULE = "sandbox_tools"
# Visible retries (§16.6): `events` entries of the response (their kind), their reasons.
EVENT_RETRYING = "retrying"
RETRY_SESSION_REAPED = "session_reaped"
RETRY_START_THROTTLED = "start_throttled"
RETRY_QUOTA_CONFLICT = "quota_transaction_conflict"
RETRY_LEDGER_CONFLICT = "session_ledger_conflict"
# failure_reason of the one row a call gets when its dispatch died mid-call.
REASON_DISPATCH_INTERRUPTED = "dispatch_interrupted"
# `reason` of the answer to a retry whose original is still in progress (or whose worker died and
# whose deadline has not passed yet): answered at once with `retry_after_s`, never awaited.
REASON_CALL_IN_PROGRESS = "call_in_progress"
# `reason` of the SandboxInvalidRequest answering an action whose turn_token is missing or does not
# match the turn's (the agent client raises it as TurnTokenMismatch).
REASON_TURN_TOKEN_MISMATCH = "turn_token_mismatch"
# failure_reason of a paused call ended by end_turn (or a resume after it): SandboxTimeout.
REASON_TOOL_TURN_ENDED = "tool_wait_ended:turn_ended"
# The local interpreter refuses Start with this marker at the front of its error message when it
# cannot isolate a session; the runner maps it to SandboxProvisioning with this `reason`.
REASON_ISOLATION_UNAVAILABLE = "isolation_unavailable"
# An `allowlist` session could not be given its egress proxy credential (or no proxy is
# configured): the session was stopped before any code ran (SandboxProvisioning).
REASON_EGRESS_UNAVAILABLE = "egress_unavailable"
# The kill switch (§5.1: a call cap at 0; §22: or the tenant disabled): the boolean field of a
# refusal's log line, and the `reason` of admitted work it ended (a background job it cancelled
# answers it; rows carry `kill_switch:<why>`).
FIELD_KILL_SWITCH = "kill_switch"
# The local interpreter starts the stderr of a session process killed by a signal that was not the
# OOM killer's with this marker, then `:<signal number>`; the runner classifies it SandboxError
# naming the signal (failure_reason `killed_by_signal:<n>`), not SandboxOOM.
REASON_KILLED_BY_SIGNAL = "killed_by_signal"
# failure_reason suffix of a Python call the session stopped at its inner deadline, its session kept
# (`deadline_exceeded:<n>s:stopped_in_session`); without it, the runner's own deadline stopped the session.
REASON_STOPPED_IN_SESSION = "stopped_in_session"
# `reason` (and failure_reason) of a call refused because the agent invoked dispatch through a
# tenant-scoped alias for a tenant outside that scope (sandbox_common.agent_scope).
REASON_OUT_OF_SCOPE = "tenant_out_of_scope"


# --- reaper hooks: the sweeps that run on the reaper's schedule, and the modules declaring them ---
REAPER_HOOK_JOBS = "background_jobs"  # ends unpolled jobs (§17)
REAPER_JOBS_SWEEP_MODULE = "reaper.job_sweep"
REAPER_HOOK_INTERRUPTED = "dispatch_interrupted"  # finishes calls whose dispatch died
REAPER_INTERRUPTED_SWEEP_MODULE = "reaper.interrupted_sweep"
REAPER_HOOK_PAUSED = "paused_tool_calls"  # ends paused calls past their wait bound (§15)
REAPER_PAUSED_SWEEP_MODULE = "reaper.paused_sweep"
# The reaper's event that refills one pool (`{"refill": {"tenant_id", "environment"}}`): sent by
# `sandboxctl warm set` so a new size takes effect at once, not at the next scheduled run.
REFILL_EVENT_KEY = "refill"
# The reaper's event that lets the kill switch reach a tenant's admitted work now
# (`{"kill_switch": {"tenant_id": T}}`, `{}` inside for every tenant): sent by `sandboxctl caps set`
# / `tenant disable` when the change kills; on AWS the same run follows a change of a caps
# parameter (an EventBridge rule) or of a tenant's policy item (the tenants table's stream).
KILL_SWITCH_EVENT_KEY = "kill_switch"
# The reaper's pure-JSON log line per session it stops (its message and `event`; runbooks query it).
REAPER_EVENT_SESSION_REAPED = "session_reaped"


# --- the local stack -------------------------------------------------------------------------------
# The local interpreter's Invoke answer carries the exact byte counts the code wrote (SPEC §19) in
# these response headers (it keeps only the first MiB of each stream); AgentCore sends none.
LOCAL_STDOUT_BYTES_HEADER = "x-sandbox-local-stdout-bytes"
LOCAL_STDERR_BYTES_HEADER = "x-sandbox-local-stderr-bytes"
LOCAL_AUDIT_SPOOL_FILE = "audit-spool.jsonl"
# The local session runtime (§14.5): a pinned venv the local stack passes as ENV_SESSION_PYTHON.
SESSION_VENV_DIR = ".venv-session"
