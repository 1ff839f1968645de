"""Visible retries: one list renders the response `events` and the audit `retries`."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sandbox_common import naming as n
from sandbox_common.retries import RetryLog

AT = datetime(2026, 11, 23, 16, 0, 0, 123000, tzinfo=UTC)


def test_retry_log_without_retries_has_no_events_field() -> None:
    log = RetryLog(clock=lambda: AT)
    assert log.response_fields() == {}
    assert log.audit_fields() == {n.AUDIT_ATTR_RETRIES: []}


def test_retry_log_renders_events_and_audit_alike() -> None:
    # Given a reaped session and two quota conflicts
    log = RetryLog(clock=lambda: AT)
    log.record(n.RETRY_SESSION_REAPED, 1)
    log.record_count(n.RETRY_QUOTA_CONFLICT, 2)
    # Then
    expected = [
        {"type": "retrying", "reason": "session_reaped", "attempt": 1, "at": "2026-11-23T16:00:00.123Z"},
        {
            "type": "retrying",
            "reason": "quota_transaction_conflict",
            "attempt": 1,
            "at": "2026-11-23T16:00:00.123Z",
        },
        {
            "type": "retrying",
            "reason": "quota_transaction_conflict",
            "attempt": 2,
            "at": "2026-11-23T16:00:00.123Z",
        },
    ]
    assert log.response_fields() == {"events": expected}
    assert log.audit_fields() == {"retries": expected}


def test_retry_log_rejects_unknown_reason_and_attempt_zero() -> None:
    log = RetryLog(clock=lambda: AT)
    with pytest.raises(ValueError):
        log.record("made_up", 1)
    with pytest.raises(ValueError):
        log.record(n.RETRY_START_THROTTLED, 0)
