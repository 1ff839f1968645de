"""The local Code Interpreter speaks the real bedrock-agentcore protocol to the unmodified boto3 client."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from botocore.exceptions import ClientError
from sandbox_common import naming

from infra.local.interpreter import Limits, LocalInterpreterServer, wait_ready
from infra.local.interpreter.registry import DEFAULT_INTERPRETER_ID
from tests.integration.interpreter._helpers import OTHER_CI, PUBLIC_CI, invoke, make_client


def _error(exc: pytest.ExceptionInfo[ClientError]) -> tuple[str, int]:
    err = exc.value.response
    return err["Error"]["Code"], err["ResponseMetadata"]["HTTPStatusCode"]


def test_execute_code_state_persists_across_calls(client: Any, session: str) -> None:
    # Given a session where the first call defines a variable and imports a module
    invoke(client, PUBLIC_CI, session, "x = 41\nimport math")

    # When a later call uses both
    result, events, headers = invoke(client, PUBLIC_CI, session, "print(x + 1, math.floor(2.5))")

    # Then the state survived, and the answer is a real event stream with AgentCore's shape
    assert result["stdout"] == "42 2\n"
    assert result["stderr"] == ""
    assert result["exitCode"] == 0
    assert result["taskStatus"] == "completed"
    assert isinstance(result["executionTime"], float)
    assert events[-1]["isError"] is False
    assert events[-1]["content"] == [{"type": "text", "text": "42 2\n"}]
    assert headers["content-type"] == "application/vnd.amazon.eventstream"
    assert headers["x-amzn-code-interpreter-session-id"] == session


def test_user_code_cannot_import_the_worker_by_its_short_names(client: Any, session: str) -> None:
    # Given a session (its worker package was started as `python -I <its directory>`)
    # When user code looks for the worker's modules by their short names, and at sys.path
    code = (
        "import importlib.util, sys\n"
        "print([n for n in ('frames', 'kernel', 'capture', 'commands', 'files')"
        " if importlib.util.find_spec(n) is not None])\n"
        "print(any(p.rstrip('/').endswith('worker') for p in sys.path))"
    )
    result, _, _ = invoke(client, PUBLIC_CI, session, code)

    # Then none is importable (a module of the user's own named `files` is not shadowed by ours)
    assert result["stdout"] == "[]\nFalse\n", result["stderr"]


def test_execute_code_trailing_expression_is_displayed(client: Any, session: str) -> None:
    # Given / When a cell that ends in an expression (a notebook cell, as AgentCore's kernel)
    result, _, _ = invoke(client, PUBLIC_CI, session, "y = 6 * 7\ny")

    # Then its repr is the output
    assert result["stdout"] == "42\n"


def test_execute_code_exception_gives_exit_1_and_traceback(client: Any, session: str) -> None:
    # Given / When a snippet that raises
    result, events, _ = invoke(client, PUBLIC_CI, session, "def f():\n    return 1 / 0\nf()")

    # Then exit code 1, the user's traceback on stderr (no worker frames), isError true
    assert result["exitCode"] == 1
    assert result["taskStatus"] == "failed"
    assert result["stderr"].startswith("Traceback (most recent call last):")
    assert "ZeroDivisionError: division by zero" in result["stderr"]
    assert 'File "<cell-' in result["stderr"] and "return 1 / 0" in result["stderr"]
    assert "local-interpreter" not in result["stderr"] and "kernel.py" not in result["stderr"]
    assert events[-1]["isError"] is True

    # And the session is still usable
    assert invoke(client, PUBLIC_CI, session, "print('alive')")[0]["stdout"] == "alive\n"


def test_execute_code_syntax_error_gives_exit_1(client: Any, session: str) -> None:
    # Given / When code that does not parse
    result, _, _ = invoke(client, PUBLIC_CI, session, "def (:")

    # Then a SyntaxError, exit 1
    assert result["exitCode"] == 1
    assert "SyntaxError" in result["stderr"]


@pytest.mark.parametrize(
    ("code", "expected"),
    [("import sys; sys.exit(3)", 3), ("import sys; sys.exit()", 0), ("raise SystemExit('bye')", 1)],
)
def test_execute_code_sys_exit_sets_exit_code(client: Any, session: str, code: str, expected: int) -> None:
    # Given / When the code exits
    result, _, _ = invoke(client, PUBLIC_CI, session, code)

    # Then its status is the exit code, and the session survives
    assert result["exitCode"] == expected
    assert invoke(client, PUBLIC_CI, session, "print(1)")[0]["exitCode"] == 0


def test_execute_code_captures_subprocess_output_at_fd_level(client: Any, session: str) -> None:
    # Given / When output written by a child process and straight to the fds
    code = (
        "import os, subprocess\nsubprocess.run(['sh', '-c', 'echo out; echo err >&2'])\nos.write(1,"
        " b'raw\\n')\nNone"
    )
    result, _, _ = invoke(client, PUBLIC_CI, session, code)

    # Then it is captured like print output
    assert result["stdout"] == "out\nraw\n"
    assert result["stderr"] == "err\n"


def test_execute_code_stdout_wrapper_installed_once_persists(client: Any, session: str) -> None:
    # Given a first call that wraps sys.stdout, as the readiness preamble installs its redactor
    preamble = (
        "import sys\n"
        "class Upper:\n"
        "    def __init__(self, inner): self.inner = inner\n"
        "    def write(self, s): return self.inner.write(s.upper())\n"
        "    def flush(self): self.inner.flush()\n"
        "sys.stdout = Upper(sys.stdout)\n"
        "print('installed')"
    )
    assert invoke(client, PUBLIC_CI, session, preamble)[0]["stdout"] == "INSTALLED\n"

    # When a later call prints
    result, _, _ = invoke(client, PUBLIC_CI, session, "print('secret')")

    # Then the wrapper from call #1 is still in the path
    assert result["stdout"] == "SECRET\n"


def test_execute_code_long_output_streams_several_events(client: Any, session: str) -> None:
    # Given / When output larger than one event's chunk, stderr beyond what the interpreter keeps
    result, events, headers = invoke(
        client, PUBLIC_CI, session, "print('a' * 200_000)\nimport sys; print('e' * 70_000, file=sys.stderr)"
    )

    # Then content-only events come first and the terminal event carries everything once
    assert len(events) >= 4
    assert all("structuredContent" not in e for e in events[:-1])
    assert events[-1]["content"] == []
    assert result["stdout"] == "a" * 200_000 + "\n"
    # And stderr is kept up to its cap plus the redaction margin, counted in full
    assert result["stderr"] == "e" * Limits().stderr_kept
    assert headers[naming.LOCAL_STDERR_BYTES_HEADER] == "70001"
    text = "".join(block["text"] for e in events for block in e["content"])
    assert text == result["stdout"] + result["stderr"]  # a parser adding both would double-count


def test_execute_code_unicode_round_trips_byte_exact(client: Any, session: str) -> None:
    # Given code with non-ASCII text
    code = "s = 'héllo – 🙂'\nprint(s)"

    # When it runs
    result, _, _ = invoke(client, PUBLIC_CI, session, code)

    # Then the output is the same characters
    assert result["stdout"] == "héllo – 🙂\n"


def test_execute_code_clear_context_resets_variables(client: Any, session: str) -> None:
    # Given a defined variable
    invoke(client, PUBLIC_CI, session, "z = 1")

    # When the next call asks for a clear context
    result, _, _ = invoke(
        client,
        PUBLIC_CI,
        session,
        "",
        arguments={"language": "python", "code": "print('z' in globals())", "clearContext": True},
    )

    # Then the variable is gone
    assert result["stdout"] == "False\n"


def test_file_tools_and_execute_command_round_trip(client: Any, session: str) -> None:
    # Given a file written with writeFiles
    written, _, _ = invoke(
        client,
        PUBLIC_CI,
        session,
        "",
        name="writeFiles",
        arguments={"content": [{"path": "data/in.txt", "text": "hello file"}]},
    )
    assert written["exitCode"] == 0

    # When code, a shell command, readFiles and listFiles look at it
    from_code = invoke(client, PUBLIC_CI, session, "print(open('data/in.txt').read())")[0]
    from_shell = invoke(
        client, PUBLIC_CI, session, "", name="executeCommand", arguments={"command": "cat data/in.txt"}
    )[0]
    _, read_events, _ = invoke(
        client, PUBLIC_CI, session, "", name="readFiles", arguments={"paths": ["data/in.txt"]}
    )
    _, list_events, _ = invoke(
        client, PUBLIC_CI, session, "", name="listFiles", arguments={"directoryPath": "data"}
    )
    escaped, escaped_events, _ = invoke(
        client, PUBLIC_CI, session, "", name="readFiles", arguments={"paths": ["../../etc/passwd"]}
    )

    # Then all see the same content, and nothing outside the session directory is reachable
    assert from_code["stdout"] == "hello file\n"
    assert from_shell["stdout"] == "hello file" and from_shell["exitCode"] == 0
    assert read_events[-1]["content"][0]["resource"]["text"] == "hello file"
    assert [b["name"] for b in list_events[-1]["content"]] == ["in.txt"]
    assert escaped_events[-1]["isError"] is True and escaped["exitCode"] != 0


def test_read_files_of_large_files_streams_one_event_per_file(client: Any, session: str) -> None:
    # Given two files of 300 KB each (text and binary), larger than one event's chunk together
    invoke(
        client,
        PUBLIC_CI,
        session,
        "open('t.txt','w').write('é' * 150_000)\nopen('b.bin','wb').write(bytes(range(256)) * 1200)",
    )

    # When both are read in one readFiles call
    result, events, _ = invoke(
        client, PUBLIC_CI, session, "", name="readFiles", arguments={"paths": ["t.txt", "b.bin"]}
    )

    # Then each file comes in a content-only event of its own, the terminal event last and empty
    assert result["exitCode"] == 0
    assert len(events) == 3
    assert [len(e["content"]) for e in events[:2]] == [1, 1] and events[2]["content"] == []
    assert all("structuredContent" not in e for e in events[:2])
    assert events[0]["content"][0]["resource"]["text"] == "é" * 150_000
    assert events[1]["content"][0]["resource"]["blob"] == bytes(range(256)) * 1200


def test_stop_then_invoke_and_stop_raise_resource_not_found(client: Any) -> None:
    # Given a started session
    session_id = client.start_code_interpreter_session(codeInterpreterIdentifier=PUBLIC_CI)["sessionId"]
    assert (
        client.get_code_interpreter_session(codeInterpreterIdentifier=PUBLIC_CI, sessionId=session_id)[
            "status"
        ]
        == "READY"
    )

    # When it is stopped
    stopped = client.stop_code_interpreter_session(codeInterpreterIdentifier=PUBLIC_CI, sessionId=session_id)

    # Then it is TERMINATED for Get, and gone for Invoke and a second Stop
    assert stopped["sessionId"] == session_id and "lastUpdatedAt" in stopped
    got = client.get_code_interpreter_session(codeInterpreterIdentifier=PUBLIC_CI, sessionId=session_id)
    assert got["status"] == "TERMINATED"
    with pytest.raises(ClientError) as exc:
        invoke(client, PUBLIC_CI, session_id, "print(1)")
    assert _error(exc) == ("ResourceNotFoundException", 404)
    with pytest.raises(client.exceptions.ResourceNotFoundException):
        client.stop_code_interpreter_session(codeInterpreterIdentifier=PUBLIC_CI, sessionId=session_id)


def test_start_session_describes_itself(client: Any) -> None:
    # Given / When a session started with a name and a timeout
    started = client.start_code_interpreter_session(
        codeInterpreterIdentifier=PUBLIC_CI, name="turn-1", sessionTimeoutSeconds=300
    )
    got = client.get_code_interpreter_session(
        codeInterpreterIdentifier=PUBLIC_CI, sessionId=started["sessionId"]
    )
    client.stop_code_interpreter_session(codeInterpreterIdentifier=PUBLIC_CI, sessionId=started["sessionId"])

    # Then the ids match the model's pattern and Get reports what Start was given
    assert started["codeInterpreterIdentifier"] == PUBLIC_CI
    assert len(started["sessionId"]) == 26 and started["sessionId"].isalnum()
    assert (got["name"], got["sessionTimeoutSeconds"], got["status"]) == ("turn-1", 300, "READY")
    assert got["createdAt"] == started["createdAt"]


def test_interpreter_arn_names_the_same_interpreter(client: Any) -> None:
    # Given an interpreter addressed by its ARN rather than its id
    arn = f"arn:aws:bedrock-agentcore:us-east-1:123456789012:code-interpreter-custom/{PUBLIC_CI}"

    # When a session is started and used through the ARN
    session_id = client.start_code_interpreter_session(codeInterpreterIdentifier=arn)["sessionId"]
    result = invoke(client, arn, session_id, "print('via arn')")[0]
    client.stop_code_interpreter_session(codeInterpreterIdentifier=PUBLIC_CI, sessionId=session_id)

    # Then it is the same interpreter as its id
    assert result["stdout"] == "via arn\n"


def test_start_session_same_client_token_returns_same_session(client: Any) -> None:
    # Given a client token (botocore fills one per call; a retry reuses it)
    token = "a" * 40

    # When Start is sent twice with it
    first = client.start_code_interpreter_session(codeInterpreterIdentifier=PUBLIC_CI, clientToken=token)
    second = client.start_code_interpreter_session(codeInterpreterIdentifier=PUBLIC_CI, clientToken=token)
    client.stop_code_interpreter_session(codeInterpreterIdentifier=PUBLIC_CI, sessionId=first["sessionId"])

    # Then only one session exists
    assert first["sessionId"] == second["sessionId"]


def test_unknown_interpreter_raises_resource_not_found(client: Any, session: str) -> None:
    # Given / When every operation names an interpreter that does not exist
    calls = [
        lambda: client.start_code_interpreter_session(codeInterpreterIdentifier="nope"),
        lambda: invoke(client, "nope", session, "print(1)"),
        lambda: client.get_code_interpreter_session(codeInterpreterIdentifier="nope", sessionId=session),
        lambda: client.stop_code_interpreter_session(codeInterpreterIdentifier="nope", sessionId=session),
    ]

    # Then each is a 404 ResourceNotFoundException
    for call in calls:
        with pytest.raises(ClientError) as exc:
            call()
        assert _error(exc) == ("ResourceNotFoundException", 404)


def test_session_of_other_interpreter_is_not_found(client: Any, session: str) -> None:
    # Given a session of interpreter A (the `session` fixture) and an unknown id
    # When B is asked about it, and A about an id that never existed
    outcomes = []
    for call in (
        lambda: invoke(client, OTHER_CI, session, "print(1)"),
        lambda: client.get_code_interpreter_session(codeInterpreterIdentifier=OTHER_CI, sessionId=session),
        lambda: client.stop_code_interpreter_session(codeInterpreterIdentifier=OTHER_CI, sessionId=session),
        lambda: invoke(client, PUBLIC_CI, "01ZZZZZZZZZZZZZZZZZZZZZZZZ", "print(1)"),
    ):
        with pytest.raises(ClientError) as exc:
            call()
        outcomes.append((_error(exc), exc.value.response["Error"]["Message"].split()[0]))

    # Then all are the same 404 (existence does not leak), and the session still works on A
    assert {o[0] for o in outcomes} == {("ResourceNotFoundException", 404)}
    assert {o[1] for o in outcomes} == {"Session"}
    assert invoke(client, PUBLIC_CI, session, "print('still mine')")[0]["stdout"] == "still mine\n"


def test_invoke_without_session_id_is_validation_error(client: Any) -> None:
    # Given / When an invoke with no session header
    with pytest.raises(ClientError) as exc:
        client.invoke_code_interpreter(
            codeInterpreterIdentifier=PUBLIC_CI,
            name="executeCode",
            arguments={"language": "python", "code": "1"},
        )

    # Then a 400 ValidationException with a reason
    assert _error(exc) == ("ValidationException", 400)
    assert exc.value.response["reason"] == "FieldValidationFailed"


@pytest.mark.parametrize(
    "arguments",
    [
        {"language": "python"},
        {"language": "ruby", "code": "1"},
        {"language": "typescript", "code": "1", "runtime": "deno"},
        {"language": "python", "code": "1", "runtime": "nodejs"},
    ],
)
def test_invoke_bad_arguments_are_validation_errors(
    client: Any, session: str, arguments: dict[str, Any]
) -> None:
    # Given / When executeCode without code, in a language outside the model's enum, or with a
    # runtime the local interpreter does not run that language with
    with pytest.raises(ClientError) as exc:
        invoke(client, PUBLIC_CI, session, "", arguments=arguments)

    # Then ValidationException
    assert _error(exc) == ("ValidationException", 400)


def test_raw_http_bad_json_and_bad_timeout_are_validation_errors(server: LocalInterpreterServer) -> None:
    # Given requests botocore would never send (its own validation stops them first)
    cases = [
        (b"{not json", "CannotParse"),
        (json.dumps({"sessionTimeoutSeconds": 0}).encode(), "FieldValidationFailed"),
        (json.dumps({"sessionTimeoutSeconds": 28_801}).encode(), "FieldValidationFailed"),
    ]
    for body, reason in cases:
        request = urllib.request.Request(
            f"{server.endpoint}/code-interpreters/{PUBLIC_CI}/sessions/start",
            data=body,
            method="PUT",
            headers={"Content-Type": "application/json"},
        )
        # When they reach the server
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(request)

        # Then each is a 400 with the error type header and a JSON message
        assert exc.value.code == 400
        assert exc.value.headers["x-amzn-errortype"] == "ValidationException"
        assert json.loads(exc.value.read())["reason"] == reason


def test_list_sessions_filters_by_status(client: Any) -> None:
    # Given one stopped and one running session on the interpreter
    stopped = client.start_code_interpreter_session(codeInterpreterIdentifier=OTHER_CI)["sessionId"]
    client.stop_code_interpreter_session(codeInterpreterIdentifier=OTHER_CI, sessionId=stopped)
    running = client.start_code_interpreter_session(codeInterpreterIdentifier=OTHER_CI)["sessionId"]

    # When listed by status
    ready = client.list_code_interpreter_sessions(codeInterpreterIdentifier=OTHER_CI, status="READY")["items"]
    gone = client.list_code_interpreter_sessions(codeInterpreterIdentifier=OTHER_CI, status="TERMINATED")[
        "items"
    ]
    client.stop_code_interpreter_session(codeInterpreterIdentifier=OTHER_CI, sessionId=running)

    # Then each appears under its own status only
    assert running in [i["sessionId"] for i in ready] and stopped not in [i["sessionId"] for i in ready]
    assert stopped in [i["sessionId"] for i in gone]


def test_session_survives_the_connection_that_started_it(server: LocalInterpreterServer) -> None:
    # Given a session started over a connection that is then closed (its handler thread ends)
    first = make_client(server.endpoint)
    session_id = first.start_code_interpreter_session(codeInterpreterIdentifier=PUBLIC_CI)["sessionId"]
    invoke(first, PUBLIC_CI, session_id, "kept = 'yes'")
    first.close()
    time.sleep(0.3)

    # When another client uses it
    second = make_client(server.endpoint)
    result, _, _ = invoke(second, PUBLIC_CI, session_id, "print(kept)")
    second.stop_code_interpreter_session(codeInterpreterIdentifier=PUBLIC_CI, sessionId=session_id)

    # Then the process was not tied to the first connection's thread (pdeathsig pitfall)
    assert result["stdout"] == "yes\n"


def test_ping_and_wait_ready(server: LocalInterpreterServer) -> None:
    # Given / When the health endpoint is polled
    wait_ready(server.endpoint, timeout=2)

    # Then it answers 200
    with urllib.request.urlopen(f"{server.endpoint}/ping") as response:
        assert response.status == 200


def test_wait_ready_times_out_on_a_dead_endpoint() -> None:
    # Given / When nothing listens there
    # Then wait_ready gives up with TimeoutError
    with pytest.raises(TimeoutError):
        wait_ready("http://127.0.0.1:9", timeout=0.3)


def test_execute_code_trailing_expression_is_counted_like_output(client: Any, session: str) -> None:
    # Given / When a cell whose only output is its trailing expression's repr
    result, _, headers = invoke(client, PUBLIC_CI, session, "x = 20\nx * 3")
    # Then it is output like any other: shown and counted (the byte count dispatch reports)
    assert result["stdout"] == "60\n"
    assert headers[naming.LOCAL_STDOUT_BYTES_HEADER] == "3"


def test_execution_time_is_in_milliseconds(client: Any, session: str) -> None:
    """executionTime is "the execution time of the tool operation in milliseconds" (API reference,
    https://docs.aws.amazon.com/bedrock-agentcore/latest/APIReference/API_ToolResultStructuredContent.html,
    and the botocore model's ToolResultStructuredContent.executionTime)."""
    # Given / When code that takes at least 300 ms
    result, _, _ = invoke(client, PUBLIC_CI, session, "import time\ntime.sleep(0.3)")
    # Then its executionTime says at least 300 (ms), not 0.3 (s)
    assert 300 <= result["executionTime"] < 60_000, result["executionTime"]


def test_default_identifier_is_a_builtin_public_interpreter_of_no_tenant(
    client: Any, server: LocalInterpreterServer, session: str
) -> None:
    # Given the official SDK's default identifier, bare and as an ARN
    arn = f"arn:aws:bedrock-agentcore:us-east-1:aws:code-interpreter/{DEFAULT_INTERPRETER_ID}"
    # When sessions start on it
    started = [
        client.start_code_interpreter_session(codeInterpreterIdentifier=ci)["sessionId"]
        for ci in (DEFAULT_INTERPRETER_ID, arn)
    ]
    try:
        ran = invoke(client, DEFAULT_INTERPRETER_ID, started[0], "print(6 * 7)")[0]["stdout"]
        modes = [server.session(s).network_mode for s in started]  # type: ignore[union-attr]
        listed = client.list_code_interpreter_sessions(codeInterpreterIdentifier=DEFAULT_INTERPRETER_ID)
        with pytest.raises(ClientError) as foreign:  # a tenant's session is not found under it
            invoke(client, DEFAULT_INTERPRETER_ID, session, "print(1)")
    finally:
        for session_id in started:
            client.stop_code_interpreter_session(
                codeInterpreterIdentifier=DEFAULT_INTERPRETER_ID, sessionId=session_id
            )
    # Then they run code, as PUBLIC sessions, and its sessions are its own
    assert ran == "42\n" and modes == ["PUBLIC", "PUBLIC"]
    assert {i["sessionId"] for i in listed["items"]} >= set(started) and session not in {
        i["sessionId"] for i in listed["items"]
    }
    assert _error(foreign) == ("ResourceNotFoundException", 404)
    # And nobody can register (hence re-mode) that name
    request = urllib.request.Request(
        f"{server.endpoint}/_local/interpreters",
        data=json.dumps({"interpreterId": DEFAULT_INTERPRETER_ID, "networkMode": "SANDBOX"}).encode(),
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 400
