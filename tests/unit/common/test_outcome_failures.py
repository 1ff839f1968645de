"""Outcome.failures_answered: the one error wrapper shared by execute_code and a job's submit."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sandbox_common import messages
from sandbox_common.errors import SandboxCapExceeded, SandboxInvalidRequest
from sandbox_common.models import ExecuteCodeRequest
from sandbox_common.outcome import Outcome


def _outcome() -> Outcome:
    req = ExecuteCodeRequest.model_validate(
        {
            "action": "execute_code",
            "tenant_id": "acme",
            "agent_id": "a-1",
            "template_id": "analyst",
            "turn_id": "t-1",
            "call_id": "c-1",
            "code": "pass",
        }
    )
    return Outcome(request=req, invocation_id="inv-1", started_at=datetime(2026, 11, 23, tzinfo=UTC))


def test_failures_answered_invalid_request_propagates_untouched() -> None:
    # Given an outcome
    outcome = _outcome()
    # When the steps raise SandboxInvalidRequest
    with pytest.raises(SandboxInvalidRequest), outcome.failures_answered("x_internal_error"):
        raise SandboxInvalidRequest("bad")
    # Then it propagates (no row is due) and the outcome holds no failure
    assert outcome.failure is None


def test_failures_answered_named_failure_fails_the_outcome() -> None:
    outcome = _outcome()
    cap = SandboxCapExceeded(
        "over", dimension="tenant_daily", resets_at="soon", failure_reason="cap_exceeded:x"
    )
    # When the steps raise a named SandboxFailure
    with outcome.failures_answered("x_internal_error"):
        raise cap
    # Then the outcome carries exactly that failure, answered as such
    assert outcome.failure is cap
    assert outcome.finish().response()["error"] == "SandboxCapExceeded"


def test_failures_answered_unexpected_exception_becomes_internal_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outcome = _outcome()
    # When the steps raise anything else
    with outcome.failures_answered("x_internal_error"):
        raise KeyError("secret detail")
    # Then the agent sees the internal-error sentence, never the exception, and the row its reason
    response = outcome.finish().response()
    assert response["error"] == "SandboxError"
    assert response["error_message"] == messages.INTERNAL
    assert "secret detail" not in str(response)
    assert outcome.failure_reason == "internal_error"
