"""The `execute_code` tool for Strands agents (`strands-agents`), bound to one turn.

    with SandboxTurn(fn, tenant_id="acme", agent_id="a1", template_id="analyst") as turn:
        agent = Agent(tools=[turn.strands_tool()])
        ...
    tool = tool.next_turn()   # ends the turn, begins the next one, returns its tool: one call

- Its spec is the tool definition the turn's `begin_turn` returned (the one definition dispatch
  builds): name, description and input schema exactly, so the model sees `minLength: 1`,
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

from strands.tools.tools import PythonAgentTool
from strands.types.tools import ToolResult, ToolSpec, ToolUse

from .contract import INVALID_REQUEST
from .tool_input import failure_text, input_problem


def tool_spec(definition: dict[str, Any]) -> ToolSpec:
    """The Strands spec of `definition`, the tool the turn's begin_turn returned (it lists the
    template's tools callable from code, §15)."""
    return {
        "name": definition["name"],
        "description": definition["description"],
        "inputSchema": {"json": definition["input_schema"]},
    }


class SandboxStrandsTool(PythonAgentTool):
    """A Strands tool for one turn; `next_turn()` gives the next turn's tool."""

    def __init__(self, turn: Any) -> None:  # turn.SandboxTurn (not imported: no import cycle)
        self.definition: dict[str, Any] = turn.tool
        spec = tool_spec(self.definition)
        super().__init__(spec["name"], spec, self._call)
        self.turn = turn

    def _call(self, tool_use: ToolUse, **_invocation_state: Any) -> ToolResult:
        tool_use_id = tool_use["toolUseId"]
        tool_input = tool_use.get("input")
        problem = input_problem(tool_input, self.definition["input_schema"])
        if problem is not None:
            return _error(tool_use_id, f"{INVALID_REQUEST}: {problem}")
        try:
            response = self.turn.execute_tool_input(dict(tool_input))  # type: ignore[arg-type]
        except RuntimeError as exc:  # turn.DispatchUnavailable (not imported: no import cycle)
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
        return self.turn.next_turn(turn_id).strands_tool()


def _error(tool_use_id: str, text: str) -> ToolResult:
    return {"toolUseId": tool_use_id, "status": "error", "content": [{"text": text}]}
