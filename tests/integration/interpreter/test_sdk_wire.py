"""Wire compatibility with the official `bedrock-agentcore` SDK's CodeInterpreter client, pointed
at the local interpreter through AWS_ENDPOINT_URL_BEDROCK_AGENTCORE (as a user would), written
against the SDK's behaviour, not ours: sessions, execute_code, upload/download/list/remove
files, execute_command. Resource URIs are relative to the session's working directory, so the
SDK's download_files keys its answer by the paths it asked for (never a host temp path)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.local.interpreter import LocalInterpreterServer
from tests.integration.interpreter._helpers import build_wheel

CI = "sbx_sdk_acme_pub"


@pytest.fixture(scope="module")
def sdk_server() -> Iterator[LocalInterpreterServer]:
    server = LocalInterpreterServer(interpreters={CI: "PUBLIC"}).start()
    yield server
    server.stop()


@pytest.fixture
def code_client(sdk_server: LocalInterpreterServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", sdk_server.endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE_CONTROL", sdk_server.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    # The SDK reads its endpoint overrides at import: import it fresh with the variable set.
    import bedrock_agentcore._utils.endpoints as endpoints
    import bedrock_agentcore.tools.code_interpreter_client as module

    importlib.reload(endpoints)
    module = importlib.reload(module)
    client = module.CodeInterpreter("us-east-1")
    client.start(identifier=CI, session_timeout_seconds=120)
    yield client
    client.stop()


def _structured(response: dict[str, Any]) -> dict[str, Any]:
    events = [e["result"] for e in response["stream"] if "result" in e]
    assert events
    return events[-1]


def test_sdk_session_execute_code_and_command(code_client) -> None:
    # Given an SDK session / When code and a command run
    code = _structured(code_client.execute_code("x = 6 * 7\nprint(x)"))
    again = _structured(code_client.execute_code("print(x + 1)"))
    command = _structured(code_client.execute_command("echo from-shell"))
    info = code_client.get_session()
    # Then the answers are AgentCore's shape and state survives between calls
    assert code["structuredContent"]["stdout"] == "42\n" and code["isError"] is False
    assert again["structuredContent"]["stdout"] == "43\n"
    assert command["structuredContent"]["stdout"].strip() == "from-shell"
    assert info["status"] == "READY" and info["sessionId"] == code_client.session_id


def test_sdk_upload_download_list_remove(code_client) -> None:
    # Given a text and a binary file uploaded with the SDK
    code_client.upload_file("data/a.csv", "x,y\n1,2\n")
    code_client.upload_file("data/b.bin", b"\x00\xff\x10binary")
    # When downloaded, listed, then one removed
    single = code_client.download_file("data/a.csv")
    both = code_client.download_files(["data/a.csv", "data/b.bin"])
    listed = _structured(code_client.invoke("listFiles", {"directoryPath": "data"}))
    code_client.invoke("removeFiles", {"paths": ["data/a.csv"]})
    after = _structured(code_client.invoke("listFiles", {"directoryPath": "data"}))
    seen_by_code = _structured(code_client.execute_code("import os\nprint(sorted(os.listdir('data')))"))
    # Then the SDK keys downloads by the paths asked for, with the exact content
    assert single == "x,y\n1,2\n"
    assert both == {"data/a.csv": "x,y\n1,2\n", "data/b.bin": b"\x00\xff\x10binary"}
    # And listing shows resource links with relative URIs, never a host temp directory
    uris = sorted(b["uri"] for b in listed["content"])
    assert uris == ["file://data/a.csv", "file://data/b.bin"]
    assert all("/tmp/" not in u and "lci-" not in u for u in uris)
    assert [b["name"] for b in after["content"]] == ["b.bin"]
    assert seen_by_code["structuredContent"]["stdout"].strip() == "['b.bin']"


def test_sdk_execute_code_javascript_and_typescript(code_client) -> None:
    # Given an SDK session / When JavaScript and TypeScript run through the SDK's own execute_code
    js = _structured(code_client.execute_code("console.log(6*7)", language="javascript"))
    ts = _structured(
        code_client.execute_code("const n: number = 6 * 7;\nconsole.log(n)", language="typescript")
    )
    # Then Node.js ran them in the session, sharing its files with Python (not its variables)
    code_client.execute_code("x = 1\nopen('from_python.txt', 'w').write('hi')")
    shared = _structured(
        code_client.execute_code(
            "console.log(require('fs').readFileSync('from_python.txt', 'utf8'), typeof x)",
            language="javascript",
        )
    )
    assert (js["structuredContent"]["stdout"], js["isError"]) == ("42\n", False)
    assert (ts["structuredContent"]["stdout"], ts["isError"]) == ("42\n", False)
    assert shared["structuredContent"]["stdout"] == "hi undefined\n"


def test_sdk_javascript_bad_input(code_client) -> None:
    # A syntax error: Node's report on stderr, exit code 1, isError
    syntax = _structured(code_client.execute_code("console.log(", language="javascript"))
    assert syntax["isError"] is True and syntax["structuredContent"]["exitCode"] == 1
    assert "SyntaxError: Unexpected end of input" in syntax["structuredContent"]["stderr"]
    ts = _structured(code_client.execute_code("let x: = 1", language="typescript"))
    assert (
        ts["isError"] is True and "SyntaxError: Type expected. (TS1110)" in ts["structuredContent"]["stderr"]
    )
    # An unknown language, or a runtime the local interpreter does not run: ValidationException
    from botocore.exceptions import ClientError

    for arguments in (
        {"language": "ruby", "code": "puts 1"},
        {"language": "javascript", "code": "1", "runtime": "deno"},
    ):
        with pytest.raises(ClientError) as refused:
            code_client.invoke("executeCode", arguments)
        assert refused.value.response["Error"]["Code"] == "ValidationException"


def test_sdk_control_plane_calls_answer_unsupported_naming_the_local_stack(code_client) -> None:
    from botocore.exceptions import ClientError

    cp = code_client.control_plane_client
    for call in (
        lambda: cp.create_code_interpreter(
            name="x",
            executionRoleArn="arn:aws:iam::123456789012:role/r",
            networkConfiguration={"networkMode": "PUBLIC"},
        ),
        lambda: cp.get_code_interpreter(codeInterpreterId="x"),
        lambda: cp.list_code_interpreters(),
        lambda: cp.delete_code_interpreter(codeInterpreterId="x"),
    ):
        with pytest.raises(ClientError) as refused:
            call()
        error = refused.value.response["Error"]
        assert error["Code"] == "UnsupportedOperationException"
        assert "local stack" in error["Message"] and "<html" not in error["Message"].lower()
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400


def test_sdk_session_stop_terminates(code_client) -> None:
    session_id = code_client.session_id
    code_client.stop()
    assert code_client.get_session(interpreter_id=CI, session_id=session_id)["status"] == "TERMINATED"


SURFACE = Path(__file__).with_name("sdk_surface.py")
# The SDK calls that must pass against the local interpreter.
REQUIRED = (
    "code_session default identifier",
    "execute_code javascript",
    "execute_code typescript",
    "install_packages",
    "installed package importable in code",
    "execute_command python --version",
    "invoke startCommandExecution",
    "invoke getTask",
    "invoke stopTask",
)


def test_sdk_whole_public_surface_unpatched(sdk_server: LocalInterpreterServer, tmp_path: Path) -> None:
    # Given two versions of a package as wheels (no package index needed) and the SDK's own
    # endpoint settings pointing at the local interpreter
    for version, value in (("1.0", 1), ("2.0", 2)):
        build_wheel(tmp_path, version=version, value=value)
    env = {
        **os.environ,
        "BEDROCK_AGENTCORE_DP_ENDPOINT": sdk_server.endpoint,
        "BEDROCK_AGENTCORE_CP_ENDPOINT": sdk_server.endpoint,
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    env.pop("AWS_ENDPOINT_URL", None)
    # When the surface script drives every public call of the unmodified SDK
    done = subprocess.run(
        [sys.executable, str(SURFACE), str(tmp_path), CI],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.splitlines()[-1])
    failed = {r["check"]: r["detail"] for r in report["checks"] if not r["ok"]}
    print(
        f"\nSDK surface: {report['passed']} of {report['total']} checks pass; supported"
        f" {report['supported_passed']} of {report['supported_total']};"
        f" not offered: {sorted(report['unsupported'])}"
    )
    # Then every call the local interpreter offers works, and what fails is exactly what it does not
    # offer, each with a ClientError saying so (never an HTML page)
    assert set(failed) == set(report["unsupported"]), failed
    assert all("UnsupportedOperationException" in detail for detail in failed.values()), failed
    assert report["supported_passed"] == report["supported_total"] >= 47
    assert set(REQUIRED) <= {r["check"] for r in report["checks"] if r["ok"]}
