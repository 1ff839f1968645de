"""Session start and the readiness preamble (docs/sessions.md): user code never runs
on an unmitigated session."""

from __future__ import annotations

import json

import pytest
from sandbox_common import naming
from sandbox_common.errors import SandboxProvisioning
from sandbox_common.redaction.stdio import READINESS_MARKER, check_readiness
from sandbox_runtime.runner.session import readiness_source

from infra.local import eventstream as es
from tests.support.emf import metric_names


def _installed_false_line() -> str:
    line = READINESS_MARKER + json.dumps({"redactor_installed": False}) + "\n"
    assert not check_readiness(line), "precondition: a 'not installed' marker fails the check"
    return line


def _good_line() -> str:
    line = READINESS_MARKER + json.dumps({"redactor_installed": True}) + "\n"
    assert check_readiness(line), "precondition: this marker passes the check"
    return line


@pytest.mark.parametrize(
    ("case", "frames"),
    [
        ("no_marker", lambda: [es.result_frame(stdout="hello\n", stderr="", exit_code=0)]),
        ("marker_false", lambda: [es.result_frame(stdout=_installed_false_line(), stderr="", exit_code=0)]),
        ("is_error", lambda: [es.result_frame(stdout=_good_line(), stderr="", exit_code=0, is_error=True)]),
        ("nonzero_exit", lambda: [es.result_frame(stdout=_good_line(), stderr="x", exit_code=1)]),
        (
            "stream_exception",
            lambda: [
                es.result_frame(stdout=_good_line(), exit_code=0),
                es.exception_frame("internalServerException", "boom"),
            ],
        ),
        ("empty_stream", lambda: []),
    ],
)
def test_start_session_readiness_failure_stops_session_and_never_runs_user_code(
    fake_agentcore, make_runner, capsys, case, frames
):
    # Given a preamble answer that does not prove the redactor is installed
    fake_agentcore.script_invoke(fake_agentcore.Invoke(frames=frames()))
    runner = make_runner()
    # When
    with pytest.raises(SandboxProvisioning) as refused:
        runner.start_session(fake_agentcore.INTERPRETER)
    # Then the agent gets SandboxProvisioning/readiness_check_failed, the session is stopped,
    # the failure is counted, and only the preamble was ever sent
    assert refused.value.to_response()["reason"] == "readiness_check_failed"
    assert refused.value.failure_reason.startswith("readiness_check_failed:")
    (stop,) = fake_agentcore.ops("StopCodeInterpreterSession")
    assert stop.session_id == "sess0001"
    invokes = fake_agentcore.ops("InvokeCodeInterpreter")
    assert [i.code for i in invokes] == [readiness_source()]
    assert naming.METRIC_READINESS_FAILED in metric_names(capsys.readouterr().out)


def test_start_session_readiness_invoke_rejected_is_provisioning(fake_agentcore, make_runner):
    # Given the preamble invoke itself is refused by the service
    fake_agentcore.script_invoke(fake_agentcore.Invoke(error=(500, "InternalServerException", "x")))
    # When / Then
    with pytest.raises(SandboxProvisioning) as refused:
        make_runner().start_session(fake_agentcore.INTERPRETER)
    assert refused.value.failure_reason == "readiness_check_failed:invoke_failed:InternalServerException:x"
    assert len(fake_agentcore.ops("InvokeCodeInterpreter")) == 1
    assert len(fake_agentcore.ops("StopCodeInterpreterSession")) == 1


def test_start_session_readiness_timeout_is_provisioning(fake_agentcore, make_runner):
    # Given a preamble that does not answer within the deadline
    fake_agentcore.script_invoke(fake_agentcore.Invoke(frames=[], delay_before=1.8))
    # When / Then
    with pytest.raises(SandboxProvisioning) as refused:
        make_runner(call_timeout_seconds=1).start_session(fake_agentcore.INTERPRETER)
    assert refused.value.failure_reason == "readiness_check_failed:timeout"
    assert len(fake_agentcore.ops("StopCodeInterpreterSession")) == 1
