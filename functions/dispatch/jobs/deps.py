"""The JobDeps of background jobs, built from dispatch's own parts, so dispatch's call sites and
the scheduled session reaper (`sandbox_runtime.job_end.finish_due_jobs`) use the same store,
runners (the tenant's session-runner credentials), audit writer, turn state and artifacts bucket."""

from __future__ import annotations

from sandbox_common import aws
from sandbox_runtime.artifacts import s3_client
from sandbox_runtime.job_end import JobDeps, job_files
from sandbox_runtime.job_store import JobStore
from sandbox_runtime.runner import SessionRunner

from dispatch.parts import Parts


def job_deps_for(parts: Parts) -> JobDeps:
    settings = parts.settings

    def runner_for(tenant_id: str) -> SessionRunner:
        # The tenant's own runner (its role, its interpreters only), also after it was disabled:
        # ending a job and stopping its session must always be possible.
        return parts.runners(parts.preflight.runner_target(tenant_id))

    def turn_closed(tenant_id: str, turn_id: str) -> bool:
        turn = parts.turns.get(tenant_id, turn_id)
        return bool(turn is not None and turn.tenant_id == tenant_id and turn.ended)

    return JobDeps(
        store=JobStore(table_name=settings.jobs_table, ddb=aws.client("dynamodb")),
        runner_for=runner_for,
        audit_writer=parts.audit_writer,
        retention_days=settings.audit_retention_days,
        turn_closed=turn_closed,
        killed=parts.kill_switch.check,
        collect_files=job_files(runner_for, settings.artifacts_bucket, s3_client())
        if settings.artifacts_bucket
        else None,
    )
