"""DynamoDB tables, each with its item attributes, key values and indexes: `TableSpec` is everything
about a table that the CDK stack and the local stack must agree on."""

from __future__ import annotations

from dataclasses import dataclass, field

from .ids import PROJECT


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


# Circuit-breaker counters (docs/circuit-breakers.md): one item per window and key (see
# sandbox_common.dimensions), written by sandbox-quota-check, read by sandboxctl. The "counted"
# marker of a call_id (a retry is never counted twice) lives in the tenant-daily table, naming the
# counter items it went to.
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

# The audit trail: one row per counted call. Attributes beyond audit.AUDIT_ATTRIBUTES:
INVOCATIONS_BY_TENANT_TIME = Index("by_tenant_time", pk="tenant_id", sk="started_at")
INVOCATIONS_BY_SESSION = Index("by_session", pk="session_id", sk="started_at")
INVOCATIONS = TableSpec(
    "sandbox_invocations",
    pk="invocation_id",
    ttl_attribute=TTL_ATTRIBUTE,
    indexes=(INVOCATIONS_BY_TENANT_TIME, INVOCATIONS_BY_SESSION),
)
AUDIT_ATTR_RETRIES = "retries"  # the call's visible retries
AUDIT_ATTR_COST = "estimated_cost_usd"  # the price in force when the code ran, else 0 (docs/cost.md)
# What left the sandbox during the call: {mode, allowed, denied, denied_hosts, bytes_out, bytes_in}
# (sandbox_common.egress_usage), on every row.
AUDIT_ATTR_EGRESS = "egress"
AUDIT_TOOL_CALLS = "tool_calls"  # a tool-calling call's count of tool calls ...
AUDIT_TOOL_CALL_RECORDS = "tool_call_records"  # ... and {name, input_sha256, duration_ms, ok} each
# `sandboxctl usage --by`: the audit attribute each grouping reads (day = started_at's UTC date).
USAGE_GROUPINGS: dict[str, str] = {"day": "started_at", "agent": "agent_id", "template": "template_id"}

# Turn -> owner agent, token hash, session (docs/sessions.md). Keyed by (tenant_id, turn_id). "_v2": the key
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
# The turn's session lease: starting (a caller holds the lease and starts the session) ->
# active (the turn points at its live session) -> stopped.
TURN_SESSION_STARTING, TURN_SESSION_ACTIVE, TURN_SESSION_STOPPED = "starting", "active", "stopped"

# Tenant policy, template sandbox blocks and the policy change history, one item collection per tenant.
# Its stream (keys only) tells the reaper that a tenant's policy item changed, whoever wrote it:
# the kill switch then reaches the tenant's running work at once.
TENANTS = TableSpec("sandbox_tenants", pk="tenant_id", sk="item", pitr=True, stream="KEYS_ONLY")
TENANT_POLICY_ITEM = "policy"
TEMPLATE_ITEM_PREFIX = "template#"
HISTORY_ITEM_PREFIX = "history#"
TEMPLATE_TOOLS_ATTRIBUTE = "tools"  # a template's tool allowlist (docs/tool-calling.md), beside `environment`
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

# Backstop findings (docs/redaction.md), partitioned by UTC day for `findings list --since`.
FINDINGS = TableSpec("sandbox_findings", pk="finding_date", sk="finding_key", ttl_attribute=TTL_ATTRIBUTE)

# Background jobs (docs/jobs.md). One table, two item kinds keyed by `job_key`:
# `by_tenant` lists a tenant's jobs (sandboxctl jobs list); `by_open` is sparse (only jobs not yet
# final carry JOB_ATTR_OPEN), ordered by deadline, for the reaper's job sweep and busy sessions.
JOB_ATTR_OPEN = "open_shard"
JOB_OPEN_SHARD = "open"
JOB_ATTR_SUBMITTED_AT = "submitted_at"
JOB_ATTR_DEADLINE_AT = "deadline_at"
# The SHA-256 of the job's turn token, copied from the turn the submit claimed: get_job /
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

# The live-session ledger (docs/sessions.md): one item per session slot plus one counter item per tenant and
# one for the stage, all in one table so a slot and both counters change in ONE TransactWriteItems.
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

# Continuations of paused tool-calling calls (docs/tool-calling.md): one item per pause, keyed by
# the SHA-256 of the secret token the agent holds. `by_turn` finds a turn's paused calls (end_turn
# ends them). While paused an item carries two sparse attributes, `wait_open` and `wait_due` (when
# its tool wait bound passes, epoch ms zero-padded): `by_wait_due` lists the paused calls past their
# bound.
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
