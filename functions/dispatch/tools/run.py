"""Programmatic tool calling inside a call: what the code stage (`dispatch.tools.stage`) runs.

- `run_code(...)` — the code of an execute_code whose template has tools and whose code names
  `sandbox_tools` (`Preflight.runs_tools`): the code runs through the tools driver and either finishes (the
  ordinary result plus `tool_calls`, handed back to the stages around it: artifacts, audit row) or
  pauses at a tool call, which raises `ToolCallPaused` carrying the `tool_call` answer — the call
  was counted (the quota stage ran before), nothing else happens now and NO audit row is written
  yet. Any other code runs as before (where every tool is `ToolNotAllowed`, with no round trip).
- `restore_outcome(call)` / `finished_result(outcome, finished)` — the paused call's Outcome
  rebuilt from its continuation, and the fields of its end put on it, for whoever ends it (a
  resume, end_turn, the reaper's sweep: `dispatch.tools.flow`).
- `expire_turn(...)` — end_turn: every paused call of the turn ends as a SandboxTimeout.

Once a continuation is claimed, the call it belongs to always ends with its row, whatever fails
after (an internal failure stops the session: the parked code must never run on unobserved).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from sandbox_common import messages
from sandbox_common import naming as n
from sandbox_common.egress_usage import Baseline
from sandbox_common.errors import SandboxError
from sandbox_common.models import ExecuteCodeRequest
from sandbox_common.outcome import Outcome
from sandbox_runtime.preflight import Preflight, PreflightUnavailable
from sandbox_runtime.runner import ExecutionResult, SessionRunner
from sandbox_runtime.runner.tool_calling import Finished, ToolLimits, ToolRecord, ToolsRunner

from dispatch.tools import calls as tool_calls
from dispatch.tools.store import Continuation, ContinuationStore

AUDIT_EXECUTED_CODE_HASH = "executed_code_hash"  # the row's attribute, restored from the continuation
_EXTRA = "extra"  # key of the call context holding the Outcome's extras at the pause
_EGRESS_BEFORE = "egress_before"  # ... and its session's egress counters before the code (allowlist)


class ToolCallPaused(Exception):
    """The code paused at a tool call: `response` is the `tool_call` answer. Not a failure: the call
    is counted and goes on with `resume`; its audit row is written when it ends."""

    def __init__(self, response: dict[str, Any]) -> None:
        super().__init__(n.STATUS_TOOL_CALL)
        self.response = response


def tools_runner(runner: SessionRunner, wait_seconds: float) -> ToolsRunner:
    return ToolsRunner(runner, limits=ToolLimits(wait_seconds=wait_seconds))


# --- execute_code ---------------------------------------------------------------------------------
def run_code(
    req: ExecuteCodeRequest,
    outcome: Outcome,
    pf: Preflight,
    runner: SessionRunner,
    session_id: str,
    deadline_seconds: float | None,
    *,
    continuations: ContinuationStore,
    wait_seconds: float,
) -> ExecutionResult:
    """The code's result (raises what SessionRunner.execute raises before code runs, e.g.
    SessionGone, and ToolCallPaused when it paused at a tool call)."""
    call = tool_calls.call_context(
        req,
        invocation_id=outcome.invocation_id,
        started_at=outcome.started_at,
        session_id=session_id,
        environment=outcome.environment,
    )
    # What earlier stages added for the final answer/row (input_files, session facts): kept with the pause.
    call[_EXTRA] = {"response": dict(outcome.response_extra), "audit": dict(outcome.audit_extra)}
    if outcome.egress_baseline is not None:
        call[_EGRESS_BEFORE] = outcome.egress_baseline.as_dict()
    step = tool_calls.start_call(
        tools_runner(runner, wait_seconds),
        continuations,
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
    return finished_result(outcome, step.finished)


def finished_result(outcome: Outcome, finished: Finished) -> ExecutionResult:
    """The call's end on its outcome (tool_calls and their records): its run result."""
    response, audit = tool_calls.finished_fields(finished)
    outcome.response_extra.update(response)
    outcome.audit_extra.update(audit)
    return finished.result


# --- a paused call's end ------------------------------------------------------------------------
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
    outcome.egress_baseline = Baseline.from_dict(call.get(_EGRESS_BEFORE))
    return outcome


def paused_target(target: Preflight, claimed: Continuation, outcome: Outcome) -> Preflight:
    """The tenant's runner target for the paused session (no policy or template check: the call
    was admitted and counted when it started; ending it must work whatever changed since)."""
    return replace(target, interpreter_id=claimed.state.interpreter_id, environment=outcome.environment)


def abort(tools: ToolsRunner | None, claimed: Continuation, exc: Exception) -> Finished:
    """A claimed call whose end failed on our side: SandboxError, its session stopped (when there
    is a runner to stop it with; else its timeout reaps it)."""
    reason = (
        f"preflight_unavailable:{exc}"
        if isinstance(exc, PreflightUnavailable)
        else f"internal_error:resume:{type(exc).__name__}"
    )
    if tools is None:
        return Finished(
            result=_failed_result(reason),
            tool_calls=len(claimed.state.records),
            records=claimed.state.records,
        )
    return tools.abort(claimed.state, reason=reason, message=messages.INTERNAL)


def interrupted(tools: ToolsRunner | None, claimed: Continuation) -> Finished:
    """A claimed call whose resume died: SandboxError `dispatch_interrupted` (the code it was
    resumed into may or may not have run on), its session stopped when there is a runner. The tool
    call the dead resume answered is one of its calls (not known to have reached the code: not ok)."""
    state = claimed.state
    if state.pending is not None:
        waited = max(0, int(time.time() * 1000) - state.pending.paused_at_ms)
        answered = ToolRecord(state.pending.name, state.pending.input_sha256, waited, ok=False)
        state = replace(state, records=(*state.records, answered), pending=None)
    if tools is None:
        return Finished(
            result=_failed_result(n.REASON_DISPATCH_INTERRUPTED, messages.DISPATCH_INTERRUPTED),
            tool_calls=len(state.records),
            records=state.records,
        )
    return tools.abort(state, reason=n.REASON_DISPATCH_INTERRUPTED, message=messages.DISPATCH_INTERRUPTED)


def _failed_result(reason: str, message: str = messages.INTERNAL) -> ExecutionResult:
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
        error_message=message,
        failure_reason=reason,
        full_stdout="",
        full_stderr="",
        session_stopped=False,
    )


# A paused call's end, handed to whoever records it: its outcome, how it finished, and the
# target and runner of its session (for the artifacts after the code).
Ended = tuple[Outcome, Finished, Preflight, SessionRunner]


def expire_turn(
    continuations: ContinuationStore,
    target: Preflight,
    runners: Callable[[Preflight], SessionRunner],
    *,
    tenant_id: str,
    turn_id: str,
    keep_session: bool,
    wait_seconds: float,
) -> list[Ended]:
    """end_turn: every paused call of the turn ends as a SandboxTimeout. `keep_session`: the turn's
    background jobs still need the session. Raises SandboxError when the store fails (the
    calls stay paused; a later resume ends them)."""
    ended: dict[str, tuple[Preflight, SessionRunner, Outcome]] = {}

    def runner_for(claimed: Continuation) -> ToolsRunner:
        outcome = restore_outcome(claimed.call)
        pf = paused_target(target, claimed, outcome)
        runner = runners(pf)
        ended[outcome.invocation_id] = (pf, runner, outcome)
        return tools_runner(runner, wait_seconds)

    steps = tool_calls.expire_turn(
        continuations, runner_for, tenant_id=tenant_id, turn_id=turn_id, stop_session=not keep_session
    )
    out: list[Ended] = []
    for step in steps:
        assert step.finished is not None
        pf, runner, outcome = ended[str(step.call["invocation_id"])]
        out.append((outcome, step.finished, pf, runner))
    return out
