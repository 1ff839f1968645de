"""The session's stages: its capacity, held around the quota stage, and the session itself, held
around the code; and the session's side of a paused call's end and of end_turn.

`capacity`: a turn without a usable session holds a session's capacity (a warm session claimed, or
a cold slot reserved) before the quota stage, so a session-cap refusal counts nothing; capacity no
session used is given back when the line unwinds. An allowlist session's end reading, sent beside
the artifact helper, is settled here too (the row's `egress`, the egress cap's refusal,
`dispatch.sessions.egress`), once the artifacts are collected.

`session`: the turn's session (a later call's live one; a claimed warm one; or Start + readiness
under the turn's lease), the input files, then the code (the next stage). A session reaped before
the code reached it is replaced once, visibly. A new cold session's activation writes go out
beside the code and are joined as soon as it answered; if one failed, the session is stopped and
freed and the call fails closed. The code's result goes on the call's outcome, and a session the
run stopped (a timeout) stops being the turn's.
"""

from __future__ import annotations

import time
from contextlib import suppress
from typing import Any

from sandbox_common import messages
from sandbox_common import naming as n
from sandbox_common.errors import SandboxError
from sandbox_common.observability import logger
from sandbox_runtime.preflight import PreflightUnavailable
from sandbox_runtime.runner import SessionGone

from dispatch.call import Answer, Call, Next, TurnEnd, unavailable
from dispatch.sessions import egress
from dispatch.sessions.activation import Activation
from dispatch.sessions.flow import SessionCall
from dispatch.sessions.inputs import place_inputs
from dispatch.turns.store import Turn, TurnStoreUnavailable

START_WAIT_SECONDS = 90  # the longest a call waits for another caller's start of the turn's session


def capacity(call: Call, then: Next) -> Answer:
    sessions = call.parts.sessions
    assert call.turn is not None and call.preflight is not None  # the turn and pre-flight stages ran
    session = call.session = SessionCall(retries=call.retries)
    sessions.prepare(session, call.turn, call.preflight)  # SandboxCapExceeded: counted nothing
    try:
        return then(call)
    finally:
        if session.prepared is not None:  # capacity no session used (refused, or another's won)
            sessions.abandon(session)
        if session.egress_after is not None:
            settled(call, session)


def settled(call: Call, session: SessionCall) -> None:
    """The call's egress from its two readings (and the egress cap's refusal); the end reading
    rides the call's record as the session's `attributed` reading."""
    parts = call.parts
    reading = egress.settle(call.outcome, session.egress_after)
    call.record_items = egress.attributed_items(
        parts.egress, call.outcome, reading, parts.settings.session_timeout_seconds
    )


def session(call: Call, then: Next) -> Answer:
    assert call.session is not None and call.turn is not None  # the capacity stage ran
    outcome = call.outcome
    assert call.ahead is not None
    outcome.egress_baseline = egress.baseline(call.ahead.egress)  # the session's counters before the code
    restarted = acquired(call, call.turn)
    try:
        answer = placed_and_run(call, then)
    except SessionGone:
        # Reaped by AgentCore (or stopped elsewhere) before the code reached it: the code did not
        # run, so start a fresh session and run it once — a retry the agent sees.
        turn = call.turn
        call.parts.sessions.stopped(call.session, turn.tenant_id, turn.turn_id, str(outcome.session_id))
        call.retries.record(n.RETRY_SESSION_REAPED, 1)
        acquired(call, call.parts.turns.get(turn.tenant_id, turn.turn_id) or turn)
        restarted = call.session_restarted = True
        answer = placed_and_run(call, then)
    if restarted:
        outcome.response_extra.update(session_restarted=True, notice=messages.SESSION_RESTARTED)
    if answer is not None or call.result is None:  # answered directly (a paused tool call)
        return answer
    result = call.result
    outcome.ran(result, result.failure() if result.error else None)
    call.session.egress_after = egress.start_after(call.parts.egress, outcome, call.parts.pool)
    if result.session_stopped:  # a timeout: the runner stopped it; the next call starts fresh
        turn = call.turn
        call.parts.sessions.stopped(call.session, turn.tenant_id, turn.turn_id, str(outcome.session_id))
    return None


def acquired(call: Call, turn: Turn) -> bool:
    """The turn's session for this call, on its outcome; True when it replaced one the turn had
    before (not a failed start). The wait for another caller's start is bounded by the call's
    deadline. A new cold session's activation writes go out beside the user code; a call that may
    pause (tool calling) or launches a job makes them before the session is used."""
    assert call.session is not None and call.preflight is not None and call.runner is not None
    session = call.session
    # a tool-calling call (it may pause) keeps a session already confirmed: its writes go first
    beside = not (call.uses_tools or call.request.background)
    session.activation = Activation(call.parts.pool) if beside else None
    had_session = turn.session_id is not None
    left = None if call.deadline is None else call.deadline - time.monotonic()
    wait = START_WAIT_SECONDS if left is None else max(1.0, min(START_WAIT_SECONDS, left))
    try:
        session_id, started_here = call.parts.sessions.acquire(
            session,
            turn,
            pf=call.preflight,
            runner=call.runner,
            invocation_id=call.invocation_id,
            wait_seconds=wait,
        )
    except TurnStoreUnavailable as exc:
        raise SandboxError(messages.INTERNAL, failure_reason=f"turn_store_unavailable:{exc}") from None
    call.outcome.session_id = session_id
    return started_here and had_session


def placed_and_run(call: Call, then: Next) -> Answer:
    """The input files, then the code; a new cold session's activation writes go out just before
    and are joined as soon as the code answered, before the artifact helper."""
    assert call.session is not None and call.turn is not None and call.runner is not None
    assert call.preflight is not None
    session, runner, req = call.session, call.runner, call.request
    if session.activation is not None:
        session.activation.go()
    try:
        if req.files:  # a failure here means the code never runs
            interpreter_id, session_id = str(call.preflight.interpreter_id), str(call.outcome.session_id)
            call.outcome.audit_extra["input_files"] = place_inputs(runner, interpreter_id, session_id, req)
        answer = then(call)
    except BaseException:
        with suppress(SandboxError):  # the code's own failure is the one reported
            call.parts.sessions.confirm(session, call.turn, runner)
        raise
    try:
        call.parts.sessions.confirm(session, call.turn, runner)
    except SandboxError:
        call.outcome.ran_code = True  # it reached a session: billed, its output withheld
        raise
    return answer


def ended(call: Call, then: Next) -> Answer:
    """A paused call's end: its session's egress since the pause (the end reading sent beside the
    artifact helper, settled and written on its own: no transaction carries it), and a session
    its end stopped stops being the turn's."""
    parts, outcome = call.parts, call.outcome
    after = egress.start_after(parts.egress, outcome, parts.pool)
    answer = then(call)
    reading = egress.settle(outcome, after)
    egress.attribute_now(parts.egress, outcome, reading, parts.settings.session_timeout_seconds)
    result, turn = call.result, call.turn
    if result is not None and result.session_stopped and turn is not None and outcome.session_id:
        try:
            # the turn stops pointing at it and its session slot is freed
            parts.sessions.stopped(None, turn.tenant_id, turn.turn_id, str(outcome.session_id))
        except TurnStoreUnavailable as exc:  # the next call finds the session gone and starts a fresh one
            logger.warning(
                "mark_stopped_failed", extra={"invocation_id": outcome.invocation_id, "cause": str(exc)}
            )
    return answer


def stopping(end: TurnEnd) -> dict[str, Any]:
    """end_turn's last stage: the turn's live session stopped, the turn pointed away from it and its
    slot freed (`stopped` False when the stop failed: a retried end_turn can stop it)."""
    turn, parts = end.turn, end.parts
    if turn is None or not turn.live_session:
        return {"ok": True, "stopped": False}
    try:
        runner = parts.runners(parts.preflight.runner_target(turn.tenant_id))
    except PreflightUnavailable as exc:
        return unavailable(f"preflight_unavailable:{exc}")
    return {"ok": True, "stopped": parts.sessions.stop_turn_session(turn, runner)}
