"""Background jobs, the logic (docs/jobs.md): observe a job, end it exactly once, reap due jobs.

Whoever observes a job's end first — `get_job`, `cancel_job`, `end_turn` or the scheduled
reaper (`finish_due_jobs`) — ends it through `_end`: claim the end with the outcome (one
conditional transaction, JobStore.claim_end), write the one audit row (conditional on the
invocation id), log the full redacted output, then mark it final. A crash anywhere in between
is finished by the next observer from the *stored* outcome, so the row is written once and
always from the first observed outcome.

Sessions: a job whose `timeout_s` passed ends `timed_out`: its supervisor stopped the job's
processes, and the session with its variables and files stays. The session is stopped when the
turn has ended and this was its last running job (the session outlives `end_turn` until then). A
job whose session vanished before its end was seen ends `failed` (`job_session_ended`). A job
still not final DEADLINE_GRACE after its deadline (its supervisor gone or the session unreachable)
is ended `timed_out` by stopping its session: no job outlives its deadline by more than the grace
plus one reaper period.

The kill switch (docs/circuit-breakers.md, `JobDeps.killed`): an observer that finds the job's
tenant killed (a call cap at 0, the tenant disabled) cancels the job instead of only asking its state; it ends
`cancelled` with `reason: "kill_switch"` and the refusal a new call would get.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from sandbox_common import audit, egress_usage, messages
from sandbox_common import naming as n
from sandbox_common.observability import emit_metric, logger
from sandbox_common.outcome import Outcome, public
from sandbox_common.output_log import log_output
from sandbox_common.tool_spec import CODE_LANGUAGE
from sandbox_session.jobs import CANCELLED

from .artifacts import ArtifactContext, ArtifactStore, CollectResult, collect_and_store
from .job_store import FINISHING, JobRecord, JobStore, JobStoreUnavailable
from .kill_switch import Kill
from .runner import ExecutionResult, SessionGone, SessionRunner
from .runner.jobs import JobFailure, JobProgress, JobRunner, JobState, JobUnknownInSession

if TYPE_CHECKING:  # the reaper's cold import leaves the request models out
    from sandbox_common.models import ExecuteCodeRequest

_EGRESS_BEFORE = "egress_before"  # audit_base key: the session's egress counters at submit

# Beyond the in-session supervisor's own grace: how long after a job's deadline dispatch stops
# waiting for the session to report it and stops the session instead.
HOST_DEADLINE_GRACE_SECONDS = 60
NO_FILES = CollectResult([], [])
# A job reserved (slot taken) whose dispatch died before binding it to a session: after this long
# (far beyond any submit, bounded by the Lambda timeout) it is ended `failed`, audited, slot freed.
UNBOUND_JOB_GRACE_SECONDS = 900


@dataclass(frozen=True)
class JobView:
    """What get_job / cancel_job answer: running with elapsed time, or the final response."""

    job_id: str
    status: str  # running | completed | failed | timed_out | cancelled
    elapsed_ms: int
    response: dict[str, Any] | None = None
    progress: JobProgress | None = None  # a running job's output so far, when its session told it

    def to_response(self) -> dict[str, Any]:
        if self.response is not None:
            return dict(self.response)
        running = {"ok": True, "status": self.status, "job_id": self.job_id, "elapsed_ms": self.elapsed_ms}
        return running | (self.progress.to_dict() if self.progress is not None else {})


class JobCheckFailed(Exception):
    """The job's session could not be asked (service error); its state is unknown for now."""

    def __init__(self, failure_reason: str) -> None:
        super().__init__(failure_reason)
        self.failure_reason = failure_reason


@dataclass
class JobDeps:
    store: JobStore
    runner_for: Callable[[str], SessionRunner]  # tenant_id -> that tenant's runner
    audit_writer: audit.AuditWriter
    retention_days: int
    turn_closed: Callable[[str, str], bool]  # (tenant_id, turn_id) -> end_turn already happened
    clock: Callable[[], float] = time.time
    # the kill switch: tenant_id -> the Kill in force (a call cap at 0, the tenant disabled) or None; an
    # observer that finds its job's tenant killed cancels the job (`reason: "kill_switch"`).
    killed: Callable[[str], Kill | None] = lambda _tenant_id: None
    # The files an ended job left under outputs/, read from its session and stored as artifacts
    # (`job_files`); None where no artifacts bucket is configured (the answer's `files` is []).
    collect_files: Callable[[JobRecord], CollectResult] | None = None


def job_files(
    runner_for: Callable[[str], SessionRunner], bucket: str, s3: Any
) -> Callable[[JobRecord], CollectResult]:
    """JobDeps.collect_files for a stage's artifacts bucket: the ended job's files, read from its
    session with its tenant's runner and stored under its submit's invocation id, as a call's are."""

    def collect(record: JobRecord) -> CollectResult:
        ctx = ArtifactContext(record.tenant_id, record.turn_id, record.invocation_id, bucket)
        return collect_and_store(
            runner_for(record.tenant_id).files,
            record.interpreter_id,
            record.session_id,
            ctx,
            ArtifactStore(s3),
            job_id=record.job_id,
        )

    return collect


def audit_base(
    req: ExecuteCodeRequest, *, environment: str | None, egress_before: egress_usage.Baseline | None = None
) -> dict[str, Any]:
    """The audit fields known at submit (the code itself is not stored, only its hash), and an
    allowlist session's egress counters before the job (its row's `egress` is the difference)."""
    base = {
        "user_id": req.user_id,
        "template_id": req.template_id,
        "invocation_source": req.invocation_source,
        "environment": environment,
        "executed_code_hash": audit.code_hash(req.code),
        "language": getattr(req, "language", CODE_LANGUAGE),
    }
    if egress_before is not None:
        base[_EGRESS_BEFORE] = egress_before.as_dict()
    return base


def _egress(record: JobRecord, deps: JobDeps, environment: str | None) -> dict[str, Any] | None:
    """What the job's allowlist session sent from its submit to its end (None: no proxy in its path,
    or its counters could not be read: the row then says zeros)."""
    if not record.session_id or not egress_usage.is_allowlist(environment):
        return None
    try:
        egress = deps.runner_for(record.tenant_id).egress
        if egress is None:
            return None
        after = egress.store.counters(record.session_id)
    except Exception as exc:  # noqa: BLE001 — the figures are a record: never a reason to lose the row
        logger.warning("egress_counters_unread", extra={"job_id": record.job_id, "cause": type(exc).__name__})
        return None
    baseline = egress_usage.Baseline.from_dict(record.audit_base.get(_EGRESS_BEFORE))
    return egress_usage.usage(environment, record.session_id, baseline, after)


def running_response(record: JobRecord) -> dict[str, Any]:
    """execute_code's immediate answer for a submitted job."""
    return {
        "ok": True,
        "status": "running",
        "job_id": record.job_id,
        "invocation_id": record.invocation_id,
        "session_id": record.session_id,
    }


# --- observing ------------------------------------------------------------------------------------
def poll_job(record: JobRecord, deps: JobDeps) -> JobView:
    """get_job: one status call to the session while the job runs (plus the caller's GetItem)."""
    return _observe(record, deps, cancel=False)


def cancel_job(record: JobRecord, deps: JobDeps) -> JobView:
    """cancel_job: ends the job's process tree in the session (≤ a few seconds) and ends it."""
    return _observe(record, deps, cancel=True)


def finish_due_jobs(
    deps: JobDeps,
    *,
    limit: int = 200,
    until: float | None = None,
    tenants: Callable[[str], bool] = lambda _tenant_id: True,
) -> list[tuple[str, str]]:
    """For the scheduled reaper: observe every job that is not final yet and end those that ended
    (or are overdue, or whose session is gone). Returns [(job_id, status)] of the jobs it ended.
    Never raises for one job: a failure is logged and the job is left for the next run. `until`
    (epoch seconds, deps.clock): no job is started on after it — the rest wait for the next run,
    earliest deadline first, so the reaper's other work always gets its turn. `tenants`: only the
    jobs of the tenants it picks (the kill switch's run)."""
    ended: list[tuple[str, str]] = []
    for record in deps.store.open_jobs(limit=limit):
        if not tenants(record.tenant_id):
            continue
        if until is not None and deps.clock() >= until:
            logger.info("job_reap_budget_spent", extra={"ended": len(ended)})
            break
        try:
            view = _observe(record, deps, cancel=False)
        except (JobCheckFailed, JobStoreUnavailable) as exc:
            logger.warning(
                "job_reap_failed",
                extra={"job_id": record.job_id, "tenant_id": record.tenant_id, "failure_reason": str(exc)},
            )
            continue
        except Exception as exc:  # noqa: BLE001 — e.g. a tenant whose runner cannot be built: the others go on
            logger.exception(
                "job_reap_failed",
                extra={
                    "job_id": record.job_id,
                    "tenant_id": record.tenant_id,
                    "failure_reason": type(exc).__name__,
                },
            )
            continue
        if view.status != "running":
            ended.append((record.job_id, view.status))
    return ended


def _observe(record: JobRecord, deps: JobDeps, *, cancel: bool) -> JobView:
    if record.state == FINISHING or not record.open:
        return _view(_complete(record, deps), deps)
    runner = deps.runner_for(record.tenant_id)
    jobs = JobRunner(runner)
    now_ms = int(deps.clock() * 1000)
    if not record.session_id:  # reserved, but its submit never reached a session (dispatch died)
        if now_ms - record.submitted_ms < UNBOUND_JOB_GRACE_SECONDS * 1000:
            return JobView(
                job_id=record.job_id, status="running", elapsed_ms=max(0, now_ms - record.submitted_ms)
            )
        return _view(_end(record, "failed", jobs.session_ended_result(0), deps), deps)
    kill = None if cancel else deps.killed(record.tenant_id)
    try:
        state: JobState = (jobs.cancel_job if cancel or kill else jobs.job_status)(
            record.interpreter_id, record.session_id, record.job_id
        )
    except (SessionGone, JobUnknownInSession):
        if now_ms > record.deadline_ms:
            return _timed_out(jobs, record, now_ms, deps)
        return _view(
            _end(record, "failed", jobs.session_ended_result(now_ms - record.submitted_ms), deps), deps
        )
    except JobFailure as exc:
        if now_ms > record.deadline_ms + HOST_DEADLINE_GRACE_SECONDS * 1000:
            runner.stop_session(record.interpreter_id, record.session_id)
            return _timed_out(jobs, record, now_ms, deps)
        raise JobCheckFailed(exc.failure_reason) from None
    if not state.final or state.result is None:
        return JobView(
            job_id=record.job_id,
            status="running",
            elapsed_ms=max(0, now_ms - record.submitted_ms),
            progress=state.progress,
        )
    files = _files(record, state, deps)
    if kill is not None and state.state == CANCELLED:  # ended by the kill switch, not by its owner
        logger.info(
            "job_cancelled_kill_switch",
            extra={
                "job_id": record.job_id,
                "tenant_id": record.tenant_id,
                "failure_reason": kill.failure_reason,
            },
        )
        return _view(
            _end(record, CANCELLED, _killed_result(state.result, kill), deps, kill=kill, files=files), deps
        )
    return _view(_end(record, state.state, state.result, deps, files=files), deps)


def _files(record: JobRecord, state: JobState, deps: JobDeps) -> CollectResult:
    """The ended job's files, collected before its end is claimed (every observer then answers
    the same `files`). Never raises: a collection problem is logged and the job's result stands."""
    if not state.outputs or deps.collect_files is None:
        return NO_FILES
    collected = deps.collect_files(record)
    if collected.failure_reason:
        logger.warning(
            "artifact_collection_failed",
            extra={
                "invocation_id": record.invocation_id,
                "job_id": record.job_id,
                "failure_reason": collected.failure_reason,
            },
        )
    return collected


def _killed_result(result: ExecutionResult, kill: Kill) -> ExecutionResult:
    """The cancelled job's run (its output so far), failed as the kill switch says."""
    failure = kill.failure()
    return replace(
        result,
        exit_status=failure.exit_status,
        error=failure.error,
        error_message=messages.job_killed(failure.message),
        failure_reason=kill.failure_reason,
    )


def _view(record: JobRecord, deps: JobDeps) -> JobView:
    outcome = record.outcome or {}
    response = outcome.get("response") or {}
    return JobView(
        job_id=record.job_id,
        status=record.final_state or "failed",
        elapsed_ms=int(response.get("duration_ms") or 0),
        response=response,
    )


def _timed_out(jobs: JobRunner, record: JobRecord, now_ms: int, deps: JobDeps) -> JobView:
    """A job past its deadline whose session cannot tell its end: ended `timed_out`."""
    return _view(
        _end(record, "timed_out", jobs.overdue_result(record.timeout_s, now_ms - record.submitted_ms), deps),
        deps,
    )


def pending_jobs(tenant_id: str, turn_id: str, deps: JobDeps) -> list[str]:
    """end_turn (and a resume or sweep deciding whether a session may stop): observe the turn's
    running jobs (ending those that ended) and list those still running; while the list is not
    empty the session must not be stopped (a job's end stops it when the last one ends)."""
    try:
        open_ids = deps.store.turn_jobs(tenant_id, turn_id).open_jobs
    except JobStoreUnavailable:
        return []
    pending = []
    for job_id in open_ids:
        try:
            record = deps.store.get(job_id)
            if record is None:
                continue
            if poll_job(record, deps).status == "running":
                pending.append(job_id)
        except (JobCheckFailed, JobStoreUnavailable):
            pending.append(job_id)  # unknown: keep the session, the reaper settles it
    return pending


# --- ending, exactly once -----------------------------------------------------------------------
def _end(
    record: JobRecord,
    final_state: str,
    result: ExecutionResult,
    deps: JobDeps,
    *,
    kill: Kill | None = None,
    files: CollectResult | None = None,
) -> JobRecord:
    # The job's run time in its session (as the session measured it), not the time until someone
    # observed its end; a job that never ran, or whose session is gone, carries the time it was given.
    duration_ms = max(0, int(result.duration_ms))
    response: dict[str, Any] = _response_fields(result)
    response.update(
        status=final_state,
        job_id=record.job_id,
        invocation_id=record.invocation_id,
        session_id=record.session_id,
        duration_ms=duration_ms,
        background=True,
        files=(files or NO_FILES).files,
    )
    if (
        kill is not None
    ):  # the kill switch's refusal: its own fields (dimension, resets_at), reason kill_switch
        fields = public(kill.failure())
        response.update({k: v for k, v in fields.items() if k not in response}, reason=n.FIELD_KILL_SWITCH)
    outcome = {
        "response": response,
        "audit": {
            **_audit_fields(result),
            "duration_ms": duration_ms,
            "artifacts": (files or NO_FILES).artifacts,
        },
        "session_stopped": result.session_stopped,
        "full_stdout": result.full_stdout,
        "full_stderr": result.full_stderr,
    }
    stored = deps.store.claim_end(record, final_state=final_state, outcome=outcome)
    return _complete(stored, deps)


def _response_fields(result: ExecutionResult) -> dict[str, Any]:
    """The result fields every answer carries, of the job's run (the caller adds status, ids and duration)."""
    body: dict[str, Any] = {
        "ok": result.ok,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "exit_status": result.exit_status,
        "exit_code": result.exit_code,
        "stdout_bytes": result.stdout_bytes,
        "stderr_bytes": result.stderr_bytes,
        "stdout_truncated": result.stdout_truncated,
        "stderr_truncated": result.stderr_truncated,
    }
    if not result.ok:
        body.update(error=result.error, error_message=result.error_message)
        if result.exception is not None:  # what the job's code raised: name, value, traceback
            body["exception"] = result.exception
    return body


def _audit_fields(result: ExecutionResult) -> dict[str, Any]:
    """The audit row's attributes of the job's run."""
    return {
        "exit_status": result.exit_status,
        "exit_code": result.exit_code,
        "error": result.error,
        "failure_reason": result.failure_reason,
        "stdout_bytes": result.stdout_bytes,
        "stderr_bytes": result.stderr_bytes,
        "stdout_truncated": result.stdout_truncated,
        "stderr_truncated": result.stderr_truncated,
    }


def _complete(record: JobRecord, deps: JobDeps) -> JobRecord:
    """Audit row, output log, session decision, final mark — from the stored outcome. Idempotent."""
    if record.state != FINISHING:
        return record
    outcome = record.outcome or {}
    fields = outcome.get("audit") or {}
    base = record.audit_base
    request = SimpleNamespace(
        tenant_id=record.tenant_id,
        agent_id=record.agent_id,
        user_id=base.get("user_id"),
        template_id=base.get("template_id"),
        turn_id=record.turn_id,
        call_id=record.call_id,
        invocation_source=base.get("invocation_source"),
        code="",
        language=base.get("language", CODE_LANGUAGE),
    )
    started = datetime.fromtimestamp(record.submitted_ms / 1000, UTC)
    finished = datetime.fromtimestamp((record.ended_ms or record.submitted_ms) / 1000, UTC)
    run = SimpleNamespace(
        exit_code=fields.get("exit_code"),
        stdout_bytes=fields.get("stdout_bytes", 0),
        stderr_bytes=fields.get("stderr_bytes", 0),
        stdout_truncated=fields.get("stdout_truncated", False),
        stderr_truncated=fields.get("stderr_truncated", False),
    )
    # The row's shape is the Outcome's (one source of truth); error fields come from the stored end.
    # (`request` / `run` carry exactly the attributes audit_row reads: duck-typed on purpose.)
    ended = Outcome(
        request=request,  # type: ignore[arg-type]
        invocation_id=record.invocation_id,
        started_at=started,
        finished_at=finished,
        exit_status=fields.get("exit_status", "error"),
        result=run,
        session_id=record.session_id or None,
        environment=base.get("environment"),
        egress=_egress(record, deps, base.get("environment")),
    )
    row = ended.audit_row(deps.retention_days)
    row.update(error=fields.get("error"), failure_reason=fields.get("failure_reason"))
    if "duration_ms" in fields:  # the run time in the session (`_end`), not submit to end seen
        row["duration_ms"] = int(fields["duration_ms"])
    row.update(
        executed_code_hash=base.get("executed_code_hash") or row["executed_code_hash"],
        background=True,
        job_id=record.job_id,
        job_status=record.final_state,
        artifacts=list(fields.get("artifacts") or []),
    )
    written = deps.audit_writer.write(row)
    if written == "written":  # the first completer logs the output; a re-completion does not repeat it
        for stream in ("stdout", "stderr"):
            log_output(
                invocation_id=record.invocation_id,
                session_id=record.session_id,
                tenant_id=record.tenant_id,
                stream=stream,
                text=str(outcome.get(f"full_{stream}") or ""),
            )
        emit_metric(n.METRIC_JOBS_FINISHED, dimensions={"job_status": record.final_state or "failed"})
        logger.info(
            "job_ended",
            extra={
                "job_id": record.job_id,
                "invocation_id": record.invocation_id,
                "tenant_id": record.tenant_id,
                "session_id": record.session_id,
                "job_status": record.final_state,
                "duration_ms": row["duration_ms"],
            },
        )
    _settle_session(record, deps, stopped_already=bool(outcome.get("session_stopped")))
    deps.store.mark_final(record)
    return JobRecord(**{**record.__dict__, "state": record.final_state or record.state})


def _settle_session(record: JobRecord, deps: JobDeps, *, stopped_already: bool) -> None:
    """Turn ended and no running job left → stop the session. A job that reached its own
    timeout_s was stopped in its session by its supervisor (its process tree alone): the session,
    its variables and files stay for the turn."""
    if stopped_already:
        return
    stop = False
    if deps.turn_closed(record.tenant_id, record.turn_id):
        stop = deps.store.turn_jobs(record.tenant_id, record.turn_id).running == 0
    if stop and record.session_id:
        deps.runner_for(record.tenant_id).stop_session(record.interpreter_id, record.session_id)
