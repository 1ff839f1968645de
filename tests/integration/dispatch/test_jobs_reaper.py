"""Background jobs with dispatch's own parts (`Parts.jobs`): the reaper's finish_due_jobs ends a
job nobody polls, with the tenant's runner and dispatch's audit writer, on the real local stack."""

from __future__ import annotations

import time
from types import SimpleNamespace

from .conftest import Stack, event


def test_jobs_reaper_ends_an_unpolled_job_with_one_audit_row(stack: Stack) -> None:
    from dispatch import parts as dependencies
    from dispatch.jobs import actions as job_actions
    from sandbox_runtime import job_end as job_flow

    # Given a turn with a live session and a job launched in it that nobody polls
    first = stack.dispatch(event(call_id="c1", code="x = 1"))
    assert first["ok"] is True
    deps = dependencies.built().jobs
    req = SimpleNamespace(
        tenant_id="acme",
        agent_id="agent-7",
        turn_id="turn-1",
        template_id="analyst",
        call_id="c-job",
        user_id=None,
        invocation_source=None,
        code="print('reaped')",
        timeout_s=60,
    )
    record = job_actions.reserve(req, deps, invocation_id="inv-reaped", environment="default-public")
    job_actions.launch(
        record, deps, code=req.code, session_id=first["session_id"], interpreter_id=_interpreter(stack)
    )
    # When the reaper runs after the job ended, twice
    deadline = time.monotonic() + 20
    ended: list[tuple[str, str]] = []
    while not ended and time.monotonic() < deadline:
        time.sleep(0.5)
        ended = job_flow.finish_due_jobs(deps)
    again = job_flow.finish_due_jobs(deps)
    # Then it ended the job once, audited with background: true in the stage's audit table
    assert ended == [(record.job_id, "completed")]
    assert again == []
    rows = [r for r in stack.audit_rows("acme") if r["invocation_id"] == "inv-reaped"]
    assert len(rows) == 1
    assert (rows[0]["background"], rows[0]["job_status"], rows[0]["stdout_bytes"]) == (True, "completed", 7)
    assert rows[0]["session_id"] == first["session_id"]


def _interpreter(stack: Stack) -> str:
    return next(
        spec["id"]
        for spec in stack.resources.interpreters
        if spec["tenant_id"] == "acme" and spec["environment"] == "default-public"
    )
