"""The agent client raises what the agent must handle (sandbox_client/errors.py): dispatch's
governance refusals become typed exceptions carrying their fields; results of running code stay
`ExecutionResult` with a structured `error`. Against a real HTTP endpoint speaking Lambda Invoke."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from sandbox_client import (
    ExecutionError,
    SandboxCapExceeded,
    SandboxInvalidRequest,
    SandboxProvisioning,
    SandboxRefused,
    SandboxTurn,
    TurnTokenMismatch,
)

from tests.support.http import http_endpoint

CAP = {
    "ok": False,
    "error": "SandboxCapExceeded",
    "error_message": "I've hit the daily cap (tenant_daily), please try again at 00:00 UTC.",
    "exit_status": "cap_exceeded",
    "dimension": "tenant_daily",
    "resets_at": "2026-11-24T00:00:00Z",
    "invocation_id": "inv-1",
}
DISABLED = {
    "ok": False,
    "error": "SandboxProvisioning",
    "error_message": "Code execution is turned off for this workspace.",
    "reason": "tenant_disabled",
    "exit_status": "provisioning",
}
TOKEN = {
    "ok": False,
    "error": "SandboxInvalidRequest",
    "error_message": "Invalid request: this turn's turn_token is missing or does not match.",
    "reason": "turn_token_mismatch",
}
INVALID = {"ok": False, "error": "SandboxInvalidRequest", "error_message": "Invalid request: code: empty"}
VALUE_ERROR = {
    "ok": False,
    "error": "SandboxError",
    "error_message": "The code raised ValueError: bad input; see stderr for the traceback.",
    "exit_status": "error",
    "exit_code": 1,
    "stderr": 'Traceback (most recent call last):\n  File "<code-1>", line 1\nValueError: bad input\n',
    "exception": {
        "name": "ValueError",
        "value": "bad input",
        "traceback": 'Traceback (most recent call last):\n  File "<code-1>", line 1\nValueError: bad input\n',
    },
}
TIMEOUT = {"ok": False, "error": "SandboxTimeout", "error_message": "stopped", "exit_status": "timeout"}
KILLED_JOB = {**CAP, "status": "cancelled", "job_id": "job-1", "reason": "kill_switch", "stdout": "so far\n"}


@pytest.fixture
def dispatch() -> Any:
    """A fake dispatch answering each execute_code with the answer its code names."""
    answers = {
        "cap": CAP,
        "disabled": DISABLED,
        "token": TOKEN,
        "invalid": INVALID,
        "raise": VALUE_ERROR,
        "sleep": TIMEOUT,
    }
    seen: list[dict[str, Any]] = []

    def answer(_path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        event = json.loads(body)
        seen.append(event)
        action = event["action"]
        if action == "begin_turn":
            reply: dict[str, Any] = {
                "ok": True,
                "sandbox": {"status": "ready", "tool": {"name": "execute_code"}},
            }
        elif action == "execute_code":
            reply = answers[event["code"]]
        elif action == "get_job":
            reply = KILLED_JOB if event["job_id"] == "job-1" else INVALID
        else:
            reply = TOKEN
        return 200, {}, json.dumps(reply).encode()

    with http_endpoint(answer) as endpoint:
        yield boto3.client("lambda", endpoint_url=endpoint, region_name="us-east-1"), seen


def _turn(client: Any) -> SandboxTurn:
    turn = SandboxTurn("fn", tenant_id="acme", agent_id="a1", template_id="analyst", lambda_client=client)
    turn.begin()
    return turn


def test_cap_refusal_raises_sandbox_cap_exceeded_with_dimension_and_resets_at(dispatch: Any) -> None:
    # Given a dispatch that refuses the call at the daily cap
    client, _ = dispatch
    turn = _turn(client)
    # When the agent runs code / Then a typed refusal under the one base, with its fields
    with pytest.raises(SandboxCapExceeded) as refused:
        turn.execute_code("cap")
    exc = refused.value
    assert isinstance(exc, SandboxRefused)
    assert (exc.dimension, exc.resets_at) == ("tenant_daily", "2026-11-24T00:00:00Z")
    assert exc.error == "SandboxCapExceeded" and str(exc) == CAP["error_message"]
    assert exc.raw == CAP and exc.result.ok is False  # the answer as sent, also typed
    # And it survives a trip through pickle (a worker process, a task queue), fields and all
    import pickle

    again = pickle.loads(pickle.dumps(exc))
    assert type(again) is SandboxCapExceeded and (again.dimension, again.resets_at, again.raw) == (
        "tenant_daily",
        "2026-11-24T00:00:00Z",
        CAP,
    )


@pytest.mark.parametrize(
    ("code", "kind"),
    [("disabled", SandboxProvisioning), ("token", TurnTokenMismatch), ("invalid", SandboxInvalidRequest)],
)
def test_each_governance_refusal_raises_its_class(
    dispatch: Any, code: str, kind: type[SandboxRefused]
) -> None:
    client, _ = dispatch
    with pytest.raises(kind) as refused:
        _turn(client).execute_code(code)
    assert type(refused.value) is kind and isinstance(refused.value, SandboxRefused)
    assert issubclass(TurnTokenMismatch, SandboxInvalidRequest)  # an invalid request of its own kind


def test_a_python_exception_is_a_result_with_a_structured_error(dispatch: Any) -> None:
    # Given code that raised ValueError in the session
    client, _ = dispatch
    # When run / Then a result, not an exception: ok false, error names the class and what was raised
    result = _turn(client).execute_code("raise")
    assert result.ok is False
    assert isinstance(result.error, ExecutionError)
    assert result.error == "SandboxError"  # as `error` always read
    assert (result.error.name, result.error.value) == ("ValueError", "bad input")
    assert result.error.traceback is not None and result.error.traceback.endswith("ValueError: bad input\n")


def test_a_timeout_is_a_result_whose_error_names_its_class(dispatch: Any) -> None:
    client, _ = dispatch
    result = _turn(client).execute_code("sleep")
    assert result.ok is False and result.error == "SandboxTimeout"
    assert result.error is not None and (result.error.name, result.error.value, result.error.traceback) == (
        "SandboxTimeout",
        "stopped",
        None,
    )


def test_job_actions_raise_refusals_but_return_a_job_the_kill_switch_cancelled(dispatch: Any) -> None:
    client, _ = dispatch
    turn = _turn(client)
    # Given a job the kill switch cancelled / Then its final answer is a result (it ran)
    final = turn.get_job("job-1")
    assert (final.status, final.ok, final.stdout) == ("cancelled", False, "so far\n")
    # And an unknown job id is a refusal
    with pytest.raises(SandboxInvalidRequest):
        turn.get_job("job-unknown")


def test_end_turn_with_another_token_raises_turn_token_mismatch(dispatch: Any) -> None:
    client, _ = dispatch
    with pytest.raises(TurnTokenMismatch):
        _turn(client).end()
