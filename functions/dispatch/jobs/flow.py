"""Background jobs' actions (SPEC §17): a `background: true` execute_code (`submit`), get_job and
cancel_job (`observe`). end_turn's pending jobs are the step API's (`Steps.pending_jobs`); the
job logic itself is `dispatch.jobs.actions` and the shared run time's job end.

submit, in dispatch's order: turn + pre-flight → ready? → reserve a slot (a 4th running job is
SandboxInvalidRequest: nothing counted, no row) → session capacity (§16.2: a cap refusal counts
nothing) → quota (counted once, here) → session → launch.
Any failure after the reservation releases the slot and is answered and audited like any failed
call. A launched job answers at once and writes NO row now: its one row is written when it ends,
under the same invocation_id.
"""

from __future__ import annotations

from typing import Any

from sandbox_common import messages
from sandbox_common.errors import SandboxError, SandboxFailure, SandboxInvalidRequest
from sandbox_common.models import CancelJobRequest, ExecuteCodeRequest, GetJobRequest
from sandbox_common.outcome import Outcome, internal_failure, public
from sandbox_common.windows import utc_now
from sandbox_runtime.job_store import JobRecord
from sandbox_runtime.runner import SessionGone

from dispatch.jobs import actions
from dispatch.steps import Attempt, Steps
from dispatch.turns.store import Turn, TurnStoreUnavailable

# Seconds a job's deadline keeps from its session's end (beyond the call timeout): room to observe
# its end and write its row before AgentCore reaps the session.
JOB_SESSION_RESERVE_MARGIN_SECONDS = 60


def submit(steps: Steps, req: ExecuteCodeRequest, context: Any) -> dict[str, Any]:
    """A `background: true` execute_code: claimed once per call_id like any execute_code, answered
    at once with its job_id (or raises SandboxInvalidRequest)."""
    return steps.once(req, context, lambda attempt: _submit(steps, req, attempt))


def _submit(steps: Steps, req: ExecuteCodeRequest, attempt: Attempt) -> dict[str, Any]:
    """`attempt.turn`: the caller's turn, already claimed with its token (§16.5). One invocation
    id for the call: the attempt's (in its idempotency claim), the job's and its one row's."""
    outcome = Outcome(request=req, invocation_id=attempt.invocation_id, started_at=utc_now())
    with outcome.failures_answered("job_submit_internal_error"):  # execute_code's own wrapper
        return _launch(steps, req, attempt, outcome)
    steps.record(outcome.finish(), attempt.beside)  # the failed submit's one row, with its completion
    return outcome.response()


def _launch(steps: Steps, req: ExecuteCodeRequest, attempt: Attempt, outcome: Outcome) -> dict[str, Any]:
    turn = steps.open_turn(attempt.turn)
    pf = steps.preflight(req)
    outcome.environment = pf.environment
    steps.ready(pf)
    if req.files:
        raise SandboxInvalidRequest(messages.JOB_FILES_UNSUPPORTED)
    deps = steps.jobs
    interpreter_id = str(pf.interpreter_id)
    live = turn.live_session and turn.interpreter_id == interpreter_id
    record = actions.reserve(
        req,
        deps,
        invocation_id=outcome.invocation_id,
        environment=pf.environment,
        session_id=str(turn.session_id) if live else "",
        interpreter_id=interpreter_id if live else "",
        turn_token_hash=turn.token_hash,
        egress_before=attempt.egress_baseline(),  # an allowlist session's counters at submit
    )  # the turn was claimed with its token (§16.5)
    settings = steps.settings
    for restart in (False, True):
        try:
            with steps.capacity(turn, pf) as call:  # §16.2: a session-cap refusal counts nothing
                steps.quota(req, outcome)  # once per call_id: a restart's check counts nothing more
                runner = steps.runner(pf)
                session_id, _ = steps.session(call, turn, pf, runner, outcome.invocation_id, attempt.budget())
        except BaseException:
            actions.release(record, deps)
            raise
        outcome.session_id = session_id
        try:
            return actions.launch(
                record,
                deps,
                code=req.code,
                language=req.language,
                session_id=session_id,
                interpreter_id=interpreter_id,
                session_left_s=settings.session_timeout_seconds - _session_age(steps, turn, session_id),
                reserve_s=settings.call_timeout_seconds + JOB_SESSION_RESERVE_MARGIN_SECONDS,
                gone_raises=not restart,
            )
        except SessionGone:
            # The turn's session was stopped under it (e.g. a job's timeout stopped it): as a
            # foreground call would, start a fresh one, once (the job record, its slot kept, is
            # bound to it by the launch).
            steps.parts.sessions.stopped(None, turn.tenant_id, turn.turn_id, session_id)
            turn = steps.turns.get(turn.tenant_id, turn.turn_id) or turn
    raise AssertionError("unreachable: the second launch raises JobLaunchFailed, not SessionGone")


def _session_age(steps: Steps, turn: Turn, session_id: str) -> float:
    """Seconds the job's session has lived: the claimed turn's live session keeps its start time;
    any other session (started, or activated by a racing call, during this submit) is brand new."""
    started = turn.session_started_at if turn.live_session and turn.session_id == session_id else None
    return 0.0 if started is None else max(0.0, steps.turns.clock() - started)


def observe(steps: Steps, req: GetJobRequest | CancelJobRequest, context: Any) -> dict[str, Any]:
    """get_job / cancel_job: the job must be the caller's (another tenant's, agent's or turn's job
    is refused like an unknown id; an ended turn's jobs still answer: they outlive end_turn) and
    the turn token must be its turn's (§16.5), checked against the hash kept on the job item — a
    turn's hash never changes once bound, so this is the turn's own check without reading the
    turn: a running job's poll costs the job read plus one status call to its session."""
    deps = steps.jobs
    try:
        record = actions.owned(req, deps)
        _check_token(steps, req, record)
        return actions.answer(record, deps, cancel=isinstance(req, CancelJobRequest))
    except SandboxInvalidRequest:
        raise
    except SandboxFailure as failure:
        internal_failure(str(failure.fields.get("failure_reason")))
        return public(failure)


def _check_token(steps: Steps, req: GetJobRequest | CancelJobRequest, record: JobRecord) -> None:
    stored = record.turn_token_hash
    if stored is None:  # a job item from before the hash was kept on it: its turn says
        try:
            turn = steps.turns.get(req.tenant_id, req.turn_id)
        except TurnStoreUnavailable as exc:
            raise SandboxError(messages.INTERNAL, failure_reason=f"turn_store_unavailable:{exc}") from None
        if turn is None:
            raise SandboxInvalidRequest(actions.UNKNOWN_JOB)
        stored = turn.token_hash
    steps.check_token(
        req.turn_token, stored, tenant_id=req.tenant_id, agent_id=req.agent_id, turn_id=req.turn_id
    )
