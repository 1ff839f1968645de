"""Session rules through the real path: a timeout the runner's deadline ends stops the
session and the next call of the turn starts a fresh one and says so; a session reaped by
AgentCore is replaced before the code runs (the code runs once)."""

from __future__ import annotations

import pytest
from sandbox_common import naming as n

from .conftest import Stack, event


@pytest.fixture
def short_deadline(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Stack:
    from dispatch import parts as dependencies
    from sandbox_common import settings

    monkeypatch.setenv(n.ENV_CALL_TIMEOUT, "2")
    settings.clear_caches()
    dependencies.reset()
    return stack


def test_timeout_stops_session_and_next_call_restarts(short_deadline: Stack) -> None:
    stack = short_deadline
    # Given a turn with state in its session
    assert stack.dispatch(event(call_id="c1", code="x = 1"))["ok"] is True
    # When a call runs past the per-call deadline, blocking the signal the session would stop it with
    # (so the runner's own deadline ends it)
    code = "import signal, time\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})\ntime.sleep(30)"
    slow = stack.dispatch(event(call_id="c2", code=code))
    # Then it is a timeout, and the session it ran in is gone
    assert slow["error"] == "SandboxTimeout" and slow["exit_status"] == "timeout"
    old_session = slow["session_id"]
    gone = stack.interpreter.session(old_session)
    assert gone is None or gone.status == "TERMINATED"
    # And the next call gets a fresh session, told so, with the old state gone
    after = stack.dispatch(event(call_id="c3", code="print('x' in globals())"))
    assert after["ok"] is True and after["stdout"] == "False\n"
    assert after["session_id"] != old_session and after["session_restarted"] is True
    assert "new sandbox session" in after["notice"]
    rows = {r["call_id"]: r for r in stack.audit_rows()}
    assert rows["c2"]["exit_status"] == "timeout" and rows["c2"]["error"] == "SandboxTimeout"


def test_reaped_session_is_replaced_and_code_runs_once(stack: Stack) -> None:
    from sandbox_common import aws

    # Given a turn whose session AgentCore has reaped behind our back
    first = stack.dispatch(event(call_id="c1", code="print('one')"))
    interpreter_id = next(
        i["id"]
        for i in stack.resources.interpreters
        if i["tenant_id"] == "acme" and i["environment"] == "default-public"
    )
    client = aws.client("bedrock-agentcore")
    client.stop_code_interpreter_session(
        codeInterpreterIdentifier=interpreter_id, sessionId=first["session_id"]
    )
    # When the next call arrives
    second = stack.dispatch(event(call_id="c2", code="print('two')"))
    # Then it ran exactly once in a new session, and the agent is told the session is new
    assert second["ok"] is True and second["stdout"] == "two\n"
    assert second["session_id"] != first["session_id"] and second["session_restarted"] is True
    assert len([r for r in stack.audit_rows() if r["call_id"] == "c2"]) == 1


def test_call_is_cut_to_the_lambdas_remaining_time_and_still_answers(stack: Stack) -> None:
    import time
    from dataclasses import dataclass

    from dispatch.handler import handler

    from tests.conftest import LambdaContext

    @dataclass
    class ShortLambda(LambdaContext):
        deadline: float = 0.0

        def get_remaining_time_in_millis(self) -> int:
            return int((self.deadline - time.monotonic()) * 1000)

    # Given a warm turn and a Lambda with 20 s left (less than the 120 s per-call timeout)
    assert stack.dispatch(event(call_id="warm", code="x = 1"))["ok"] is True
    context = ShortLambda(deadline=time.monotonic() + 20)
    # When the code would run for 30 s
    started = time.monotonic()
    result = handler(event(call_id="slow", code="import time\ntime.sleep(30)"), context)
    # Then it ends as a timeout with time to spare, audited, stopped in its session, which is kept
    assert result["error"] == "SandboxTimeout" and result["exit_status"] == "timeout"
    assert time.monotonic() - started < 15
    row = {r["call_id"]: r for r in stack.audit_rows()}["slow"]
    assert row["exit_status"] == "timeout"
    assert row["failure_reason"].endswith(":" + n.REASON_STOPPED_IN_SESSION)
    assert result["session_id"] in stack.live_sessions()


def test_ended_turn_starts_no_new_session(stack: Stack) -> None:
    # Given a turn that ran and was ended
    assert stack.dispatch(event(call_id="c1", code="x = 1"))["ok"] is True
    assert stack.dispatch(event("end_turn")) == {"ok": True, "stopped": True}
    live_before = set(stack.live_sessions())
    # When a call arrives for the ended turn
    late = stack.dispatch(event(call_id="c2", code="print('late')"))
    # Then it is refused as invalid (nothing counted, no audit row) and no session was started
    assert late["error"] == "SandboxInvalidRequest" and "ended" in late["error_message"]
    assert set(stack.live_sessions()) == live_before
    assert [r["call_id"] for r in stack.audit_rows()] == ["c1"]
    # And end_turn stays idempotent
    assert stack.dispatch(event("end_turn")) == {"ok": True, "stopped": False}
