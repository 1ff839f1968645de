"""The SandboxCapExceeded error_message names the dimension literally, besides the
sentence and the reset time."""

from __future__ import annotations

import pytest
from sandbox_common import dimensions, messages

RESETS_AT = "2026-11-24T00:00:00Z"


@pytest.mark.parametrize(
    ("dimension", "named"),
    [
        (dimensions.TENANT_DAILY.name, "tenant_daily"),
        (dimensions.AGENT_HOURLY.name, "agent_hourly"),
        (dimensions.UNKNOWN, "unknown"),
    ],
)
def test_cap_exceeded_names_the_dimension_sentence_and_reset(dimension, named):
    # Given / When
    text = messages.cap_exceeded(dimension, RESETS_AT)
    # Then
    assert f"(cap: {named})" in text
    assert RESETS_AT in text and "00:00 UTC" in text


def test_cap_exceeded_unexpected_dimension_named_unknown_not_echoed():
    # Given a dimension string that is not one we declare
    odd = "ghp_" + "x" * 36
    # When
    text = messages.cap_exceeded(odd, RESETS_AT)
    # Then it is named `unknown` and never echoed
    assert text.endswith("(cap: unknown)")
    assert odd not in text
