"""The demo's programmatic tool calling step (SPEC §15): one execute_code whose code calls an
agent tool in a loop; every pause is answered with `resume`, exactly as the agent client does,
and only the final summary would enter the model's context.

`prepare(target)` sets the demo template's tool allowlist (before any pre-flight is cached);
`run_tools_step(target, turn_id)` runs the step and returns (problems, facts).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

TENANT, AGENT, TEMPLATE = "acme", "demo-agent", "analyst"
TOOL = "query_sales"
REGIONS = ("EU", "US", "APAC")
CODE = (
    "from sandbox_tools import tools\n"
    "total = 0\n"
    f"for region in {list(REGIONS)!r}:\n"
    f"    total += tools.{TOOL}(region=region)['amount']\n"
    "print('total sales', total)\n"
)


def query_sales(region: str) -> dict[str, Any]:
    """The agent's own tool (runs here, in the agent runtime — never in the sandbox)."""
    return {"region": region, "amount": {"EU": 120, "US": 200, "APAC": 80}[region]}


def prepare(target: Any) -> dict[str, Any]:
    from infra.sandboxctl import ops

    return ops.template_put(target, TENANT, TEMPLATE, "default-public", tools=[TOOL])


def run_tools_step(target: Any, turn_id: str, show: Callable[[str, dict[str, Any]], None],
                   **ids: Any) -> tuple[list[str], dict[str, Any]]:  # fmt: skip
    from infra.sandboxctl import ops

    event = {"action": "execute_code", "tenant_id": TENANT, "agent_id": AGENT, "template_id": TEMPLATE,
             "turn_id": turn_id, "call_id": f"{turn_id}-tools", "code": CODE, **ids}  # fmt: skip
    show("request", event)
    response = ops.invoke(target, event)
    show("response", response)
    resumes = 0
    while response.get("status") == "tool_call" and resumes <= len(REGIONS):
        call = response["tool_call"]
        print(f"\n  the agent runtime runs {call['name']}({json.dumps(call['input'])}) and resumes the code")
        resume = {"action": "resume", "tenant_id": TENANT, "agent_id": AGENT, "turn_id": turn_id,
                  "continuation": response["continuation"], "tool_result": query_sales(**call["input"]),
                  **{k: v for k, v in ids.items() if k == "turn_token"}}  # fmt: skip
        show("request", {**resume, "continuation": "<single-use token>"})
        response = ops.invoke(target, resume)
        show("response", response)
        resumes += 1
    problems = []
    if response.get("stdout") != "total sales 400\n":
        problems.append(f"tool-calling execute_code printed {response.get('stdout')!r}, expected 'total sales 400\\n'")
    if response.get("tool_calls") != len(REGIONS):
        problems.append(f"tool_calls is {response.get('tool_calls')!r}, expected {len(REGIONS)}")
    return problems, {"invocation_id": response.get("invocation_id"), "session_id": response.get("session_id")}
