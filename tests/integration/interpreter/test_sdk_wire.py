"""Wire compatibility with the official `bedrock-agentcore` SDK's CodeInterpreter client, pointed
at the local interpreter through AWS_ENDPOINT_URL_BEDROCK_AGENTCORE (as a user would), written
against the SDK's behaviour, not ours: sessions, execute_code, upload/download/list/remove
files, execute_command. Resource URIs are relative to the session's working directory, so the
SDK's download_files keys its answer by the paths it asked for (never a host temp path)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import pytest

from infra.local.interpreter import LocalInterpreterServer

CI = "sbx_sdk_acme_pub"


@pytest.fixture(scope="module")
def sdk_server() -> Iterator[LocalInterpreterServer]:
    server = LocalInterpreterServer(interpreters={CI: "PUBLIC"}).start()
    yield server
    server.stop()


@pytest.fixture
def code_client(sdk_server: LocalInterpreterServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", sdk_server.endpoint)
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


def test_sdk_session_stop_terminates(code_client) -> None:
    session_id = code_client.session_id
    code_client.stop()
    assert code_client.get_session(interpreter_id=CI, session_id=session_id)["status"] == "TERMINATED"
