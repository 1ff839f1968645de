"""The `execute_code` tool definition an agent registers (returned by begin_turn, used by the
agent client's Strands tool). One definition, so both always agree."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .limits import MAX_CODE_BYTES, TOOLS_MAX_CALLS, TOOLS_MAX_PER_TEMPLATE

# stdlib-only imports: the agent client needs no pydantic
from .naming import TOOL_NAME_RE, Action

TOOL_NAME = str(Action.EXECUTE_CODE)  # the agent's tool is the execute_code action
TOOL_DESCRIPTION = (
    "Run a block of Python in this conversation's isolated sandbox and get back stdout, stderr and "
    "an exit status. Variables and imports persist between calls in the same turn. Output is "
    "truncated (stdout 256 KiB, stderr 32 KiB) and secrets are redacted."
)


TOOLS_DESCRIPTION = (
    " The code can call these tools of yours directly (SPEC §15): `from sandbox_tools import tools` then "
    "`tools.NAME(**kwargs)` (keyword arguments only, JSON values) returns the tool's JSON result or raises "
    "`sandbox_tools.ToolError`; at most {max_calls} tool calls per execution. Loop over a tool in one "
    "execution and print only a summary, instead of calling it once per message. Tools: {names}."
)


def tool_definition(tools: Sequence[str] = ()) -> dict[str, Any]:
    """The execute_code tool; `tools` is the template's allowlist of tools callable from code."""
    description = TOOL_DESCRIPTION
    if tools:
        description += TOOLS_DESCRIPTION.format(max_calls=TOOLS_MAX_CALLS, names=", ".join(sorted(tools)))
    return {
        "name": TOOL_NAME,
        "description": description,
        "input_schema": {
            "type": "object",
            "properties": {
                "code": {
                    "type": "string",
                    "description": f"Python source to execute (at most {MAX_CODE_BYTES} bytes).",
                    "minLength": 1,
                }
            },
            "required": ["code"],
            "additionalProperties": False,
        },
    }


def validate_tool_names(names: Iterable[str]) -> tuple[str, ...]:
    """A template's tool allowlist, sorted and de-duplicated; ValueError names what is wrong."""
    unique = sorted({str(name).strip() for name in names if str(name).strip()})
    bad = [name for name in unique if not TOOL_NAME_RE.match(name)]
    if bad:
        raise ValueError(f"invalid tool name(s) {', '.join(map(repr, bad))}: expected {TOOL_NAME_RE.pattern}")
    if len(unique) > TOOLS_MAX_PER_TEMPLATE:
        raise ValueError(f"{len(unique)} tools, at most {TOOLS_MAX_PER_TEMPLATE} per template")
    return tuple(unique)
