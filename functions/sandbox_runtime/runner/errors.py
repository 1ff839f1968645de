"""Failures raised by the runner. Each is one of the agent-facing classes of
`sandbox_common.errors` and carries a short technical `failure_reason` for the audit row and
logs (redacted by the caller's redactor before it leaves the runner)."""

from __future__ import annotations

from typing import Any, TypeVar

from sandbox_common.errors import SandboxError, SandboxFailure

F = TypeVar("F", bound=SandboxFailure)


def failure(cls: type[F], message: str, *, failure_reason: str, **fields: Any) -> F:
    """Build an agent-facing failure carrying a technical `failure_reason`.

    As everywhere in dispatch, the reason rides in `fields["failure_reason"]`: dispatch audits it
    and pops it from the agent's response. It is also an attribute for convenience.
    """
    exc = cls(message, failure_reason=failure_reason, **fields)
    exc.failure_reason = failure_reason  # type: ignore[attr-defined]
    return exc


class SessionGone(Exception):
    """InvokeCodeInterpreter was rejected because the session no longer exists (reaped by
    sessionTimeoutSeconds or stopped elsewhere). The request was refused as a whole, so the code
    did not run: dispatch may start a fresh session and run it once."""

    def __init__(self, session_id: str, failure_reason: str) -> None:
        super().__init__(f"session {session_id} is gone")
        self.session_id = session_id
        self.failure_reason = failure_reason


class CrossTenantInterpreter(SandboxError):
    """The interpreter id is not one of this tenant's. Raised before any AWS call.

    Agents see it as a plain `SandboxError`: which other interpreters exist is not theirs to know.
    """

    def __init__(self, message: str, **fields: Any) -> None:
        fields.setdefault("failure_reason", "interpreter_not_owned_by_tenant")
        super().__init__(message, **fields)
        self.failure_reason = fields["failure_reason"]

    @property
    def error(self) -> str:
        return SandboxError.__name__
