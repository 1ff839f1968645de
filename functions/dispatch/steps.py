"""The step API of a call (§4, §6.1): the typed steps every call path runs — turn, pre-flight,
quota, session, run, record — and `execute_code`, built from them.

One execute_code is a sequence of steps that fill one `Outcome`:
    once (turn claim ‖ pre-flight read ‖ quota check ‖ idempotency claim) → turn still open →
    preflight (cached) → capacity (first call only: warm claim or capped cold slot, §16) →
    quota → session (claimed warm session, or Start + readiness, first call only) → run (input
    files, then the user code) → collect (artifacts) → record (audit row, logs, metrics)
Every call that passed validation leaves exactly one audit row, whatever the outcome. The same
steps serve a background job's submit (`dispatch.jobs.flow`), a resume and the end of a paused
call (`dispatch.tools.flow`), begin_turn and end_turn (`dispatch.turns.actions`): a capability
reaches another only through these steps and the stores they hold.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

from sandbox_common import dimensions, messages
from sandbox_common import naming as n
from sandbox_common.egress_usage import Baseline, Counters
from sandbox_common.errors import (
    SandboxCapExceeded,
    SandboxError,
    SandboxFailure,
    SandboxInvalidRequest,
    SandboxProvisioning,
    StillRunning,
)
from sandbox_common.models import BeginTurnRequest, ExecuteCodeRequest
from sandbox_common.observability import logger
from sandbox_common.outcome import Outcome, internal_failure
from sandbox_common.retries import RetryLog
from sandbox_common.settings import DispatchSettings
from sandbox_common.windows import utc_now
from sandbox_runtime import interrupted
from sandbox_runtime.artifacts import ArtifactContext
from sandbox_runtime.job_end import JobDeps
from sandbox_runtime.kill_switch import Kill
from sandbox_runtime.preflight import Preflight, PreflightUnavailable
from sandbox_runtime.runner import ExecutionResult, SessionGone, SessionRunner
from sandbox_runtime.runner.tool_calling import Finished

from dispatch import parallel, parts
from dispatch.files import flow as files
from dispatch.idempotency import IdempotencyStoreUnavailable, TimeLeft, time_left_of
from dispatch.quota.flow import QuotaCheck
from dispatch.sessions import egress
from dispatch.sessions.activation import Activation
from dispatch.sessions.flow import SessionCall
from dispatch.tools import run as tools
from dispatch.tools.store import ContinuationStore
from dispatch.turns import flow as turns
from dispatch.turns import guard
from dispatch.turns.store import Turn, TurnStoreUnavailable

_SESSION_START_WAIT_SECONDS = 90
# What answering needs after the code: audit write (with retries), output logs, a session stop.
ANSWER_MARGIN_SECONDS = 15
# Hands the call's audit row to its idempotency completion (idempotency.CompletionRows.hand).
RowHandOff = Callable[..., None]  # (row) or (row, extra transaction items)


@dataclass(frozen=True)
class Attempt:
    """One attempt of an execute_code inside its idempotency claim (`Steps.once`): the caller's
    turn (claimed with its token), the Lambda's time left, the invocation id recorded in the
    claim, where the audit row goes (`beside`: into the completion's transaction) and the quota
    check sent ahead."""

    turn: Turn
    time_left: TimeLeft
    invocation_id: str
    beside: RowHandOff
    quota: QuotaCheck
    egress_before: Future[Baseline | None] | None = None  # sent ahead with the turn claim

    def budget(self) -> float | None:
        return _budget(self.time_left)

    def egress_baseline(self) -> Baseline | None:
        """The turn's allowlist session's counters before the code (dispatch.sessions.egress)."""
        return egress.baseline(self.egress_before)


class Steps:
    """The step API over the container's parts (`dispatch.parts.Parts`)."""

    def __init__(self, built: parts.Parts) -> None:
        self.parts = built
        self.settings: DispatchSettings = built.settings
        self.turns = built.turns

    # --- the capabilities' own stores, built when first used -----------------------------------
    @cached_property
    def continuations(self) -> ContinuationStore:
        """Paused tool-calling calls (§15)."""
        return ContinuationStore(self.settings.continuations_table)

    @cached_property
    def jobs(self) -> JobDeps:
        """Background jobs' parts (§17)."""
        # Cold start: the jobs package loads when a jobs action first runs (see dispatch.routes).
        from dispatch.jobs.deps import job_deps_for

        return job_deps_for(self.parts)

    # --- turn -----------------------------------------------------------------------------------
    def claim(self, req: BeginTurnRequest | ExecuteCodeRequest) -> Turn:
        """The caller's turn, created and bound to its token on first use (§16.5); raises
        SandboxInvalidRequest for a wrong token or another agent's turn."""
        return turns.claim(
            self.turns,
            req.tenant_id,
            req.agent_id,
            req.turn_id,
            token=req.turn_token,
            required=self.settings.require_turn_token,
        )

    def check_turn(
        self, turn: Turn, token: str | None, *, tenant_id: str, agent_id: str | None, turn_id: str
    ) -> None:
        """An existing turn's token (§16.5) and owner, before anything is touched."""
        turns.check_token(
            turn,
            token,
            required=self.settings.require_turn_token,
            tenant_id=tenant_id,
            agent_id=agent_id,
            turn_id=turn_id,
        )
        turns.check_owner(turn, tenant_id, agent_id)

    def check_token(
        self,
        token: str | None,
        stored_hash: str | None,
        *,
        tenant_id: str,
        agent_id: str | None,
        turn_id: str,
    ) -> None:
        """A token against the hash its turn is bound to (§16.5), without reading the turn."""
        guard.check(
            token=token,
            stored_hash=stored_hash,
            required=self.settings.require_turn_token,
            tenant_id=tenant_id,
            agent_id=agent_id,
            turn_id=turn_id,
        )

    @staticmethod
    def open_turn(turn: Turn) -> Turn:
        return turns.refuse_if_ended(turn)

    # --- pre-flight -----------------------------------------------------------------------------
    def preflight(self, req: ExecuteCodeRequest) -> Preflight:
        try:
            return self.parts.preflight.check(req.tenant_id, req.template_id)
        except PreflightUnavailable as exc:
            raise SandboxProvisioning(
                messages.PREFLIGHT_UNAVAILABLE,
                reason="preflight_unavailable",
                failure_reason=f"preflight_unavailable:{exc}",
            ) from None

    @staticmethod
    def ready(pf: Preflight) -> None:
        """Refuse a template that may not run now (disabled, not requested, not ready)."""
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

    def killed(self, tenant_id: str) -> Kill | None:
        """The kill switch on admitted work (§22): a call cap at 0 or the tenant disabled (≤ 60 s)."""
        return self.parts.kill_switch.check(tenant_id)

    def runner_target(self, tenant_id: str) -> Preflight:
        """What a runner needs for an existing session (no policy or template check)."""
        return self.parts.preflight.runner_target(tenant_id)

    def runner(self, pf: Preflight) -> SessionRunner:
        return self.parts.runners(pf)

    # --- quota ----------------------------------------------------------------------------------
    def quota(
        self,
        req: ExecuteCodeRequest,
        outcome: Outcome,
        check: QuotaCheck | None = None,
        retries: RetryLog | None = None,
    ) -> None:
        """The call's count: the speculative check sent at t=0 joined, else checked now."""
        decision = (check or QuotaCheck(self.parts, req, None)).decide(retries)
        if decision.tenant_disabled:
            # the count's transaction read the tenant's policy: this container's pre-flight cache
            # is older than it, and is read again by the next call
            self.parts.preflight.forget(req.tenant_id)
            raise SandboxProvisioning(
                messages.TENANT_DISABLED, reason="tenant_disabled", failure_reason="tenant_disabled"
            )
        if not decision.allowed:
            raise SandboxCapExceeded(
                messages.cap_exceeded(str(decision.dimension), str(decision.resets_at)),
                dimension=decision.dimension,
                resets_at=decision.resets_at,
                failure_reason=f"cap_exceeded:{decision.dimension}",
            )
        # the budget is reported on the tenant's calls today, never refused
        self.parts.accounting.admitted(req.tenant_id, decision.counts.get(dimensions.TENANT_DAILY.name))

    # --- session --------------------------------------------------------------------------------
    @contextmanager
    def capacity(self, turn: Turn, pf: Preflight, call: SessionCall | None = None) -> Iterator[SessionCall]:
        """A session's capacity held for a turn without a usable session (§16.2: a session-cap
        refusal counts nothing), given back after the block when no session used it."""
        call = call or SessionCall()
        with self.parts.sessions.held(call, turn, pf):
            yield call

    def session(
        self,
        call: SessionCall,
        turn: Turn,
        pf: Preflight,
        runner: SessionRunner,
        invocation_id: str,
        budget: float | None = None,
    ) -> tuple[str, bool]:
        """(session_id, restarted): restarted when this turn had a session before that is gone.
        The session comes from the turn's sessions (warm claim or capped cold start, §16); a
        caller that held no capacity (`capacity`) holds it at the start."""
        had_session = turn.session_id is not None  # a session was recorded before (not a failed start)
        wait = (
            _SESSION_START_WAIT_SECONDS
            if budget is None
            else max(1.0, min(_SESSION_START_WAIT_SECONDS, budget))
        )
        try:
            session_id, started_here = self.parts.sessions.acquire(
                call, turn, pf=pf, runner=runner, invocation_id=invocation_id, wait_seconds=wait
            )
        except TurnStoreUnavailable as exc:
            raise SandboxError(messages.INTERNAL, failure_reason=f"turn_store_unavailable:{exc}") from None
        return session_id, started_here and had_session

    def offer_warm(self, turn: Turn, pf: Preflight) -> bool:
        """begin_turn (§16.1): note a warm session of the turn's pool on the turn (a hint)."""
        return self.parts.sessions.offer_warm(turn, pf)

    def stop_turn_session(self, turn: Turn) -> bool:
        """end_turn: stop the turn's live session, point the turn away from it, free its slot.
        False when the stop failed (the turn keeps pointing at it, so a retried end_turn can stop
        it; the interpreter's sessionTimeoutSeconds reaps it otherwise). Raises
        PreflightUnavailable when the tenant's runner cannot be built."""
        runner = self.runner(self.runner_target(turn.tenant_id))
        if not runner.stop_session(str(turn.interpreter_id), str(turn.session_id)):
            return False
        stopped = self.turns.mark_stopped(turn.tenant_id, turn.turn_id, str(turn.session_id))
        self.parts.sessions.release_turn_slot(turn)  # §16.2: a stopped session frees its slot
        return stopped

    # --- run ------------------------------------------------------------------------------------
    def run(
        self,
        req: ExecuteCodeRequest,
        outcome: Outcome,
        turn: Turn,
        pf: Preflight,
        runner: SessionRunner,
        call: SessionCall,
        budget: Callable[[], float | None],
    ) -> ExecutionResult:
        """The turn's session, the input files, then the code. A session reaped before the code
        reached it is replaced once, visibly (§16.6)."""
        beside = not tools.uses_tools(req, pf)  # a paused call (§15) keeps a session already confirmed
        call.activation = Activation() if beside else None
        session_id, restarted = self.session(call, turn, pf, runner, outcome.invocation_id, budget())
        outcome.session_id = session_id
        try:
            result = self._inputs_and_code(req, outcome, turn, pf, runner, session_id, call, budget)
        except SessionGone:
            # Reaped by AgentCore (or stopped elsewhere) before the code reached it: the code did
            # not run, so start a fresh session and run it once — a retry the agent sees (§16.6).
            self.parts.sessions.stopped(call, turn.tenant_id, turn.turn_id, session_id)
            call.retries.record(n.RETRY_SESSION_REAPED, 1)
            fresh = self.turns.get(turn.tenant_id, turn.turn_id) or turn
            call.activation = Activation() if beside else None
            session_id, _ = self.session(call, fresh, pf, runner, outcome.invocation_id, budget())
            outcome.session_id = session_id
            restarted = True
            result = self._inputs_and_code(req, outcome, turn, pf, runner, session_id, call, budget)
        if restarted:
            outcome.response_extra.update(session_restarted=True, notice=messages.SESSION_RESTARTED)
        return result

    def _inputs_and_code(
        self,
        req: ExecuteCodeRequest,
        outcome: Outcome,
        turn: Turn,
        pf: Preflight,
        runner: SessionRunner,
        session_id: str,
        call: SessionCall,
        budget: Callable[[], float | None],
    ) -> ExecutionResult:
        """Inputs (§14.1), then the code. A new cold session's activation writes travel beside them
        (`dispatch.sessions.activation`) and are joined as soon as the code answered, before the
        artifact helper; if one failed, the session was stopped and freed and the call fails closed."""
        if call.activation is not None:
            call.activation.go()
        try:
            if req.files:  # §14.1: a failure here means the code never runs
                outcome.audit_extra["input_files"] = files.place_inputs(
                    runner, str(pf.interpreter_id), session_id, req
                )
            result = self._code(req, outcome, pf, runner, session_id, budget())
        except BaseException:
            with suppress(SandboxError):  # the code's own failure is the one reported
                self.parts.sessions.confirm(call, turn, runner)
            raise
        try:
            self.parts.sessions.confirm(call, turn, runner)
        except SandboxError:
            outcome.ran_code = True  # it reached a session: billed, its output withheld
            raise
        return result

    def _code(
        self,
        req: ExecuteCodeRequest,
        outcome: Outcome,
        pf: Preflight,
        runner: SessionRunner,
        session_id: str,
        deadline_seconds: float | None,
    ) -> ExecutionResult:
        """The user code; through the tools driver when it calls tools (§15: may raise ToolCallPaused)."""
        if not tools.uses_tools(req, pf):
            return runner.execute(
                str(pf.interpreter_id),
                session_id,
                req.code,
                deadline_seconds=deadline_seconds,
                language=req.language,
            )
        return tools.run_code(
            req,
            outcome,
            pf,
            runner,
            session_id,
            deadline_seconds,
            continuations=self.continuations,
            wait_seconds=self.settings.tool_wait_seconds,
        )

    # --- files ----------------------------------------------------------------------------------
    def collect(
        self, outcome: Outcome, pf: Preflight, runner: SessionRunner, exit_status: str
    ) -> Counters | None:
        """§14.2: new/changed outputs/ files and open figures, after any outcome but timeout; an
        allowlist session's egress counters are read beside them (dispatch.sessions.egress), the
        call's figures and the egress cap's refusal made from them. Returns that reading, for
        the record to carry (`egress_items`)."""
        after = egress.start_after(self.parts.egress, outcome)
        try:
            self._artifacts(outcome, pf, runner, exit_status)
        finally:
            reading = egress.settle(outcome, after)
        return reading

    def egress_items(self, outcome: Outcome, reading: Counters | None) -> list[dict[str, Any]]:
        """The end reading as the session's `attributed`, riding the record's transaction."""
        return egress.attributed_items(
            self.parts.egress, outcome, reading, self.settings.session_timeout_seconds
        )

    def _artifacts(self, outcome: Outcome, pf: Preflight, runner: SessionRunner, exit_status: str) -> None:
        req = outcome.request
        ctx = ArtifactContext(
            req.tenant_id, req.turn_id, outcome.invocation_id, self.settings.artifacts_bucket
        )
        collected = files.collect(runner, str(pf.interpreter_id), str(outcome.session_id), ctx, exit_status)
        outcome.response_extra["files"] = collected.files if collected else []
        outcome.audit_extra["artifacts"] = collected.artifacts if collected else []
        if collected and collected.failure_reason:
            logger.warning(
                "artifact_collection_failed",
                extra={"invocation_id": outcome.invocation_id, "failure_reason": collected.failure_reason},
            )

    # --- record: audit row, logs, metrics -------------------------------------------------------
    def record(
        self, outcome: Outcome, beside: RowHandOff | None = None, extra: list[dict[str, Any]] | None = None
    ) -> None:
        """The call's one audit row. With `beside` it is not written here: it is handed to the
        idempotency completion, which writes it in the same transaction, with `extra` items (an
        allowlist call's egress reading; `egress_items`)."""
        # Every row carries its price: the SSM price when the code ran, else 0; the cost metric
        # reports the same value.
        outcome.estimated_cost_usd = self.parts.accounting.cost(outcome.ran_code)
        row = outcome.audit_row(self.settings.audit_retention_days)
        outcome.log(row)
        outcome.emit_metrics(lambda: outcome.estimated_cost_usd)
        if beside is None:
            self.parts.audit_writer.write(row)
        elif extra:
            beside(row, extra)
        else:
            beside(row)

    def refuse(self, req: ExecuteCodeRequest, failure: SandboxFailure) -> dict[str, Any]:
        """Refused before anything may run: nothing counted or run, and still the call's one row."""
        outcome = Outcome(request=req, invocation_id=str(uuid.uuid4()), started_at=utc_now())
        outcome.fail(failure)
        self.record(outcome.finish())
        return outcome.response()

    # --- a paused call's end (§15) ---------------------------------------------------------------
    def finish_paused(
        self,
        outcome: Outcome,
        finished: Finished,
        pf: Preflight | None,
        runner: SessionRunner | None,
        turn: Turn | None,
    ) -> None:
        """A tool-calling call that ended after a pause: the ordinary after-the-code steps
        (artifacts, the turn's session bookkeeping) and its one audit row."""
        result = tools.finished_result(outcome, finished)
        outcome.ran(result, result.failure() if result.error else None)
        if pf is not None and runner is not None and not result.session_stopped:  # a stopped one has none
            reading = self.collect(outcome, pf, runner, result.exit_status)
        else:  # no artifacts to collect; what the session sent is still the call's
            reading = egress.settle(outcome, egress.start_after(self.parts.egress, outcome))
        egress.attribute_now(self.parts.egress, outcome, reading, self.settings.session_timeout_seconds)
        if result.session_stopped and turn is not None and outcome.session_id:
            try:
                # the turn stops pointing at it and its session slot is freed (§16.2)
                self.parts.sessions.stopped(None, turn.tenant_id, turn.turn_id, str(outcome.session_id))
            except TurnStoreUnavailable as exc:  # the next call finds the session gone and starts a fresh one
                logger.warning(
                    "mark_stopped_failed", extra={"invocation_id": outcome.invocation_id, "cause": str(exc)}
                )
        self.record(outcome.finish())
        # a retry of its call_id now replays the final answer, not the pause (§22)
        self.parts.calls.replace_answer(outcome.request, outcome.response())

    def expire_paused(self, tenant_id: str, turn_id: str, *, keep_session: bool) -> int:
        """end_turn: the turn's paused calls end as timeouts, each with its audit row; how many.
        `keep_session`: the turn's background jobs still need the session (§17). Never raises: a
        store failure is logged and counted (the calls stay paused; a later resume ends them)."""
        try:  # before anything is claimed: a failure here leaves the calls paused, not row-less
            target = self.runner_target(tenant_id)
            ended = tools.expire_turn(
                self.continuations,
                target,
                self.runner,
                tenant_id=tenant_id,
                turn_id=turn_id,
                keep_session=keep_session,
                wait_seconds=self.settings.tool_wait_seconds,
            )
        except PreflightUnavailable as exc:
            internal_failure(f"expire_paused_failed:{exc}")
            return 0
        except SandboxError as exc:
            internal_failure(f"expire_paused_failed:{exc.fields.get('failure_reason')}")
            return 0
        for outcome, finished, pf, runner in ended:
            self.finish_paused(
                outcome, finished, pf, runner, None
            )  # end_turn itself marks the session stopped
        return len(ended)

    # --- background jobs (§17) -------------------------------------------------------------------
    def pending_jobs(self, tenant_id: str, turn_id: str) -> list[str]:
        """The turn's jobs still running (the session must outlive them)."""
        # Cold start: the jobs package loads when a jobs action first runs (see dispatch.routes).
        from dispatch.jobs.actions import pending_jobs

        return pending_jobs(tenant_id, turn_id, self.jobs)

    # --- once per call_id -------------------------------------------------------------------------
    def once(
        self, req: ExecuteCodeRequest, context: Any, body: Callable[[Attempt], dict[str, Any]]
    ) -> dict[str, Any]:
        """`body(attempt)` at most once per (tenant, call_id) (§4.4): the turn claim, the
        pre-flight read and the idempotency claim go out together (§16.5); the token's verdict
        still comes before anything is counted (the quota runs inside the body, after the claim)
        and before any stored answer is handed out: a wrong-token retry of a finished call_id is
        refused, not answered. Raises SandboxInvalidRequest (nothing counted, nothing written) or
        StillRunning (a retry whose original is still running)."""
        claim = parallel.start(self.claim, req)
        warm = parallel.start(self.parts.preflight.check, req.tenant_id, req.template_id)
        # an allowlist session's counters before the call, read as soon as the turn names it
        before = parallel.start(egress.read_before, self.parts.egress, self.parts.preflight, claim, warm)
        # the turn-guarded, once-per-call_id quota check goes out with them (dispatch.quota.flow)
        quota = QuotaCheck.start(self.parts, req)
        # The attempt's invocation id travels in the idempotency claim, so a dead attempt is
        # finished (by a retry or the reaper) under the very id its own row would have had; the
        # row itself is handed to the idempotency completion and lands in the same transaction.
        invocation_id = str(uuid.uuid4())
        calls = self.parts.calls
        beside = functools.partial(calls.rows.hand, invocation_id)
        try:
            try:
                response = calls.run_once(
                    req,
                    context,
                    lambda time_left: body(
                        Attempt(
                            _joined(claim, warm), time_left, invocation_id, beside, quota.entered(), before
                        )
                    ),
                    attempt=interrupted.attempt_fields(req, invocation_id, utc_now()),
                )
                quota.answered()
            except IdempotencyStoreUnavailable:
                quota.unclaimed()  # refused with nothing counted: a speculative count is undone
                claim.result()  # a wrong token is refused as such, whatever the store did
                return self.refuse(
                    req, SandboxError(messages.INTERNAL, failure_reason="idempotency_store_unavailable")
                )
            except (StillRunning, SandboxInvalidRequest):
                claim.result()
                raise
            claim.result()  # a replayed answer goes only to the turn's token holder
            return response
        except TurnStoreUnavailable as exc:
            return self.refuse(
                req,
                SandboxProvisioning(
                    messages.PREFLIGHT_UNAVAILABLE,
                    reason="preflight_unavailable",
                    failure_reason=f"preflight_unavailable:{exc}",
                ),
            )
        finally:
            quota.settle()  # a speculative count the call did not reach is undone (dispatch.quota.flow)
            calls.rows.flush(invocation_id, self.parts.audit_writer)  # a row no completion took: on its own

    def deadline_of(self, context: Any) -> float:
        """When the Lambda runtime kills this invocation (epoch s); outside Lambda, after the longest
        call and its answer."""
        time_left = time_left_of(context)
        left = (
            self.settings.call_timeout_seconds + ANSWER_MARGIN_SECONDS if time_left is None else time_left()
        )
        return time.time() + left

    def budget_of(self, context: Any) -> Callable[[], float | None]:
        """The seconds an action outside idempotency (resume) may still wait, from the context."""
        time_left = time_left_of(context)
        return lambda: _budget(time_left)


# --- execute_code -------------------------------------------------------------------------------
def execute_code(steps: Steps, req: ExecuteCodeRequest, context: Any) -> dict[str, Any]:
    """The execute_code action (a foreground call; `background: true` is `dispatch.jobs.flow`)."""
    return steps.once(req, context, functools.partial(_call, steps, req))


def _call(steps: Steps, req: ExecuteCodeRequest, attempt: Attempt) -> dict[str, Any]:
    """One attempt's answer: every step fills the call's one outcome, then its row is recorded.
    `attempt.time_left()` = seconds the Lambda has left (None outside Lambda): every wait is
    bounded by it, so the call always answers and audits before the runtime would kill it."""
    outcome = Outcome(request=req, invocation_id=attempt.invocation_id, started_at=utc_now())
    call = SessionCall()
    # invalid -> raised, no row; paused at a tool call (§15) -> answered, its row comes when it ends
    try:
        with outcome.failures_answered("execute_code_internal_error", passes=(tools.ToolCallPaused,)):
            _run_steps(steps, req, attempt, outcome, call)
    except tools.ToolCallPaused as paused:  # counted, no audit row until it ends
        return paused.response
    call.render(outcome)  # session_source, events / retries (§16.1, §16.6)
    steps.record(outcome.finish(), attempt.beside, steps.egress_items(outcome, call.egress_reading))
    return outcome.response()


def _run_steps(
    steps: Steps, req: ExecuteCodeRequest, attempt: Attempt, outcome: Outcome, call: SessionCall
) -> None:
    turn = steps.open_turn(attempt.turn)
    pf = steps.preflight(req)
    outcome.environment = pf.environment
    steps.ready(pf)
    files.check_inputs(req, pf.data_read)  # bad s3_uri: invalid, before anything counts
    outcome.response_extra["files"] = []
    with steps.capacity(turn, pf, call):  # §16.2: a session-cap refusal counts nothing
        steps.quota(req, outcome, attempt.quota, call.retries)
        runner = steps.runner(pf)
        outcome.egress_baseline = attempt.egress_baseline()  # joined before the code runs
        result = steps.run(req, outcome, turn, pf, runner, call, attempt.budget)
    outcome.ran(result, result.failure() if result.error else None)
    call.egress_reading = steps.collect(outcome, pf, runner, result.exit_status)
    if result.session_stopped:  # timeout: the runner stopped it; the next call starts fresh
        steps.parts.sessions.stopped(call, turn.tenant_id, turn.turn_id, str(outcome.session_id))


# --- the container's step API ---------------------------------------------------------------------
def current() -> Steps:
    """The container's steps over its parts (built on first use; `parts.reset()` starts over)."""
    return _steps_over(parts.built())


@lru_cache(maxsize=1)
def _steps_over(built: parts.Parts) -> Steps:
    return Steps(built)


def _joined(claim: Future[Turn], warm: Future[Any]) -> Turn:
    """The claimed turn, once the pre-flight read sent beside it has landed too (its own failure
    is not this step's: the pre-flight step reads again, from the cache it warmed or the tables)."""
    turn = claim.result()
    warm.exception()
    return turn


def _budget(time_left: TimeLeft) -> float | None:
    return None if time_left is None else time_left() - ANSWER_MARGIN_SECONDS
