"""Programmatic tool calling in dispatch's flow (SPEC §15, issue 12): the three call sites the
Dispatcher delegates to. The pause/resume mechanics are `tool_calls` (continuations) and
`runner.tool_calling` (the ToolsRunner).

1. `run_code(...)` — at `_run`'s `runner.execute` call site. A template with tools whose code
   names `sandbox_tools` runs through the tools driver: it either finishes (the ordinary result
   plus `tool_calls`, returned to the ordinary steps: artifacts, audit row) or pauses at a tool
   call, which raises `ToolCallPaused` carrying the §15 `tool_call` answer — the call was counted
   (quota ran before), nothing else happens now and NO audit row is written yet. Any other code
   runs as before (a template without tools, or code that never imports the module: there every
   tool is `ToolNotAllowed`, with no round trip).
2. `resume(dispatcher, req, time_left)` — the `resume` action: the turn token (§16.5) and the
   turn's owner first, then the continuation is claimed (one conditional write: a stale, reused or
   foreign one is SandboxInvalidRequest with nothing run, counted or audited), then the code runs
   on to its next tool call (another `tool_call` answer, no row) or its end: the Outcome of the
   original execute_code is restored from the continuation and gets its one audit row. Never
   counted: the quota unit was taken by the execute_code.
3. `expire_paused(dispatcher, tenant_id, turn_id, keep_session=...)` — end_turn: every paused call
   of the turn ends as a SandboxTimeout with its audit row.

Once a continuation is claimed, the call it belongs to always ends with its row, whatever fails
after (an internal failure stops the session: the parked code must never run on unobserved).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from sandbox_common import messages
from sandbox_common import naming as n
from sandbox_common.errors import SandboxError, SandboxInvalidRequest
from sandbox_common.models import ExecuteCodeRequest, ResumeRequest
from sandbox_common.observability import logger
from sandbox_common.outcome import Outcome, internal_failure, public
from sandbox_runtime.preflight import Preflight, PreflightUnavailable
from sandbox_runtime.runner import ExecutionResult, SessionRunner
from sandbox_runtime.runner.tool_calling import Finished, ToolLimits, ToolsRunner

from dispatch.tools import calls as tool_calls
from dispatch.tools.store import Continuation
from dispatch.turns import flow as turn_logic
from dispatch.turns.store import Turn, TurnStoreUnavailable

AUDIT_EXECUTED_CODE_HASH = "executed_code_hash"  # the §7.1 attribute, restored from the continuation
_EXTRA = "extra"  # key of the call context holding the Outcome's extras at the pause


class ToolCallPaused(Exception):
    """The code paused at a tool call: `response` is the §15 answer. Not a failure: the call is
    counted and goes on with `resume`; its audit row is written when it ends."""

    def __init__(self, response: dict[str, Any]) -> None:
        super().__init__("tool_call")
        self.response = response


def uses_tools(req: ExecuteCodeRequest, pf: Preflight) -> bool:
    """Through the tools driver: the template allows tools and the code names the module."""
    return bool(pf.tools) and n.TOOLS_MODULE in req.code


def tools_runner(dispatcher: Any, runner: SessionRunner) -> ToolsRunner:
    return ToolsRunner(runner, limits=ToolLimits(wait_seconds=dispatcher.settings.tool_wait_seconds))


# --- 1. execute_code ----------------------------------------------------------------------------
def run_code(
    dispatcher: Any,
    req: ExecuteCodeRequest,
    outcome: Outcome,
    pf: Preflight,
    runner: SessionRunner,
    session_id: str,
    deadline_seconds: float | None,
) -> ExecutionResult:
    """The code's result (raises what SessionRunner.execute raises before code runs, e.g.
    SessionGone, and ToolCallPaused when it paused at a tool call)."""
    if not uses_tools(req, pf):
        return runner.execute(str(pf.interpreter_id), session_id, req.code, deadline_seconds=deadline_seconds)
    call = tool_calls.call_context(
        req,
        invocation_id=outcome.invocation_id,
        started_at=outcome.started_at,
        session_id=session_id,
        environment=outcome.environment,
    )
    # What earlier steps added for the final answer/row (input_files, session facts): kept with the pause.
    call[_EXTRA] = {"response": dict(outcome.response_extra), "audit": dict(outcome.audit_extra)}
    step = tool_calls.start_call(
        tools_runner(dispatcher, runner),
        dispatcher.continuations,
        owner=tool_calls.Owner(req.tenant_id, req.agent_id, req.turn_id),
        call=call,
        interpreter_id=str(pf.interpreter_id),
        session_id=session_id,
        code=req.code,
        allow=pf.tools,
        invocation_id=outcome.invocation_id,
        deadline_seconds=deadline_seconds,
    )
    if step.paused:
        assert step.response is not None
        raise ToolCallPaused(step.response)
    assert step.finished is not None
    return _finished(outcome, step.finished)


def _finished(outcome: Outcome, finished: Finished) -> ExecutionResult:
    response, audit = tool_calls.finished_fields(finished)
    outcome.response_extra.update(response)
    outcome.audit_extra.update(audit)
    return finished.result


# --- 2. resume ----------------------------------------------------------------------------------
def resume(dispatcher: Any, req: ResumeRequest, budget: Callable[[], float | None]) -> dict[str, Any]:
    try:
        turn = dispatcher.turns.get(req.tenant_id, req.turn_id)
    except TurnStoreUnavailable as exc:
        return _unavailable(f"turn_store_unavailable:{exc}")
    if turn is None:  # no such turn: the same answer as any other unusable continuation
        raise SandboxInvalidRequest(messages.CONTINUATION_INVALID)
    turn_logic.check_token(
        turn,
        req.turn_token,
        required=dispatcher.settings.require_turn_token,
        tenant_id=req.tenant_id,
        agent_id=req.agent_id,
        turn_id=req.turn_id,
    )
    turn_logic.check_owner(turn, req.tenant_id, req.agent_id)
    try:
        claimed = tool_calls.claim(dispatcher.continuations, req)  # SandboxInvalidRequest: nothing ran
    except SandboxError as failure:  # the store is down: nothing claimed, nothing ran; the call stays paused
        return _unavailable(str(failure.fields.get("failure_reason")), failure)
    # From here on the continuation is consumed: the call ends with its one row, whatever happens.
    outcome = restore_outcome(claimed.call)
    runner: SessionRunner | None = None
    pf: Preflight | None = None
    try:
        pf, runner = _runner(dispatcher, req.tenant_id, claimed, outcome)
        tools = tools_runner(dispatcher, runner)
        if turn.ended:  # end_turn ran meanwhile: end the call; its session is end_turn's (or its jobs')
            finished = tools.expire(claimed.state, turn_ended=True, stop_session=False)
        else:
            step = tool_calls.resume_call(
                tools, dispatcher.continuations, claimed, req, deadline_seconds=budget()
            )
            if step.paused:
                assert step.response is not None
                return step.response
            assert step.finished is not None
            finished = step.finished
    except Exception as exc:  # noqa: BLE001 — the claimed call must still end with its row
        logger.exception("resume_internal_error", extra={"invocation_id": outcome.invocation_id})
        finished = _abort(dispatcher, runner, claimed, exc)
    end_call(dispatcher, outcome, finished, pf, runner, turn)
    return outcome.response()


def restore_outcome(call: dict[str, Any]) -> Outcome:
    """The paused execute_code's Outcome, as it was when it paused (ids, start time, session,
    extras); the row's code hash is the original code's (the code itself is not kept)."""
    started_at = datetime.strptime(str(call["started_at"]), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    outcome = Outcome(
        request=tool_calls.restored_request(call),
        invocation_id=str(call["invocation_id"]),
        started_at=started_at,
    )
    outcome.session_id = call.get("session_id")
    outcome.environment = call.get("environment")
    extra = call.get(_EXTRA) or {}
    outcome.response_extra.update(extra.get("response") or {})
    outcome.audit_extra.update(extra.get("audit") or {})
    outcome.audit_extra[AUDIT_EXECUTED_CODE_HASH] = call["executed_code_hash"]
    return outcome


def end_call(
    dispatcher: Any,
    outcome: Outcome,
    finished: Finished,
    pf: Preflight | None,
    runner: SessionRunner | None,
    turn: Turn | None,
) -> None:
    """A tool-calling call that ended after a pause: the ordinary after-the-code steps (artifacts,
    the turn's session bookkeeping) and its one audit row."""
    result = _finished(outcome, finished)
    outcome.ran(result, result.failure() if result.error else None)
    if pf is not None and runner is not None:
        dispatcher._collect_artifacts(outcome.request, outcome, pf, runner, result.exit_status)
    if result.session_stopped and turn is not None and outcome.session_id:
        try:
            # the turn stops pointing at it and its session slot is freed (§16.2)
            dispatcher.sessions.stopped(None, turn.tenant_id, turn.turn_id, str(outcome.session_id))
        except TurnStoreUnavailable as exc:  # the next call finds the session gone and starts a fresh one
            logger.warning(
                "mark_stopped_failed", extra={"invocation_id": outcome.invocation_id, "cause": str(exc)}
            )
    dispatcher._record(outcome.finish())


def _runner(
    dispatcher: Any, tenant_id: str, claimed: Continuation, outcome: Outcome, target: Preflight | None = None
) -> tuple[Preflight, SessionRunner]:
    """The tenant's runner for the paused session (no policy or template check: the call was
    admitted and counted when it started; ending it must work whatever changed since)."""
    target = target or dispatcher.preflight.runner_target(tenant_id)
    pf = replace(target, interpreter_id=claimed.state.interpreter_id, environment=outcome.environment)
    return pf, dispatcher.runner_factory(pf)


def _abort(dispatcher: Any, runner: SessionRunner | None, claimed: Continuation, exc: Exception) -> Finished:
    reason = (
        f"preflight_unavailable:{exc}"
        if isinstance(exc, PreflightUnavailable)
        else f"internal_error:resume:{type(exc).__name__}"
    )
    if runner is None:  # no runner: the session cannot be stopped from here; its timeout reaps it
        return Finished(
            result=_failed_result(reason),
            tool_calls=len(claimed.state.records),
            records=claimed.state.records,
        )
    return tools_runner(dispatcher, runner).abort(claimed.state, reason=reason, message=messages.INTERNAL)


def _failed_result(reason: str) -> ExecutionResult:
    return ExecutionResult(
        exit_status="error",
        exit_code=None,
        stdout="",
        stderr="",
        stdout_bytes=0,
        stderr_bytes=0,
        stdout_truncated=False,
        stderr_truncated=False,
        duration_ms=0,
        error=SandboxError.__name__,
        error_message=messages.INTERNAL,
        failure_reason=reason,
        full_stdout="",
        full_stderr="",
        session_stopped=False,
    )


def _unavailable(reason: str, failure: SandboxError | None = None) -> dict[str, Any]:
    """A dependency failed before the continuation was consumed: counted as an internal failure,
    no row (the call is still paused; its row comes when it ends)."""
    internal_failure(reason)
    failure = failure or SandboxError(messages.INTERNAL, failure_reason=reason)
    return public(failure) | {"exit_status": failure.exit_status, "invocation_id": str(uuid.uuid4())}


# --- 3. end_turn --------------------------------------------------------------------------------
def expire_paused(dispatcher: Any, tenant_id: str, turn_id: str, *, keep_session: bool) -> int:
    """End the turn's paused calls as timeouts, each with its audit row; returns how many.
    `keep_session`: the turn's background jobs still need the session (§17). Never raises: a
    store failure is logged and counted (the calls stay paused; a later resume ends them)."""
    try:  # before anything is claimed: a failure here leaves the calls paused, not row-less
        target = dispatcher.preflight.runner_target(tenant_id)
    except PreflightUnavailable as exc:
        internal_failure(f"expire_paused_failed:{exc}")
        return 0
    runners: dict[str, tuple[Preflight, SessionRunner, Outcome]] = {}

    def runner_for(claimed: Continuation) -> ToolsRunner:
        outcome = restore_outcome(claimed.call)
        pf, runner = _runner(dispatcher, tenant_id, claimed, outcome, target)
        runners[outcome.invocation_id] = (pf, runner, outcome)
        return tools_runner(dispatcher, runner)

    try:
        steps = tool_calls.expire_turn(
            dispatcher.continuations,
            runner_for,
            tenant_id=tenant_id,
            turn_id=turn_id,
            stop_session=not keep_session,
        )
    except SandboxError as exc:
        internal_failure(f"expire_paused_failed:{exc.fields.get('failure_reason')}")
        return 0
    for step in steps:
        assert step.finished is not None
        pf, runner, outcome = runners[str(step.call["invocation_id"])]
        end_call(
            dispatcher, outcome, step.finished, pf, runner, None
        )  # end_turn itself marks the session stopped
    return len(steps)


# --- 4. the reaper's sweep (issue 12) -----------------------------------------------------------
def expire_due(
    dispatcher: Any, *, pending_jobs: Callable[[str, str], list[str]], limit: int = 100
) -> dict[str, int]:
    """End the paused calls, of any turn, whose tool wait bound passed and that nobody resumed or
    ended: each as the late resume would (§15: SandboxTimeout, its session stopped and the slot
    freed — kept when the turn's background jobs still run in it, §17), each with its one audit row.
    Claimed with the resume's own conditional write, so a racing resume / end_turn / second sweep
    ends the call once. Returns {"ended": n, "failed": n}; never raises (a store failure is
    counted as an internal failure and the calls stay listed for the next run)."""
    try:
        claimed = dispatcher.continuations.expire_due(limit=limit)
    except SandboxError as exc:
        internal_failure(f"sweep_paused_failed:{exc.fields.get('failure_reason')}")
        return {"ended": 0, "failed": 1}
    ended = failed = 0
    for one in claimed:
        outcome = restore_outcome(one.call)
        runner: SessionRunner | None = None
        pf: Preflight | None = None
        turn: Turn | None = None
        try:
            turn = dispatcher.turns.get(one.tenant_id, one.turn_id)
            keep = bool(pending_jobs(one.tenant_id, one.turn_id))
            pf, runner = _runner(dispatcher, one.tenant_id, one, outcome)
            finished = tools_runner(dispatcher, runner).expire(one.state, stop_session=not keep)
        except Exception as exc:  # noqa: BLE001 — the claimed call must still end with its row
            logger.exception("sweep_paused_call_failed", extra={"invocation_id": outcome.invocation_id})
            finished = _abort(dispatcher, runner, one, exc)
            failed += 1
        end_call(dispatcher, outcome, finished, pf, runner, turn)
        ended += 1
    return {"ended": ended, "failed": failed}
