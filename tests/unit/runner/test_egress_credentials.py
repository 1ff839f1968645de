"""An allowlist session's proxy credential (runner/egress.py): issued at start and stored hashed,
handed to the session once in its readiness call (which must bind it at the proxy), revoked when
the session stops; a failure to issue is a provisioning failure, never a session with open egress.

AgentCore is the HTTP-level double (its answers scripted: the readiness call would otherwise
write the host's ~/.curlrc); the egress table is moto's."""

from __future__ import annotations

import hashlib
import json
import re
import time
from typing import Any

import pytest
from sandbox_common import aws
from sandbox_common import naming as n
from sandbox_common.errors import SandboxProvisioning
from sandbox_common.redaction.stdio import READINESS_MARKER
from sandbox_runtime.egress_store import EgressStore
from sandbox_runtime.runner.egress import MARKER, EgressEndpoints, SessionEgress, bind_problem
from sandbox_runtime.runner.session import readiness_source

from infra.local.resources import create_table_request
from tests.support.runner import ACME_INTERPRETER

ALLOWLIST_INTERPRETER = "sbx_test_acme_alw"
ENDPOINTS = EgressEndpoints(
    "http://127.0.0.1:881", "/opt/local-interpreter/egress-ca.pem", "https://pypi.test/simple"
)
PROXY_URL = re.compile(r"http://([A-Za-z0-9%_-]+):([A-Za-z0-9%_-]+)@127\.0\.0\.1:881")


@pytest.fixture
def egress_table(moto_endpoint: str) -> str:
    ddb = aws.client("dynamodb")
    ddb.create_table(**create_table_request(n.EGRESS, "test"))
    return n.EGRESS.physical("test")


def _runner(make_runner: Any, table: str, endpoints: EgressEndpoints | None = ENDPOINTS) -> Any:
    return make_runner(
        allowed_interpreter_ids=[ACME_INTERPRETER, ALLOWLIST_INTERPRETER],
        egress=SessionEgress(EgressStore(table_name=table, ddb=aws.client("dynamodb")), endpoints),
        egress_interpreters={ALLOWLIST_INTERPRETER: "default-allowlist"},
    )


def _ready(bound: bool | None = True, status: int | None = 200) -> Any:
    """The readiness call's answer: the redactor's marker, then the egress line (None: no line)."""
    from tests.support.agentcore_double import FakeAgentCore

    stdout = READINESS_MARKER + json.dumps({"redactor_installed": True}) + "\n"
    if bound is not None:
        stdout += MARKER + json.dumps({"bound": bound, "status": status, "error": None}) + "\n"
    return FakeAgentCore.result(stdout=stdout, stderr="", exit_code=0)


def _item(table: str, session_id: str, item: str = n.EGRESS_CREDENTIAL_ITEM) -> dict[str, Any]:
    found = aws.client("dynamodb").get_item(TableName=table, Key=n.EGRESS.key(session_id, item))
    return found.get("Item", {})


def test_allowlist_session_gets_its_credential_hashed_and_in_its_readiness_call_only(
    fake_agentcore: Any, make_runner: Any, egress_table: str
) -> None:
    # Given a runner of a tenant with an allowlist environment, and a proxy that binds
    fake_agentcore.script_invoke(_ready())
    runner = _runner(make_runner, egress_table)
    before = int(time.time())
    # When its session starts
    session_id = runner.start_session(ALLOWLIST_INTERPRETER, name="turn-1")
    # Then the readiness call carried the session's proxy URL with its credential ...
    (readiness,) = fake_agentcore.ops("InvokeCodeInterpreter")
    user, secret = PROXY_URL.search(readiness.code).groups()
    assert user == session_id and len(secret) >= 43
    # ... registered that secret with the stdio redactor, set the proxy up and bound it
    assert readiness.code.startswith(readiness_source(values=(secret,)))
    assert "egress.sandbox.internal" in readiness.code and ENDPOINTS.ca_bundle in readiness.code
    assert ENDPOINTS.index_url in readiness.code
    # And the table holds the credential's hash (never the secret) with its owner and expiry
    item = _item(egress_table, session_id)
    assert item["secret_sha256"]["S"] == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in json.dumps(item)
    assert (item["tenant_id"]["S"], item["environment"]["S"]) == ("acme", "default-allowlist")
    assert before + 900 <= int(item[n.TTL_ATTRIBUTE]["N"]) <= int(time.time()) + 900 + 120
    assert "revoked_at" not in item
    # And nothing was stopped
    assert fake_agentcore.ops("StopCodeInterpreterSession") == []


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (lambda: _ready(bound=False, status=407), "egress_bind_failed:status_407"),
        (lambda: _ready(bound=None), "egress_marker_missing"),
    ],
)
def test_allowlist_session_whose_bind_failed_is_stopped_and_its_credential_revoked(
    fake_agentcore: Any, make_runner: Any, egress_table: str, answer: Any, problem: str
) -> None:
    # Given a proxy that refuses the bind (or a readiness call that never reached it)
    fake_agentcore.script_invoke(answer())
    runner = _runner(make_runner, egress_table)
    # When the session starts
    with pytest.raises(SandboxProvisioning) as refused:
        runner.start_session(ALLOWLIST_INTERPRETER)
    # Then it is a readiness failure naming the egress problem, the session is stopped and its
    # credential revoked before any user code
    assert refused.value.to_response()["reason"] == "readiness_check_failed"
    assert refused.value.failure_reason == f"readiness_check_failed:{problem}"
    (stop,) = fake_agentcore.ops("StopCodeInterpreterSession")
    assert "revoked_at" in _item(egress_table, str(stop.session_id))
    assert len(fake_agentcore.ops("InvokeCodeInterpreter")) == 1


@pytest.mark.parametrize(
    ("table", "endpoints", "problem"),
    [
        ("no-such-table", ENDPOINTS, "issue:ResourceNotFoundException"),
        (None, None, "not_configured"),
    ],
)
def test_credential_not_issued_is_a_provisioning_failure_and_no_code_runs(
    fake_agentcore: Any,
    make_runner: Any,
    egress_table: str,
    table: str | None,
    endpoints: EgressEndpoints | None,
    problem: str,
) -> None:
    # Given an egress table that cannot be written, or no proxy configured
    runner = _runner(make_runner, table or egress_table, endpoints)
    # When an allowlist session starts
    with pytest.raises(SandboxProvisioning) as refused:
        runner.start_session(ALLOWLIST_INTERPRETER)
    # Then it is refused as egress_unavailable, the started session is stopped, nothing was invoked
    assert refused.value.to_response()["reason"] == n.REASON_EGRESS_UNAVAILABLE
    assert refused.value.failure_reason == f"{n.REASON_EGRESS_UNAVAILABLE}:{problem}"
    assert [r.operation for r in fake_agentcore.requests] == [
        "StartCodeInterpreterSession",
        "StopCodeInterpreterSession",
    ]


def test_stop_revokes_an_allowlist_sessions_credential_and_leaves_others_alone(
    fake_agentcore: Any, make_runner: Any, egress_table: str
) -> None:
    # Given an allowlist session and a public one of the same tenant (whose readiness has no egress line)
    fake_agentcore.script_invoke(_ready(), _ready(bound=None))
    runner = _runner(make_runner, egress_table)
    allowlisted = runner.start_session(ALLOWLIST_INTERPRETER)
    public = runner.start_session(ACME_INTERPRETER)
    # When both are stopped
    assert runner.stop_session(ALLOWLIST_INTERPRETER, allowlisted) is True
    revoked_at = _item(egress_table, allowlisted)["revoked_at"]["N"]
    assert runner.stop_session(ALLOWLIST_INTERPRETER, allowlisted) is True  # a second stop: unchanged
    assert runner.stop_session(ACME_INTERPRETER, public) is True
    # Then the allowlist session's credential is revoked once; the public session had none
    assert _item(egress_table, allowlisted)["revoked_at"]["N"] == revoked_at
    assert _item(egress_table, public) == {}
    (public_readiness,) = [r for r in fake_agentcore.ops("InvokeCodeInterpreter") if r.session_id == public]
    assert public_readiness.code == readiness_source()  # no credential, no proxy set-up


@pytest.mark.parametrize(
    ("stdout", "problem"),
    [
        (MARKER + '{"bound": true, "status": 200, "error": null}\n', None),
        (MARKER + '{"bound": false, "status": null, "error": "URLError"}\n', "egress_bind_failed:URLError"),
        (MARKER + "{not json\n", "egress_marker_unreadable"),
        (MARKER + "[]\n", "egress_marker_unreadable"),
        ("print\n", "egress_marker_missing"),
        (2 * (MARKER + '{"bound": true}\n'), "egress_marker_repeated"),
    ],
)
def test_bind_problem_reads_the_egress_line(stdout: str, problem: str | None) -> None:
    assert bind_problem(stdout) == problem


@pytest.mark.parametrize(
    ("url", "ca"),
    [
        ("https://proxy:3128", "/ca.pem"),
        ("http://user:pw@proxy:3128", "/ca.pem"),
        ("http://proxy", "/ca.pem"),
        ("http://proxy:3128/path", "/ca.pem"),
        ("http://proxy:3128", "relative.pem"),
    ],
)
def test_egress_endpoints_refuse_a_malformed_proxy_or_bundle(url: str, ca: str) -> None:
    with pytest.raises(ValueError):
        EgressEndpoints(url, ca)


def test_credential_userinfo_is_quoted() -> None:
    # A session id or secret never breaks out of the URL's userinfo
    assert ENDPOINTS.with_credential("a:b@c", "s/e") == "http://a%3Ab%40c:s%2Fe@127.0.0.1:881"
