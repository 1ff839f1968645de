"""A background job's submit stages (`dispatch.line.SUBMIT`).

`reserved`: after the pre-flight, one of the turn's job slots taken and the job record created
(a fourth running job is SandboxInvalidRequest: nothing counted, no row), held around the session
capacity, the quota and the launch, and given back when any of them fails (the failure is
answered and audited like any failed call). A submit carries no input files.

`launched`, inside the session stage: the job started in the turn's session and answered at once
with its job_id; the job's one row is written when it ends, under the call's invocation id. A
session found gone at the launch is replaced once by the session stage, as a foreground call's
would be (the record, its slot kept, is bound to the fresh one).
"""

from __future__ import annotations

from sandbox_common import messages
from sandbox_common.errors import SandboxInvalidRequest

from dispatch.call import Answer, Call, Next
from dispatch.jobs import actions
from dispatch.turns.store import Turn

# Seconds a job's deadline keeps from its session's end (beyond the call timeout): room to observe
# its end and write its row before AgentCore reaps the session.
JOB_SESSION_RESERVE_MARGIN_SECONDS = 60


def reserved(call: Call, then: Next) -> Answer:
    assert call.turn is not None and call.preflight is not None and call.ahead is not None
    req, turn, pf = call.request, call.turn, call.preflight
    if req.files:
        raise SandboxInvalidRequest(messages.JOB_FILES_UNSUPPORTED)
    deps = call.parts.jobs
    interpreter_id = str(pf.interpreter_id)
    live = turn.live_session and turn.interpreter_id == interpreter_id
    job = call.job = actions.reserve(
        req,
        deps,
        invocation_id=call.invocation_id,
        environment=pf.environment,
        session_id=str(turn.session_id) if live else "",
        interpreter_id=interpreter_id if live else "",
        turn_token_hash=turn.token_hash,
        # an allowlist session's counters at submit (read ahead; it raises nothing once the turn
        # claim it waited on has passed the turn stage)
        egress_before=call.ahead.egress.result(),
    )
    try:
        return then(call)
    except actions.JobLaunchFailed:  # the launch gave the slot back itself
        raise
    except BaseException:
        actions.release(job, deps)
        raise


def launched(call: Call) -> Answer:
    """The job started in the call's session (`dispatch.sessions.stage.session` acquired it); a
    session found gone is raised as SessionGone the first time (the session stage starts a fresh
    one and launches again) and fails the submit the second."""
    assert call.job is not None and call.preflight is not None and call.turn is not None
    settings, session_id = call.parts.settings, str(call.outcome.session_id)
    return actions.launch(
        call.job,
        call.parts.jobs,
        code=call.request.code,
        language=call.request.language,
        session_id=session_id,
        interpreter_id=str(call.preflight.interpreter_id),
        session_left_s=settings.session_timeout_seconds - session_age(call, call.turn, session_id),
        reserve_s=settings.call_timeout_seconds + JOB_SESSION_RESERVE_MARGIN_SECONDS,
        gone_raises=not call.session_restarted,
    )


def session_age(call: Call, turn: Turn, session_id: str) -> float:
    """Seconds the job's session has lived: the claimed turn's live session keeps its start time;
    any other session (started, or activated by a racing call, during this submit) is brand new."""
    started = turn.session_started_at if turn.live_session and turn.session_id == session_id else None
    return 0.0 if started is None else max(0.0, call.parts.turns.clock() - started)
