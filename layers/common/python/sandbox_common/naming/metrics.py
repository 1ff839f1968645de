"""Metrics (namespace METRICS_NAMESPACE) and the dimensions each is emitted with."""

from __future__ import annotations

METRICS_NAMESPACE = "ThinkworkSandbox"
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
