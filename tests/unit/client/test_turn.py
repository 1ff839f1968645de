"""Agent client against a real HTTP endpoint speaking the Lambda Invoke API."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from sandbox_client.errors import SandboxInvalidRequest
from sandbox_client.turn import DispatchUnavailable, SandboxTurn, ToolUnavailable

from tests.support.http import http_endpoint

FAKE_TOOL = {
    "name": "execute_code",
    "description": "the fake dispatch's own words",
    "input_schema": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
}


@pytest.fixture
def fake_dispatch() -> Any:
    """Records each invoke and answers like dispatch would for each action."""
    seen: list[dict[str, Any]] = []

    def answer(path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        event = json.loads(body)
        seen.append({"path": path, "event": event})
        reply = {
            "begin_turn": {"ok": True, "sandbox": {"status": "ready", "tool": FAKE_TOOL}},
            "execute_code": {"ok": True, "stdout": "2\n", "exit_status": "ok"},
            "end_turn": {"ok": True, "stopped": True},
        }.get(event.get("action"))
        if reply is None:
            return 200, {"X-Amz-Function-Error": "Unhandled"}, b'{"errorMessage":"boom"}'
        return 200, {}, json.dumps(reply).encode()

    with http_endpoint(answer) as endpoint:
        yield boto3.client("lambda", endpoint_url=endpoint), seen


def test_sandbox_turn_context_manager_begins_executes_and_ends(fake_dispatch: Any) -> None:
    client, seen = fake_dispatch
    with SandboxTurn(
        "thinkwork-dev-dispatch",
        tenant_id="acme",
        agent_id="a1",
        template_id="analyst",
        turn_id="turn-1",
        lambda_client=client,
    ) as turn:
        assert turn.tool == FAKE_TOOL
        result = turn.execute_code("print(1+1)")
        turn.execute_code("print(2)", call_id="call-fixed")
    assert result.stdout == "2\n"
    actions = [s["event"]["action"] for s in seen]
    assert actions == ["begin_turn", "execute_code", "execute_code", "end_turn"]
    assert all("thinkwork-dev-dispatch" in s["path"] for s in seen)
    first, second = seen[1]["event"], seen[2]["event"]
    assert first["call_id"] != second["call_id"] and second["call_id"] == "call-fixed"
    assert first["code"] == "print(1+1)" and first["turn_id"] == "turn-1"
    assert seen[3]["event"] == {
        "action": "end_turn",
        "tenant_id": "acme",
        "turn_id": "turn-1",
        "turn_token": turn.turn_token,
    }


def test_sandbox_turn_sends_one_generated_turn_token_on_every_action(fake_dispatch: Any) -> None:
    # Given a turn whose caller never mentions a token
    from sandbox_common.turn_token import is_well_formed

    client, seen = fake_dispatch
    with SandboxTurn(
        "fn", tenant_id="acme", agent_id="a1", template_id="analyst", lambda_client=client
    ) as turn:
        turn.execute_code("print(1)")
        turn.execute_code("print(1)", call_id="call-retry")
        turn.execute_code("print(1)", call_id="call-retry")  # a retry carries the same token
    other = SandboxTurn("fn", tenant_id="acme", agent_id="a1", template_id="analyst", lambda_client=client)
    # Then all five actions carried the same well-formed token, and another turn has another one
    tokens = [s["event"]["turn_token"] for s in seen]
    assert len(tokens) == 5
    assert set(tokens) == {turn.turn_token}
    assert is_well_formed(turn.turn_token)
    assert other.turn_token != turn.turn_token


def test_sandbox_turn_function_error_raises_dispatch_unavailable(fake_dispatch: Any) -> None:
    client, _ = fake_dispatch
    turn = SandboxTurn("fn", tenant_id="acme", agent_id="a", template_id="t", lambda_client=client)
    turn._invoke({"action": "begin_turn"})  # known action works
    with pytest.raises(DispatchUnavailable, match="boom"):
        turn._invoke({"action": "unknown"})


def test_execute_tool_input_passes_the_input_and_keeps_the_turns_own_ids(fake_dispatch: Any) -> None:
    # Given a turn of acme/a1
    client, seen = fake_dispatch
    turn = SandboxTurn(
        "fn", tenant_id="acme", agent_id="a1", template_id="analyst", turn_id="turn-1", lambda_client=client
    )
    # When a tool input names another tenant, agent and turn besides its code
    turn.execute_tool_input(
        {"code": "print(1)", "tenant_id": "globex", "agent_id": "x", "turn_id": "t-9", "action": "end_turn"}
    )
    # Then the event carries the input's code and the turn's own action and ids, with a fresh call_id
    event = seen[-1]["event"]
    assert event["code"] == "print(1)"
    assert (event["action"], event["tenant_id"], event["agent_id"], event["turn_id"]) == (
        "execute_code",
        "acme",
        "a1",
        "turn-1",
    )
    assert event["call_id"].startswith("call-")


def test_next_turn_ends_this_turn_and_begins_the_next_in_one_call(fake_dispatch: Any) -> None:
    # Given a begun turn
    client, seen = fake_dispatch
    turn = SandboxTurn(
        "fn",
        tenant_id="acme",
        agent_id="a1",
        template_id="analyst",
        turn_id="turn-1",
        user_id="u-1",
        lambda_client=client,
    )
    turn.begin()
    # When the next turn is asked for
    following = turn.next_turn()
    # Then end_turn of the old turn, then begin_turn of a new one with the same identity
    assert [s["event"]["action"] for s in seen] == ["begin_turn", "end_turn", "begin_turn"]
    assert seen[1]["event"]["turn_id"] == "turn-1"
    assert seen[2]["event"]["turn_id"] == following.turn_id != "turn-1"
    assert (following.tenant_id, following.agent_id, following.template_id, following.user_id) == (
        "acme",
        "a1",
        "analyst",
        "u-1",
    )
    assert following.tool == FAKE_TOOL


def test_strands_tool_of_a_turn_without_a_tool_names_why(fake_dispatch: Any) -> None:
    # Given a turn not begun yet, and one whose begin_turn answered without a tool
    client, seen = fake_dispatch
    fresh = SandboxTurn("fn", tenant_id="acme", agent_id="a1", template_id="analyst", lambda_client=client)
    disabled = SandboxTurn("fn", tenant_id="acme", agent_id="a1", template_id="analyst", lambda_client=client)
    disabled.began = {"ok": True, "sandbox": {"status": "disabled"}}
    # When each is asked for its Strands tool / Then ToolUnavailable says why, and nothing was sent
    with pytest.raises(ToolUnavailable, match="begin_turn has not been called"):
        fresh.strands_tool()
    with pytest.raises(
        ToolUnavailable, match=r"^SandboxProvisioning: no sandbox for this template \(status disabled\)"
    ):
        disabled.strands_tool()
    assert seen == []


def test_strands_tool_serves_the_definition_begin_turn_returned(fake_dispatch: Any) -> None:
    # Given a begun turn (the fake dispatch's tool definition is not the project's own)
    client, _ = fake_dispatch
    turn = SandboxTurn("fn", tenant_id="acme", agent_id="a1", template_id="analyst", lambda_client=client)
    turn.begin()
    # When its Strands tool is built / Then its spec is begin_turn's definition, as returned
    spec = turn.strands_tool().tool_spec
    assert (spec["name"], spec["description"], spec["inputSchema"]["json"]) == (
        "execute_code",
        "the fake dispatch's own words",
        {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
    )


@pytest.fixture
def surface_dispatch() -> Any:
    """A dispatch whose begin_turn serves the project's own tool surface; records each event."""
    from sandbox_common.tool_spec import tool_definitions

    seen: list[dict[str, Any]] = []
    definitions = tool_definitions()

    def answer(path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        event = json.loads(body)
        seen.append(event)
        reply: dict[str, Any] = {
            "begin_turn": {
                "ok": True,
                "sandbox": {"status": "ready", "tool": definitions[0], "tools": definitions},
            },
            "execute_code": {"ok": True, "stdout": "", "exit_status": "ok"},
            "get_job": {"ok": True, "status": "running", "job_id": event.get("job_id"), "elapsed_ms": 5},
            "cancel_job": {"ok": True, "status": "cancelled", "job_id": event.get("job_id")},
            "end_turn": {"ok": True, "stopped": True},
        }[event["action"]]
        return 200, {}, json.dumps(reply).encode()

    with http_endpoint(answer) as endpoint:
        yield boto3.client("lambda", endpoint_url=endpoint), seen


def _turn(client: Any, **extra: Any) -> SandboxTurn:
    return SandboxTurn(
        "fn",
        tenant_id="acme",
        agent_id="a1",
        template_id="analyst",
        turn_id="turn-1",
        lambda_client=client,
        **extra,
    )


def test_begin_tells_dispatch_the_tools_this_client_answers(surface_dispatch: Any) -> None:
    client, seen = surface_dispatch
    # Given a turn with two agent tools, and one with none
    _turn(client, tools={"query_sales": len, "lookup": len}).begin()
    _turn(client).begin()
    # When each begins / Then begin_turn names exactly the tools each can answer from code
    assert [e["client_tools"] for e in seen] == [["lookup", "query_sales"], []]


def test_call_tool_maps_each_tool_of_the_surface_to_its_dispatch_action(surface_dispatch: Any) -> None:
    client, seen = surface_dispatch
    turn = _turn(client)
    turn.begin()
    files = [{"path": "data/a.csv", "content_base64": "YQo="}]
    # When the model calls each tool of the surface
    turn.call_tool("execute_code", {"code": "print(1)", "files": files})
    turn.call_tool("run_command", {"command": "wc -l data/a.csv", "files": files, "background": True})
    job = turn.call_tool("get_job", {"job_id": "job-7"})
    cancelled = turn.call_tool("cancel_job", {"job_id": "job-7"})
    # Then execute_code is sent as is, run_command as execute_code with language bash and the
    # command as code, get_job and cancel_job as their actions (each with the turn's own ids)
    code_event, command_event, job_event, cancel_event = seen[1:]
    assert {k: code_event[k] for k in ("action", "code", "files")} == {
        "action": "execute_code",
        "code": "print(1)",
        "files": files,
    }
    assert "command" not in command_event and "language" not in code_event
    assert {k: command_event[k] for k in ("action", "language", "code", "files", "background")} == {
        "action": "execute_code",
        "language": "bash",
        "code": "wc -l data/a.csv",
        "files": files,
        "background": True,
    }
    assert job_event == {
        "action": "get_job",
        "tenant_id": "acme",
        "agent_id": "a1",
        "turn_id": "turn-1",
        "turn_token": turn.turn_token,
        "job_id": "job-7",
    }
    assert cancel_event["action"] == "cancel_job" and cancel_event["job_id"] == "job-7"
    # And the answers are typed: job answers as JobResult
    assert (job.status, job.elapsed_ms, cancelled.status) == ("running", 5, "cancelled")  # type: ignore[attr-defined]


def test_call_tool_refuses_a_tool_begin_turn_did_not_define_without_sending(surface_dispatch: Any) -> None:
    client, seen = surface_dispatch
    turn = _turn(client)
    # Given a turn not begun / Then ToolUnavailable, nothing sent
    with pytest.raises(ToolUnavailable):
        turn.call_tool("execute_code", {"code": "print(1)"})
    turn.begin()
    # When the model names a tool begin_turn did not define
    with pytest.raises(SandboxInvalidRequest) as refused:
        turn.call_tool("delete_everything", {})
    # Then a refusal the client words (named class first), and only begin_turn was sent
    assert (refused.value.result.ok, refused.value.error) == (False, "SandboxInvalidRequest")
    assert "run_command" in refused.value.error_message
    assert [e["action"] for e in seen] == ["begin_turn"]


def test_strands_tools_serve_every_definition_and_passing_new_tools_asks_begin_turn_again(
    surface_dispatch: Any,
) -> None:
    from strands import tool

    client, seen = surface_dispatch
    turn = _turn(client)
    turn.begin()

    @tool
    def query_sales(region: str) -> dict[str, int]:
        """Sales of a region.

        Args:
            region: the region.
        """
        return {"EU": 1}

    # When the Strands tools are asked for with an agent tool begin_turn was not told of
    tools = turn.strands_tools(tools=[query_sales])
    again = turn.strands_tools(tools=[query_sales])
    # Then every definition is a Strands tool with begin_turn's spec, in its order
    assert [t.tool_spec for t in tools] == [
        {"name": d["name"], "description": d["description"], "inputSchema": {"json": d["input_schema"]}}
        for d in turn.definitions
    ]
    assert [t.tool_name for t in again] == ["execute_code", "run_command", "get_job", "cancel_job"]
    # And begin_turn was asked again once, now naming the tool (the second time added nothing)
    assert [e.get("client_tools") for e in seen if e["action"] == "begin_turn"] == [[], ["query_sales"]]
