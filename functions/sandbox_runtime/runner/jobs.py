"""Background jobs, the runner's side (docs/jobs.md): submit, poll and cancel a job in a session.

A job is started by one `executeCode` call that launches an in-sandbox supervisor
(`job_snippets`, `sandbox_session.jobs`) and returns at once; each poll or cancel is one
more `executeCode` call. The final answer is an `ExecutionResult` built exactly like a foreground
call's: host-side redaction before truncation, exact byte counts (the sizes of the job's output
files), the same classification (oom from exit 137 or a MemoryError traceback, error from a
non-zero exit), plus the job's own final state (completed | failed | timed_out | cancelled).

Every method goes through the tenant's `SessionRunner` (its credentials, its interpreter
allowlist, checked before any AWS call) and raises only CrossTenantInterpreter (before any AWS
call) or SessionGone (the session no longer exists: the job's state died with it).
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from typing import Any

from sandbox_common import limits
from sandbox_common.errors import SandboxError, SandboxTimeout
from sandbox_common.tool_spec import CODE_LANGUAGE
from sandbox_session import jobs as rt

from .classify import classify
from .errors import SessionGone
from .execution import ExecutionResult
from .job_snippets import parse_marker, status_source, submit_source
from .output import REDACTION_MARGIN_BYTES, last_utf8
from .session import SessionRunner
from .stream import BoundedText

# Snippet calls are small and bounded; cancel waits up to CANCEL_WAIT_SECONDS in the session.
SUBMIT_TIMEOUT_SECONDS = 30.0
STATUS_TIMEOUT_SECONDS = 30.0

JOB_CANCELLED_MESSAGE = "The background job was cancelled before it finished."
JOB_LOST_MESSAGE = "The background job ended unexpectedly (its supervisor in the sandbox was stopped)."
JOB_SESSION_ENDED_MESSAGE = (
    "The background job's sandbox session ended before the job finished, so its result is lost."
)


def job_timeout_message(timeout_s: int) -> str:
    """A job its session stopped at its own timeout: the job alone ended, the session stays."""
    return (
        f"The background job did not finish within its {timeout_s}-second limit and was stopped. "
        "Only the job was stopped: variables and files of this turn's session are still there."
    )


def job_overdue_message(timeout_s: int) -> str:
    """A job whose session could not stop it (or report its end) in time: the session was stopped."""
    return (
        f"The background job did not finish within its {timeout_s}-second limit and was stopped. "
        "The sandbox session was reset, so variables and files from earlier calls in this turn are gone."
    )


@dataclass(frozen=True)
class JobSubmitted:
    """The job's supervisor was launched (or already existed: a retried submit)."""

    job_id: str
    duration_ms: int
    already_existed: bool


@dataclass(frozen=True)
class JobProgress:
    """A running job's output so far: the last ≤ JOB_PROGRESS_TAIL_BYTES of each stream,
    redacted, and the byte counts written so far."""

    stdout_tail: str
    stderr_tail: str
    stdout_bytes: int
    stderr_bytes: int

    def to_dict(self) -> dict[str, str | int]:
        return {
            "stdout_tail": self.stdout_tail,
            "stderr_tail": self.stderr_tail,
            "stdout_bytes": self.stdout_bytes,
            "stderr_bytes": self.stderr_bytes,
        }


@dataclass(frozen=True)
class JobState:
    """One observation of a job. `result` is set iff `state` is final; `progress` while it runs."""

    job_id: str
    state: str  # running | completed | failed | timed_out | cancelled
    elapsed_ms: int
    result: ExecutionResult | None = None
    progress: JobProgress | None = None
    outputs: int = 0  # how many files under outputs/ the ended job left (its final answer's files)

    @property
    def final(self) -> bool:
        return self.state in rt.TERMINAL_STATES


class JobFailure(Exception):
    """A snippet call failed (service error, timeout, no marker): the job's state is unknown.

    `failure_reason` is redacted and short, for logs and the audit row."""

    def __init__(self, failure_reason: str) -> None:
        super().__init__(failure_reason)
        self.failure_reason = failure_reason


class JobUnknownInSession(JobFailure):
    """The session answered but has no such job (its files are gone): the job cannot be observed."""


class JobRunner:
    def __init__(self, runner: SessionRunner) -> None:
        self.runner = runner

    def submit_job(
        self,
        interpreter_id: str,
        session_id: str,
        *,
        job_id: str,
        code: str,
        timeout_s: int,
        language: str = CODE_LANGUAGE,
    ) -> JobSubmitted:
        # The runtime (~50 KB) travels only when the session does not have this version yet.
        payload, duration_ms = self._call(
            interpreter_id,
            session_id,
            submit_source(job_id, code, timeout_s, with_runtime=False, language=language),
            SUBMIT_TIMEOUT_SECONDS,
        )
        if payload.get("state") == "runtime_missing":
            payload, more_ms = self._call(
                interpreter_id,
                session_id,
                submit_source(job_id, code, timeout_s, language=language),
                SUBMIT_TIMEOUT_SECONDS,
            )
            duration_ms += more_ms
        if payload.get("state") not in ("running", "exists"):
            raise JobFailure(self.runner.output.reason(f"job_submit_unexpected:{payload.get('state')}"))
        return JobSubmitted(
            job_id=job_id, duration_ms=duration_ms, already_existed=payload["state"] == "exists"
        )

    def job_status(self, interpreter_id: str, session_id: str, job_id: str) -> JobState:
        return self._observe(interpreter_id, session_id, job_id, cancel=False)

    def cancel_job(self, interpreter_id: str, session_id: str, job_id: str) -> JobState:
        """Ends the job (its whole process tree) unless it already ended; returns its final state."""
        return self._observe(interpreter_id, session_id, job_id, cancel=True)

    def session_ended_result(self, duration_ms: int) -> ExecutionResult:
        """The final result of a job whose session vanished before its end was observed."""
        return self._failure_result(
            SandboxError.__name__, "error", JOB_SESSION_ENDED_MESSAGE, "job_session_ended", duration_ms
        )

    def overdue_result(self, timeout_s: int, duration_ms: int) -> ExecutionResult:
        """The final result of a job whose deadline passed and whose session dispatch stopped."""
        return self._failure_result(
            SandboxTimeout.__name__,
            "timeout",
            job_overdue_message(timeout_s),
            f"job_deadline_exceeded:{timeout_s}s",
            duration_ms,
            session_stopped=True,
        )

    # --- internals ----------------------------------------------------------------------------
    def _observe(self, interpreter_id: str, session_id: str, job_id: str, *, cancel: bool) -> JobState:
        runner = self.runner
        source = status_source(
            job_id,
            out_limit=runner.output.stdout_cap_bytes + REDACTION_MARGIN_BYTES,
            err_limit=runner.output.stderr_cap_bytes + REDACTION_MARGIN_BYTES,
            cancel=cancel,
        )
        payload, _ = self._call(interpreter_id, session_id, source, STATUS_TIMEOUT_SECONDS)
        state = str(payload.get("state"))
        now = float(payload.get("now") or time.time())
        started = float(payload.get("started_at") or now)
        elapsed_ms = max(0, int(round((now - started) * 1000)))
        if state == "running":
            return JobState(
                job_id=job_id, state="running", elapsed_ms=elapsed_ms, progress=self._progress(payload)
            )
        if state not in rt.TERMINAL_STATES:  # "unknown": the job's files are not in this session
            raise JobUnknownInSession(runner.output.reason(f"job_unknown_in_session:{state}"))
        duration_ms = int(payload.get("duration_ms") or elapsed_ms)
        return JobState(
            job_id=job_id,
            state=state,
            elapsed_ms=duration_ms,
            result=self._final_result(payload, state, duration_ms),
            outputs=_count(payload.get("outputs_count")),
        )

    def _progress(self, payload: dict[str, Any]) -> JobProgress:
        """The running job's tails, redacted here too (host-side, docs/redaction.md) and kept within
        the bound."""
        tails = []
        for stream in ("stdout", "stderr"):
            raw = _decode_tail(payload.get(f"{stream}_tail_b64"))
            tails.append(last_utf8(self.runner.output.redact(raw), limits.JOB_PROGRESS_TAIL_BYTES))
        return JobProgress(
            stdout_tail=tails[0],
            stderr_tail=tails[1],
            stdout_bytes=_count(payload.get("stdout_bytes")),
            stderr_bytes=_count(payload.get("stderr_bytes")),
        )

    def _final_result(self, payload: dict[str, Any], state: str, duration_ms: int) -> ExecutionResult:
        runner = self.runner
        caps = runner.output
        stdout = _bounded(payload.get("stdout_b64"), payload.get("stdout_bytes"), caps.stdout_cap_bytes)
        stderr = _bounded(payload.get("stderr_b64"), payload.get("stderr_bytes"), caps.stderr_cap_bytes)
        tail = _decode(payload.get("stderr_tail_b64"))
        exit_code = payload.get("exit_code")
        exit_code = int(exit_code) if isinstance(exit_code, int) else None
        timeout_s = int(payload.get("timeout_s") or 0)
        error: str | None
        message: str | None
        reason: str | None
        if state == rt.CANCELLED:
            error, exit_status, message, reason = (
                SandboxError.__name__,
                "error",
                JOB_CANCELLED_MESSAGE,
                "job_cancelled",
            )
        elif state == rt.TIMED_OUT:
            error, exit_status = SandboxTimeout.__name__, "timeout"
            message, reason = job_timeout_message(timeout_s), f"job_deadline_exceeded:{timeout_s}s"
        elif payload.get("reason") == "supervisor_lost":
            error, exit_status, message, reason = (
                SandboxError.__name__,
                "error",
                JOB_LOST_MESSAGE,
                "job_supervisor_lost",
            )
        else:
            verdict = classify(
                timed_out=False,
                call_timeout_seconds=timeout_s,
                exit_code=exit_code,
                stderr_tail=tail,
                is_error=False,
                stream_error=None,
                result_events=1,
            )
            exit_status = verdict.exit_status
            error = verdict.error.__name__ if verdict.error else None
            message, reason = verdict.error_message, verdict.failure_reason
        return runner.output.finish(
            stdout=stdout,
            stderr=stderr,
            exit_status=exit_status,
            exit_code=exit_code,
            error=error,
            message=message,
            reason=reason,
            duration_ms=duration_ms,
            session_stopped=False,
            language=str(payload.get("language") or CODE_LANGUAGE),
        )

    def _failure_result(
        self,
        error: str,
        exit_status: str,
        message: str,
        reason: str,
        duration_ms: int,
        *,
        session_stopped: bool = False,
    ) -> ExecutionResult:
        # Messages and reasons here are our own constants: the output's redaction leaves them as they are.
        return self.runner.output.finish(
            stdout=BoundedText(0),
            stderr=BoundedText(0),
            exit_status=exit_status,
            exit_code=None,
            error=error,
            message=message,
            reason=reason,
            duration_ms=duration_ms,
            session_stopped=session_stopped,
        )

    def _call(
        self, interpreter_id: str, session_id: str, source: str, timeout_seconds: float
    ) -> tuple[dict[str, Any], int]:
        runner = self.runner
        runner.invoker.check_owned(interpreter_id)  # before any AWS call
        call = runner.invoker.invoke(interpreter_id, session_id, source, timeout_seconds=timeout_seconds)
        if call.session_gone:
            raise SessionGone(session_id, runner.output.reason(f"invoke_failed:{call.api_error}"))
        outcome = call.outcome
        if call.timed_out:
            raise JobFailure("job_call_timeout")
        if call.api_error is not None:
            raise JobFailure(runner.output.reason(f"invoke_failed:{call.api_error}"))
        if outcome.stream_error is not None:
            raise JobFailure(runner.output.reason(f"stream_exception:{outcome.stream_error}"))
        payload = parse_marker(outcome.stdout.head)
        if payload is None or outcome.is_error or outcome.exit_code not in (None, 0):
            raise JobFailure(
                runner.output.reason(
                    f"job_snippet_failed:exit_code:{outcome.exit_code}:{outcome.stderr.tail[-200:]}"
                )
            )
        return payload, call.duration_ms


def _decode(b64: object) -> str:
    if not isinstance(b64, str):
        return ""
    try:
        return base64.b64decode(b64).decode("utf-8", "replace")
    except ValueError:
        return ""


def _decode_tail(b64: object) -> str:
    """A file's last bytes: a character the cut split at the start is dropped, not mangled."""
    if not isinstance(b64, str):
        return ""
    try:
        raw = base64.b64decode(b64)
    except ValueError:
        return ""
    for skip in range(min(4, len(raw)) + 1):
        try:
            return raw[skip:].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return raw.decode("utf-8", "replace")


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _bounded(b64: object, total: object, cap: int) -> BoundedText:
    """The head the session sent, with the exact byte size of the whole output file."""
    text = _decode(b64)
    bounded = BoundedText.of(text, cap + REDACTION_MARGIN_BYTES)
    if isinstance(total, int) and total >= 0:
        bounded.total_bytes = total
    return bounded
