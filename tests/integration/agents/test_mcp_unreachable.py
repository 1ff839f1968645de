"""`sandboxctl mcp` when what it serves cannot be reached (SPEC §21): the local stack down, no AWS
region, no AWS credentials. The official MCP SDK's client, over stdio, must see a server that
starts and answers every tool call with a tool error saying what to fix — never a closed
connection. And the host configuration the docs show starts such a server as written."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from infra.sandboxctl.target import NO_CREDENTIALS, NO_REGION
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
    # Then the session works, offers no tool, and each call is a tool error saying what to do
    assert listed.tools == []
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
    # Then each call is a tool error naming what to set, and where
    assert listed.tools == []
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
    # Then the server answers: the tools, or (no stack running from this checkout) what to fix
    if listed.tools:
        assert [t.name for t in listed.tools][0] == "execute_code" and called.is_error is False
    else:
        assert called.is_error is True and "sandboxctl local up" in text_of(called)
