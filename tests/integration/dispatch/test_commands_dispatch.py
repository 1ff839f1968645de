"""Shell commands through dispatch on the shared real-parts stack: `language: "bash"`
runs a script in the turn's session with its files, artifacts, exit status, redaction, background
mode and audit row, like Python code."""

from __future__ import annotations

import base64
import hashlib
import json
import time
import urllib.request
from typing import Any

import pytest
from sandbox_common import naming as n

from tests.support.stack import turn_token_for

from .conftest import Stack, event

# A GitHub token shape of the redaction catalogue, assembled so no literal token sits in the source
TOKEN = "ghp_" + "A1b2C3d4" * 5


def bash(call_id: str, script: str, **over: Any) -> dict[str, Any]:
    return event(call_id=call_id, code=script, language="bash", **over)


def counted(stack: Stack) -> int:
    items = stack.counter_items()[n.TENANT_DAILY_COUNTERS.logical]
    return sum(int(i[n.COUNTER_ATTR_COUNT]["N"]) for i in items)


def download(stack: Stack, file_id: str) -> bytes:
    got = stack.dispatch({"action": "get_file", "tenant_id": "acme", "file_id": file_id})
    assert got["ok"] is True, got
    with urllib.request.urlopen(got["url"]) as response:
        return bytes(response.read())


def test_bash_arithmetic_prints_42_counted_once_with_one_row_carrying_language(stack: Stack) -> None:
    # Given a turn
    before = counted(stack)
    # When a bash script runs through dispatch
    result = stack.dispatch(bash("sh-1", "echo $((6*7))"))
    # Then bash's output is the answer, byte-exact and counted exactly
    assert result["ok"] is True, result
    assert result["stdout"] == "42\n" and result["stdout_bytes"] == 3 and result["stderr_bytes"] == 0
    assert result["exit_status"] == "ok" and result["exit_code"] == 0
    # And it is counted once, with one audit row carrying the language and the script's hash
    assert counted(stack) == before + 1
    (row,) = stack.audit_rows("acme")
    assert row["language"] == "bash" and row["call_id"] == "sh-1"
    assert row["executed_code_hash"] == hashlib.sha256(b"echo $((6*7))").hexdigest()
    assert row["stdout_bytes"] == 3


def test_bash_shares_the_turns_session_files_and_python(stack: Stack) -> None:
    # Given an input file sent with a bash call, and a Python call of the same turn before it
    py = stack.dispatch(event(call_id="py-1", code="open('from_python.txt', 'w').write('hi from python')"))
    csv = b"region,amount\neu,3\nus,4\n"
    files = [{"path": "data/sales.csv", "content_base64": base64.b64encode(csv).decode()}]
    # When a script reads both and asks for the session's python
    result = stack.dispatch(
        bash("sh-2", "wc -l < data/sales.csv\ncat from_python.txt; echo\npython -c 'print(6*7)'", files=files)
    )
    # Then it ran in the same session and working directory, with the session's python on PATH
    assert result["ok"] is True, result
    assert result["session_id"] == py["session_id"]
    assert result["stdout"] == "3\nhi from python\n42\n"
    # And the rows say which call was which language
    assert {r["call_id"]: r["language"] for r in stack.audit_rows("acme")} == {
        "py-1": "python",
        "sh-2": "bash",
    }


def test_bash_file_under_outputs_comes_back_as_an_artifact(stack: Stack) -> None:
    # When a script writes a file under outputs/
    result = stack.dispatch(bash("sh-3", "mkdir -p outputs\nprintf 'a,b\\n1,2\\n' > outputs/table.csv"))
    # Then it comes back as an artifact with its bytes
    assert result["ok"] is True, result
    (artifact,) = result["files"]
    assert artifact["filename"] == "table.csv"
    assert download(stack, artifact["file_id"]) == b"a,b\n1,2\n"


def test_bash_exit_status_is_a_sandbox_error_with_exit_code(stack: Stack) -> None:
    # When a script exits 3 after writing to stderr
    result = stack.dispatch(bash("sh-4", "echo partial\necho broken >&2\nexit 3"))
    # Then it is a SandboxError with bash's status and its output
    assert result["ok"] is False and result["error"] == "SandboxError", result
    assert result["exit_code"] == 3 and result["exit_status"] == "error"
    assert result["stdout"] == "partial\n" and result["stderr"] == "broken\n"
    (row,) = stack.audit_rows("acme")
    assert row["exit_code"] == 3 and row["error"] == "SandboxError" and row["language"] == "bash"


def test_bash_token_is_redacted_in_stdout_artifact_row_and_log(
    stack: Stack, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # Given a script that echoes a token to stdout and stderr, into a text artifact, and fails
    script = (
        f"echo {TOKEN}\necho {TOKEN} >&2\nmkdir -p outputs\necho token={TOKEN} > outputs/leak.txt\nexit 5"
    )
    # When it runs through dispatch
    result = stack.dispatch(bash("sh-5", script))
    # Then the token is nowhere in clear: response, artifact, audit row, logs, process output
    assert result["exit_code"] == 5, result
    assert "<redacted>" in result["stdout"] and "<redacted>" in result["stderr"]
    (artifact,) = result["files"]
    stored = download(stack, artifact["file_id"])
    printed = capfd.readouterr()
    records = json.dumps([{**vars(r), "msg": r.getMessage()} for r in caplog.records], default=str)
    for where, text in (
        ("response", json.dumps(result)),
        ("artifact", stored.decode()),
        ("audit", json.dumps(stack.audit_rows("acme"), default=str)),
        ("log records", records),
        ("stdout", printed.out),
        ("stderr", printed.err),
    ):
        assert TOKEN not in text, f"token leaked into {where}"
    assert b"<redacted>" in stored
    output_events = [r for r in caplog.records if r.getMessage() == "sandbox_output"]
    assert {r.stream for r in output_events} == {"stdout", "stderr"}
    assert all("<redacted>" in r.data for r in output_events)


def _get_job(job_id: str) -> dict[str, Any]:
    return {
        "action": "get_job",
        "tenant_id": "acme",
        "agent_id": "agent-7",
        "turn_id": "turn-1",
        "job_id": job_id,
        "turn_token": turn_token_for("acme", "turn-1"),
    }


def _wait_final(stack: Stack, job_id: str, limit: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        answer = stack.dispatch(_get_job(job_id))
        if answer.get("status") != "running":
            return answer
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} still running after {limit} s")


def test_bash_background_job_completes_redacted_with_one_row(stack: Stack) -> None:
    # Given a background bash job that prints, leaks a token and writes a file
    script = f"echo start\necho {TOKEN}\necho done > job_out.txt\necho end"
    submitted = stack.dispatch(bash("sh-job", script, background=True))
    assert submitted["ok"] is True and submitted["status"] == "running", submitted
    # When it is polled to its end
    final = _wait_final(stack, submitted["job_id"])
    # Then it completed with bash's output, redacted
    assert final["ok"] is True and final["status"] == "completed", final
    assert final["stdout"] == "start\n<redacted>\nend\n"
    # And the session kept what it wrote, and the job's one row carries the language
    after = stack.dispatch(event(call_id="py-after", code="print(open('job_out.txt').read().strip())"))
    assert after["stdout"] == "done\n"
    rows = {r["call_id"]: r for r in stack.audit_rows("acme")}
    assert rows["sh-job"]["language"] == "bash" and rows["sh-job"]["background"] is True
    assert rows["sh-job"]["executed_code_hash"] == hashlib.sha256(script.encode()).hexdigest()
    assert TOKEN not in json.dumps(rows, default=str)


def test_bash_background_job_exit_status_fails_the_job(stack: Stack) -> None:
    # When a background script exits 3
    submitted = stack.dispatch(bash("sh-job-3", "echo before\nexit 3", background=True))
    final = _wait_final(stack, submitted["job_id"])
    # Then the job failed with bash's status
    assert final["ok"] is False and final["status"] == "failed", final
    assert final["exit_code"] == 3 and final["stdout"] == "before\n"


def test_language_outside_the_known_ones_is_refused_before_anything_counts(stack: Stack) -> None:
    # Given the counters before
    before = counted(stack)
    # When a call names another language / Then it is invalid, nothing counted, no row
    answer = stack.dispatch(event(call_id="rb-1", code="puts 1", language="ruby"))
    assert answer["ok"] is False and answer["error"] == "SandboxInvalidRequest"
    assert counted(stack) == before and stack.audit_rows("acme") == []


def test_bash_timeout_keeps_the_output_written_before_it(short_deadline: Stack) -> None:
    stack = short_deadline
    # Given a 3 s per-call deadline and a script that writes, leaks a token, then never ends
    script = f"echo before\necho {TOKEN}\necho err-before >&2\nsleep 300"
    # When it runs through dispatch
    result = stack.dispatch(bash("sh-slow", script))
    # Then it is a SandboxTimeout that keeps what it wrote before the deadline, redacted
    assert result["ok"] is False and result["error"] == "SandboxTimeout", result
    assert result["exit_status"] == "timeout" and result["exit_code"] is None
    assert result["stdout"] == "before\n<redacted>\n" and result["stderr"] == "err-before\n"
    assert result["stdout_bytes"] == len("before\n<redacted>\n")
    # And the session was reset (the next call starts a fresh one), with the one row of the call
    (row,) = stack.audit_rows("acme")
    assert row["exit_status"] == "timeout" and row["language"] == "bash"
    after = stack.dispatch(bash("sh-after", "echo fresh"))
    assert after["stdout"] == "fresh\n" and after["session_id"] != result["session_id"]


def test_get_job_on_a_running_job_carries_its_output_so_far(stack: Stack) -> None:
    # Given a background script that writes, leaks a token, then waits for a file the test creates
    script = f"echo first\necho {TOKEN}\necho warn >&2\nwhile [ ! -e go ]; do sleep 0.05; done\necho last"
    submitted = stack.dispatch(bash("sh-progress", script, background=True))
    assert submitted["ok"] is True, submitted
    # When it is polled while it waits
    deadline = time.monotonic() + 60
    while True:
        running = stack.dispatch(_get_job(submitted["job_id"]))
        assert running["status"] == "running", running
        if running["stderr_tail"] == "warn\n" and running["stdout_tail"] == "first\n<redacted>\n":
            break
        assert time.monotonic() < deadline, running
        time.sleep(0.1)
    # Then the running answer carries the tails written so far, redacted, and their byte counts
    assert running["stdout_bytes"] == len("first\n<redacted>\n") and running["stderr_bytes"] == len("warn\n")
    assert TOKEN not in json.dumps(running)
    # And once the script is let go, the job completes with all of it
    stack.dispatch(bash("sh-go", "touch go"))
    final = _wait_final(stack, submitted["job_id"])
    assert final["status"] == "completed" and final["stdout"] == "first\n<redacted>\nlast\n", final
    assert "stdout_tail" not in final
