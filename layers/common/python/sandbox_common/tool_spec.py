"""The `execute_code` tool definition an agent registers (returned by begin_turn, used by the
agent client's Strands tool). One definition, so both always agree."""

from __future__ import annotations

from typing import Any

from .naming import MAX_CODE_BYTES  # stdlib-only import: the agent client needs no pydantic

TOOL_NAME = "execute_code"
TOOL_DESCRIPTION = (
    "Run a block of Python in this conversation's isolated sandbox and get back stdout, stderr and "
    "an exit status. Variables and imports persist between calls in the same turn. Output is "
    "truncated (stdout 256 KiB, stderr 32 KiB) and secrets are redacted."
)


def tool_definition() -> dict[str, Any]:
    return {
        "name": TOOL_NAME,
        "description": TOOL_DESCRIPTION,
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
