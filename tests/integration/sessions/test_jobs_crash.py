"""Dispatch dies while a background job runs: the Lambda worker is a real
process of the local Lambda emulator, killed with SIGKILL. The job keeps running in its session
(nothing on the host holds it); the reaper's sweep or the next get_job ends it, and its audit row
is written exactly once — also when the worker died in the middle of ending the job (its end
claimed, its row not yet written), and when that dead worker's PutItem still lands afterwards.

Dispatch's AWS calls from the worker go through a small proxy in front of moto that can hold one
request (the audit PutItem) while the worker is killed, then drop it or let it land late.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from sandbox_common import naming as n

from tests.support.crash_points import (
    JOB,
    audit_held_workers,
    dispatch_worker_pids,
    invoke,
    kill_dispatch_workers,
    kill_while_cancelling,
    kill_while_ending_the_job,
    rows_of,
)

from .conftest import Stack, event, get_job_event


@pytest.fixture
def worker_dispatch(reaper_stack: Stack) -> Iterator[dict[str, Any]]:
    """Dispatch as a Lambda worker process (its CDK environment), its AWS calls through a
    HoldingProxy that holds the first audit PutItem."""
    with audit_held_workers(reaper_stack) as (workers, proxy):
        yield {"stack": reaper_stack, "proxy": proxy, "workers": workers}


def test_jobs_crash_worker_killed_while_job_runs_job_ends_with_one_row(
    worker_dispatch: dict[str, Any],
) -> None:
    from reaper.job_sweep import end_due_jobs

    stack = worker_dispatch["stack"]
    # Given a job submitted through the dispatch Lambda worker, still running
    submitted = invoke(
        worker_dispatch["workers"], event(turn_id="turn-kill", call_id="c-job", code=JOB, background=True)
    )
    assert submitted["status"] == "running", submitted
    # When that worker is killed (SIGKILL) while the job runs
    (pid,) = kill_dispatch_workers()
    # Then the job keeps running in its session and ends there; nothing was written meanwhile
    assert rows_of(stack, submitted["invocation_id"]) == []
    # When the reaper's sweep runs until one observes the job's end (its 2 s may take longer on a
    # loaded machine: a sweep that finds it still running ends nothing), and later a get_job
    # reaches a fresh dispatch container
    deadline = time.monotonic() + 60
    while (swept := end_due_jobs(time.time()))["ended"] == 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    final = stack.dispatch(get_job_event("turn-kill", submitted["job_id"]))
    # Then the job ended completed with its output, and its audit row exists exactly once
    assert swept["ended"] == 1
    assert (final["status"], final["stdout"]) == ("completed", "survived\n")
    (row,) = rows_of(stack, submitted["invocation_id"])
    assert (row["background"], row["job_status"], row["session_id"]) == (
        True,
        "completed",
        submitted["session_id"],
    )
    assert pid not in dispatch_worker_pids(n.handler_string(n.DISPATCH))


@pytest.mark.parametrize("dead_put", ["dropped", "lands_late"])
def test_jobs_crash_worker_killed_while_ending_the_job_row_written_once(
    worker_dispatch: dict[str, Any], dead_put: str
) -> None:
    from sandbox_runtime.job_store import FINISHING

    stack = worker_dispatch["stack"]
    # Given a finished job whose end a get_job in the dispatch worker observes, and that worker
    # killed after it claimed the end, while its audit PutItem is in flight
    # When the reaper's sweep runs, then a get_job and a second sweep come
    seen = kill_while_ending_the_job(
        stack, worker_dispatch["workers"], worker_dispatch["proxy"], f"turn-end-{dead_put}", dead_put
    )
    submitted = seen["submitted"]
    # Then the Lambda invocation failed (the agent saw no answer) and the end was claimed, outcome
    # stored, before the sweep
    assert seen["answers"] and seen["answers"][0]["function_error"] == "Unhandled"
    claimed = seen["claimed"]
    assert claimed is not None and claimed.state == FINISHING and claimed.final_state == "completed"
    assert len(seen["rows_before"]) == (1 if dead_put == "lands_late" else 0)
    # And the job is final, answered from the first observed outcome, and its row exists exactly once
    assert seen["swept"]["ended"] == 1 and seen["again"]["ended"] == 0
    assert (seen["final"]["status"], seen["final"]["stdout"]) == ("completed", "survived\n")
    (row,) = rows_of(stack, submitted["invocation_id"])
    assert (row["background"], row["job_status"], row["stdout_bytes"]) == (True, "completed", 9)
    assert seen["ended"].state == "completed"


def test_jobs_crash_worker_killed_while_cancelling_the_job_row_written_once(
    worker_dispatch: dict[str, Any],
) -> None:
    from sandbox_runtime.job_store import FINISHING

    stack = worker_dispatch["stack"]
    # Given a running job, and a cancel_job in the dispatch worker killed after it claimed the
    # job's end, while its audit PutItem is in flight (dropped)
    # When the reaper's sweep runs, then the agent cancels again, and a second sweep comes
    seen = kill_while_cancelling(
        stack, worker_dispatch["workers"], worker_dispatch["proxy"], "turn-cancel-kill"
    )
    # Then the agent saw no answer, the end was claimed as cancelled, and no row existed before
    assert seen["answers"] and seen["answers"][0]["function_error"] == "Unhandled"
    claimed = seen["claimed"]
    assert claimed is not None and (claimed.state, claimed.final_state) == (FINISHING, "cancelled")
    assert seen["rows_before"] == []
    # And the job is cancelled, answered from the claimed end, with exactly one row
    assert seen["swept"]["ended"] == 1 and seen["swept_again"]["ended"] == 0
    assert seen["again"]["status"] == "cancelled"
    (row,) = rows_of(stack, seen["submitted"]["invocation_id"])
    assert (row["background"], row["job_status"]) == (True, "cancelled")
