"""The session runner (SPEC §6): start a tenant's session, prove the in-sandbox redactor is in
place, run user code byte-exact under a runner-enforced deadline, stop sessions.

Every AgentCore call goes through the tenant's session-runner credentials, and every interpreter
id is checked against the tenant's own list BEFORE any AWS call (§6.4): two locks on one door.
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

from sandbox_common import naming
from sandbox_common.errors import SandboxError, SandboxProvisioning
from sandbox_common.messages import ISOLATION_UNAVAILABLE
from sandbox_common.observability import emit_metric, logger

from sandbox_runtime.egress_store import EgressStoreUnavailable

from . import cells, commands, programs
from .classify import Classification, classify
from .credentials import TenantCredentials
from .egress import SessionEgress, bind_problem, setup_source
from .errors import CrossTenantInterpreter, SessionGone, failure
from .finish import ExecutionResult, finish_classified
from .output import DEFAULT_LOG_CAP_BYTES, cut_utf8, head_limit_bytes, redact_by_lines, source_was_cut
from .stream import PROTOCOL_ERROR, StreamAccumulator, StreamOutcome, consume

EXECUTE_CODE = "executeCode"
LANGUAGE = "python"
FAILURE_REASON_MAX_CHARS = 300

# Start refused because the interpreter is not there / not READY yet: the agent should wait,
# not report a bug. Anything else from Start is a substrate failure.
_NOT_READY_CODES = frozenset({"ResourceNotFoundException", "ConflictException"})
# Start errors that mean the request was rejected before anything was created (4xx); anything
# else (5xx, unknown codes) may have created a session whose answer we lost.
READINESS_TIMEOUT_SECONDS = 30
_NOT_APPLIED_CODES = frozenset(
    {"AccessDeniedException", "ValidationException", "ThrottlingException", "ServiceQuotaExceededException"}
)
_NOT_READY_MESSAGE = re.compile(r"not\s+ready|not\s+in\s+(?:a\s+)?ready|creating|status", re.IGNORECASE)
# Invoke answered "no such session": it was reaped (sessionTimeoutSeconds) or stopped elsewhere.
SESSION_GONE_CODES = frozenset({"ResourceNotFoundException"})
_SESSION_NAME_BAD = re.compile(r"[^A-Za-z0-9]+")

_PROVISIONING_MESSAGE = (
    "The code sandbox for this tenant is still being prepared; please try again in a few minutes."
)
_READINESS_MESSAGE = (
    "The code sandbox could not be verified as safe to use, so no code was run; please try again shortly."
)
_EGRESS_MESSAGE = (
    "The code sandbox's network access could not be set up, so no code was run; please try again shortly."
)


def session_name(raw: str) -> str:
    """A session name AgentCore accepts: letters, digits and single hyphens, ≤ 100 chars."""
    name = _SESSION_NAME_BAD.sub("-", raw).strip("-")[:100].rstrip("-")
    return name or "sandbox-session"


@dataclass(frozen=True)
class _Invocation:
    outcome: StreamOutcome
    timed_out: bool
    api_error: str | None  # ClientError code / BotoCoreError class before the stream began
    duration_ms: int

    def classify(self, call_timeout_seconds: int, *, session_kept: bool = False) -> Classification:
        """The verdict on this executeCode (the one mapping of an invocation onto §6.4's classes)."""
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


class SessionRunner:
    def __init__(
        self,
        *,
        tenant_id: str,
        allowed_interpreter_ids: Collection[str],
        runner_role_arn: str,
        allowed_interpreter_arns: Collection[str] = (),
        session_timeout_seconds: int,
        call_timeout_seconds: int,
        stdout_cap_bytes: int,
        stderr_cap_bytes: int,
        redactor: Any = None,
        clock: Callable[[], float] = time.monotonic,
        log_cap_bytes: int = DEFAULT_LOG_CAP_BYTES,
        egress: SessionEgress | None = None,
        egress_interpreters: Mapping[str, str] | None = None,
    ) -> None:
        """`egress_interpreters`: the tenant's interpreters of `allowlist` environments (id ->
        environment); their sessions get a proxy credential (runner/egress.py) from `egress`."""
        self.tenant_id = tenant_id
        self.allowed_interpreter_ids = frozenset(allowed_interpreter_ids)
        self.egress = egress
        self.egress_interpreters = dict(egress_interpreters or {})
        self.session_timeout_seconds = session_timeout_seconds
        self.call_timeout_seconds = call_timeout_seconds
        self.stdout_cap_bytes = stdout_cap_bytes
        self.stderr_cap_bytes = stderr_cap_bytes
        self.log_cap_bytes = max(log_cap_bytes, stdout_cap_bytes, stderr_cap_bytes)
        self._head_limit = head_limit_bytes(stdout_cap_bytes, stderr_cap_bytes, self.log_cap_bytes)
        self._clock = clock
        self._redact = _redact_function(redactor)
        self.credentials = TenantCredentials(
            tenant_id=tenant_id,
            role_arn=runner_role_arn,
            interpreter_arns=tuple(allowed_interpreter_arns),
            call_timeout_seconds=call_timeout_seconds,
        )

    # --- sessions -----------------------------------------------------------------------------
    def start_session(
        self, interpreter_id: str, *, name: str | None = None, client_token: str | None = None
    ) -> str:
        """Start a session and run the readiness preamble; returns the session id.

        `name` should be unique per start attempt and `client_token` (≥ 33 chars) stable across
        its retries: botocore retries Start with the same token, and if the answer is still lost
        (5xx, timeout, unreadable) the session may exist without us knowing its id, so the runner
        looks it up by name and stops it — a lost answer never leaves an orphaned session.

        A session of an `allowlist` environment gets its proxy credential before the readiness
        call, which sets its proxy configuration and must bind the credential at the proxy.

        Raises SandboxProvisioning (reason interpreter_not_ready / readiness_check_failed /
        egress_unavailable), SandboxError, or CrossTenantInterpreter (before any AWS call).
        """
        from botocore.exceptions import BotoCoreError, ClientError

        self._check_owned(interpreter_id)
        control = self.credentials.control_client()
        start_name = session_name(name or f"sbx-{self.tenant_id}")
        request: dict[str, Any] = {
            "codeInterpreterIdentifier": interpreter_id,
            "name": start_name,
            "sessionTimeoutSeconds": self.session_timeout_seconds,
        }
        if client_token:
            request["clientToken"] = client_token
        try:
            answer = control.start_code_interpreter_session(**request)
            session_id = str(answer["sessionId"])
        except (KeyError, TypeError):  # an answer without a session id: it may exist all the same
            self._stop_orphans(interpreter_id, start_name)
            raise failure(
                SandboxError,
                "The code sandbox could not start a session; please try again.",
                failure_reason="start_failed:malformed_response",
            ) from None
        except ClientError as exc:
            code, message = _client_error(exc)
            if code == "AccessDeniedException" and message.startswith(naming.REASON_ISOLATION_UNAVAILABLE):
                # The local interpreter cannot isolate sessions here (SPEC §18): nothing was
                # created; the operator must install bubblewrap (the failure reason says how).
                raise failure(
                    SandboxProvisioning,
                    ISOLATION_UNAVAILABLE,
                    failure_reason=self._reason(f"start_refused:{code}:{message}"),
                    reason=naming.REASON_ISOLATION_UNAVAILABLE,
                ) from None
            if code in _NOT_READY_CODES or (
                code == "ValidationException" and _NOT_READY_MESSAGE.search(message)
            ):
                raise failure(
                    SandboxProvisioning,
                    _PROVISIONING_MESSAGE,
                    failure_reason=self._reason(f"start_refused:{code}:{message}"),
                    reason="interpreter_not_ready",
                ) from None
            if code not in _NOT_APPLIED_CODES:  # 5xx and unknown: the session may have been created
                self._stop_orphans(interpreter_id, start_name)
            raise failure(
                SandboxError,
                "The code sandbox could not start a session; please try again.",
                failure_reason=self._reason(f"start_failed:{code}:{message}"),
            ) from None
        except BotoCoreError as exc:  # timeouts, dropped connections: outcome unknown
            self._stop_orphans(interpreter_id, start_name)
            raise failure(
                SandboxError,
                "The code sandbox could not start a session; please try again.",
                failure_reason=f"start_failed:{type(exc).__name__}",
            ) from None
        secret = None
        environment = self.egress_interpreters.get(interpreter_id)
        if environment is not None:
            secret = self._issue_credential(interpreter_id, session_id, environment)
        self._check_readiness(interpreter_id, session_id, secret)
        return session_id

    def allowlist(self, interpreter_id: str) -> bool:
        """Sessions of this interpreter go out through the egress proxy only (`allowlist`)."""
        return interpreter_id in self.egress_interpreters

    def _issue_credential(self, interpreter_id: str, session_id: str, environment: str) -> str:
        """The new session's proxy credential; on any failure the session is stopped and the start
        fails as a provisioning failure: an allowlist session never runs without its credential."""
        if self.egress is None or self.egress.endpoints is None:
            problem = "not_configured"
        else:
            try:
                return self.egress.store.issue(
                    session_id,
                    tenant_id=self.tenant_id,
                    environment=environment,
                    lifetime_seconds=self.session_timeout_seconds,
                )
            except EgressStoreUnavailable as exc:
                problem = exc.reason
        self.stop_session(interpreter_id, session_id)
        reason = f"{naming.REASON_EGRESS_UNAVAILABLE}:{problem}"
        logger.warning(
            "egress credential not issued; session stopped",
            extra={"session_id": session_id, "tenant_id": self.tenant_id, "failure_reason": reason},
        )
        raise failure(
            SandboxProvisioning,
            _EGRESS_MESSAGE,
            failure_reason=reason,
            reason=naming.REASON_EGRESS_UNAVAILABLE,
        )

    def _stop_orphans(self, interpreter_id: str, name: str) -> None:
        """Stop READY sessions of this start attempt (found by its unique name). Best effort:
        whatever this misses, the interpreter's sessionTimeoutSeconds reaps."""
        try:
            listed = self.credentials.control_client().list_code_interpreter_sessions(
                codeInterpreterIdentifier=interpreter_id, status="READY"
            )
            orphans = [s["sessionId"] for s in listed.get("items", []) if s.get("name") == name]
        except Exception as exc:  # noqa: BLE001 — never mask the start failure being reported
            logger.warning(
                "orphan lookup failed",
                extra={"tenant_id": self.tenant_id, "failure_reason": type(exc).__name__},
            )
            return
        for session_id in orphans:
            logger.warning(
                "stopping session whose start answer was lost",
                extra={"tenant_id": self.tenant_id, "session_id": session_id},
            )
            self.stop_session(interpreter_id, session_id)

    def stop_session(self, interpreter_id: str, session_id: str) -> bool:
        """Stop a session. Never raises: a failed stop is logged, counted (alarmed) and left to
        the interpreter's sessionTimeoutSeconds. Returns True iff the session is no longer
        running: AgentCore confirmed the stop, or it was already gone."""
        from botocore.exceptions import ClientError

        if interpreter_id not in self.allowed_interpreter_ids:
            logger.warning(
                "session stop refused: interpreter not owned by tenant", extra={"tenant_id": self.tenant_id}
            )
            return False
        if self.allowlist(interpreter_id):
            self._revoke_credential(session_id)
        try:
            self.credentials.control_client().stop_code_interpreter_session(
                codeInterpreterIdentifier=interpreter_id, sessionId=session_id
            )
            return True
        except ClientError as exc:
            code, _ = _client_error(exc)
            if code == "ResourceNotFoundException":  # already gone (reaped or stopped): nothing to do
                logger.info(
                    "session already gone", extra={"session_id": session_id, "tenant_id": self.tenant_id}
                )
                return True
            reason = f"stop_failed:{code}"
        except Exception as exc:  # noqa: BLE001 - a stop must never break the caller's result
            reason = f"stop_failed:{getattr(exc, 'failure_reason', type(exc).__name__)}"
        logger.warning(
            "session stop failed",
            extra={"session_id": session_id, "tenant_id": self.tenant_id, "failure_reason": reason},
        )
        emit_metric(naming.METRIC_SESSION_STOP_FAILED)
        return False

    def _revoke_credential(self, session_id: str) -> None:
        """Before the stop: from now on the proxy refuses this session's credential. A failure is
        logged; the credential still ends at its expiry (the session's time-to-live)."""
        if self.egress is None:
            return
        try:
            self.egress.store.revoke(session_id)
        except EgressStoreUnavailable as exc:
            logger.warning(
                "egress credential revoke failed",
                extra={"session_id": session_id, "tenant_id": self.tenant_id, "failure_reason": exc.reason},
            )

    # --- code ---------------------------------------------------------------------------------
    def execute(
        self,
        interpreter_id: str,
        session_id: str,
        code: str,
        *,
        deadline_seconds: float | None = None,
        language: str = commands.PYTHON,
    ) -> ExecutionResult:
        """Run user code byte-exact in the session, for at most the per-call timeout — or less
        when the caller has less time left (`deadline_seconds`, e.g. the Lambda's remaining time
        minus what answering needs); either way an overrun is this call's `timeout`. The session
        stops the code a little before that deadline, so that its output so far comes back with
        the timeout: Python code through the cell runtime (`cells`), which keeps the session, and
        with `language="bash"` a shell script (`commands`), with "javascript" / "typescript" a
        Node.js program (`programs`), after which the session is reset.

        Every outcome is a result, except two refusals in which the code certainly did not run:
        CrossTenantInterpreter (before any AWS call) and SessionGone (AgentCore rejected the
        invoke because the session no longer exists; dispatch starts a fresh one).
        """
        self._check_owned(interpreter_id)
        limit = (
            self.call_timeout_seconds
            if deadline_seconds is None
            else min(self.call_timeout_seconds, max(1.0, deadline_seconds))
        )
        inner = commands.inner_deadline(limit)
        if language == commands.BASH:
            source = commands.command_source(code, inner)
        elif language in programs.LANGUAGES:
            source = programs.program_source(code, language, inner)
        else:
            source = cells.cell_source(code, inner)
        call = self._invoke(interpreter_id, session_id, source, timeout_seconds=limit)
        if call.api_error is not None and call.api_error.split(":", 1)[0] in SESSION_GONE_CODES:
            raise SessionGone(session_id, self._reason(f"invoke_failed:{call.api_error}"))
        # Stopped in the session at the inner deadline: a Python cell was interrupted there and
        # its session carries on; a script or a Node.js program was killed, and its session is
        # reset like after any timeout (docs/tool-surface.md).
        kept = False
        if not call.timed_out and commands.stopped_at_deadline(
            call.outcome.exit_code, call.duration_ms, inner
        ):
            call = replace(call, timed_out=True)
            kept = language == commands.PYTHON
        outcome = call.outcome
        verdict = call.classify(int(limit), session_kept=kept)
        session_stopped = False
        if (call.timed_out and not kept) or outcome.stream_error == PROTOCOL_ERROR:
            # The code may still be running: stop it so it cannot outlive the call, and make
            # the next call of the turn start (and announce) a fresh session. A stream that could
            # not be read is a protocol error: nothing more of that session is trusted.
            self.stop_session(interpreter_id, session_id)
            session_stopped = True
        return finish_classified(
            self,
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

    # --- internals ----------------------------------------------------------------------------
    def _check_owned(self, interpreter_id: str) -> None:
        if interpreter_id not in self.allowed_interpreter_ids:
            raise CrossTenantInterpreter("The code sandbox is not available for this request.")

    def _check_readiness(self, interpreter_id: str, session_id: str, secret: str | None = None) -> None:
        """The readiness call (its preamble, and for an allowlist session with its proxy credential
        `secret`, the egress set-up and the bind); stops the session and raises unless it passed."""
        from sandbox_common.redaction.stdio import check_readiness

        code = readiness_source()
        if secret is not None:
            assert self.egress is not None and self.egress.endpoints is not None  # issued from them
            code = (
                readiness_source(values=(secret,))
                + "\n"
                + setup_source(self.egress.endpoints, session_id, secret, bind_scheme=self.egress.bind_scheme)
            )
        # The preamble is tiny: its own short deadline, so a hung readiness check cannot eat the
        # time the user's code (and the answer) need.
        call = self._invoke(
            interpreter_id,
            session_id,
            code,
            timeout_seconds=min(READINESS_TIMEOUT_SECONDS, self.call_timeout_seconds),
        )
        outcome = call.outcome
        if call.timed_out:
            problem = "timeout"
        elif call.api_error is not None:
            problem = f"invoke_failed:{call.api_error}"
        elif outcome.stream_error is not None:
            problem = f"stream_exception:{outcome.stream_error}"
        elif outcome.result_events == 0:
            problem = "empty_stream"
        elif outcome.is_error:
            problem = "is_error"
        elif outcome.exit_code not in (None, 0):
            problem = f"exit_code:{outcome.exit_code}"
        elif not check_readiness(outcome.stdout.head):
            problem = "marker_missing_or_not_installed"
        elif secret is not None and (bound := bind_problem(outcome.stdout.head)) is not None:
            problem = bound
        else:
            return
        self.stop_session(interpreter_id, session_id)
        emit_metric(naming.METRIC_READINESS_FAILED)
        reason = self._reason(f"readiness_check_failed:{problem}")
        logger.warning(
            "readiness check failed; session stopped",
            extra={"session_id": session_id, "tenant_id": self.tenant_id, "failure_reason": reason},
        )
        raise failure(
            SandboxProvisioning, _READINESS_MESSAGE, failure_reason=reason, reason="readiness_check_failed"
        )

    def _invoke(
        self,
        interpreter_id: str,
        session_id: str,
        code: str,
        *,
        timeout_seconds: float,
        accumulator: StreamAccumulator | None = None,
    ) -> _Invocation:
        """One executeCode call under the runner's deadline.

        The call runs on a daemon reader thread while this thread waits at most until the
        deadline, wherever the reader is blocked (connect, headers, between events). On expiry
        the caller stops the session, which ends the stream server-side; the reader's socket
        read timeout (deadline + margin) bounds it in any case. The invoke client never retries.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        accumulator = accumulator if accumulator is not None else StreamAccumulator(self._head_limit)
        cancelled = threading.Event()
        done = threading.Event()
        api_error: list[str] = []
        started = self._clock()
        try:
            client = self.credentials.invoke_client()
        except SandboxError as exc:
            api_error.append(getattr(exc, "failure_reason", "credentials_unavailable"))
            done.set()
            client = None

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
                code_, message = _client_error(exc)
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
        duration_ms = max(0, int(round((self._clock() - started) * 1000)))
        return _Invocation(
            outcome=accumulator.snapshot(),
            timed_out=not finished,
            api_error=api_error[0] if (finished and api_error) else None,
            duration_ms=duration_ms,
        )

    def _reason(self, text: str) -> str:
        return cut_utf8(self._redact(text), FAILURE_REASON_MAX_CHARS)


def readiness_source(values: tuple[str, ...] = ()) -> str:
    """The readiness call's code: the stdio redactor's preamble, with exact `values` to redact
    too (an allowlist session's proxy secret), then the tools runtime's installer (programmatic
    tool calling), which prints nothing on success and whose failure only disables tool calls,
    never the redactor or its readiness marker."""
    from sandbox_common.redaction.stdio import preamble_source
    from sandbox_common.tools_protocol import installer_source

    return (preamble_source(values) if values else preamble_source()) + "\n" + installer_source()


def _exact_byte_counts(answer: Any) -> tuple[int, int] | None:
    """(stdout, stderr) bytes the code wrote, from the local interpreter's response headers."""
    headers = answer.get("ResponseMetadata", {}).get("HTTPHeaders", {}) if isinstance(answer, dict) else {}
    values = (headers.get(naming.LOCAL_STDOUT_BYTES_HEADER), headers.get(naming.LOCAL_STDERR_BYTES_HEADER))
    if not all(isinstance(v, str) and v.isdigit() for v in values):
        return None
    return int(values[0]), int(values[1])  # type: ignore[arg-type]


def _client_error(exc: Any) -> tuple[str, str]:
    error = exc.response.get("Error", {}) if isinstance(getattr(exc, "response", None), dict) else {}
    return str(error.get("Code") or "Unknown"), str(error.get("Message") or "")


def _redact_function(redactor: Any) -> Callable[[str], str]:
    """None → the catalogue; a Redactor → its redact (line-chunked unless it has registered
    values, which may span lines); a plain callable is used as given."""
    if redactor is None:
        from sandbox_common.redaction.catalogue import redact

        return functools.partial(redact_by_lines, redact=redact)
    if callable(getattr(redactor, "redact", None)):
        if getattr(redactor, "has_values", True):
            return redactor.redact  # type: ignore[no-any-return]
        return functools.partial(redact_by_lines, redact=redactor.redact)
    if callable(redactor):
        return redactor  # type: ignore[no-any-return]
    raise TypeError("redactor must be None, a Redactor or a callable str -> str")
