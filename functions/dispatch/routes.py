"""The route table: every action dispatch answers (`sandbox_common.naming.Action`) and the
function that answers it; the request is validated once, as its action's model.

A route is a typed function of this module, `(request, context) -> response`, that imports the
capability answering it when the action first runs and hands it the request as its own model: a
reader (and mypy) follows it to the answering function. Adding an action: its name in `Action`
and its request model (`sandbox_common.naming`, `sandbox_common.models`), its route here, its
function in the capability that owns it.

Cold start: a route's capability is imported when its action first runs, never when the handler
is imported, so the handler's cold import carries the request models and this table only, and a
container that never sees a background job's submit, get_job or cancel_job never loads
`dispatch.jobs` (end_turn, a resume and the sweep read the turn's jobs through the shared run
time's job end, `sandbox_runtime.job_end`). The imports inside the route functions exist for
this reason alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

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
    parse_dispatch_event,
)
from sandbox_common.naming import Action
from sandbox_common.observability import logger

from dispatch import scope

if TYPE_CHECKING:
    from dispatch.idempotency.store import Context

Response = dict[str, Any]
Route = Callable[[AnyDispatchRequest, "Context | None"], Response]


def execute_code(req: AnyDispatchRequest, context: Context | None) -> Response:
    from dispatch.line import execute_code as answer

    assert isinstance(req, ExecuteCodeRequest)
    return answer(req, context)


def begin_turn(req: AnyDispatchRequest, context: Context | None) -> Response:
    from dispatch.turns.actions import begin_turn as answer

    assert isinstance(req, BeginTurnRequest)
    return answer(req, context)


def end_turn(req: AnyDispatchRequest, context: Context | None) -> Response:
    from dispatch.line import end_turn as answer

    assert isinstance(req, EndTurnRequest)
    return answer(req, context)


def get_file(req: AnyDispatchRequest, context: Context | None) -> Response:
    from dispatch.files.access import answer

    assert isinstance(req, GetFileRequest)
    return answer(req, context)


def observe_job(req: AnyDispatchRequest, context: Context | None) -> Response:
    from dispatch.jobs.flow import observe

    assert isinstance(req, GetJobRequest | CancelJobRequest)
    return observe(req, context)


def resume(req: AnyDispatchRequest, context: Context | None) -> Response:
    from dispatch.line import PAUSED_END
    from dispatch.tools.flow import resume as answer

    assert isinstance(req, ResumeRequest)
    return answer(PAUSED_END, req, context)


def sweep_paused_calls(req: AnyDispatchRequest, context: Context | None) -> Response:
    from dispatch.line import PAUSED_END
    from dispatch.tools.flow import sweep_paused_calls as answer

    assert isinstance(req, SweepPausedCallsRequest)
    return answer(PAUSED_END, req, context)


ROUTES: dict[Action, Route] = {
    Action.BEGIN_TURN: begin_turn,
    Action.EXECUTE_CODE: execute_code,
    Action.END_TURN: end_turn,
    Action.GET_FILE: get_file,
    Action.GET_JOB: observe_job,
    Action.CANCEL_JOB: observe_job,
    Action.RESUME: resume,
    Action.SWEEP_PAUSED_CALLS: sweep_paused_calls,
}


def answer(event: Any, context: Context | None) -> Response:
    """The response to an event: validated once, as its action's request model
    (`sandbox_common.models.REQUEST_MODELS`; raises SandboxInvalidRequest), its action, tenant and
    turn added to the log context, then answered by its route; a request for a tenant outside the
    invoking agent's scope is refused before its route runs (`dispatch.scope`)."""
    request = parse_dispatch_event(event)
    logger.append_keys(
        action=request.action,
        tenant_id=getattr(request, "tenant_id", None),
        turn_id=getattr(request, "turn_id", None),
    )
    refused = scope.refusal(request, context)
    if refused is not None:
        return refused
    return ROUTES[request.action](request, context)
