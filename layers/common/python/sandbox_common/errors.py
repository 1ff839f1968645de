"""Agent-facing error classes. The class name is the `error` string the agent sees."""

from __future__ import annotations

from typing import Any


class SandboxFailure(Exception):
    """Base of every named failure. `exit_status` is the audit/metric status it maps to."""

    exit_status: str = "error"

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields

    @property
    def error(self) -> str:
        return type(self).__name__

    def to_response(self) -> dict[str, Any]:
        body: dict[str, Any] = {"ok": False, "error": self.error, "error_message": self.message}
        body.update(self.fields)
        return body


class SandboxInvalidRequest(SandboxFailure):
    exit_status = "invalid"  # never audited: invalid requests write no row


class SandboxProvisioning(SandboxFailure):
    exit_status = "provisioning"


class SandboxCapExceeded(SandboxFailure):
    exit_status = "cap_exceeded"


class SandboxTimeout(SandboxFailure):
    exit_status = "timeout"


class SandboxOOM(SandboxFailure):
    exit_status = "oom"


class SandboxError(SandboxFailure):
    exit_status = "error"


EXIT_STATUS_ERRORS: dict[str, type[SandboxFailure]] = {
    "provisioning": SandboxProvisioning,
    "cap_exceeded": SandboxCapExceeded,
    "timeout": SandboxTimeout,
    "oom": SandboxOOM,
    "error": SandboxError,
}
EXIT_STATUSES: tuple[str, ...] = ("ok", "error", "timeout", "oom", "cap_exceeded", "provisioning")


class StillRunning(Exception):
    """A retry of a call (an execute_code's call_id, a resume's continuation) whose original is
    still in progress, or whose worker died before its deadline passed: the original (or whoever
    finishes it) writes the call's audit row; the retry is answered at once SandboxError
    (messages.STILL_RUNNING, `reason: call_in_progress`, `retry_after_s`) without one."""

    def __init__(self, retry_after_s: int = 1) -> None:
        super().__init__(type(self).__name__)
        self.retry_after_s = max(1, int(retry_after_s))
