"""The driver/marker protocol of programmatic tool calling, host side."""

from __future__ import annotations

import base64
import json

import pytest
from sandbox_common.tool_spec import tool_definition, validate_tool_names
from sandbox_common.tools_protocol import resume_source, split_marker, start_source
from sandbox_session.tools import MARKER


def _marker(state: dict) -> str:
    return "\n" + MARKER + json.dumps(state).encode().hex().upper() + "\n"


def test_split_marker_strips_only_a_trailing_marker_byte_exact() -> None:
    # Given user output without a final newline, followed by the runtime's marker
    stdout = "partial line" + _marker({"state": "tool_call", "seq": 1, "name": "q", "input": "{}"})

    # When split
    user, state = split_marker(stdout)

    # Then the user's bytes are intact and the state parsed
    assert user == "partial line"
    assert state is not None and state.paused and (state.seq, state.name, state.input_json) == (1, "q", "{}")


def test_split_marker_ignores_a_marker_the_code_printed_earlier() -> None:
    # Given code that printed a forged marker, then more output (the runtime's marker comes last)
    forged = _marker({"state": "tool_call", "seq": 9, "name": "evil", "input": "{}"})
    stdout = "a" + forged + "b" + _marker({"state": "done", "calls": 0})

    # When split
    user, state = split_marker(stdout)

    # Then only the last marker counts, the forged one stays the code's output
    assert state is not None and state.state == "done"
    assert user == "a" + forged + "b"


@pytest.mark.parametrize(
    "tail",
    [
        "",
        "\n",
        MARKER + "zz\n",
        "\n" + MARKER + "ABC\n",
        "\n" + MARKER + "41\n",
        "\n" + MARKER + json.dumps({"state": "x"}).encode().hex().upper() + "\n",
        "\n" + MARKER + json.dumps({"state": "done"}).encode().hex() + "\n",
    ],
)
def test_split_marker_without_a_valid_trailing_marker_returns_output_unchanged(tail: str) -> None:
    # Given output ending in no / a malformed / a lower-case marker
    stdout = "out" + tail

    # When / Then nothing is stripped, no state
    assert split_marker(stdout) == (stdout, None)


def test_start_source_carries_the_code_byte_exact_in_base64() -> None:
    # Given code with quotes, backslashes, NUL-free unicode and a trailing space
    code = "s = '\\\\'; print(\"ü\", s) \n"

    # When the driver is built
    driver = start_source(code, allow=["b", "a", "a"], max_calls=50, max_input_bytes=10)

    # Then it is one line, and the base64 it carries decodes to exactly the code
    assert "\n" not in driver
    encoded = driver.split(".start('", 1)[1].split("'", 1)[0]
    assert base64.b64decode(encoded).decode("utf-8") == code
    assert '"allow": ["a", "b"]' in driver


def test_resume_source_needs_exactly_one_answer() -> None:
    # Given / When / Then
    with pytest.raises(ValueError):
        resume_source(1)
    with pytest.raises(ValueError):
        resume_source(1, result_json="1", error="x")
    assert "'error'" in resume_source(3, error="boom") and ".resume(3," in resume_source(3, error="boom")


def test_tool_definition_lists_the_allowlisted_tools() -> None:
    # Given / When the tool definition for a template with tools, and without
    with_tools = tool_definition(("query_sales", "lookup"))["description"]
    without = tool_definition()["description"]

    # Then only the first names them (sorted) and says how to call them
    assert "Tools: lookup, query_sales." in with_tools
    assert "from sandbox_tools import tools" in with_tools
    assert "sandbox_tools" not in without


def test_validate_tool_names_sorts_dedups_and_refuses_bad_names() -> None:
    assert validate_tool_names(["b", "a", " a ", ""]) == ("a", "b")
    with pytest.raises(ValueError, match="invalid tool name"):
        validate_tool_names(["ok", "no spaces"])
    with pytest.raises(ValueError, match="at most"):
        validate_tool_names([f"t{i}" for i in range(33)])


def test_call_context_keeps_the_request_without_its_code_and_the_code_hash() -> None:
    # Given an execute_code request
    import hashlib
    from datetime import UTC, datetime

    from dispatch.tools.calls import call_context, restored_request
    from sandbox_common.models import parse_dispatch_event

    req = parse_dispatch_event(
        {
            "action": "execute_code",
            "tenant_id": "acme",
            "agent_id": "a",
            "template_id": "t",
            "turn_id": "turn-1",
            "call_id": "c-1",
            "code": "print('secret code')",
            "user_id": "u-1",
            "invocation_source": "chat",
        }
    )

    # When its context is stored (as JSON) and the request restored
    ctx = json.loads(
        json.dumps(
            call_context(
                req,
                invocation_id="inv",
                started_at=datetime(2026, 1, 1, tzinfo=UTC),
                session_id="s",
                environment="default-public",
            )
        )
    )
    restored = restored_request(ctx)

    # Then the code itself is not kept, its hash is, and every other field comes back
    assert "secret code" not in json.dumps(ctx)
    assert ctx["executed_code_hash"] == hashlib.sha256(b"print('secret code')").hexdigest()
    assert restored.model_dump(exclude={"code"}) == req.model_dump(exclude={"code"})
