"""Session start runs the real readiness preamble in a real interpreter, as its own call before any
user code: user code never runs on a session whose stdio is not redacted."""

from __future__ import annotations

from sandbox_common.redaction.stdio import preamble_source
from sandbox_runtime.runner.session import readiness_source

from tests.support.runner import cell_arguments


def test_start_session_runs_real_preamble_as_its_own_call(fake_agentcore, make_runner):
    # Given the double really executes what it is sent (a fresh Python process per call)
    runner = make_runner()
    # When a session starts and then user code runs
    session_id = runner.start_session(fake_agentcore.INTERPRETER, name="turn-123")
    result = runner.execute(fake_agentcore.INTERPRETER, session_id, "print(6*7)")
    # Then: Start, the preamble alone, the user code alone — in that order, same session
    ops = [r.operation for r in fake_agentcore.requests]
    assert ops == ["StartCodeInterpreterSession", "InvokeCodeInterpreter", "InvokeCodeInterpreter"]
    preamble, user = fake_agentcore.ops("InvokeCodeInterpreter")
    assert preamble.code == readiness_source()
    assert preamble.code.startswith(preamble_source())
    assert cell_arguments(user.code)[1] == "print(6*7)"
    assert preamble.session_id == user.session_id == session_id
    start = fake_agentcore.ops("StartCodeInterpreterSession")[0]
    assert start.body["sessionTimeoutSeconds"] == 900 and start.body["name"] == "turn-123"
    assert (result.exit_status, result.stdout) == ("ok", "42\n")
    assert fake_agentcore.ops("StopCodeInterpreterSession") == []
