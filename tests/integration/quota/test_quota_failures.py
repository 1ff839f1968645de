"""Fail closed: store errors, throttling, conflicts, crashes -> `unknown`, now + 60 s."""

from __future__ import annotations

import socket

import pytest
from sandbox_common import aws, dimensions, naming

TD = naming.TENANT_DAILY_COUNTERS
AH = naming.AGENT_HOURLY_COUNTERS
FAIL_CLOSED = {
    "ok": False,
    "dimension": "unknown",
    "resets_at": "2026-11-21T08:16:00Z",
    "tenant_daily_cap": 1000,
    "agent_hourly_cap": 100,
}


def test_failures_missing_table_fails_closed_and_counts_nothing(quota, freeze):
    # Given the tenant counter table does not exist
    freeze("2026-11-21T08:15:00Z")
    aws.client("dynamodb").delete_table(TableName=TD.physical("qtest"))

    # When a call arrives
    refused = quota.call()

    # Then it is refused as unknown for 60 s, and the other counter did not move either
    assert refused == FAIL_CLOSED
    assert quota.items(AH) == []


@pytest.mark.parametrize("code", ["AccessDeniedException", "ValidationException", "InternalServerError"])
def test_failures_store_client_error_fails_closed_without_retrying_the_transaction(
    quota, freeze, inject_error, code
):
    # Given DynamoDB answering the transaction with an error
    freeze("2026-11-21T08:15:00Z")
    status = 500 if code == "InternalServerError" else 400
    injected = inject_error("dynamodb", "TransactWriteItems", code, status=status)

    # When a call arrives
    refused = quota.call()

    # Then it fails closed; only 5xx are retried by boto3, never a 4xx
    assert refused == FAIL_CLOSED
    assert injected.sent == (1 + aws.RETRY_CONFIG["max_attempts"] if status >= 500 else 1)
    assert quota.items(TD) == [] and quota.items(AH) == []


@pytest.mark.parametrize("code", ["ProvisionedThroughputExceededException", "ThrottlingException"])
def test_failures_throttling_retried_boundedly_then_fails_closed(
    quota, freeze, inject_error, instant_retries, code
):
    # Given DynamoDB throttling every attempt
    freeze("2026-11-21T08:15:00Z")
    injected = inject_error("dynamodb", "TransactWriteItems", code)

    # When a call arrives
    refused = quota.call()

    # Then boto3's standard retries ran out (bounded) and the call fails closed
    assert injected.sent == 1 + aws.RETRY_CONFIG["max_attempts"]
    assert refused == FAIL_CLOSED


CANCELLATIONS = {
    "throttling-error": [{"Code": "ThrottlingError", "Message": "throttled"}, {"Code": "None"}],
    "mixed-with-conflict": [{"Code": "ConditionalCheckFailed"}, {"Code": "TransactionConflict"}],
    "no-failed-item": [{"Code": "None"}, {"Code": "None"}],
    "no-reasons": [],
}


def test_failures_cancellation_other_than_condition_fails_closed(quota, freeze, inject_error, subtests):
    freeze("2026-11-21T08:15:00Z")
    assert CANCELLATIONS  # the cases below must run
    for name, reasons in CANCELLATIONS.items():
        with subtests.test(msg=name):
            # Given the transaction cancelled for a reason other than a cap (as DynamoDB says it)
            injected = inject_error(
                "dynamodb",
                "TransactWriteItems",
                "TransactionCanceledException",
                extra={"CancellationReasons": reasons},
            )

            # When a call arrives
            refused = quota.call()
            injected.remove()

            # Then the answer is "unknown", never a cap dimension or an admission
            assert injected.sent == 1
            assert refused == FAIL_CLOSED


def test_failures_injected_condition_cancellation_is_parsed_as_cap(quota, freeze, inject_error):
    # Given (positive control for the injection above) DynamoDB reporting the agent item's guard
    freeze("2026-11-21T08:15:00Z")
    inject_error(
        "dynamodb",
        "TransactWriteItems",
        "TransactionCanceledException",
        extra={
            "CancellationReasons": [
                {"Code": "None"},
                {"Code": "ConditionalCheckFailed", "Item": {naming.COUNTER_ATTR_COUNT: {"N": "100"}}},
            ]
        },
    )

    # When a call arrives
    refused = quota.call()

    # Then the reasons were read from the error body: an agent_hourly refusal, not fail closed
    assert (refused["dimension"], refused["resets_at"]) == ("agent_hourly", "2026-11-21T09:00:00Z")


def test_failures_endpoint_down_fails_closed(quota, freeze, monkeypatch, instant_retries):
    # Given DynamoDB unreachable (nothing listens on the port)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    freeze("2026-11-21T08:15:00Z")
    quota.call()  # caps cached while SSM is still reachable
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", f"http://127.0.0.1:{dead_port}")
    aws.clear_clients()

    # When a call arrives
    refused = quota.call()

    # Then it fails closed
    assert refused == FAIL_CLOSED


def test_failures_unexpected_exception_never_raises(quota, freeze, monkeypatch, log_lines, emf):
    # Given a broken environment (the counter table setting is gone), which blows up mid-logic
    freeze("2026-11-21T08:15:00Z")
    monkeypatch.delenv(naming.ENV_TENANT_DAILY_TABLE)
    from sandbox_common import settings

    settings.clear_caches()

    # When a call arrives
    refused = quota.call()

    # Then the caller gets a fail-closed refusal, one log line carries the traceback, and the
    # fail-closed metric is emitted
    assert refused["dimension"] == "unknown" and refused["resets_at"] == "2026-11-21T08:16:00Z"
    lines = log_lines()
    refusals = [line for line in lines if line.get("event") == "sandbox_cap_exceeded"]
    assert len(refusals) == 1
    assert "ValidationError" in refusals[0]["exception"]
    assert refusals[0]["fail_closed_reason"] == "unexpected ValidationError"
    assert len(emf(lines, naming.METRIC_QUOTA_FAIL_CLOSED)) == 1


def test_failures_refusal_emits_one_json_line_and_metric_per_dimension_set(quota, freeze, log_lines, emf):
    # Given an agent at its hourly cap
    freeze("2026-11-21T08:15:00Z")
    quota.set_cap(dimensions.AGENT_HOURLY.name, 1)
    quota.call()
    log_lines()  # drop the admitted call's output

    # When it is refused
    quota.call()

    # Then stdout is pure JSON: one refusal line with the operator's fields, and the metric once
    # per dimension set declared in naming.METRIC_DIMENSIONS
    lines = log_lines()
    (refusal,) = [line for line in lines if line.get("event") == "sandbox_cap_exceeded"]
    assert refusal["tenant_id"] == "acme" and refusal["agent_id"] == "agent-7"
    assert refusal["dimension"] == "agent_hourly" and refusal["resets_at"] == "2026-11-21T09:00:00Z"
    assert refusal["caps"] == {"tenant_daily": 1000, "agent_hourly": 1}
    assert refusal["counts"] == {"tenant_daily": None, "agent_hourly": 1}
    metrics = emf(lines, naming.METRIC_CAP_EXCEEDED)
    assert sorted(tuple(m["dimensions"][0]) for m in metrics) == sorted(
        naming.METRIC_DIMENSIONS[naming.METRIC_CAP_EXCEEDED]
    )
    assert {m["record"].get("dimension") or m["record"].get("tenant_id") for m in metrics} == {
        "agent_hourly",
        "acme",
    }
    assert emf(lines, naming.METRIC_QUOTA_FAIL_CLOSED) == []


def test_failures_count_read_back_error_keeps_the_admission(quota, freeze, inject_error):
    # Given the counters' read-back failing after the transaction committed
    freeze("2026-11-21T08:15:00Z")
    inject_error("dynamodb", "BatchGetItem", "AccessDeniedException")

    # When a call arrives
    admitted = quota.call()

    # Then the committed admission stands, with the counts reported as unknown
    assert admitted == {"ok": True, "tenant_daily_count": None, "agent_hourly_count": None}
    assert quota.count(TD, "acme#2026-11-21") == 1


def test_failures_cap_refusal_sends_one_transaction_and_no_read(quota, freeze, count_requests):
    # Given a tenant at its cap of 1
    freeze("2026-11-21T08:15:00Z")
    quota.set_cap(dimensions.TENANT_DAILY.name, 1)
    quota.call()
    transactions = count_requests("dynamodb", "TransactWriteItems")
    reads = count_requests("dynamodb", "BatchGetItem")

    # When the next call is refused
    assert quota.call()["dimension"] == "tenant_daily"

    # Then the transaction was sent once (a ConditionalCheckFailed is the answer, never retried)
    assert (transactions.sent, reads.sent) == (1, 0)


def test_failures_transaction_conflict_is_retried_then_admitted(quota, freeze, inject_error):
    # Given DynamoDB cancels the first attempt because a concurrent transaction held the item
    freeze("2026-11-21T08:15:00Z")
    attempts = []

    def first_only(body: bytes) -> bool:
        attempts.append(body)
        return len(attempts) == 1

    reasons = [{"Code": "TransactionConflict", "Message": "conflict"}, {"Code": "None"}]
    injected = inject_error(
        "dynamodb",
        "TransactWriteItems",
        "TransactionCanceledException",
        extra={"CancellationReasons": reasons},
        when=first_only,
    )
    # When a call arrives / Then the conflict (nothing written) is retried and the call admitted once
    admitted = quota.call()
    injected.remove()
    assert injected.sent == 1 and len(attempts) == 2
    assert admitted["ok"] is True and admitted["tenant_daily_count"] == 1


def test_failures_persistent_transaction_conflict_fails_closed_after_bounded_retries(
    quota, freeze, inject_error
):
    from quota_check.counters import CONFLICT_ATTEMPTS

    freeze("2026-11-21T08:15:00Z")
    reasons = [{"Code": "None"}, {"Code": "TransactionConflict", "Message": "conflict"}]
    injected = inject_error(
        "dynamodb",
        "TransactWriteItems",
        "TransactionCanceledException",
        extra={"CancellationReasons": reasons},
    )
    refused = quota.call()
    injected.remove()
    assert injected.sent == CONFLICT_ATTEMPTS
    assert refused == FAIL_CLOSED
