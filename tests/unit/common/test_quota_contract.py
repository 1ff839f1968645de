"""The quota contract: the quota Lambda renders its answers with the same models
dispatch parses them with; anything off the contract is refused (dispatch then fails closed)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError
from quota_check.logic import Admitted, Refused
from sandbox_common import dimensions
from sandbox_common.errors import SandboxInvalidRequest
from sandbox_common.quota_contract import QuotaAdmitted, QuotaRefused, parse_quota_response


def test_quota_contract_round_trips_both_answers_of_the_quota_lambda() -> None:
    # Given the two answers the quota Lambda renders
    admitted = Admitted(3, 1).to_response()
    refused = Refused(
        dimensions.AGENT_HOURLY.name, datetime(2026, 11, 21, 9, tzinfo=UTC), 1000, 100
    ).to_response()
    # When dispatch parses them
    a, r = parse_quota_response(json.dumps(admitted)), parse_quota_response(json.dumps(refused))
    # Then they are the typed answers with every field
    assert a == QuotaAdmitted(tenant_daily_count=3, agent_hourly_count=1)
    assert r == QuotaRefused(
        dimension="agent_hourly",
        resets_at="2026-11-21T09:00:00Z",
        tenant_daily_cap=1000,
        agent_hourly_cap=100,
    )


@pytest.mark.parametrize(
    "body",
    [
        SandboxInvalidRequest("Invalid request: x").to_response(),  # the quota Lambda's invalid-event answer
        {"ok": False, "dimension": "weekly", "resets_at": "2026-11-21T09:00:00Z"},
        {"ok": False, "dimension": "tenant_daily", "resets_at": "tomorrow"},
        {"ok": "true"},
        {"ok": True, "tenant_daily_count": "3"},
        {"ok": True, "surprise": 1},
        [],
    ],
)
def test_quota_contract_refuses_off_contract_answers(body: object) -> None:
    with pytest.raises(ValidationError):
        parse_quota_response(json.dumps(body))
