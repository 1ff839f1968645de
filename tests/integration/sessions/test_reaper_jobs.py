"""The reaper and background jobs with real parts: a job nobody polls
is ended by the scheduled reaper (its one audit row, its session stopped after end_turn, its slot
freed), exactly once also when a get_job races the sweep; the session sweep spares the session
of a running job, and spares every ended turn's session when it cannot tell which are busy."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from sandbox_common import aws
from sandbox_common import naming as n

from tests.conftest import LambdaContext

from .conftest import Stack, event, get_job_event, slots_of


def _turn_with_slot(stack: Stack, turn_id: str) -> str:
    """A turn whose first call started a session through dispatch, which recorded it in the ledger
    (a slot reserved for the turn, then activated)."""
    first = stack.dispatch(event(turn_id=turn_id, call_id=f"{turn_id}-c0", code="x = 1"))
    assert first["ok"] is True
    assert [s.turn_id for s in slots_of(stack) if s.session_id == first["session_id"]] == [turn_id]
    return str(first["session_id"])


def _submit(stack: Stack, turn_id: str, call_id: str, code: str) -> dict[str, Any]:
    answer = stack.dispatch(event(turn_id=turn_id, call_id=call_id, code=code, background=True))
    assert answer["status"] == "running", answer
    return answer


def _get_job(stack: Stack, turn_id: str, job_id: str) -> dict[str, Any]:
    return stack.dispatch(get_job_event(turn_id, job_id))


def _end_turn(stack: Stack, turn_id: str) -> dict[str, Any]:
    return stack.dispatch(event("end_turn", turn_id=turn_id))


def _running(stack: Stack, session_id: str) -> bool:
    session = stack.interpreter.session(session_id)
    return session is not None and session.status == "READY"


def _rows(stack: Stack, invocation_id: str) -> list[dict[str, Any]]:
    return [r for r in stack.audit_rows("acme") if r["invocation_id"] == invocation_id]


def _reap() -> dict[str, Any]:
    from reaper.handler import handler

    out = handler({"source": "aws.events", "detail-type": "Scheduled Event"}, LambdaContext())
    assert out["ok"] is True
    return out


def _reap_until_a_job_ended(within_s: float = 120.0) -> dict[str, Any]:
    """The reaper's scheduled run, repeated until one run ended a job (waits on state)."""
    deadline = time.monotonic() + within_s
    while True:
        out = _reap()
        if out["hooks"][n.REAPER_HOOK_JOBS]["ended"] or time.monotonic() > deadline:
            return out
        time.sleep(0.5)


def test_reaper_spares_a_running_jobs_session_then_ends_the_job_once_and_stops_it(
    reaper_stack: Stack,
) -> None:
    stack = reaper_stack
    # Given a turn whose job runs ~5 s (the reaper's first run below must fall inside it, also on
    # a loaded machine), and end_turn already answered pending_jobs
    session_id = _turn_with_slot(stack, "turn-rj")
    submitted = _submit(stack, "turn-rj", "c-job", "import time\ntime.sleep(5)\nprint('reaped')")
    assert _end_turn(stack, "turn-rj")["pending_jobs"] == [submitted["job_id"]]
    # When the reaper runs while the job still runs
    early = _reap()
    # Then the job's session is spared (its turn ended, but a job runs in it) and no row is written
    assert early["sweep"]["spared_for_jobs"] == 1
    assert early["sweep"]["by_reason"] == {}
    assert early["hooks"][n.REAPER_HOOK_JOBS] == {"ok": True, "ended": 0, "by_status": {}}
    assert _running(stack, session_id)
    assert _rows(stack, submitted["invocation_id"]) == []
    # When the reaper runs after the job ended (nobody polled it)
    late = _reap_until_a_job_ended()
    # Then it ended the job once: one audit row, background, with its real duration
    assert late["hooks"][n.REAPER_HOOK_JOBS] == {"ok": True, "ended": 1, "by_status": {"completed": 1}}
    (row,) = _rows(stack, submitted["invocation_id"])
    assert (row["background"], row["job_status"], row["stdout_bytes"], row["call_id"]) == (
        True,
        "completed",
        7,
        "c-job",
    )
    assert row["duration_ms"] >= 5000
    # And the session was stopped (turn ended, last job) and its slot freed in the same run
    assert not _running(stack, session_id)
    assert late["sweep"]["by_reason"] == {"turn_ended": 1}
    assert [s for s in slots_of(stack) if s.session_id == session_id] == []
    # When the reaper runs again and the agent polls afterwards
    again = _reap()
    final = _get_job(stack, "turn-rj", submitted["job_id"])
    # Then nothing more is ended or written, and get_job answers the stored final result
    assert again["hooks"][n.REAPER_HOOK_JOBS]["ended"] == 0
    assert (final["status"], final["stdout"]) == ("completed", "reaped\n")
    assert len(_rows(stack, submitted["invocation_id"])) == 1


def test_reaper_and_get_job_racing_end_a_job_exactly_once(reaper_stack: Stack) -> None:
    from reaper.job_sweep import end_due_jobs

    stack = reaper_stack
    # Given three finished jobs of a live turn that nobody has observed yet
    _turn_with_slot(stack, "turn-race")
    jobs = [_submit(stack, "turn-race", f"c-{i}", f"print('job {i}')") for i in range(3)]
    time.sleep(1.5)
    # When, for each, the reaper's sweep and a get_job observe its end at the same moment
    swept: list[dict[str, Any]] = []
    answers: dict[str, dict[str, Any]] = {}
    for job in jobs:
        barrier = threading.Barrier(2)

        def sweep(barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            swept.append(end_due_jobs(time.time()))

        def poll(job_id: str = job["job_id"], barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            answers[job_id] = _get_job(stack, "turn-race", job_id)

        threads = [threading.Thread(target=sweep), threading.Thread(target=poll)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    # Then each job has exactly one audit row and every observer saw the same end
    assert len(answers) == len(jobs) and len(swept) == len(jobs)
    for job in jobs:
        rows = _rows(stack, job["invocation_id"])
        assert len(rows) == 1, job["job_id"]
        assert rows[0]["job_status"] == "completed"
        assert answers[job["job_id"]]["status"] == "completed"
        assert answers[job["job_id"]]["stdout"] == f"job {jobs.index(job)}\n"
    # And across sweeps and polls each job was ended once (the sweep reports only the ends it made)
    assert sum(s["ended"] for s in swept) <= len(jobs)


def test_reaper_spares_ended_turns_sessions_when_jobs_cannot_be_read(
    reaper_stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reaper import service
    from sandbox_common import settings

    stack = reaper_stack
    # Given an ended turn whose session was not stopped, and a jobs table the reaper cannot read
    session_id = _turn_with_slot(stack, "turn-blind")
    from dispatch.turns.store import TurnStore

    TurnStore(table_name=stack.resources.tables[n.TURNS.logical], ddb=aws.client("dynamodb")).end(
        "acme", "turn-blind"
    )
    monkeypatch.setenv(n.ENV_JOBS_TABLE, "no-such-jobs-table")
    settings.clear_caches()
    service.reset()
    # When the reaper runs
    out = _reap()
    # Then it does not stop the session on a guess (a job might run in it): spared, reported
    assert out["sweep"]["spared_for_jobs"] == 1
    assert out["sweep"]["by_reason"] == {}
    assert _running(stack, session_id)
    # And the job sweep's failure is reported, not hidden
    assert out["hooks"][n.REAPER_HOOK_JOBS]["ok"] is False


def test_reaper_ending_a_job_stores_its_outputs_files_for_its_final_answer(reaper_stack: Stack) -> None:
    stack = reaper_stack
    # Given a turn that ended while its job, which writes a file under outputs/, still ran
    session_id = _turn_with_slot(stack, "turn-rf")
    code = (
        "import os, time\ntime.sleep(1)\nos.makedirs('outputs', exist_ok=True)\n"
        "open('outputs/r.txt', 'w').write('r')"
    )
    submitted = _submit(stack, "turn-rf", "c-file", code)
    assert _end_turn(stack, "turn-rf")["pending_jobs"] == [submitted["job_id"]]
    # When the reaper sees the job's end (nobody polled it) and its session is stopped
    late = _reap_until_a_job_ended()
    assert late["hooks"][n.REAPER_HOOK_JOBS]["by_status"] == {"completed": 1}
    assert not _running(stack, session_id)
    # Then the job's final answer still carries its file, stored, and its row names it
    final = _get_job(stack, "turn-rf", submitted["job_id"])
    assert [f["filename"] for f in final["files"]] == ["r.txt"]
    got = stack.dispatch({"action": "get_file", "tenant_id": "acme", "file_id": final["files"][0]["file_id"]})
    assert (got["ok"], got["bytes"]) == (True, 1)
    (row,) = _rows(stack, submitted["invocation_id"])
    assert [a["filename"] for a in row["artifacts"]] == ["r.txt"]
