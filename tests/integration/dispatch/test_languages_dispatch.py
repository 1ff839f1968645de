"""JavaScript and TypeScript through dispatch on the shared real-parts stack: `language:
"javascript" | "typescript"` runs a Node.js program in the turn's session (under bubblewrap, with
the Node.js the CDK needs and the pinned TypeScript) with its files, artifacts, caps, idempotency,
background mode, audit row and every redaction layer, like Python code."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from typing import Any

import pytest
from sandbox_common import naming as n

from tests.support.stack import turn_token_for

from .conftest import Stack, event

# A GitHub token shape of the redaction catalogue, assembled so no literal token sits in the source
TOKEN = "ghp_" + "Z9y8X7w6" * 5
TS_ANSWER = "const answer: number = 6 * 7;\nconsole.log(answer);"


def program(call_id: str, code: str, language: str = "javascript", **over: Any) -> dict[str, Any]:
    return event(call_id=call_id, code=code, language=language, **over)


def counted(stack: Stack) -> int:
    items = stack.counter_items()[n.TENANT_DAILY_COUNTERS.logical]
    return sum(int(i[n.COUNTER_ATTR_COUNT]["N"]) for i in items)


def download(stack: Stack, file_id: str) -> bytes:
    import urllib.request

    got = stack.dispatch({"action": "get_file", "tenant_id": "acme", "file_id": file_id})
    assert got["ok"] is True, got
    with urllib.request.urlopen(got["url"]) as response:
        return bytes(response.read())


@pytest.mark.parametrize(
    ("language", "code"), [("javascript", "console.log(6*7)"), ("typescript", TS_ANSWER)]
)
def test_program_prints_42_in_the_turns_session_counted_once_with_one_row(
    stack: Stack, language: str, code: str
) -> None:
    # Given a turn whose Python call ran first
    first = stack.dispatch(event(call_id="py-0", code="x = 1"))
    before = counted(stack)
    # When a program runs through dispatch
    result = stack.dispatch(program("js-1", code, language))
    # Then its output is the answer, in the turn's session, counted exactly
    assert result["ok"] is True, result
    assert result["stdout"] == "42\n" and result["stdout_bytes"] == 3 and result["stderr_bytes"] == 0
    assert result["exit_status"] == "ok" and result["exit_code"] == 0
    assert result["session_id"] == first["session_id"]
    # And it is counted once, with one audit row carrying the language and the program's hash
    assert counted(stack) == before + 1
    rows = {r["call_id"]: r for r in stack.audit_rows("acme")}
    assert rows["js-1"]["language"] == language and rows["py-0"]["language"] == "python"
    assert rows["js-1"]["executed_code_hash"] == hashlib.sha256(code.encode()).hexdigest()


@pytest.mark.parametrize("language", ["javascript", "typescript"])
def test_program_reads_files_in_and_its_outputs_come_back(stack: Stack, language: str) -> None:
    # Given an input file sent with the call, and one a Python call of the turn wrote
    stack.dispatch(event(call_id="py-1", code="open('from_python.txt', 'w').write('hi from python')"))
    files = [
        {
            "path": "data/sales.csv",
            "content_base64": base64.b64encode(b"region,amount\neu,3\nus,4\n").decode(),
        }
    ]
    read = "require('fs')" if language == "javascript" else "(await import('node:fs')).default"
    code = (
        f"const fs = {read};\n"
        "const rows = fs.readFileSync('data/sales.csv', 'utf8').trim().split('\\n').slice(1);\n"
        "const total = rows.map((r) => Number(r.split(',')[1])).reduce((a, b) => a + b, 0);\n"
        "fs.mkdirSync('outputs', { recursive: true });\n"
        "fs.writeFileSync('outputs/total.json', JSON.stringify({ total }));\n"
        "console.log(total, fs.readFileSync('from_python.txt', 'utf8'));\n"
    )
    # When the program reads both and writes under outputs/
    result = stack.dispatch(program(f"{language}-files", code, language, files=files))
    # Then it saw the files, and its output file came back as an artifact with its bytes
    assert result["ok"] is True, result
    assert result["stdout"] == "7 hi from python\n"
    (artifact,) = result["files"]
    assert artifact["filename"] == "total.json"
    assert json.loads(download(stack, artifact["file_id"])) == {"total": 7}
    # And a later Python call of the turn sees what the program wrote
    after = stack.dispatch(event(call_id="py-2", code="print(open('outputs/total.json').read())"))
    assert after["stdout"] == '{"total":7}\n'


def test_a_token_split_across_two_writes_never_leaves_in_clear(
    stack: Stack, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # Given a program that writes a token in two pieces to stdout, whole to stderr and to an artifact
    code = (
        f"process.stdout.write({TOKEN[:9]!r});\n"
        f"setTimeout(() => {{ process.stdout.write({TOKEN[9:]!r} + '\\n');\n"
        f"  console.error('err ' + {TOKEN!r});\n"
        "  const fs = require('fs'); fs.mkdirSync('outputs', { recursive: true });\n"
        f"  fs.writeFileSync('outputs/leak.txt', 'token=' + {TOKEN!r}); }}, 50);\n"
    )
    # When it runs through dispatch
    result = stack.dispatch(program("js-token", code))
    # Then the token left the session redacted already (the bytes counted are the redactor's
    # output), and is nowhere in clear: answer, artifact, audit row, logs, process output
    assert result["ok"] is True, result
    assert result["stdout"] == "<redacted>\n" and result["stdout_bytes"] == len("<redacted>\n")
    assert result["stderr"] == "err <redacted>\n"
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
    assert stored == b"token=<redacted>"


@pytest.mark.parametrize(
    ("language", "code", "message"),
    [
        ("javascript", "console.log(", "Unexpected end of input"),
        ("typescript", "const n: = 1;", "Type expected. (TS1110)"),
    ],
)
def test_a_syntax_error_is_a_sandbox_error_with_its_message(
    stack: Stack, language: str, code: str, message: str
) -> None:
    # When a program does not parse
    result = stack.dispatch(program("js-syntax", code, language))
    # Then a SandboxError naming the syntax error, structured, with Node's report on stderr
    assert result["ok"] is False and result["error"] == "SandboxError", result
    assert result["exit_code"] == 1
    assert result["exception"]["name"] == "SyntaxError" and result["exception"]["value"] == message
    assert f"SyntaxError: {message}" in result["error_message"]
    assert f"SyntaxError: {message}" in result["stderr"]
    (row,) = stack.audit_rows("acme")
    assert row["error"] == "SandboxError" and row["language"] == language


def test_an_uncaught_error_is_structured_like_a_python_exception(stack: Stack) -> None:
    result = stack.dispatch(
        program("js-throw", "console.log('before');\nthrow new RangeError('out of range');")
    )
    assert result["ok"] is False and result["stdout"] == "before\n", result
    assert (result["exception"]["name"], result["exception"]["value"]) == ("RangeError", "out of range")
    assert "RangeError: out of range" in result["exception"]["traceback"]


def test_a_program_that_never_exits_times_out_with_its_output_so_far(short_deadline: Stack) -> None:
    stack = short_deadline
    # Given a 3 s per-call deadline and a program that writes, then never ends
    code = (
        f"console.log('before');\nconsole.log({TOKEN!r});\nconsole.error('err-before');\n"
        "setInterval(() => {}, 1000);"
    )
    # When it runs through dispatch
    result = stack.dispatch(program("js-slow", code))
    # Then the same deadline as any call: SandboxTimeout, with what it wrote before, redacted
    assert result["ok"] is False and result["error"] == "SandboxTimeout", result
    assert result["stdout"] == "before\n<redacted>\n" and result["stderr"] == "err-before\n"
    (row,) = stack.audit_rows("acme")
    assert row["exit_status"] == "timeout" and row["language"] == "javascript"
    # And the session was reset, as after a script's timeout: the next call runs in a fresh one
    after = stack.dispatch(program("js-after", "console.log('fresh')"))
    assert after["stdout"] == "fresh\n" and after["session_id"] != result["session_id"]


def test_an_unknown_language_is_refused_before_anything_counts(stack: Stack) -> None:
    before = counted(stack)
    answer = stack.dispatch(program("rb-1", "puts 1", "ruby"))
    assert answer["ok"] is False and answer["error"] == "SandboxInvalidRequest", answer
    assert "language" in answer["error_message"]
    assert counted(stack) == before and stack.audit_rows("acme") == []


def test_a_retry_answers_the_first_result_and_another_language_is_refused(stack: Stack) -> None:
    # Given a JavaScript call that ran
    code = "console.log(Date.now() % 100000)"
    first = stack.dispatch(program("js-retry", code))
    before = counted(stack)
    # When it is retried with the same call_id / Then the first answer, nothing counted or run again
    again = stack.dispatch(program("js-retry", code))
    assert again["stdout"] == first["stdout"] and again["invocation_id"] == first["invocation_id"]
    # And the same call_id and code in another language is another request: refused
    other = stack.dispatch(program("js-retry", code, "typescript"))
    assert other["ok"] is False and other["error"] == "SandboxInvalidRequest", other
    assert counted(stack) == before and len(stack.audit_rows("acme")) == 1


def _wait_final(stack: Stack, job_id: str, limit: float = 60.0) -> dict[str, Any]:
    get_job = {
        "action": "get_job",
        "tenant_id": "acme",
        "agent_id": "agent-7",
        "turn_id": "turn-1",
        "job_id": job_id,
        "turn_token": turn_token_for("acme", "turn-1"),
    }
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        answer = stack.dispatch(get_job)
        if answer.get("status") != "running":
            return answer
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} still running after {limit} s")


@pytest.mark.parametrize("language", ["javascript", "typescript"])
def test_a_background_program_completes_redacted_with_one_row(stack: Stack, language: str) -> None:
    # Given a background program that prints, leaks a token and writes a file
    code = (
        ("const fs = require('fs');\n" if language == "javascript" else "import fs from 'node:fs';\n")
        + f"console.log('start');\nconsole.log({TOKEN!r});\n"
        + "fs.writeFileSync('job_out.txt', 'done');\nconsole.log(6*7);"
    )
    submitted = stack.dispatch(program(f"{language}-job", code, language, background=True))
    assert submitted["ok"] is True and submitted["status"] == "running", submitted
    # When it is polled to its end
    final = _wait_final(stack, submitted["job_id"])
    # Then it completed with its output, redacted
    assert final["ok"] is True and final["status"] == "completed", final
    assert final["stdout"] == "start\n<redacted>\n42\n"
    # And the session kept what it wrote, and the job's one row carries the language
    after = stack.dispatch(event(call_id="py-after", code="print(open('job_out.txt').read())"))
    assert after["stdout"] == "done\n"
    rows = {r["call_id"]: r for r in stack.audit_rows("acme")}
    assert rows[f"{language}-job"]["language"] == language and rows[f"{language}-job"]["background"] is True
    assert TOKEN not in json.dumps(rows, default=str)


def test_a_background_program_that_throws_fails_the_job_with_what_it_threw(stack: Stack) -> None:
    submitted = stack.dispatch(
        program("js-job-throw", "console.log('partial');\nthrow new TypeError('bad job')", background=True)
    )
    assert submitted["ok"] is True, submitted
    final = _wait_final(stack, submitted["job_id"])
    assert final["ok"] is False and final["status"] == "failed", final
    assert final["stdout"] == "partial\n" and final["exit_code"] == 1
    assert (final["exception"]["name"], final["exception"]["value"]) == ("TypeError", "bad job")
