"""Tool calling's stages: the user code (the innermost stage of an execute_code), the end of a
paused call (the innermost of its end), and end_turn's paused calls.

`code`: the user code in the call's session — through the tools driver when its template allows
tools and it names `sandbox_tools` (it may pause at a tool call: then the `tool_call` answer is
the call's answer, counted, with no row yet), else straight through the session runner. The
result goes on the call (`Call.result`) for the stages around it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from dispatch.call import Answer, Call, Line, TurnEnd
from dispatch.tools.flow import expire_paused
from dispatch.tools.run import ToolCallPaused, finished_result, run_code
from dispatch.tools.store import continuations


def code(call: Call) -> Answer:
    assert call.runner is not None and call.preflight is not None  # the pre-flight stage ran
    req, pf, outcome = call.request, call.preflight, call.outcome
    left = None if call.deadline is None else call.deadline - time.monotonic()
    session_id = str(outcome.session_id)
    if not call.uses_tools:
        call.result = call.runner.execute(
            str(pf.interpreter_id), session_id, req.code, deadline_seconds=left, language=req.language
        )
        return None
    try:
        call.result = run_code(
            req,
            outcome,
            pf,
            call.runner,
            session_id,
            left,
            continuations=continuations(call.parts),
            wait_seconds=call.parts.settings.tool_wait_seconds,
        )
    except ToolCallPaused as paused:
        return paused.response
    return None


def finished(call: Call) -> Answer:
    """A paused call's end (how it finished: `Call.finished`) on its outcome."""
    assert call.finished is not None
    result = call.result = finished_result(call.outcome, call.finished)
    call.outcome.ran(result, result.failure() if result.error else None)
    return None


def expiring(end: TurnEnd, then: Callable[[TurnEnd], dict[str, Any]], *, finish: Line) -> dict[str, Any]:
    """end_turn: the turn's paused calls end as timeouts (each through `finish`, with its row);
    a turn whose background jobs still run keeps its session until the last one ends."""
    req = end.request
    expire_paused(end.parts, req.tenant_id, req.turn_id, keep_session=bool(end.pending), finish=finish)
    if end.pending:
        return {"ok": True, "stopped": False, "pending_jobs": end.pending}
    return then(end)
