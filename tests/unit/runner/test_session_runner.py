"""Session lifecycle, deadlines, isolation and credentials of the runner (§6.1–6.4)."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from sandbox_common import aws, naming
from sandbox_common.errors import SandboxError, SandboxProvisioning
from sandbox_common.runner_policy import RUNNER_ACTIONS, session_policy
from sandbox_runtime.runner import CrossTenantInterpreter, SessionGone, cells, credentials

from infra.cdk.constructs.definitions import interpreter_arn_patterns, runner_role_statements
from infra.local import eventstream as es
from tests.support.emf import metric_names
from tests.support.iam_eval import Request, decide, effective
from tests.support.runner import ACME_INTERPRETER_ARN, cell_arguments
from tests.unit.runner.conftest import OTHER_TENANT_INTERPRETER_ARN

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


def test_runner_calls_agentcore_with_the_tenant_role_credentials(fake_agentcore, sts, make_runner):
    # Given a runner with no cached credentials
    from sandbox_common import aws

    issued: list[str] = []
    aws.client("sts").meta.events.register(
        "after-call.sts.AssumeRole", lambda parsed, **kw: issued.append(parsed["Credentials"]["AccessKeyId"])
    )
    # When
    make_runner().execute(fake_agentcore.INTERPRETER, SESSION, "print(1)")
    # Then the request was signed with the temporary credentials AssumeRole issued, not the Lambda's own
    (invoke,) = fake_agentcore.ops("InvokeCodeInterpreter")
    assert issued and invoke.access_key_id == issued[0]
    assert invoke.access_key_id != "testing"


def test_credentials_one_assume_role_for_two_runners_of_a_tenant(
    fake_agentcore, make_runner, assume_role_calls
):
    # Given two runners of the same tenant (e.g. two warm invocations)
    first, second = make_runner(), make_runner()
    # When both call AgentCore
    first.execute(fake_agentcore.INTERPRETER, SESSION, "print(1)")
    second.execute(fake_agentcore.INTERPRETER, SESSION, "print(2)")
    second.stop_session(fake_agentcore.INTERPRETER, SESSION)
    # Then STS was asked once
    assert assume_role_calls() == 1


def test_credentials_refreshed_five_minutes_before_expiry(
    fake_agentcore, make_runner, assume_role_calls, monkeypatch
):
    # Given cached credentials (moto issues them for DurationSeconds=900)
    runner = make_runner()
    runner.execute(fake_agentcore.INTERPRETER, SESSION, "print(1)")
    real_now = credentials._now
    # When the clock reaches 4 minutes before expiry
    monkeypatch.setattr(credentials, "_now", lambda: real_now() + timedelta(seconds=900 - 4 * 60))
    runner.execute(fake_agentcore.INTERPRETER, SESSION, "print(2)")
    # Then they were refreshed
    assert assume_role_calls() == 2


def test_credentials_other_tenant_gets_its_own_credentials(fake_agentcore, make_runner, assume_role_calls):
    # Given runners of two tenants (one runner role, each with its own interpreters)
    acme = make_runner()
    globex = make_runner(
        tenant_id="globex",
        allowed_interpreter_ids=[fake_agentcore.OTHER_TENANT_INTERPRETER],
        allowed_interpreter_arns=[OTHER_TENANT_INTERPRETER_ARN],
    )
    # When
    acme.execute(fake_agentcore.INTERPRETER, SESSION, "print(1)")
    globex.execute(fake_agentcore.OTHER_TENANT_INTERPRETER, SESSION, "print(1)")
    # Then
    assert assume_role_calls() == 2
    keys = {r.access_key_id for r in fake_agentcore.ops("InvokeCodeInterpreter")}
    assert len(keys) == 2


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


def test_credentials_assume_role_carries_the_tenant_session_tag(fake_agentcore, sts, make_runner):
    # Given a runner of tenant acme, and the AssumeRole requests made through moto's STS
    sent: list[dict] = []
    aws.client("sts").meta.events.register(
        "provide-client-params.sts.AssumeRole", lambda params, **kw: sent.append(dict(params))
    )
    # When it runs code
    make_runner().execute(fake_agentcore.INTERPRETER, SESSION, "print(1)")
    # Then STS accepted an AssumeRole tagged with the tenant the runner serves, and nothing else
    (params,) = sent
    assert params["Tags"] == [{"Key": naming.RUNNER_SESSION_TAG_TENANT, "Value": "acme"}]
    assert len(fake_agentcore.ops("InvokeCodeInterpreter")) == 1


def test_credentials_not_shared_between_tenants_of_one_role_arn(
    fake_agentcore, make_runner, assume_role_calls
):
    # Given acme's runner has credentials (for the stage's one runner role)
    make_runner().execute(fake_agentcore.INTERPRETER, SESSION, "print(1)")
    # When a globex runner asks for credentials for that same role
    make_runner(tenant_id="globex", allowed_interpreter_ids=[fake_agentcore.INTERPRETER]).execute(
        fake_agentcore.INTERPRETER, SESSION, "print(1)"
    )
    # Then it does not reuse acme's credentials: it makes its own AssumeRole (tagged globex)
    assert assume_role_calls() == 2


def test_credentials_assume_role_carries_a_session_policy_naming_only_the_tenants_interpreters(
    fake_agentcore, sts, make_runner
):
    # Given acme's runner, and the AssumeRole requests made through moto's STS
    sent: list[dict] = []
    aws.client("sts").meta.events.register(
        "provide-client-params.sts.AssumeRole", lambda params, **kw: sent.append(dict(params))
    )
    # When it runs code
    make_runner().execute(fake_agentcore.INTERPRETER, SESSION, "print(1)")
    # Then the one AssumeRole carried the session policy of acme's interpreter ARNs (and the
    # stage's egress CA certificate, which AgentCore reads with these credentials), nothing wider
    (params,) = sent
    assert json.loads(params["Policy"]) == session_policy([ACME_INTERPRETER_ARN], stage="test")
    assert "*" not in params["Policy"]


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


def test_credentials_effective_policy_for_acme_denies_every_runner_action_on_globex(
    fake_agentcore, sts, make_runner
):
    # Given the runner role's own policy as the stack deploys it (every interpreter of the stage)
    patterns = interpreter_arn_patterns("test", partition="aws", region="us-east-1", account="123456789012")
    role_policy = {"Version": "2012-10-17", "Statement": runner_role_statements(patterns)}
    # And the session policy acme's runner really sends to STS
    sent: list[str] = []
    aws.client("sts").meta.events.register(
        "provide-client-params.sts.AssumeRole", lambda params, **kw: sent.append(params["Policy"])
    )
    make_runner().execute(fake_agentcore.INTERPRETER, SESSION, "print(1)")
    (session,) = [json.loads(p) for p in sent]
    # When IAM evaluates acme's session (role policy ∩ session policy) on each interpreter
    verdicts = {
        (action, arn): effective([role_policy], session, Request(action, arn))
        for action in RUNNER_ACTIONS
        for arn in (ACME_INTERPRETER_ARN, OTHER_TENANT_INTERPRETER_ARN)
    }
    # Then every runner action on globex's interpreter is denied, and allowed on acme's
    assert {v for (_, arn), v in verdicts.items() if arn == OTHER_TENANT_INTERPRETER_ARN} == {"implicit_deny"}
    assert {v for (_, arn), v in verdicts.items() if arn == ACME_INTERPRETER_ARN} == {"allow"}
    # And the role alone (no session policy) would have allowed globex: the session policy is what
    # confines it
    assert decide([role_policy], Request(RUNNER_ACTIONS[0], OTHER_TENANT_INTERPRETER_ARN)) == "allow"


def test_credentials_session_may_read_the_stages_ca_certificate_and_nothing_else_of_secrets(
    fake_agentcore, sts, make_runner
):
    # Given the runner role's own policy as the stack deploys it, with the egress path's grant of
    # the stage's CA certificate (infra/cdk/constructs/egress_setup.py), and acme's session policy
    certificate = "arn:aws:secretsmanager:us-east-1:123456789012:secret:thinkwork/test/egress/ca-cert-Ab12Cd"
    role_policy = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": certificate}
        ],
    }
    sent: list[str] = []
    aws.client("sts").meta.events.register(
        "provide-client-params.sts.AssumeRole", lambda params, **kw: sent.append(params["Policy"])
    )
    make_runner().execute(fake_agentcore.INTERPRETER, SESSION, "print(1)")
    (session,) = [json.loads(p) for p in sent]
    read = "secretsmanager:GetSecretValue"
    # When IAM evaluates the session on the certificate, the CA's key, another stage's certificate
    # and a tenant's secret / Then only the certificate is readable
    assert effective([role_policy], session, Request(read, certificate)) == "allow"
    wide = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": read, "Resource": "*"}]}
    for other in (
        certificate.replace("ca-cert", "ca-key"),
        certificate.replace("/test/", "/prod/"),
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:thinkwork/test/tenants/acme/crm-token-Ab12Cd",
    ):
        # (even if the role's own policy allowed every secret, the session policy does not)
        assert effective([wide], session, Request(read, other)) == "implicit_deny", other
