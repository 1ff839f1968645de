"""The stage's alarms, each with its runbook under runbooks/."""

from __future__ import annotations

from enum import StrEnum

from .ids import PROJECT

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
