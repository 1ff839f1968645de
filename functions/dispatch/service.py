"""The dispatch logic (§4). `Dispatcher.handle(request, context)` is the one entry the handler
calls; it answers every action with the response dict, or raises SandboxInvalidRequest (nothing
counted, nothing written) or StillRunning (a retry whose original is still running).

One execute_code (§6.1) is a sequence of small steps that fill one `Outcome`:
    _turn (ownership) → _preflight (cached) → _quota → _session (Start + readiness, first call
    only) → _run (user code) → _record (audit row, logs, metrics)
Every call that passed validation leaves exactly one audit row, whatever the outcome. A Part II
feature adds a step in its own module and calls it from `_steps` (or sets fields on the outcome,
see `sandbox_common.outcome`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from sandbox_common import audit, messages
from sandbox_common.errors import (
    SandboxCapExceeded,
    SandboxError,
    SandboxProvisioning,
)
from sandbox_common.files import GetFileRequest
from sandbox_common.models import (
    AnyDispatchRequest,
    BeginTurnRequest,
    CancelJobRequest,
    EndTurnRequest,
    ExecuteCodeRequest,
    GetJobRequest,
)
from sandbox_common.observability import logger
from sandbox_common.outcome import Outcome, internal_failure, public
from sandbox_common.settings import DispatchSettings
from sandbox_common.tool_spec import tool_definition
from sandbox_common.windows import Windows, utc_now

from . import files_flow, job_calls, turn_logic
from .artifacts import ArtifactContext
from .budget import UsageAccounting
from .file_access import get_file
from .idempotency import IdempotencyStoreUnavailable, IdempotentCalls, TimeLeft
from .job_deps import job_deps_for
from .job_flow import JobDeps
from .preflight import Preflight, PreflightReader, PreflightUnavailable
from .quota_client import check_quota
from .runner import ExecutionResult, SessionGone, SessionRunner
from .turns import Turn, TurnStore, TurnStoreUnavailable

_SESSION_START_WAIT_SECONDS = 90
# What answering needs after the code: audit write (with retries), output logs, a session stop.
ANSWER_MARGIN_SECONDS = 15
# How long a retry waits for its racing original beyond the call timeout.
_RETRY_WAIT_MARGIN_SECONDS = 90


class Dispatcher:
    def __init__(
        self,
        settings: DispatchSettings,
        *,
        preflight: PreflightReader,
        turns: TurnStore,
        audit_writer: audit.AuditWriter,
        runner_factory: Callable[[Preflight], SessionRunner],
        price_per_call: Callable[[], float],
        calls: IdempotentCalls,
        quota: Any = check_quota,
        accounting: UsageAccounting | None = None,
    ) -> None:
        self.settings = settings
        self.preflight = preflight
        self.turns = turns
        self.audit_writer = audit_writer
        self.runner_factory = runner_factory
        self.price_per_call = price_per_call
        self.calls = calls
        self.quota = quota
        self.accounting = accounting or UsageAccounting(price_per_call)
        self._jobs: JobDeps | None = None

    @property
    def jobs(self) -> JobDeps:
        """Background jobs' parts (§17), built once per container from this dispatcher's own."""
        if self._jobs is None:
            self._jobs = job_deps_for(self)
        return self._jobs

    def handle(self, request: AnyDispatchRequest, context: Any) -> dict[str, Any]:
        if isinstance(request, BeginTurnRequest):
            return self.begin_turn(request)
        if isinstance(request, EndTurnRequest):
            return self.end_turn(request)
        if isinstance(request, GetFileRequest):
            return self.get_file(request)
        if isinstance(request, GetJobRequest | CancelJobRequest):  # §17: no idempotency, reads/ends only
            return job_calls.observe(self, self.jobs, request)
        # §16.5: the turn token is checked (and a new turn bound to it) before the idempotency
        # record, so a wrong-token retry of a finished call_id is refused, not answered from it.
        try:
            turn = self._claim(request)
        except TurnStoreUnavailable as exc:
            return self.refuse(request, SandboxProvisioning(
                messages.PREFLIGHT_UNAVAILABLE, reason="preflight_unavailable",
                failure_reason=f"preflight_unavailable:{exc}"))  # fmt: skip
        try:
            return self.calls.run_once(request, context,
                                       lambda req, time_left: self._execute_code_response(req, time_left, turn),
                                       max_wait_seconds=self.settings.call_timeout_seconds + _RETRY_WAIT_MARGIN_SECONDS)  # fmt: skip
        except IdempotencyStoreUnavailable:
            return self.refuse_unavailable(request, "idempotency_store_unavailable")

    def _claim(self, req: BeginTurnRequest | ExecuteCodeRequest) -> Turn:
        """The caller's turn, created and bound to its token on first use (§16.5); raises
        SandboxInvalidRequest for a wrong token or another agent's turn."""
        return turn_logic.claim(self.turns, req.tenant_id, req.agent_id, req.turn_id, token=req.turn_token,
                                required=self.settings.require_turn_token)  # fmt: skip

    # --- begin_turn -----------------------------------------------------------------------------
    def begin_turn(self, req: BeginTurnRequest) -> dict[str, Any]:
        try:
            turn_logic.refuse_if_ended(self._claim(req))
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
            turn = self.turns.get(req.tenant_id, req.turn_id)
        except TurnStoreUnavailable as exc:
            return _internal(f"turn_store_unavailable:{exc}")
        if turn is None:
            return {"ok": True, "stopped": False}
        turn_logic.check_token(turn, req.turn_token, required=self.settings.require_turn_token,
                               tenant_id=req.tenant_id, agent_id=None, turn_id=req.turn_id)  # fmt: skip
        turn_logic.check_owner(turn, req.tenant_id, None)
        try:
            self.turns.end(req.tenant_id, req.turn_id)  # first: a session racing this end_turn can no longer activate
        except TurnStoreUnavailable as exc:
            return _internal(f"turn_store_unavailable:{exc}")
        pending = job_calls.pending(self.jobs, req.tenant_id, req.turn_id)
        if pending:  # §17: the session outlives end_turn until its last job ends (job_flow stops it)
            return {"ok": True, "stopped": False, "pending_jobs": pending}
        if not turn.live_session:
            return {"ok": True, "stopped": False}
        try:
            pf = self.preflight.runner_target(req.tenant_id)
        except PreflightUnavailable as exc:
            return _internal(f"preflight_unavailable:{exc}")
        runner = self.runner_factory(pf)
        if not runner.stop_session(str(turn.interpreter_id), str(turn.session_id)):
            # Still running (the stop failed): keep the turn pointing at it so a retried end_turn
            # can stop it; the interpreter's sessionTimeoutSeconds reaps it otherwise.
            return {"ok": True, "stopped": False}
        stopped = self.turns.mark_stopped(req.tenant_id, req.turn_id, str(turn.session_id))
        return {"ok": True, "stopped": stopped}

    # --- get_file (§14.3) ------------------------------------------------------------------------
    def get_file(self, req: GetFileRequest) -> dict[str, Any]:
        try:
            return get_file(req, s3=files_flow.s3_client(), bucket=self.settings.artifacts_bucket)
        except SandboxError as failure:
            internal_failure(str(failure.fields.get("failure_reason")))
            return public(failure)

    # --- execute_code ---------------------------------------------------------------------------
    def _execute_code_response(self, req: ExecuteCodeRequest, time_left: TimeLeft, turn: Turn) -> dict[str, Any]:
        if req.background:  # §17: answers at once with a job_id
            return job_calls.submit(self, self.jobs, req, turn, lambda: _budget(time_left),
                                    refuse_unless_ready=_refuse_unless_ready)  # fmt: skip
        return self.execute_code(req, turn, time_left=time_left).response()

    def execute_code(self, req: ExecuteCodeRequest, turn: Turn, *, time_left: TimeLeft = None) -> Outcome:
        """`turn` = the caller's turn, already claimed with its token (`_claim`). `time_left()` =
        seconds the Lambda has left (None outside Lambda): every wait below is bounded by it, so
        the call always answers and audits before the runtime would kill it."""
        outcome = Outcome(request=req, invocation_id=str(uuid.uuid4()), started_at=utc_now())
        with outcome.failures_answered("execute_code_internal_error"):  # invalid -> raised, no row
            self._steps(req, turn, outcome, time_left)
        self._record(outcome.finish())
        return outcome

    def refuse_unavailable(self, req: ExecuteCodeRequest, reason: str) -> dict[str, Any]:
        """A dependency needed before anything may run is down (e.g. the idempotency store):
        refuse — nothing counted or run — and still leave the call's one audit row."""
        return self.refuse(req, SandboxError(messages.INTERNAL, failure_reason=reason))

    def refuse(self, req: ExecuteCodeRequest, failure: SandboxError) -> dict[str, Any]:
        outcome = Outcome(request=req, invocation_id=str(uuid.uuid4()), started_at=utc_now())
        outcome.fail(failure)
        self._record(outcome.finish())
        return outcome.response()

    def _steps(self, req: ExecuteCodeRequest, turn: Turn, outcome: Outcome, time_left: TimeLeft) -> None:
        def budget() -> float | None:
            return None if time_left is None else time_left() - ANSWER_MARGIN_SECONDS

        turn_logic.refuse_if_ended(turn)
        pf = self._preflight(req)
        outcome.environment = pf.environment
        _refuse_unless_ready(pf)
        files_flow.check_inputs(req, pf.data_read)  # bad s3_uri: invalid, before anything counts
        outcome.response_extra["files"] = []
        self._quota(req, outcome)
        runner = self.runner_factory(pf)
        result = self._run(req, outcome, turn, pf, runner, budget)
        outcome.ran(result, result.failure() if result.error else None)
        self._collect_artifacts(req, outcome, pf, runner, result.exit_status)
        if result.session_stopped:  # timeout: the runner stopped it; the next call starts fresh
            self.turns.mark_stopped(turn.tenant_id, turn.turn_id, str(outcome.session_id))

    def _preflight(self, req: ExecuteCodeRequest) -> Preflight:
        try:
            return self.preflight.check(req.tenant_id, req.template_id)
        except PreflightUnavailable as exc:
            raise SandboxProvisioning(messages.PREFLIGHT_UNAVAILABLE, reason="preflight_unavailable",
                                      failure_reason=f"preflight_unavailable:{exc}") from None  # fmt: skip

    def _quota(self, req: ExecuteCodeRequest, outcome: Outcome) -> None:
        decision = self.quota(self.settings.quota_function_name, req.tenant_id, req.agent_id,
                              Windows.at(outcome.started_at))  # fmt: skip
        if not decision.allowed:
            raise SandboxCapExceeded(
                messages.cap_exceeded(str(decision.dimension), str(decision.resets_at)),
                dimension=decision.dimension, resets_at=decision.resets_at,
                failure_reason=f"cap_exceeded:{decision.dimension}",
            )  # fmt: skip
        self.accounting.admitted(req.tenant_id, decision.tenant_daily_count)  # budget: reported, never refused

    def _run(self, req: ExecuteCodeRequest, outcome: Outcome, turn: Turn, pf: Preflight, runner: SessionRunner,
             budget: Callable[[], float | None]) -> ExecutionResult:  # fmt: skip
        session_id, restarted = self._session(turn, pf, runner, outcome.invocation_id, budget())
        outcome.session_id = session_id
        try:
            self._place_inputs(req, outcome, pf, runner, session_id)
            result = runner.execute(str(pf.interpreter_id), session_id, req.code, deadline_seconds=budget())
        except SessionGone:
            # Reaped by AgentCore (or stopped elsewhere) before the code reached it: the code did
            # not run, so start a fresh session and run it once.
            self.turns.mark_stopped(turn.tenant_id, turn.turn_id, session_id)
            fresh = self.turns.get(turn.tenant_id, turn.turn_id) or turn
            session_id, _ = self._session(fresh, pf, runner, outcome.invocation_id, budget())
            outcome.session_id = session_id
            restarted = True
            self._place_inputs(req, outcome, pf, runner, session_id)
            result = runner.execute(str(pf.interpreter_id), session_id, req.code, deadline_seconds=budget())
        if restarted:
            outcome.response_extra.update(session_restarted=True, notice=messages.SESSION_RESTARTED)
        return result

    @staticmethod
    def _place_inputs(req: ExecuteCodeRequest, outcome: Outcome, pf: Preflight, runner: SessionRunner,
                      session_id: str) -> None:  # fmt: skip
        """§14.1: input files into the session before the code; a failure means the code never runs."""
        if req.files:
            outcome.audit_extra["input_files"] = files_flow.place_inputs(runner, str(pf.interpreter_id), session_id, req)

    def _collect_artifacts(self, req: ExecuteCodeRequest, outcome: Outcome, pf: Preflight, runner: SessionRunner,
                           exit_status: str) -> None:  # fmt: skip
        """§14.2: new/changed outputs/ files and open figures, after any outcome but timeout."""
        ctx = ArtifactContext(req.tenant_id, req.turn_id, outcome.invocation_id, self.settings.artifacts_bucket)
        collected = files_flow.collect(runner, str(pf.interpreter_id), str(outcome.session_id), ctx, exit_status)
        outcome.response_extra["files"] = collected.files if collected else []
        outcome.audit_extra["artifacts"] = collected.artifacts if collected else []
        if collected and collected.failure_reason:
            logger.warning("artifact_collection_failed", extra={"invocation_id": outcome.invocation_id,
                                                                "failure_reason": collected.failure_reason})  # fmt: skip

    def _session(self, turn: Turn, pf: Preflight, runner: SessionRunner, invocation_id: str,
                 budget: float | None = None) -> tuple[str, bool]:  # fmt: skip
        """(session_id, restarted): restarted when this turn had a session before that is gone."""
        had_session = turn.session_id is not None  # a session was recorded before (not a failed start)
        max_age = max(60, self.settings.session_timeout_seconds - self.settings.call_timeout_seconds - 30)
        try:
            session_id, started_here = turn_logic.acquire_session(
                self.turns,
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

    # --- record: audit row, logs, metrics -------------------------------------------------------
    def _record(self, outcome: Outcome) -> None:
        # Every row carries its price (issue 15): the SSM price when the code ran, else 0; the cost
        # metric reports the same value.
        outcome.estimated_cost_usd = self.accounting.cost(outcome.ran_code)
        row = outcome.audit_row(self.settings.audit_retention_days)
        outcome.log(row)
        outcome.emit_metrics(lambda: outcome.estimated_cost_usd)
        self.audit_writer.write(row)


def _budget(time_left: TimeLeft) -> float | None:
    return None if time_left is None else time_left() - ANSWER_MARGIN_SECONDS


def _refuse_unless_ready(pf: Preflight) -> None:
    if pf.status == "ready":
        return
    if pf.status == "disabled":
        raise SandboxProvisioning(messages.TENANT_DISABLED, reason="tenant_disabled", failure_reason="tenant_disabled")
    if pf.status == "not_requested":
        raise SandboxProvisioning(messages.NOT_REQUESTED, reason="sandbox_not_requested",
                                  failure_reason="sandbox_not_requested")  # fmt: skip
    raise SandboxProvisioning(messages.NOT_READY, reason="interpreter_not_ready", failure_reason="interpreter_not_ready")


def _internal(reason: str) -> dict[str, Any]:
    """end_turn's answer when a dependency failed (counted; the reason stays in logs)."""
    internal_failure(reason)
    return public(SandboxError(messages.INTERNAL, failure_reason=reason))
