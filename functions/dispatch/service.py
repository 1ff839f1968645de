"""The dispatch logic (§4). `Dispatcher.handle(request, context)` is the one entry the handler
calls; it answers every action with the response dict, or raises SandboxInvalidRequest (nothing
counted, nothing written) or StillRunning (a retry whose original is still running).

One execute_code (§6.1) is a sequence of small steps that fill one `Outcome`:
    _turn (ownership) → _preflight (cached) → sessions.prepare (first call only: warm claim or
    capped cold slot, §16) → _quota → _session (claimed warm session, or Start + readiness, first
    call only) → _run (user code) → _record (audit row, logs, metrics)
Every call that passed validation leaves exactly one audit row, whatever the outcome. A Part II
feature adds a step in its own module and calls it from `_steps` (or sets fields on the outcome,
see `sandbox_common.outcome`).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import suppress
from typing import Any

from sandbox_common import audit, messages
from sandbox_common import naming as n
from sandbox_common.errors import (
    SandboxCapExceeded,
    SandboxError,
    SandboxFailure,
    SandboxInvalidRequest,
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
    ResumeRequest,
    SweepPausedCallsRequest,
)
from sandbox_common.observability import logger
from sandbox_common.outcome import Outcome, internal_failure, public
from sandbox_common.retries import RetryLog
from sandbox_common.settings import DispatchSettings
from sandbox_common.tool_spec import begin_turn_tools
from sandbox_common.windows import utc_now

from . import files_flow, interrupted, job_calls, parallel, tool_flow, turn_logic
from .activation import Activation
from .artifacts import ArtifactContext
from .budget import UsageAccounting
from .continuations import ContinuationStore
from .file_access import get_file
from .idempotency import IdempotencyStoreUnavailable, IdempotentCalls, StillRunning, TimeLeft, time_left_of
from .job_deps import job_deps_for
from .job_flow import JobDeps
from .preflight import Preflight, PreflightReader, PreflightUnavailable
from .quota_client import check_quota
from .quota_flow import QuotaCheck
from .runner import ExecutionResult, SessionGone, SessionRunner
from .session_flow import SessionCall, TurnSessions
from .turns import Turn, TurnStore, TurnStoreUnavailable

_SESSION_START_WAIT_SECONDS = 90
# What answering needs after the code: audit write (with retries), output logs, a session stop.
ANSWER_MARGIN_SECONDS = 15
# How long a retry waits for its racing original beyond the call timeout.
_RETRY_WAIT_MARGIN_SECONDS = 90
# Hands the call's audit row to its idempotency completion (idempotency.CompletionRows.hand).
RowHandOff = Callable[[dict[str, Any]], None]


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
        sessions: TurnSessions,
        quota: Any = check_quota,
        accounting: UsageAccounting | None = None,
        continuations: ContinuationStore | None = None,
    ) -> None:
        self.settings = settings
        self.preflight = preflight
        self.turns = turns
        self.audit_writer = audit_writer
        self.runner_factory = runner_factory
        self.price_per_call = price_per_call
        self.calls = calls
        self.sessions = sessions
        self.quota = quota
        self.accounting = accounting or UsageAccounting(price_per_call)
        self._jobs: JobDeps | None = None
        self._continuations = continuations

    @property
    def jobs(self) -> JobDeps:
        """Background jobs' parts (§17), built once per container from this dispatcher's own."""
        if self._jobs is None:
            self._jobs = job_deps_for(self)
        return self._jobs

    @property
    def continuations(self) -> ContinuationStore:
        """Paused tool-calling calls (§15), created on first use (no client at import)."""
        if self._continuations is None:
            self._continuations = ContinuationStore(self.settings.continuations_table)
        return self._continuations

    def handle(self, request: AnyDispatchRequest, context: Any) -> dict[str, Any]:
        if isinstance(request, BeginTurnRequest):
            return self.begin_turn(request)
        if isinstance(request, EndTurnRequest):
            return self.end_turn(request)
        if isinstance(request, GetFileRequest):
            return self.get_file(request)
        if isinstance(request, GetJobRequest | CancelJobRequest):  # §17: no idempotency, reads/ends only
            return job_calls.observe(self, self.jobs, request)
        if isinstance(request, ResumeRequest):  # §15: token + continuation checks, never counted
            return tool_flow.resume(self, request, _budget_of(context))
        if isinstance(request, SweepPausedCallsRequest):  # issue 12: the reaper's paused-calls hook
            # Any caller may send it; the counts (all tenants') go to dispatch's log, not the answer.
            swept = tool_flow.expire_due(
                self, pending_jobs=lambda t, turn: job_calls.pending(self.jobs, t, turn)
            )
            logger.info("sweep_paused_calls", extra={"ended": swept["ended"], "failed": swept["failed"]})
            return {"ok": True}
        # §16.5 + issue 9: the turn claim, the pre-flight read and the idempotency claim go out
        # together. The token's verdict still comes before anything is counted (the quota runs
        # inside the idempotent function, after `claim.result()`), and before any stored answer
        # is handed out: a wrong-token retry of a finished call_id is refused, not answered.
        claim = parallel.start(self._claim, request)
        warm = parallel.start(self.preflight.check, request.tenant_id, request.template_id)
        # issues 9 + 11: the turn-guarded, once-per-call_id quota check goes out with them (quota_flow)
        quota = QuotaCheck.start(self, request)
        # Issue 9: the attempt's invocation id travels in the idempotency claim, so a dead attempt
        # is finished (by a retry or the reaper) under the very id its own row would have had; the
        # row itself is handed to the idempotency completion and lands in the same transaction.
        invocation_id = str(uuid.uuid4())
        beside = functools.partial(self.calls.rows.hand, invocation_id)
        try:
            try:
                response = self.calls.run_once(
                    request,
                    context,
                    lambda req, time_left: self._execute_code_response(
                        req,
                        time_left,
                        _joined(claim, warm),
                        beside,
                        invocation_id=invocation_id,
                        quota=quota.entered(),
                    ),
                    max_wait_seconds=self.settings.call_timeout_seconds + _RETRY_WAIT_MARGIN_SECONDS,
                    attempt=interrupted.attempt_fields(request, invocation_id, utc_now()),
                )
                quota.answered()
            except IdempotencyStoreUnavailable:
                quota.unclaimed()  # refused with nothing counted: a speculative count is undone
                claim.result()  # a wrong token is refused as such, whatever the store did
                return self.refuse_unavailable(request, "idempotency_store_unavailable")
            except (StillRunning, SandboxInvalidRequest):
                claim.result()
                raise
            claim.result()  # a replayed answer goes only to the turn's token holder
            return response
        except TurnStoreUnavailable as exc:
            return self.refuse(
                request,
                SandboxProvisioning(
                    messages.PREFLIGHT_UNAVAILABLE,
                    reason="preflight_unavailable",
                    failure_reason=f"preflight_unavailable:{exc}",
                ),
            )
        finally:
            quota.settle()  # a speculative count the call did not reach is undone (quota_flow)
            self.calls.rows.flush(invocation_id, self.audit_writer)  # a row no completion took: on its own

    def _claim(self, req: BeginTurnRequest | ExecuteCodeRequest) -> Turn:
        """The caller's turn, created and bound to its token on first use (§16.5); raises
        SandboxInvalidRequest for a wrong token or another agent's turn."""
        return turn_logic.claim(
            self.turns,
            req.tenant_id,
            req.agent_id,
            req.turn_id,
            token=req.turn_token,
            required=self.settings.require_turn_token,
        )

    # --- begin_turn -----------------------------------------------------------------------------
    def begin_turn(self, req: BeginTurnRequest) -> dict[str, Any]:
        try:
            turn = turn_logic.refuse_if_ended(self._claim(req))
            pf = self.preflight.check(req.tenant_id, req.template_id)
        except (TurnStoreUnavailable, PreflightUnavailable) as exc:
            logger.error("begin_turn_unavailable", extra={"cause": str(exc)})
            internal_failure(f"preflight_unavailable:{exc}")
            return {
                "ok": False,
                "error": "SandboxProvisioning",
                "error_message": messages.PREFLIGHT_UNAVAILABLE,
                "reason": "preflight_unavailable",
            }
        if pf.status == "ready":
            self.sessions.offer_warm(turn, pf)  # §16.1: the first call's warm claim becomes one write
        sandbox: dict[str, Any] = {"status": pf.status}
        if pf.status in ("ready", "provisioning"):
            # §21: every tool of the surface; §15: the template's tools the caller can answer
            sandbox.update(begin_turn_tools(pf.tools, req.client_tools, self.settings))
            sandbox["environment"] = pf.environment
        elif pf.status == "disabled":
            sandbox.update(
                error="SandboxProvisioning", reason="tenant_disabled", error_message=messages.TENANT_DISABLED
            )
        return {"ok": True, "sandbox": sandbox}

    # --- end_turn -------------------------------------------------------------------------------
    def end_turn(self, req: EndTurnRequest) -> dict[str, Any]:
        try:
            turn = self.turns.get(req.tenant_id, req.turn_id)
        except TurnStoreUnavailable as exc:
            return _internal(f"turn_store_unavailable:{exc}")
        if turn is None:
            return {"ok": True, "stopped": False}
        turn_logic.check_token(
            turn,
            req.turn_token,
            required=self.settings.require_turn_token,
            tenant_id=req.tenant_id,
            agent_id=None,
            turn_id=req.turn_id,
        )
        turn_logic.check_owner(turn, req.tenant_id, None)
        try:
            self.turns.end(
                req.tenant_id, req.turn_id
            )  # first: a session racing this end_turn can no longer activate
        except TurnStoreUnavailable as exc:
            return _internal(f"turn_store_unavailable:{exc}")
        pending = job_calls.pending(self.jobs, req.tenant_id, req.turn_id)
        # §15: paused tool calls end as timeouts, each with its audit row
        tool_flow.expire_paused(self, req.tenant_id, req.turn_id, keep_session=bool(pending))
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
        self.sessions.release_turn_slot(turn)  # §16.2: a stopped session frees its slot
        return {"ok": True, "stopped": stopped}

    # --- get_file (§14.3) ------------------------------------------------------------------------
    def get_file(self, req: GetFileRequest) -> dict[str, Any]:
        try:
            return get_file(req, s3=files_flow.s3_client(), bucket=self.settings.artifacts_bucket)
        except SandboxError as failure:
            internal_failure(str(failure.fields.get("failure_reason")))
            return public(failure)

    # --- execute_code ---------------------------------------------------------------------------
    def _execute_code_response(
        self,
        req: ExecuteCodeRequest,
        time_left: TimeLeft,
        turn: Turn,
        beside: RowHandOff | None = None,
        *,
        quota: QuotaCheck | None = None,
        invocation_id: str | None = None,
    ) -> dict[str, Any]:
        if req.background:  # §17: answers at once with a job_id
            return job_calls.submit(
                self,
                self.jobs,
                req,
                turn,
                lambda: _budget(time_left),
                refuse_unless_ready=_refuse_unless_ready,
            )
        try:
            return self.execute_code(
                req, turn, time_left=time_left, beside=beside, quota=quota, invocation_id=invocation_id
            ).response()
        except tool_flow.ToolCallPaused as paused:  # §15: counted, no audit row until it ends
            return paused.response

    def execute_code(
        self,
        req: ExecuteCodeRequest,
        turn: Turn,
        *,
        time_left: TimeLeft = None,
        beside: RowHandOff | None = None,
        quota: QuotaCheck | None = None,
        invocation_id: str | None = None,
    ) -> Outcome:
        """`turn` = the caller's turn, already claimed with its token (`_claim`). `time_left()` =
        seconds the Lambda has left (None outside Lambda): every wait below is bounded by it, so
        the call always answers and audits before the runtime would kill it. With `beside`, the
        audit row is handed to the idempotency completion and lands with it, in one transaction,
        before the caller answers (`idempotency.CompletionRows`).
        `invocation_id`: the one recorded in the idempotency claim (issue 9), else a new one."""
        outcome = Outcome(request=req, invocation_id=invocation_id or str(uuid.uuid4()), started_at=utc_now())
        call = SessionCall()
        # invalid -> raised, no row; paused at a tool call (§15) -> raised, its row comes when it ends
        with outcome.failures_answered("execute_code_internal_error", passes=(tool_flow.ToolCallPaused,)):
            self._steps(req, turn, outcome, time_left, call, quota)
        call.render(outcome)  # session_source, events / retries (§16.1, §16.6)
        self._record(outcome.finish(), beside)
        return outcome

    def refuse_unavailable(self, req: ExecuteCodeRequest, reason: str) -> dict[str, Any]:
        """A dependency needed before anything may run is down (e.g. the idempotency store):
        refuse — nothing counted or run — and still leave the call's one audit row."""
        return self.refuse(req, SandboxError(messages.INTERNAL, failure_reason=reason))

    def refuse(self, req: ExecuteCodeRequest, failure: SandboxFailure) -> dict[str, Any]:
        outcome = Outcome(request=req, invocation_id=str(uuid.uuid4()), started_at=utc_now())
        outcome.fail(failure)
        self._record(outcome.finish())
        return outcome.response()

    def _steps(
        self,
        req: ExecuteCodeRequest,
        turn: Turn,
        outcome: Outcome,
        time_left: TimeLeft,
        call: SessionCall,
        quota: QuotaCheck | None = None,
    ) -> None:
        def budget() -> float | None:
            return None if time_left is None else time_left() - ANSWER_MARGIN_SECONDS

        turn_logic.refuse_if_ended(turn)
        pf = self._preflight(req)
        outcome.environment = pf.environment
        _refuse_unless_ready(pf)
        files_flow.check_inputs(req, pf.data_read)  # bad s3_uri: invalid, before anything counts
        outcome.response_extra["files"] = []
        with self.sessions.held(call, turn, pf):  # §16.2: a session-cap refusal counts nothing
            self._quota(req, outcome, quota, call.retries)
            runner = self.runner_factory(pf)
            result = self._run(req, outcome, turn, pf, runner, budget, call)
        outcome.ran(result, result.failure() if result.error else None)
        self._collect_artifacts(req, outcome, pf, runner, result.exit_status)
        if result.session_stopped:  # timeout: the runner stopped it; the next call starts fresh
            self.sessions.stopped(call, turn.tenant_id, turn.turn_id, str(outcome.session_id))

    def _preflight(self, req: ExecuteCodeRequest) -> Preflight:
        try:
            return self.preflight.check(req.tenant_id, req.template_id)
        except PreflightUnavailable as exc:
            raise SandboxProvisioning(
                messages.PREFLIGHT_UNAVAILABLE,
                reason="preflight_unavailable",
                failure_reason=f"preflight_unavailable:{exc}",
            ) from None

    def _quota(
        self,
        req: ExecuteCodeRequest,
        outcome: Outcome,
        quota: QuotaCheck | None = None,
        retries: RetryLog | None = None,
    ) -> None:
        """The call's count: the speculative check sent at t=0 joined, else checked now (quota_flow)."""
        decision = (quota or QuotaCheck(self, req, None)).decide(retries)
        if not decision.allowed:
            raise SandboxCapExceeded(
                messages.cap_exceeded(str(decision.dimension), str(decision.resets_at)),
                dimension=decision.dimension,
                resets_at=decision.resets_at,
                failure_reason=f"cap_exceeded:{decision.dimension}",
            )
        self.accounting.admitted(
            req.tenant_id, decision.tenant_daily_count
        )  # budget: reported, never refused

    def _run(
        self,
        req: ExecuteCodeRequest,
        outcome: Outcome,
        turn: Turn,
        pf: Preflight,
        runner: SessionRunner,
        budget: Callable[[], float | None],
        call: SessionCall,
    ) -> ExecutionResult:
        beside = not tool_flow.uses_tools(req, pf)  # a paused call (§15) keeps a session already confirmed
        call.activation = Activation() if beside else None
        session_id, restarted = self._session(turn, pf, runner, outcome.invocation_id, budget(), call=call)
        outcome.session_id = session_id
        try:
            result = self._run_code(req, outcome, turn, pf, runner, session_id, budget, call)
        except SessionGone:
            # Reaped by AgentCore (or stopped elsewhere) before the code reached it: the code did
            # not run, so start a fresh session and run it once — a retry the agent sees (§16.6).
            self.sessions.stopped(call, turn.tenant_id, turn.turn_id, session_id)
            call.retries.record(n.RETRY_SESSION_REAPED, 1)
            fresh = self.turns.get(turn.tenant_id, turn.turn_id) or turn
            call.activation = Activation() if beside else None
            session_id, _ = self._session(fresh, pf, runner, outcome.invocation_id, budget(), call=call)
            outcome.session_id = session_id
            restarted = True
            result = self._run_code(req, outcome, turn, pf, runner, session_id, budget, call)
        if restarted:
            outcome.response_extra.update(session_restarted=True, notice=messages.SESSION_RESTARTED)
        return result

    def _run_code(
        self,
        req: ExecuteCodeRequest,
        outcome: Outcome,
        turn: Turn,
        pf: Preflight,
        runner: SessionRunner,
        session_id: str,
        budget: Callable[[], float | None],
        call: SessionCall,
    ) -> ExecutionResult:
        """Inputs (§14.1), then the code. A new cold session's activation writes travel beside them
        (issue 9, `dispatch.activation`) and are joined as soon as the code answered, before the
        artifact helper; if one failed, the session was stopped and freed and the call fails closed."""
        if call.activation is not None:
            call.activation.go()
        try:
            self._place_inputs(req, outcome, pf, runner, session_id)
            result = tool_flow.run_code(self, req, outcome, pf, runner, session_id, budget())  # §15 hook
        except BaseException:
            with suppress(SandboxError):  # the code's own failure is the one reported
                self.sessions.confirm(call, turn, runner)
            raise
        try:
            self.sessions.confirm(call, turn, runner)
        except SandboxError:
            outcome.ran_code = True  # it reached a session: billed, its output withheld
            raise
        return result

    @staticmethod
    def _place_inputs(
        req: ExecuteCodeRequest, outcome: Outcome, pf: Preflight, runner: SessionRunner, session_id: str
    ) -> None:
        """§14.1: input files into the session before the code; a failure means the code never runs."""
        if req.files:
            outcome.audit_extra["input_files"] = files_flow.place_inputs(
                runner, str(pf.interpreter_id), session_id, req
            )

    def _collect_artifacts(
        self,
        req: ExecuteCodeRequest,
        outcome: Outcome,
        pf: Preflight,
        runner: SessionRunner,
        exit_status: str,
    ) -> None:
        """§14.2: new/changed outputs/ files and open figures, after any outcome but timeout."""
        ctx = ArtifactContext(
            req.tenant_id, req.turn_id, outcome.invocation_id, self.settings.artifacts_bucket
        )
        collected = files_flow.collect(
            runner, str(pf.interpreter_id), str(outcome.session_id), ctx, exit_status
        )
        outcome.response_extra["files"] = collected.files if collected else []
        outcome.audit_extra["artifacts"] = collected.artifacts if collected else []
        if collected and collected.failure_reason:
            logger.warning(
                "artifact_collection_failed",
                extra={"invocation_id": outcome.invocation_id, "failure_reason": collected.failure_reason},
            )

    def _session(
        self,
        turn: Turn,
        pf: Preflight,
        runner: SessionRunner,
        invocation_id: str,
        budget: float | None = None,
        *,
        call: SessionCall | None = None,
    ) -> tuple[str, bool]:
        """(session_id, restarted): restarted when this turn had a session before that is gone.
        The session comes from `self.sessions` (warm claim or capped cold start, §16); a caller
        that did not `prepare` (background jobs) holds its capacity at the start."""
        had_session = turn.session_id is not None  # a session was recorded before (not a failed start)
        wait = (
            _SESSION_START_WAIT_SECONDS
            if budget is None
            else max(1.0, min(_SESSION_START_WAIT_SECONDS, budget))
        )
        try:
            session_id, started_here = self.sessions.acquire(
                call or SessionCall(),
                turn,
                pf=pf,
                runner=runner,
                invocation_id=invocation_id,
                wait_seconds=wait,
            )
        except TurnStoreUnavailable as exc:
            raise SandboxError(messages.INTERNAL, failure_reason=f"turn_store_unavailable:{exc}") from None
        return session_id, started_here and had_session

    # --- record: audit row, logs, metrics -------------------------------------------------------
    def _record(self, outcome: Outcome, beside: RowHandOff | None = None) -> None:
        """The call's one audit row. With `beside` it is not written here: it is handed to the
        idempotency completion, which writes it in the same transaction (issue 9)."""
        # Every row carries its price (issue 15): the SSM price when the code ran, else 0; the cost
        # metric reports the same value.
        outcome.estimated_cost_usd = self.accounting.cost(outcome.ran_code)
        row = outcome.audit_row(self.settings.audit_retention_days)
        outcome.log(row)
        outcome.emit_metrics(lambda: outcome.estimated_cost_usd)
        if beside is None:
            self.audit_writer.write(row)
        else:
            beside(row)


def _joined(claim: Future[Turn], warm: Future[Any]) -> Turn:
    """The claimed turn, once the pre-flight read sent beside it has landed too (its own failure
    is not this step's: `_steps` reads again, from the cache it warmed or from the tables)."""
    turn = claim.result()
    warm.exception()
    return turn


def _budget(time_left: TimeLeft) -> float | None:
    return None if time_left is None else time_left() - ANSWER_MARGIN_SECONDS


def _budget_of(context: Any) -> Callable[[], float | None]:
    """`_budget` for an action outside idempotency (resume): from the Lambda context."""
    time_left = time_left_of(context)
    return lambda: _budget(time_left)


def _refuse_unless_ready(pf: Preflight) -> None:
    if pf.status == "ready":
        return
    if pf.status == "disabled":
        raise SandboxProvisioning(
            messages.TENANT_DISABLED, reason="tenant_disabled", failure_reason="tenant_disabled"
        )
    if pf.status == "not_requested":
        raise SandboxProvisioning(
            messages.NOT_REQUESTED, reason="sandbox_not_requested", failure_reason="sandbox_not_requested"
        )
    raise SandboxProvisioning(
        messages.NOT_READY, reason="interpreter_not_ready", failure_reason="interpreter_not_ready"
    )


def _internal(reason: str) -> dict[str, Any]:
    """end_turn's answer when a dependency failed (counted; the reason stays in logs)."""
    internal_failure(reason)
    return public(SandboxError(messages.INTERNAL, failure_reason=reason))
