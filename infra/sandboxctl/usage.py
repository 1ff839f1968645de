"""`sandboxctl usage`: a tenant's usage report, computed from the audit table.

One DynamoDB Query on the `by_tenant_time` index (never a Scan), every page (botocore's
paginator), only the attributes the report needs (ProjectionExpression). Rows are aggregated as
they arrive, straight from DynamoDB's attribute values, so the report costs little more than the
Query itself (benchmark `usage_report`).

What each figure means:
- `calls`: audit rows in the window (one per validated execute_code, refused calls included),
  split by `exit_status`.
- `sessions`: distinct `session_id`s (refused calls have none).
- `wall_time_ms`: the sum of the rows' `duration_ms` (wall-clock time of the call, as dispatch
  measured it). CPU time is not known: neither AgentCore nor the audit row records it
  (`cpu_time_ms` is null and the report says so).
- `estimated_cost_usd`: the exact decimal sum of the rows' `estimated_cost_usd` (the SSM price in
  force for that call, 0 for refused calls). Rows written before the attribute existed count as 0
  and are counted in `rows_without_cost`.

Window: `since` inclusive, `until` exclusive (UTC); `started_at` is ISO-8601 with milliseconds,
so the exclusive bound is `until - 1 ms` in a BETWEEN / <= key condition.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sandbox_common import naming as n
from sandbox_common.windows import iso_z_ms

CPU_TIME_NOTE = (
    "CPU time is not recorded (AgentCore reports wall-clock executionTime only); wall_time_ms is wall-clock"
)
COST_NOTE = f"rows written before {n.AUDIT_ATTR_COST} existed count as 0 (rows_without_cost)"
# Attributes the report reads: the projection keeps each page small.
_PROJECTED = (
    "exit_status",
    "session_id",
    "duration_ms",
    n.AUDIT_ATTR_COST,
    "started_at",
    "agent_id",
    "template_id",
)
TENANT_TIME_INDEX = n.INVOCATIONS_BY_TENANT_TIME.name
# Progress on stderr once the report has read this many rows (a small report stays quiet).
PROGRESS_AFTER_ROWS = 5000
CSV_COLUMNS = (
    "group",
    "calls",
    "ok",
    "error",
    "timeout",
    "oom",
    "cap_exceeded",
    "provisioning",
    "sessions",
    "wall_time_ms",
    "estimated_cost_usd",
    "rows_without_cost",
)
EXIT_STATUSES = ("ok", "error", "timeout", "oom", "cap_exceeded", "provisioning")


def query_request(
    table: str, tenant_id: str, since: datetime | None, until: datetime | None
) -> dict[str, Any]:
    """The one Query (its kwargs) that reads a tenant's audit rows in [since, until)."""
    index = _index()
    # Every attribute through a placeholder (no reserved-word trap), each placeholder used.
    names = {f"#a{i}": attr for i, attr in enumerate(_PROJECTED)}
    placeholder = {attr: key for key, attr in names.items()}
    names["#t"] = index.pk
    sk = placeholder[str(index.sk)]  # started_at is projected, so its placeholder exists
    values: dict[str, Any] = {":t": {"S": tenant_id}}
    condition = "#t = :t"
    last = iso_z_ms(until - timedelta(milliseconds=1)) if until is not None else None
    if since is not None and last is not None:
        condition += f" AND {sk} BETWEEN :a AND :b"
        values.update({":a": {"S": iso_z_ms(since)}, ":b": {"S": last}})
    elif since is not None:
        condition += f" AND {sk} >= :a"
        values[":a"] = {"S": iso_z_ms(since)}
    elif last is not None:
        condition += f" AND {sk} <= :b"
        values[":b"] = {"S": last}
    projection = ", ".join(placeholder[attr] for attr in _PROJECTED)
    return {
        "TableName": table,
        "IndexName": index.name,
        "KeyConditionExpression": condition,
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
        "ProjectionExpression": projection,
    }


def _index() -> n.Index:
    return next(i for i in n.INVOCATIONS.indexes if i.name == TENANT_TIME_INDEX)


@dataclass
class Tally:
    """Running totals of one group (or of the whole report)."""

    calls: int = 0
    by_exit_status: dict[str, int] = field(default_factory=dict)
    sessions: set[str] = field(default_factory=set)
    wall_time_ms: int = 0
    cost: Decimal = Decimal(0)
    rows_without_cost: int = 0

    def add(self, item: dict[str, Any]) -> None:
        self.calls += 1
        status = item.get("exit_status", {}).get("S", "unknown")
        self.by_exit_status[status] = self.by_exit_status.get(status, 0) + 1
        session = item.get("session_id")
        if session is not None:
            self.sessions.add(session["S"])
        duration = item.get("duration_ms")
        if duration is not None:
            self.wall_time_ms += int(duration["N"])
        cost = item.get(n.AUDIT_ATTR_COST)
        if cost is None:
            self.rows_without_cost += 1
        else:
            self.cost += Decimal(cost["N"])

    def summary(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "calls_by_exit_status": dict(sorted(self.by_exit_status.items())),
            "sessions": len(self.sessions),
            "wall_time_ms": self.wall_time_ms,
            "cpu_time_ms": None,
            "estimated_cost_usd": str(self.cost),
            "rows_without_cost": self.rows_without_cost,
        }


def _group_key(item: dict[str, Any], by: str) -> str:
    value = str(item.get(n.USAGE_GROUPINGS[by], {}).get("S", "-"))
    return value[:10] if by == "day" else value  # started_at "2026-11-21T08:00:00.000Z" -> UTC date


def aggregate(
    pages: Iterable[dict[str, Any]],
    *,
    by: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Tally, dict[str, Tally], int]:
    """(totals, groups, pages read) over Query pages of raw DynamoDB items; `progress(rows, pages)`
    is called after each page."""
    totals, rows, page_count = Tally(), 0, 0
    groups: dict[str, Tally] = {}
    for page in pages:
        page_count += 1
        for item in page.get("Items", []):
            totals.add(item)
            if by is not None:
                key = _group_key(item, by)
                tally = groups.get(key)
                if tally is None:
                    tally = groups[key] = Tally()
                tally.add(item)
        rows += len(page.get("Items", []))
        if progress is not None:
            progress(rows, page_count)
    return totals, groups, page_count


def usage_report(
    ddb: Any,
    table: str,
    tenant_id: str,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    by: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    page_size: int | None = None,
) -> dict[str, Any]:
    """The report as plain data (rendered as a table, JSON or CSV by the CLI). `page_size` caps
    the rows per Query page (default: DynamoDB's 1 MB pages)."""
    if by is not None and by not in n.USAGE_GROUPINGS:
        raise ValueError(f"--by must be one of {', '.join(n.USAGE_GROUPINGS)}")
    if since is not None and until is not None and until <= since:
        raise ValueError("--until must be after --since")
    request = query_request(table, tenant_id, since, until)
    config = {"PageSize": page_size} if page_size else {}
    pages = ddb.get_paginator("query").paginate(**request, PaginationConfig=config)
    totals, groups, page_count = aggregate(pages, by=by, progress=progress)
    return {
        "tenant_id": tenant_id,
        "since": iso_z_ms(since) if since else None,
        "until": iso_z_ms(until) if until else None,
        "by": by,
        "pages": page_count,
        "totals": totals.summary(),
        "groups": [{"group": key, **groups[key].summary()} for key in sorted(groups)],
        "notes": [CPU_TIME_NOTE, COST_NOTE],
    }


def to_csv(report: dict[str, Any]) -> str:
    """One line per group (or one `total` line without --by), then the `total` line."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for group in [*report["groups"], {"group": "total", **report["totals"]}]:
        statuses = group["calls_by_exit_status"]
        writer.writerow(
            [
                group["group"],
                group["calls"],
                *(statuses.get(s, 0) for s in EXIT_STATUSES),
                group["sessions"],
                group["wall_time_ms"],
                group["estimated_cost_usd"],
                group["rows_without_cost"],
            ]
        )
    return out.getvalue()


class StderrProgress:
    """`progress(rows, pages)` that writes one updating line to a stream once a report is big
    enough to take a while (PROGRESS_AFTER_ROWS), and a final newline on `done()`."""

    def __init__(self, stream: Any, after_rows: int = PROGRESS_AFTER_ROWS) -> None:
        self.stream, self.after_rows, self.shown = stream, after_rows, False

    def __call__(self, rows: int, pages: int) -> None:
        if rows < self.after_rows:
            return
        self.shown = True
        self.stream.write(f"\rusage: {rows} audit rows read ({pages} pages)")
        self.stream.flush()

    def done(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()
