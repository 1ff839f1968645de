"""Agents' ways in, against one real local stack (`sandboxctl local up` in a temporary state dir,
the suite's `env` fixture): the MCP server driven by the official SDK's own client over
stdio (`sandboxctl --local mcp` as a subprocess), the Strands tool through a real
`strands.Agent`, and `sandboxctl usage` over the audit rows those calls wrote."""

from __future__ import annotations

import base64
import json
import subprocess
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from sandbox_client import SandboxCapExceeded, SandboxRefused
from sandbox_client.contract import MCP_SERVER_NAME
from sandbox_client.turn import SandboxTurn
from sandbox_common import dimensions
from sandbox_common import naming as n

from infra.local.state import LocalState
from tests.support.local_stack import SANDBOXCTL, ctl
from tests.support.mcp_client import mcp_args, run_mcp, text_of

TENANT, TEMPLATE = "acme", "analyst"
CAP_TENANT = "globex"  # only the cap-breach test uses it: its kill switch touches nobody else


def _session_status(state: LocalState, tenant_id: str, session_id: str) -> str:
    interpreter = next(
        i["id"]
        for i in state.resources.interpreters
        if i["tenant_id"] == tenant_id and i["environment"] == "default-public"
    )
    got = state.client("bedrock-agentcore").get_code_interpreter_session(
        codeInterpreterIdentifier=interpreter, sessionId=session_id
    )
    return str(got["status"])


# --- MCP -------------------------------------------------------------------------------------------
def _mcp(env: dict[str, str], tenant_id: str, turn_id: str, script: Any) -> Any:
    """Run `script(session)` inside one MCP session with `sandboxctl --local mcp` (stdio)."""
    return run_mcp(env, mcp_args(tenant_id, TEMPLATE, turn_id), script)


_text = text_of


def test_mcp_execute_code_shares_state_across_calls_and_shutdown_stops_the_session(
    env: dict[str, str], state: LocalState
) -> None:
    # Given one MCP session (one turn)
    async def script(session: ClientSession) -> Any:
        first = await session.call_tool("execute_code", {"code": "x = 20"})
        second = await session.call_tool("execute_code", {"code": "print(x * 2 + 2)"})
        return first, second

    # When two calls run in it and the client then closes the session
    first, second = _mcp(env, TENANT, f"mcp-state-{uuid.uuid4().hex[:8]}", script)
    # Then both succeeded, the second saw the first's variable, as text and as structured content
    assert first.is_error is False and second.is_error is False
    assert second.structured_content["stdout"] == "42\n"
    assert json.loads(_text(second))["stdout"] == "42\n"
    assert first.structured_content["session_id"] == second.structured_content["session_id"]
    # And closing the MCP session ended the turn: its interpreter session is stopped
    assert _session_status(state, TENANT, second.structured_content["session_id"]) == "TERMINATED"


def test_mcp_python_error_and_invalid_input_are_tool_errors_naming_the_class(env: dict[str, str]) -> None:
    # Given an MCP session
    async def script(session: ClientSession) -> Any:
        raised = await session.call_tool("execute_code", {"code": "1/0"})
        empty = await session.call_tool("execute_code", {"code": ""})
        extra = await session.call_tool("execute_code", {"code": "print(1)", "tenant_id": "globex"})
        return raised, empty, extra

    # When code raises, code is empty, and the input carries a field the schema does not allow
    raised, empty, extra = _mcp(env, TENANT, f"mcp-err-{uuid.uuid4().hex[:8]}", script)
    # Then each is an MCP tool error whose text starts with the named class
    assert raised.is_error is True
    assert _text(raised).startswith("SandboxError: The code raised ZeroDivisionError: division by zero")
    assert "ZeroDivisionError" in raised.structured_content["stderr"]
    # And what the code raised is structured, as dispatch answered it
    exception = raised.structured_content["exception"]
    assert (exception["name"], exception["value"]) == ("ZeroDivisionError", "division by zero")
    assert exception["traceback"].endswith("ZeroDivisionError: division by zero\n")
    assert empty.is_error is True and _text(empty).startswith("SandboxInvalidRequest: code: ")
    assert extra.is_error is True and _text(extra).startswith("SandboxInvalidRequest: ")


def test_mcp_cap_breach_arrives_as_a_tool_error_naming_sandbox_cap_exceeded(env: dict[str, str]) -> None:
    # Given globex's agents at an hourly cap of 0 (the kill switch)
    assert ctl(env, "caps", "set", "agent_hourly", "0", "--tenant", CAP_TENANT).returncode == 0

    async def script(session: ClientSession) -> Any:
        return await session.call_tool("execute_code", {"code": "print(1)"})

    # When the MCP client calls execute_code
    result = _mcp(env, CAP_TENANT, f"mcp-cap-{uuid.uuid4().hex[:8]}", script)
    # Then a tool error whose text starts with SandboxCapExceeded and names the dimension
    assert result.is_error is True
    assert _text(result).startswith("SandboxCapExceeded: ")
    assert result.structured_content["dimension"] == dimensions.AGENT_HOURLY.name
    assert result.structured_content["resets_at"].endswith("Z")


def test_mcp_sigterm_still_ends_the_turn_and_stops_its_session(
    env: dict[str, str], state: LocalState
) -> None:
    # Given `sandboxctl mcp` speaking raw JSON-RPC over its pipes, after one execute_code call
    proc = subprocess.Popen(
        [SANDBOXCTL, "--local", "mcp", "--tenant", TENANT, "--agent", "mcp-agent", "--template", TEMPLATE],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None

    def send(message: dict[str, Any]) -> None:
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]

    def answer(request_id: int) -> dict[str, Any]:
        while True:
            message = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
            if message.get("id") == request_id:
                return message

    try:
        send(
            {
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "0"},
                },
            }
        )
        assert answer(1)["result"]["serverInfo"]["name"] == MCP_SERVER_NAME
        send({"method": "notifications/initialized"})
        send(
            {
                "id": 2,
                "method": "tools/call",
                "params": {"name": "execute_code", "arguments": {"code": "print(7)"}},
            }
        )
        called = answer(2)["result"]
        assert called["isError"] is False
        session_id = called["structuredContent"]["session_id"]
        # When the client sends SIGTERM while the session is still open (stdin not closed)
        proc.terminate()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    # Then the server ended the turn on its way out: the interpreter session is stopped
    assert _session_status(state, TENANT, session_id) == "TERMINATED"


def test_mcp_template_without_sandbox_lists_no_tool_and_calls_fail_named(env: dict[str, str]) -> None:
    # Given a template of acme whose sandbox block is "none"
    assert ctl(env, "template", "put", TENANT, "chat-only", "--environment", "none").returncode == 0
    params = StdioServerParameters(
        command=SANDBOXCTL,
        env=env,
        args=["--local", "mcp", "--tenant", TENANT, "--agent", "mcp-agent", "--template", "chat-only"],
    )

    async def main() -> Any:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await session.list_tools(), await session.call_tool("execute_code", {"code": "print(1)"})

    # When the client lists tools and calls execute_code anyway
    listed, called = anyio.run(main)
    # Then no tool is offered, and the call is a tool error naming SandboxProvisioning
    assert listed.tools == []
    assert called.is_error is True and _text(called).startswith("SandboxProvisioning: ")


def test_mcp_file_links_map_artifacts_to_resource_links() -> None:
    # Given an execute_code answer's files list, one artifact skipped as too large
    from sandbox_client.mcp_server import file_links

    files = [
        {
            "file_id": "f-1",
            "filename": "figure-1.png",
            "bytes": 2048,
            "content_type": "image/png",
            "sha256": "ab" * 32,
            "created_at": "2026-11-23T10:00:00Z",
        },
        {"filename": "huge.bin", "skipped": "too_large"},
    ]
    # When mapped to MCP content
    links = file_links(TENANT, files)
    # Then one resource link for the stored artifact, none for the skipped one
    assert [(link.type, link.uri, link.name, link.mime_type, link.size) for link in links] == [
        ("resource_link", "sandbox-file://acme/f-1", "figure-1.png", "image/png", 2048)
    ]


def test_mcp_resources_list_and_read_this_sessions_artifacts_tenant_scoped(
    env: dict[str, str], state: LocalState
) -> None:
    from mcp.shared.exceptions import MCPError
    from sandbox_common.messages import FILE_NOT_FOUND
    from sandbox_runtime.artifacts import ArtifactContext, ArtifactStore

    # Given another tenant's real artifact in the same bucket
    foreign = ArtifactStore(state.client("s3")).put(
        ArtifactContext(
            tenant_id=CAP_TENANT,
            turn_id="t-foreign",
            invocation_id="i-1",
            bucket=state.resources.artifacts_bucket,
        ),
        "secret.csv",
        b"a,b\n",
        redacted=False,
    )
    code = (
        "import os\nos.makedirs('outputs', exist_ok=True)\n"
        "open('outputs/summary.csv', 'w').write('region,total\\neu,8\\n')\n"
        "open('outputs/raw.bin', 'wb').write(bytes(range(256)))\n"
    )

    async def script(session: ClientSession) -> Any:
        before = await session.list_resources()
        called = await session.call_tool("execute_code", {"code": code})
        listed = await session.list_resources()
        reads = [await session.read_resource(r.uri) for r in listed.resources]
        refused = []
        for uri in (
            f"sandbox-file://{TENANT}/{foreign['file_id']}",  # another tenant's id under ours
            f"sandbox-file://{CAP_TENANT}/{foreign['file_id']}",  # another tenant's uri
            f"sandbox-file://{TENANT}/file-{'x' * 24}",
        ):  # unknown
            try:
                await session.read_resource(uri)
                refused.append(None)
            except MCPError as exc:
                refused.append(exc.error.message)
        return before, called, listed, reads, refused

    # When a call writes a text and a binary artifact, and the client lists and reads resources
    before, called, listed, reads, refused = _mcp(env, TENANT, f"mcp-res-{uuid.uuid4().hex[:8]}", script)
    # Then nothing was listed before the call, and both artifacts after it, as their links name them
    assert before.resources == []
    assert called.is_error is False
    links = {str(b.uri): b for b in called.content if b.type == "resource_link"}
    assert sorted(r.name for r in listed.resources) == ["raw.bin", "summary.csv"]
    assert {str(r.uri) for r in listed.resources} == set(links)
    # And reading gives the text as text and the binary as a base64 blob, byte-exact
    by_name = {r.name: contents.contents[0] for r, contents in zip(listed.resources, reads, strict=True)}
    assert by_name["summary.csv"].text == "region,total\neu,8\n"
    assert by_name["summary.csv"].mime_type == "text/csv"
    assert base64.b64decode(by_name["raw.bin"].blob) == bytes(range(256))
    # And another tenant's file, under either uri, answers exactly like an unknown one
    assert refused == [f"SandboxInvalidRequest: {FILE_NOT_FOUND}"] * 3


# --- Strands ---------------------------------------------------------------------------------------
@pytest.fixture
def turn(state: LocalState) -> Iterator[SandboxTurn]:
    sandbox_turn = SandboxTurn(
        state.resources.functions[n.DISPATCH],
        tenant_id=TENANT,
        agent_id="strands-agent",
        template_id=TEMPLATE,
        lambda_client=state.client("lambda"),
    )
    with sandbox_turn:
        yield sandbox_turn


def _agent(tool: Any) -> Any:
    from strands import Agent

    return Agent(tools=[tool], callback_handler=None)


def test_strands_tool_schema_equals_begin_turns(turn: SandboxTurn) -> None:
    # Given the Strands tool of a begun turn, registered with a real Agent
    agent = _agent(turn.strands_tool())
    # When the Agent describes its tools to a model
    specs = {s["name"]: s for s in agent.tool_registry.get_all_tool_specs()}
    # Then execute_code's input schema is exactly the one begin_turn returned
    assert turn.tool is not None
    assert specs["execute_code"]["inputSchema"]["json"] == turn.tool["input_schema"]
    assert specs["execute_code"]["description"] == turn.tool["description"]


def test_strands_success_python_error_and_empty_code(turn: SandboxTurn) -> None:
    # Given a real Agent with the turn's tool
    agent = _agent(turn.strands_tool())
    # When code succeeds, then raises, then is empty, then has a syntax error
    ok = agent.tool.execute_code(code="y = 5\nprint(y)")
    raised = agent.tool.execute_code(code="raise ValueError('boom')")
    empty = agent.tool.execute_code(code="")
    syntax = agent.tool.execute_code(code="def broken(:\n")
    # Then success is Strands success; every failure is Strands error with the named class first
    assert ok["status"] == "success" and json.loads(ok["content"][0]["text"])["stdout"] == "5\n"
    assert raised["status"] == "error" and raised["content"][0]["text"].startswith("SandboxError: ")
    assert "ValueError: boom" in raised["content"][0]["text"]
    raised_answer = json.loads(raised["content"][0]["text"].split("\n", 1)[1])
    assert (raised_answer["exception"]["name"], raised_answer["exception"]["value"]) == ("ValueError", "boom")
    assert empty["status"] == "error" and empty["content"][0]["text"].startswith("SandboxInvalidRequest: ")
    assert syntax["status"] == "error" and syntax["content"][0]["text"].startswith("SandboxError: ")
    # And the syntax error's stderr names the cell, not a file of the host
    stderr = json.loads(syntax["content"][0]["text"].split("\n", 1)[1])["stderr"]
    assert "SyntaxError" in stderr and '"<cell-' in stderr
    assert "/usr/" not in stderr and '.py"' not in stderr and str(Path.cwd()) not in stderr


def test_strands_cap_refusal_is_a_strands_error(state: LocalState, env: dict[str, str]) -> None:
    # Given globex at an hourly cap of 0 and a real Agent with a globex turn's tool
    assert ctl(env, "caps", "set", "agent_hourly", "0", "--tenant", CAP_TENANT).returncode == 0
    with SandboxTurn(
        state.resources.functions[n.DISPATCH],
        tenant_id=CAP_TENANT,
        agent_id="strands-agent",
        template_id=TEMPLATE,
        lambda_client=state.client("lambda"),
    ) as capped:
        agent = _agent(capped.strands_tool())
        # When the agent calls the tool
        result = agent.tool.execute_code(code="print(1)")
    # Then Strands sees an error whose text starts with SandboxCapExceeded, the answer's fields after it
    assert result["status"] == "error"
    assert result["content"][0]["text"].startswith("SandboxCapExceeded: ")
    answer = json.loads(result["content"][0]["text"].split("\n", 1)[1])
    assert answer["dimension"] == dimensions.AGENT_HOURLY.name and answer["resets_at"].endswith("Z")


def test_client_raises_cap_exceeded_and_returns_a_code_error_as_a_result(
    state: LocalState, env: dict[str, str], turn: SandboxTurn
) -> None:
    # Given globex at an hourly cap of 0, and an acme turn
    assert ctl(env, "caps", "set", "agent_hourly", "0", "--tenant", CAP_TENANT).returncode == 0
    capped = SandboxTurn(
        state.resources.functions[n.DISPATCH],
        tenant_id=CAP_TENANT,
        agent_id="client-agent",
        template_id=TEMPLATE,
        lambda_client=state.client("lambda"),
    )
    capped.begin()
    # When the capped turn runs code / Then the client raises the refusal with its fields
    with pytest.raises(SandboxCapExceeded) as refused:
        capped.execute_code("print(1)")
    assert isinstance(refused.value, SandboxRefused)
    assert refused.value.dimension == dimensions.AGENT_HOURLY.name
    assert refused.value.resets_at is not None and refused.value.resets_at.endswith(":00:00Z")
    capped.end()
    # When acme's code raises ValueError / Then a result: ok false, the error says what was raised
    result = turn.execute_code("def f(x):\n    raise ValueError(f'bad {x}')\nf(7)")
    assert result.ok is False and result.error == "SandboxError"
    assert result.error is not None and (result.error.name, result.error.value) == ("ValueError", "bad 7")
    assert result.error.traceback is not None and "in f" in result.error.traceback


def test_strands_next_turn_is_one_call_and_stops_the_previous_session(
    turn: SandboxTurn, state: LocalState
) -> None:
    # Given a tool whose turn has a live session
    tool = turn.strands_tool()
    agent = _agent(tool)  # held: Strands' tool caller keeps only a weak reference to its agent
    first = agent.tool.execute_code(code="z = 1")
    session_id = json.loads(first["content"][0]["text"])["session_id"]
    # When the next turn's tool is asked for
    following = tool.next_turn()
    # Then it is bound to a new, begun turn, the old session is stopped, and state starts fresh
    assert following.turn.turn_id != turn.turn_id and following.turn.tool is not None
    assert _session_status(state, TENANT, session_id) == "TERMINATED"
    next_agent = _agent(following)
    fresh = next_agent.tool.execute_code(code="print('z' in globals())")
    assert json.loads(fresh["content"][0]["text"])["stdout"] == "False\n"
    following.turn.end()


# --- usage -----------------------------------------------------------------------------------------
def test_usage_cli_totals_equal_a_hand_count_of_the_audit_rows(
    env: dict[str, str], state: LocalState, tmp_path: Path
) -> None:
    # Given acme's audit rows (the calls above, plus two here)
    with SandboxTurn(
        state.resources.functions[n.DISPATCH],
        tenant_id=TENANT,
        agent_id="usage-agent",
        template_id=TEMPLATE,
        lambda_client=state.client("lambda"),
    ) as extra:
        extra.execute_code("print(1)")
        extra.execute_code("raise SystemExit(3)")
    items = state.client("dynamodb").scan(TableName=state.resources.tables[n.INVOCATIONS.logical])["Items"]
    rows = [
        {k: next(iter(v.values())) for k, v in item.items()}
        for item in items
        if item["tenant_id"]["S"] == TENANT
    ]
    # When `sandboxctl usage` reports on acme, as JSON and as CSV
    csv_path = tmp_path / "usage.csv"
    out = ctl(env, "--json", "usage", "--tenant", TENANT, "--by", "agent", "--csv", str(csv_path))
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    # Then the totals equal the hand count of the rows
    totals = report["totals"]
    assert totals["calls"] == len(rows) >= 2
    assert totals["calls_by_exit_status"] == dict(sorted(Counter(r["exit_status"] for r in rows).items()))
    assert totals["sessions"] == len({r["session_id"] for r in rows if "session_id" in r})
    assert totals["wall_time_ms"] == sum(int(r["duration_ms"]) for r in rows)
    assert totals["cpu_time_ms"] is None
    assert {g["group"] for g in report["groups"]} == {r["agent_id"] for r in rows}
    assert csv_path.read_text().splitlines()[-1].startswith(f"total,{len(rows)},")


def test_usage_cli_human_table_and_bad_input(env: dict[str, str]) -> None:
    # Given the running stack
    # When the report is asked for as a table
    table = ctl(env, "usage", "--tenant", TENANT, "--by", "day")
    # Then a table with a total line and the notes on what is (not) known
    assert table.returncode == 0, table.stderr
    assert "TOTAL" not in table.stdout and "\ntotal " in table.stdout
    assert "note: CPU time is not recorded" in table.stdout
    # When the window ends before it starts / Then exit 1 with one line, no traceback
    backwards = ctl(
        env, "usage", "--tenant", TENANT, "--since", "2026-11-22T00:00:00Z", "--until", "2026-11-21T00:00:00Z"
    )
    assert (
        backwards.returncode == 1 and backwards.stderr.strip() == "sandboxctl: --until must be after --since"
    )
    # When the grouping or the tenant id is not one we know / Then exit 2 (usage)
    assert ctl(env, "usage", "--tenant", TENANT, "--by", "user").returncode == 2
    assert ctl(env, "usage", "--tenant", "Not_A_Tenant").returncode == 2
