"""The three dispatch actions (§4). Order of one execute_code (§6.1): turn ownership →
pre-flight (cached) → quota → session (Start + readiness, first call only) → user code →
audit row → return. Every call that passed validation leaves exactly one audit row, whatever
the outcome; invalid requests raise SandboxInvalidRequest before anything is counted or written.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from sandbox_common import audit
from sandbox_common import naming as n
from sandbox_common.errors import (
    SandboxCapExceeded,
    SandboxError,
    SandboxFailure,
    SandboxInvalidRequest,
    SandboxProvisioning,
)
from sandbox_common.models import BeginTurnRequest, EndTurnRequest, ExecuteCodeRequest
from sandbox_common.observability import emit_metric, logger
from sandbox_common.redaction.catalogue import redact
from sandbox_common.settings import DispatchSettings
from sandbox_common.tool_spec import tool_definition
from sandbox_common.windows import Windows, utc_now

from . import messages
from .budget import UsageAccounting
from .output_log import log_output
from .preflight import Preflight, PreflightReader, PreflightUnavailable
from .quota_client import check_quota
from .runner import ExecutionResult, SessionGone, SessionRunner
from .turns import Turn, TurnStore, TurnStoreUnavailable

_SESSION_START_WAIT_SECONDS = 90
# What answering needs after the code: audit write (with retries), output logs, a session stop.
ANSWER_MARGIN_SECONDS = 15
# failure_reason prefixes of failures on dispatch's own side (alarmed as dispatch errors).
INTERNAL_FAILURE_PREFIXES = ("internal_error", "turn_store_unavailable", "preflight_unavailable",
                             "idempotency_store_unavailable")  # fmt: skip


def internal_failure(reason: str | None) -> None:
    """Count a failure that dispatch caught itself (Lambda's Errors metric never sees these)."""
    emit_metric(n.METRIC_DISPATCH_INTERNAL_ERRORS, properties={"failure_reason": (reason or "")[:80]})


@dataclass
class _Outcome:
    exit_status: str = "error"
    failure: SandboxFailure | None = None
    result: ExecutionResult | None = None
    session_id: str | None = None
    environment: str | None = None
    ran_code: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def _public(failure: SandboxFailure) -> dict[str, Any]:
    """An error response for the agent: the technical failure_reason stays in logs and audit."""
    body = failure.to_response()
    body.pop("failure_reason", None)
    return body


class Dispatcher:
    def __init__(
        self,
        settings: DispatchSettings,
        *,
        preflight: PreflightReader,
        turns: TurnStore,
        audit_writer: audit.AuditWriter,
        runner_factory: Any,  # (Preflight) -> SessionRunner
        price_per_call: Any,  # () -> float
        quota: Any = check_quota,
        accounting: UsageAccounting | None = None,
    ) -> None:
        self.settings = settings
        self.preflight = preflight
        self.turns = turns
        self.audit_writer = audit_writer
        self.runner_factory = runner_factory
        self.price_per_call = price_per_call
        self.quota = quota
        self.accounting = accounting or UsageAccounting(price_per_call)

    # --- begin_turn -----------------------------------------------------------------------------
    def begin_turn(self, req: BeginTurnRequest) -> dict[str, Any]:
        try:
            self.turns.claim(req.tenant_id, req.agent_id, req.turn_id)
            pf = self.preflight.check(req.tenant_id, req.template_id)
        except (TurnStoreUnavailable, PreflightUnavailable) as exc:
            logger.error("begin_turn_unavailable", extra={"cause": str(exc)})
            internal_failure(f"preflight_unavailable:{exc}")
            return {"ok": False, "error": "SandboxProvisioning", "error_message": messages.PREFLIGHT_UNAVAILABLE,
                    "reason": "preflight_unavailable"}  # fmt: skip
        sandbox: dict[str, Any] = {"status": pf.status}
        if pf.status in ("ready", "provisioning"):
            sandbox["tool"] = tool_definition()
            sandbox["environment"] = pf.environment
        elif pf.status == "disabled":
            sandbox.update(error="SandboxProvisioning", reason="tenant_disabled",
                           error_message=messages.TENANT_DISABLED)  # fmt: skip
        return {"ok": True, "sandbox": sandbox}

    # --- end_turn -------------------------------------------------------------------------------
    def end_turn(self, req: EndTurnRequest) -> dict[str, Any]:
        try:
            turn = self.turns.get(req.turn_id)
        except TurnStoreUnavailable as exc:
            internal_failure(f"turn_store_unavailable:{exc}")
            return _public(SandboxError(messages.INTERNAL, failure_reason=f"turn_store_unavailable:{exc}"))
        if turn is None:
            return {"ok": True, "stopped": False}
        self.turns.check_owner(turn, req.tenant_id, None)
        try:
            self.turns.end(req.turn_id)  # first: a session racing this end_turn can no longer activate
        except TurnStoreUnavailable as exc:
            internal_failure(f"turn_store_unavailable:{exc}")
            return _public(SandboxError(messages.INTERNAL, failure_reason=f"turn_store_unavailable:{exc}"))
        if not turn.live_session:
            return {"ok": True, "stopped": False}
        try:
            pf = self.preflight.runner_target(req.tenant_id)
        except PreflightUnavailable as exc:
            internal_failure(f"preflight_unavailable:{exc}")
            return _public(SandboxError(messages.INTERNAL, failure_reason=f"preflight_unavailable:{exc}"))
        runner = self.runner_factory(pf)
        if not runner.stop_session(str(turn.interpreter_id), str(turn.session_id)):
            # Still running (the stop failed): keep the turn pointing at it so a retried end_turn
            # can stop it; the interpreter's sessionTimeoutSeconds reaps it otherwise.
            return {"ok": True, "stopped": False}
        stopped = self.turns.mark_stopped(req.turn_id, str(turn.session_id))
        return {"ok": True, "stopped": stopped}

    # --- execute_code ---------------------------------------------------------------------------
    def execute_code(self, req: ExecuteCodeRequest, *, time_left: Any = None) -> dict[str, Any]:
        """`time_left()` = seconds the Lambda has left (None outside Lambda): every wait below is
        bounded by it, so the call always answers and audits before the runtime would kill it."""
        invocation_id = str(uuid.uuid4())
        started_at = utc_now()
        outcome = _Outcome()
        try:
            self._run(req, invocation_id, started_at, outcome, time_left)
        except SandboxInvalidRequest:
            raise  # nothing counted, nothing run: no audit row
        except SandboxFailure as failure:
            outcome.failure = failure
            outcome.exit_status = failure.exit_status
        except Exception:  # noqa: BLE001 — never a stack trace to the agent; still audited
            logger.exception("execute_code_internal_error", extra={"invocation_id": invocation_id})
            outcome.failure = SandboxError(messages.INTERNAL, failure_reason="internal_error")
            outcome.exit_status = "error"
        finished_at = utc_now()
        response = self._response(invocation_id, started_at, finished_at, outcome)
        self._record(req, invocation_id, started_at, finished_at, outcome)
        return response

    def refuse_unavailable(self, req: ExecuteCodeRequest, reason: str) -> dict[str, Any]:
        """A dependency needed before anything may run is down (e.g. the idempotency store):
        refuse — nothing counted or run — and still leave the call's one audit row."""
        invocation_id = str(uuid.uuid4())
        started_at = utc_now()
        outcome = _Outcome(exit_status="error", failure=SandboxError(messages.INTERNAL, failure_reason=reason))
        finished_at = utc_now()
        response = self._response(invocation_id, started_at, finished_at, outcome)
        self._record(req, invocation_id, started_at, finished_at, outcome)
        return response

    def _run(self, req: ExecuteCodeRequest, invocation_id: str, started_at: datetime, outcome: _Outcome,
             time_left: Any = None) -> None:  # fmt: skip
        def budget() -> float | None:
            return None if time_left is None else time_left() - ANSWER_MARGIN_SECONDS

        try:
            turn = self.turns.claim(req.tenant_id, req.agent_id, req.turn_id)
            pf = self.preflight.check(req.tenant_id, req.template_id)
        except (TurnStoreUnavailable, PreflightUnavailable) as exc:
            raise SandboxProvisioning(messages.PREFLIGHT_UNAVAILABLE, reason="preflight_unavailable",
                                      failure_reason=f"preflight_unavailable:{exc}") from None  # fmt: skip
        outcome.environment = pf.environment
        self._refuse_unless_ready(pf)

        decision = self.quota(self.settings.quota_function_name, req.tenant_id, req.agent_id, Windows.at(started_at))
        if not decision.allowed:
            raise SandboxCapExceeded(
                messages.cap_exceeded(str(decision.dimension), str(decision.resets_at)),
                dimension=decision.dimension, resets_at=decision.resets_at,
                failure_reason=f"cap_exceeded:{decision.dimension}",
            )  # fmt: skip
        self.accounting.admitted(req.tenant_id, decision.tenant_daily_count)  # budget: reported, never refused

        runner = self.runner_factory(pf)
        session_id, restarted = self._session(turn, pf, runner, invocation_id, budget())
        outcome.session_id = session_id
        try:
            result = runner.execute(str(pf.interpreter_id), session_id, req.code, deadline_seconds=budget())
        except SessionGone:
            # Reaped by AgentCore (or stopped elsewhere) before the code reached it: the code did
            # not run, so start a fresh session and run it once.
            self.turns.mark_stopped(turn.turn_id, session_id)
            fresh = self.turns.get(turn.turn_id) or turn
            session_id, _ = self._session(fresh, pf, runner, invocation_id, budget())
            outcome.session_id = session_id
            restarted = True
            result = runner.execute(str(pf.interpreter_id), session_id, req.code, deadline_seconds=budget())
        outcome.ran_code = True
        outcome.result = result
        outcome.exit_status = result.exit_status
        if restarted:
            outcome.extra.update(session_restarted=True, notice=messages.SESSION_RESTARTED)
        if result.session_stopped:  # timeout: the runner stopped it; the next call starts fresh
            self.turns.mark_stopped(turn.turn_id, session_id)
        if result.error:
            outcome.failure = result.failure()

    def _refuse_unless_ready(self, pf: Preflight) -> None:
        if pf.status == "ready":
            return
        if pf.status == "disabled":
            raise SandboxProvisioning(messages.TENANT_DISABLED, reason="tenant_disabled", failure_reason="tenant_disabled")
        if pf.status == "not_requested":
            raise SandboxProvisioning(messages.NOT_REQUESTED, reason="sandbox_not_requested",
                                      failure_reason="sandbox_not_requested")  # fmt: skip
        raise SandboxProvisioning(messages.NOT_READY, reason="interpreter_not_ready", failure_reason="interpreter_not_ready")

    def _session(self, turn: Turn, pf: Preflight, runner: SessionRunner, invocation_id: str,
                 budget: float | None = None) -> tuple[str, bool]:  # fmt: skip
        """(session_id, restarted): restarted when this turn had a session before that is gone."""
        had_session = turn.session_id is not None  # a session was recorded before (not a failed start)
        max_age = max(60, self.settings.session_timeout_seconds - self.settings.call_timeout_seconds - 30)
        try:
            session_id, started_here = self.turns.acquire_session(
                turn,
                owner=invocation_id,
                interpreter_id=str(pf.interpreter_id),
                # One name + client token per start attempt: retries are idempotent and a lost
                # answer can be found and stopped by name (no orphaned session).
                start=lambda: runner.start_session(str(pf.interpreter_id), name=f"sbx-{invocation_id}",
                                                   client_token=invocation_id),
                stop_previous=runner.stop_session,
                max_session_age_seconds=max_age,
                wait_seconds=_SESSION_START_WAIT_SECONDS if budget is None else max(1.0, min(
                    _SESSION_START_WAIT_SECONDS, budget)),
            )
        except TurnStoreUnavailable as exc:
            raise SandboxError(messages.INTERNAL, failure_reason=f"turn_store_unavailable:{exc}") from None
        return session_id, started_here and had_session

    # --- response, audit, logs, metrics ---------------------------------------------------------
    def _response(self, invocation_id: str, started_at: datetime, finished_at: datetime, o: _Outcome) -> dict[str, Any]:
        duration_ms = max(0, int((finished_at - started_at).total_seconds() * 1000))
        body: dict[str, Any]
        if o.failure is None and o.result is not None:
            body = {"ok": True}
        elif o.failure is not None:
            body = _public(o.failure)
            body["error_message"] = redact(str(body["error_message"]))
        else:  # pragma: no cover — _run always sets one of them
            body = SandboxError(messages.INTERNAL).to_response()
        if o.result is not None:
            body.update(o.result.to_response_fields())
            body["exit_status"] = o.exit_status
        else:
            body["exit_status"] = o.exit_status
            body["exit_code"] = None
        body.update(duration_ms=duration_ms, invocation_id=invocation_id, session_id=o.session_id, **o.extra)
        return body

    def _record(self, req: ExecuteCodeRequest, invocation_id: str, started_at: datetime, finished_at: datetime,
                o: _Outcome) -> None:  # fmt: skip
        r = o.result
        failure_reason = None
        if o.failure is not None:
            failure_reason = o.failure.fields.get("failure_reason") or (r.failure_reason if r else None)
            failure_reason = redact(str(failure_reason or o.failure.error))
        row = audit.build_row(
            invocation_id=invocation_id, request=req, started_at=started_at, finished_at=finished_at,
            retention_days=self.settings.audit_retention_days, session_id=o.session_id,
            environment=o.environment, exit_status=o.exit_status, exit_code=r.exit_code if r else None,
            error=o.failure.error if o.failure else None, failure_reason=failure_reason,
            stdout_bytes=r.stdout_bytes if r else 0, stderr_bytes=r.stderr_bytes if r else 0,
            stdout_truncated=r.stdout_truncated if r else False, stderr_truncated=r.stderr_truncated if r else False,
            estimated_cost_usd=self.accounting.cost(o.ran_code),
        )  # fmt: skip
        if r is not None:
            for stream, text in (("stdout", r.full_stdout), ("stderr", r.full_stderr)):
                log_output(invocation_id=invocation_id, session_id=o.session_id, tenant_id=req.tenant_id,
                           stream=stream, text=text)  # fmt: skip
        self._metrics(req, o, row["duration_ms"], row[n.AUDIT_ATTR_COST])
        logger.info(
            "execute_code",
            extra={k: row.get(k) for k in ("invocation_id", "session_id", "tenant_id", "agent_id", "turn_id",
                                           "call_id", "exit_status", "error", "duration_ms", "stdout_bytes",
                                           "stderr_bytes", "stdout_truncated", "stderr_truncated",
                                           "failure_reason")},
        )  # fmt: skip
        self.audit_writer.write(row)

    def _metrics(self, req: ExecuteCodeRequest, o: _Outcome, duration_ms: int, cost: float) -> None:
        reason = o.failure.fields.get("failure_reason") if o.failure else None
        if reason and str(reason).startswith(INTERNAL_FAILURE_PREFIXES):
            internal_failure(str(reason))
        emit_metric(n.METRIC_CALLS, dimensions={"exit_status": o.exit_status})
        emit_metric(n.METRIC_DURATION, duration_ms, unit=MetricUnit.Milliseconds)
        truncated = bool(o.result and (o.result.stdout_truncated or o.result.stderr_truncated))
        emit_metric(n.METRIC_TRUNCATED, 1 if truncated else 0)
        if o.ran_code:
            emit_metric(n.METRIC_COST, cost, dimensions={"tenant_id": req.tenant_id},
                        unit=MetricUnit.NoUnit)  # fmt: skip


