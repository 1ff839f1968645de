"""Builds the JobDeps of background jobs (issue 13) from dispatch's own parts, so dispatch's
call sites and the scheduled session reaper (`job_flow.finish_due_jobs(job_deps_for(d))`) use
the same store, runners (the tenant's session-runner credentials), audit writer and turn state."""

from __future__ import annotations

from typing import Any

from sandbox_common import aws
from sandbox_runtime.job_end import JobDeps
from sandbox_runtime.job_store import JobStore
from sandbox_runtime.runner import SessionRunner


def job_deps_for(dispatcher: Any) -> JobDeps:
    """`dispatcher`: anything with settings, preflight, turns, audit_writer and runner_factory
    (dispatch's Dispatcher)."""
    settings = dispatcher.settings

    def runner_for(tenant_id: str) -> SessionRunner:
        # The tenant's own runner (its role, its interpreters only), also after it was disabled:
        # ending a job and stopping its session must always be possible.
        return dispatcher.runner_factory(dispatcher.preflight.runner_target(tenant_id))  # type: ignore[no-any-return]

    def turn_closed(tenant_id: str, turn_id: str) -> bool:
        turn = dispatcher.turns.get(tenant_id, turn_id)
        return bool(turn is not None and turn.tenant_id == tenant_id and turn.ended)

    return JobDeps(
        store=JobStore(table_name=settings.jobs_table, ddb=aws.client("dynamodb")),
        runner_for=runner_for,
        audit_writer=dispatcher.audit_writer,
        retention_days=settings.audit_retention_days,
        turn_closed=turn_closed,
    )
