"""Agent client (§4.6) against a real HTTP endpoint speaking the Lambda Invoke API."""

from __future__ import annotations

import importlib.util
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread
from typing import Any

import boto3
import pytest
from sandbox_common.agent_client import DispatchUnavailable, SandboxTurn


@pytest.fixture
def fake_dispatch() -> Any:
    """Records each invoke and answers like dispatch would for each action."""
    seen: list[dict[str, Any]] = []

    class H(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            event = json.loads(self.rfile.read(int(self.headers["content-length"])))
            seen.append({"path": self.path, "event": event})
            answer = {
                "begin_turn": {"ok": True, "sandbox": {"status": "ready", "tool": {"name": "execute_code"}}},
                "execute_code": {"ok": True, "stdout": "2\n", "exit_status": "ok"},
                "end_turn": {"ok": True, "stopped": True},
            }.get(event.get("action"))
            body = json.dumps(answer).encode() if answer else b'{"errorMessage":"boom"}'
            self.send_response(200)
            if answer is None:
                self.send_header("X-Amz-Function-Error", "Unhandled")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), H)
    Thread(target=server.serve_forever, daemon=True).start()
    client = boto3.client("lambda", endpoint_url=f"http://127.0.0.1:{server.server_port}")
    yield client, seen
    server.shutdown()


def test_sandbox_turn_context_manager_begins_executes_and_ends(fake_dispatch: Any) -> None:
    client, seen = fake_dispatch
    with SandboxTurn("thinkwork-dev-dispatch", tenant_id="acme", agent_id="a1", template_id="analyst",
                     turn_id="turn-1", lambda_client=client) as turn:  # fmt: skip
        assert turn.tool == {"name": "execute_code"}
        result = turn.execute_code("print(1+1)")
        turn.execute_code("print(2)", call_id="call-fixed")
    assert result["stdout"] == "2\n"
    actions = [s["event"]["action"] for s in seen]
    assert actions == ["begin_turn", "execute_code", "execute_code", "end_turn"]
    assert all("thinkwork-dev-dispatch" in s["path"] for s in seen)
    first, second = seen[1]["event"], seen[2]["event"]
    assert first["call_id"] != second["call_id"] and second["call_id"] == "call-fixed"
    assert first["code"] == "print(1+1)" and first["turn_id"] == "turn-1"
    assert seen[3]["event"] == {"action": "end_turn", "tenant_id": "acme", "turn_id": "turn-1"}


def test_sandbox_turn_function_error_raises_dispatch_unavailable(fake_dispatch: Any) -> None:
    client, _ = fake_dispatch
    turn = SandboxTurn("fn", tenant_id="acme", agent_id="a", template_id="t", lambda_client=client)
    turn._invoke({"action": "begin_turn"})  # known action works
    with pytest.raises(DispatchUnavailable, match="boom"):
        turn._invoke({"action": "unknown"})


@pytest.mark.skipif(importlib.util.find_spec("strands") is not None, reason="strands-agents installed")
def test_strands_tool_without_strands_says_how_to_install() -> None:
    turn = SandboxTurn("fn", tenant_id="acme", agent_id="a", template_id="t")
    with pytest.raises(ImportError, match="strands-agents"):
        turn.strands_tool()
