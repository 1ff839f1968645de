"""A request is validated once per call: one later execute_code runs the request model's own
validator (ExecuteCodeRequest._code_is_runnable, called by pydantic on every validation of the
model) exactly once, however many steps it goes through."""

from __future__ import annotations

from tests.support.stack import Stack, event
from tests.support.walk import in_call_path, traced

CODE_VALIDATOR = "sandbox_common.models:_code_is_runnable"


def test_later_execute_code_validates_its_request_once(stack: Stack) -> None:
    # Given a turn whose session is live
    assert stack.dispatch(event("begin_turn"))["ok"] is True
    assert stack.dispatch(event(call_id="c1", code="x = 1"))["ok"] is True
    # When one later call runs, every call of our code counted
    with traced(in_call_path) as walk:
        answer = stack.dispatch(event(call_id="c2", code="x += 1"))
    # Then it ran, and its request model was validated exactly once
    assert answer["ok"] is True
    assert walk.calls.get(CODE_VALIDATOR) == 1, {k: v for k, v in walk.calls.items() if "models" in k}
