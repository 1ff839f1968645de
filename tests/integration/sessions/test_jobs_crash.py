"""Dispatch dies while a background job runs (SPEC §17): the Lambda worker is a real
process of the local Lambda emulator, killed with SIGKILL. The job keeps running in its session
(nothing on the host holds it); the reaper's sweep or the next get_job ends it, and its audit row
is written exactly once — also when the worker died in the middle of ending the job (its end
claimed, its row not yet written), and when that dead worker's PutItem still lands afterwards.

Dispatch's AWS calls from the worker go through a small proxy in front of moto that can hold one
request (the audit PutItem) while the worker is killed, then drop it or let it land late.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sandbox_common import naming as n

from tests.support.http import HoldingProxy
from tests.support.stack import dispatch_workers

from .conftest import Stack, event, get_job_event

JOB = "import time\ntime.sleep(2)\nprint('survived')"
SLEEPS = "import time\ntime.sleep(600)"  # cancelled long before it ends


@pytest.fixture
def worker_dispatch(reaper_stack: Stack) -> Iterator[dict[str, Any]]:
    """Dispatch as a Lambda worker process (its CDK environment), its AWS calls through a
    HoldingProxy that holds the first audit PutItem."""
    stack = reaper_stack
    audit_table = stack.resources.tables[n.INVOCATIONS.logical]
    proxy = HoldingProxy(
        stack.moto,
        lambda target, body: (
            target.endswith(".PutItem") and json.loads(body or b"{}").get("TableName") == audit_table
        ),
    )
    try:
        with dispatch_workers(stack, aws_endpoint=proxy.endpoint, max_concurrency=1) as workers:
            yield {"stack": stack, "proxy": proxy, "client": workers.client, "name": workers.name}
    finally:
        proxy.close()


def _invoke(ctx: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    out = ctx["client"].invoke(FunctionName=ctx["name"], Payload=json.dumps(payload).encode())
    body = json.loads(out["Payload"].read())
    return {"function_error": out.get("FunctionError"), **(body if isinstance(body, dict) else {})}


def _dispatch_workers(handler: str) -> list[int]:
    """Pids of this process's emulator workers running `handler` (the Lambda containers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat[stat.rfind(b")") + 2 :].split()[1])
        if (
            ppid == os.getpid()
            and handler.encode() in cmdline
            and any(b"lambda_worker" in c for c in cmdline)
        ):
            found.append(int(entry.name))
    return found


def _rows(stack: Stack, invocation_id: str) -> list[dict[str, Any]]:
    return [r for r in stack.audit_rows("acme") if r["invocation_id"] == invocation_id]


def _kill_worker() -> int:
    (pid,) = _dispatch_workers(n.handler_string(n.DISPATCH))
    os.kill(pid, signal.SIGKILL)
    return pid


def test_jobs_crash_worker_killed_while_job_runs_job_ends_with_one_row(
    worker_dispatch: dict[str, Any],
) -> None:
    from reaper.job_sweep import end_due_jobs

    ctx, stack = worker_dispatch, worker_dispatch["stack"]
    # Given a job submitted through the dispatch Lambda worker, still running
    submitted = _invoke(ctx, event(turn_id="turn-kill", call_id="c-job", code=JOB, background=True))
    assert submitted["status"] == "running", submitted
    # When that worker is killed (SIGKILL) while the job runs
    pid = _kill_worker()
    # Then the job keeps running in its session and ends there; nothing was written meanwhile
    assert _rows(stack, submitted["invocation_id"]) == []
    time.sleep(2.5)
    # When the reaper's sweep runs, and later a get_job reaches a fresh dispatch container
    swept = end_due_jobs(time.time())
    final = stack.dispatch(get_job_event("turn-kill", submitted["job_id"]))
    # Then the job ended completed with its output, and its audit row exists exactly once
    assert swept["ended"] == 1
    assert (final["status"], final["stdout"]) == ("completed", "survived\n")
    (row,) = _rows(stack, submitted["invocation_id"])
    assert (row["background"], row["job_status"], row["session_id"]) == (
        True,
        "completed",
        submitted["session_id"],
    )
    assert pid not in _dispatch_workers(n.handler_string(n.DISPATCH))


@pytest.mark.parametrize("dead_put", ["dropped", "lands_late"])
def test_jobs_crash_worker_killed_while_ending_the_job_row_written_once(
    worker_dispatch: dict[str, Any], dead_put: str
) -> None:
    from reaper.job_sweep import end_due_jobs
    from sandbox_common import aws
    from sandbox_runtime.job_store import FINISHING, JobStore

    ctx, stack, proxy = worker_dispatch, worker_dispatch["stack"], worker_dispatch["proxy"]
    turn_id = f"turn-end-{dead_put}"
    # Given a finished job whose end a get_job in the dispatch worker observes ...
    submitted = _invoke(ctx, event(turn_id=turn_id, call_id="c-job", code=JOB, background=True))
    assert submitted["status"] == "running", submitted
    time.sleep(2.5)
    answers: list[dict[str, Any]] = []

    def poll_until_the_job_ended() -> None:
        # On a loaded machine the job's 2 s may not be over yet: a get_job that finds it still
        # running writes nothing (no audit row), so ask again until one observes the end.
        while (answer := _invoke(ctx, get_job_event(turn_id, submitted["job_id"]))).get(
            "status"
        ) == "running":
            time.sleep(0.5)
        answers.append(answer)

    poll = threading.Thread(target=poll_until_the_job_ended)
    poll.start()
    # ... and that worker is killed after it claimed the end, while its audit PutItem is in flight
    assert proxy.held.wait(60), "the worker never reached the audit write"
    _kill_worker()
    poll.join(60)
    proxy.release(deliver=dead_put == "lands_late")
    if dead_put == "lands_late":
        assert proxy.delivered.wait(30)
    # Then the Lambda invocation failed (the agent saw no answer) and the end is claimed, outcome stored
    assert answers and answers[0]["function_error"] == "Unhandled"
    store = JobStore(table_name=stack.resources.tables[n.JOBS.logical], ddb=aws.client("dynamodb"))
    claimed = store.get(submitted["job_id"])
    assert claimed is not None and claimed.state == FINISHING and claimed.final_state == "completed"
    assert len(_rows(stack, submitted["invocation_id"])) == (1 if dead_put == "lands_late" else 0)
    # When the reaper's sweep runs, then a get_job and a second sweep come
    swept = end_due_jobs(time.time())
    final = stack.dispatch(get_job_event(turn_id, submitted["job_id"]))
    again = end_due_jobs(time.time())
    # Then the job is final, answered from the first observed outcome, and its row exists exactly once
    assert swept["ended"] == 1 and again["ended"] == 0
    assert (final["status"], final["stdout"]) == ("completed", "survived\n")
    (row,) = _rows(stack, submitted["invocation_id"])
    assert (row["background"], row["job_status"], row["stdout_bytes"]) == (True, "completed", 9)
    assert store.get(submitted["job_id"]).state == "completed"  # type: ignore[union-attr]


def test_jobs_crash_worker_killed_while_cancelling_the_job_row_written_once(
    worker_dispatch: dict[str, Any],
) -> None:
    from reaper.job_sweep import end_due_jobs
    from sandbox_common import aws
    from sandbox_runtime.job_store import FINISHING, JobStore

    ctx, stack, proxy = worker_dispatch, worker_dispatch["stack"], worker_dispatch["proxy"]
    turn_id = "turn-cancel-kill"
    # Given a running job, and a cancel_job in the dispatch worker ...
    submitted = _invoke(ctx, event(turn_id=turn_id, call_id="c-job", code=SLEEPS, background=True))
    assert submitted["status"] == "running", submitted
    cancel = {**get_job_event(turn_id, submitted["job_id"]), "action": "cancel_job"}
    answers: list[dict[str, Any]] = []
    sent = threading.Thread(target=lambda: answers.append(_invoke(ctx, cancel)))
    sent.start()
    # ... killed after it claimed the job's end, while its audit PutItem is in flight (dropped)
    assert proxy.held.wait(60), "the worker never reached the audit write"
    _kill_worker()
    sent.join(60)
    proxy.release(deliver=False)
    # Then the agent saw no answer, the end is claimed as cancelled, and no row exists yet
    assert answers and answers[0]["function_error"] == "Unhandled"
    store = JobStore(table_name=stack.resources.tables[n.JOBS.logical], ddb=aws.client("dynamodb"))
    claimed = store.get(submitted["job_id"])
    assert claimed is not None and (claimed.state, claimed.final_state) == (FINISHING, "cancelled")
    assert _rows(stack, submitted["invocation_id"]) == []
    # When the reaper's sweep runs, then the agent cancels again, and a second sweep comes
    swept = end_due_jobs(time.time())
    again = stack.dispatch(cancel)
    # Then the job is cancelled, answered from the claimed end, with exactly one row
    assert swept["ended"] == 1 and end_due_jobs(time.time())["ended"] == 0
    assert again["status"] == "cancelled"
    (row,) = _rows(stack, submitted["invocation_id"])
    assert (row["background"], row["job_status"]) == (True, "cancelled")
