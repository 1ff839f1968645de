"""Commands in a local session: `executeCommand` runs a bash script in the session, with
the same working directory, files, interpreter and in-session redaction as code; `pip install`
goes to the session's own disk and later code imports it; `startCommandExecution` / `getTask` /
`stopTask` run one in the background. Sessions are SANDBOX ones (no network): every install here
comes from a wheel built by the test."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sandbox_common import naming
from sandbox_common.redaction.stdio import check_readiness, preamble_source

from tests.integration.interpreter._helpers import SANDBOX_CI, build_wheel, invoke

TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


@pytest.fixture
def sbx(client: Any) -> Iterator[str]:
    session_id = client.start_code_interpreter_session(
        codeInterpreterIdentifier=SANDBOX_CI, sessionTimeoutSeconds=300
    )["sessionId"]
    yield session_id
    try:
        client.stop_code_interpreter_session(codeInterpreterIdentifier=SANDBOX_CI, sessionId=session_id)
    except client.exceptions.ResourceNotFoundException:
        pass


def command(client: Any, session: str, script: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(structuredContent, response headers) of one executeCommand."""
    structured, _, headers = invoke(client, SANDBOX_CI, session, "", "executeCommand", {"command": script})
    return structured, headers


def tool(client: Any, session: str, name: str, **arguments: Any) -> tuple[dict[str, Any], bool]:
    """(structuredContent, isError) of one task tool call."""
    structured, events, _ = invoke(client, SANDBOX_CI, session, "", name, arguments)
    return structured, events[-1]["isError"]


def test_command_runs_bash_and_reports_its_exit_status(client: Any, sbx: str) -> None:
    # Given / When a bash script, then one that fails
    ok, headers = command(client, sbx, 'x=6\necho $((x * 7))\n[[ -n "$BASH_VERSION" ]] && echo bash')
    failed, _ = command(client, sbx, "echo partial; echo oops >&2; exit 3")
    # Then bash ran it (arithmetic, [[ ]]), with its output and exact byte counts
    assert (ok["stdout"], ok["exitCode"], ok["taskStatus"]) == ("42\nbash\n", 0, "completed")
    assert headers[naming.LOCAL_STDOUT_BYTES_HEADER] == "8"
    # And a non-zero exit is the script's status, as a failure
    assert (failed["stdout"], failed["stderr"], failed["exitCode"]) == ("partial\n", "oops\n", 3)
    assert failed["taskStatus"] == "failed"


def test_command_sees_the_same_directory_files_and_interpreter_as_code(client: Any, sbx: str) -> None:
    # Given code that writes a file, changes directory and describes its interpreter
    code = (
        "import json, os, sys\nos.makedirs('sub', exist_ok=True)\n"
        "open('sub/data.txt', 'w').write('from code')\nos.chdir('sub')\n"
        "print(json.dumps([sys.executable, sys.version, sys.path]))"
    )
    executable, version, path = json.loads(invoke(client, SANDBOX_CI, sbx, code)[0]["stdout"])
    # When a command reads the file and asks `python`, `python3` and `pip` who they are
    probe = (
        "cat data.txt; echo; pwd\n"
        "python -c 'import json, sys; print(json.dumps([sys.executable, sys.version, sys.path[1:]]))'\n"
        "python3 -c 'import sys; print(sys.executable)'\n"
        "pip --version | cut -d' ' -f1"
    )
    out, _ = command(client, sbx, probe)
    lines = out["stdout"].splitlines()
    # Then the command ran where the code left off, on the very same interpreter and import path
    assert lines[:2] == ["from code", "/workspace/sub"], out
    assert json.loads(lines[2]) == [executable, version, path]
    assert lines[3] == executable.removesuffix("python") + "python3" and lines[4] == "pip"
    assert executable.startswith("/opt/session-python/bin/")


def test_command_pip_install_goes_to_the_session_and_later_code_imports_it(
    client: Any, sbx: str, tmp_path: Path
) -> None:
    # Given a wheel placed in the session (offline: a SANDBOX session has no network)
    wheel = build_wheel(tmp_path, value=7)
    upload = {"content": [{"path": f"wheels/{wheel.name}", "blob": wheel.read_bytes()}]}
    invoke(client, SANDBOX_CI, sbx, "", "writeFiles", upload)
    # When pip installs it from a command
    installed, _ = command(client, sbx, "pip install --no-index --find-links wheels lci_probe")
    # Then later code and later commands import it, from the session's own Python layer
    code = invoke(client, SANDBOX_CI, sbx, "import lci_probe\nprint(lci_probe.VALUE, lci_probe.__file__)")[0]
    again, _ = command(client, sbx, "python -c 'import lci_probe; print(lci_probe.VALUE)'")
    assert installed["exitCode"] == 0, installed
    value, where = code["stdout"].split()
    assert value == "7" and where.startswith("/opt/session-python/lib/")
    assert again["stdout"] == "7\n"


def test_command_script_travels_whole_and_never_as_stdin(client: Any, sbx: str) -> None:
    # Given a script over Linux's 128 KiB limit for one argument, which reads its standard input
    script = "# " + "x" * 200_000 + '\nread line\necho "stdin:[$line] rc:$?"\necho end\n'
    # When run / Then all of it ran, and its stdin is empty (never the script's own text)
    out, _ = command(client, sbx, script)
    assert out["stdout"] == "stdin:[] rc:1\nend\n", out


def test_command_output_passes_the_in_session_redactor(client: Any, sbx: str) -> None:
    # Given a session whose readiness preamble installed the stdio redactor
    ready = invoke(client, SANDBOX_CI, sbx, preamble_source())[0]
    assert check_readiness(ready["stdout"])
    # When a command prints a token, whole and split across two writes, on stdout and stderr
    script = f"echo {TOKEN}\nprintf '%s' {TOKEN[:9]}; sleep 0.1; echo {TOKEN[9:]}\necho {TOKEN} >&2"
    out, headers = command(client, sbx, script)
    # Then it left the session redacted, and the counts are of what left it
    assert out["stdout"] == "<redacted>\n<redacted>\n" and out["stderr"] == "<redacted>\n", out
    assert headers[naming.LOCAL_STDOUT_BYTES_HEADER] == str(len("<redacted>\n<redacted>\n"))


def _wait_task(
    client: Any, session: str, task_id: str, until: Any = lambda t: t["taskStatus"] != "working"
) -> dict[str, Any]:
    """getTask until `until(structuredContent)` (or 60 s, then the last answer)."""
    deadline = time.monotonic() + 60
    while True:
        structured, _ = tool(client, session, "getTask", taskId=task_id)
        if until(structured) or time.monotonic() > deadline:
            return structured
        time.sleep(0.05)


def test_task_tools_run_a_command_in_the_background(client: Any, sbx: str) -> None:
    # Given a redacting session / When a command starts in the background, waiting for a file
    invoke(client, SANDBOX_CI, sbx, preamble_source())
    script = f"echo start {TOKEN}\nwhile [ ! -e go ]; do sleep 0.02; done\necho done >&2\nexit 3"
    started, start_error = tool(client, sbx, "startCommandExecution", command=script)
    # Then it answers at once with a task id, and getTask shows its output so far, redacted
    assert started["taskStatus"] == "working" and started["taskId"] and start_error is False
    running = _wait_task(client, sbx, started["taskId"], lambda t: t["stdout"])
    assert (running["taskStatus"], running["stdout"]) == ("working", "start <redacted>\n")
    assert "exitCode" not in running
    # And code runs beside it (here: lets it finish), then getTask follows it to its end
    assert (
        invoke(client, SANDBOX_CI, sbx, "open('go', 'w').close()\nprint('beside')")[0]["stdout"] == "beside\n"
    )
    final = _wait_task(client, sbx, started["taskId"])
    assert (final["taskStatus"], final["exitCode"], final["taskId"]) == ("failed", 3, started["taskId"])
    assert (final["stdout"], final["stderr"]) == ("start <redacted>\n", "done\n")


def test_task_tools_stop_a_task_and_refuse_an_unknown_one(client: Any, sbx: str) -> None:
    # Given a long background command
    started, _ = tool(client, sbx, "startCommandExecution", command="echo begun; sleep 600")
    assert _wait_task(client, sbx, started["taskId"], lambda t: t["stdout"])["stdout"] == "begun\n"
    # When it is stopped, and an unknown task is asked for
    stopped, _ = tool(client, sbx, "stopTask", taskId=started["taskId"])
    after, _ = tool(client, sbx, "getTask", taskId=started["taskId"])
    unknown, unknown_error = tool(client, sbx, "getTask", taskId="no-such-task")
    # Then it is canceled (killed with what it started), and stays so
    assert stopped["taskStatus"] == after["taskStatus"] == "canceled"
    assert after["stdout"] == "begun\n" and after["exitCode"] == 137
    assert "sleep 600" not in command(client, sbx, "ps -eo args")[0]["stdout"]
    # And an unknown task id is a tool error naming it
    assert unknown_error is True and "no-such-task" in unknown["stderr"]
