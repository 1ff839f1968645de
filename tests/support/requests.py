"""Request models and outcomes as dispatch builds them, for unit tests: one default request
(tenant acme, agent-7, template analyst, turn-1, call-1, `print(1)`) that a test overrides by
keyword, and the finished outcome of a runner result."""

from __future__ import annotations

from typing import Any

from sandbox_common.models import ExecuteCodeRequest
from sandbox_common.outcome import Outcome
from sandbox_common.windows import utc_now

DEFAULTS: dict[str, Any] = {
    "action": "execute_code",
    "tenant_id": "acme",
    "agent_id": "agent-7",
    "template_id": "analyst",
    "turn_id": "turn-1",
    "call_id": "call-1",
    "code": "print(1)",
}


def execute_request(**fields: Any) -> ExecuteCodeRequest:
    return ExecuteCodeRequest(**{**DEFAULTS, **fields})


def outcome_of(result: Any, request: ExecuteCodeRequest | None = None) -> Outcome:
    """The finished outcome dispatch builds from a runner result (it renders the response and the
    audit row)."""
    outcome = Outcome(request=request or execute_request(), invocation_id="inv", started_at=utc_now())
    outcome.ran(result, result.failure())
    return outcome.finish()
