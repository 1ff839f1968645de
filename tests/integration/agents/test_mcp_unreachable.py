"""`sandboxctl mcp` when what it serves cannot be reached: the local stack down, no AWS
region, no AWS credentials. The official MCP SDK's client, over stdio, must see a server that
starts, lists the tools (the client's packaged definitions) and answers every tool call with a tool
error saying what to fix — never a closed connection — and that works, without a restart, once the
stack is up. And the host configuration the docs show starts such a server as written."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from sandbox_common.tool_spec import TOOL_NAMES, tool_definitions

from infra.sandboxctl.target import NO_CREDENTIALS, NO_REGION
from tests.support.local_stack import ctl
from tests.support.mcp_client import mcp_args, run_mcp, text_of


def _bare_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A host's environment with no AWS or sandbox settings, no AWS config files, no instance
    metadata to fall back on."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SANDBOX_"))}
    env.update(HOME=str(tmp_path), AWS_EC2_METADATA_DISABLED="true", **extra)
    return env


async def _list_and_call(session: ClientSession) -> Any:
    listed = await session.list_tools()
    called = await session.call_tool("execute_code", {"code": "print(1)"})
    again = await session.call_tool("get_job", {"job_id": "job-1"})
    return listed, called, again


def test_mcp_with_the_local_stack_down_answers_each_call_with_how_to_start_it(tmp_path: Path) -> None:
    # Given no local stack running in the state dir the server is pointed at
    env = _bare_env(tmp_path, SANDBOX_LOCAL_DIR=str(tmp_path / "no-stack"))
    # When an MCP host starts `sandboxctl --local mcp`, lists tools and calls two
    listed, called, again = run_mcp(env, mcp_args("acme", "analyst"), _list_and_call)
    # Then the session works, lists the tools, and each call is a tool error saying what to do
    assert [t.name for t in listed.tools] == list(TOOL_NAMES)
    for result in (called, again):
        assert result.is_error is True
        assert text_of(result).startswith("DispatchUnavailable: the local stack is not running")
        assert "sandboxctl local up" in text_of(result)


@pytest.mark.parametrize(
    ("extra", "fix"),
    [
        ({}, NO_REGION),
        ({"AWS_DEFAULT_REGION": "eu-west-1"}, NO_CREDENTIALS),
    ],
    ids=["no-region", "no-credentials"],
)
def test_mcp_without_aws_settings_names_the_variable_to_set(
    tmp_path: Path, extra: dict[str, str], fix: str
) -> None:
    # Given a host configuration for a deployed stage without a region / without credentials
    env = _bare_env(tmp_path, **extra)
    # When the host starts `sandboxctl mcp`, lists tools and calls two
    listed, called, again = run_mcp(env, mcp_args("acme", "analyst", local=False), _list_and_call)
    # Then the tools are listed, and each call is a tool error naming what to set, and where
    assert [t.name for t in listed.tools] == list(TOOL_NAMES)
    for result in (called, again):
        assert result.is_error is True
        assert text_of(result) == f"DispatchUnavailable: {fix}"
    assert "AWS_DEFAULT_REGION" in NO_REGION and "AWS_PROFILE" in NO_CREDENTIALS and "`env`" in NO_CREDENTIALS


def test_docs_host_configuration_as_written_starts_a_server_that_answers() -> None:
    # Given the host configuration docs/tool-surface.md shows, with this checkout's path put in
    repo = Path(__file__).resolve().parents[3]
    text = (repo / "docs" / "tool-surface.md").read_text()
    block = text.split('```json\n{\n  "mcpServers"', 1)[1].split("```", 1)[0]
    server = json.loads('{"mcpServers"' + block)["mcpServers"]["sandbox"]
    command = server["command"].replace("/path/to/repo", str(repo))
    assert Path(command).exists(), command
    # When a host starts it exactly so (its env holds only what the configuration gives)
    params = StdioServerParameters(command=command, args=server["args"], env=server["env"])

    async def main() -> Any:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await _list_and_call(session)

    listed, called, _ = anyio.run(main)
    # Then the server lists the tools and answers: a result, or (no stack running from this
    # checkout) what to fix
    assert [t.name for t in listed.tools] == list(TOOL_NAMES)
    assert called.is_error is False or "sandboxctl local up" in text_of(called)


def _up(env: dict[str, str]) -> None:
    up = ctl(env, "--json", "local", "up")
    assert up.returncode == 0, up.stderr


def _down(env: dict[str, str]) -> None:
    down = ctl(env, "--json", "local", "down", timeout=60)
    assert down.returncode == 0, down.stderr


def test_mcp_started_before_local_up_lists_the_tools_then_works_without_a_restart(tmp_path: Path) -> None:
    # Given a host that starts `sandboxctl --local mcp` before the local stack is up
    env = _bare_env(tmp_path, SANDBOX_LOCAL_DIR=str(tmp_path / "stack"), SANDBOX_LOCAL="1")
    notifications: list[Any] = []

    async def script(session: ClientSession) -> Any:
        listed = await session.list_tools()
        before = await session.call_tool("execute_code", {"code": "print(6 * 7)"})
        await anyio.to_thread.run_sync(_up, env)  # the operator starts the stack meanwhile
        after = await session.call_tool("execute_code", {"code": "print(6 * 7)"})
        command = await session.call_tool("run_command", {"command": "echo from-bash"})
        return listed, before, after, command

    try:
        listed, before, after, command = run_mcp(env, mcp_args("acme", "analyst"), script, notifications)
    finally:
        _down(env)
    # Then the host had the tools from the start, exactly as dispatch defines them by default
    assert [t.model_dump(by_alias=True, exclude_none=True) for t in listed.tools] == [
        {"name": d["name"], "description": d["description"], "inputSchema": d["input_schema"]}
        for d in tool_definitions()
    ]
    # And the call before the stack was up said what to fix
    assert before.is_error is True and "sandboxctl local up" in text_of(before)
    # And the same server, not restarted, ran both tools once the stack was up
    assert after.is_error is False and after.structured_content["stdout"] == "42\n"
    assert command.is_error is False and command.structured_content["stdout"] == "from-bash\n"
    # The local stage's tools equal the packaged ones: nothing to announce
    assert [m for m in notifications if getattr(m, "method", "") == "notifications/tools/list_changed"] == []


def test_mcp_announces_list_changed_when_the_stack_serves_other_tools(tmp_path: Path) -> None:
    # Given a server started before the stack for a template without a sandbox (begin_turn will
    # answer no tool at all, unlike the packaged list the host got first)
    env = _bare_env(tmp_path, SANDBOX_LOCAL_DIR=str(tmp_path / "stack"), SANDBOX_LOCAL="1")
    notifications: list[Any] = []

    async def script(session: ClientSession) -> Any:
        listed = await session.list_tools()
        await anyio.to_thread.run_sync(_up, env)
        called = await session.call_tool("execute_code", {"code": "print(1)"})
        relisted = await session.list_tools()
        return listed, called, relisted

    try:
        listed, called, relisted = run_mcp(env, mcp_args("globex", "no-sandbox-here"), script, notifications)
    finally:
        _down(env)
    # Then the call says why there is no tool, the server announced the change, and the next list is empty
    assert len(listed.tools) == len(TOOL_NAMES)
    assert called.is_error is True
    methods = [getattr(m, "method", "") for m in notifications]
    assert methods.count("notifications/tools/list_changed") == 1
    assert relisted.tools == []
