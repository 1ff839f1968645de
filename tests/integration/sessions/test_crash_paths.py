"""Dispatch dies on the counted paths beyond a plain execute_code (SPEC §22): a `resume` and a
background submit. The dispatch Lambda runs as a real worker process of the local Lambda emulator
(a short Lambda timeout, so its deadline comes soon) and is killed with SIGKILL; retries, the
reaper's sweeps and the next calls reach a fresh dispatch container (in-process). Every counted
call ends with exactly one audit row, under one invocation id, and a retry is answered at once.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sandbox_common import aws, messages
from sandbox_common import naming as n

from tests.support.stack import dispatch_workers

from .conftest import Stack, event
from .test_jobs_crash import _dispatch_workers

# The dispatch worker's Lambda timeout: a resume claimed in it is due for the sweep this long
# after its claim. Above the 15 s answer margin by more than the resumed code's 8 s.
WORKER_TIMEOUT_SECONDS = 30
TOOLS_TEMPLATE = "tools-crash"
PAUSES_THEN_SLEEPS = (
    "from sandbox_tools import tools\nimport time\nv = tools.lookup(k=1)\ntime.sleep(8)\nprint(v)"
)


@pytest.fixture
def crash_stack(reaper_stack: Stack) -> Iterator[dict[str, Any]]:
    """acme with a template whose code may call `lookup`, and dispatch as one Lambda worker process."""
    stack = reaper_stack
    aws.client("dynamodb").put_item(
        TableName=stack.resources.tables[n.TENANTS.logical],
        Item={
            n.TENANTS.pk: {"S": "acme"},
            n.TENANTS.sort_key: {"S": n.TEMPLATE_ITEM_PREFIX + TOOLS_TEMPLATE},
            "environment": {"S": "default-public"},
            n.TEMPLATE_TOOLS_ATTRIBUTE: {"L": [{"S": "lookup"}]},
        },
    )
    with dispatch_workers(stack, max_concurrency=1, timeout_seconds=WORKER_TIMEOUT_SECONDS) as workers:
        yield {"stack": stack, "client": workers.client, "name": workers.name}


def _invoke(ctx: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    out = ctx["client"].invoke(FunctionName=ctx["name"], Payload=json.dumps(payload).encode())
    body = json.loads(out["Payload"].read())
    return {"function_error": out.get("FunctionError"), **(body if isinstance(body, dict) else {})}


def _rows(stack: Stack, invocation_id: str) -> list[dict[str, Any]]:
    return [r for r in stack.audit_rows("acme") if r["invocation_id"] == invocation_id]


def _continuations(stack: Stack) -> list[dict[str, Any]]:
    return aws.client("dynamodb").scan(
        TableName=stack.resources.tables[n.CONTINUATIONS.logical], ConsistentRead=True
    )["Items"]


def _resume(turn_id: str, paused: dict[str, Any]) -> dict[str, Any]:
    out = event("resume", turn_id=turn_id, continuation=paused["continuation"], tool_result={"v": 42})
    out.pop("template_id", None)
    return out


def _kill_while(ctx: dict[str, Any], payload: dict[str, Any], reached: Any) -> list[Any]:
    """`payload` sent to the dispatch worker, which is SIGKILLed once `reached()` holds; the
    invocation's FunctionError values (the agent saw no answer)."""
    answers: list[Any] = []
    sent = threading.Thread(target=lambda: answers.append(_invoke(ctx, payload)["function_error"]))
    sent.start()
    until = time.monotonic() + 60
    while not reached() and time.monotonic() < until:
        time.sleep(0.1)
    assert reached(), "the worker never reached the crash point"
    for pid in _dispatch_workers(n.handler_string(n.DISPATCH)):
        os.kill(pid, signal.SIGKILL)
    sent.join(60)
    return answers


@pytest.mark.parametrize("finisher", ["sweep", "retry"])
def test_crash_resume_killed_mid_resume_ends_with_one_row(crash_stack: dict[str, Any], finisher: str) -> None:
    ctx, stack = crash_stack, crash_stack["stack"]
    turn_id = f"turn-resume-{finisher}"
    # Given a tool-calling call paused at its tool call, through the dispatch worker
    paused = _invoke(
        ctx, event(turn_id=turn_id, call_id="c-pause", template_id=TOOLS_TEMPLATE, code=PAUSES_THEN_SLEEPS)
    )
    assert paused["status"] == n.STATUS_TOOL_CALL, paused
    invocation_id = paused["invocation_id"]

    # When its resume is under way in the worker (continuation claimed) and the worker is SIGKILLed
    def claimed() -> bool:
        return any(i["status"]["S"] == "claimed" for i in _continuations(stack))

    assert _kill_while(ctx, _resume(turn_id, paused), claimed) == ["Unhandled"]
    # Then a retry of the resume, before the dead resume's deadline, is answered call_in_progress
    early = stack.dispatch(_resume(turn_id, paused))
    assert (early["ok"], early["error"], early["reason"]) == (
        False,
        "SandboxError",
        n.REASON_CALL_IN_PROGRESS,
    )
    assert 1 <= early["retry_after_s"] <= 10
    assert _rows(stack, invocation_id) == []
    # And the claim stays listed for the sweep, due at the dead resume's deadline
    (item,) = [i for i in _continuations(stack) if i["status"]["S"] == "claimed"]
    assert n.CONTINUATION_ATTR_WAIT_OPEN in item
    time.sleep(max(0.0, int(item[n.CONTINUATION_ATTR_WAIT_DUE]["S"]) / 1000 - time.time()) + 0.5)

    # When the turn ends, then (past that deadline) the finisher comes: the reaper's paused-calls
    # sweep (twice), or a retry of the resume
    stack.dispatch(event("end_turn", turn_id=turn_id))
    if finisher == "sweep":
        assert stack.dispatch({"action": n.Action.SWEEP_PAUSED_CALLS}) == {"ok": True}
        assert stack.dispatch({"action": n.Action.SWEEP_PAUSED_CALLS}) == {"ok": True}
    else:
        finished = stack.dispatch(_resume(turn_id, paused))
        assert (finished["error"], finished["invocation_id"]) == ("SandboxError", invocation_id)
        assert stack.dispatch({"action": n.Action.SWEEP_PAUSED_CALLS}) == {"ok": True}
    # Then the call has exactly one row, dispatch_interrupted, under its own invocation id
    (row,) = _rows(stack, invocation_id)
    assert (row["exit_status"], row["failure_reason"], row["tool_calls"]) == (
        "error",
        n.REASON_DISPATCH_INTERRUPTED,
        1,
    )
    # And a later resume, and a retry of the call_id, answer that same end
    again = stack.dispatch(_resume(turn_id, paused))
    assert (again["error_message"], again["invocation_id"]) == (messages.DISPATCH_INTERRUPTED, invocation_id)
    assert [i["status"]["S"] for i in _continuations(stack)] == ["settled"]


def _attempt(stack: Stack, call_id: str) -> dict[str, Any] | None:
    for item in aws.client("dynamodb").scan(
        TableName=stack.resources.tables[n.IDEMPOTENCY.logical], ConsistentRead=True
    )["Items"]:
        if n.IDEMPOTENCY_ATTR_ATTEMPT in item:
            attempt = json.loads(item[n.IDEMPOTENCY_ATTR_ATTEMPT]["S"])
            if attempt["call_id"] == call_id:
                return {**attempt, "deadline_ms": int(item["in_progress_expiration"]["N"])}
    return None


def _jobs(stack: Stack, turn_id: str) -> list[dict[str, Any]]:
    items = aws.client("dynamodb").scan(TableName=stack.resources.tables[n.JOBS.logical], ConsistentRead=True)
    return [i for i in items["Items"] if "job_id" in i and i["turn_id"]["S"] == turn_id]


def test_crash_background_submit_queued_behind_a_foreground_call_ends_with_one_row(
    crash_stack: dict[str, Any],
) -> None:
    from reaper.interrupted_sweep import finish_interrupted
    from reaper.job_sweep import end_due_jobs
    from sandbox_runtime.job_store import job_id_for

    stack = crash_stack["stack"]
    turn_id = "turn-bg-crash"
    # Given a turn with a live session, and dispatch as two Lambda worker processes
    assert stack.dispatch(event(turn_id=turn_id, call_id="c-warm", code="print(1)"))["ok"] is True
    with dispatch_workers(stack, max_concurrency=2, timeout_seconds=WORKER_TIMEOUT_SECONDS) as workers:
        ctx = {"stack": stack, "client": workers.client, "name": workers.name}
        slow = threading.Thread(
            target=_invoke,
            args=(ctx, event(turn_id=turn_id, call_id="c-fg", code="import time\ntime.sleep(8)")),
        )
        slow.start()
        until = time.monotonic() + 60
        while _attempt(stack, "c-fg") is None and time.monotonic() < until:
            time.sleep(0.1)
        # When a background submit queued behind that foreground call has created its job, and
        # the workers are SIGKILLed
        submit = event(turn_id=turn_id, call_id="c-bg", code="print('bg')", background=True, timeout_s=60)
        assert _kill_while(ctx, submit, lambda: bool(_jobs(stack, turn_id))) == ["Unhandled"]
        slow.join(60)
    attempt = _attempt(stack, "c-bg")
    assert attempt is not None
    (job,) = _jobs(stack, turn_id)
    # Then the job is the submit's, under its one invocation id
    assert job["job_id"]["S"] == job_id_for(attempt["invocation_id"])
    # When, past the dead attempts' deadlines, the reaper's sweeps run (twice)
    deadline = max(attempt["deadline_ms"], _attempt(stack, "c-fg")["deadline_ms"])  # type: ignore[index]
    time.sleep(max(0.0, deadline / 1000 - time.time()) + 0.5)
    for _ in range(2):
        print("DBG fi", finish_interrupted(time.time()))
        print("DBG jobs", end_due_jobs(time.time()))
    print("DBG job", _jobs(stack, turn_id))
    # Then each counted call has exactly one row: the foreground call dispatch_interrupted, the
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
    retried = stack.dispatch(submit)
    assert retried["invocation_id"] == attempt["invocation_id"]
    assert retried.get("job_id") == (job["job_id"]["S"] if bound else None), retried
