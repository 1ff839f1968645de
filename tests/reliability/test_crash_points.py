"""Crash points: the dispatch Lambda, a real worker process of the local Lambda
emulator, SIGKILLed at one named point of a counted call — a `resume`, a background submit, a
job's end, a `cancel_job` — then the reaper's sweeps and the agent's next calls (a fresh dispatch
container) finish what it left. Each cell runs the scenario of that crash path
(tests/support/crash_points.py, also run by the integration tests) and checks the audit promise:
every call the quota counted (its "counted" marker) has exactly one audit row, and none is counted
without a row.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from sandbox_common import naming as n

from tests.support.crash_points import (
    WORKER_TIMEOUT_SECONDS,
    add_tools_template,
    audit_held_workers,
    kill_after_the_credential_issue,
    kill_mid_resume,
    kill_queued_background_submit,
    kill_while_cancelling,
    kill_while_ending_the_job,
)
from tests.support.stack import Stack, dispatch_workers, reaper_stack, stack

__all__ = ["reaper_stack", "stack"]

EXPECTED = "exactly one row per counted call, no counted call without a row"


def _answer(answer: dict[str, Any]) -> str:
    """What an answer told the agent, in a few words."""
    if answer.get("function_error"):
        return f"no answer (Lambda {answer['function_error']})"
    said = [str(answer[k]) for k in ("status", "error", "reason") if answer.get(k)]
    return " ".join(said) or "ok"


def _audit(stack: Stack) -> tuple[dict[str, int], list[str]]:
    """Audit rows per call_id, and the calls the quota counted (each cell has a fresh stack)."""
    per_call: dict[str, int] = {}
    for row in stack.audit_rows("acme"):
        per_call[row["call_id"]] = per_call.get(row["call_id"], 0) + 1
    return per_call, [key.removeprefix("acme#") for key in stack.markers() if key.startswith("acme#")]


def _cell(record: Callable[..., None], stack: Stack, *, crash_point: str, died: str, agent_saw: str) -> None:
    per_call, counted = _audit(stack)
    record(
        "crash_points",
        crash_point=crash_point,
        died=died,
        agent_saw=agent_saw,
        audit_rows=", ".join(f"{c} {k}" for c, k in sorted(per_call.items())) or "0",
        counted=", ".join(counted) or "0",
        expected=EXPECTED,
    )
    # Then every counted call has exactly one row, and no counted call is without one
    assert counted, "the scenario counted no call"
    assert {c: per_call.get(c, 0) for c in counted} == dict.fromkeys(counted, 1), (per_call, counted)


def test_crash_points_resume(reaper_stack: Stack, record: Callable[..., None]) -> None:
    stack, turn_id = reaper_stack, "turn-cell-resume"
    # Given a tool-calling call paused at its tool call, through the dispatch worker
    add_tools_template(stack)
    with dispatch_workers(stack, max_concurrency=1, timeout_seconds=WORKER_TIMEOUT_SECONDS) as workers:
        # When the worker dies with the resume's continuation claimed, and the turn ends and the
        # reaper's paused-calls sweep runs past the dead resume's deadline
        seen = kill_mid_resume(stack, workers, turn_id, "sweep")
    agent_saw = "; ".join(
        (
            f"resume: {_answer({'function_error': seen['killed'][0]})}",
            f"retry: {_answer(seen['early'])}",
            f"resume after the sweep: {_answer(seen['again'])}",
        )
    )
    _cell(
        record,
        stack,
        crash_point="resume",
        died="continuation claimed, the resumed code running",
        agent_saw=agent_saw,
    )


def test_crash_points_background_submit(reaper_stack: Stack, record: Callable[..., None]) -> None:
    stack, turn_id = reaper_stack, "turn-cell-bg"
    # Given a turn with a live session; a background submit queued behind a foreground call
    # When both workers die once the submit created its job, and the reaper's sweeps run
    seen = kill_queued_background_submit(stack, turn_id)
    retried = seen["retried"]
    agent_saw = f"submit: {_answer({'function_error': seen['killed'][0]})}; retry: {_answer(retried)}" + (
        f" job {retried['job_id']}" if retried.get("job_id") else ""
    )
    _cell(
        record,
        stack,
        crash_point="background submit",
        died="job created, queued behind a foreground call of the turn",
        agent_saw=agent_saw,
    )


@pytest.mark.parametrize(
    ("crash_point", "died"),
    [
        ("job end", "in get_job: the job's end claimed (completed), its audit PutItem in flight"),
        ("cancel_job", "in cancel_job: the job's end claimed (cancelled), its audit PutItem in flight"),
    ],
)
def test_crash_points_job(
    reaper_stack: Stack, record: Callable[..., None], crash_point: str, died: str
) -> None:
    stack, turn_id = reaper_stack, "turn-cell-job"
    # Given a background job, and a get_job observing its end (or a cancel_job) in the worker
    # When the worker dies after claiming the job's end, its audit write lost, and the reaper's
    # job sweep and the agent's next call come
    with audit_held_workers(stack) as (workers, proxy):
        if crash_point == "job end":
            seen = kill_while_ending_the_job(stack, workers, proxy, turn_id, "dropped")
            killed, after = "get_job", f"get_job again: {_answer(seen['final'])}"
        else:
            seen = kill_while_cancelling(stack, workers, proxy, turn_id)
            killed, after = "cancel_job", f"cancel_job again: {_answer(seen['again'])}"
    _cell(
        record,
        stack,
        crash_point=crash_point,
        died=died,
        agent_saw=f"{killed}: {_answer(seen['answers'][0])}; {after}",
    )


@pytest.mark.parametrize("write", ["dropped", "lands_late"])
def test_crash_points_egress_credential(
    reaper_stack: Stack, egress_proxy: Any, record: Callable[..., None], write: str, reliability_full: bool
) -> None:
    if write == "dropped" and not reliability_full:
        pytest.skip("`make reliability` only: the quick run keeps the credential that lands")
    stack = reaper_stack
    # Given an allowlisted turn's first call, its worker killed once it has started the session
    # and sent the session's proxy credential (the write dropped, or landing late)
    # When the reaper's interrupted-calls sweep and the agent's retry come
    seen = kill_after_the_credential_issue(stack, "turn-cell-egress", deliver=write == "lands_late")
    _cell(
        record,
        stack,
        crash_point="allowlist session start: its credential written, no readiness yet",
        died=f"dispatch (SIGKILL), the credential's write {write.replace('_', ' ')}",
        agent_saw=f"execute_code: {_answer({'function_error': seen['killed'][0]})}; "
        f"the retry: {_answer(seen['retried'])}",
    )
    # Then a credential that did land was never bound: only the dead worker ever held its secret,
    # and without a bound address the proxy admits nothing but a bind; it ends with the session
    assert len(seen["credentials"]) == (1 if write == "lands_late" else 0), seen["credentials"]
    for item in seen["credentials"]:
        assert n.EGRESS_ATTR_SOURCE not in item
        assert int(item[n.TTL_ATTRIBUTE]["N"]) <= time.time() + 900 + 120
