"""The session runner: start a tenant's session and prove the in-sandbox redactor is in place,
run user code in it, stop it.

A `SessionRunner` is one tenant's: its credentials (the session-runner role confined to the
tenant's interpreters) and three small objects every run goes through (`execution`): its `invoker`
(sends an executeCode, the tenant's interpreter list checked before any AWS call: two locks on one
door), its `output` (host-side redaction, truncation, the result) and its `files` (the file tools).
Programmatic tool calling, background jobs and artifact collection use those objects; nothing
outside reads the runner's private state.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

from sandbox_common import naming
from sandbox_common.errors import SandboxError, SandboxProvisioning
from sandbox_common.messages import ISOLATION_UNAVAILABLE
from sandbox_common.observability import emit_metric, logger
from sandbox_common.redaction.catalogue import Redactor

from sandbox_runtime.egress_store import EgressStoreUnavailable

from . import commands
from .credentials import TenantCredentials
from .egress import SessionEgress, bind_problem, setup_source
from .errors import failure
from .execution import (
    SESSION_GONE_CODES,
    ExecutionResult,
    Invoker,
    Output,
    client_error,
    host_redactor,
    run_code,
)
from .output import DEFAULT_LOG_CAP_BYTES
from .tools import SessionFiles

__all__ = ["SESSION_GONE_CODES", "ExecutionResult", "SessionRunner", "readiness_source", "session_name"]

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
        redactor: Redactor | Callable[[str], str] | None = None,
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
        self.credentials = TenantCredentials(
            tenant_id=tenant_id,
            role_arn=runner_role_arn,
            interpreter_arns=tuple(allowed_interpreter_arns),
            call_timeout_seconds=call_timeout_seconds,
        )
        self.output = Output(
            stdout_cap_bytes=stdout_cap_bytes,
            stderr_cap_bytes=stderr_cap_bytes,
            log_cap_bytes=log_cap_bytes,
            redact=host_redactor(redactor),
        )
        self.invoker = Invoker(
            tenant_id=tenant_id,
            allowed_interpreter_ids=self.allowed_interpreter_ids,
            credentials=self.credentials,
            head_limit_bytes=self.output.head_limit_bytes,
            clock=clock,
        )
        self.files = SessionFiles(
            tenant_id=tenant_id,
            allowed_interpreter_ids=self.allowed_interpreter_ids,
            credentials=self.credentials,
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

        self.invoker.check_owned(interpreter_id)
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
            code, message = client_error(exc)
            if code == "AccessDeniedException" and message.startswith(naming.REASON_ISOLATION_UNAVAILABLE):
                # The local interpreter cannot isolate sessions here (docs/local-stack.md): nothing was
                # created; the operator must install bubblewrap (the failure reason says how).
                raise failure(
                    SandboxProvisioning,
                    ISOLATION_UNAVAILABLE,
                    failure_reason=self.output.reason(f"start_refused:{code}:{message}"),
                    reason=naming.REASON_ISOLATION_UNAVAILABLE,
                ) from None
            if code in _NOT_READY_CODES or (
                code == "ValidationException" and _NOT_READY_MESSAGE.search(message)
            ):
                raise failure(
                    SandboxProvisioning,
                    _PROVISIONING_MESSAGE,
                    failure_reason=self.output.reason(f"start_refused:{code}:{message}"),
                    reason="interpreter_not_ready",
                ) from None
            if code not in _NOT_APPLIED_CODES:  # 5xx and unknown: the session may have been created
                self._stop_orphans(interpreter_id, start_name)
            raise failure(
                SandboxError,
                "The code sandbox could not start a session; please try again.",
                failure_reason=self.output.reason(f"start_failed:{code}:{message}"),
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
            code, _ = client_error(exc)
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
        """Run user code byte-exact in the session (`execution.run_code`), for at most the per-call
        timeout — or less when the caller has less time left (`deadline_seconds`, e.g. the
        Lambda's remaining time minus what answering needs); either way an overrun is this call's
        `timeout`. Raises only CrossTenantInterpreter (before any AWS call) and SessionGone (the
        session no longer exists; the code did not run)."""
        limit = (
            self.call_timeout_seconds
            if deadline_seconds is None
            else min(self.call_timeout_seconds, max(1.0, deadline_seconds))
        )
        return run_code(
            self.invoker,
            self.output,
            self.stop_session,
            interpreter_id,
            session_id,
            code,
            limit_seconds=limit,
            language=language,
        )

    # --- readiness ----------------------------------------------------------------------------
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
        call = self.invoker.invoke(
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
        reason = self.output.reason(f"readiness_check_failed:{problem}")
        logger.warning(
            "readiness check failed; session stopped",
            extra={"session_id": session_id, "tenant_id": self.tenant_id, "failure_reason": reason},
        )
        raise failure(
            SandboxProvisioning, _READINESS_MESSAGE, failure_reason=reason, reason="readiness_check_failed"
        )


def readiness_source(values: tuple[str, ...] = ()) -> str:
    """The readiness call's code: the stdio redactor's preamble, with exact `values` to redact
    too (an allowlist session's proxy secret), then the tools runtime's installer (programmatic
    tool calling), which prints nothing on success and whose failure only disables tool calls,
    never the redactor or its readiness marker."""
    from sandbox_common.redaction.stdio import preamble_source
    from sandbox_common.tools_protocol import installer_source

    return (preamble_source(values) if values else preamble_source()) + "\n" + installer_source()
