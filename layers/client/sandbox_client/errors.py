"""What the client raises.

Two kinds of `ok: false` answer reach an agent, and the client keeps them apart:
- a **governance refusal** — dispatch would not run the call (a cap, a sandbox not ready or
  disabled, an invalid request, a wrong turn token) — is raised as a `SandboxRefused` subclass
  carrying the answer's fields: the agent must handle it (wait until `resets_at`, relay the
  sentence, fix the request), it is not a result of its code;
- a **result of running code** (an error, a timeout, running out of memory) stays an
  `ExecutionResult` with `ok` false and a structured `error` (results.py), as a notebook reports a
  cell that raised.

`DispatchUnavailable` (dispatch itself could not be invoked) and the artifact errors are the
client's own failures, never an answer.
"""

from __future__ import annotations

from typing import Any

from .contract import CAP_EXCEEDED, INVALID_REQUEST, PROVISIONING, REASON_TURN_TOKEN_MISMATCH
from .results import FINAL_JOB_STATUSES, ExecutionResult


class DispatchUnavailable(RuntimeError):
    """The dispatch Lambda itself could not be invoked or crashed (not a named sandbox error)."""


class ArtifactUnavailable(RuntimeError):
    """get_file refused (unknown file_id, or another tenant's); `error` names the class."""

    def __init__(self, message: str, error: str = INVALID_REQUEST) -> None:
        super().__init__(message)
        self.error = error


class ArtifactMismatch(RuntimeError):
    """The downloaded bytes do not hash to the artifact's sha256."""


class ToolUnavailable(RuntimeError):
    """This turn has no execute_code tool to serve: begin_turn was not called yet, or it answered
    without one (the tenant or template has no sandbox); the message says which."""


class SandboxRefused(Exception):
    """Dispatch refused the call: nothing of it ran. `error` is the named class dispatch answered,
    `error_message` the sentence to relay, `reason` its short reason when it gave one, `raw` the
    answer exactly as sent. `str(exc)` is the sentence."""

    def __init__(self, answer: dict[str, Any]) -> None:
        self.raw = answer
        self.error = str(answer.get("error") or type(self).__name__)
        self.error_message = str(answer.get("error_message") or "")
        reason = answer.get("reason")
        self.reason = reason if isinstance(reason, str) else None
        super().__init__(self.error_message or self.error)

    def __reduce__(self) -> tuple[type[SandboxRefused], tuple[dict[str, Any]]]:
        # pickled (a worker process, a task queue) and copied from the answer it carries
        return type(self), (self.raw,)

    @property
    def result(self) -> ExecutionResult:
        """The refusal as the typed answer (`ok` false): what the MCP server and the Strands tools
        show the model, the same as for any `ok: false` answer."""
        return ExecutionResult.from_answer(self.raw)


class SandboxCapExceeded(SandboxRefused):
    """A cap refused the call. `dimension` names it (tenant_daily, agent_hourly, tenant_sessions,
    global_sessions, egress_daily_bytes, unknown when the quota could not be checked); `resets_at`
    (ISO-8601 UTC) is when to try again."""

    def __init__(self, answer: dict[str, Any]) -> None:
        super().__init__(answer)
        dimension, resets_at = answer.get("dimension"), answer.get("resets_at")
        self.dimension = dimension if isinstance(dimension, str) else None
        self.resets_at = resets_at if isinstance(resets_at, str) else None


class SandboxProvisioning(SandboxRefused):
    """The sandbox is not there for this call: still being prepared, the tenant disabled (`reason`
    tenant_disabled), its session could not be verified (readiness_check_failed), or local sessions
    cannot be isolated (isolation_unavailable)."""


class SandboxInvalidRequest(SandboxRefused):
    """The request was refused as it stands (a field, an unknown job or tool, a reused call_id with
    other code, ...): nothing was counted or run."""


class TurnTokenMismatch(SandboxInvalidRequest):
    """The turn's `turn_token` was missing or did not match the one its first action used."""


_REFUSALS: dict[str, type[SandboxRefused]] = {
    CAP_EXCEEDED: SandboxCapExceeded,
    PROVISIONING: SandboxProvisioning,
    INVALID_REQUEST: SandboxInvalidRequest,
}


def refusal(answer: dict[str, Any]) -> SandboxRefused | None:
    """The exception for a governance refusal, None for any other answer: a success, a result of
    running code (SandboxError, SandboxTimeout, SandboxOOM), or a background job's final answer
    (its status says how it ended, e.g. `cancelled` by the kill switch with the refusal's class:
    the job ran, and its output so far is its result)."""
    if answer.get("ok") is not False or answer.get("status") in FINAL_JOB_STATUSES:
        return None
    kind = _REFUSALS.get(str(answer.get("error")))
    if kind is None:
        return None
    if kind is SandboxInvalidRequest and answer.get("reason") == REASON_TURN_TOKEN_MISMATCH:
        kind = TurnTokenMismatch
    return kind(answer)


def raise_refusal(answer: dict[str, Any]) -> dict[str, Any]:
    """`answer` itself unless it is a governance refusal, which is raised."""
    refused = refusal(answer)
    if refused is not None:
        raise refused
    return answer
