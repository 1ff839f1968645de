"""Audit rows for usage tests and the `usage_report` benchmark: rendered by the real row builder
(`sandbox_common.outcome.Outcome.audit_row`), written with the real item serializer, in the real
table (created from naming's TableSpec, as the local stack and CDK do)."""

from __future__ import annotations

import random
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from sandbox_common import audit
from sandbox_common import naming as n
from sandbox_common.errors import SandboxCapExceeded
from sandbox_common.models import ExecuteCodeRequest
from sandbox_common.outcome import Outcome

from infra.local.resources import create_table_request

STATUSES = ("ok", "ok", "ok", "error", "timeout", "oom", "cap_exceeded", "provisioning")


def create_invocations_table(ddb: Any, stage: str = "local") -> str:
    ddb.create_table(**create_table_request(n.INVOCATIONS, stage))
    return n.INVOCATIONS.physical(stage)


def make_rows(
    count: int,
    *,
    tenant_id: str = "acme",
    start: datetime | None = None,
    seed: int = 7,
    legacy_every: int = 0,
) -> list[dict[str, Any]]:
    """`count` rows over ~3 days, 3 agents, 2 templates, mixed statuses; refused calls have no
    session and cost 0; every `legacy_every`-th row lacks estimated_cost_usd (written before it existed)."""
    rng = random.Random(seed)
    start = start or datetime(2026, 11, 20, tzinfo=UTC)
    rows = []
    for i in range(count):
        status = STATUSES[rng.randrange(len(STATUSES))]
        refused = status in ("cap_exceeded", "provisioning")
        started = start + timedelta(
            seconds=i * (3 * 86_400 / max(count, 1)), milliseconds=rng.randrange(1000)
        )
        request = ExecuteCodeRequest(
            action="execute_code",
            tenant_id=tenant_id,
            agent_id=f"agent-{i % 3}",
            template_id=("analyst", "reporter")[i % 2],
            turn_id=f"turn-{i // 4}",
            call_id=f"call-{i}",
            code=f"print({i})",
        )
        outcome = Outcome(
            request=request,
            invocation_id=f"{tenant_id}-inv-{i:07d}",
            started_at=started,
            finished_at=started + timedelta(milliseconds=rng.randrange(1, 5000)),
            session_id=None if refused else f"sess-{tenant_id}-{i // 4}",
            environment="default-public",
            estimated_cost_usd=0 if refused else 0.0015,
        )
        if refused:
            outcome.fail(
                SandboxCapExceeded("refused", dimension="tenant_daily", resets_at="2026-11-21T00:00:00Z")
            )
        outcome.exit_status = status
        row = outcome.audit_row(30)
        if legacy_every and i % legacy_every == 0:
            del row[n.AUDIT_ATTR_COST]
        rows.append(row)
    return rows


def write_rows(ddb: Any, table: str, rows: Iterable[dict[str, Any]]) -> None:
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append({"PutRequest": {"Item": audit.to_item(row)}})
        if len(batch) == 25:
            _flush(ddb, table, batch)
            batch = []
    if batch:
        _flush(ddb, table, batch)


def _flush(ddb: Any, table: str, batch: list[dict[str, Any]]) -> None:
    pending = {table: batch}
    while pending:
        pending = ddb.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}
