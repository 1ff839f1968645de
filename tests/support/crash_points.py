"""Crash points of counted calls: dispatch runs as a real Lambda worker process of the
local Lambda emulator and is SIGKILLed at a named point of a call; retries, the reaper's sweeps
and the next calls reach a fresh dispatch container (in-process). Each scenario returns what it
observed; the integration tests of each crash path and the reliability suite's crash-point cells
both run them.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sandbox_common import aws
from sandbox_common import naming as n

from tests.support.http import HoldingProxy
from tests.support.stack import (
    Stack,
    Workers,
    dispatch_workers,
    event,
    get_job_event,
    put_tools_template,
)

# The dispatch worker's Lambda timeout in the resume and background-submit scenarios: a resume
# claimed in it is due for the sweep this long after its claim. Above the 15 s answer margin by
# more than the resumed code's 8 s.
WORKER_TIMEOUT_SECONDS = 30
TOOLS_TEMPLATE = "tools-crash"
PAUSES_THEN_SLEEPS = (
    "from sandbox_tools import tools\nimport time\nv = tools.lookup(k=1)\ntime.sleep(8)\nprint(v)"
)
JOB = "import time\ntime.sleep(2)\nprint('survived')"
SLEEPS = "import time\ntime.sleep(600)"  # cancelled long before it ends


# --- the dispatch worker and its killing ----------------------------------------------------------
def dispatch_worker_pids(handler: str) -> list[int]:
    """Pids of this process's emulator workers running `handler` (the Lambda containers): the
    children of its fork servers for `handler` (and workers it spawned itself, if any)."""
    table: dict[int, tuple[int, list[bytes]]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if handler.encode() in cmdline and any(b"lambda_worker" in c for c in cmdline):
            table[int(entry.name)] = (int(stat[stat.rfind(b")") + 2 :].split()[1]), cmdline)
    ours = {pid for pid, (ppid, _) in table.items() if ppid == os.getpid()}
    servers = {pid for pid in ours if b"--fork-server" in table[pid][1]}
    return sorted((ours - servers) | {pid for pid, (ppid, _) in table.items() if ppid in servers})


def kill_dispatch_workers() -> list[int]:
    """SIGKILL every dispatch worker process of this test process; their pids."""
    pids = dispatch_worker_pids(n.handler_string(n.DISPATCH))
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    return pids


def invoke(workers: Workers, payload: dict[str, Any]) -> dict[str, Any]:
    """`payload` through the dispatch worker: its answer, with the Lambda's FunctionError."""
    out = workers.client.invoke(FunctionName=workers.name, Payload=json.dumps(payload).encode())
    body = json.loads(out["Payload"].read())
    return {"function_error": out.get("FunctionError"), **(body if isinstance(body, dict) else {})}


def warm(workers: Workers, turn_id: str, count: int) -> None:
    """`count` warm dispatch containers: as many concurrent calls with a wrong turn token (refused
    after the turn read: nothing counted, nothing run), so each starts a worker while the others
    are starting. A scenario then runs on warm workers, and a cold start on a loaded machine
    cannot eat the budget of a call that must still be running when its worker is killed."""
    refused = event(turn_id=turn_id, call_id="c-warm-up", code="pass", turn_token="x" * 43)
    with ThreadPoolExecutor(count) as pool:
        answers = list(pool.map(lambda _: invoke(workers, refused), range(count)))
    assert all(a["function_error"] is None and a["ok"] is False for a in answers), answers


def kill_while(workers: Workers, payload: dict[str, Any], reached: Callable[[], bool]) -> list[Any]:
    """`payload` sent to the dispatch worker, which is SIGKILLed once `reached()` holds; the
    invocation's FunctionError values (the agent saw no answer)."""
    answers: list[Any] = []
    sent = threading.Thread(target=lambda: answers.append(invoke(workers, payload)["function_error"]))
    sent.start()
    until = time.monotonic() + 60
    while not reached() and time.monotonic() < until:
        time.sleep(0.1)
    assert reached(), "the worker never reached the crash point"
    kill_dispatch_workers()
    sent.join(60)
    return answers


@contextmanager
def audit_held_workers(stack: Stack) -> Iterator[tuple[Workers, HoldingProxy]]:
    """Dispatch as one Lambda worker process (its CDK environment), its AWS calls through a
    HoldingProxy that holds the first audit PutItem."""
    audit_table = stack.resources.tables[n.INVOCATIONS.logical]
    proxy = HoldingProxy(
        stack.moto,
        lambda target, body: (
            target.endswith(".PutItem") and json.loads(body or b"{}").get("TableName") == audit_table
        ),
    )
    try:
        with dispatch_workers(stack, aws_endpoint=proxy.endpoint, max_concurrency=1) as workers:
            yield workers, proxy
    finally:
        proxy.close()


def add_tools_template(stack: Stack) -> None:
    """acme's template whose code may call the tool `lookup`."""
    put_tools_template(stack, TOOLS_TEMPLATE, ["lookup"])


# --- what the stores hold ------------------------------------------------------------------------
def rows_of(stack: Stack, invocation_id: str) -> list[dict[str, Any]]:
    return [r for r in stack.audit_rows("acme") if r["invocation_id"] == invocation_id]


def continuations(stack: Stack) -> list[dict[str, Any]]:
    return aws.client("dynamodb").scan(
        TableName=stack.resources.tables[n.CONTINUATIONS.logical], ConsistentRead=True
    )["Items"]


def attempt_of(stack: Stack, call_id: str) -> dict[str, Any] | None:
    """The idempotency attempt of `call_id` (its invocation id), with its in-progress deadline."""
    for item in aws.client("dynamodb").scan(
        TableName=stack.resources.tables[n.IDEMPOTENCY.logical], ConsistentRead=True
    )["Items"]:
        if n.IDEMPOTENCY_ATTR_ATTEMPT in item:
            attempt = json.loads(item[n.IDEMPOTENCY_ATTR_ATTEMPT]["S"])
            if attempt["call_id"] == call_id:
                return {**attempt, "deadline_ms": int(item["in_progress_expiration"]["N"])}
    return None


def jobs_of(stack: Stack, turn_id: str) -> list[dict[str, Any]]:
    items = aws.client("dynamodb").scan(TableName=stack.resources.tables[n.JOBS.logical], ConsistentRead=True)
    return [i for i in items["Items"] if "job_id" in i and i["turn_id"]["S"] == turn_id]


def _sleep_past(deadline_ms: int) -> None:
    time.sleep(max(0.0, deadline_ms / 1000 - time.time()) + 0.5)


# --- the scenarios --------------------------------------------------------------------------------
def resume_event(turn_id: str, paused: dict[str, Any]) -> dict[str, Any]:
    out = event("resume", turn_id=turn_id, continuation=paused["continuation"], tool_result={"v": 42})
    out.pop("template_id", None)
    return out


def kill_mid_resume(stack: Stack, workers: Workers, turn_id: str, finisher: str) -> dict[str, Any]:
    """A tool-calling call paused, its `resume` killed in the worker once the continuation is
    claimed; a retry right away; past the dead resume's deadline the turn ends and the finisher
    comes: the reaper's paused-calls sweep (twice) or a retry of the resume (then one sweep); a
    last resume. `workers` has the tools template (add_tools_template)."""
    paused = invoke(
        workers,
        event(turn_id=turn_id, call_id="c-pause", template_id=TOOLS_TEMPLATE, code=PAUSES_THEN_SLEEPS),
    )
    assert paused["status"] == n.STATUS_TOOL_CALL, paused

    def claimed() -> bool:
        return any(i["status"]["S"] == "claimed" for i in continuations(stack))

    seen: dict[str, Any] = {"paused": paused, "invocation_id": paused["invocation_id"]}
    seen["killed"] = kill_while(workers, resume_event(turn_id, paused), claimed)
    seen["early"] = stack.dispatch(resume_event(turn_id, paused))
    seen["rows_after_early"] = rows_of(stack, paused["invocation_id"])
    seen["claims"] = [i for i in continuations(stack) if i["status"]["S"] == "claimed"]
    _sleep_past(max(int(i[n.CONTINUATION_ATTR_WAIT_DUE]["S"]) for i in seen["claims"]))
    stack.dispatch(event("end_turn", turn_id=turn_id))
    if finisher == "sweep":
        seen["sweeps"] = [stack.dispatch({"action": n.Action.SWEEP_PAUSED_CALLS}) for _ in range(2)]
    else:
        seen["finished"] = stack.dispatch(resume_event(turn_id, paused))
        seen["sweeps"] = [stack.dispatch({"action": n.Action.SWEEP_PAUSED_CALLS})]
    seen["again"] = stack.dispatch(resume_event(turn_id, paused))
    seen["continuations"] = [i["status"]["S"] for i in continuations(stack)]
    return seen


def kill_queued_background_submit(stack: Stack, turn_id: str) -> dict[str, Any]:
    """A turn with a live session; a foreground `sleep(8)` and, queued behind it, a background
    submit, each in a dispatch worker (two processes), killed once the submit created its job;
    past the dead attempts' deadlines the reaper's interrupted-calls and job sweeps run (twice);
    then a retry of the submit."""
    from reaper.interrupted_sweep import finish_interrupted
    from reaper.job_sweep import end_due_jobs

    assert stack.dispatch(event(turn_id=turn_id, call_id="c-warm", code="print(1)"))["ok"] is True
    submit = event(turn_id=turn_id, call_id="c-bg", code="print('bg')", background=True, timeout_s=60)
    with dispatch_workers(stack, max_concurrency=2, timeout_seconds=WORKER_TIMEOUT_SECONDS) as workers:
        warm(workers, turn_id, 2)
        slow = threading.Thread(
            target=invoke,
            args=(workers, event(turn_id=turn_id, call_id="c-fg", code="import time\ntime.sleep(8)")),
        )
        slow.start()
        until = time.monotonic() + 60
        while attempt_of(stack, "c-fg") is None and time.monotonic() < until:
            time.sleep(0.1)
        killed = kill_while(workers, submit, lambda: bool(jobs_of(stack, turn_id)))
        slow.join(60)
    attempt, foreground = attempt_of(stack, "c-bg"), attempt_of(stack, "c-fg")
    assert attempt is not None and foreground is not None
    (job,) = jobs_of(stack, turn_id)
    _sleep_past(max(attempt["deadline_ms"], foreground["deadline_ms"]))
    for _ in range(2):
        finish_interrupted(time.time())
        end_due_jobs(time.time())
    return {
        "killed": killed,
        "attempt": attempt,
        "job": job,
        "retried": stack.dispatch(submit),
    }


def _killed_at_the_audit_write(
    stack: Stack,
    proxy: HoldingProxy,
    submitted: dict[str, Any],
    send: Callable[[], dict[str, Any]],
    deliver: bool,
) -> dict[str, Any]:
    """`send()` (to the worker of `audit_held_workers`) in a thread, the worker killed once its
    audit PutItem is held, which is then dropped or (`deliver`) lands late; what was left."""
    from sandbox_runtime.job_store import JobStore

    answers: list[dict[str, Any]] = []
    sent = threading.Thread(target=lambda: answers.append(send()))
    sent.start()
    assert proxy.held.wait(60), "the worker never reached the audit write"
    kill_dispatch_workers()
    sent.join(60)
    proxy.release(deliver=deliver)
    if deliver:
        assert proxy.delivered.wait(30)
    store = JobStore(table_name=stack.resources.tables[n.JOBS.logical], ddb=aws.client("dynamodb"))
    return {
        "submitted": submitted,
        "answers": answers,
        "store": store,
        "claimed": store.get(submitted["job_id"]),
        "rows_before": rows_of(stack, submitted["invocation_id"]),
    }


def kill_while_ending_the_job(
    stack: Stack, workers: Workers, proxy: HoldingProxy, turn_id: str, dead_put: str
) -> dict[str, Any]:
    """A background job (2 s) submitted through the worker of `audit_held_workers`; get_job in
    that worker until one observes the job's end; the worker killed after it claimed the end,
    with its audit PutItem held, then dropped (`dead_put` "dropped") or let land late
    ("lands_late"); then the reaper's job sweep, a get_job in a fresh container, a second sweep."""
    from reaper.job_sweep import end_due_jobs

    submitted = invoke(workers, event(turn_id=turn_id, call_id="c-job", code=JOB, background=True))
    assert submitted["status"] == "running", submitted
    time.sleep(2.5)

    def poll_until_the_job_ended() -> dict[str, Any]:
        # On a loaded machine the job's 2 s may not be over yet: a get_job that finds it still
        # running writes nothing (no audit row), so ask again until one observes the end.
        poll = get_job_event(turn_id, submitted["job_id"])
        while (answer := invoke(workers, poll)).get("status") == "running":
            time.sleep(0.5)
        return answer

    seen = _killed_at_the_audit_write(
        stack, proxy, submitted, poll_until_the_job_ended, dead_put == "lands_late"
    )
    seen["swept"] = end_due_jobs(time.time())
    seen["final"] = stack.dispatch(get_job_event(turn_id, submitted["job_id"]))
    seen["again"] = end_due_jobs(time.time())
    seen["ended"] = seen["store"].get(submitted["job_id"])
    return seen


def kill_while_cancelling(
    stack: Stack, workers: Workers, proxy: HoldingProxy, turn_id: str
) -> dict[str, Any]:
    """A running job; its cancel_job in the worker of `audit_held_workers`, killed after it claimed
    the job's end with its audit PutItem held (then dropped); then the reaper's job sweep, a
    second cancel_job in a fresh container, and a second sweep."""
    from reaper.job_sweep import end_due_jobs

    submitted = invoke(workers, event(turn_id=turn_id, call_id="c-job", code=SLEEPS, background=True))
    assert submitted["status"] == "running", submitted
    cancel = {**get_job_event(turn_id, submitted["job_id"]), "action": "cancel_job"}
    seen = _killed_at_the_audit_write(stack, proxy, submitted, lambda: invoke(workers, cancel), False)
    seen["swept"] = end_due_jobs(time.time())
    seen["again"] = stack.dispatch(cancel)
    seen["swept_again"] = end_due_jobs(time.time())
    return seen


def kill_after_the_credential_issue(stack: Stack, turn_id: str, *, deliver: bool) -> dict[str, Any]:
    """The first call of an allowlisted turn in a dispatch worker whose AWS calls go through a
    HoldingProxy that holds the session's credential PutItem: the worker is killed there (Start
    done, the credential's write held, no readiness yet); the write is then dropped or (`deliver`)
    lands late; past the dead attempt's deadline the reaper's interrupted-calls sweep runs (twice)
    and the agent retries. The egress proxy must be attached (tests/support/egress_proxy.py)."""
    from reaper.interrupted_sweep import finish_interrupted

    egress_table = stack.resources.tables[n.EGRESS.logical]

    def credential_write(target: str, body: bytes) -> bool:
        if not target.endswith(".PutItem"):  # other services' bodies are not JSON
            return False
        doc = json.loads(body or b"{}")
        item = doc.get("Item") or {}
        return (
            doc.get("TableName") == egress_table
            and item.get(n.EGRESS.sort_key, {}).get("S") == n.EGRESS_CREDENTIAL_ITEM
        )

    call = event(turn_id=turn_id, call_id="c-alw", template_id="allowlisted", code="print('allowlisted')")
    proxy = HoldingProxy(stack.moto, credential_write)
    try:
        with dispatch_workers(
            stack, aws_endpoint=proxy.endpoint, max_concurrency=1, timeout_seconds=WORKER_TIMEOUT_SECONDS
        ) as workers:
            killed = kill_while(workers, call, proxy.held.is_set)
            proxy.release(deliver=deliver)
            if deliver:
                assert proxy.delivered.wait(30)
    finally:
        proxy.close()
    attempt = attempt_of(stack, "c-alw")
    assert attempt is not None
    _sleep_past(attempt["deadline_ms"])
    for _ in range(2):
        finish_interrupted(time.time())
    credentials = [
        item
        for item in aws.client("dynamodb").scan(TableName=egress_table, ConsistentRead=True)["Items"]
        if item[n.EGRESS.sort_key]["S"] == n.EGRESS_CREDENTIAL_ITEM
    ]
    return {
        "killed": killed,
        "attempt": attempt,
        "credentials": credentials,
        "retried": stack.dispatch(call),
    }
