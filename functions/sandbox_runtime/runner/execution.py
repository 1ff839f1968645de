"""An executeCode from send to result: sent to the session's interpreter, its event stream parsed,
the run classified, its output redacted and cut, its result made — here, in this order.

Three small objects of a tenant's runner do it, and they are what the rest of the runner uses:
- `Invoker` sends one executeCode through the tenant's invoke client under the runner's deadline
  (a reader thread parses the stream into a `StreamAccumulator`) and answers an `Invocation`; it
  also holds the tenant's interpreter list (`check_owned`, before any AWS call: the second lock
  beside the credentials' session policy);
- `Output` turns what a run produced into the agent-visible `ExecutionResult`: host-side redaction
  before truncation (docs/redaction.md), exact raw byte counts, the verdict's error class, a
  redacted message and failure reason, and what the code raised (`raised`);
- `run_code` is the executeCode of user code: its source by language (a Python cell, a shell
  script, a Node.js program), the deadline the session stops it at, the verdict, the session
  stopped when it cannot be trusted to have stopped the code, the result.
Programmatic tool calling (`tool_calling`) and background jobs (`jobs`) send their own executeCode
calls through the same `Invoker` and end them through the same `Output`, so every result has one
shape and one order of operations.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from typing import Any

from sandbox_common import naming
from sandbox_common.errors import EXIT_STATUS_ERRORS, SandboxError, SandboxFailure
from sandbox_common.redaction.catalogue import Redactor
from sandbox_common.tool_spec import CODE_LANGUAGE

from . import cells, commands, programs
from .classify import Classification, classify
from .credentials import TenantCredentials
from .errors import CrossTenantInterpreter, SessionGone
from .output import cut_utf8, head_limit_bytes, redact_by_lines, shape, source_was_cut
from .raised import raised, raised_message
from .stream import PROTOCOL_ERROR, BoundedText, StreamAccumulator, StreamOutcome, consume

EXECUTE_CODE = "executeCode"
LANGUAGE = "python"  # the executeCode language of every call: other languages run from a Python driver
FAILURE_REASON_MAX_CHARS = 300
# Invoke answered "no such session": it was reaped (sessionTimeoutSeconds) or stopped elsewhere.
SESSION_GONE_CODES = frozenset({"ResourceNotFoundException"})
NOT_OWNED_MESSAGE = "The code sandbox is not available for this request."
# Outcomes whose code may have ended with an uncaught exception (an OOM's is MemoryError).
_RAISING_STATUSES = ("error", "oom")

Redact = Callable[[str], str]


def host_redactor(redactor: Redactor | Redact | None = None) -> Redact:
    """The host-side redaction of a runner: None → the catalogue, line by line; a Redactor → its
    redact (line-chunked unless it has registered values, which may span lines); a plain callable
    str -> str is used as given."""
    if redactor is None:
        from sandbox_common.redaction.catalogue import redact

        return functools.partial(redact_by_lines, redact=redact)
    if isinstance(redactor, Redactor):
        if redactor.has_values:
            return redactor.redact
        return functools.partial(redact_by_lines, redact=redactor.redact)
    if callable(redactor):
        return redactor
    raise TypeError("redactor must be None, a Redactor or a callable str -> str")


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
    ok: bool = field(init=False)  # exit_status "ok" (a field: read wherever the result goes)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ok", self.exit_status == "ok")

    def failure(self) -> SandboxFailure | None:
        """The agent-facing failure of a non-ok result (failure_reason in its fields), else None."""
        if self.ok:
            return None
        cls = EXIT_STATUS_ERRORS.get(self.exit_status, SandboxError)
        return cls(self.error_message or "The code sandbox failed.", failure_reason=self.failure_reason)


@dataclass(frozen=True)
class Invocation:
    """One executeCode as the runner saw it: what the stream said, whether the deadline passed
    first, and the error that refused the call before any stream (a ClientError code and message,
    or a BotoCoreError class)."""

    outcome: StreamOutcome
    timed_out: bool
    api_error: str | None
    duration_ms: int

    @property
    def session_gone(self) -> bool:
        """AgentCore refused the call because the session no longer exists: nothing ran."""
        return self.api_error is not None and self.api_error.split(":", 1)[0] in SESSION_GONE_CODES

    def classify(self, call_timeout_seconds: int, *, session_kept: bool = False) -> Classification:
        """The verdict on this executeCode (the one mapping of an invocation onto its classes)."""
        outcome = self.outcome
        return classify(
            timed_out=self.timed_out,
            call_timeout_seconds=call_timeout_seconds,
            session_kept=session_kept,
            exit_code=outcome.exit_code,
            stderr_tail=outcome.stderr.tail,
            is_error=outcome.is_error,
            stream_error=outcome.stream_error,
            stream_error_message=outcome.stream_error_message or "",
            result_events=outcome.result_events,
            api_error=self.api_error,
        )


class Invoker:
    """Sends a tenant's executeCode calls: its invoke client (the tenant's runner credentials) and
    its interpreters, checked before any AWS call."""

    def __init__(
        self,
        *,
        tenant_id: str,
        allowed_interpreter_ids: Collection[str],
        credentials: TenantCredentials,
        head_limit_bytes: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tenant_id = tenant_id
        self.allowed_interpreter_ids = frozenset(allowed_interpreter_ids)
        self.credentials = credentials
        self.head_limit_bytes = head_limit_bytes  # what a stream parser keeps of each stream
        self.clock = clock

    def owns(self, interpreter_id: str) -> bool:
        return interpreter_id in self.allowed_interpreter_ids

    def check_owned(self, interpreter_id: str) -> None:
        """Raises CrossTenantInterpreter unless the interpreter is one of the tenant's."""
        if interpreter_id not in self.allowed_interpreter_ids:
            raise CrossTenantInterpreter(NOT_OWNED_MESSAGE)

    def invoke(
        self,
        interpreter_id: str,
        session_id: str,
        code: str,
        *,
        timeout_seconds: float,
        accumulator: StreamAccumulator | None = None,
    ) -> Invocation:
        """One executeCode call under the runner's deadline.

        The call runs on a daemon reader thread while this thread waits at most until the
        deadline, wherever the reader is blocked (connect, headers, between events). On expiry
        the caller stops the session, which ends the stream server-side; the reader's socket
        read timeout (deadline + margin) bounds it in any case. The invoke client never retries.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        accumulator = accumulator if accumulator is not None else StreamAccumulator(self.head_limit_bytes)
        cancelled = threading.Event()
        done = threading.Event()
        api_error: list[str] = []
        started = self.clock()
        client: Any = None
        try:
            client = self.credentials.invoke_client()
        except SandboxError as exc:
            api_error.append(str(getattr(exc, "failure_reason", "credentials_unavailable")))
            done.set()

        def read() -> None:
            try:
                answer = client.invoke_code_interpreter(
                    codeInterpreterIdentifier=interpreter_id,
                    sessionId=session_id,
                    name=EXECUTE_CODE,
                    arguments={"language": LANGUAGE, "code": code},
                )
                exact = _exact_byte_counts(answer)
                if exact is not None:
                    accumulator.count_exactly(*exact)
                consume(answer["stream"], accumulator, cancelled=cancelled)
            except ClientError as exc:
                code_, message = client_error(exc)
                api_error.append(f"{code_}:{message}".rstrip(":"))
            except BotoCoreError as exc:
                api_error.append(type(exc).__name__)
            except Exception as exc:  # noqa: BLE001 - the reader must end in `done`, whatever happens
                api_error.append(f"unexpected:{type(exc).__name__}")
            finally:
                done.set()

        if client is not None:
            threading.Thread(target=read, name=f"sandbox-invoke-{session_id[:16]}", daemon=True).start()
        finished = done.wait(timeout=timeout_seconds)
        if not finished:
            cancelled.set()
        duration_ms = max(0, int(round((self.clock() - started) * 1000)))
        return Invocation(
            outcome=accumulator.snapshot(),
            timed_out=not finished,
            api_error=api_error[0] if (finished and api_error) else None,
            duration_ms=duration_ms,
        )


class Output:
    """What the agent sees of a run: redacted host-side, then cut at the caps (the kept head of
    each stream is longer than the cap by a margin, so a token that starts before the cut is whole
    when redaction sees it), with exact byte counts and `*_truncated` true iff the raw count
    exceeds the cap."""

    def __init__(
        self, *, stdout_cap_bytes: int, stderr_cap_bytes: int, log_cap_bytes: int, redact: Redact
    ) -> None:
        self.stdout_cap_bytes = stdout_cap_bytes
        self.stderr_cap_bytes = stderr_cap_bytes
        self.log_cap_bytes = max(log_cap_bytes, stdout_cap_bytes, stderr_cap_bytes)
        self.head_limit_bytes = head_limit_bytes(stdout_cap_bytes, stderr_cap_bytes, self.log_cap_bytes)
        self.redact = redact

    def reason(self, text: str) -> str:
        """A failure reason as the audit row keeps it: redacted, then cut (a cut before redaction
        could leave a token's head too short to be recognised)."""
        return cut_utf8(self.redact(text), FAILURE_REASON_MAX_CHARS)

    def finish(
        self,
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
        we got it (its end may be half a token, dropped after redaction). `language`: how to read
        what the code raised from its stderr. A SandboxError whose code raised an exception says
        which in its message."""
        out = shape(
            stdout,
            cap_bytes=self.stdout_cap_bytes,
            log_cap_bytes=self.log_cap_bytes,
            redact=self.redact,
            source_cut=stdout_cut,
        )
        err = shape(
            stderr,
            cap_bytes=self.stderr_cap_bytes,
            log_cap_bytes=self.log_cap_bytes,
            redact=self.redact,
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
            error_message=self.redact(message) if message else None,
            failure_reason=self.reason(reason) if reason else None,
            full_stdout=out.full,
            full_stderr=err.full,
            session_stopped=session_stopped,
            exception=exception,
        )

    def finish_classified(
        self,
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
        """`finish` with the outcome a verdict decided."""
        return self.finish(
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


def run_code(
    invoker: Invoker,
    output: Output,
    stop_session: Callable[[str, str], bool],
    interpreter_id: str,
    session_id: str,
    code: str,
    *,
    limit_seconds: float,
    language: str = commands.PYTHON,
) -> ExecutionResult:
    """User code, byte-exact, for at most `limit_seconds` (the per-call timeout, or less when the
    caller has less time left); an overrun is this call's `timeout`. The session stops the code a
    little before that deadline, so that its output so far comes back with the timeout: Python code
    through the cell runtime (`cells`), which keeps the session, a shell script (`commands`) or a
    Node.js program (`programs`), after which the session is reset.

    Every outcome is a result, except two refusals in which the code certainly did not run:
    CrossTenantInterpreter (before any AWS call) and SessionGone (AgentCore rejected the invoke
    because the session no longer exists).
    """
    invoker.check_owned(interpreter_id)
    inner = commands.inner_deadline(limit_seconds)
    if language == commands.BASH:
        source = commands.command_source(code, inner)
    elif language in programs.LANGUAGES:
        source = programs.program_source(code, language, inner)
    else:
        source = cells.cell_source(code, inner)
    call = invoker.invoke(interpreter_id, session_id, source, timeout_seconds=limit_seconds)
    if call.session_gone:
        raise SessionGone(session_id, output.reason(f"invoke_failed:{call.api_error}"))
    # Stopped in the session at the inner deadline: a Python cell was interrupted there and its
    # session carries on; a script or a Node.js program was killed, and its session is reset like
    # after any timeout (docs/tool-surface.md).
    kept = False
    if not call.timed_out and commands.stopped_at_deadline(call.outcome.exit_code, call.duration_ms, inner):
        call = replace(call, timed_out=True)
        kept = language == commands.PYTHON
    outcome = call.outcome
    verdict = call.classify(int(limit_seconds), session_kept=kept)
    session_stopped = False
    if (call.timed_out and not kept) or outcome.stream_error == PROTOCOL_ERROR:
        # The code may still be running: stop it so it cannot outlive the call, and make the next
        # call of the turn start (and announce) a fresh session. A stream that could not be read is
        # a protocol error: nothing more of that session is trusted.
        stop_session(interpreter_id, session_id)
        session_stopped = True
    return output.finish_classified(
        verdict,
        stdout=outcome.stdout,
        stderr=outcome.stderr,
        exit_code=None if call.timed_out else outcome.exit_code,
        duration_ms=call.duration_ms,
        session_stopped=session_stopped,
        stdout_cut=source_was_cut(outcome.stdout),
        stderr_cut=source_was_cut(outcome.stderr),
        language=language,
    )


def client_error(exc: Any) -> tuple[str, str]:
    """(code, message) of a botocore ClientError."""
    error = exc.response.get("Error", {}) if isinstance(getattr(exc, "response", None), dict) else {}
    return str(error.get("Code") or "Unknown"), str(error.get("Message") or "")


def _exact_byte_counts(answer: Any) -> tuple[int, int] | None:
    """(stdout, stderr) bytes the code wrote, from the local interpreter's response headers."""
    headers = answer.get("ResponseMetadata", {}).get("HTTPHeaders", {}) if isinstance(answer, dict) else {}
    values = (headers.get(naming.LOCAL_STDOUT_BYTES_HEADER), headers.get(naming.LOCAL_STDERR_BYTES_HEADER))
    if not all(isinstance(v, str) and v.isdigit() for v in values):
        return None
    return int(str(values[0])), int(str(values[1]))
