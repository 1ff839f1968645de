"""Refusals through dispatch end to end: the cap message names its dimension, and
invalid requests (token-named fields, NUL in code) are refused without echoing the input in the
response or the invalid_request log line, touching nothing."""

from __future__ import annotations

import pytest
from sandbox_common import dimensions
from sandbox_common import naming as n

from .conftest import Stack, event

SECRET_FIELD = "ghp_" + "Z9y8X7w6" * 5


def test_dispatch_cap_refusal_names_the_dimension_literally(stack: Stack) -> None:
    # Given acme's agents switched off (agent_hourly cap 0)
    stack.set_cap(dimensions.AGENT_HOURLY.name, 0, tenant_id="acme")
    # When a call arrives
    result = stack.dispatch(event(call_id="cap-1"))
    # Then the error message carries the sentence, the reset time and the dimension's name
    assert result["error"] == "SandboxCapExceeded"
    assert result["error_message"].endswith("(cap: agent_hourly)")
    assert result["resets_at"] in result["error_message"]


@pytest.mark.parametrize(
    "over",
    [{SECRET_FIELD: "x"}, {"code": "print(1)\x00"}],
    ids=["token-named-field", "nul-in-code"],
)
def test_dispatch_invalid_input_not_echoed_and_touches_nothing(
    stack: Stack, caplog: pytest.LogCaptureFixture, over: dict
) -> None:
    # Given an execute_code event with a secret-named extra field, or code containing NUL
    # When dispatch handles it
    result = stack.dispatch(event(call_id="bad-1", **over))
    (line,) = [r for r in caplog.records if r.getMessage() == "invalid_request"]
    # Then it is SandboxInvalidRequest, the token is neither answered nor logged, nothing written
    assert result["error"] == "SandboxInvalidRequest"
    assert SECRET_FIELD[:9] not in result["error_message"]
    assert line.reason == result["error_message"]  # type: ignore[attr-defined]
    assert SECRET_FIELD[:9] not in line.reason  # type: ignore[attr-defined]
    assert stack.audit_rows() == []
    assert stack.counter_items()[n.TENANT_DAILY_COUNTERS.logical] == []
