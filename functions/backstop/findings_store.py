"""Findings table access: BatchWriteItem in chunks of 25, unprocessed items retried.

Finding keys are deterministic (timestamp, event id, position), so a redelivered payload
overwrites the same items instead of duplicating them.
"""

from __future__ import annotations

import time
from typing import Any

from botocore.exceptions import ClientError
from sandbox_common.aws import client

BATCH_SIZE = 25
MAX_ATTEMPTS = 5


class FindingsStoreError(Exception):
    """Findings could not be stored; the invocation fails so CloudWatch Logs retries it."""


def _item(finding: dict[str, Any]) -> dict[str, Any]:
    item: dict[str, Any] = {}
    for key, value in finding.items():
        item[key] = {"N": str(value)} if isinstance(value, int) else {"S": str(value)}
    return item


def put_findings(table: str, findings: list[dict[str, Any]]) -> None:
    dynamodb = client("dynamodb")
    for start in range(0, len(findings), BATCH_SIZE):
        requests = [{"PutRequest": {"Item": _item(f)}} for f in findings[start : start + BATCH_SIZE]]
        for attempt in range(MAX_ATTEMPTS):
            try:
                response = dynamodb.batch_write_item(RequestItems={table: requests})
            except ClientError as exc:
                raise FindingsStoreError(exc.response.get("Error", {}).get("Code", "ClientError")) from None
            requests = (response.get("UnprocessedItems") or {}).get(table) or []
            if not requests:
                break
            time.sleep(min(0.05 * 2**attempt, 1.0))
        else:
            raise FindingsStoreError(f"{len(requests)} findings left unprocessed")
