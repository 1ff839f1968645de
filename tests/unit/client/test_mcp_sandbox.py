"""The MCP server's turn (sandbox_client/mcp_server.McpSandbox) when dispatch cannot be reached
at first: it says what to fix at every tool call, and begins the turn once dispatch is there. A
real HTTP endpoint speaks the Lambda Invoke API (the stdio transport is tested end to end in
tests/integration/agents)."""

from __future__ import annotations

import json
from typing import Any

import boto3
from sandbox_client.mcp_server import McpSandbox
from sandbox_client.turn import DispatchUnavailable
from sandbox_common.tool_spec import SurfaceLimits, tool_definitions

from tests.support.http import http_endpoint

FIX = "the local stack is not running (state dir /x); start it with `sandboxctl local up`"


def test_mcp_sandbox_unreachable_then_reachable_answers_what_to_fix_then_serves() -> None:
    seen: list[dict[str, Any]] = []
    definitions = tool_definitions()

    def answer(path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        event = json.loads(body)
        seen.append(event)
        reply = {
            "begin_turn": {
                "ok": True,
                "sandbox": {"status": "ready", "tool": definitions[0], "tools": definitions},
            },
            "execute_code": {"ok": True, "stdout": "2\n", "exit_status": "ok", "files": []},
        }[event["action"]]
        return 200, {}, json.dumps(reply).encode()

    with http_endpoint(answer) as endpoint:
        reachable = {"now": False}

        def connect() -> tuple[Any, str]:
            if not reachable["now"]:
                raise DispatchUnavailable(FIX)
            return boto3.client("lambda", endpoint_url=endpoint), "fn"

        sandbox = McpSandbox(connect, tenant_id="acme", agent_id="a1", template_id="analyst")
        # Given a server started while dispatch cannot be reached
        sandbox.begin()
        # When the host lists tools and calls one
        listed = sandbox.tools()
        refused = sandbox.call("execute_code", {"code": "print(1+1)"})
        # Then the packaged tools (dispatch's at the default figures), and the call is a tool error
        # saying what to fix; nothing reached dispatch
        assert [t.name for t in listed] == [d["name"] for d in definitions] and seen == []
        assert [t.input_schema for t in listed] == [d["input_schema"] for d in definitions]
        assert refused.is_error is True
        assert refused.content[0].text == f"DispatchUnavailable: {FIX}"  # type: ignore[union-attr]
        # When dispatch becomes reachable / Then the next call begins the turn (told no client
        # tools: an MCP host answers none) and runs
        reachable["now"] = True
        called = sandbox.call("execute_code", {"code": "print(1+1)"})
        assert called.is_error is False and called.structured_content["stdout"] == "2\n"  # type: ignore[index]
        assert [(e["action"], e.get("client_tools")) for e in seen] == [
            ("begin_turn", []),
            ("execute_code", None),
        ]
        assert [t.name for t in sandbox.tools()] == [d["name"] for d in definitions]
        assert [e["action"] for e in seen].count("begin_turn") == 1  # begun once it worked
        assert sandbox.tools_changed() is False  # begin_turn served what was listed: nothing to announce


def test_mcp_sandbox_announces_once_when_begin_turn_serves_other_tools() -> None:
    # Given a stage whose begin_turn answers other figures than the packaged copy's
    other = tool_definitions(limits=SurfaceLimits(call_timeout_seconds=30))

    def answer(path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        reply = {"ok": True, "sandbox": {"status": "ready", "tool": other[0], "tools": other}}
        return 200, {}, json.dumps(reply).encode()

    with http_endpoint(answer) as endpoint:
        reachable = {"now": False}

        def connect() -> tuple[Any, str]:
            if not reachable["now"]:
                raise DispatchUnavailable(FIX)
            return boto3.client("lambda", endpoint_url=endpoint), "fn"

        sandbox = McpSandbox(connect, tenant_id="acme", agent_id="a1", template_id="analyst")
        listed = sandbox.tools()  # the packaged copy, while dispatch is unreachable
        assert sandbox.tools_changed() is False
        # When dispatch becomes reachable and begin_turn answers
        reachable["now"] = True
        sandbox.begin()
        # Then the change is reported once, and the next list serves begin_turn's
        assert sandbox.tools_changed() is True and sandbox.tools_changed() is False
        assert [t.description for t in sandbox.tools()] == [d["description"] for d in other]
        assert [t.description for t in listed] != [d["description"] for d in other]
