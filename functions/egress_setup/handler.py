"""Thin handler: one answer to CloudFormation for every request, and one JSON log line."""

from __future__ import annotations

import json
from typing import Any

from egress_setup import cfn_response
from egress_setup.resources import handle


def handler(event: dict[str, Any], context: Any) -> None:
    try:
        outcome = handle(event)
    except Exception as exc:  # noqa: BLE001 - CloudFormation waits an hour for an answer never sent
        physical = event.get("PhysicalResourceId") or event.get("LogicalResourceId", "unknown")
        outcome = cfn_response.Outcome(cfn_response.FAILED, physical, reason=f"{type(exc).__name__}: {exc}")
    print(
        json.dumps(
            {
                "resource_type": event.get("ResourceType"),
                "request_type": event.get("RequestType"),
                "logical_id": event.get("LogicalResourceId"),
                "status": outcome.status,
                "reason": outcome.reason,
            }
        )
    )
    cfn_response.send(event, outcome)
