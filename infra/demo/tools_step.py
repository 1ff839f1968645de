"""The demo's programmatic tool calling step: one execute_code whose code calls an
agent tool in a loop; every pause is answered with `resume`, exactly as the agent client does,
and only the final summary would enter the model's context.

`prepare(target)` gives the demo template its tool allowlist (before any pre-flight is cached,
so the demo's first begin_turn already lists the tool); `run_tools_step(target, turn_id, show)`
runs the step in a turn of its own and returns the problems it found (empty = as the contract says).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from sandbox_common import naming as n
from sandbox_common.turn_token import new_token

TENANT, AGENT, TEMPLATE, ENVIRONMENT = "acme", "demo-agent", "analyst", "default-public"
TOOL = "query_sales"
REGIONS = ("EU", "US", "APAC")
SALES = {"EU": 120, "US": 200, "APAC": 80}
CODE = (
    "from sandbox_tools import tools\n"
    "total = 0\n"
    f"for region in {list(REGIONS)!r}:\n"
    f"    total += tools.{TOOL}(region=region)['amount']\n"
    "print('total sales', total)\n"
)
EXPECTED_STDOUT = f"total sales {sum(SALES.values())}\n"


def query_sales(region: str) -> dict[str, Any]:
    """The agent's own tool (runs here, in the agent runtime — never in the sandbox)."""
    return {"region": region, "amount": SALES[region]}


def prepare(target: Any) -> dict[str, Any]:
    """`sandboxctl template put acme analyst --environment default-public --tools query_sales`."""
    from infra.sandboxctl import ops

    return ops.template_put(target, TENANT, TEMPLATE, ENVIRONMENT, tools=[TOOL])


def run_tools_step(target: Any, turn_id: str, show: Callable[[str, dict[str, Any]], None]) -> list[str]:
    from infra.sandboxctl import ops, records_ops, render
    from infra.sandboxctl.commands import AUDIT_COLUMNS

    token = new_token()
    event = {
        "action": "execute_code",
        "tenant_id": TENANT,
        "agent_id": AGENT,
        "template_id": TEMPLATE,
        "turn_id": turn_id,
        "turn_token": token,
        "call_id": f"{turn_id}-tools",
        "code": CODE,
    }
    show("request", event)
    response = ops.invoke(target, event)
    show("response", response)
    resumes = 0
    while response.get("status") == n.STATUS_TOOL_CALL and resumes <= len(REGIONS):
        call = response["tool_call"]
        print(f"\n  the agent runtime runs {call['name']}({json.dumps(call['input'])}) and resumes the code")
        resume = {
            "action": "resume",
            "tenant_id": TENANT,
            "agent_id": AGENT,
            "turn_id": turn_id,
            "turn_token": token,
            "continuation": response["continuation"],
            "tool_result": query_sales(**call["input"]),
        }
        show("request", {**resume, "continuation": "<single-use token>", "turn_token": "<turn token>"})
        response = ops.invoke(target, resume)
        show("response", response)
        resumes += 1
    ops.invoke(target, {"action": "end_turn", "tenant_id": TENANT, "turn_id": turn_id, "turn_token": token})
    problems = []
    if response.get("stdout") != EXPECTED_STDOUT:
        problems.append(
            f"tool-calling execute_code printed {response.get('stdout')!r}, expected {EXPECTED_STDOUT!r}"
        )
    if response.get("tool_calls") != len(REGIONS) or resumes != len(REGIONS):
        problems.append(
            f"tool_calls is {response.get('tool_calls')!r} after {resumes} resumes, expected {len(REGIONS)}"
        )
    rows = (
        records_ops.audit_list(target, TENANT, session_id=response["session_id"])
        if response.get("session_id")
        else []
    )
    print(
        f"\n  its audit trail: one row for the whole call, with {n.AUDIT_TOOL_CALLS} and hashed per-call"
        " records"
    )
    print("\n" + render.table(rows, [*AUDIT_COLUMNS, n.AUDIT_TOOL_CALLS]))
    mine = [r for r in rows if r.get("invocation_id") == response.get("invocation_id")]
    if len(mine) != 1 or mine[0].get(n.AUDIT_TOOL_CALLS) != len(REGIONS):
        problems.append(f"expected one audit row with {n.AUDIT_TOOL_CALLS}={len(REGIONS)}, found {mine}")
    return problems
