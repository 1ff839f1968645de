"""End-to-end invariants against a deployed stage (opt-in: SANDBOX_E2E=1 and AWS credentials).

These are the checks the peer system lacked: a real call after deploy goes through quota, the
interpreter and the audit trail; caps refuse; turns do not cross tenants; a leaked token never
reaches the agent and the backstop records it without storing it.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta

import pytest
from sandbox_common import dimensions
from sandbox_common import naming as n

from tests.e2e._deployed import HOW_TO_RUN, Deployed, e2e_enabled, new_id, subscription_event, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not e2e_enabled(), reason=HOW_TO_RUN)]

# A fake, well-formed classic GitHub token (prefix + 36 chars): never a real credential.
FAKE_TOKEN = "ghp_" + "E2eFakeTokenNotReal0123456789abcdefgh"[:36]
FINDING_WAIT_SECONDS = 300


@pytest.fixture(scope="module")
def stage() -> Deployed:
    return Deployed.discover()


def test_pilot_turn_shares_one_session_and_leaves_one_audit_row_per_call(stage):
    # Given a fresh turn of the demo tenant
    agent, turn = new_id("agent"), new_id("turn")
    first_code, second_code = "x = 41", "print(x + 1)"
    try:
        # When the agent begins the turn and runs two calls that share state
        begun = stage.begin_turn(stage.tenant, agent, turn)
        first = stage.execute(stage.tenant, agent, turn, first_code)
        second = stage.execute(stage.tenant, agent, turn, second_code)
    finally:
        ended = stage.end_turn(stage.tenant, turn)
    # Then the tool was offered, both calls ran in one session and the state carried over
    assert begun["ok"] and begun["sandbox"]["status"] == "ready", begun
    assert begun["sandbox"]["tool"]["name"] == "execute_code"
    assert first["ok"] and second["ok"], (first, second)
    assert second["stdout"] == "42\n" and second["exit_status"] == "ok"
    assert first["session_id"] == second["session_id"]
    assert ended == {"ok": True, "stopped": True}
    # And each call left exactly one audit row with the hash of its code only
    rows = wait_for(
        lambda: (r := stage.audit_rows_for_session(second["session_id"])) and len(r) >= 2 and r or None,
        timeout=60,
        what="two audit rows on the session index",
    )
    by_invocation = {row["invocation_id"]: row for row in rows}
    assert set(by_invocation) == {first["invocation_id"], second["invocation_id"]}
    row = by_invocation[second["invocation_id"]]
    assert row["executed_code_hash"] == hashlib.sha256(second_code.encode()).hexdigest()
    assert row["exit_status"] == "ok" and row["stdout_truncated"] is False and row["stdout_bytes"] == 3


def test_cap_breach_refuses_the_call_after_the_cap_with_agent_hourly(stage):
    # Given a per-tenant agent_hourly override of 2 (restored afterwards) and a fresh agent
    agent, turn = new_id("agent"), new_id("turn")
    with stage.cap_override(dimensions.AGENT_HOURLY.name, 2, tenant=stage.tenant):
        try:
            # When the agent makes three calls in one hour
            results = [stage.execute(stage.tenant, agent, turn, f"print({i})") for i in range(3)]
        finally:
            stage.end_turn(stage.tenant, turn)
    # Then calls 1..2 are admitted and call 3 is refused on the agent_hourly dimension
    assert [r.get("error") for r in results[:2]] == [None, None], results[:2]
    refused = results[2]
    assert refused["ok"] is False and refused["error"] == "SandboxCapExceeded", refused
    assert refused["exit_status"] == "cap_exceeded" and refused["dimension"] == dimensions.AGENT_HOURLY.name
    next_hour = (datetime.now(UTC) + timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
    assert refused["resets_at"] in {
        (next_hour - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),  # the hour rolled over mid-test
        next_hour.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def test_kill_switch_refuses_every_call_of_the_tenant(stage):
    # Given the tenant's tenant_daily cap set to 0 (restored afterwards)
    agent, turn = new_id("agent"), new_id("turn")
    with stage.cap_override(dimensions.TENANT_DAILY.name, 0, tenant=stage.tenant):
        try:
            # When a fresh agent makes its first call
            refused = stage.execute(stage.tenant, agent, turn, "print('should not run')")
        finally:
            stage.end_turn(stage.tenant, turn)
    # Then it is refused on tenant_daily, nothing ran, and no session was started for it
    assert refused["ok"] is False and refused["error"] == "SandboxCapExceeded", refused
    assert refused["dimension"] == dimensions.TENANT_DAILY.name
    assert "should not run" not in json.dumps(refused)
    assert not refused.get("session_id")


def test_turn_of_one_tenant_cannot_be_used_by_another(stage):
    # Given a turn that tenant A started and used
    agent, turn = new_id("agent"), new_id("turn")
    try:
        owned = stage.execute(stage.tenant, agent, turn, "secret = 'tenant-a-state'")
        # When tenant B sends a call with the same turn id
        stolen = stage.execute(stage.other_tenant, agent, turn, "print(secret)")
    finally:
        stage.end_turn(stage.tenant, turn)
    # Then B is refused as an invalid request and sees nothing of A's session
    assert owned["ok"], owned
    assert stolen["ok"] is False and stolen["error"] == "SandboxInvalidRequest", stolen
    assert "tenant-a-state" not in json.dumps(stolen)
    assert owned["session_id"] not in json.dumps(stolen)


def test_leaked_token_never_reaches_the_agent(stage):
    # Given code that prints a token-shaped string, through print() and around the in-sandbox
    # redactor with os.write (the stdout-bypass class)
    agent, turn = new_id("agent"), new_id("turn")
    code = f"import os\nprint('{FAKE_TOKEN}')\nos.write(1, b'{FAKE_TOKEN}\\n')"
    try:
        # When the agent runs it
        result = stage.execute(stage.tenant, agent, turn, code)
    finally:
        stage.end_turn(stage.tenant, turn)
    # Then both copies are redacted in what the agent sees
    assert result["ok"], result
    assert FAKE_TOKEN not in json.dumps(result)
    assert result["stdout"].count("<redacted>") == 2


def test_javascript_and_typescript_run_in_the_turns_session_redacted(stage):
    # Given a turn on the deployed stage, whose AgentCore sessions carry Node.js (and TypeScript)
    agent, turn = new_id("agent"), new_id("turn")
    token_js = (
        f"process.stdout.write('{FAKE_TOKEN[:10]}'); console.log('{FAKE_TOKEN[10:]}'); console.log(6*7)"
    )
    try:
        # When a Python, a JavaScript and a TypeScript call run in it
        python = stage.execute(stage.tenant, agent, turn, "open('shared.txt', 'w').write('from python')")
        javascript = stage.execute(stage.tenant, agent, turn, token_js, language="javascript")
        typescript = stage.execute(
            stage.tenant,
            agent,
            turn,
            "import fs from 'node:fs';\nconst said: string = fs.readFileSync('shared.txt', 'utf8');\n"
            "console.log(said)",
            language="typescript",
        )
    finally:
        stage.end_turn(stage.tenant, turn)
    # Then both ran with Node.js in the same session, the token redacted before it left the session
    assert javascript["ok"], javascript
    assert javascript["stdout"] == "<redacted>\n42\n" and FAKE_TOKEN not in json.dumps(javascript)
    assert typescript["ok"], typescript
    assert typescript["stdout"] == "from python\n"
    assert python["session_id"] == javascript["session_id"] == typescript["session_id"]


def test_backstop_records_a_token_in_a_subscribed_log_without_storing_it(stage):
    # Given a subscription delivery (as CloudWatch Logs sends it) whose event holds a token.
    # Logs masks data-protection matches before subscription filters, so the deployed path only
    # delivers tokens the data protection identifiers miss; this drives the deployed backstop
    # with that delivery directly.
    log_stream = new_id("stream")
    session_id = new_id("session")
    line = json.dumps(
        {
            "message": "sandbox_output",
            "session_id": session_id,
            "tenant_id": stage.tenant,
            "data": f"token={FAKE_TOKEN}",
        }
    )
    event = subscription_event(n.log_group_name(stage.stage, n.DISPATCH), log_stream, [line])
    # When the backstop processes it
    stage.invoke(n.BACKSTOP, event)
    # Then within a few minutes a github finding names the stream and session, never the token
    day = datetime.now(UTC).strftime("%Y-%m-%d")
    findings = wait_for(
        lambda: stage.findings_for_stream(day, log_stream) or None,
        timeout=FINDING_WAIT_SECONDS,
        what="a backstop finding for the test stream",
    )
    assert [f["token_class"] for f in findings] == ["github"]
    finding = findings[0]
    assert finding["session_id"] == session_id and finding["tenant_id"] == stage.tenant
    assert finding["fingerprint"] and FAKE_TOKEN not in json.dumps(findings, default=str)
    assert FAKE_TOKEN[4:] not in json.dumps(findings, default=str)
