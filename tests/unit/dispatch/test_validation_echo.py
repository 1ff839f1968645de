"""Validation answers never echo unredacted input: unknown field names that are
secrets, and code containing NUL."""

from __future__ import annotations

import pytest
from sandbox_common.errors import SandboxInvalidRequest
from sandbox_common.models import parse_dispatch_event
from sandbox_common.quota_contract import parse_quota_event

GOOD = {
    "action": "execute_code",
    "tenant_id": "acme",
    "agent_id": "a1",
    "template_id": "analyst",
    "turn_id": "t1",
    "call_id": "c1",
    "code": "print(1)",
}
SECRET_NAMES = [
    "ghp_" + "A1b2C3d4" * 5,
    "AKIAIOSFODNN7EXAMPLE",
    "xoxb-1234567890123-abcdefghijklmnop",
    "s3cr3t-not-a-catalogue-shape-9f8e7d",
    "very_long_lowercase_name_that_is_surely_not_a_field_we_declare",
]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_describe_validation_error_unknown_field_named_like_a_secret_not_echoed(name):
    # Given an execute_code event with an extra field whose NAME is a secret
    event = {**GOOD, name: "x"}
    # When
    with pytest.raises(SandboxInvalidRequest) as err:
        parse_dispatch_event(event)
    # Then the answer says a field was unexpected without repeating its name
    assert name not in err.value.message
    assert name[:8] not in err.value.message
    assert "<field>" in err.value.message


def test_describe_validation_error_quota_event_unknown_secret_field_not_echoed():
    # Given the quota-check entry point and a secret-named extra field
    name = "ghp_" + "Z9y8X7w6" * 5
    # When
    with pytest.raises(SandboxInvalidRequest) as err:
        parse_quota_event({"tenant_id": "acme", "agent_id": "a1", name: 1})
    # Then
    assert name[:8] not in err.value.message


def test_describe_validation_error_declared_field_names_still_named():
    # Given a typo'd, identifier-shaped unknown field and a bad declared field
    event = {**GOOD, "callid": "c2", "tenant_id": "bad id!"}
    # When
    with pytest.raises(SandboxInvalidRequest) as err:
        parse_dispatch_event(event)
    # Then the agent still learns which fields are wrong
    assert "callid" in err.value.message
    assert "tenant_id" in err.value.message


@pytest.mark.parametrize("code", ["print(1)\x00", "\x00", "x = 1\n\x00\nprint(x)"])
def test_execute_code_request_code_with_nul_invalid_request(code):
    # Given code containing a NUL character
    event = {**GOOD, "code": code}
    # When
    with pytest.raises(SandboxInvalidRequest) as err:
        parse_dispatch_event(event)
    # Then it is refused as invalid input, naming the reason
    assert "NUL" in err.value.message
    assert "code" in err.value.message
