"""The tool-calling actions: `resume` and the reaper's `sweep_paused_calls`, and end_turn's paused
calls (`expire_paused`). Each claimed call ends through `finish` (the paused end's line,
`dispatch.line.PAUSED_END`): its artifacts, its session's bookkeeping, its one audit row.

1. `resume(finish, req, context)` — the turn token and the turn's owner first, then the
   continuation is claimed (one conditional write: a stale, reused or foreign one is
   SandboxInvalidRequest with nothing run, counted or audited), then the code runs on to its next
   tool call (another `tool_call` answer, no row) or its end: the Outcome of the original
   execute_code is restored from the continuation and gets its one audit row. Never counted: the
   quota unit was taken by the execute_code. A tenant under the kill switch gets the refusal a new
   call would get, and the call ends there with its row. The claim stays in the sweep's index
   until the resume settles it: a resume whose dispatch died is ended `dispatch_interrupted` (one
   row) by the sweep or by a retry past its deadline; a retry before it answers call_in_progress, a
   retry after the call ended gets its final answer.
2. `sweep_paused_calls(finish, req, context)` — the paused calls, of any turn, whose tool wait
   bound passed and that nobody resumed or ended, end as the late resume would (SandboxTimeout,
   their session stopped and the slot freed — kept when the turn's background jobs still run in
   it), each with its one audit row; and the claimed calls whose resume died, as
   `dispatch_interrupted`. Claimed with the resume's own conditional write, so a racing resume /
   end_turn / second sweep ends the call once. Any caller may send it: the counts (all tenants')
   go to dispatch's log, the answer is `{"ok": true}`.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from sandbox_common import messages
from sandbox_common.errors import SandboxError, SandboxInvalidRequest
from sandbox_common.models import ResumeRequest, SweepPausedCallsRequest
from sandbox_common.naming import Action
from sandbox_common.observability import logger
from sandbox_common.outcome import Outcome, internal_failure, public
from sandbox_runtime.job_end import pending_jobs
from sandbox_runtime.kill_switch import Kill
from sandbox_runtime.preflight import Preflight, PreflightUnavailable
from sandbox_runtime.runner import SessionRunner
from sandbox_runtime.runner.tool_calling import Finished, ToolsRunner

from dispatch.call import ANSWER_MARGIN_SECONDS, Call, Line
from dispatch.guard import check_turn
from dispatch.idempotency.store import Context
from dispatch.parts import Parts, built
from dispatch.tools import calls as tool_calls
from dispatch.tools import run
from dispatch.tools.store import Answered, Continuation, continuations
from dispatch.turns.store import Turn, TurnStoreUnavailable

SWEEP_LIMIT = 100  # paused calls ended per sweep; the rest are first in the next one


def resume(finish: Line, req: ResumeRequest, context: Context | None) -> dict[str, Any]:
    parts = built()
    store = continuations(parts)
    try:
        turn = parts.turns.get(req.tenant_id, req.turn_id)
    except TurnStoreUnavailable as exc:
        return _unavailable(f"turn_store_unavailable:{exc}")
    if turn is None:  # no such turn: the same answer as any other unusable continuation
        raise SandboxInvalidRequest(messages.CONTINUATION_INVALID)
    check_turn(
        turn,
        req.turn_token,
        required=parts.settings.require_turn_token,
        tenant_id=req.tenant_id,
        agent_id=req.agent_id,
        turn_id=req.turn_id,
    )
    try:
        # SandboxInvalidRequest: nothing ran; StillRunning: a retry while its resume is under way
        claimed = tool_calls.claim(store, req, until=_deadline(parts, context))
    except Answered as answered:  # a retry of a resume whose call already ended: its final answer
        return answered.response
    except SandboxError as failure:  # the store is down: nothing claimed, nothing ran; the call stays paused
        return _unavailable(str(failure.fields.get("failure_reason")), failure)
    # From here on the continuation is consumed: the call ends with its one row, whatever happens.
    outcome = run.restore_outcome(claimed.call)
    if claimed.interrupted:  # a retry past the deadline of a resume whose dispatch died
        return _end_interrupted(parts, finish, claimed, outcome, turn)
    runner: SessionRunner | None = None
    pf: Preflight | None = None
    tools: ToolsRunner | None = None
    try:
        pf = run.paused_target(parts.preflight.runner_target(req.tenant_id), claimed, outcome)
        runner = parts.runners(pf)
        tools = run.tools_runner(runner, parts.settings.tool_wait_seconds)
        kill = None if turn.ended else parts.kill_switch.check(req.tenant_id)
        if turn.ended:  # end_turn ran meanwhile: end the call; its session is end_turn's (or its jobs')
            finished = tools.expire(claimed.state, turn_ended=True, stop_session=False)
        elif kill is not None:  # the kill switch ends the call, never runs it on (nothing counted)
            finished = _killed(parts, tools, claimed, kill, outcome)
        else:
            left = _left(context)
            step = tool_calls.resume_call(tools, store, claimed, req, deadline_seconds=left)
            if step.paused:
                assert step.response is not None
                return step.response
            assert step.finished is not None
            finished = step.finished
    except Exception as exc:  # noqa: BLE001 — the claimed call must still end with its row
        logger.exception("resume_internal_error", extra={"invocation_id": outcome.invocation_id})
        finished = run.abort(tools, claimed, exc)
    response = finish(ended(parts, outcome, finished, pf, runner, turn))
    store.settle(claimed, response)
    return response


def ended(
    parts: Parts,
    outcome: Outcome,
    finished: Finished,
    pf: Preflight | None,
    runner: SessionRunner | None,
    turn: Turn | None,
) -> Call:
    """A paused call's end as its line's state: its restored outcome, how it finished, and the
    target and runner of its session (none when the run stopped it: no artifacts to collect)."""
    usable = pf is not None and runner is not None and not finished.result.session_stopped
    call = Call(outcome.request, None, parts, outcome.invocation_id, outcome, ahead=None)
    call.turn, call.finished = turn, finished
    call.preflight, call.runner = (pf, runner) if usable else (None, None)
    return call


def _end_interrupted(
    parts: Parts, finish: Line, claimed: Continuation, outcome: Outcome, turn: Turn | None
) -> dict[str, Any]:
    """A claimed call whose resume died (its deadline passed): ends `dispatch_interrupted`, its
    session stopped (the code it was resumed into ran on unobserved), with its one row."""
    tools: ToolsRunner | None = None
    try:
        pf = run.paused_target(parts.preflight.runner_target(claimed.tenant_id), claimed, outcome)
        tools = run.tools_runner(parts.runners(pf), parts.settings.tool_wait_seconds)
    except Exception:  # noqa: BLE001 — no runner: the row still comes; the session's timeout reaps it
        logger.exception("resume_interrupted_no_runner", extra={"invocation_id": outcome.invocation_id})
    try:
        finished = run.interrupted(tools, claimed)
    except Exception:  # noqa: BLE001 — the stop failed: the row still comes; the session's timeout reaps it
        logger.exception("resume_interrupted_stop_failed", extra={"invocation_id": outcome.invocation_id})
        finished = run.interrupted(None, claimed)
    response = finish(ended(parts, outcome, finished, None, None, turn))
    continuations(parts).settle(claimed, response)
    return response


def _killed(
    parts: Parts, tools: ToolsRunner, claimed: Continuation, kill: Kill, outcome: Outcome
) -> Finished:
    """A resume of a killed tenant: refused as a new call would be (SandboxCapExceeded with its
    dimension and reset, or SandboxProvisioning `tenant_disabled`); the call ends with its one row
    and its session is stopped — after the turn's background jobs, which the kill switch cancels
    as they are observed here, so none keeps it unless its end could not be seen."""
    failure = kill.failure()
    outcome.response_extra.update({k: v for k, v in public(failure).items() if k not in _RESULT_FIELDS})
    keep = bool(pending_jobs(claimed.tenant_id, claimed.turn_id, parts.jobs))
    logger.info(
        "resume_refused_kill_switch",
        extra={"invocation_id": outcome.invocation_id, "failure_reason": kill.failure_reason},
    )
    return tools.refuse(claimed.state, failure, stop_session=not keep)


# What the call's result sets itself in the answer (only the refusal's own fields are added).
_RESULT_FIELDS = ("ok", "error", "error_message")


def sweep_paused_calls(finish: Line, req: SweepPausedCallsRequest, context: Context | None) -> dict[str, Any]:
    swept = expire_due(built(), finish)
    logger.info(Action.SWEEP_PAUSED_CALLS, extra={"ended": swept["ended"], "failed": swept["failed"]})
    return {"ok": True}


def expire_due(parts: Parts, finish: Line, *, limit: int = SWEEP_LIMIT) -> dict[str, int]:
    """{"ended": n, "failed": n}; never raises (a store failure is counted as an internal failure
    and the calls stay listed for the next run)."""
    store = continuations(parts)
    try:
        claimed = store.expire_due(limit=limit)
    except SandboxError as exc:
        internal_failure(f"sweep_paused_failed:{exc.fields.get('failure_reason')}")
        return {"ended": 0, "failed": 1}
    ended_calls = failed = 0
    for one in claimed:
        failed += _sweep_one(parts, finish, one)
        ended_calls += 1
    return {"ended": ended_calls, "failed": failed}


def _sweep_one(parts: Parts, finish: Line, one: Continuation) -> int:
    """End one claimed call; 1 when something failed on the way (its row still comes), else 0."""
    outcome = run.restore_outcome(one.call)
    if one.interrupted:  # its resume died: dispatch_interrupted, not a tool-wait timeout
        turn_now: Turn | None = None
        failed = 0
        try:
            turn_now = parts.turns.get(one.tenant_id, one.turn_id)
        except Exception:  # noqa: BLE001 — the row still comes; the turn is told by the session sweep
            logger.exception("sweep_interrupted_resume_turn", extra={"invocation_id": outcome.invocation_id})
            failed = 1
        _end_interrupted(parts, finish, one, outcome, turn_now)
        return failed
    runner: SessionRunner | None = None
    pf: Preflight | None = None
    turn: Turn | None = None
    tools: ToolsRunner | None = None
    failed = 0
    try:
        turn = parts.turns.get(one.tenant_id, one.turn_id)
        keep = bool(pending_jobs(one.tenant_id, one.turn_id, parts.jobs))
        pf = run.paused_target(parts.preflight.runner_target(one.tenant_id), one, outcome)
        runner = parts.runners(pf)
        tools = run.tools_runner(runner, parts.settings.tool_wait_seconds)
        finished: Finished = tools.expire(one.state, stop_session=not keep)
    except Exception as exc:  # noqa: BLE001 — the claimed call must still end with its row
        logger.exception("sweep_paused_call_failed", extra={"invocation_id": outcome.invocation_id})
        finished = run.abort(tools, one, exc)
        failed = 1
    response = finish(ended(parts, outcome, finished, pf, runner, turn))
    continuations(parts).settle(one, response)
    return failed


def expire_paused(parts: Parts, tenant_id: str, turn_id: str, *, keep_session: bool, finish: Line) -> int:
    """end_turn: the turn's paused calls end as timeouts, each with its audit row; how many.
    `keep_session`: the turn's background jobs still need the session. Never raises: a store
    failure is logged and counted (the calls stay paused; a later resume ends them)."""
    try:  # before anything is claimed: a failure here leaves the calls paused, not row-less
        target = parts.preflight.runner_target(tenant_id)
        expired = run.expire_turn(
            continuations(parts),
            target,
            parts.runners,
            tenant_id=tenant_id,
            turn_id=turn_id,
            keep_session=keep_session,
            wait_seconds=parts.settings.tool_wait_seconds,
        )
    except PreflightUnavailable as exc:
        internal_failure(f"expire_paused_failed:{exc}")
        return 0
    except SandboxError as exc:
        internal_failure(f"expire_paused_failed:{exc.fields.get('failure_reason')}")
        return 0
    for outcome, finished, pf, runner in expired:
        finish(ended(parts, outcome, finished, pf, runner, None))  # end_turn marks the session stopped
    return len(expired)


def _deadline(parts: Parts, context: Context | None) -> float:
    """When the Lambda runtime kills this invocation (epoch s); outside Lambda, after the longest
    call and its answer."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    left = (
        float(remaining()) / 1000
        if callable(remaining)
        else parts.settings.call_timeout_seconds + ANSWER_MARGIN_SECONDS
    )
    return time.time() + left


def _left(context: Context | None) -> float | None:
    """The seconds a resume may still run its code, from the context (None outside Lambda)."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    return float(remaining()) / 1000 - ANSWER_MARGIN_SECONDS if callable(remaining) else None


def _unavailable(reason: str, failure: SandboxError | None = None) -> dict[str, Any]:
    """A dependency failed before the continuation was consumed: counted as an internal failure,
    no row (the call is still paused; its row comes when it ends)."""
    internal_failure(reason)
    failure = failure or SandboxError(messages.INTERNAL, failure_reason=reason)
    return public(failure) | {"exit_status": failure.exit_status, "invocation_id": str(uuid.uuid4())}
