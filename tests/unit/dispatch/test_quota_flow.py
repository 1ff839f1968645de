"""dispatch.quota.flow against a real HTTP Lambda Invoke endpoint answering as the quota Lambda
does (the answers' shapes are pinned against moto in tests/integration/quota/test_quota_turn_guard.py)."""

from __future__ import annotations

import json
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from dispatch.quota import client as quota_client
from dispatch.quota.flow import decide, settle, speculate
from sandbox_common import naming as n
from sandbox_common.retries import RetryLog

from tests.support.http import http_endpoint
from tests.support.requests import execute_request

REQ = execute_request(call_id="c1", turn_token="A" * 43)


@pytest.fixture(autouse=True)
def _fresh_client() -> Any:
    quota_client.lambda_client.cache_clear()
    yield
    quota_client.lambda_client.cache_clear()


def _scripted(answers: list[dict[str, Any]], seen: list[dict[str, Any]]) -> Any:
    def answer(_path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        seen.append(json.loads(body))
        return 200, {}, json.dumps(answers[len(seen) - 1]).encode()

    return answer


def _dispatcher() -> Any:
    return SimpleNamespace(
        quota=quota_client.check_quota,
        settings=SimpleNamespace(quota_function_name="quota-fn", require_turn_token=True),
        accounting=SimpleNamespace(needs_count=lambda tenant: False),
    )


def _cached(ready: bool = True) -> Any:
    """The pre-flight decision cached when the call started."""
    return SimpleNamespace(status="ready" if ready else "disabled")


def _ahead(req: Any = REQ, ready: bool = True) -> Future[Any]:
    """The speculative check as the call sends it ahead (run here: its result in the Future)."""
    sent: Future[Any] = Future()
    sent.set_result(speculate(_dispatcher(), req, _cached(ready)))
    return sent


def test_quota_flow_conflict_retries_become_visible_events(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the quota Lambda admitted after retrying 2 transaction conflicts
    seen: list[dict[str, Any]] = []
    with http_endpoint(_scripted([{"ok": True, "retries": 2}], seen)) as endpoint:
        monkeypatch.setenv("AWS_ENDPOINT_URL_LAMBDA", endpoint)
        check = _ahead()
        log = RetryLog()
        # When the call reaches its quota stage
        decision = decide(_dispatcher(), REQ, check, log)
    # Then the check was sent turn-guarded with the call_id, and the 2 retries are events
    assert decision.allowed and seen[0]["call_id"] == "c1" and seen[0]["turn"]["turn_id"] == "turn-1"
    assert [(e["reason"], e["attempt"]) for e in log.response_fields()["events"]] == [
        (n.RETRY_QUOTA_CONFLICT, 1),
        (n.RETRY_QUOTA_CONFLICT, 2),
    ]
    assert len(log.audit_fields()["retries"]) == 2


def test_quota_flow_turn_refused_falls_back_to_the_sequential_check(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given no turn item when the speculative check ran (a first call)
    seen: list[dict[str, Any]] = []
    answers = [{"ok": False, "turn_refused": True, "turn_exists": False}, {"ok": True}]
    with http_endpoint(_scripted(answers, seen)) as endpoint:
        monkeypatch.setenv("AWS_ENDPOINT_URL_LAMBDA", endpoint)
        check = _ahead()
        # When the call reaches its quota stage (the turn now exists)
        decision = decide(_dispatcher(), REQ, check, RetryLog())
    # Then a second, unguarded check with the same call_id decided, and nothing was released
    assert decision.allowed
    assert [("turn" in s, s["call_id"]) for s in seen] == [(True, "c1"), (False, "c1")]


@pytest.mark.parametrize(
    ("entered", "unclaimed", "released"),
    [(True, False, True), (False, True, True), (False, False, False)],
    ids=["refused-before-quota", "store-unreachable", "replayed-or-still-running"],
)
def test_quota_flow_settle_releases_only_a_count_the_call_will_not_use(
    monkeypatch: pytest.MonkeyPatch, entered: bool, unclaimed: bool, released: bool
) -> None:
    # Given a speculative check that counted, and a call that never reached its quota step
    seen: list[dict[str, Any]] = []
    with http_endpoint(_scripted([{"ok": True}, {"ok": True, "released": True}], seen)) as endpoint:
        monkeypatch.setenv("AWS_ENDPOINT_URL_LAMBDA", endpoint)
        check = _ahead()
        # When the invocation ends before its quota stage
        settle(_dispatcher(), REQ, check, entered=entered, unclaimed=unclaimed)
    # Then the count is released only when this attempt ran the function and stopped before its
    # quota stage, or the store refused the call: a replayed answer or a still-running original
    # may have run under this count
    assert [s.get("release", False) for s in seen] == [False, True][: 1 + released]


@pytest.mark.parametrize("case", ["background", "no-token", "malformed-token", "not-ready"])
def test_quota_flow_sends_nothing_ahead_when_not_eligible(monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    # Given a call whose refusal (or count) must be decided after the turn read
    over = {
        "background": {"background": True},
        "no-token": {"turn_token": None},
        "malformed-token": {"turn_token": "!" * 43},
        "not-ready": {},
    }[case]
    req = REQ.model_copy(update=over)
    seen: list[dict[str, Any]] = []
    with http_endpoint(_scripted([], seen)) as endpoint:
        monkeypatch.setenv("AWS_ENDPOINT_URL_LAMBDA", endpoint)
        # When its quota check is started / Then nothing is sent ahead
        check = _ahead(req, ready=case != "not-ready")
        settle(_dispatcher(), req, check, entered=True, unclaimed=False)
    assert check.result() is None and seen == []
