"""Benchmark `mcp_call_overhead`: a warm MCP `tools/call` of `execute_code` — the
official MCP SDK client over stdio to `sandboxctl --local mcp`, which validates the input against
begin_turn's definition, calls dispatch through the agent client and shapes the tool result — ÷
the same call made directly through the agent client (`SandboxTurn.call_tool`), on one running
local stack (`sandboxctl local up`: dispatch behind the Lambda emulator, moto, the local
interpreter), each on its own warm turn and session, samples interleaved. Target: ratio ≤ 1.3.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp.client.session import ClientSession
from sandbox_client.turn import SandboxTurn
from sandbox_common import naming as n

from tests.benchmarks._report import emit
from tests.support.local_stack import ctl, running_stack, state_of
from tests.support.mcp_client import mcp_args, run_mcp

pytestmark = pytest.mark.bench

TARGET_RATIO = 1.3
CODE = "pass"
TENANT, TEMPLATE = "acme", "analyst"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with running_stack(tmp_path_factory.mktemp("mcp-bench-stack")) as env:
        # the measured calls must not meet the hourly cap
        assert ctl(env, "caps", "set", "agent_hourly", "100000", "--tenant", TENANT).returncode == 0
        yield env


def test_mcp_call_overhead_vs_the_client(env: dict[str, str], bench_full: bool, tmp_path: Path) -> None:
    rounds = 40 if bench_full else 3
    state = state_of(env)
    turn = SandboxTurn(
        state.resources.functions[n.DISPATCH],
        tenant_id=TENANT,
        agent_id="bench-client",
        template_id=TEMPLATE,
        lambda_client=state.client("lambda"),
    )

    async def script(session: ClientSession) -> dict[str, Any]:
        # Given both paths warm: each turn's session started, connections open, workers up
        for _ in range(2):
            assert (await session.call_tool("execute_code", {"code": CODE})).is_error is False
            assert turn.call_tool("execute_code", {"code": CODE}).ok
        # When the same call alternates between MCP and the client
        via_mcp: list[float] = []
        via_client: list[float] = []
        sessions: set[str] = set()
        for _ in range(rounds):
            start = time.perf_counter()
            result = await session.call_tool("execute_code", {"code": CODE})
            via_mcp.append(time.perf_counter() - start)
            assert result.is_error is False and result.structured_content is not None
            sessions.add(result.structured_content["session_id"])
            start = time.perf_counter()
            direct = turn.call_tool("execute_code", {"code": CODE})  # blocks the loop: MCP is idle
            via_client.append(time.perf_counter() - start)
            assert direct.ok and direct.exit_status == "ok"
        return {"mcp": via_mcp, "client": via_client, "mcp_sessions": sessions}

    with turn:
        measured = run_mcp(env, mcp_args(TENANT, TEMPLATE), script)
    # Then every call ran (the MCP turn on one warm session), and the overhead is measured
    assert len(measured["mcp"]) == len(measured["client"]) == rounds
    assert len(measured["mcp_sessions"]) == 1
    mcp_ms = statistics.median(measured["mcp"]) * 1000
    client_ms = statistics.median(measured["client"]) * 1000
    ratio = mcp_ms / client_ms
    emit(
        "mcp_call_overhead",
        target=f"ratio <= {TARGET_RATIO}",
        ratio=ratio,
        rounds=rounds,
        mcp_call_ms=round(mcp_ms, 1),
        client_call_ms=round(client_ms, 1),
        mcp_added_ms=round(mcp_ms - client_ms, 1),
    )
    if bench_full:
        assert ratio <= TARGET_RATIO
