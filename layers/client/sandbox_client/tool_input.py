"""What the MCP server and the Strands tool check before a tool call reaches dispatch (issue 15).

Both validate the model's tool input against the ONE tool definition (`tool_spec.tool_definition`,
the schema `begin_turn` returns) with `jsonschema` (a dependency of both `mcp` and
`strands-agents`), plus the byte limit JSON Schema cannot express (`maxLength` counts characters,
dispatch counts UTF-8 bytes). A refusal is worded like dispatch's own: it starts with
`SandboxInvalidRequest`, and nothing is sent, counted or run.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
from sandbox_common.naming import MAX_CODE_BYTES
from sandbox_common.tool_spec import tool_definition

INVALID_REQUEST = "SandboxInvalidRequest"


def input_problem(tool_input: Any) -> str | None:
    """None when the input may be sent to dispatch, else the reason (one sentence)."""
    schema = tool_definition()["input_schema"]
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
    error = str(response.get("error") or "SandboxError")
    message = str(response.get("error_message") or "")
    return f"{error}: {message}\n{json.dumps(response, sort_keys=True)}"
