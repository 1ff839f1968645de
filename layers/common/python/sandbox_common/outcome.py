"""One execute_code call's outcome, and every view of it (the response, the audit row, the
`execute_code` log event, the metrics, the chunked output logs).

Dispatch fills an `Outcome` while the call runs (the stages of `dispatch.line`) and renders it
once at the end; the interrupted-call sweep (`sandbox_runtime.interrupted`, for a retry or the reaper)
builds one too, so a row has one shape whoever writes it.

Extending it (Part II features) is a one-place change:
- a field the agent sees only:      `outcome.response_extra["files"] = [...]`
- a field of the audit row and log: `outcome.audit_extra["tool_calls"] = 3`
- both:                             set it in both mappings (or `outcome.add(name=value)`).
`response_extra` is merged last into the response, `audit_extra` last into the audit row and the
log event, so a feature never edits `response()`/`audit_row()`; add the attribute to
`audit.AUDIT_ATTRIBUTES` only if it becomes part of the audit row's fixed schema. Values must be plain
JSON/DynamoDB types (str, int, bool, None, lists and dicts of them).

Redaction is not applied here: every text that can carry user data (stdout/stderr, error
messages and failure reasons of the runner) is redacted once, by the runner; every other
failure_reason is built from codes and type names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from aws_lambda_powertools.metrics import MetricUnit

from . import egress_usage, messages
from . import naming as n
from .audit import code_hash, expires_at
from .errors import SandboxError, SandboxFailure, SandboxInvalidRequest
from .models import ExecuteCodeRequest
from .observability import emit_metric, logger
from .output_log import log_output
from .redaction.catalogue import redact_head
from .tool_spec import CODE_LANGUAGE
from .windows import iso_z_ms, utc_now

# failure_reason prefixes of failures on dispatch's own side (alarmed as dispatch errors).
INTERNAL_FAILURE_PREFIXES = (
    "internal_error",
    "turn_store_unavailable",
    "preflight_unavailable",
    "idempotency_store_unavailable",
    n.REASON_DISPATCH_INTERRUPTED,
)
# The keys of the `execute_code` log event (a subset of the audit row, plus audit_extra).
LOG_EVENT_KEYS = (
    "invocation_id",
    "session_id",
    "tenant_id",
    "agent_id",
    "turn_id",
    "call_id",
    "language",
    "exit_status",
    "error",
    "duration_ms",
    "stdout_bytes",
    "stderr_bytes",
    "stdout_truncated",
    "stderr_truncated",
    "failure_reason",
)


def internal_failure(reason: str | None) -> None:
    """Count a failure that dispatch caught itself (Lambda's Errors metric never sees these)."""
    # Redacted, then cut: the reason may carry an exception's text.
    emit_metric(
        n.METRIC_DISPATCH_INTERNAL_ERRORS, properties={"failure_reason": redact_head(reason or "", 80)}
    )


class RunResult(Protocol):
    """What the session runner's `ExecutionResult` gives an outcome (already redacted; read-only)."""

    @property
    def exit_status(self) -> str: ...

    @property
    def exit_code(self) -> int | None: ...

    @property
    def stdout(self) -> str: ...

    @property
    def stderr(self) -> str: ...

    @property
    def stdout_bytes(self) -> int: ...

    @property
    def stderr_bytes(self) -> int: ...

    @property
    def stdout_truncated(self) -> bool: ...

    @property
    def stderr_truncated(self) -> bool: ...

    @property
    def error(self) -> str | None: ...

    @property
    def error_message(self) -> str | None: ...

    @property
    def failure_reason(self) -> str | None: ...

    @property
    def exception(self) -> dict[str, Any] | None: ...

    @property
    def full_stdout(self) -> str: ...

    @property
    def full_stderr(self) -> str: ...

    @property
    def ok(self) -> bool: ...


def public(failure: SandboxFailure) -> dict[str, Any]:
    """An error response for the agent: the technical failure_reason stays in logs and audit."""
    body = failure.to_response()
    body.pop("failure_reason", None)
    return body


@dataclass
class Outcome:
    request: ExecuteCodeRequest
    invocation_id: str
    started_at: datetime
    finished_at: datetime | None = None
    exit_status: str = "error"
    failure: SandboxFailure | None = None
    result: RunResult | None = None
    session_id: str | None = None
    environment: str | None = None
    ran_code: bool = False  # the user code reached a session (the call is billed)
    estimated_cost_usd: float = 0  # the call's price: set by dispatch, 0 unless billed
    response_extra: dict[str, Any] = field(default_factory=dict)  # agent response only
    audit_extra: dict[str, Any] = field(default_factory=dict)  # audit row and log event
    # What left the sandbox during the call (sandbox_common.egress_usage); None: nothing measured,
    # the row says zeros for the environment's egress mode.
    egress: dict[str, Any] | None = None
    # Its session's egress counters before its code ran (an allowlist session; None: not read)
    egress_baseline: egress_usage.Baseline | None = None

    # --- filling it ---------------------------------------------------------------------------
    def fail(self, failure: SandboxFailure) -> None:
        self.failure = failure
        self.exit_status = failure.exit_status

    def ran(self, result: RunResult, failure: SandboxFailure | None) -> None:
        self.ran_code = True
        self.result = result
        self.exit_status = result.exit_status
        if failure is not None:
            self.failure = failure

    @contextmanager
    def failures_answered(
        self, log_event: str, *, passes: tuple[type[BaseException], ...] = ()
    ) -> Iterator[None]:
        """The one error wrapper of a call that leaves an audit row (execute_code, a job's submit):
        SandboxInvalidRequest propagates (nothing counted or run: no row), and so does any of
        `passes` (e.g. a tool-calling pause: the row comes when the call ends); a SandboxFailure fails
        the outcome; anything else is logged as `log_event` and fails it as an internal error —
        never a stack trace to the agent. The caller then records the outcome's one row."""
        try:
            yield
        except SandboxInvalidRequest:
            raise
        except passes:
            raise
        except SandboxFailure as failure:
            self.fail(failure)
        except Exception:  # noqa: BLE001 — still answered and audited
            logger.exception(log_event, extra={"invocation_id": self.invocation_id})
            self.fail(SandboxError(messages.INTERNAL, failure_reason="internal_error"))

    def add(self, **fields: Any) -> None:
        """A field for both the agent response and the audit row / log event."""
        self.response_extra.update(fields)
        self.audit_extra.update(fields)

    def finish(self) -> Outcome:
        if self.finished_at is None:
            self.finished_at = utc_now()
        return self

    @property
    def duration_ms(self) -> int:
        end = self.finished_at or utc_now()
        return max(0, int((end - self.started_at).total_seconds() * 1000))

    @property
    def failure_reason(self) -> str | None:
        if self.failure is None:
            return None
        r = self.result
        reason = self.failure.fields.get("failure_reason") or (r.failure_reason if r else None)
        return str(reason or self.failure.error)

    # --- views --------------------------------------------------------------------------------
    def response(self) -> dict[str, Any]:
        """The answer to the agent."""
        r = self.result
        body: dict[str, Any]
        if self.failure is not None:
            body = public(self.failure)
        elif r is not None:
            body = {"ok": True}
        else:  # pragma: no cover — a finished call always has a result or a failure
            body = SandboxError(messages.INTERNAL).to_response()
        if r is not None:
            body.update(
                # a call refused after its code ran (the egress cap) fails though its code did not
                ok=r.ok and self.failure is None,
                stdout=r.stdout,
                stderr=r.stderr,
                exit_code=r.exit_code,
                stdout_bytes=r.stdout_bytes,
                stderr_bytes=r.stderr_bytes,
                stdout_truncated=r.stdout_truncated,
                stderr_truncated=r.stderr_truncated,
            )
            if not r.ok and (self.failure is None or self.failure.error == r.error):
                body.update(error=r.error, error_message=r.error_message)
                if r.exception is not None:  # what the code raised: name, value, traceback
                    body["exception"] = r.exception
        else:
            body["exit_code"] = None
        body.update(
            exit_status=self.exit_status,
            duration_ms=self.duration_ms,
            invocation_id=self.invocation_id,
            session_id=self.session_id,
        )
        body.update(self.response_extra)
        return body

    def audit_row(self, retention_days: int) -> dict[str, Any]:
        """The audit row. `session_id` is omitted (not null) when no session existed: it is the key
        of the by_session index and DynamoDB rejects NULL index keys."""
        req, r = self.request, self.result
        row: dict[str, Any] = {
            "invocation_id": self.invocation_id,
            "tenant_id": req.tenant_id,
            "agent_id": req.agent_id,
            "user_id": req.user_id,
            "template_id": req.template_id,
            "turn_id": req.turn_id,
            "call_id": req.call_id,
            "session_id": self.session_id,
            "environment": self.environment,
            "invocation_source": req.invocation_source,
            "started_at": iso_z_ms(self.started_at),
            "finished_at": iso_z_ms(self.finished_at or utc_now()),
            "duration_ms": self.duration_ms,
            "exit_status": self.exit_status,
            "exit_code": r.exit_code if r else None,
            "error": self.failure.error if self.failure else None,
            "failure_reason": self.failure_reason,
            "stdout_bytes": int(r.stdout_bytes) if r else 0,
            "stderr_bytes": int(r.stderr_bytes) if r else 0,
            "stdout_truncated": bool(r.stdout_truncated) if r else False,
            "stderr_truncated": bool(r.stderr_truncated) if r else False,
            "executed_code_hash": code_hash(req.code),
            "language": getattr(req, "language", CODE_LANGUAGE),
            n.TTL_ATTRIBUTE: expires_at(self.started_at, retention_days),
            n.AUDIT_ATTR_COST: self.estimated_cost_usd,
            n.AUDIT_ATTR_EGRESS: (
                self.egress
                if self.egress is not None
                else egress_usage.empty(egress_usage.mode_of(self.environment))
            ),
        }
        if self.session_id is None:
            del row["session_id"]
        row.update(self.audit_extra)
        return row

    def log_event(self, row: dict[str, Any]) -> dict[str, Any]:
        """The structured `execute_code` log line (from the audit row, so the two always agree)."""
        return {k: row.get(k) for k in (*LOG_EVENT_KEYS, *self.audit_extra)}

    def emit_metrics(self, price_per_call: Callable[[], float]) -> None:
        reason = self.failure_reason
        if reason and reason.startswith(INTERNAL_FAILURE_PREFIXES):
            internal_failure(reason)
        emit_metric(n.METRIC_CALLS, dimensions={"exit_status": self.exit_status})
        emit_metric(n.METRIC_DURATION, self.duration_ms, unit=MetricUnit.Milliseconds)
        r = self.result
        emit_metric(n.METRIC_TRUNCATED, 1 if r and (r.stdout_truncated or r.stderr_truncated) else 0)
        if self.ran_code:
            emit_metric(
                n.METRIC_COST,
                price_per_call(),
                dimensions={"tenant_id": self.request.tenant_id},
                unit=MetricUnit.NoUnit,
            )

    def log(self, row: dict[str, Any]) -> None:
        """The chunked output logs and the `execute_code` event."""
        if self.result is not None:
            for stream, text in (("stdout", self.result.full_stdout), ("stderr", self.result.full_stderr)):
                log_output(
                    invocation_id=self.invocation_id,
                    session_id=self.session_id,
                    tenant_id=self.request.tenant_id,
                    stream=stream,
                    text=text,
                )
        logger.info(n.Action.EXECUTE_CODE, extra=self.log_event(row))
