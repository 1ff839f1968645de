"""What the MCP server and the Strands tool check before a tool call reaches dispatch.

Both validate the model's tool input against the input schema of the tool definition the turn's
`begin_turn` returned, with `jsonschema` (in both the `[mcp]` and `[strands]` extras), plus the
byte limit JSON Schema cannot express (`maxLength` counts characters, dispatch counts UTF-8
bytes). A refusal is worded like dispatch's own: it starts with `SandboxInvalidRequest`, and
nothing is sent, counted or run.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from .contract import MAX_CODE_BYTES, SANDBOX_ERROR
from .results import ExecutionResult

SOURCE_FIELDS = ("code", "command")  # execute_code's and run_command's source


def input_problem(tool_input: Any, schema: dict[str, Any]) -> str | None:
    """None when the input may be sent to dispatch, else the reason (one sentence); `schema` is
    the input schema of the tool begin_turn returned."""
    try:
        jsonschema.validate(tool_input, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "input"
        return f"{where}: {exc.message}"
    for field in SOURCE_FIELDS:  # the source is sent as `code` (run_command's command too)
        source = tool_input.get(field)
        if isinstance(source, str):
            if not source.strip():
                return f"{field}: empty or whitespace-only {field}"
            if len(source.encode("utf-8")) > MAX_CODE_BYTES:
                return f"{field}: more than {MAX_CODE_BYTES} bytes of UTF-8"
    return None


def failure_text(result: ExecutionResult) -> str | None:
    """For an answer with `ok: false`: the text a tool error carries, named class first
    (`SandboxCapExceeded: I've hit the daily cap ...`), then the whole answer as JSON. None when ok."""
    if result.ok:
        return None
    error = result.error or SANDBOX_ERROR
    return f"{error}: {result.error_message or ''}\n{json.dumps(result.raw, sort_keys=True)}"
