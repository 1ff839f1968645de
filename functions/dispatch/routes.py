"""The route table: every action dispatch answers (`sandbox_common.naming.Action`) and the
function that answers it; the request is validated once, as its action's model.

A route's function takes the container's step API, the validated request and the Lambda
context, and returns the response dict (or raises SandboxInvalidRequest / StillRunning, which the
handler maps). Adding an action: its name in `Action` and its request model
(`sandbox_common.naming`, `sandbox_common.models`), its row here, its function in the capability
that owns it.

Cold start: a route's module is imported when its action first runs (`Route.function`), never
when the handler is imported, so the handler's cold import carries the request models and this
table only, and a container that never sees a background job never loads the jobs package. The
imports inside functions of dispatch (here, and `Steps.jobs` / `Steps.pending_jobs` for the jobs
package) exist for this reason alone.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from sandbox_common.models import AnyDispatchRequest, parse_dispatch_event
from sandbox_common.naming import Action

from dispatch import scope

Answer = Callable[[Any, Any, Any], dict[str, Any]]  # (steps, request, context) -> response


@dataclass(frozen=True)
class Route:
    target: str  # "module:function" of the function that answers
    # execute_code with `background: true` (§17) is answered by this function instead
    background: str | None = None

    def function(self, request: AnyDispatchRequest) -> Answer:
        target = self.background if self.background and getattr(request, "background", False) else self.target
        return _load(target)


ROUTES: dict[Action, Route] = {
    Action.BEGIN_TURN: Route("dispatch.turns.actions:begin_turn"),
    Action.EXECUTE_CODE: Route("dispatch.steps:execute_code", background="dispatch.jobs.flow:submit"),
    Action.END_TURN: Route("dispatch.turns.actions:end_turn"),
    Action.GET_FILE: Route("dispatch.files.access:answer"),
    Action.GET_JOB: Route("dispatch.jobs.flow:observe"),
    Action.CANCEL_JOB: Route("dispatch.jobs.flow:observe"),
    Action.RESUME: Route("dispatch.tools.flow:resume"),
    Action.SWEEP_PAUSED_CALLS: Route("dispatch.tools.flow:sweep_paused_calls"),
}


def parse(event: Any) -> AnyDispatchRequest:
    """The event as its action's request model (`sandbox_common.models.REQUEST_MODELS`), validated
    once; raises SandboxInvalidRequest."""
    return parse_dispatch_event(event)


def answer(request: AnyDispatchRequest, context: Any) -> dict[str, Any]:
    """The response of a validated request, from its route's function; a request for a tenant
    outside the invoking agent's scope is refused before its route runs (`dispatch.scope`)."""
    refused = scope.refusal(request, context, _steps)
    if refused is not None:
        return refused
    function = ROUTES[request.action].function(request)
    return function(_steps(), request, context)


def _steps() -> Any:
    # Cold start: the step API (and the parts it builds) loads with the first action that runs.
    from dispatch.steps import current

    return current()


@cache
def _load(target: str) -> Answer:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]
