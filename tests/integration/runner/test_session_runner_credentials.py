"""The session runner's credentials: the tenant role assumed through moto's STS with the tenant's
session tag and a session policy naming only its interpreters (and the stage's egress CA
certificate), one AssumeRole per tenant shared by its runners, never shared across tenants,
refreshed five minutes before expiry. The AgentCore double runs each call's code in a real
`python -c` (tests/support/agentcore_double.py)."""

from __future__ import annotations

import json
from datetime import timedelta

from sandbox_common import aws, naming
from sandbox_common.runner_policy import RUNNER_ACTIONS, session_policy
from sandbox_runtime.runner import credentials

from infra.cdk.constructs.definitions import interpreter_arn_patterns, runner_role_statements
from tests.support.agentcore_double import OTHER_TENANT_INTERPRETER_ARN
from tests.support.iam_eval import Request, decide, effective
from tests.support.runner import ACME_INTERPRETER_ARN

SESSION = "sess0001"


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
