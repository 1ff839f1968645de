"""execute_code end to end through real parts; see conftest."""

from __future__ import annotations

import hashlib
import json

import pytest
from sandbox_common import dimensions
from sandbox_common import naming as n
from sandbox_common.redaction.catalogue import TOKEN_CLASSES

from .conftest import Stack, event


def test_turn_two_calls_share_state_and_one_session(stack: Stack) -> None:
    # Given a begun turn
    begin = stack.dispatch(event("begin_turn"))
    assert begin["ok"] is True and begin["sandbox"]["status"] == "ready"
    assert (
        begin["sandbox"]["tool"]["name"] == "execute_code"
        and begin["sandbox"]["environment"] == "default-public"
    )
    # When two calls run in it
    first = stack.dispatch(event(call_id="c1", code="x = 20\nprint('set')"))
    second = stack.dispatch(event(call_id="c2", code="print(x * 2 + 2)"))
    # Then state is shared through one session, and the results have the contract's shape
    assert first["ok"] is True, first
    assert second["ok"] is True and second["stdout"] == "42\n" and second["exit_status"] == "ok"
    assert first["session_id"] == second["session_id"]
    assert second["exit_code"] == 0 and second["stdout_bytes"] == 3 and second["stderr_bytes"] == 0
    assert second["stdout_truncated"] is False and second["stderr_truncated"] is False
    assert isinstance(second["duration_ms"], int) and second["invocation_id"]
    # And one audit row per call, with the code hash of the user code only
    rows = sorted(stack.audit_rows("acme"), key=lambda r: r["started_at"])
    assert [r["call_id"] for r in rows] == ["c1", "c2"]
    assert rows[1]["executed_code_hash"] == hashlib.sha256(b"print(x * 2 + 2)").hexdigest()
    assert rows[1]["session_id"] == second["session_id"] and rows[1]["exit_status"] == "ok"
    assert rows[1]["stdout_truncated"] is False and rows[1]["environment"] == "default-public"
    # And end_turn stops the session, idempotently
    assert stack.dispatch(event("end_turn")) == {"ok": True, "stopped": True}
    assert stack.dispatch(event("end_turn")) == {"ok": True, "stopped": False}


def test_error_and_stderr_are_classified(stack: Stack) -> None:
    result = stack.dispatch(event(code="raise ValueError('nope')"))
    assert result["ok"] is False and result["error"] == "SandboxError" and result["exit_status"] == "error"
    assert "ValueError" in result["stderr"] and result["exit_code"] == 1
    assert "failure_reason" not in result
    row = stack.audit_rows()[0]
    assert row["error"] == "SandboxError" and row["exit_status"] == "error" and row["failure_reason"]


def test_error_process_killed_by_the_code_itself_is_an_error_naming_the_signal(stack: Stack) -> None:
    # Given a call whose code SIGKILLs its own process (the memory cgroup saw no OOM kill)
    code = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"
    # When it runs
    out = stack.dispatch(event(call_id="c-self-kill", code=code))
    # Then it is a SandboxError naming the signal, not "ran out of memory"
    assert (out["error"], out["exit_status"]) == ("SandboxError", "error"), out
    assert "signal 9 (SIGKILL)" in out["error_message"]
    (row,) = [r for r in stack.audit_rows("acme") if r["call_id"] == "c-self-kill"]
    assert row["failure_reason"] == f"{n.REASON_KILLED_BY_SIGNAL}:9"


def test_cap_two_third_call_refused_and_audited(stack: Stack) -> None:
    # Given a tenant daily cap of 2
    stack.set_cap(dimensions.TENANT_DAILY.name, 2)
    # When three calls arrive
    results = [stack.dispatch(event(call_id=f"c{i}", code="print(1)")) for i in range(3)]
    # Then the third is refused with the daily dimension and next midnight, and audited
    assert [r["ok"] for r in results] == [True, True, False]
    refused = results[2]
    assert refused["error"] == "SandboxCapExceeded" and refused["dimension"] == "tenant_daily"
    assert refused["resets_at"].endswith("T00:00:00Z") and "00:00 UTC" in refused["error_message"]
    assert refused["exit_status"] == "cap_exceeded"
    rows = stack.audit_rows()
    assert sorted(r["exit_status"] for r in rows) == ["cap_exceeded", "ok", "ok"]


def test_kill_switch_refuses_first_call_and_creates_no_counter(stack: Stack) -> None:
    stack.set_cap(dimensions.AGENT_HOURLY.name, 0, tenant_id="acme")
    result = stack.dispatch(event())
    assert result["error"] == "SandboxCapExceeded" and result["dimension"] == "agent_hourly"
    assert stack.counter_items() == {n.TENANT_DAILY_COUNTERS.logical: [], n.AGENT_HOURLY_COUNTERS.logical: []}
    assert [r["exit_status"] for r in stack.audit_rows()] == ["cap_exceeded"]


def test_idempotent_retry_returns_first_result_once(stack: Stack) -> None:
    first = stack.dispatch(event(call_id="same", code="import random; print(random.random())"))
    retry = stack.dispatch(event(call_id="same", code="import random; print(random.random())"))
    assert retry == first
    assert len(stack.audit_rows()) == 1
    counters = stack.counter_items()[n.TENANT_DAILY_COUNTERS.logical]
    assert counters[0][n.COUNTER_ATTR_COUNT]["N"] == "1"
    other = stack.dispatch(event(call_id="same", code="print('different')"))
    assert other["error"] == "SandboxInvalidRequest"


def test_invalid_request_touches_nothing(stack: Stack) -> None:
    result = stack.dispatch(event(code="   "))
    assert result["error"] == "SandboxInvalidRequest"
    assert stack.audit_rows() == [] and stack.counter_items()[n.TENANT_DAILY_COUNTERS.logical] == []


def test_turn_id_held_by_other_tenant_is_its_own_turn(stack: Stack) -> None:
    # Given acme holds a turn (with a live session)
    first = stack.dispatch(event(call_id="a1"))
    assert first["ok"] is True
    # When globex uses the same turn id
    other = stack.dispatch(event(tenant_id="globex", call_id="g1"))
    # Then globex's call runs in a session of its own, and acme's turn still has its session
    assert other["ok"] is True
    assert other["session_id"] != first["session_id"]
    assert stack.dispatch(event(call_id="a2"))["session_id"] == first["session_id"]
    assert sorted(r["tenant_id"] for r in stack.audit_rows()) == ["acme", "acme", "globex"]


def test_turn_of_other_agent_of_tenant_refused_without_details_or_side_effects(stack: Stack) -> None:
    from sandbox_common import messages

    # Given agent-7 of acme holds a turn
    assert stack.dispatch(event(call_id="a1"))["ok"] is True
    # When another agent of acme uses it
    stolen = stack.dispatch(event(agent_id="agent-other", call_id="x1"))
    # Then it is refused with words that name nothing of the turn, and nothing is audited for it
    assert stolen["error"] == "SandboxInvalidRequest"
    assert stolen["error_message"] == messages.TURN_NOT_YOURS
    assert [r["agent_id"] for r in stack.audit_rows()] == ["agent-7"]


def test_disabled_tenant_is_provisioning_audited_and_not_counted(stack: Stack) -> None:
    from sandbox_common import aws

    aws.client("dynamodb").put_item(
        TableName=stack.resources.tables[n.TENANTS.logical],
        Item={
            "tenant_id": {"S": "globex"},
            "item": {"S": n.TENANT_POLICY_ITEM},
            "sandbox_enabled": {"BOOL": False},
        },
    )
    begin = stack.dispatch(event("begin_turn", tenant_id="globex", turn_id="tg"))
    assert begin["sandbox"]["status"] == "disabled" and "tool" not in begin["sandbox"]
    assert (
        begin["sandbox"]["reason"] == "tenant_disabled" and begin["sandbox"]["error"] == "SandboxProvisioning"
    )
    assert "not enabled" in begin["sandbox"]["error_message"]  # a sentence the agent can relay
    result = stack.dispatch(event(tenant_id="globex", turn_id="tg"))
    assert result["error"] == "SandboxProvisioning" and result["reason"] == "tenant_disabled"
    assert result["exit_status"] == "provisioning"
    assert stack.counter_items()[n.TENANT_DAILY_COUNTERS.logical] == []
    assert [r["exit_status"] for r in stack.audit_rows()] == ["provisioning"]


def _secret(example: str) -> str:
    """The secret part of a catalogue example (for bearer: the credential, not the header words)."""
    return example.split("Bearer ", 1)[1] if "Bearer " in example else example


@pytest.mark.parametrize("token_class", [c.name for c in TOKEN_CLASSES])
def test_token_of_every_class_never_reaches_response_logs_or_audit(
    stack: Stack, token_class: str, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # Given user code that leaks a token of this class every way it can: plain, split across
    # writes, inside JSON, to stderr, and in the failure message
    example = next(c for c in TOKEN_CLASSES if c.name == token_class).examples[0]
    secret = _secret(example)
    half = len(example) // 2
    code = (
        f"import sys, json\nprint({example!r})\nsys.stdout.write({example[:half]!r}); sys.stdout.flush();"
        f" sys.stdout.write({example[half:]!r} + '\\n')\nprint(json.dumps({{'leak':"
        f" {example!r}}}))\nprint({example!r}, file=sys.stderr)\nraise RuntimeError({example!r})"
    )
    # When it runs through dispatch
    result = stack.dispatch(event(call_id=f"leak-{token_class}", code=code))
    # Then the call ran and failed as user code, and the secret is nowhere: not in the response,
    # not in anything the process logged, not in the audit row
    assert result["error"] == "SandboxError" and result["exit_code"] == 1, result
    printed = capfd.readouterr()  # EMF lines and anything else written to the process's stdout/stderr
    # every log record with all its structured fields, as the Powertools formatter would emit them
    records = json.dumps([{**vars(r), "msg": r.getMessage()} for r in caplog.records], default=str)
    for where, text in (
        ("response", json.dumps(result)),
        ("stdout", printed.out),
        ("stderr", printed.err),
        ("log records", records),
        ("audit", json.dumps(stack.audit_rows())),
    ):
        assert secret not in text, f"{token_class} token leaked into {where}"
    assert "<redacted>" in result["stdout"] and "<redacted>" in result["stderr"]
    output_events = [r for r in caplog.records if r.getMessage() == "sandbox_output"]
    assert {r.stream for r in output_events} == {"stdout", "stderr"}  # full output was logged, redacted
    assert all("<redacted>" in r.data for r in output_events)


def test_turn_store_down_fails_closed_and_counts_a_dispatch_internal_error(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    from sandbox_common import aws

    # Given the turns table is gone (a dependency of dispatch itself)
    aws.client("dynamodb").delete_table(TableName=stack.resources.tables[n.TURNS.logical])
    # When a call arrives
    result = stack.dispatch(event())
    # Then it is refused before anything is counted, audited, and alarmed as a dispatch error
    assert result["error"] == "SandboxProvisioning" and result["reason"] == "preflight_unavailable"
    assert "failure_reason" not in result
    assert stack.counter_items()[n.TENANT_DAILY_COUNTERS.logical] == []
    assert [r["exit_status"] for r in stack.audit_rows()] == ["provisioning"]
    assert n.METRIC_DISPATCH_INTERNAL_ERRORS in capsys.readouterr().out


def test_call_id_reused_by_another_agent_is_refused_not_replayed(stack: Stack) -> None:
    # Given agent-7 ran call-1 in its turn
    first = stack.dispatch(event(call_id="call-1", code="print('private to agent-7')"))
    assert first["ok"] is True
    # When another agent of the same tenant sends the same call_id with the same code
    other = stack.dispatch(
        event(agent_id="agent-8", turn_id="turn-other", call_id="call-1", code="print('private to agent-7')")
    )
    # Then it is refused, and never handed agent-7's output
    assert other["error"] == "SandboxInvalidRequest" and "private" not in json.dumps(other)
    assert len(stack.audit_rows()) == 1


def test_large_escape_heavy_output_is_answered_once_and_replayed(stack: Stack) -> None:
    # Given output whose JSON (escaped) form is larger than a DynamoDB item
    code = "print('é\"\\\\n' * 90000)"
    first = stack.dispatch(event(call_id="big", code=code))
    # Then the caller gets the real result and there is exactly one audit row
    assert (
        first["ok"] is True and first["stdout_truncated"] is True and len(first["stdout"].encode()) <= 262_144
    )
    # And a retry replays the stored result (no second run, no second row or count)
    retry = stack.dispatch(event(call_id="big", code=code))
    assert retry["invocation_id"] == first["invocation_id"] and retry["ok"] is True
    assert len(stack.audit_rows()) == 1
    assert stack.counter_items()[n.TENANT_DAILY_COUNTERS.logical][0][n.COUNTER_ATTR_COUNT]["N"] == "1"


def test_failed_first_start_is_not_reported_as_a_restart(stack: Stack) -> None:
    from dispatch import parts as dependencies
    from sandbox_common import aws

    # Given a turn whose first Start fails (its substrate names an interpreter that does not exist)
    fresh = "turn-fresh"
    ssm = aws.client("ssm")
    name = n.tenant_substrate_parameter("local", "acme")
    original = ssm.get_parameter(Name=name)["Parameter"]["Value"]
    broken = json.loads(original)
    broken["interpreters"]["default-public"] = "sbx_local_missing_pub"
    ssm.put_parameter(Name=name, Value=json.dumps(broken), Overwrite=True)

    dependencies.reset()
    failed = stack.dispatch(event(call_id="f1", turn_id=fresh, code="print(1)"))
    assert failed["ok"] is False
    ssm.put_parameter(Name=name, Value=original, Overwrite=True)
    dependencies.reset()
    # When the next call of that turn succeeds / Then it is not told its (never existing) state is gone
    ok = stack.dispatch(event(call_id="f2", turn_id=fresh, code="print(2)"))
    assert ok["ok"] is True and "session_restarted" not in ok
