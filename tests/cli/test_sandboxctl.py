"""`sandboxctl` through the real console script (`.venv/bin/sandboxctl`, a subprocess) against a
local stack started once for this module with `sandboxctl local up` in a temporary state dir."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sandbox_common import dimensions
from sandbox_common import naming as n

from tests.support.local_stack import SANDBOXCTL, ctl, ctl_json, running_stack, state_of
from tests.support.stack import turn_token_for


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with running_stack(tmp_path_factory.mktemp("sandboxctl-stack"), USER="op-alice") as env:
        yield env


_state = state_of


def _assert_one_line_failure(out: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    assert out.returncode == code, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    if code == 1:
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    for needle in needles:
        assert needle in out.stderr, out.stderr


# --- local -----------------------------------------------------------------------------------
def test_local_status_shows_the_isolation_in_force(cli_env: dict[str, str]) -> None:
    # Given the module's running stack (bubblewrap and slirp4netns installed by `make os-deps`)
    # When the operator asks for its status, as JSON and as text
    data = ctl_json(cli_env, "local", "status")
    text = ctl(cli_env, "local", "status")
    # Then both name the strategy, the per-session uid, the network handling and the limits
    isolation = data["isolation"]
    assert isolation["strategy"] == "bwrap" and isolation["isolated"] is True
    assert isolation["network"]["SANDBOX"] == "own namespace, loopback only"
    assert "slirp4netns" in isolation["network"]["PUBLIC"] and "unreachable" in isolation["network"]["PUBLIC"]
    assert isolation["limits"]["session_tasks"] > 0
    assert text.returncode == 0
    assert "isolation: bwrap; uid: one unprivileged uid per session" in text.stdout
    assert "network PUBLIC: own namespace + slirp4netns egress" in text.stdout


def test_local_up_twice_is_idempotent(cli_env: dict[str, str]) -> None:
    # Given the module's running stack
    before = ctl_json(cli_env, "local", "status")
    # When `local up` runs again
    again = ctl_json(cli_env, "local", "up")
    # Then nothing was started and the same processes and endpoints are reported
    assert again["started"] is False
    assert again["pids"] == {k: v["pid"] for k, v in before["processes"].items()}
    assert before["running"] is True and set(again["endpoints"]) == {"moto", "interpreter", "lambda"}


def test_local_up_names_the_dispatch_function_beside_the_endpoints(cli_env: dict[str, str]) -> None:
    # Given the module's running stack, whose dispatch function the state names
    dispatch = _state(cli_env).resources.functions[n.DISPATCH]
    # When `local up` reports, as JSON and as text
    data = ctl_json(cli_env, "local", "up")
    text = ctl(cli_env, "local", "up")
    # Then both name the function an agent invokes at the lambda endpoint
    assert data["dispatch_function"] == dispatch
    assert text.returncode == 0 and f"dispatch function: {dispatch} " in text.stdout
    assert data["endpoints"]["lambda"] in text.stdout


# --- usage -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [
        (),
        ("caps", "frob"),
        ("caps", "set", "weekly", "5"),
        ("tenant", "set-tier", "acme", "platinum"),
        ("template", "put", "acme", "analyst"),
        ("audit", "list"),
        ("tenant", "show", "Not_A_Tenant"),
    ],
)
def test_sandboxctl_bad_usage_exits_2(cli_env: dict[str, str], args: tuple[str, ...]) -> None:
    # Given a malformed command line
    # When it runs
    out = ctl(cli_env, *args)
    # Then exit code 2, usage on stderr, no traceback
    _assert_one_line_failure(out, 2, "usage:")


def test_sandboxctl_without_local_stack_fails_with_one_line(tmp_path: Path) -> None:
    # Given no local stack in this state dir
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SANDBOX_"))}
    env.update(SANDBOX_LOCAL_DIR=str(tmp_path), SANDBOX_LOCAL="1")
    # When a command needs it
    out = ctl(env, "caps", "get")
    # Then a one-line reason tells the operator what to do
    _assert_one_line_failure(out, 1, "local up")


# --- caps ------------------------------------------------------------------------------------
def test_caps_get_shows_configured_defaults(cli_env: dict[str, str]) -> None:
    # Given a fresh local stage
    # When caps are read
    caps = ctl_json(cli_env, "caps", "get")
    # Then the SPEC defaults are in SSM
    assert caps["global"] == {
        "tenant_daily": 1000,
        "agent_hourly": 100,
        "tenant_sessions": 20,
        "global_sessions": 200,
    }


def test_caps_set_tenant_override_is_read_back_and_unset(cli_env: dict[str, str]) -> None:
    # Given acme without overrides
    # When its agent_hourly override is set to 7
    out = ctl_json(cli_env, "caps", "set", "agent_hourly", "7", "--tenant", "acme")
    # Then SSM holds "7" at the override path and the effective cap changes, the global does not
    ssm = _state(cli_env).client("ssm")
    assert out["parameter"] == dimensions.parameter("local", dimensions.AGENT_HOURLY.name, "acme")
    assert ssm.get_parameter(Name=out["parameter"])["Parameter"]["Value"] == "7"
    caps = ctl_json(cli_env, "caps", "get", "--tenant", "acme")
    assert caps["effective"] == {
        "tenant_daily": 1000,
        "agent_hourly": 7,
        "tenant_sessions": 20,
        "global_sessions": 200,
    }
    assert caps["global"]["agent_hourly"] == 100
    # and unset restores the global value
    ctl_json(cli_env, "caps", "unset", "agent_hourly", "--tenant", "acme")
    assert ctl_json(cli_env, "caps", "get", "--tenant", "acme")["effective"]["agent_hourly"] == 100


def test_caps_set_global_zero_is_the_kill_switch_value(cli_env: dict[str, str]) -> None:
    # Given the global tenant_daily cap
    # When it is set to 0 and then back
    zero = ctl_json(cli_env, "caps", "set", "tenant_daily", "0")
    back = ctl_json(cli_env, "caps", "set", "tenant_daily", "1000")
    # Then 0 is accepted (the kill switch) and the previous value is reported each time
    assert (zero["value"], zero["previous"]) == (0, 1000)
    assert (back["value"], back["previous"]) == (1000, 0)


def test_caps_set_negative_is_refused(cli_env: dict[str, str]) -> None:
    # Given a negative cap
    # When it is set
    out = ctl(cli_env, "caps", "set", "agent_hourly", "-5", "--tenant", "acme")
    # Then usage error 2 naming the reason, and nothing was written
    _assert_one_line_failure(out, 2, "negative")
    assert "acme" not in ctl_json(cli_env, "caps", "get")["overrides"]


def test_caps_set_for_unknown_tenant_is_refused(cli_env: dict[str, str]) -> None:
    # Given a tenant that does not exist
    # When an override is set for it
    out = ctl(cli_env, "caps", "set", "tenant_daily", "5", "--tenant", "nobody")
    # Then exit 1 with a one-line reason
    _assert_one_line_failure(out, 1, "unknown tenant 'nobody'")


# --- tenants and templates -------------------------------------------------------------------
def test_tenant_tier_and_enable_rules_with_history(cli_env: dict[str, str]) -> None:
    # Given globex, standard and enabled by default
    assert ctl_json(cli_env, "tenant", "show", "globex")["sandbox_enabled"] is True
    # When it moves to hipaa
    moved = ctl_json(cli_env, "tenant", "set-tier", "globex", "hipaa")
    # Then the move also disabled it
    assert moved["after"] == {"sandbox_enabled": False, "compliance_tier": "hipaa"}
    # and enabling on hipaa is refused
    _assert_one_line_failure(ctl(cli_env, "tenant", "enable", "globex"), 1, "refused", "hipaa")
    # and back on standard it stays disabled until enabled explicitly
    assert ctl_json(cli_env, "tenant", "set-tier", "globex", "standard")["after"]["sandbox_enabled"] is False
    assert ctl_json(cli_env, "tenant", "enable", "globex")["after"]["sandbox_enabled"] is True
    # and every change is recorded with who and when
    shown = ctl_json(cli_env, "tenant", "show", "globex")
    assert [h["action"] for h in shown["history"]] == ["set-tier hipaa", "set-tier standard", "enable"]
    assert {h["changed_by"] for h in shown["history"]} == {"local:op-alice"}
    assert all(h["changed_at"].endswith("Z") for h in shown["history"])
    assert shown["policy"]["updated_by"] == "local:op-alice"


def test_tenant_disable_then_enable(cli_env: dict[str, str]) -> None:
    # Given acme enabled
    # When it is disabled
    ctl_json(cli_env, "tenant", "disable", "acme")
    # Then the policy item says so (what dispatch pre-flight reads), and enable restores it
    item = (
        _state(cli_env)
        .client("dynamodb")
        .get_item(
            TableName=n.TENANTS.physical("local"),
            Key={n.TENANTS.pk: {"S": "acme"}, n.TENANTS.sk: {"S": n.TENANT_POLICY_ITEM}},
        )["Item"]
    )
    assert item["sandbox_enabled"] == {"BOOL": False}
    assert ctl_json(cli_env, "tenant", "enable", "acme")["after"]["sandbox_enabled"] is True


def test_tenant_unknown_is_refused(cli_env: dict[str, str]) -> None:
    # Given a tenant with neither a substrate nor a policy item
    # When it is shown or enabled
    for args in (("tenant", "show", "nobody"), ("tenant", "enable", "nobody")):
        # Then exit 1, one line
        _assert_one_line_failure(ctl(cli_env, *args), 1, "unknown tenant 'nobody'")


def test_template_put_sets_and_refuses_missing_environment(cli_env: dict[str, str]) -> None:
    # Given acme (public + internal) and globex (public only)
    # When acme's analyst template moves to internal-only, then to none, then back
    moved = ctl_json(cli_env, "template", "put", "acme", "analyst", "--environment", "internal-only")
    none = ctl_json(cli_env, "template", "put", "acme", "analyst", "--environment", "none")
    ctl_json(cli_env, "template", "put", "acme", "analyst", "--environment", "default-public")
    # Then each change is stored (none = null), and globex cannot use an environment it lacks
    assert (moved["previous"], moved["environment"]) == ("default-public", "internal-only")
    assert (none["previous"], none["environment"]) == ("internal-only", None)
    refused = ctl(cli_env, "template", "put", "globex", "analyst", "--environment", "internal-only")
    _assert_one_line_failure(refused, 1, "refused", "internal-only")
    assert (
        ctl_json(cli_env, "tenant", "show", "acme")["templates"]["analyst"]["environment"] == "default-public"
    )


def test_template_put_tools_sets_keeps_and_clears_the_allowlist(cli_env: dict[str, str]) -> None:
    # Given acme's analyst template
    # When an allowlist is set, the environment changed without --tools, then the list cleared
    set_ = ctl_json(
        cli_env,
        "template",
        "put",
        "acme",
        "analyst",
        "--environment",
        "default-public",
        "--tools",
        "query_sales,lookup-customer,query_sales",
    )
    kept = ctl_json(cli_env, "template", "put", "acme", "analyst", "--environment", "default-public")
    shown = ctl_json(cli_env, "tenant", "show", "acme")["templates"]["analyst"]
    cleared = ctl_json(
        cli_env, "template", "put", "acme", "analyst", "--environment", "default-public", "--tools", ""
    )

    # Then the list is stored sorted and de-duplicated, kept when omitted, cleared by ''
    assert set_["tools"] == ["lookup-customer", "query_sales"]
    assert kept["tools"] == ["lookup-customer", "query_sales"]
    assert shown["tools"] == ["lookup-customer", "query_sales"]
    assert (cleared["previous_tools"], cleared["tools"]) == (["lookup-customer", "query_sales"], [])


def test_template_put_tools_invalid_name_is_bad_usage(cli_env: dict[str, str]) -> None:
    # Given / When a tool name that is not an identifier-like name
    result = ctl(
        cli_env,
        "template",
        "put",
        "acme",
        "analyst",
        "--environment",
        "default-public",
        "--tools",
        "ok,rm -rf",
    )

    # Then exit 2 (bad usage) and nothing stored
    assert result.returncode == 2
    assert "invalid tool name" in result.stderr
    assert ctl_json(cli_env, "tenant", "show", "acme")["templates"]["analyst"].get("tools", []) == []


# --- audit -----------------------------------------------------------------------------------
def _row(tenant: str, agent: str, session: str, started: str, **extra: Any) -> dict[str, Any]:
    return {
        "invocation_id": str(uuid.uuid4()),
        "tenant_id": tenant,
        "agent_id": agent,
        "user_id": "u-1",
        "template_id": "analyst",
        "turn_id": "t-1",
        "call_id": f"c-{uuid.uuid4().hex[:6]}",
        "session_id": session,
        "environment": "default-public",
        "invocation_source": "chat",
        "started_at": started,
        "finished_at": started,
        "duration_ms": 12,
        "exit_status": "ok",
        "exit_code": 0,
        "error": None,
        "failure_reason": None,
        "stdout_bytes": 2,
        "stderr_bytes": 0,
        "stdout_truncated": False,
        "stderr_truncated": False,
        "executed_code_hash": hashlib.sha256(b"print(1)").hexdigest(),
        "expires_at": 1_900_000_000,
        **extra,
    }


def test_audit_replay_is_exactly_once_and_list_filters(cli_env: dict[str, str]) -> None:
    # Given three rows in the DLQ, one of them twice, and one row whose original write had succeeded
    state = _state(cli_env)
    sqs, ddb = state.client("sqs"), state.client("dynamodb")
    queue = state.resources.audit_dlq_url
    a = _row("globex", "agent-a", "sess-1", "2026-01-02T10:00:00.000Z")
    b = _row("globex", "agent-b", "sess-2", "2026-01-02T11:00:00.000Z")
    c = _row("globex", "agent-a", "sess-1", "2026-01-02T12:00:00.000Z", stdout_truncated=True)
    ddb.put_item(
        TableName=n.INVOCATIONS.physical("local"),
        Item={
            "invocation_id": {"S": c["invocation_id"]},
            "tenant_id": {"S": "globex"},
            "marker": {"S": "orig"},
        },
    )
    for row in (a, b, a, c):
        sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(row))
    # When the DLQ is replayed
    counts = ctl_json(cli_env, "audit", "replay")
    # Then a and b are written once, the second a and c are duplicates, and the queue is empty
    assert counts == {"replayed": 2, "duplicates": 2, "invalid": 0, "failed": 0}
    attrs = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
    assert (
        attrs["ApproximateNumberOfMessages"] == "0" and attrs["ApproximateNumberOfMessagesNotVisible"] == "0"
    )
    original = ddb.get_item(
        TableName=n.INVOCATIONS.physical("local"), Key={"invocation_id": {"S": c["invocation_id"]}}
    )
    assert original["Item"]["marker"] == {"S": "orig"}  # never overwritten
    # and the rows keep their types (real booleans, numbers)
    rows = ctl_json(cli_env, "audit", "list", "--tenant", "globex", "--agent", "agent-a")
    assert [r["invocation_id"] for r in rows] == [a["invocation_id"]]  # c is the original, without agent_id
    assert rows[0]["stdout_truncated"] is False and rows[0]["duration_ms"] == 12
    # and the list filters by session, time and limit, newest first
    assert [
        r["invocation_id"]
        for r in ctl_json(cli_env, "audit", "list", "--tenant", "globex", "--session", "sess-2")
    ] == [b["invocation_id"]]
    assert (
        ctl_json(cli_env, "audit", "list", "--tenant", "globex", "--session", "sess-2", "--agent", "x") == []
    )
    assert (
        ctl_json(cli_env, "audit", "list", "--tenant", "acme", "--session", "sess-2") == []
    )  # other tenant's session
    since = ctl_json(cli_env, "audit", "list", "--tenant", "globex", "--since", "2026-01-02T10:30:00Z")
    assert [r["invocation_id"] for r in since if r["started_at"].startswith("2026-01-02")] == [
        b["invocation_id"]
    ]
    newest = ctl_json(
        cli_env, "audit", "list", "--tenant", "globex", "--since", "2026-01-02T00:00:00Z", "--limit", "1"
    )
    assert len(newest) == 1 and newest[0]["started_at"] >= b["started_at"]


def test_audit_replay_keeps_messages_that_are_not_rows(cli_env: dict[str, str]) -> None:
    # Given a message that is not an audit row
    state = _state(cli_env)
    sqs = state.client("sqs")
    sqs.send_message(QueueUrl=state.resources.audit_dlq_url, MessageBody="not json")
    # When the DLQ is replayed
    out = ctl(cli_env, "--json", "audit", "replay")
    # Then the command fails (exit 1, one line) and the message is still in the queue
    _assert_one_line_failure(out, 1, "not audit rows")
    assert json.loads(out.stdout)["invalid"] == 1
    attrs = sqs.get_queue_attributes(QueueUrl=state.resources.audit_dlq_url, AttributeNames=["All"])[
        "Attributes"
    ]
    assert (
        int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"]) == 1
    )
    sqs.purge_queue(QueueUrl=state.resources.audit_dlq_url)


def test_audit_replay_drains_the_local_spool_through_the_writer(cli_env: dict[str, str]) -> None:
    # Given two rows the dispatch worker spooled while the emulated AWS was down (same row twice)
    state = _state(cli_env)
    row = _row("acme", "agent-spool", "sess-spool", "2026-01-03T10:00:00.000Z")
    spool = state.directory / n.LOCAL_AUDIT_SPOOL_FILE
    spool.write_text((json.dumps(row) + "\n") * 2)
    # When the audit trail is replayed
    counts = ctl_json(cli_env, "audit", "replay")
    # Then the row is written once (the second line is a duplicate) and the spool is empty
    assert counts == {"replayed": 1, "duplicates": 1, "invalid": 0, "failed": 0}
    assert spool.read_text() == ""
    (listed,) = ctl_json(cli_env, "audit", "list", "--tenant", "acme", "--session", "sess-spool")
    assert listed["invocation_id"] == row["invocation_id"] and listed["stdout_truncated"] is False


# --- counters and findings -------------------------------------------------------------------
def test_counters_show_reads_the_quota_functions_counters(cli_env: dict[str, str]) -> None:
    # Given three admitted calls through the real quota function (via the Lambda emulator)
    lam = _state(cli_env).client("lambda")
    for _attempt in range(2):  # calls and reads inside one hour: the count is the hour's
        hour = time.strftime("%Y-%m-%dT%H", time.gmtime())
        agent = f"ctr-{uuid.uuid4().hex[:6]}"
        for _ in range(3):
            out = lam.invoke(
                FunctionName=n.function_name("local", n.QUOTA_CHECK),
                Payload=json.dumps({"tenant_id": "acme", "agent_id": agent}).encode(),
            )
            assert json.loads(out["Payload"].read())["ok"] is True
        # When the counters are shown
        one = ctl_json(cli_env, "counters", "show", "--tenant", "acme", "--agent", agent)
        every = ctl_json(cli_env, "counters", "show", "--tenant", "acme")
        if time.strftime("%Y-%m-%dT%H", time.gmtime()) == hour:
            break
    # Then the agent's current hour shows 3 against its cap, and the tenant's day at least 3
    assert one["agent_hourly"] == [
        {"agent_id": agent, "window": one["agent_hourly"][0]["window"], "count": 3, "cap": 100}
    ]
    assert one["tenant_daily"]["count"] >= 3 and one["tenant_daily"]["cap"] == 1000
    assert one["tenant_daily"]["resets_at"].endswith("T00:00:00Z") and one["agent_hourly_resets_at"].endswith(
        ":00:00Z"
    )
    assert agent in {a["agent_id"] for a in every["agent_hourly"]}


def test_findings_list_honours_since(cli_env: dict[str, str]) -> None:
    # Given two findings, one now and one three days ago
    ddb = _state(cli_env).client("dynamodb")
    now = datetime.now(UTC)
    for moment, event in ((now, "ev-now"), (now - timedelta(days=3), "ev-old")):
        iso = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
        ddb.put_item(
            TableName=n.FINDINGS.physical("local"),
            Item={
                "finding_date": {"S": moment.strftime("%Y-%m-%d")},
                "finding_key": {"S": f"{iso}#{event}#0"},
                "timestamp": {"S": iso},
                "token_class": {"S": "github_pat"},
                "event_id": {"S": event},
                "log_group": {"S": n.log_group_name("local", n.DISPATCH)},
                "fingerprint": {"S": "ab12cd34"},
            },
        )
    # When findings are listed by default and since four days ago
    recent = ctl_json(cli_env, "findings", "list")
    week = ctl_json(
        cli_env, "findings", "list", "--since", (now - timedelta(days=4)).strftime("%Y-%m-%dT%H:%M:%SZ")
    )
    # Then the default window holds only the recent one, the longer one both (newest first)
    assert [f["event_id"] for f in recent] == ["ev-now"]
    assert [f["event_id"] for f in week] == ["ev-now", "ev-old"]
    human = ctl(cli_env, "findings", "list")
    assert human.returncode == 0 and "github_pat" in human.stdout and "TOKEN_CLASS" in human.stdout


# --- dispatch (needs the real dispatch function) ----------------------------------------------
def test_invoke_runs_a_turn_through_dispatch(cli_env: dict[str, str]) -> None:
    # Given a fresh turn of acme's analyst template
    turn = f"turn-{uuid.uuid4().hex[:8]}"
    base = {
        "tenant_id": "acme",
        "agent_id": "agent-cli",
        "template_id": "analyst",
        "turn_id": turn,
        "turn_token": turn_token_for("acme", turn),
    }
    # When begin_turn and two execute_code calls go through `sandboxctl invoke`
    begin = ctl_json(cli_env, "invoke", json.dumps({"action": "begin_turn", **base}))
    first = ctl_json(
        cli_env, "invoke", json.dumps({"action": "execute_code", **base, "call_id": "c1", "code": "x = 20"})
    )
    second = ctl_json(
        cli_env,
        "invoke",
        json.dumps({"action": "execute_code", **base, "call_id": "c2", "code": "print(x * 2 + 2)"}),
    )
    end = ctl_json(
        cli_env,
        "invoke",
        json.dumps(
            {
                "action": "end_turn",
                "tenant_id": "acme",
                "turn_id": turn,
                "turn_token": turn_token_for("acme", turn),
            }
        ),
    )
    # Then the sandbox is ready, state is shared in one session, and the audit trail has both calls
    assert begin["ok"] is True and begin["sandbox"]["status"] == "ready"
    assert first["ok"] is True and second["stdout"] == "42\n"
    assert first["session_id"] == second["session_id"]
    assert end == {"ok": True, "stopped": True}
    rows = ctl_json(cli_env, "audit", "list", "--tenant", "acme", "--session", second["session_id"])
    assert {r["invocation_id"] for r in rows} == {first["invocation_id"], second["invocation_id"]}


def test_invoke_rejects_non_json_event(cli_env: dict[str, str]) -> None:
    # Given an event that is not JSON
    # When invoked
    out = ctl(cli_env, "invoke", "{not json")
    # Then exit 1 with a one-line reason, before anything is sent
    _assert_one_line_failure(out, 1, "not valid JSON")


def _big_event(turn: str) -> str:
    # ~250 KiB of code: over the 128 KiB one argument may hold, under the 256 KiB code limit.
    code = (
        "x = 41\n" + ("# padding padding padding padding padding padding padding\n" * 4450) + "print(x + 1)\n"
    )
    assert 250 * 1024 <= len(code.encode()) <= 256 * 1024
    base = {
        "tenant_id": "acme",
        "agent_id": "agent-big",
        "template_id": "analyst",
        "turn_id": turn,
        "turn_token": turn_token_for("acme", turn),
    }
    return json.dumps({"action": "execute_code", **base, "call_id": f"c-{turn}", "code": code})


def test_invoke_dash_reads_a_250_kib_event_from_stdin(cli_env: dict[str, str]) -> None:
    # Given a ~250 KiB execute_code event (too big for one argument)
    turn = f"turn-{uuid.uuid4().hex[:8]}"
    begin = {
        "action": "begin_turn",
        "tenant_id": "acme",
        "agent_id": "agent-big",
        "template_id": "analyst",
        "turn_id": turn,
        "turn_token": turn_token_for("acme", turn),
    }
    ctl_json(cli_env, "invoke", json.dumps(begin))
    event = _big_event(turn)
    assert len(event) > 128 * 1024
    # When it is piped to `sandboxctl invoke -`
    out = subprocess.run(
        [SANDBOXCTL, "--json", "invoke", "-"],
        env=cli_env,
        input=event,
        capture_output=True,
        text=True,
        timeout=180,
    )
    # Then dispatch ran it
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["stdout"] == "42\n"
    ctl_json(
        cli_env,
        "invoke",
        json.dumps(
            {
                "action": "end_turn",
                "tenant_id": "acme",
                "turn_id": turn,
                "turn_token": turn_token_for("acme", turn),
            }
        ),
    )


def test_invoke_at_path_reads_the_event_from_a_file(cli_env: dict[str, str], tmp_path: Path) -> None:
    # Given the same ~250 KiB event in a file
    turn = f"turn-{uuid.uuid4().hex[:8]}"
    begin = {
        "action": "begin_turn",
        "tenant_id": "acme",
        "agent_id": "agent-big",
        "template_id": "analyst",
        "turn_id": turn,
        "turn_token": turn_token_for("acme", turn),
    }
    ctl_json(cli_env, "invoke", json.dumps(begin))
    path = tmp_path / "event.json"
    path.write_text(_big_event(turn))
    # When invoked as `sandboxctl invoke @PATH`
    response = ctl_json(cli_env, "invoke", f"@{path}")
    # Then dispatch ran it
    assert response["stdout"] == "42\n"
    ctl_json(
        cli_env,
        "invoke",
        json.dumps(
            {
                "action": "end_turn",
                "tenant_id": "acme",
                "turn_id": turn,
                "turn_token": turn_token_for("acme", turn),
            }
        ),
    )


def test_invoke_at_missing_path_is_a_one_line_failure(cli_env: dict[str, str], tmp_path: Path) -> None:
    # Given a path that does not exist
    # When
    out = ctl(cli_env, "invoke", f"@{tmp_path / 'nope.json'}")
    # Then exit 1 with one line naming the file
    _assert_one_line_failure(out, 1, "nope.json", "cannot read the event")


def test_pilot_fails_when_the_turn_gets_no_sandbox(cli_env: dict[str, str]) -> None:
    # Given a template without a sandbox block (begin_turn answers not_requested)
    # When the canary runs with it
    out = ctl(cli_env, "--json", "pilot", "--tenant", "globex", "--template", "no-sandbox-here")
    # Then it fails with a one-line reason naming the failed check, and restores the override
    _assert_one_line_failure(out, 1, "pilot failed", "begin_turn is ready")
    report = json.loads(out.stdout)
    assert report["ok"] is False
    assert {c["check"] for c in report["checks"] if c["ok"]} >= {"agent_hourly override restored"}
    assert "globex" not in ctl_json(cli_env, "caps", "get")["overrides"]


def test_pilot_passes_on_a_healthy_stack(cli_env: dict[str, str]) -> None:
    # Given a healthy local stack (globex's caps not cached by the quota function yet)
    # When the canary runs
    out = ctl(cli_env, "--json", "pilot", "--tenant", "globex", "--cap-wait", "75")
    # Then every check passed and the override it set is gone again
    report = json.loads(out.stdout)
    assert out.returncode == 0, [c for c in report["checks"] if not c["ok"]]
    assert report["ok"] is True and len(report["checks"]) >= 10
    assert "globex" not in ctl_json(cli_env, "caps", "get")["overrides"]


# --- files (SPEC §14.3) ----------------------------------------------------------------
def _put_artifact(env: dict[str, str], tenant: str, turn: str, data: bytes) -> dict[str, Any]:
    from dispatch.files.artifacts import ArtifactContext, ArtifactStore

    state = _state(env)
    ctx = ArtifactContext(
        tenant_id=tenant,
        turn_id=turn,
        invocation_id=f"inv-{uuid.uuid4().hex[:8]}",
        bucket=state.resources.artifacts_bucket,
    )
    return ArtifactStore(state.client("s3")).put(ctx, "summary.csv", data, redacted=False)


def test_local_status_lists_interpreter_ids(cli_env: dict[str, str]) -> None:
    # Given the running stack / When its status is read / Then every configured interpreter id is listed
    status = ctl_json(cli_env, "local", "status")
    expected = sorted(i["id"] for i in _state(cli_env).resources.interpreters)
    assert sorted(status["interpreters"]) == expected and expected
    human = ctl(cli_env, "local", "status")
    assert all(i in human.stdout for i in expected)


def test_files_list_and_get_verify_sha256(cli_env: dict[str, str], tmp_path: Path) -> None:
    # Given two acme artifacts in two turns and one globex artifact
    turn = f"turn-{uuid.uuid4().hex[:8]}"
    mine = _put_artifact(cli_env, "acme", turn, b"region,total\neu,3\n")
    _put_artifact(cli_env, "acme", f"{turn}-other", b"x")
    theirs = _put_artifact(cli_env, "globex", turn, b"secret,1\n")
    # When listed for the turn and fetched
    listed = ctl_json(cli_env, "files", "list", "--tenant", "acme", "--turn", turn)
    target = tmp_path / "summary.csv"
    got = ctl_json(cli_env, "files", "get", mine["file_id"], "--tenant", "acme", "-o", str(target))
    # Then the listing has exactly that turn's file and the bytes on disk match its sha256
    assert [f["file_id"] for f in listed] == [mine["file_id"]]
    assert target.read_bytes() == b"region,total\neu,3\n"
    assert got["sha256"] == hashlib.sha256(target.read_bytes()).hexdigest() == mine["sha256"]
    # And another tenant's file_id is not found for acme, nothing written
    foreign = tmp_path / "foreign.csv"
    out = ctl(cli_env, "files", "get", theirs["file_id"], "--tenant", "acme", "-o", str(foreign))
    _assert_one_line_failure(out, 1, "no file")
    assert not foreign.exists()


def test_files_get_refuses_bytes_that_do_not_match(cli_env: dict[str, str], tmp_path: Path) -> None:
    # Given an artifact whose stored object was changed after its sha256 was recorded
    entry = _put_artifact(cli_env, "acme", f"turn-{uuid.uuid4().hex[:8]}", b"original")
    state = _state(cli_env)
    pointer = json.loads(
        state.client("s3")
        .get_object(
            Bucket=state.resources.artifacts_bucket, Key=n.file_pointer_key("acme", entry["file_id"])
        )["Body"]
        .read()
    )
    state.client("s3").put_object(
        Bucket=state.resources.artifacts_bucket, Key=pointer["key"], Body=b"tampered"
    )
    # When fetched / Then refused with one line, and nothing at the path
    target = tmp_path / "x.csv"
    out = ctl(cli_env, "files", "get", entry["file_id"], "--tenant", "acme", "-o", str(target))
    _assert_one_line_failure(out, 1, "sha256")
    assert not target.exists() and not Path(f"{target}.partial").exists()


# --- background jobs ----------------------------------------------------------------
def test_jobs_list_filters_by_tenant_newest_first(cli_env: dict[str, str]) -> None:
    from sandbox_runtime.job_store import JobRecord, JobStore

    # Given jobs of two tenants in the local stack's jobs table, one of them ended
    state = _state(cli_env)
    store = JobStore(table_name=n.JOBS.physical("local"), ddb=state.client("dynamodb"))

    def job(job_id: str, tenant: str, submitted_ms: int) -> JobRecord:
        return JobRecord(
            job_id=job_id,
            tenant_id=tenant,
            agent_id="agent-1",
            turn_id=f"turn-{job_id}",
            session_id="S1",
            interpreter_id="sbx",
            invocation_id=f"inv-{job_id}",
            call_id="c",
            timeout_s=900,
            submitted_ms=submitted_ms,
        )

    old, new, other = (
        job("cli-old", "acme", 1_700_000_000_000),
        job("cli-new", "acme", 1_700_000_060_000),
        job("cli-other", "globex", 1_700_000_030_000),
    )
    for record in (old, new, other):
        store.create(record)
    store.mark_final(store.claim_end(old, final_state="completed", outcome={"response": {"ok": True}}))
    # When jobs are listed for acme, and for everyone
    acme = ctl_json(cli_env, "jobs", "list", "--tenant", "acme")
    everyone = ctl_json(cli_env, "jobs", "list")
    human = ctl(cli_env, "jobs", "list", "--tenant", "acme")
    # Then acme's jobs only, newest first, with their status; everyone's include globex
    assert [(r["job_id"], r["status"]) for r in acme] == [("cli-new", "running"), ("cli-old", "completed")]
    assert {"cli-old", "cli-new", "cli-other"} <= {r["job_id"] for r in everyone}
    assert human.returncode == 0 and "cli-new" in human.stdout and "cli-other" not in human.stdout
