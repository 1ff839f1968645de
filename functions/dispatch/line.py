"""The lines a call runs: each a nest of stages over one call state (`dispatch.call.Call`), the
outermost first. A stage holds its resource around the rest of the line (`then`) and gives it back
in its own `try/finally`; no stage calls back into another.

- `EXECUTE_CODE`: idempotency → turn → pre-flight → session capacity → quota → collect →
  session → code. The idempotency stage writes the call's one audit row as the line unwinds.
- `SUBMIT` (an execute_code with `background: true`): idempotency → turn → pre-flight → job slot →
  session capacity → quota → session → launch. A launched job answers at once; its row comes when it ends.
- `PAUSED_END` (a paused tool-calling call that ended: a resume, the sweep, end_turn): its row
  written on its own → its session's egress and bookkeeping → collect → how it finished.
- `END_TURN`: the turn closed → its paused calls ended (each through `PAUSED_END`) → its session
  stopped (unless its background jobs still run in it).

The lines are built once, when this module is imported (`SUBMIT` when the first submit comes,
`submit()`), from `functools.partial`: the walk from one stage to the next has no stop of its own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from sandbox_common.models import EndTurnRequest, ExecuteCodeRequest

from dispatch import parts
from dispatch.call import Call, Line, Next, Stage, TurnEnd, start
from dispatch.files import stage as files
from dispatch.idempotency import stage as idempotency
from dispatch.idempotency.store import Context
from dispatch.preflight import stage as preflight
from dispatch.quota import stage as quota
from dispatch.sessions import stage as sessions
from dispatch.tools import stage as tools
from dispatch.turns import stage as turns


def nest(stages: Sequence[Stage], innermost: Next) -> Next:
    """`stages[0]` around `stages[1]` around ... around `innermost`."""
    line = innermost
    for stage in reversed(stages):
        line = functools.partial(stage, then=line)
    return line


class Outermost(Protocol):
    """The line's outermost stage: it always answers."""

    def __call__(self, call: Call, then: Next) -> dict[str, Any]: ...


def outermost(stage: Outermost, rest: Next) -> Line:
    """The line's outermost stage, which always answers (it renders the call's outcome)."""
    return functools.partial(stage, then=rest)


EXECUTE_CODE = outermost(
    idempotency.once,
    nest(
        [turns.stage, preflight.stage, sessions.capacity, quota.stage, files.collect, sessions.session],
        tools.code,
    ),
)
PAUSED_END = outermost(idempotency.alone, nest([sessions.ended, files.collect], tools.finished))
END_TURN: Callable[[TurnEnd], dict[str, Any]] = functools.partial(
    turns.ending, then=functools.partial(tools.expiring, then=sessions.stopping, finish=PAUSED_END)
)


@functools.cache
def submit() -> Line:
    """The line `SUBMIT`, built when a container first sees a background job's submit."""
    # Cold start: the jobs package loads with the first submit (see dispatch.routes).
    from dispatch.jobs import stage as jobs

    return outermost(
        idempotency.once,
        nest(
            [turns.stage, preflight.stage, jobs.reserved, sessions.capacity, quota.stage, sessions.session],
            jobs.launched,
        ),
    )


def execute_code(req: ExecuteCodeRequest, context: Context | None) -> dict[str, Any]:
    """The execute_code action: a foreground call, or a background job's submit."""
    return start(submit() if req.background else EXECUTE_CODE, req, context)


def end_turn(req: EndTurnRequest, context: Context | None) -> dict[str, Any]:
    return END_TURN(TurnEnd(req, context, parts.built()))
