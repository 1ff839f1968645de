"""Background jobs at dispatch's call sites (docs/jobs.md): what execute_code (background: true),
get_job, cancel_job and end_turn call. Each function takes the parsed request and a JobDeps and
returns the agent's answer or raises a named SandboxFailure; the actions keep their own flow
(`dispatch.jobs.flow`).

execute_code with `background: true`, in dispatch's order:
1. `reserve(...)` right after pre-flight and BEFORE the quota check: takes one of the turn's
   three slots and creates the job record. A 4th running job → SandboxInvalidRequest, so nothing
   is counted and no audit row is written.
2. quota, session as for any call. If either refuses or fails: `release(...)` (slot freed, record
   deleted) and dispatch answers and audits that failure as usual.
3. `launch(...)`: binds the record to the session, starts the job there and answers
   `{"ok": true, "status": "running", "job_id", "invocation_id", "session_id"}` at once. It raises
   JobLaunchFailed (after releasing) if the session could not start it; dispatch then audits the
   failure as the call's row. On success dispatch writes NO audit row: the job's one row is written
   when it ends (sandbox_runtime.job_end), with the same invocation_id.
"""

from __future__ import annotations

from typing import Any, TypeAlias

from sandbox_common import limits
from sandbox_common.egress_usage import Baseline
from sandbox_common.errors import SandboxError, SandboxInvalidRequest
from sandbox_common.models import CancelJobRequest, ExecuteCodeRequest, GetJobRequest
from sandbox_common.tool_spec import CODE_LANGUAGE
from sandbox_runtime.job_end import (
    JobCheckFailed,
    JobDeps,
    audit_base,
    cancel_job,
    poll_job,
    running_response,
)
from sandbox_runtime.job_store import (
    JobExists,
    JobNotFound,
    JobRecord,
    JobStoreUnavailable,
    TooManyJobs,
    job_id_for,
)
from sandbox_runtime.runner import SessionGone
from sandbox_runtime.runner.jobs import JobFailure, JobRunner

JobRequest: TypeAlias = GetJobRequest | CancelJobRequest

TOO_MANY_JOBS = (
    f"This turn already has {limits.MAX_RUNNING_JOBS_PER_TURN} background jobs running; wait for one to "
    "finish (get_job) or cancel one (cancel_job) before starting another."
)
UNKNOWN_JOB = "Invalid request: there is no such background job in this turn."
JOBS_UNAVAILABLE = "The background job service is unavailable right now; please try again shortly."
JOB_CHECK_FAILED = (
    "The background job could not be checked right now; it is still tracked, please ask again shortly."
)
TIMEOUT_SHORTENED = (
    "The job's timeout was shortened from {asked} s to {got} s: the sandbox session it runs in ends before"
    " that."
)
JOB_LAUNCH_FAILED = "The background job could not be started in the sandbox; please try again."


class JobLaunchFailed(SandboxError):
    """The session did not start the job (the slot was released): audit this as the call's row."""


def timeout_of(req: ExecuteCodeRequest) -> int:
    value = getattr(req, "timeout_s", None)
    return limits.DEFAULT_JOB_TIMEOUT_SECONDS if value is None else int(value)


def reserve(
    req: ExecuteCodeRequest,
    deps: JobDeps,
    *,
    invocation_id: str,
    environment: str | None,
    session_id: str = "",
    interpreter_id: str = "",
    turn_token_hash: str | None = None,
    egress_before: Baseline | None = None,
) -> JobRecord:
    """Take a slot and create the job record — with the turn's live session if it has one (then
    `launch` needs no second write when the job runs there) and the hash its turn is bound to
    (`turn_token_hash`: get_job checks the turn token against it). Raises SandboxInvalidRequest
    (4th running job: nothing written) or SandboxError (store down)."""
    record = JobRecord(
        job_id=job_id_for(invocation_id),
        tenant_id=req.tenant_id,
        agent_id=req.agent_id,
        turn_id=req.turn_id,
        session_id=session_id,
        interpreter_id=interpreter_id,
        invocation_id=invocation_id,
        call_id=req.call_id,
        timeout_s=timeout_of(req),
        submitted_ms=int(deps.clock() * 1000),
        audit_base=audit_base(req, environment=environment, egress_before=egress_before),
        turn_token_hash=turn_token_hash,
    )
    try:
        deps.store.create(record)
    except TooManyJobs:
        raise SandboxInvalidRequest(TOO_MANY_JOBS) from None
    except (JobExists, JobStoreUnavailable) as exc:
        raise SandboxError(JOBS_UNAVAILABLE, failure_reason=f"job_store_unavailable:{exc}") from None
    return record


def release(record: JobRecord, deps: JobDeps) -> None:
    """Give the slot back for a job that never started. Never raises (logged by the store's caller):
    a slot that could not be freed is freed when the reaper ends the unbound job."""
    try:
        deps.store.release(record)
    except JobStoreUnavailable:
        pass


def effective_timeout(requested_s: int, *, session_left_s: float | None, reserve_s: int) -> int:
    """A job must end inside its session's lifetime (AgentCore ends a session sessionTimeoutSeconds
    after its start, whatever runs in it) and before dispatch would recycle that session, so its
    timeout is at most the session's remaining life minus `reserve_s` (and at least 1 s)."""
    if session_left_s is None:
        return requested_s
    return max(1, min(requested_s, int(session_left_s) - reserve_s))


def launch(
    record: JobRecord,
    deps: JobDeps,
    *,
    code: str,
    session_id: str,
    interpreter_id: str,
    session_left_s: float | None = None,
    reserve_s: int = 0,
    language: str = CODE_LANGUAGE,
    gone_raises: bool = False,
) -> dict[str, Any]:
    """Start the reserved job in the session; answers at once. `session_left_s`: the session's
    remaining lifetime (the job's timeout is shortened to fit it, and the answer says so).
    `gone_raises`: a session found gone raises SessionGone with the slot kept (the caller starts
    a fresh session and launches again) instead of JobLaunchFailed."""
    runner = deps.runner_for(record.tenant_id)
    timeout_s = effective_timeout(record.timeout_s, session_left_s=session_left_s, reserve_s=reserve_s)
    try:
        bound = record
        if (record.session_id, record.interpreter_id, record.timeout_s) != (
            session_id,
            interpreter_id,
            timeout_s,
        ):
            bound = deps.store.bind_session(
                record, session_id=session_id, interpreter_id=interpreter_id, timeout_s=timeout_s
            )
        JobRunner(runner).submit_job(
            interpreter_id,
            session_id,
            job_id=record.job_id,
            code=code,
            timeout_s=timeout_s,
            language=language,
        )
    except SessionGone:
        if gone_raises:
            raise
        release(record, deps)
        raise JobLaunchFailed(JOB_LAUNCH_FAILED, failure_reason="job_launch_failed:session_gone") from None
    except (JobStoreUnavailable, JobFailure) as exc:
        release(record, deps)
        reason = getattr(exc, "failure_reason", None) or f"job_store_unavailable:{exc}"
        raise JobLaunchFailed(JOB_LAUNCH_FAILED, failure_reason=f"job_launch_failed:{reason}") from None
    answer = running_response(bound)
    answer["timeout_s"] = timeout_s
    if timeout_s < record.timeout_s:
        answer["notice"] = TIMEOUT_SHORTENED.format(asked=record.timeout_s, got=timeout_s)
    return answer


def owned(req: JobRequest, deps: JobDeps) -> JobRecord:
    """The caller's job (one consistent GetItem). Another tenant's, agent's or turn's job is
    refused exactly like an unknown id (SandboxInvalidRequest); a store failure is SandboxError."""
    try:
        return deps.store.get_owned(
            req.job_id, tenant_id=req.tenant_id, agent_id=req.agent_id, turn_id=req.turn_id
        )
    except JobNotFound:
        raise SandboxInvalidRequest(UNKNOWN_JOB) from None
    except JobStoreUnavailable as exc:
        raise SandboxError(JOBS_UNAVAILABLE, failure_reason=f"job_store_unavailable:{exc}") from None


def get_job(req: GetJobRequest, deps: JobDeps) -> dict[str, Any]:
    """`{"ok": true, "status": "running", "elapsed_ms"}` or the job's final answer. A job of another
    tenant, agent or turn is refused exactly like an unknown id."""
    return answer(owned(req, deps), deps, cancel=False)


def cancel(req: CancelJobRequest, deps: JobDeps) -> dict[str, Any]:
    """Ends the job (its processes are gone within seconds) and answers its final result —
    `cancelled`, or how it had already ended."""
    return answer(owned(req, deps), deps, cancel=True)


def answer(record: JobRecord, deps: JobDeps, *, cancel: bool) -> dict[str, Any]:
    """Observe (or cancel) an owned job: one status call to its session while it runs."""
    try:
        view = (cancel_job if cancel else poll_job)(record, deps)
    except JobCheckFailed as exc:
        raise SandboxError(JOB_CHECK_FAILED, failure_reason=exc.failure_reason) from None
    except JobStoreUnavailable as exc:
        raise SandboxError(JOBS_UNAVAILABLE, failure_reason=f"job_store_unavailable:{exc}") from None
    return view.to_response()
