"""Dispatch dies on the counted paths beyond a plain execute_code: a `resume` and a
background submit. The dispatch Lambda runs as a real worker process of the local Lambda emulator
(a short Lambda timeout, so its deadline comes soon) and is killed with SIGKILL; retries, the
reaper's sweeps and the next calls reach a fresh dispatch container (in-process). Every counted
call ends with exactly one audit row, under one invocation id, and a retry is answered at once.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sandbox_common import messages
from sandbox_common import naming as n

from tests.support.crash_points import (
    WORKER_TIMEOUT_SECONDS,
    add_tools_template,
    kill_mid_resume,
    kill_queued_background_submit,
    rows_of,
)
from tests.support.stack import Workers, dispatch_workers

from .conftest import Stack


@pytest.fixture
def crash_stack(reaper_stack: Stack) -> Iterator[Workers]:
    """acme with a template whose code may call `lookup`, and dispatch as one Lambda worker process."""
    add_tools_template(reaper_stack)
    with dispatch_workers(reaper_stack, max_concurrency=1, timeout_seconds=WORKER_TIMEOUT_SECONDS) as workers:
        yield workers


@pytest.mark.parametrize("finisher", ["sweep", "retry"])
def test_crash_resume_killed_mid_resume_ends_with_one_row(crash_stack: Workers, finisher: str) -> None:
    stack = crash_stack.stack
    # Given a tool-calling call paused at its tool call, through the dispatch worker
    # When its resume is under way in the worker (continuation claimed) and the worker is SIGKILLed,
    # a retry comes at once, and past the dead resume's deadline the turn ends and the finisher
    # comes: the reaper's paused-calls sweep (twice), or a retry of the resume
    seen = kill_mid_resume(stack, crash_stack, f"turn-resume-{finisher}", finisher)
    invocation_id = seen["invocation_id"]
    assert seen["killed"] == ["Unhandled"]
    # Then the retry before the dead resume's deadline was answered call_in_progress
    early = seen["early"]
    assert (early["ok"], early["error"], early["reason"]) == (
        False,
        "SandboxError",
        n.REASON_CALL_IN_PROGRESS,
    )
    assert 1 <= early["retry_after_s"] <= 10
    assert seen["rows_after_early"] == []
    # And the claim stayed listed for the sweep, due at the dead resume's deadline
    (item,) = seen["claims"]
    assert n.CONTINUATION_ATTR_WAIT_OPEN in item
    if finisher == "retry":
        assert (seen["finished"]["error"], seen["finished"]["invocation_id"]) == (
            "SandboxError",
            invocation_id,
        )
    assert seen["sweeps"] == [{"ok": True}] * len(seen["sweeps"])
    # Then the call has exactly one row, dispatch_interrupted, under its own invocation id
    (row,) = rows_of(stack, invocation_id)
    assert (row["exit_status"], row["failure_reason"], row["tool_calls"]) == (
        "error",
        n.REASON_DISPATCH_INTERRUPTED,
        1,
    )
    # And a later resume, and a retry of the call_id, answer that same end
    again = seen["again"]
    assert (again["error_message"], again["invocation_id"]) == (messages.DISPATCH_INTERRUPTED, invocation_id)
    assert seen["continuations"] == ["settled"]


def test_crash_background_submit_queued_behind_a_foreground_call_ends_with_one_row(
    reaper_stack: Stack,
) -> None:
    from sandbox_runtime.job_store import job_id_for

    stack = reaper_stack
    turn_id = "turn-bg-crash"
    # Given a turn with a live session, and dispatch as two Lambda worker processes
    # When a background submit queued behind a foreground call has created its job and the workers
    # are SIGKILLed, and past the dead attempts' deadlines the reaper's sweeps run (twice)
    seen = kill_queued_background_submit(stack, turn_id)
    attempt, job = seen["attempt"], seen["job"]
    assert seen["killed"] == ["Unhandled"]
    # Then the job is the submit's, under its one invocation id
    assert job["job_id"]["S"] == job_id_for(attempt["invocation_id"])
    # And each counted call has exactly one row: the foreground call dispatch_interrupted, the
    # submit its job's when the job was bound to the session (else dispatch_interrupted: it never
    # ran), under the attempt's invocation id
    rows = [r for r in stack.audit_rows("acme") if r["turn_id"] == turn_id]
    by_call = {c: [r for r in rows if r["call_id"] == c] for c in ("c-warm", "c-fg", "c-bg")}
    assert [len(v) for v in by_call.values()] == [1, 1, 1], by_call
    assert by_call["c-fg"][0]["failure_reason"] == n.REASON_DISPATCH_INTERRUPTED
    (bg,) = by_call["c-bg"]
    assert bg["invocation_id"] == attempt["invocation_id"]
    bound = bool(job["session_id"]["S"])
    if bound:
        assert (bg["background"], bg["job_id"]) == (True, job["job_id"]["S"])
    else:
        assert bg["failure_reason"] == n.REASON_DISPATCH_INTERRUPTED
    # And a retry of the submit answers that same end: its job, or the interrupted error
    retried = seen["retried"]
    assert retried["invocation_id"] == attempt["invocation_id"]
    assert retried.get("job_id") == (job["job_id"]["S"] if bound else None), retried
