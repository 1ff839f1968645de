"""A Python call that passes its deadline, through dispatch on the shared real-parts stack: the
session stops the code at its inner deadline, the answer is SandboxTimeout with the
output written before it (redacted, counted), and the session, with its variables, carries on."""

from __future__ import annotations

import json

import pytest

from .conftest import Stack, event

# A GitHub token shape of the redaction catalogue, assembled so no literal token sits in the source
TOKEN = "ghp_" + "A1b2C3d4" * 5


def test_python_timeout_keeps_the_output_written_before_it(short_deadline: Stack) -> None:
    stack = short_deadline
    # Given a 3 s per-call deadline and code that prints, then sleeps far past it
    code = 'print("before"); import time; time.sleep(600)'
    # When it runs through dispatch
    result = stack.dispatch(event(call_id="py-slow", code=code))
    # Then it is a SandboxTimeout that keeps what it printed before the deadline, counted
    assert result["ok"] is False and result["error"] == "SandboxTimeout", result
    assert result["exit_status"] == "timeout" and result["exit_code"] is None
    assert result["stdout"] == "before\n" and result["stdout_bytes"] == len("before\n")
    assert result["stderr"] == "" and result["stderr_bytes"] == 0
    # And its one row says so
    (row,) = stack.audit_rows("acme")
    assert row["exit_status"] == "timeout" and row["stdout_bytes"] == len("before\n")
    assert row["failure_reason"] == "deadline_exceeded:3s:stopped_in_session"


def test_python_timeout_redacts_a_token_printed_before_it_and_keeps_the_session(
    short_deadline: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    stack = short_deadline
    # Given a turn whose first call set a variable
    first = stack.dispatch(event(call_id="py-set", code="x = 21"))
    assert first["ok"] is True, first
    # When a call prints a token and an error line, then passes the deadline
    code = f'import sys, time\nprint("{TOKEN}")\nprint("err-before", file=sys.stderr)\ntime.sleep(600)'
    result = stack.dispatch(event(call_id="py-leak", code=code))
    # Then the answer carries the output, the token redacted, and counts what left the session
    assert result["error"] == "SandboxTimeout", result
    assert result["stdout"] == "<redacted>\n" and result["stderr"] == "err-before\n"
    assert result["stdout_bytes"] == len("<redacted>\n")
    records = json.dumps([{**vars(r), "msg": r.getMessage()} for r in caplog.records], default=str)
    rows = stack.audit_rows("acme")
    for where, text in (("response", json.dumps(result)), ("audit", json.dumps(rows)), ("log", records)):
        assert TOKEN not in text, f"token leaked into {where}"
    (row,) = [r for r in rows if r["call_id"] == "py-leak"]
    assert row["exit_status"] == "timeout" and row["stdout_bytes"] == len("<redacted>\n")
    # And the session was kept: a later call of the turn reads the variable set before the timeout
    after = stack.dispatch(event(call_id="py-after", code="print(x * 2)"))
    assert after["ok"] is True and after["stdout"] == "42\n", after
    assert after["session_id"] == result["session_id"] == first["session_id"]
    assert "session_restarted" not in after
