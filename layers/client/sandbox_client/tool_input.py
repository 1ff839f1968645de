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


def input_problem(tool_input: Any, schema: dict[str, Any]) -> str | None:
    """None when the input may be sent to dispatch, else the reason (one sentence); `schema` is
    the input schema of the tool begin_turn returned."""
    try:
        jsonschema.validate(tool_input, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "input"
        return f"{where}: {exc.message}"
    code = tool_input.get("code")
    if isinstance(code, str):
        if not code.strip():
            return "code: empty or whitespace-only code"
        if len(code.encode("utf-8")) > MAX_CODE_BYTES:
            return f"code: more than {MAX_CODE_BYTES} bytes of UTF-8"
    return None


def failure_text(response: dict[str, Any]) -> str | None:
    """For a dispatch answer with `ok: false`: the text a tool error carries, named class first
    (`SandboxCapExceeded: I've hit the daily cap ...`), then the whole answer as JSON. None when ok."""
    if response.get("ok") is not False:
        return None
    error = str(response.get("error") or SANDBOX_ERROR)
    message = str(response.get("error_message") or "")
    return f"{error}: {message}\n{json.dumps(response, sort_keys=True)}"
