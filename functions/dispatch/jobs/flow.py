"""Background jobs in dispatch's flow (SPEC §17, issue 13): the three call sites the Dispatcher
delegates to — a `background: true` execute_code (`submit`), get_job / cancel_job (`observe`)
and end_turn's pending jobs (`pending`). The job logic itself is job_actions / job_flow.

submit, in dispatch's order: turn + pre-flight → ready? → reserve a slot (a 4th running job is
SandboxInvalidRequest: nothing counted, no row) → session capacity (§16.2: a cap refusal counts
nothing) → quota (counted once, here) → session → launch.
Any failure after the reservation releases the slot and is answered and audited like any failed
call. A launched job answers at once and writes NO row now: its one row is written when it ends,
under the same invocation_id.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from sandbox_common import messages
from sandbox_common.errors import SandboxError, SandboxFailure, SandboxInvalidRequest
from sandbox_common.models import CancelJobRequest, ExecuteCodeRequest, GetJobRequest
from sandbox_common.outcome import Outcome, internal_failure, public
from sandbox_common.windows import utc_now
from sandbox_runtime.job_end import JobDeps
from sandbox_runtime.job_store import JobRecord
from sandbox_runtime.preflight import Preflight

from dispatch.jobs import actions as job_actions
from dispatch.sessions.flow import SessionCall
from dispatch.turns import flow as turn_logic
from dispatch.turns import guard as turn_guard
from dispatch.turns.store import Turn, TurnStoreUnavailable

# Seconds a job's deadline keeps from its session's end (beyond the call timeout): room to observe
# its end and write its row before AgentCore reaps the session.
JOB_SESSION_RESERVE_MARGIN_SECONDS = 60


def submit(
    dispatcher: Any,
    deps: JobDeps,
    req: ExecuteCodeRequest,
    turn: Turn,
    budget: Callable[[], float | None],
    *,
    refuse_unless_ready: Callable[[Preflight], None],
) -> dict[str, Any]:
    """The answer to a `background: true` execute_code (or raises SandboxInvalidRequest).
    `dispatcher`: the Dispatcher (its pre-flight, quota, session and record steps); `turn`: the
    caller's turn, already claimed with its token (§16.5)."""
    outcome = Outcome(request=req, invocation_id=str(uuid.uuid4()), started_at=utc_now())
    with outcome.failures_answered("job_submit_internal_error"):  # execute_code's own wrapper
        return _submit(dispatcher, deps, req, turn, outcome, budget, refuse_unless_ready)
    dispatcher._record(outcome.finish())  # the failed submit's one row
    return outcome.response()


def _submit(
    dispatcher: Any,
    deps: JobDeps,
    req: ExecuteCodeRequest,
    turn: Turn,
    outcome: Outcome,
    budget: Callable[[], float | None],
    refuse_unless_ready: Callable[[Preflight], None],
) -> dict[str, Any]:
    turn_logic.refuse_if_ended(turn)
    pf = dispatcher._preflight(req)
    outcome.environment = pf.environment
    refuse_unless_ready(pf)
    if req.files:
        raise SandboxInvalidRequest(messages.JOB_FILES_UNSUPPORTED)
    interpreter_id = str(pf.interpreter_id)
    live = turn.live_session and turn.interpreter_id == interpreter_id
    record = job_actions.reserve(
        req,
        deps,
        invocation_id=outcome.invocation_id,
        environment=pf.environment,
        session_id=str(turn.session_id) if live else "",
        interpreter_id=interpreter_id if live else "",
        turn_token_hash=turn.token_hash,
    )  # the turn was claimed with its token (§16.5)
    call = SessionCall()
    try:
        with dispatcher.sessions.held(call, turn, pf):  # §16.2: a session-cap refusal counts nothing
            dispatcher._quota(req, outcome)
            runner = dispatcher.runner_factory(pf)
            session_id, _ = dispatcher._session(turn, pf, runner, outcome.invocation_id, budget(), call=call)
    except BaseException:
        job_actions.release(record, deps)
        raise
    outcome.session_id = session_id
    settings = dispatcher.settings
    return job_actions.launch(
        record,
        deps,
        code=req.code,
        session_id=session_id,
        interpreter_id=interpreter_id,
        session_left_s=settings.session_timeout_seconds - _session_age(dispatcher, turn, session_id),
        reserve_s=settings.call_timeout_seconds + JOB_SESSION_RESERVE_MARGIN_SECONDS,
    )


def _session_age(dispatcher: Any, turn: Turn, session_id: str) -> float:
    """Seconds the job's session has lived: the claimed turn's live session keeps its start time;
    any other session (started, or activated by a racing call, during this submit) is brand new."""
    started = turn.session_started_at if turn.live_session and turn.session_id == session_id else None
    return 0.0 if started is None else max(0.0, dispatcher.turns.clock() - started)


def observe(dispatcher: Any, deps: JobDeps, req: GetJobRequest | CancelJobRequest) -> dict[str, Any]:
    """get_job / cancel_job: the job must be the caller's (another tenant's, agent's or turn's job
    is refused like an unknown id; an ended turn's jobs still answer: they outlive end_turn) and
    the turn token must be its turn's (§16.5), checked against the hash kept on the job item — a
    turn's hash never changes once bound, so this is the turn's own check without reading the
    turn: a running job's poll costs the job read plus one status call to its session."""
    try:
        record = job_actions.owned(req, deps)
        _check_token(dispatcher, req, record)
        return job_actions.answer(record, deps, cancel=isinstance(req, CancelJobRequest))
    except SandboxInvalidRequest:
        raise
    except SandboxFailure as failure:
        internal_failure(str(failure.fields.get("failure_reason")))
        return public(failure)


def _check_token(dispatcher: Any, req: GetJobRequest | CancelJobRequest, record: JobRecord) -> None:
    stored = record.turn_token_hash
    if stored is None:  # a job item from before the hash was kept on it: its turn says
        try:
            turn = dispatcher.turns.get(req.tenant_id, req.turn_id)
        except TurnStoreUnavailable as exc:
            raise SandboxError(messages.INTERNAL, failure_reason=f"turn_store_unavailable:{exc}") from None
        if turn is None:
            raise SandboxInvalidRequest(job_actions.UNKNOWN_JOB)
        stored = turn.token_hash
    turn_guard.check(
        token=req.turn_token,
        stored_hash=stored,
        required=dispatcher.settings.require_turn_token,
        tenant_id=req.tenant_id,
        agent_id=req.agent_id,
        turn_id=req.turn_id,
    )


def pending(deps: JobDeps, tenant_id: str, turn_id: str) -> list[str]:
    """end_turn: the turn's jobs still running (the session must outlive them)."""
    return job_actions.pending_jobs(tenant_id, turn_id, deps)
