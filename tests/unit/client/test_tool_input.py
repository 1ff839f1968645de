"""What the MCP server and the Strands tool refuse before anything reaches dispatch
(sandbox_client/tool_input.py): exactly what the one tool definition (as begin_turn returns it)
and dispatch's limits refuse."""

from __future__ import annotations

import json

import pytest
from sandbox_client.results import ExecutionResult
from sandbox_client.tool_input import failure_text, input_problem
from sandbox_common.limits import MAX_CODE_BYTES
from sandbox_common.tool_spec import RUN_COMMAND, tool_definition, tool_definitions

SCHEMA = tool_definition()["input_schema"]  # what begin_turn returns
COMMAND_SCHEMA = next(d for d in tool_definitions() if d["name"] == RUN_COMMAND)["input_schema"]


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
    # Given a tool input the schema or dispatch's limits refuse / When checked / Then it names the rule
    problem = input_problem(tool_input, SCHEMA)
    assert problem is not None and problem.startswith(reason), problem


@pytest.mark.parametrize(
    ("tool_input", "reason"),
    [
        ({"command": " \n"}, "command: empty or whitespace-only command"),
        ({"command": "é" * (MAX_CODE_BYTES // 2 + 1)}, f"command: more than {MAX_CODE_BYTES} bytes of UTF-8"),
        ({"code": "echo 1"}, "input: 'command' is a required property"),
        ({"command": "true", "files": [{"path": "a.txt"}]}, "files/0: {'path': 'a.txt'} does not have"),
        (
            {"command": "true", "files": [{"path": "a", "content_base64": "", "s3_uri": "s3://b/k"}]},
            "files/0: {'path': 'a', 'content_base64': '', 's3_uri': 's3://b/k'} has too many properties",
        ),
        ({"command": "true", "timeout_s": 3601}, "timeout_s: 3601 is greater than the maximum of 3600"),
    ],
)
def test_input_problem_refuses_what_run_commands_definition_refuses(tool_input: object, reason: str) -> None:
    # Given a run_command input its definition or dispatch's limits refuse / When checked
    # Then the reason names the rule
    problem = input_problem(tool_input, COMMAND_SCHEMA)
    assert problem is not None and problem.startswith(reason), problem


def test_input_problem_accepts_files_with_exactly_one_source() -> None:
    # Given an inline file and an s3 file, with background and a timeout / Then accepted
    tool_input = {
        "command": "wc -l data/a.csv",
        "files": [{"path": "data/a.csv", "content_base64": "YQo="}, {"path": "b", "s3_uri": "s3://bkt/k"}],
        "background": True,
        "timeout_s": 60,
    }
    assert input_problem(tool_input, COMMAND_SCHEMA) is None


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
    text = failure_text(ExecutionResult.from_answer(answer))
    # Then the named class and the sentence first, the whole answer after it
    assert text is not None
    first, rest = text.split("\n", 1)
    assert first == "SandboxCapExceeded: I've hit the hourly cap (agent_hourly)."
    assert json.loads(rest) == answer
    # And a success has no failure text
    assert failure_text(ExecutionResult.from_answer({"ok": True, "stdout": "2\n"})) is None
