"""What the MCP server and the Strands tool check before a tool call reaches dispatch.

Both validate the model's tool input against the input schema of the tool definition the turn's
`begin_turn` returned, with `jsonschema` (in both the `[mcp]` and `[strands]` extras), plus the
byte limit JSON Schema cannot express (`maxLength` counts characters, dispatch counts UTF-8
bytes). A refusal is worded like dispatch's own: it starts with `SandboxInvalidRequest`, and
nothing is sent, counted or run.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import jsonschema

from .contract import MAX_CODE_BYTES, SANDBOX_ERROR
from .results import ExecutionResult

SOURCE_FIELDS = ("code", "command")  # execute_code's and run_command's source


@functools.lru_cache(maxsize=64)
def _validator(schema_json: str) -> Any:
    """A checked validator per schema: `jsonschema.validate` checks the schema itself on every call
    (~45 ms here, more than a warm call's own overhead); a turn's schemas never change."""
    schema = json.loads(schema_json)
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    return validator_class(schema)


def input_problem(tool_input: Any, schema: dict[str, Any]) -> str | None:
    """None when the input may be sent to dispatch, else the reason (one sentence); `schema` is
    the input schema of the tool begin_turn returned."""
    error = jsonschema.exceptions.best_match(_validator(json.dumps(schema)).iter_errors(tool_input))
    if error is not None:  # the error jsonschema.validate would raise
        where = "/".join(str(p) for p in error.absolute_path) or "input"
        return f"{where}: {error.message}"
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
