"""Session lifecycle, deadlines, isolation and credentials of the runner."""

from __future__ import annotations

import time

import pytest
from sandbox_common import naming
from sandbox_common.errors import SandboxError, SandboxProvisioning
from sandbox_runtime.runner import CrossTenantInterpreter, SessionGone, cells, credentials

from infra.local import eventstream as es
from tests.support.emf import metric_names
from tests.support.runner import cell_arguments

SESSION = "sess0001"


# --- isolation ---------------------------------------------------------------------------------
@pytest.mark.parametrize("operation", ["start", "execute", "stop"])
def test_runner_other_tenant_interpreter_refused_before_any_request(
    fake_agentcore, make_runner, assume_role_calls, operation
):
    # Given a runner for acme and globex's interpreter id
    runner = make_runner()
    other = fake_agentcore.OTHER_TENANT_INTERPRETER
    # When / Then
    if operation == "start":
        with pytest.raises(CrossTenantInterpreter) as refused:
            runner.start_session(other)
        assert refused.value.error == "SandboxError"
        assert refused.value.to_response()["error"] == "SandboxError"
        assert refused.value.fields["failure_reason"] == "interpreter_not_owned_by_tenant"
        assert other not in refused.value.message
    elif operation == "execute":
        with pytest.raises(SandboxError):
            runner.execute(other, SESSION, "print(1)")
    else:
        assert runner.stop_session(other, SESSION) is False
    # no request reached AgentCore, and not even STS was asked
    assert fake_agentcore.requests == []
    assert assume_role_calls() == 0


def test_credentials_role_session_name_is_sts_safe():
    # Given a request id with characters STS does not accept
    # When / Then
    assert credentials.role_session_name("team:a/b") == "sbx-runner-team-a-b"
    assert len(credentials.role_session_name("x" * 128)) == 64


def test_credentials_assume_role_failure_is_a_sandbox_error(fake_agentcore, sts, make_runner):
    # Given an ARN STS rejects
    runner = make_runner(runner_role_arn="not-an-arn")
    # When
    result = runner.execute("sbx_test_acme_pub", SESSION, "print(1)")
    # Then the call fails as a result (not an exception) with a technical reason
    assert result.exit_status == "error" and result.error == "SandboxError"
    assert result.failure_reason.startswith("invoke_failed:assume_role_failed:")


def test_invoke_client_never_retries(fake_agentcore, make_runner):
    # Given a throttled invoke (botocore would normally retry a 429)
    fake_agentcore.script_invoke(fake_agentcore.Invoke(error=(429, "ThrottlingException", "slow down")))
    # When
    result = make_runner().execute(fake_agentcore.INTERPRETER, SESSION, "print(1)")
    # Then exactly one request was sent: user code can never run twice
    assert len(fake_agentcore.ops("InvokeCodeInterpreter")) == 1
    assert result.exit_status == "error"
    assert result.failure_reason == "invoke_failed:ThrottlingException:slow down"
    assert result.session_stopped is False


def test_invoke_client_config_single_attempt_and_read_timeout(fake_agentcore, make_runner):
    # Given a runner with a 30 s per-call deadline
    runner = make_runner(call_timeout_seconds=30)
    # When
    invoke = runner.credentials.invoke_client()
    control = runner.credentials.control_client()
    # Then
    assert invoke.meta.config.retries["total_max_attempts"] == 1
    assert invoke.meta.config.read_timeout == 30 + credentials.INVOKE_READ_TIMEOUT_MARGIN_SECONDS
    assert control.meta.config.retries["total_max_attempts"] > 1


def test_invoke_session_gone_raises_session_gone(fake_agentcore, make_runner):
    # Given a session reaped by sessionTimeoutSeconds: AgentCore refuses the invoke as a whole
    fake_agentcore.script_invoke(
        fake_agentcore.Invoke(error=(404, "ResourceNotFoundException", "no session"))
    )
    # When / Then dispatch is told the code did not run, so it can start a fresh session
    with pytest.raises(SessionGone) as gone:
        make_runner().execute(fake_agentcore.INTERPRETER, SESSION, "print(1)")
    assert gone.value.session_id == SESSION
    assert gone.value.failure_reason == "invoke_failed:ResourceNotFoundException:no session"
    assert len(fake_agentcore.ops("InvokeCodeInterpreter")) == 1


def test_stream_resource_not_found_mid_stream_is_a_result_not_session_gone(fake_agentcore, make_runner):
    # Given the stream began (the code may have run) and then failed
    fake_agentcore.script_invoke(
        fake_agentcore.Invoke(frames=[es.exception_frame("resourceNotFoundException", "gone")])
    )
    # When
    result = make_runner().execute(fake_agentcore.INTERPRETER, SESSION, "print(1)")
    # Then it is never retried as if it had not run
    assert result.exit_status == "error"
    assert result.failure_reason == "stream_exception:resourceNotFoundException:gone"


# --- user code -----------------------------------------------------------------------------------
def test_execute_sends_user_code_byte_exact(fake_agentcore, make_runner):
    # Given code with odd whitespace, CRLF, tabs, unicode and no trailing newline
    code = "  x = 'é€🙂'\r\n\tprint(x)   \n\n# trailing   "
    fake_agentcore.script_invoke(fake_agentcore.result(stdout="", exit_code=0))
    # When
    make_runner().execute(fake_agentcore.INTERPRETER, SESSION, code)
    # Then the request is one executeCode whose driver carries exactly that code, alone, and the
    # cell runtime with an inner deadline before the runner's (120 s: 5 s before)
    (invoke,) = fake_agentcore.ops("InvokeCodeInterpreter")
    assert invoke.body["name"] == "executeCode" and invoke.body["arguments"]["language"] == "python"
    runtime, sent, deadline = cell_arguments(invoke.body["arguments"]["code"])
    assert sent == code and runtime == cells.runtime_source() and deadline == 115.0
    assert invoke.session_id == SESSION
    assert invoke.interpreter_id == fake_agentcore.INTERPRETER


# --- deadline ------------------------------------------------------------------------------------
def test_execute_deadline_passed_times_out_and_stops_session(fake_agentcore, make_runner):
    # Given an interpreter that answers only after 2.5 s and a 1 s deadline
    fake_agentcore.script_invoke(
        fake_agentcore.Invoke(
            frames=[fake_agentcore.result(stdout="late\n", exit_code=0).frames[0]], delay_before=2.5
        )
    )
    runner = make_runner(call_timeout_seconds=1)
    # When
    started = time.monotonic()
    result = runner.execute(fake_agentcore.INTERPRETER, SESSION, "import time; time.sleep(60)")
    elapsed = time.monotonic() - started
    # Then the runner gave up at its deadline, stopped the session and says so
    assert (result.exit_status, result.error) == ("timeout", "SandboxTimeout")
    assert result.session_stopped is True
    assert 1.0 <= elapsed < 2.2
    assert 1000 <= result.duration_ms < 2200
    assert "1-second" in result.error_message and "reset" in result.error_message
    stops = fake_agentcore.ops("StopCodeInterpreterSession")
    assert [(s.interpreter_id, s.session_id) for s in stops] == [(fake_agentcore.INTERPRETER, SESSION)]


def test_execute_deadline_between_slow_events_times_out(fake_agentcore, make_runner):
    # Given a stream whose events keep coming, slower than the deadline allows
    frames = [fake_agentcore.result(text=[f"{i}\n"], structured=False).frames[0] for i in range(5)]
    fake_agentcore.script_invoke(fake_agentcore.Invoke(frames=frames, delay_between=0.6))
    # When
    result = make_runner(call_timeout_seconds=1).execute(fake_agentcore.INTERPRETER, SESSION, "x")
    # Then the partial output is kept and the call is a timeout
    assert result.exit_status == "timeout"
    assert result.stdout.startswith("0\n")
    assert len(fake_agentcore.ops("StopCodeInterpreterSession")) == 1


def test_execute_timeout_with_failing_stop_keeps_result_and_warns(
    fake_agentcore, make_runner, capsys, caplog
):
    # Given a stop that fails
    fake_agentcore.stop_error = (500, "InternalServerException", "nope")
    fake_agentcore.script_invoke(fake_agentcore.Invoke(frames=[], delay_before=1.8))
    # When
    result = make_runner(call_timeout_seconds=1).execute(fake_agentcore.INTERPRETER, SESSION, "x")
    # Then the result is unchanged, a warning is logged and the failure counted
    out = capsys.readouterr().out
    assert (result.exit_status, result.session_stopped) == ("timeout", True)
    warnings = [
        r for r in caplog.records if r.levelname == "WARNING" and r.getMessage() == "session stop failed"
    ]
    assert [w.failure_reason for w in warnings] == ["stop_failed:InternalServerException"]
    assert naming.METRIC_SESSION_STOP_FAILED in metric_names(out)


def test_stop_session_success_and_already_gone(fake_agentcore, make_runner, capsys):
    # Given / When a stop that succeeds
    runner = make_runner()
    assert runner.stop_session(fake_agentcore.INTERPRETER, SESSION) is True
    # and one for a session that no longer exists
    fake_agentcore.stop_error = (404, "ResourceNotFoundException", "gone")
    assert runner.stop_session(fake_agentcore.INTERPRETER, SESSION) is True  # not running: that's what counts
    # Then a missing session is not counted as a stop failure
    assert naming.METRIC_SESSION_STOP_FAILED not in metric_names(capsys.readouterr().out)


# --- start ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("status", "error_type", "message"),
    [
        (404, "ResourceNotFoundException", "Code interpreter not found"),
        (409, "ConflictException", "Code interpreter is in CREATING state"),
        (400, "ValidationException", "Code interpreter is not ready"),
    ],
)
def test_start_refused_as_not_ready_is_provisioning(fake_agentcore, make_runner, status, error_type, message):
    # Given Start refused because the interpreter is not ready
    fake_agentcore.start_error = (status, error_type, message)
    # When
    with pytest.raises(SandboxProvisioning) as refused:
        make_runner().start_session(fake_agentcore.INTERPRETER)
    # Then
    assert refused.value.fields["reason"] == "interpreter_not_ready"
    assert refused.value.fields["failure_reason"].startswith(f"start_refused:{error_type}")
    assert refused.value.failure_reason == refused.value.fields["failure_reason"]
    assert fake_agentcore.ops("InvokeCodeInterpreter") == []


def test_start_access_denied_is_sandbox_error(fake_agentcore, make_runner):
    # Given a substrate failure that is not "not ready"
    fake_agentcore.start_error = (403, "AccessDeniedException", "denied")
    # When / Then
    with pytest.raises(SandboxError) as failed:
        make_runner().start_session(fake_agentcore.INTERPRETER)
    assert not isinstance(failed.value, SandboxProvisioning)
    assert failed.value.failure_reason == "start_failed:AccessDeniedException:denied"
    assert fake_agentcore.ops("InvokeCodeInterpreter") == []


def test_start_sends_timeout_and_a_valid_session_name(fake_agentcore, make_runner):
    # Given a turn id with characters a session name cannot hold
    fake_agentcore.script_invoke(fake_agentcore.Invoke(frames=[]))  # readiness answer: irrelevant here
    # When
    with pytest.raises(SandboxProvisioning):
        make_runner(session_timeout_seconds=600).start_session(fake_agentcore.INTERPRETER, name="turn:1/ä")
    # Then
    (start,) = fake_agentcore.ops("StartCodeInterpreterSession")
    assert start.body["sessionTimeoutSeconds"] == 600
    assert start.body["name"] == "turn-1"


@pytest.mark.parametrize(
    "arns", [[], ["arn:aws:bedrock-agentcore:us-east-1:123456789012:code-interpreter-custom/*"]]
)
def test_credentials_without_the_tenants_interpreter_arns_never_assume_the_role(
    fake_agentcore, make_runner, assume_role_calls, arns
):
    # Given a runner whose tenant record has no interpreter ARNs (or only a wildcard)
    runner = make_runner(allowed_interpreter_arns=arns)
    # When it would run code
    result = runner.execute(fake_agentcore.INTERPRETER, SESSION, "print(1)")
    # Then it fails closed before STS: no credentials for the role's stage-wide policy
    assert result.exit_status == "error" and result.error == "SandboxError"
    assert "no_session_policy" in result.failure_reason
    assert assume_role_calls() == 0
    assert fake_agentcore.ops("InvokeCodeInterpreter") == []
