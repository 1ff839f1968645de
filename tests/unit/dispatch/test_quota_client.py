"""Dispatch fails closed when the quota Lambda cannot answer: `unknown`, now + 60 s."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from dispatch.quota import client as quota_client
from sandbox_common import dimensions
from sandbox_common.windows import Windows

from tests.support.emf import emf_records
from tests.support.http import fixed, http_endpoint

NOW = datetime(2026, 11, 21, 23, 59, 30, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _fresh_client() -> Any:
    quota_client.lambda_client.cache_clear()
    yield
    quota_client.lambda_client.cache_clear()


def _check(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> quota_client.QuotaDecision:
    monkeypatch.setenv("AWS_ENDPOINT_URL_LAMBDA", endpoint)
    return quota_client.check_quota("quota-fn", "acme", "agent-7", Windows.at(NOW))


def test_check_quota_unreachable_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    decision = _check(monkeypatch, "http://127.0.0.1:1")
    assert (decision.allowed, decision.dimension, decision.resets_at) == (
        False,
        "unknown",
        "2026-11-22T00:00:30Z",
    )


@pytest.mark.parametrize(
    ("status", "body", "headers"),
    [
        (200, b'{"errorMessage": "boom"}', {"X-Amz-Function-Error": "Unhandled"}),
        (200, b"not json", {}),
        (200, b'{"ok": "yes"}', {}),
        (200, b'{"ok": false, "dimension": "weekly", "resets_at": "x"}', {}),
        (429, b'{"message": "Rate exceeded"}', {"x-amzn-errortype": "TooManyRequestsException"}),
        (500, b'{"message": "oops"}', {"x-amzn-errortype": "ServiceException"}),
    ],
)
def test_check_quota_bad_answers_fail_closed(
    monkeypatch: pytest.MonkeyPatch, status: int, body: bytes, headers: dict[str, str]
) -> None:
    with http_endpoint(fixed(status, body, headers)) as endpoint:
        decision = _check(monkeypatch, endpoint)
    assert (decision.allowed, decision.dimension) == (False, "unknown")


def test_check_quota_passes_through_refusal_and_admission(monkeypatch: pytest.MonkeyPatch) -> None:
    refusal = {
        "ok": False,
        "dimension": "agent_hourly",
        "resets_at": "2026-11-22T00:00:00Z",
        "tenant_daily_cap": 1000,
        "agent_hourly_cap": 100,
    }
    with http_endpoint(fixed(200, json.dumps(refusal).encode())) as endpoint:
        decision = _check(monkeypatch, endpoint)
    assert (decision.allowed, decision.dimension, decision.resets_at) == (
        False,
        "agent_hourly",
        "2026-11-22T00:00:00Z",
    )
    quota_client.lambda_client.cache_clear()  # the client is bound to the first server's endpoint
    with http_endpoint(
        fixed(200, b'{"ok": true, "tenant_daily_count": 3, "agent_hourly_count": 2}')
    ) as endpoint:
        decision = _check(monkeypatch, endpoint)
    assert decision.allowed and decision.counts[dimensions.TENANT_DAILY.name] == 3


def test_check_quota_fail_closed_counts_as_a_cap_refusal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an unreachable quota Lambda / When dispatch checks / Then the refusal is visible to the
    # cap dashboards and alarms: SandboxCapExceeded by dimension=unknown and by tenant
    _check(monkeypatch, "http://127.0.0.1:1")
    emf = emf_records(capsys.readouterr().out)
    cap = [(e.get("dimension"), e.get("tenant_id")) for e in emf if "SandboxCapExceeded" in e]
    assert sorted(cap, key=str) == sorted([("unknown", None), (None, "acme")], key=str)
    assert any("SandboxQuotaFailClosed" in e for e in emf)


def test_check_quota_failed_release_is_no_cap_refusal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an unreachable quota Lambda / When dispatch releases a speculative count
    monkeypatch.setenv("AWS_ENDPOINT_URL_LAMBDA", "http://127.0.0.1:1")
    undone = quota_client.check_quota(
        "quota-fn", "acme", "agent-7", Windows.at(NOW), call_id="c1", release=True
    )
    # Then nothing was released, and no cap metric claims a call was refused (an error log only)
    assert undone.released is False and undone.counted_here is False
    assert not [
        e
        for e in emf_records(capsys.readouterr().out)
        if "SandboxCapExceeded" in e or "SandboxQuotaFailClosed" in e
    ]
