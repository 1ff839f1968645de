"""One source of truth for every name: tables, keys, SSM paths, env vars, functions, metrics.

Imported by the CDK code (infra/), the Lambdas, the local stack and the tests, so that a name
changes in one place only. Stdlib only.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

PROJECT = "thinkwork"
METRICS_NAMESPACE = "ThinkworkSandbox"

# --- ids -------------------------------------------------------------------------------------
TENANT_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")  # config-time tenant ids (SPEC §2)
REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")  # every id in a request (§11)
INTERPRETER_NAME_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9_]{0,47}$")  # AgentCore name rule (§3)
MAX_CODE_BYTES = 256 * 1024  # user code, UTF-8 (§11)


# --- actions -----------------------------------------------------------------------------------
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


# --- environments -----------------------------------------------------------------------------
Environment = Literal["default-public", "internal-only"]
ENVIRONMENTS: tuple[str, ...] = ("default-public", "internal-only")
NETWORK_MODE: dict[str, str] = {"default-public": "PUBLIC", "internal-only": "SANDBOX"}
_ENV_SHORT = {"default-public": "pub", "internal-only": "int"}

ComplianceTier = Literal["standard", "regulated", "hipaa"]
COMPLIANCE_TIERS: tuple[str, ...] = ("standard", "regulated", "hipaa")


def ssm_prefix(stage: str) -> str:
    return f"/{PROJECT}/{stage}/sandbox"


def cost_per_call_parameter(stage: str) -> str:
    return f"{ssm_prefix(stage)}/cost_per_call_usd"


def tenant_substrate_parameter(stage: str, tenant_id: str) -> str:
    """JSON published by the tenant's shard stack: tier, templates, interpreter ids, runner role."""
    if not REQUEST_ID_RE.match(tenant_id):
        raise ValueError("tenant id not valid for an SSM path")
    return f"{ssm_prefix(stage)}/tenants/{tenant_id}/substrate"


# --- DynamoDB ---------------------------------------------------------------------------------
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

    def physical(self, stage: str) -> str:
        return f"{PROJECT}-{stage}-{self.logical}"

    @property
    def sort_key(self) -> str:
        """The sort key's name, for tables that have one (typed `str`, unlike `sk`)."""
        if self.sk is None:
            raise ValueError(f"table {self.logical} has no sort key")
        return self.sk

    @property
    def ttl(self) -> str:
        if self.ttl_attribute is None:
            raise ValueError(f"table {self.logical} has no TTL attribute")
        return self.ttl_attribute


TENANT_DAILY_COUNTERS = TableSpec(
    "sandbox_tenant_daily_counters", pk="counter_key", ttl_attribute=TTL_ATTRIBUTE
)
AGENT_HOURLY_COUNTERS = TableSpec(
    "sandbox_agent_hourly_counters", pk="counter_key", ttl_attribute=TTL_ATTRIBUTE
)
INVOCATIONS = TableSpec(
    "sandbox_invocations",
    pk="invocation_id",
    ttl_attribute=TTL_ATTRIBUTE,
    indexes=(
        Index("by_tenant_time", pk="tenant_id", sk="started_at"),
        Index("by_session", pk="session_id", sk="started_at"),
    ),
)
# Turn -> owner agent, session (§4.5). Turn ids are per tenant: keyed by (tenant_id, turn_id).
# "_v2": the key schema changed from (turn_id) and CloudFormation cannot replace a table with a
# fixed name in place; turn items are 2-day state, so a deployed stage simply gets a new table.
TURNS = TableSpec("sandbox_turns_v2", pk="tenant_id", sk="turn_id", ttl_attribute=TTL_ATTRIBUTE)
# Tenant policy, template sandbox blocks and the policy change history, one item collection per tenant.
TENANTS = TableSpec("sandbox_tenants", pk="tenant_id", sk="item", pitr=True)
# Powertools idempotency persistence layer defaults: key `id`, TTL `expiration`.
# `by_open_attempt` (issue 9): sparse, only calls claimed and not yet finished carry its keys
# (IDEMPOTENCY_ATTR_OPEN / IDEMPOTENCY_ATTR_DEADLINE, see the section "dispatch interrupted").
IDEMPOTENCY = TableSpec(
    "sandbox_idempotency",
    pk="id",
    ttl_attribute="expiration",
    indexes=(Index("by_open_attempt", pk="attempt_open", sk="attempt_deadline"),),
)
# Backstop findings, partitioned by UTC day for `findings list --since`.
FINDINGS = TableSpec("sandbox_findings", pk="finding_date", sk="finding_key", ttl_attribute=TTL_ATTRIBUTE)

ALL_TABLES: tuple[TableSpec, ...] = (
    TENANT_DAILY_COUNTERS,
    AGENT_HOURLY_COUNTERS,
    INVOCATIONS,
    TURNS,
    TENANTS,
    IDEMPOTENCY,
    FINDINGS,
)

# sort-key values in the TENANTS table
TENANT_POLICY_ITEM = "policy"
TEMPLATE_ITEM_PREFIX = "template#"
HISTORY_ITEM_PREFIX = "history#"

# --- Lambdas ----------------------------------------------------------------------------------
DISPATCH = "dispatch"
QUOTA_CHECK = "sandbox-quota-check"
BACKSTOP = "backstop"
FUNCTIONS: tuple[str, ...] = (DISPATCH, QUOTA_CHECK, BACKSTOP)
# logical function name -> package under functions/ (handler is "<package>.handler.handler")
FUNCTION_PACKAGES: dict[str, str] = {DISPATCH: "dispatch", QUOTA_CHECK: "quota_check", BACKSTOP: "backstop"}


# What dispatch and the reaper both run, shipped beside each one's own package (functions/).
SHARED_RUNTIME_PACKAGE = "sandbox_runtime"


def function_name(stage: str, logical: str) -> str:
    return f"{PROJECT}-{stage}-{logical}"


def handler_string(logical: str) -> str:
    return f"{FUNCTION_PACKAGES[logical]}.handler.handler"


def log_group_name(stage: str, logical: str) -> str:
    return f"/aws/lambda/{function_name(stage, logical)}"


def findings_audit_log_group(stage: str) -> str:
    """Where the CloudWatch Logs data protection policy sends its findings (§8.3)."""
    return f"/{PROJECT}/{stage}/sandbox/data-protection-findings"


# --- env var names (set by CDK, read through sandbox_common.settings) ------------------------
ENV_STAGE = "SANDBOX_STAGE"
ENV_TENANT_DAILY_TABLE = "TENANT_DAILY_COUNTERS_TABLE"
ENV_AGENT_HOURLY_TABLE = "AGENT_HOURLY_COUNTERS_TABLE"
ENV_INVOCATIONS_TABLE = "INVOCATIONS_TABLE"
ENV_TURNS_TABLE = "TURNS_TABLE"
ENV_TENANTS_TABLE = "TENANTS_TABLE"
ENV_IDEMPOTENCY_TABLE = "IDEMPOTENCY_TABLE"
ENV_FINDINGS_TABLE = "FINDINGS_TABLE"
ENV_QUOTA_FUNCTION = "QUOTA_FUNCTION_NAME"
ENV_AUDIT_DLQ_URL = "AUDIT_DLQ_URL"
ENV_CALL_TIMEOUT = "CALL_TIMEOUT_SECONDS"
ENV_SESSION_TIMEOUT = "SESSION_TIMEOUT_SECONDS"
ENV_AUDIT_RETENTION_DAYS = "AUDIT_RETENTION_DAYS"
ENV_STDOUT_CAP = "STDOUT_CAP_BYTES"
ENV_STDERR_CAP = "STDERR_CAP_BYTES"
ENV_CACHE_TTL = "CONFIG_CACHE_TTL_SECONDS"

# --- metrics ----------------------------------------------------------------------------------
METRIC_CAP_EXCEEDED = "SandboxCapExceeded"
METRIC_TOKEN_DETECTED = "TokenShapedStringDetected"
METRIC_COST = "SandboxEstimatedCostUSD"
METRIC_CALLS = "SandboxCalls"  # dimension exit_status
METRIC_DURATION = "SandboxDurationMs"
METRIC_TRUNCATED = "SandboxOutputTruncated"
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


# --- AgentCore interpreters -------------------------------------------------------------------
def interpreter_name(stage: str, tenant_id: str, environment: str) -> str:
    """A Code Interpreter name AgentCore accepts: letters, digits, underscores, ≤ 48 chars.

    Hyphens are not allowed (a lesson from the peer system), so they become underscores; a name
    that would be too long keeps a readable prefix and a hash suffix so it stays unique.
    """
    base = f"sbx_{stage}_{tenant_id}_{_ENV_SHORT[environment]}".replace("-", "_")
    if len(base) > 48:
        digest = hashlib.sha256(f"{stage}/{tenant_id}/{environment}".encode()).hexdigest()[:10]
        base = f"{base[:37]}_{digest}"
    assert INTERPRETER_NAME_RE.match(base), base
    return base


def stack_name(stage: str, part: str) -> str:
    return f"Sandbox-{stage}-{part}"


def shard_stack_name(stage: str, shard: int) -> str:
    return stack_name(stage, f"Tenants{shard:03d}")


SECURITY_ALERTS_TOPIC = "security-alerts"


def security_topic_name(stage: str) -> str:
    return f"{PROJECT}-{stage}-{SECURITY_ALERTS_TOPIC}"


def audit_dlq_name(stage: str) -> str:
    return f"{PROJECT}-{stage}-sandbox-audit-dlq"


def backstop_failures_queue_name(stage: str) -> str:
    """Where a log batch goes when the backstop still fails after Lambda's async retries."""
    return f"{PROJECT}-{stage}-sandbox-backstop-failures"


# --- alarms (§9): alarm key -> runbook file under runbooks/ ------------------------------------
# The observability construct creates exactly these alarms (description names the runbook) and
# runbooks/ holds exactly these files; tests/infra checks both directions.
OPERATOR_RUNBOOK = "sandbox-environments.md"
ALARM_RUNBOOKS: dict[str, str] = {
    "token-shaped-string-detected": "alarm-token-shaped-string-detected.md",
    "backstop-errors": "alarm-backstop-errors.md",
    "audit-dlq-not-empty": "alarm-audit-dlq-not-empty.md",
    "readiness-check-failures": "alarm-readiness-check-failures.md",
    "quota-check-errors": "alarm-quota-check-errors.md",
    "dispatch-errors": "alarm-dispatch-errors.md",
    "cap-breach-spike": "alarm-cap-breach-spike.md",
    "session-stop-failures": "alarm-session-stop-failures.md",
}


def alarm_name(stage: str, key: str) -> str:
    return f"{PROJECT}-{stage}-sandbox-{key}"


# --- metric dimension sets: what each metric is emitted with (alarms/dashboards use the same) --
# A metric emitted under two dimension sets is emitted twice (once per set).
METRIC_DIMENSIONS: dict[str, tuple[tuple[str, ...], ...]] = {
    METRIC_CALLS: (("exit_status",),),
    METRIC_DURATION: ((),),
    METRIC_TRUNCATED: ((),),  # value 1 when stdout or stderr was truncated, else 0: Average = rate
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
}

# --- stack outputs that sandboxctl reads on a deployed stage -----------------------------------
OUTPUT_STAGE = "SandboxStage"
OUTPUT_DISPATCH_FUNCTION = "DispatchFunctionName"
OUTPUT_QUOTA_FUNCTION = "QuotaFunctionName"
OUTPUT_AUDIT_DLQ_URL = "AuditDlqUrl"
OUTPUT_SECURITY_TOPIC = "SecurityAlertsTopicArn"
# table outputs: f"{OUTPUT_TABLE_PREFIX}{spec.logical}"
OUTPUT_TABLE_PREFIX = "Table"


def runner_role_name(stage: str, tenant_id: str) -> str:
    """IAM role names are ≤ 64 chars: long tenant ids keep a prefix plus a hash suffix."""
    name = f"{PROJECT}-{stage}-sbx-runner-{tenant_id}"
    if len(name) > 64:
        digest = hashlib.sha256(f"{stage}/{tenant_id}".encode()).hexdigest()[:10]
        name = f"{name[:53]}-{digest}"
    return name


def runner_role_name_prefix(stage: str) -> str:
    return f"{PROJECT}-{stage}-sbx-runner-"


# --- circuit-breaker counter items (sandbox-quota-check writes them; sandboxctl reads them) -----
# Keys come from sandbox_common.dimensions.Dimension.counter_key.
COUNTER_ATTR_COUNT = "call_count"  # not "count": that is a DynamoDB reserved word
COUNTER_ATTR_TENANT = "tenant_id"
COUNTER_ATTR_AGENT = "agent_id"  # agent-hourly items only
COUNTER_ATTR_WINDOW = "window"  # "2026-11-21" (daily) or "2026-11-21T08" (hourly)
# TTL = window end + this grace, so an item outlives its window a little (TTL deletion is lazy
# anyway; the window is part of the key, so an expired item is never read as a live count).
COUNTER_EXPIRY_GRACE_SECONDS = 3600


# --- appended by the CDK app (issue #2) -------------------------------------------------------
def function_role_name(stage: str, logical: str) -> str:
    """Fixed role name per function, so a tenant shard can trust the dispatch role by ARN
    without a cross-stack export (adding a tenant then touches only its shard)."""
    return f"{PROJECT}-{stage}-{logical}-role"


def table_output_key(logical: str) -> str:
    """CloudFormation output keys are alphanumeric only: CDK drops the underscores of
    `OUTPUT_TABLE_PREFIX + logical`, so readers look outputs up with this."""
    return OUTPUT_TABLE_PREFIX + re.sub(r"[^A-Za-z0-9]", "", logical)


def tenant_alarm_name(stage: str, key: str, tenant_id: str) -> str:
    """Per-tenant alarms (the cap-breach spike) live in the tenant's shard stack."""
    return f"{alarm_name(stage, key)}-{tenant_id}"


def create_table_request(spec: TableSpec, stage: str) -> dict:
    """boto3 `create_table` kwargs for a spec: how the local stack and the tests create exactly
    the tables the CDK state construct declares (keys, indexes; TTL is a separate call:
    `ttl_request`)."""
    keys = {spec.pk, *(k for k in (spec.sk,) if k)}
    for index in spec.indexes:
        keys.update(k for k in (index.pk, index.sk) if k)
    request: dict = {
        "TableName": spec.physical(stage),
        "BillingMode": "PAY_PER_REQUEST",
        "AttributeDefinitions": [{"AttributeName": k, "AttributeType": "S"} for k in sorted(keys)],
        "KeySchema": [{"AttributeName": spec.pk, "KeyType": "HASH"}]
        + ([{"AttributeName": spec.sk, "KeyType": "RANGE"}] if spec.sk else []),
    }
    if spec.indexes:
        request["GlobalSecondaryIndexes"] = [
            {
                "IndexName": index.name,
                "KeySchema": [{"AttributeName": index.pk, "KeyType": "HASH"}]
                + ([{"AttributeName": index.sk, "KeyType": "RANGE"}] if index.sk else []),
                "Projection": {"ProjectionType": "ALL"},
            }
            for index in spec.indexes
        ]
    return request


def ttl_request(spec: TableSpec, stage: str) -> dict | None:
    if not spec.ttl_attribute:
        return None
    return {
        "TableName": spec.physical(stage),
        "TimeToLiveSpecification": {"Enabled": True, "AttributeName": spec.ttl_attribute},
    }


# --- backstop findings (§8.4) ------------------------------------------------------------------
# Findings are security evidence: kept for the audit ceiling, expired by DynamoDB TTL.
FINDINGS_RETENTION_DAYS = 180

# --- local interpreter isolation (issue 10, SPEC §18) -------------------------------------------
# Read by the local interpreter (infra/local/interpreter) and passed through by the local stack.
# "1": sessions may run without isolation when bubblewrap cannot isolate them (warned on every start).
ENV_LOCAL_UNISOLATED = "SANDBOX_LOCAL_UNISOLATED"
# The Python that runs session code (a venv's python or a base interpreter); default: the local
# interpreter's own base interpreter. Bound read-only into the sandbox with its base installation.
ENV_SESSION_PYTHON = "SANDBOX_SESSION_PYTHON"
# The local interpreter refuses Start with this marker at the front of its error message when it
# cannot isolate a session; the runner maps it to SandboxProvisioning with this `reason`.
REASON_ISOLATION_UNAVAILABLE = "isolation_unavailable"
# The local interpreter's Invoke answer carries the exact byte counts the code wrote (SPEC §19) in
# these response headers (it keeps only the first MiB of each stream); AgentCore sends none.
LOCAL_STDOUT_BYTES_HEADER = "x-sandbox-local-stdout-bytes"
LOCAL_STDERR_BYTES_HEADER = "x-sandbox-local-stderr-bytes"

# --- redaction, validation and local-stack robustness (issue 10) ---
# The session tag dispatch sets at AssumeRole of a tenant's session-runner role, from the tenant
# record it routes on; each runner role's trust policy requires it to equal its own tenant.
RUNNER_SESSION_TAG_TENANT = "tenant_id"
# Local stack only: the file the audit writer appends a row to when both the table and the
# dead-letter queue are unreachable (they live in the same emulated AWS); `audit replay` drains it.
ENV_AUDIT_SPOOL = "SANDBOX_AUDIT_SPOOL"
LOCAL_AUDIT_SPOOL_FILE = "audit-spool.jsonl"

# --- files in, artifacts out (issue 14, SPEC §14) -----------------------------------------------
MAX_INPUT_FILES = 20  # entries of execute_code.files (§14.1)
MAX_INLINE_INPUT_BYTES = 3 * 1024 * 1024  # decoded total of every content_base64 (§14.1)
MAX_S3_INPUT_BYTES = 100 * 1024 * 1024  # one s3_uri input, checked inside the session (§14.1)
MAX_INPUT_PATH_BYTES = 255
MAX_ARTIFACTS = 20  # stored artifacts per call (§14.2)
MAX_ARTIFACT_BYTES = 25 * 1024 * 1024
OUTPUTS_DIR = "outputs"  # artifacts are collected from here, relative to the working directory
FIGURE_NAME = "figure-{n}.png"  # open matplotlib figures saved under this name (§14.2)
SKIPPED_TOO_MANY = "too_many"
SKIPPED_TOO_LARGE = "too_large"
PRESIGNED_URL_SECONDS = 900  # get_file URLs: valid ≤ 15 minutes (§14.3)
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
ENV_ARTIFACTS_BUCKET = "ARTIFACTS_BUCKET"
OUTPUT_ARTIFACTS_BUCKET = "ArtifactsBucketName"
# The local session runtime (§14.5): a pinned venv the local stack passes as ENV_SESSION_PYTHON.
SESSION_VENV_DIR = ".venv-session"


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


# --- background jobs (issue 13, SPEC §17) ------------------------------------------------------
# One table, two item kinds keyed by `job_key`:
#   job#{job_id}                    a job: owner (tenant, agent, turn), session, state, outcome
#   turn#{tenant_id}#{turn_id}      the turn's running-job slot count and open job ids
# `by_tenant` lists a tenant's jobs (sandboxctl jobs list); `by_open` is sparse (only jobs not yet
# final carry JOB_ATTR_OPEN), ordered by deadline, for the scheduled reaper's `finish_due_jobs`.
JOB_ATTR_OPEN = "open_shard"
JOB_OPEN_SHARD = "open"
JOBS = TableSpec(
    "sandbox_jobs",
    pk="job_key",
    ttl_attribute=TTL_ATTRIBUTE,
    indexes=(
        Index("by_tenant", pk="tenant_id", sk="submitted_at"),
        Index("by_open", pk=JOB_ATTR_OPEN, sk="deadline_at"),
    ),
)
ALL_TABLES = (*ALL_TABLES, JOBS)
ENV_JOBS_TABLE = "JOBS_TABLE"
JOB_KEY_PREFIX = "job#"
JOB_TURN_KEY_PREFIX = "turn#"
MAX_RUNNING_JOBS_PER_TURN = 3
DEFAULT_JOB_TIMEOUT_SECONDS = 900
MAX_JOB_TIMEOUT_SECONDS = 3600
JOB_STATES: tuple[str, ...] = ("running", "completed", "failed", "timed_out", "cancelled")
METRIC_JOBS_FINISHED = "SandboxJobsFinished"  # dimension job_status
METRIC_DIMENSIONS[METRIC_JOBS_FINISHED] = (("job_status",),)

# --- sessions as a managed resource (issue 11, SPEC §16) -------------------------------------
# A session cap refusal asks the agent to retry this much later (§16.2).
SESSION_CAP_RETRY_SECONDS = 30


def warm_sessions_parameter(stage: str, tenant_id: str, environment: str) -> str:
    """Warm pool size of one tenant × environment (§16.1); absent = 0."""
    if not REQUEST_ID_RE.match(tenant_id):
        raise ValueError("tenant id not valid for an SSM path")
    if environment not in ENVIRONMENTS:
        raise ValueError(f"unknown environment {environment!r}")
    return f"{ssm_prefix(stage)}/tenants/{tenant_id}/warm/{environment}"


# The live-session ledger: one item per session slot plus one counter item per tenant and one for
# the stage, all in one table so a slot and both counters change in ONE TransactWriteItems.
#   slot item     pk "slot#{slot_id}"    state starting|warm|active, tenant_id, environment, source,
#                                        session_id, interpreter_id, turn_id, agent_id, started_at,
#                                        calls, last_call_at, lease_expires_at, recycle_at
#   counter item  pk "tenant#{tenant}"   live_count       pk "global"   live_count
# `warm_pool` ("{tenant}#{environment}") is present only while a slot is warm and unclaimed: the
# sparse `by_warm_pool` index lists exactly the sessions a first call may claim.
SESSIONS = TableSpec(
    "sandbox_sessions",
    pk="ledger_key",
    ttl_attribute=TTL_ATTRIBUTE,
    indexes=(Index("by_warm_pool", pk="warm_pool", sk="started_at"),),
)
ALL_TABLES = (*ALL_TABLES, SESSIONS)
SESSION_SLOT_PREFIX = "slot#"
SESSION_TENANT_COUNTER_PREFIX = "tenant#"
SESSION_GLOBAL_COUNTER_KEY = "global"
SESSION_ATTR_LIVE_COUNT = "live_count"
SESSION_ATTR_WARM_POOL = "warm_pool"
SESSION_STATES: tuple[str, ...] = ("starting", "warm", "active")
SESSION_SOURCES: tuple[str, ...] = ("warm", "cold")

ENV_SESSIONS_TABLE = "SESSIONS_TABLE"
ENV_REQUIRE_TURN_TOKEN = "REQUIRE_TURN_TOKEN"
ENV_REAPER_FUNCTION = "REAPER_FUNCTION_NAME"

# The reaper (§16.3): a scheduled Lambda, every 5 minutes.
REAPER = "sandbox-reaper"
FUNCTIONS = (*FUNCTIONS, REAPER)
FUNCTION_PACKAGES[REAPER] = "reaper"
REAPER_SCHEDULE_MINUTES = 5

METRIC_SESSIONS_REAPED = "SandboxSessionsReaped"  # property reason: turn_ended|lease_expired|unowned|recycled
METRIC_TURN_TOKEN_REJECTED = "SandboxTurnTokenRejected"
METRIC_WARM_CLAIMED = "SandboxWarmSessionClaimed"  # dimension source: warm|cold (first calls)
METRIC_DIMENSIONS.update(
    {
        METRIC_SESSIONS_REAPED: ((),),
        METRIC_TURN_TOKEN_REJECTED: ((),),
        METRIC_WARM_CLAIMED: (("source",),),
    }
)
ALARM_RUNBOOKS.update(
    {
        "sessions-reaped": "alarm-sessions-reaped.md",
        "turn-token-rejected": "alarm-turn-token-rejected.md",
    }
)

# Turn token (§16.5): 43–128 characters of URL-safe base64 without padding (≥ 32 random bytes).
TURN_TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{43,128}$")
TURN_ATTR_TOKEN_HASH = "turn_token_sha256"  # the only trace of the token dispatch keeps

# Visible retries (§16.6): `events` entries of the response, `retries` attribute of the audit row.
EVENT_RETRYING = "retrying"
AUDIT_ATTR_RETRIES = "retries"
RETRY_SESSION_REAPED = "session_reaped"
RETRY_START_THROTTLED = "start_throttled"
RETRY_QUOTA_CONFLICT = "quota_transaction_conflict"
RETRY_LEDGER_CONFLICT = "session_ledger_conflict"
# --- usage accounting, MCP server, Strands tool (issue 15) -------------------------------------
# The audit row's per-call price (SPEC §9 price in force when the call was admitted; 0 when refused).
AUDIT_ATTR_COST = "estimated_cost_usd"
# Optional per-tenant daily budget in USD (a non-negative decimal). Absent = no budget. Crossing it
# is reported (metric + alarm), never refused: the caps are the refusal mechanism.
METRIC_DAILY_BUDGET_CROSSED = "SandboxDailyBudgetCrossed"
METRIC_DIMENSIONS[METRIC_DAILY_BUDGET_CROSSED] = ((), ("tenant_id",))
ALARM_RUNBOOKS["daily-budget-crossed"] = "alarm-daily-budget-crossed.md"
METRIC_BUDGET_PARAMETER_INVALID = "SandboxBudgetParameterInvalid"
METRIC_DIMENSIONS[METRIC_BUDGET_PARAMETER_INVALID] = ((),)


def tenant_daily_budget_parameter(stage: str, tenant_id: str) -> str:
    if not REQUEST_ID_RE.match(tenant_id):
        raise ValueError("tenant id not valid for an SSM path")
    return f"{ssm_prefix(stage)}/tenants/{tenant_id}/daily_budget_usd"


# `sandboxctl usage --by`: the audit attribute each grouping reads (day = started_at's UTC date).
USAGE_GROUPINGS: dict[str, str] = {"day": "started_at", "agent": "agent_id", "template": "template_id"}
# --- programmatic tool calling (issue 12, SPEC §15) ---------------------------------------------
# Bounds of one execute_code that calls tools. The wait bound is configurable per stage
# (StageConfig.tool_wait_seconds -> ENV_TOOL_WAIT_SECONDS) so tests can prove it quickly.
TOOLS_MAX_CALLS = 50
TOOLS_MAX_RESULT_BYTES = 1024 * 1024  # a tool result, serialized as compact JSON (UTF-8)
TOOLS_MAX_INPUT_BYTES = 256 * 1024  # a tool call's input, serialized (ours: bounds the marker)
TOOLS_WAIT_SECONDS = 300
TOOLS_MAX_PER_TEMPLATE = 32
# A tool name as agent frameworks spell them (Anthropic/Strands: letters, digits, _ and -).
TOOL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
# Continuations: one item per pause, keyed by the SHA-256 of the secret token the agent holds.
# `by_turn` finds a turn's paused calls (end_turn / reaper end them with their audit row).
CONTINUATIONS = TableSpec(
    "sandbox_continuations",
    pk="continuation_hash",
    ttl_attribute=TTL_ATTRIBUTE,
    indexes=(
        Index("by_turn", pk="turn_id", sk="paused_at"),
        Index("by_wait_due", pk="wait_open", sk="wait_due"),
    ),  # issue 12: the paused-calls sweep
)
ALL_TABLES = (*ALL_TABLES, CONTINUATIONS)
ENV_CONTINUATIONS_TABLE = "CONTINUATIONS_TABLE"
ENV_TOOL_WAIT_SECONDS = "TOOL_WAIT_SECONDS"
# Item attributes of a template's tool allowlist in the TENANTS table (beside `environment`).
TEMPLATE_TOOLS_ATTRIBUTE = "tools"
# Audit row attributes of a tool-calling call (SPEC §15): the count, and one record per call
# {name, input_sha256, duration_ms, ok} — hashes only, never a tool input or result.
AUDIT_TOOL_CALLS = "tool_calls"
AUDIT_TOOL_CALL_RECORDS = "tool_call_records"
# The §15 response status of a paused call.
STATUS_TOOL_CALL = "tool_call"


# --- dispatch: names the CLI, pilot and demo repeated as literals (issue 9) ---
def _declared_index(spec: TableSpec, name: str) -> Index:
    """The index `name` of `spec` as declared above (a typo fails at import, not at query time)."""
    for index in spec.indexes:
        if index.name == name:
            return index
    raise ValueError(f"table {spec.logical} declares no index {name!r}")


INVOCATIONS_BY_TENANT_TIME = _declared_index(INVOCATIONS, "by_tenant_time")
INVOCATIONS_BY_SESSION = _declared_index(INVOCATIONS, "by_session")


# --- sessions wired into dispatch's first call (issue 11, SPEC §16.1/§16.2/§16.6) -------------
# The turn item keeps its live session's ledger slot, so whoever stops the session frees it.
TURN_ATTR_SLOT_ID = "session_slot_id"
# Response and audit field of a call that got a new session for its turn: "warm" | "cold".
FIELD_SESSION_SOURCE = "session_source"
# A warm session is recycled this long before (session timeout − call timeout), and a first call
# claims one only with at least (call timeout + this) of life left.
WARM_RECYCLE_MARGIN_SECONDS = 60


# --- programmatic tool calling through dispatch (issue 12) ---
# The code text that routes an execute_code of a template with tools through the tools driver
# (dispatch.tools.run): code without it runs as ordinary code, where every tool is ToolNotAllowed.
TOOLS_MODULE = "sandbox_tools"
# failure_reason of a paused call ended by end_turn (or a resume after it): SandboxTimeout.
REASON_TOOL_TURN_ENDED = "tool_wait_ended:turn_ended"


# --- background jobs: reaper sweep and poll cost (issue 13) ------------------------------------
# The sparse index of jobs not yet final, queried by the reaper's job sweep and busy_sessions.
JOB_OPEN_INDEX = next(ix.name for ix in JOBS.indexes if ix.pk == JOB_ATTR_OPEN)
# The reaper hook (reaper.hooks) that ends unpolled jobs, and the module that registers it.
REAPER_HOOK_JOBS = "background_jobs"
REAPER_JOBS_SWEEP_MODULE = "reaper.job_sweep"
# On a job item: the SHA-256 of its turn's token (§16.5), copied from the turn the submit claimed
# (a turn's token hash never changes once bound), so get_job/cancel_job check the token with the
# job read alone. "" = a token-less turn; absent = a job from before: its turn is read instead.
JOB_ATTR_TURN_TOKEN_HASH = "turn_token_sha256"


# --- quota: turn-guarded speculative check (issues 9 + 11) -------------------------------------
# Dispatch sends the quota check at t=0, beside the idempotency claim and the turn read. Its
# transaction carries a ConditionCheck on the turn (exists, this agent's, not ended, token hash)
# and a "counted" marker keyed by the call's idempotency identity (tenant + call_id), written in
# the tenant-daily counters table so only the quota Lambda writes it (§5.3).
QUOTA_MARKER_PREFIX = "counted#"
QUOTA_MARKER_ATTR_DAILY_KEY = "daily_key"  # the two counter items this call's count went to,
QUOTA_MARKER_ATTR_HOURLY_KEY = "hourly_key"  # so a release undoes exactly that count
# A marker lives as long as the call's idempotency record (dispatch.idempotency.RECORD_TTL_SECONDS;
# a test keeps the two equal): a retry inside it is never counted twice.
QUOTA_MARKER_TTL_SECONDS = 24 * 3600
# Turn item attributes read outside dispatch.turns (which writes them): the quota's
# ConditionCheck (agent, ended), the session reaper (ended, session state and id).
TURN_ATTR_AGENT = "agent_id"
TURN_ATTR_ENDED = "ended"
TURN_ATTR_SESSION_STATE = "session_state"
TURN_ATTR_SESSION_ID = "session_id"
# The turn's session lease (§4.5): starting (a caller holds the lease and starts the session) ->
# active (the turn points at its live session) -> stopped.
TURN_SESSION_STARTING, TURN_SESSION_ACTIVE, TURN_SESSION_STOPPED = "starting", "active", "stopped"

# --- warm first call: one write (issue 11) -------------------------------------------------------
# On a turn item: a warm session of the turn's pool that begin_turn picked (a hint, not a claim):
# a map {slot_id, session_id, interpreter_id, environment, started_at}. The turn's first call
# claims it AND binds the turn to it in one TransactWriteItems; a stale hint (another turn got it,
# recycled) fails that write's condition and the call falls back to querying the pool.
TURN_ATTR_WARM_HINT = "warm_hint"
# The pool's index (by warm_pool), read by begin_turn (and by a first call without a usable hint).
SESSION_WARM_POOL_INDEX = next(ix.name for ix in SESSIONS.indexes if ix.pk == SESSION_ATTR_WARM_POOL)
# How many of the pool's sessions begin_turn reads to pick one at random (so turns begun together
# rarely pick the same one; a collision costs the loser the fallback query, never a shared session).
WARM_HINT_CANDIDATES = 10
# On a turn item: begin_turn found the turn's pool empty — a map {environment, interpreter_id,
# checked_at (epoch s)}. The turn's first call then reserves a cold slot without reading the pool
# again (issue 9: one request off a cold first call's critical path). Honoured for this long after
# begin_turn; a stale "empty" (the pool was refilled since) costs a cold start, never correctness.
TURN_ATTR_POOL_EMPTY = "warm_pool_empty"
WARM_POOL_EMPTY_MARK_SECONDS = 120

# --- dispatch interrupted: exactly one audit row when dispatch dies (issue 9) -------------------
# On the idempotency record of an execute_code, written with the claim itself (one PutItem):
# the call's audit identity (JSON: invocation id, tenant/agent/turn/user/template/call ids, code
# hash, started_at) and the sparse index keys of a call claimed and not yet finished.
IDEMPOTENCY_ATTR_ATTEMPT = "attempt"
IDEMPOTENCY_ATTR_OPEN = "attempt_open"
IDEMPOTENCY_ATTR_DEADLINE = "attempt_deadline"  # the in-progress deadline, epoch ms zero-padded (S)
IDEMPOTENCY_OPEN_VALUE = "open"
IDEMPOTENCY_OPEN_INDEX = next(ix.name for ix in IDEMPOTENCY.indexes if ix.pk == IDEMPOTENCY_ATTR_OPEN)
# failure_reason of the one row a call gets when its dispatch died mid-call.
REASON_DISPATCH_INTERRUPTED = "dispatch_interrupted"
# The reaper hook that finishes interrupted calls nobody retries, and the module declaring it.
REAPER_HOOK_INTERRUPTED = "dispatch_interrupted"
REAPER_INTERRUPTED_SWEEP_MODULE = "reaper.interrupted_sweep"

# --- paused tool calls nobody resumes (issue 12) --------------------------------------------------
# A paused continuation carries two sparse attributes while it is paused (removed when it is
# resumed, expired or ended): `wait_open` = "open" and `wait_due` = the moment its tool wait bound
# passes (epoch ms, zero-padded S). The `by_wait_due` index lists the paused calls past their bound.
CONTINUATION_ATTR_WAIT_OPEN = "wait_open"
CONTINUATION_ATTR_WAIT_DUE = "wait_due"
CONTINUATION_WAIT_OPEN_VALUE = "open"
CONTINUATIONS_WAIT_DUE_INDEX = next(
    ix.name for ix in CONTINUATIONS.indexes if ix.pk == CONTINUATION_ATTR_WAIT_OPEN
)
REAPER_HOOK_PAUSED = "paused_tool_calls"
REAPER_PAUSED_SWEEP_MODULE = "reaper.paused_sweep"
ENV_DISPATCH_FUNCTION = "DISPATCH_FUNCTION_NAME"
