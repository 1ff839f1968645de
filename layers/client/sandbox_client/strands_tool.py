"""The `execute_code` tool for Strands agents (`strands-agents`), bound to one turn (issue 15).

    with SandboxTurn(fn, tenant_id="acme", agent_id="a1", template_id="analyst") as turn:
        agent = Agent(tools=[turn.strands_tool()])
        ...
    tool = tool.next_turn()   # ends the turn, begins the next one, returns its tool: one call

- Its spec is the ONE tool definition (`tool_spec.tool_definition()`, what `begin_turn` returns):
  name, description and input schema exactly, so the model sees `minLength: 1`,
  `additionalProperties: false` and the byte limit like every other caller.
- Input is validated against that schema before anything is sent (`tool_input.input_problem`):
  `code=""` is a Strands error naming `SandboxInvalidRequest`, and dispatch never sees it.
- Every `ok: false` answer is a Strands `status: "error"` whose text starts with the named class
  (`SandboxCapExceeded: ...`), so Strands' hooks, metrics and retry logic count it as a failure;
  dispatch itself failing is `DispatchUnavailable: ...`. Success is `status: "success"` with the
  answer as JSON text.
"""

from __future__ import annotations

import json
from typing import Any

from sandbox_common.tool_spec import tool_definition
from strands.tools.tools import PythonAgentTool
from strands.types.tools import ToolResult, ToolSpec, ToolUse

from .tool_input import INVALID_REQUEST, failure_text, input_problem


def tool_spec(definition: dict[str, Any] | None = None) -> ToolSpec:
    """`definition`: what the turn's begin_turn answered (it lists the template's tools callable
    from code, §15); the plain definition before begin_turn."""
    definition = definition or tool_definition()
    return {
        "name": definition["name"],
        "description": definition["description"],
        "inputSchema": {"json": definition["input_schema"]},
    }


class SandboxStrandsTool(PythonAgentTool):
    """A Strands tool for one turn; `next_turn()` gives the next turn's tool."""

    def __init__(self, turn: Any) -> None:  # agent_client.SandboxTurn (not imported: no import cycle)
        spec = tool_spec(turn.tool)
        super().__init__(spec["name"], spec, self._call)
        self.turn = turn

    def _call(self, tool_use: ToolUse, **_invocation_state: Any) -> ToolResult:
        tool_use_id = tool_use["toolUseId"]
        tool_input = tool_use.get("input")
        problem = input_problem(tool_input)
        if problem is not None:
            return _error(tool_use_id, f"{INVALID_REQUEST}: {problem}")
        try:
            response = self.turn.execute_tool_input(dict(tool_input))  # type: ignore[arg-type]
        except RuntimeError as exc:  # agent_client.DispatchUnavailable (not imported: no import cycle)
            return _error(tool_use_id, f"{type(exc).__name__}: {exc}")
        text = failure_text(response)
        if text is not None:
            return _error(tool_use_id, text)
        return {
            "toolUseId": tool_use_id,
            "status": "success",
            "content": [{"text": json.dumps(response, sort_keys=True)}],
        }

    def next_turn(self, turn_id: str | None = None) -> SandboxStrandsTool:
        """End this tool's turn and return the tool of the next turn (begun, same identity)."""
        return SandboxStrandsTool(self.turn.next_turn(turn_id))


def _error(tool_use_id: str, text: str) -> ToolResult:
    return {"toolUseId": tool_use_id, "status": "error", "content": [{"text": text}]}
