"""Finishing a run: the one place that turns what a run produced into an `ExecutionResult`.

Every runner that ends a call — `SessionRunner.execute` (one executeCode), `ToolsRunner` (a chain
of slices, SPEC §15) and `JobRunner` (a background job's final poll, SPEC §17) — ends it here, so
the agent-visible result always has one shape and one order of operations:
host-side redaction before truncation (§8 layer 2, §6.5), exact raw byte counts, the
classification's error class, a redacted error message and a redacted, cut failure reason, and
what the code raised (`raised.raised`: name, value, traceback), read from the redacted stderr.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from sandbox_common.errors import EXIT_STATUS_ERRORS, SandboxError, SandboxFailure
from sandbox_common.tool_spec import CODE_LANGUAGE

from .classify import Classification
from .output import shape
from .raised import raised, raised_message
from .stream import BoundedText

# Outcomes whose code may have ended with an uncaught exception (an OOM's is MemoryError).
_RAISING_STATUSES = ("error", "oom")


class Runner(Protocol):
    """What finishing needs of a SessionRunner (a protocol: session.py imports this module)."""

    stdout_cap_bytes: int
    stderr_cap_bytes: int
    log_cap_bytes: int
    _redact: Callable[[str], str]

    def _reason(self, text: str) -> str: ...


@dataclass(frozen=True)
class ExecutionResult:
    exit_status: str  # ok | error | timeout | oom
    exit_code: int | None
    stdout: str  # agent-visible: redacted, cut at the cap
    stderr: str
    stdout_bytes: int  # raw byte counts, before redaction and truncation
    stderr_bytes: int
    stdout_truncated: bool
    stderr_truncated: bool
    duration_ms: int
    error: str | None  # agent-facing error class name
    error_message: str | None  # redacted, relayable
    failure_reason: str | None  # redacted, short technical reason (audit row)
    full_stdout: str  # redacted, untruncated up to the log cap: dispatch logs it chunked
    full_stderr: str
    session_stopped: bool  # the session is gone: the next call of the turn needs a fresh one
    # What the code raised, when it ended with an uncaught exception: {name, value, traceback}
    # (redacted), the answer's `exception`.
    exception: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.exit_status == "ok"

    def failure(self) -> SandboxFailure | None:
        """The agent-facing failure of a non-ok result (failure_reason in its fields), else None."""
        if self.ok:
            return None
        cls = EXIT_STATUS_ERRORS.get(self.exit_status, SandboxError)
        return cls(self.error_message or "The code sandbox failed.", failure_reason=self.failure_reason)


def finish_run(
    runner: Runner,
    *,
    stdout: BoundedText,
    stderr: BoundedText,
    exit_status: str,
    exit_code: int | None,
    error: str | None,
    message: str | None,
    reason: str | None,
    duration_ms: int,
    session_stopped: bool,
    stdout_cut: bool = False,
    stderr_cut: bool = False,
    language: str = CODE_LANGUAGE,
) -> ExecutionResult:
    """The result of a run whose outcome is decided. `*_cut`: the producer cut that stream before
    we got it (its end may be half a token, dropped after redaction). `language`: how to read what
    the code raised from its stderr (`raised.raised`). A SandboxError whose code raised an
    exception says which in its message."""
    out = shape(
        stdout,
        cap_bytes=runner.stdout_cap_bytes,
        log_cap_bytes=runner.log_cap_bytes,
        redact=runner._redact,
        source_cut=stdout_cut,
    )
    err = shape(
        stderr,
        cap_bytes=runner.stderr_cap_bytes,
        log_cap_bytes=runner.log_cap_bytes,
        redact=runner._redact,
        source_cut=stderr_cut,
    )
    exception = raised(err.full, language) if exit_status in _RAISING_STATUSES else None
    if exception is not None and error == SandboxError.__name__:
        message = raised_message(exception)
    return ExecutionResult(
        exit_status=exit_status,
        exit_code=exit_code,
        stdout=out.visible,
        stderr=err.visible,
        stdout_bytes=out.raw_bytes,
        stderr_bytes=err.raw_bytes,
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
        duration_ms=max(0, duration_ms),
        error=error,
        error_message=runner._redact(message) if message else None,
        failure_reason=runner._reason(reason) if reason else None,
        full_stdout=out.full,
        full_stderr=err.full,
        session_stopped=session_stopped,
        exception=exception,
    )


def finish_classified(
    runner: Runner,
    verdict: Classification,
    *,
    stdout: BoundedText,
    stderr: BoundedText,
    exit_code: int | None,
    duration_ms: int,
    session_stopped: bool,
    stdout_cut: bool = False,
    stderr_cut: bool = False,
    language: str = CODE_LANGUAGE,
) -> ExecutionResult:
    """`finish_run` with the outcome a `classify()` verdict decided."""
    return finish_run(
        runner,
        stdout=stdout,
        stderr=stderr,
        exit_status=verdict.exit_status,
        exit_code=exit_code,
        error=verdict.error.__name__ if verdict.error else None,
        message=verdict.error_message,
        reason=verdict.failure_reason,
        duration_ms=duration_ms,
        session_stopped=session_stopped,
        stdout_cut=stdout_cut,
        stderr_cut=stderr_cut,
        language=language,
    )
