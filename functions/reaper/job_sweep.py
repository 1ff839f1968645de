"""The background-jobs sweep, a reaper hook: every reaper run ends the jobs
nobody polls — finished ones, overdue ones (deadline + grace: their session is stopped) and those
whose session vanished — with `sandbox_runtime.job_end.finish_due_jobs`, the very code get_job runs.

Exactly once, whoever comes first: each end is claimed with one conditional transaction
(JobStore.claim_end), so a get_job, a cancel_job, an end_turn or a second reaper racing this sweep
ends the job once and writes its one audit row once; a sweep killed half-way leaves the job
`finishing` with its outcome stored, and the next observer completes it from there.

The parts are the reaper's own: its ledger's DynamoDB client, the tenant's session-runner role
(Reaper.runner, the stage's output caps), an audit writer on the stage's audit table and DLQ, and
the stage's artifacts bucket for the files an ended job left (PutObject only).
A turn is closed when its item says `ended`: only then (or on timeout) is a job's session stopped.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from sandbox_common import naming as n
from sandbox_runtime.artifacts import s3_client
from sandbox_runtime.job_end import JobDeps, finish_due_jobs, job_files

from . import sweep
from .service import Reaper, reaper


def job_deps(r: Reaper) -> JobDeps:
    settings = r.settings

    def turn_closed(tenant_id: str, turn_id: str) -> bool:
        turn = sweep.read_turn(r.ddb, settings.turns_table, tenant_id, turn_id)
        return turn is not None and turn.ended

    return JobDeps(
        store=r.jobs(),
        runner_for=r.runner,
        audit_writer=r.audit_writer(),
        retention_days=settings.audit_retention_days,
        turn_closed=turn_closed,
        killed=r.kill_switch.check,
        # an ended job's files come back with its final answer, also when the reaper saw its end
        collect_files=job_files(r.runner, settings.artifacts_bucket, s3_client())
        if settings.artifacts_bucket
        else None,
    )


# Of the reaper's 300 s: the job sweep stops taking new jobs after this long, so the session sweep
# and the refill that follow always run (the jobs left over are first in the next run).
JOB_SWEEP_BUDGET_SECONDS = 120


def end_due_jobs(now: float) -> dict[str, Any]:
    """The hook: {"ended": n, "by_status": {status: n}} for the run's log line. (finish_due_jobs
    reads the clock per job: a long sweep judges each deadline when it gets there.)"""
    ended = finish_due_jobs(job_deps(reaper()), until=now + JOB_SWEEP_BUDGET_SECONDS)
    return {"ended": len(ended), "by_status": dict(Counter(status for _, status in ended))}


# Registered by the reaper's hooks.load() (SWEEP_MODULES names this module).
SWEEP_HOOKS = {n.REAPER_HOOK_JOBS: end_due_jobs}
