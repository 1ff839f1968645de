"""One call's state: what an execute_code (or a background submit) is while its stages run.

A call is a line of nested stages (`dispatch.line`); each stage reads what the stages outside it
found, adds what it finds or holds, and hands the call on. `Call` is that state, typed, and holds
plain data only: a stage never calls back into it. `start` makes it and sends ahead the requests
that do not wait on each other, so that they go out together with the idempotency claim; having
sent the speculative quota check, it also undoes that count when the call never reached its quota
stage and will not run under it (`dispatch.quota.flow.settle`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

from sandbox_common import messages
from sandbox_common.egress_usage import Baseline
from sandbox_common.errors import SandboxError
from sandbox_common.models import EndTurnRequest, ExecuteCodeRequest
from sandbox_common.outcome import Outcome, internal_failure, public
from sandbox_common.retries import RetryLog
from sandbox_common.windows import utc_now
from sandbox_runtime.job_store import JobRecord
from sandbox_runtime.preflight import Preflight
from sandbox_runtime.runner import ExecutionResult, SessionRunner
from sandbox_runtime.runner.tool_calling import Finished

from dispatch import parts
from dispatch.idempotency.store import Context
from dispatch.preflight.ahead import Ready, read_ahead
from dispatch.quota.client import QuotaDecision
from dispatch.quota.flow import settle, speculate
from dispatch.sessions.egress import read_before
from dispatch.sessions.flow import SessionCall
from dispatch.turns.flow import claim_for
from dispatch.turns.store import Turn

Answer = dict[str, Any] | None  # a stage's answer: None = the call's outcome is the answer
# What answering needs after the code: the audit write (with retries), the output logs, a stop.
ANSWER_MARGIN_SECONDS = 15


@dataclass(frozen=True)
class Ahead:
    """The requests sent before the first stage runs, joined by the stage that needs them: the
    turn claim (turns), the pre-flight read with the tenant's runner (preflight), the turn's
    allowlist session's egress counters (sessions), the speculative quota check (quota)."""

    turn: Future[Turn]
    ready: Future[Ready]
    egress: Future[Baseline | None]
    quota: Future[QuotaDecision | None]


@dataclass(eq=False)
class Call:
    request: ExecuteCodeRequest
    context: Context | None
    parts: parts.Parts
    invocation_id: str
    outcome: Outcome
    ahead: Ahead | None  # None: a paused call's end (nothing goes out ahead of it)
    retries: RetryLog = field(default_factory=RetryLog)  # what was retried, visibly (the answer's `events`)
    # idempotency: the claim ran this attempt here (its speculative count is this call's to settle),
    # or the store could not claim it (refused: the count is undone); when the call must answer
    deadline: float | None = None  # time.monotonic() by which the call starts answering
    entered: bool = False
    unclaimed: bool = False
    # turns / preflight
    turn: Turn | None = None
    preflight: Preflight | None = None
    runner: SessionRunner | None = None
    uses_tools: bool = False  # the code runs through the tools driver (it may pause)
    # sessions: the call's dealings with the turn's session; what the record carries with the row
    session: SessionCall | None = None
    session_restarted: bool = False  # the session stage replaced a session found gone
    result: ExecutionResult | None = None  # the code's result (the code stage)
    finished: Finished | None = None  # a paused tool-calling call's end (resume, sweep, end_turn)
    record_items: list[dict[str, Any]] = field(default_factory=list)
    # quota: the call reached the quota stage (its count stands), at this price per call
    decided: bool = False
    price: float = 0.0
    # jobs: the background job a submit reserved
    job: JobRecord | None = None


@dataclass(eq=False)
class TurnEnd:
    """An end_turn as its stages see it: the turn, closed first, and its jobs still running."""

    request: EndTurnRequest
    context: Context | None
    parts: parts.Parts
    turn: Turn | None = None
    pending: list[str] = field(default_factory=list)


def unavailable(reason: str) -> dict[str, Any]:
    """The answer of an action whose dependency failed (counted; the reason stays in the logs)."""
    internal_failure(reason)
    return public(SandboxError(messages.INTERNAL, failure_reason=reason))


Next = Callable[[Call], Answer]  # the rest of the line, from the next stage on


class Stage(Protocol):
    """A stage: its part of the call around the rest of the line."""

    def __call__(self, call: Call, then: Next) -> Answer: ...


Line = Callable[[Call], dict[str, Any]]  # a whole line: the call's answer


def start(line: Line, request: ExecuteCodeRequest, context: Context | None) -> dict[str, Any]:
    """The call's state, the requests that go out together, then its line."""
    built = parts.built()
    pool = built.pool
    invocation_id = str(uuid.uuid4())
    # The speculative quota check goes out only when the pre-flight decision is already cached:
    # read now, before the pre-flight read sent below could fill it.
    cached = built.preflight.decisions.peek((request.tenant_id, request.template_id))
    turn = pool.submit(claim_for, built.turns, request, built.settings.require_turn_token)
    ready = pool.submit(read_ahead, built, request)
    quota = pool.submit(speculate, built, request, cached)
    ahead = Ahead(
        turn=turn,
        ready=ready,
        egress=pool.submit(read_before, built.egress, built.preflight, turn, ready),
        quota=quota,
    )
    outcome = Outcome(request=request, invocation_id=invocation_id, started_at=utc_now())
    call = Call(request, context, built, invocation_id, outcome, ahead)
    try:
        return line(call)
    finally:
        if not call.decided:  # a speculative count the call did not reach (its quota stage) is undone
            settle(built, request, quota, entered=call.entered, unclaimed=call.unclaimed)
