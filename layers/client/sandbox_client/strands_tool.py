"""The sandbox's tools for Strands agents (`strands-agents`), bound to one turn.

    with SandboxTurn(fn, tenant_id="acme", agent_id="a1", template_id="analyst") as turn:
        agent = Agent(tools=turn.strands_tools())   # execute_code, run_command, get_job, cancel_job
        ...
    tool = tool.next_turn()   # ends the turn, begins the next one, returns its tool: one call

- Each tool's spec is a tool definition the turn's `begin_turn` returned (the one definition,
  docs/tool-surface.md): name, description and input schema exactly, so the model sees `minLength: 1`,
  `additionalProperties: false` and the byte limit like every other caller.
- Input is validated against that schema before anything is sent (`tool_input.input_problem`):
  `code=""` is a Strands error naming `SandboxInvalidRequest`, and dispatch never sees it.
- Every `ok: false` answer (a failed run, a failed or unknown job, a cap refusal — which the
  client raises as `errors.SandboxRefused`, and which is shown here as the answer it carries) is a
  Strands `status: "error"` whose text starts with the named class (`SandboxCapExceeded: ...`), so
  Strands' hooks, metrics and retry logic count it as a failure; dispatch itself failing is
  `DispatchUnavailable: ...`. Success is `status: "success"` with the answer as JSON text.
- Either way, each small artifact comes back for the model to see (`SandboxTurn.previews`): a
  PNG as an image block, a text as a text block after the answer.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from strands.tools.tools import PythonAgentTool
from strands.types.tools import ToolResult, ToolResultContent, ToolSpec, ToolUse

from .contract import INVALID_REQUEST
from .errors import DispatchUnavailable, SandboxRefused, ToolUnavailable
from .results import ExecutionResult, Preview
from .tool_input import failure_text, input_problem


def tool_spec(definition: dict[str, Any]) -> ToolSpec:
    """The Strands spec of `definition`, a tool the turn's begin_turn returned."""
    return {
        "name": definition["name"],
        "description": definition["description"],
        "inputSchema": {"json": definition["input_schema"]},
    }


class _Previews(Protocol):
    def previews(self, result: ExecutionResult) -> list[Preview]: ...


class _Turn(_Previews, Protocol):
    """What the tools need of their turn (`turn.SandboxTurn`, which imports this module when asked
    for Strands tools)."""

    def call_tool(self, name: str, tool_input: dict[str, Any]) -> ExecutionResult: ...

    def definition(self, name: str) -> dict[str, Any] | None: ...

    def no_tool_reason(self) -> str: ...

    def next_turn(self, turn_id: str | None = None) -> _Turn: ...


def strands_result(turn: _Previews, tool_use_id: str, result: ExecutionResult) -> ToolResult:
    """A Strands tool result of a sandbox answer: error iff `ok` is false, the answer as JSON text
    (named class first on an error), then its artifacts the model can see."""
    text = failure_text(result)
    content: list[ToolResultContent] = [{"text": text or json.dumps(result.raw, sort_keys=True)}]
    for preview in turn.previews(result):
        if preview.kind == "image":
            content.append({"image": {"format": "png", "source": {"bytes": preview.data}}})
        else:
            content.append({"text": preview.text})
    return {"toolUseId": tool_use_id, "status": "error" if text else "success", "content": content}


class SandboxStrandsTool(PythonAgentTool):
    """One tool of the surface for one turn; `next_turn()` gives the next turn's tool."""

    def __init__(self, turn: _Turn, definition: dict[str, Any]) -> None:
        self.definition = definition  # one of the definitions the turn's begin_turn returned
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
            result = self.turn.call_tool(self.tool_name, dict(tool_input))
        except SandboxRefused as refused:  # the model sees it as any `ok: false` answer
            result = refused.result
        except (DispatchUnavailable, ToolUnavailable) as exc:
            return _error(tool_use_id, f"{type(exc).__name__}: {exc}")
        return strands_result(self.turn, tool_use_id, result)

    def next_turn(self, turn_id: str | None = None) -> SandboxStrandsTool:
        """End this tool's turn and return the same tool of the next turn (begun, same identity)."""
        following = self.turn.next_turn(turn_id)
        definition = following.definition(self.tool_name)
        if definition is None:
            raise ToolUnavailable(following.no_tool_reason())
        return SandboxStrandsTool(following, definition)


def _error(tool_use_id: str, text: str) -> ToolResult:
    return {"toolUseId": tool_use_id, "status": "error", "content": [{"text": text}]}
