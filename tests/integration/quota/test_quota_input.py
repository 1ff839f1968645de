"""Bad input: SandboxInvalidRequest, nothing read, nothing counted, a metric."""

from __future__ import annotations

import json

from sandbox_common import naming

BAD_EVENTS = {
    "missing-agent": {"tenant_id": "acme"},
    "missing-tenant": {"agent_id": "agent-7"},
    "extra-field": {"tenant_id": "acme", "agent_id": "agent-7", "cap": 999999},
    "int-tenant": {"tenant_id": 7, "agent_id": "agent-7"},
    "null-agent": {"tenant_id": "acme", "agent_id": None},
    "list-agent": {"tenant_id": "acme", "agent_id": ["agent-7"]},
    "empty-tenant": {"tenant_id": "", "agent_id": "agent-7"},
    "key-separator": {"tenant_id": "acme#2026-11-21", "agent_id": "agent-7"},
    "path-traversal": {"tenant_id": "../caps/tenant_daily", "agent_id": "agent-7"},
    "ssm-path": {"tenant_id": "acme/tenant_daily", "agent_id": "agent-7"},
    "format-string": {"tenant_id": "acme", "agent_id": "%s%n{0}"},
    "newline": {"tenant_id": "acme\n", "agent_id": "agent-7"},
    "space": {"tenant_id": "ac me", "agent_id": "agent-7"},
    "leading-dash": {"tenant_id": "-acme", "agent_id": "agent-7"},
    "too-long": {"tenant_id": "a" * 129, "agent_id": "agent-7"},
    "unicode": {"tenant_id": "acmé", "agent_id": "agent-7"},
    "not-json": "{tenant_id: acme",
    "json-list": json.dumps([{"tenant_id": "acme", "agent_id": "agent-7"}]),
    "list": [{"tenant_id": "acme", "agent_id": "agent-7"}],
    "none": None,
    "number": 42,
}


def test_input_bad_events_rejected_without_side_effects(quota, count_requests, log_lines, emf, subtests):
    # Given a clean stack, watching every SSM and DynamoDB request (one stack for all cases:
    # a rejected event must leave it clean, which is exactly what each case checks)
    ssm = count_requests("ssm", "GetParameter")
    transactions = count_requests("dynamodb", "TransactWriteItems")
    log_lines()

    assert BAD_EVENTS  # the cases below must run
    for name, event in BAD_EVENTS.items():
        with subtests.test(msg=name):
            # When the quota Lambda receives a malformed event
            response = quota.invoke(event)

            # Then it answers a structured error, reads no cap, counts nothing, emits the metric
            assert response["ok"] is False
            assert response["error"] == "SandboxInvalidRequest"
            assert response["error_message"].startswith("Invalid request")
            assert "dimension" not in response
            assert (ssm.sent, transactions.sent) == (0, 0)
            assert quota.items(naming.TENANT_DAILY_COUNTERS) == []
            assert quota.items(naming.AGENT_HOURLY_COUNTERS) == []
            assert len(emf(log_lines(), naming.METRIC_INVALID_REQUEST)) == 1


def test_input_json_string_event_is_accepted(quota):
    # Given the event as a JSON document (how a raw Invoke payload may arrive)
    event = json.dumps({"tenant_id": "acme", "agent_id": "agent-7"})

    # When it is handled
    response = quota.invoke(event)

    # Then it is the same request as the object form
    assert response == {"ok": True, "tenant_daily_count": 1, "agent_hourly_count": 1}
