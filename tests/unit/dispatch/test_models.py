"""Bad input: every shape of bad request is a SandboxInvalidRequest with a relayable sentence."""

from __future__ import annotations

import json

import pytest
from sandbox_common.errors import SandboxInvalidRequest
from sandbox_common.models import (
    MAX_CODE_BYTES,
    ExecuteCodeRequest,
    parse_dispatch_event,
    parse_job_event,
    parse_resume_event,
)
from sandbox_common.quota_contract import parse_quota_event

GOOD = {
    "action": "execute_code",
    "tenant_id": "acme",
    "agent_id": "agent-7",
    "template_id": "analyst",
    "turn_id": "turn-123",
    "call_id": "call-9",
    "code": "print(1+1)",
    "user_id": "u-1",
    "invocation_source": "chat",
}

BAD_EVENTS = {
    "not_json": "{not json",
    "json_array": "[1, 2]",
    "unknown_action": {**GOOD, "action": "rm_rf"},
    "missing_action": {k: v for k, v in GOOD.items() if k != "action"},
    "missing_field": {k: v for k, v in GOOD.items() if k != "call_id"},
    "extra_field": {**GOOD, "environment": "internal-only"},
    "wrong_type_int": {**GOOD, "tenant_id": 7},
    "wrong_type_list": {**GOOD, "code": ["print(1)"]},
    "id_bad_chars": {**GOOD, "tenant_id": "acme/../globex"},
    "id_wildcard": {**GOOD, "agent_id": "*"},
    "id_quote": {**GOOD, "turn_id": "t'1"},
    "id_unicode": {**GOOD, "call_id": "cäll"},
    "id_too_long": {**GOOD, "turn_id": "t" * 129},
    "id_10kb": {**GOOD, "tenant_id": "a" * 10_000},
    "id_leading_dash": {**GOOD, "agent_id": "-agent"},
    "empty_code": {**GOOD, "code": ""},
    "whitespace_code": {**GOOD, "code": " \n\t "},
    "oversized_code": {**GOOD, "code": "#" * (MAX_CODE_BYTES + 1)},
    "bad_source": {**GOOD, "invocation_source": "cron"},
    "lone_surrogate": {**GOOD, "code": "print('\ud800')"},
    "end_turn_extra": {"action": "end_turn", "tenant_id": "acme", "turn_id": "t", "agent_id": "a"},
    "begin_turn_missing_template": {
        "action": "begin_turn",
        "tenant_id": "acme",
        "agent_id": "a",
        "turn_id": "t",
    },
}


@pytest.mark.parametrize("name", sorted(BAD_EVENTS))
def test_parse_dispatch_event_rejects_bad_input(name: str) -> None:
    # Given a malformed event / When parsed / Then a named error with a sentence, no input echoed
    with pytest.raises(SandboxInvalidRequest) as info:
        parse_dispatch_event(BAD_EVENTS[name])
    response = info.value.to_response()
    assert response["ok"] is False and response["error"] == "SandboxInvalidRequest"
    assert response["error_message"].startswith("Invalid request")
    assert "a" * 200 not in response["error_message"]


def test_parse_dispatch_event_accepts_json_string_and_exact_limit() -> None:
    # Given code of exactly the limit, sent as a JSON string
    event = json.dumps({**GOOD, "code": "#" * MAX_CODE_BYTES})
    # When parsed / Then it is an ExecuteCodeRequest with the code byte-exact
    request = parse_dispatch_event(event)
    assert isinstance(request, ExecuteCodeRequest)
    assert len(request.code.encode()) == MAX_CODE_BYTES


def test_parse_dispatch_event_counts_code_in_utf8_bytes() -> None:
    # Given code whose character count is under the limit but whose UTF-8 size is over it
    code = "é" * (MAX_CODE_BYTES // 2 + 1)
    # Then it is refused
    with pytest.raises(SandboxInvalidRequest, match="bytes"):
        parse_dispatch_event({**GOOD, "code": code})


def test_parse_quota_event_rejects_extra_and_bad_ids() -> None:
    with pytest.raises(SandboxInvalidRequest):
        parse_quota_event({"tenant_id": "acme", "agent_id": "a", "x": 1})
    with pytest.raises(SandboxInvalidRequest):
        parse_quota_event({"tenant_id": "acme#2026", "agent_id": "a"})
    assert parse_quota_event({"tenant_id": "acme", "agent_id": "a"}).agent_id == "a"


# --- background jobs ----------------------------------------------------------------
def _job_event(**over: object) -> dict[str, object]:
    return {
        "action": "execute_code",
        "tenant_id": "acme",
        "agent_id": "a",
        "template_id": "t",
        "turn_id": "u",
        "call_id": "c",
        "code": "print(1)",
        **over,
    }


def test_models_background_and_timeout_accepted_within_bounds() -> None:
    # Given a background request at the 3600 s ceiling, when parsed, then both fields are kept
    req = parse_job_event(_job_event(background=True, timeout_s=3600))
    assert (req.background, req.timeout_s) == (True, 3600)
    assert parse_job_event(_job_event()).background is False


def test_models_dispatch_parser_accepts_jobs_with_turn_token() -> None:
    # Given the main parser, when a background execute_code, get_job and cancel_job arrive
    # (each with the optional turn token), then each parses to its model with its fields
    req = parse_dispatch_event(_job_event(background=True, timeout_s=60, turn_token="tok"))
    assert (req.action, req.background, req.timeout_s, req.turn_token) == ("execute_code", True, 60, "tok")
    ids = {"tenant_id": "acme", "agent_id": "a", "turn_id": "u", "job_id": "job-1", "turn_token": "tok"}
    assert parse_dispatch_event({"action": "get_job", **ids}).job_id == "job-1"
    assert parse_dispatch_event({"action": "cancel_job", **ids}).turn_token == "tok"
    # And timeout_s without background is still refused by the main parser
    with pytest.raises(SandboxInvalidRequest):
        parse_dispatch_event(_job_event(timeout_s=60))


@pytest.mark.parametrize(
    "over",
    [
        {"background": True, "timeout_s": 3601},
        {"background": True, "timeout_s": 0},
        {"background": "yes"},
        {"timeout_s": 60},
        {"background": True, "timeout_s": 1.5},
    ],
)
def test_models_bad_background_fields_are_invalid_requests(over: dict[str, object]) -> None:
    # Given a malformed background request, when parsed, then it is a named invalid request
    with pytest.raises(SandboxInvalidRequest):
        parse_job_event(_job_event(**over))


@pytest.mark.parametrize("action", ["get_job", "cancel_job"])
def test_models_job_actions_parse_and_reject_extra_fields(action: str) -> None:
    # Given a job action, when parsed, then its ids are kept; an extra field or bad id is refused
    event = {"action": action, "tenant_id": "acme", "agent_id": "a", "turn_id": "u", "job_id": "job-1"}
    assert parse_job_event(event).job_id == "job-1"
    with pytest.raises(SandboxInvalidRequest):
        parse_job_event({**event, "code": "x"})
    with pytest.raises(SandboxInvalidRequest):
        parse_job_event({**event, "job_id": "../x"})


# --- resume (docs/tool-calling.md) ---------------------------------------------------------------
_RESUME = {
    "action": "resume",
    "tenant_id": "acme",
    "agent_id": "agent-7",
    "turn_id": "turn-1",
    "continuation": "A" * 43,
}


@pytest.mark.parametrize(
    "answer",
    [
        {"tool_result": None},
        {"tool_result": {"rows": [1, 2]}},
        {"tool_result": 0},
        {"tool_error": "region not found"},
    ],
)
def test_parse_resume_event_accepts_exactly_one_answer(answer: dict) -> None:
    # Given / When a resume with one answer (null is a valid tool result)
    req = parse_resume_event({**_RESUME, **answer})

    # Then it parses and says which kind of answer it carries
    assert req.has_result is ("tool_result" in answer)


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"tool_result": 1, "tool_error": "x"},
        {"tool_error": None},
        {"tool_result": 1, "continuation": "short"},
        {"tool_result": 1, "extra": 1},
        {"tool_result": 1, "turn_id": "bad id"},
        {"tool_error": "x" * (64 * 1024 + 1)},
    ],
)
def test_parse_resume_event_refuses_bad_requests(bad: dict) -> None:
    # Given / When / Then a resume without exactly one answer, a malformed continuation, an
    # unknown field, a bad id or an oversized error is SandboxInvalidRequest
    with pytest.raises(SandboxInvalidRequest):
        parse_resume_event({**_RESUME, **bad})
