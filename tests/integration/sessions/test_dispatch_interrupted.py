"""Dispatch dies mid-call: the call ends with exactly one `dispatch_interrupted` audit
row, written by the first retry after the in-progress deadline or by the reaper's sweep, whoever
comes first. The dispatch Lambda runs as a real worker process of the local Lambda emulator (a
short Lambda timeout, so the in-progress deadline comes soon) and is killed with SIGKILL while
the user code runs; the retries reach a fresh dispatch container (in-process)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sandbox_common import aws, messages
from sandbox_common import naming as n

from tests.support.crash_points import dispatch_worker_pids
from tests.support.http import HoldingProxy
from tests.support.stack import dispatch_workers

from .conftest import Stack, event

# The dispatch worker's Lambda timeout: the in-progress deadline of its calls (≈ claim + this).
# Above dispatch's answer margin (15 s) by enough that on a loaded machine every call is still
# under way when the last of the four workers has claimed its call and they are all killed.
WORKER_TIMEOUT_SECONDS = 34
SLOW = "import time\ntime.sleep(60)"


@pytest.fixture
def short_dispatch(reaper_stack: Stack) -> Iterator[dict[str, Any]]:
    """Dispatch as Lambda worker processes (its CDK environment) with a short Lambda timeout."""
    yield from _dispatch_workers_on(reaper_stack, reaper_stack.moto, WORKER_TIMEOUT_SECONDS)


def _dispatch_workers_on(stack: Stack, aws_endpoint: str, timeout_seconds: int) -> Iterator[dict[str, Any]]:
    with dispatch_workers(
        stack, aws_endpoint=aws_endpoint, max_concurrency=4, timeout_seconds=timeout_seconds
    ) as workers:
        yield {"stack": stack, "client": workers.client, "name": workers.name}


def _idempotency_items(stack: Stack) -> list[dict[str, Any]]:
    return aws.client("dynamodb").scan(
        TableName=stack.resources.tables[n.IDEMPOTENCY.logical], ConsistentRead=True
    )["Items"]


def _rows(stack: Stack, call_id: str) -> list[dict[str, Any]]:
    return [r for r in stack.audit_rows("acme") if r["call_id"] == call_id]


def _dead_calls(
    ctx: dict[str, Any], call_ids: tuple[str, ...], early: dict[str, Any] | None = None
) -> dict[str, dict[str, Any]]:
    """Each call sent to the dispatch worker, its workers SIGKILLed while the code runs; returns
    {call_id: attempt} once every call's in-progress deadline has passed. `early`: the first
    call's retry sent right after the kill, before its deadline, is answered into it."""
    answers: list[Any] = []

    def send(call_id: str) -> None:
        out = ctx["client"].invoke(
            FunctionName=ctx["name"],
            Payload=json.dumps(event(turn_id=f"turn-{call_id}", call_id=call_id, code=SLOW)).encode(),
        )
        answers.append(out.get("FunctionError"))

    threads = [threading.Thread(target=send, args=(c,)) for c in call_ids]
    for t in threads:
        t.start()
    stack: Stack = ctx["stack"]
    attempts: dict[str, dict[str, Any]] = {}
    until = time.monotonic() + 60
    while len(attempts) < len(call_ids) and time.monotonic() < until:
        for item in _idempotency_items(stack):
            if n.IDEMPOTENCY_ATTR_ATTEMPT in item and item["status"]["S"] == "INPROGRESS":
                attempt = json.loads(item[n.IDEMPOTENCY_ATTR_ATTEMPT]["S"])
                attempts[attempt["call_id"]] = {
                    **attempt,
                    "deadline_ms": int(item["in_progress_expiration"]["N"]),
                }
        time.sleep(0.2)
    assert sorted(attempts) == sorted(call_ids), attempts
    time.sleep(1)  # mid-call: claimed, its session starting or its code under way
    workers = dispatch_worker_pids(n.handler_string(n.DISPATCH))
    assert workers
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    for t in threads:
        t.join(60)
    assert answers == ["Unhandled"] * len(call_ids)  # the agent saw no answer from the dead attempts
    assert all(_rows(stack, c) == [] for c in call_ids)  # and nothing audited them
    if early is not None:
        first = call_ids[0]
        early.update(stack.dispatch(event(turn_id=f"turn-{first}", call_id=first, code=SLOW)))
        early["deadline_passed"] = time.time() * 1000 > attempts[first]["deadline_ms"]
    time.sleep(max(0.0, max(a["deadline_ms"] for a in attempts.values()) / 1000 - time.time()) + 0.5)
    return attempts


def _record_of(stack: Stack, call_id: str) -> dict[str, Any]:
    (item,) = [
        i
        for i in _idempotency_items(stack)
        if n.IDEMPOTENCY_ATTR_ATTEMPT in i
        and json.loads(i[n.IDEMPOTENCY_ATTR_ATTEMPT]["S"])["call_id"] == call_id
    ]
    return item


def _finisher_killed_before_its_row(stack: Stack, call_id: str) -> None:
    """A reaper process finishing `call_id`, SIGKILLed while its audit PutItem is held (dropped)."""
    audit_table = stack.resources.tables[n.INVOCATIONS.logical]
    proxy = HoldingProxy(
        stack.moto,
        lambda target, body: (
            target.endswith(".PutItem") and json.loads(body or b"{}").get("TableName") == audit_table
        ),
    )
    script = (
        "import sys\nfrom reaper.interrupted_sweep import interrupted_calls\nfrom reaper.service import"
        " reaper\ninterrupted_calls(reaper()).finish(sys.argv[1])\n"
    )
    env = dict(os.environ)
    env.update(AWS_ENDPOINT_URL=proxy.endpoint, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    finisher = subprocess.Popen(
        [sys.executable, "-c", script, _record_of(stack, call_id)["id"]["S"]], env=env
    )
    try:
        assert proxy.held.wait(60), "the finisher never reached its audit write"
        finisher.send_signal(signal.SIGKILL)
        finisher.wait(30)
        proxy.release(deliver=False)
    finally:
        proxy.close()


def test_dispatch_interrupted_killed_worker_each_call_ends_with_one_row(
    short_dispatch: dict[str, Any],
) -> None:
    from reaper.interrupted_sweep import finish_interrupted

    stack = short_dispatch["stack"]
    # Given four calls whose dispatch worker was SIGKILLed mid-call, c-retry retried at once
    early: dict[str, Any] = {}
    attempts = _dead_calls(short_dispatch, ("c-retry", "c-swept", "c-race", "c-recover"), early)
    # Then that retry, before the dead attempt's deadline, was answered call_in_progress (not
    # awaited): nothing was finished or written for it
    assert early["deadline_passed"] is False
    assert (early["ok"], early["error"], early["reason"]) == (
        False,
        "SandboxError",
        n.REASON_CALL_IN_PROGRESS,
    )
    assert 1 <= early["retry_after_s"] <= 10
    # Given now all four past their deadlines
    # And c-recover's finisher killed after it won the record, before its row was written
    _finisher_killed_before_its_row(stack, "c-recover")
    left = _record_of(stack, "c-recover")
    assert (left["status"]["S"], n.IDEMPOTENCY_ATTR_OPEN in left, _rows(stack, "c-recover")) == (
        "COMPLETED",
        True,
        [],
    )

    # When the first retry of c-retry arrives (same tenant + call_id), and then once more
    first = stack.dispatch(event(turn_id="turn-c-retry", call_id="c-retry", code=SLOW))
    again = stack.dispatch(event(turn_id="turn-c-retry", call_id="c-retry", code=SLOW))
    # Then it answers the interrupted error under the dead attempt's invocation id, at once
    assert (first["ok"], first["error"], first["exit_status"]) == (False, "SandboxError", "error")
    assert first["error_message"] == messages.DISPATCH_INTERRUPTED
    assert first["invocation_id"] == attempts["c-retry"]["invocation_id"]
    assert again == first  # replayed, not finished twice
    # And exactly one row carries the same error
    (row,) = _rows(stack, "c-retry")
    assert (row["invocation_id"], row["exit_status"], row["error"], row["failure_reason"]) == (
        first["invocation_id"],
        "error",
        "SandboxError",
        n.REASON_DISPATCH_INTERRUPTED,
    )

    # When a retry of c-race and two reaper sweeps race each other
    results: dict[str, Any] = {}
    racers = [
        threading.Thread(
            target=lambda: results.update(
                retry=stack.dispatch(event(turn_id="turn-c-race", call_id="c-race", code=SLOW))
            )
        ),
        threading.Thread(target=lambda: results.update(sweep1=finish_interrupted(time.time()))),
        threading.Thread(target=lambda: results.update(sweep2=finish_interrupted(time.time()))),
    ]
    for t in racers:
        t.start()
    for t in racers:
        t.join(60)
    # Then the retry got the interrupted answer, c-swept (no retry) was finished by a sweep,
    # c-recover's row was written from the record its killed finisher left, and every dead call
    # has exactly one row
    assert results["retry"]["error_message"] == messages.DISPATCH_INTERRUPTED
    finished = results["sweep1"]["finished"] + results["sweep2"]["finished"]
    assert finished in (1, 2)  # c-swept once, and c-race unless the retry won it
    # c-recover's row by at least one sweep; a sweep listing a record another has just finished
    # (completed, not yet out of the index) writes its row again too: a no-op (one row below)
    assert results["sweep1"]["recovered"] + results["sweep2"]["recovered"] >= 1
    for call_id, attempt in attempts.items():
        (row,) = _rows(stack, call_id)
        assert (row["invocation_id"], row["failure_reason"]) == (
            attempt["invocation_id"],
            n.REASON_DISPATCH_INTERRUPTED,
        )
    # And a later sweep finds nothing left to finish (all out of the open index)
    assert finish_interrupted(time.time()) == {"finished": 0, "recovered": 0, "lost": 0}


def _open_attempts(stack: Stack, call_id: str) -> list[dict[str, Any]]:
    return [
        i
        for i in _idempotency_items(stack)
        if n.IDEMPOTENCY_ATTR_OPEN in i
        and json.loads(i[n.IDEMPOTENCY_ATTR_ATTEMPT]["S"])["call_id"] == call_id
    ]


def _while_running(stack: Stack, call_id: str, during: Any) -> tuple[dict[str, Any], Any]:
    """A normal in-process call of 2 s; `during()` runs once its claim is in the open index."""
    answer: dict[str, Any] = {}
    call = threading.Thread(
        target=lambda: answer.update(
            stack.dispatch(
                event(
                    turn_id=f"turn-{call_id}",
                    call_id=call_id,
                    code="import time\ntime.sleep(2)\nprint('done')",
                )
            )
        )
    )
    call.start()
    until = time.monotonic() + 30
    while not _open_attempts(stack, call_id) and time.monotonic() < until:
        time.sleep(0.05)
    assert _open_attempts(stack, call_id), "the call's claim never appeared in the open index"
    seen = during()
    call.join(60)
    return answer, seen


def test_dispatch_interrupted_sweep_during_a_normal_call_writes_no_row(reaper_stack: Stack) -> None:
    from reaper.interrupted_sweep import finish_interrupted

    stack = reaper_stack
    # Given a normal call running, listed in the open index until its deadline
    # When the reaper's sweep runs during it
    answer, swept = _while_running(stack, "c-normal", lambda: finish_interrupted(time.time()))
    # Then the sweep left it alone, the call answered its real result with its own one row
    assert swept == {"finished": 0, "recovered": 0, "lost": 0}
    assert (answer["ok"], answer["stdout"]) == (True, "done\n")
    (row,) = _rows(stack, "c-normal")
    assert (row["invocation_id"], row["exit_status"], row["failure_reason"]) == (
        answer["invocation_id"],
        "ok",
        None,
    )
    # And its completion took it out of the open index: a later sweep has nothing to do
    assert _open_attempts(stack, "c-normal") == []
    assert finish_interrupted(time.time() + 3600) == {"finished": 0, "recovered": 0, "lost": 0}


def test_dispatch_interrupted_finisher_winning_over_a_live_original_leaves_one_row(
    reaper_stack: Stack,
) -> None:
    from reaper.interrupted_sweep import interrupted_calls
    from reaper.service import reaper

    stack = reaper_stack
    # Given a finisher whose clock is past the call's deadline while the original still runs
    # (clock skew: in AWS the runtime has killed the original by then)
    skewed = interrupted_calls(reaper())
    skewed.clock = lambda: time.time() + 3600
    # When it sweeps during the call, and the original then finishes
    answer, swept = _while_running(stack, "c-skewed", skewed.sweep)
    retry = stack.dispatch(
        event(turn_id="turn-c-skewed", call_id="c-skewed", code="import time\ntime.sleep(2)\nprint('done')")
    )
    # Then the finisher won the record: the original's completion lost cleanly (no second row,
    # the stored answer stays the interrupted one), and exactly one row exists under one id
    assert swept == {"finished": 1, "recovered": 0, "lost": 0}
    assert answer["ok"] is True  # the original's caller still got its real result
    assert (retry["error_message"], retry["invocation_id"]) == (
        messages.DISPATCH_INTERRUPTED,
        answer["invocation_id"],
    )
    (row,) = _rows(stack, "c-skewed")
    assert (row["invocation_id"], row["failure_reason"]) == (
        answer["invocation_id"],
        n.REASON_DISPATCH_INTERRUPTED,
    )


# A dispatch Lambda whose code (`print`) finishes well inside its budget (timeout - the 15 s answer
# margin), so its completion is sent while the worker still lives.
COMPLETION_WORKER_TIMEOUT_SECONDS = 22


def test_dispatch_interrupted_killed_while_its_completion_is_in_flight_ends_with_one_row(
    reaper_stack: Stack,
) -> None:
    """The completed idempotency record and the audit row are one write: a dispatch
    killed with that write in flight leaves neither, so the call is finished as interrupted with
    its one row. (Sent as two writes, the record could land completed without its row, and then
    nothing would ever write one: a completed record is not interrupted.)"""
    from reaper.interrupted_sweep import finish_interrupted

    stack = reaper_stack
    audit_table = stack.resources.tables[n.INVOCATIONS.logical]
    # Given dispatch workers whose request carrying the call's audit row is held, then dropped
    proxy = HoldingProxy(
        stack.moto,
        lambda target, body: (
            target.rsplit(".", 1)[-1] in ("PutItem", "TransactWriteItems") and audit_table.encode() in body
        ),
    )
    workers = _dispatch_workers_on(stack, proxy.endpoint, COMPLETION_WORKER_TIMEOUT_SECONDS)
    ctx = next(workers)
    answers: list[Any] = []
    try:
        call = threading.Thread(
            target=lambda: answers.append(
                ctx["client"].invoke(
                    FunctionName=ctx["name"],
                    Payload=json.dumps(
                        event(turn_id="turn-c-done", call_id="c-done", code="print('done')")
                    ).encode(),
                )
            )
        )
        call.start()
        # When the call has run and its completion is in flight, the worker is SIGKILLed
        assert proxy.held.wait(60), "the call never sent its audit row"
        for pid in dispatch_worker_pids(n.handler_string(n.DISPATCH)):
            os.kill(pid, signal.SIGKILL)
        call.join(60)
        proxy.release(deliver=False)
    finally:
        proxy.close()
        next(workers, None)
    assert [a.get("FunctionError") for a in answers] == ["Unhandled"]  # the agent got no answer
    # Then nothing of the completion landed: no row, the record still in progress
    record = _record_of(stack, "c-done")
    assert (record["status"]["S"], _rows(stack, "c-done")) == ("INPROGRESS", [])
    # And once its deadline passed, the sweep finishes it with exactly one row
    time.sleep(max(0.0, int(record["in_progress_expiration"]["N"]) / 1000 - time.time()) + 0.5)
    assert finish_interrupted(time.time())["finished"] == 1
    (row,) = _rows(stack, "c-done")
    assert row["failure_reason"] == n.REASON_DISPATCH_INTERRUPTED
