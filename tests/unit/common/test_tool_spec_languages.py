"""execute_code's languages: the definition the model sees, the request model dispatch validates,
and the client's input check agree on one list."""

from __future__ import annotations

import typing

import pytest
from pydantic import ValidationError
from sandbox_client.tool_input import input_problem
from sandbox_common import tool_spec
from sandbox_common.models import ExecuteCodeRequest

BASE = {
    "action": "execute_code",
    "tenant_id": "acme",
    "agent_id": "a1",
    "template_id": "analyst",
    "turn_id": "t1",
    "call_id": "c1",
    "code": "console.log(1)",
}


def test_the_definition_offers_execute_codes_languages_and_dispatch_takes_them_and_bash() -> None:
    schema = tool_spec.tool_definition()["input_schema"]
    language = schema["properties"]["language"]
    # Then the model is offered python (the default), javascript and typescript, not bash (run_command's)
    assert language["enum"] == ["python", "javascript", "typescript"] and language["default"] == "python"
    assert "language" not in schema["required"]
    assert "JavaScript" in tool_spec.tool_definition()["description"]
    # And dispatch's request model takes exactly those and bash
    accepted = typing.get_args(ExecuteCodeRequest.model_fields["language"].annotation)
    assert set(accepted) == set(tool_spec.LANGUAGES) == {*language["enum"], tool_spec.COMMAND_LANGUAGE}
    for name in tool_spec.LANGUAGES:
        assert ExecuteCodeRequest.model_validate({**BASE, "language": name}).language == name


@pytest.mark.parametrize("language", ["ruby", "JavaScript", "", "node"])
def test_an_unknown_language_is_refused_by_the_model_and_the_clients_check(language: str) -> None:
    with pytest.raises(ValidationError):
        ExecuteCodeRequest.model_validate({**BASE, "language": language})
    schema = tool_spec.tool_definition()["input_schema"]
    problem = input_problem({"code": "1", "language": language}, schema)
    assert problem is not None and problem.startswith("language: ")
    assert input_problem({"code": "1", "language": "typescript"}, schema) is None
