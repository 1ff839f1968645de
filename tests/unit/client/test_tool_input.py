"""What the MCP server and the Strands tool refuse before anything reaches dispatch
(sandbox_client/tool_input.py): exactly what the one tool definition (as begin_turn returns it)
and §11 refuse."""

from __future__ import annotations

import json

import pytest
from sandbox_client.tool_input import failure_text, input_problem
from sandbox_common.limits import MAX_CODE_BYTES
from sandbox_common.tool_spec import tool_definition

SCHEMA = tool_definition()["input_schema"]  # what begin_turn returns


def test_input_problem_accepts_code_up_to_the_byte_limit() -> None:
    # Given code of exactly the limit in UTF-8 bytes (2-byte characters) / Then accepted
    assert input_problem({"code": "é" * (MAX_CODE_BYTES // 2)}, SCHEMA) is None


@pytest.mark.parametrize(
    ("tool_input", "reason"),
    [
        ({"code": ""}, "code: '' should be non-empty"),
        ({"code": " \n\t"}, "code: empty or whitespace-only code"),
        ({"code": "é" * (MAX_CODE_BYTES // 2 + 1)}, f"code: more than {MAX_CODE_BYTES} bytes of UTF-8"),
        ({}, "input: 'code' is a required property"),
        ({"code": 7}, "code: 7 is not of type 'string'"),
        ({"code": "print(1)", "tenant_id": "globex"}, "input: Additional properties are not allowed"),
        ("print(1)", "input: 'print(1)' is not of type 'object'"),
    ],
)
def test_input_problem_refuses_what_the_tool_definition_and_section_11_refuse(
    tool_input: object, reason: str
) -> None:
    # Given a tool input the schema or §11 refuses / When checked / Then the reason says which rule
    problem = input_problem(tool_input, SCHEMA)
    assert problem is not None and problem.startswith(reason), problem


def test_failure_text_names_the_class_first_and_keeps_the_answer() -> None:
    # Given a cap refusal from dispatch
    answer = {
        "ok": False,
        "error": "SandboxCapExceeded",
        "error_message": "I've hit the hourly cap (agent_hourly).",
        "dimension": "agent_hourly",
        "resets_at": "2026-11-23T18:00:00Z",
    }
    # When turned into tool-error text
    text = failure_text(answer)
    # Then the named class and the sentence first, the whole answer after it
    assert text is not None
    first, rest = text.split("\n", 1)
    assert first == "SandboxCapExceeded: I've hit the hourly cap (agent_hourly)."
    assert json.loads(rest) == answer
    # And a success has no failure text
    assert failure_text({"ok": True, "stdout": "2\n"}) is None
