"""The CloudFormation custom resource answer: a JSON document PUT to the request's presigned S3 URL.

CloudFormation waits for it (up to an hour) and nothing else: every request gets exactly one
answer, SUCCESS or FAILED with a reason, whatever happened before.
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass, field
from typing import Any

SUCCESS, FAILED = "SUCCESS", "FAILED"
TIMEOUT_SECONDS = 30
MAX_REASON = 1000


@dataclass(frozen=True)
class Outcome:
    status: str
    physical_id: str
    data: dict[str, str] = field(default_factory=dict)
    reason: str = ""


def body(event: dict[str, Any], outcome: Outcome) -> bytes:
    return json.dumps(
        {
            "Status": outcome.status,
            "Reason": (outcome.reason or outcome.status)[:MAX_REASON],
            "PhysicalResourceId": outcome.physical_id,
            "StackId": event["StackId"],
            "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"],
            "NoEcho": False,
            "Data": outcome.data,
        }
    ).encode("utf-8")


def send(event: dict[str, Any], outcome: Outcome) -> int:
    """PUT the answer; returns the HTTP status. The presigned URL signs an empty content type."""
    payload = body(event, outcome)
    request = urllib.request.Request(
        event["ResponseURL"],
        data=payload,
        method="PUT",
        headers={"Content-Type": "", "Content-Length": str(len(payload))},
    )
    with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310 (https from CloudFormation)
        return int(response.status)
