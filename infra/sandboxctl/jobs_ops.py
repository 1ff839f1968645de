"""`sandboxctl jobs list`: background jobs from the JOBS table, newest first.

Reads the table directly (the CLI does not import Lambda code): one tenant's jobs through the
`by_tenant` index, every tenant's through a scan of job items (operators only, small tables).
A job's `status` is its final state, or `running` while it is running or its end is being
recorded; `elapsed_ms` is its duration once ended, else the time since it was submitted.
"""

from __future__ import annotations

import time
from typing import Any

from sandbox_common import naming as n

from infra.sandboxctl.target import Target

_FIELDS = (
    "job_id",
    "tenant_id",
    "agent_id",
    "turn_id",
    "session_id",
    "invocation_id",
    n.JOB_ATTR_SUBMITTED_AT,
    n.JOB_ATTR_DEADLINE_AT,
)


def _row(item: dict[str, Any], now_ms: int) -> dict[str, Any]:
    row: dict[str, Any] = {k: item[k]["S"] for k in _FIELDS if k in item and "S" in item[k]}
    state = item.get("final_state", {}).get("S") or "running"
    submitted = int(item.get("submitted_ms", {}).get("N", "0"))
    ended = item.get("ended_ms", {}).get("N")
    row["status"] = state
    row["timeout_s"] = int(item.get("timeout_s", {}).get("N", "0"))
    row["elapsed_ms"] = max(0, (int(ended) if ended else now_ms) - submitted)
    row["_submitted_ms"] = submitted
    return row


def jobs_list(target: Target, *, tenant_id: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
    ddb = target.client("dynamodb")
    table = target.table(n.JOBS)
    if tenant_id is not None:
        pages = ddb.get_paginator("query").paginate(
            TableName=table,
            IndexName=n.JOBS_BY_TENANT.name,
            ScanIndexForward=False,
            KeyConditionExpression="tenant_id = :t",
            ExpressionAttributeValues={":t": {"S": tenant_id}},
        )
    else:
        pages = ddb.get_paginator("scan").paginate(
            TableName=table,
            FilterExpression="begins_with(job_key, :p)",
            ExpressionAttributeValues={":p": {"S": n.JOB_KEY_PREFIX}},
        )
    now_ms = int(time.time() * 1000)
    rows = [
        _row(item, now_ms)
        for page in pages
        for item in page.get("Items", [])
        if item.get(n.JOBS.pk, {}).get("S", "").startswith(n.JOB_KEY_PREFIX)
    ]
    rows.sort(key=lambda r: r["_submitted_ms"], reverse=True)
    for row in rows:
        del row["_submitted_ms"]
    return rows[:limit]
