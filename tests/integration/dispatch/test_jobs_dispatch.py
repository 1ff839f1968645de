"""Background jobs through dispatch on the shared real-parts stack: submit answers at
once, get_job / cancel_job / end_turn observe and end the job, one audit row per job, counted
once at submit, at most 3 running jobs per turn, other turns' jobs look unknown."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sandbox_common import dimensions
from sandbox_common import naming as n

from tests.support.stack import turn_token_for

from .conftest import Stack, event

SLEEPER = "import time\ntime.sleep(30)\nprint('never')"


@pytest.fixture
def short_deadline(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Stack:
    """A 2 s per-call deadline: a job must outlive it."""
    from dispatch import parts as dependencies
    from sandbox_common import settings

    monkeypatch.setenv(n.ENV_CALL_TIMEOUT, "2")
    settings.clear_caches()
    dependencies.reset()
    return stack


def job(call_id: str, code: str, **over: Any) -> dict[str, Any]:
    return event(call_id=call_id, code=code, background=True, **over)


def get_job(job_id: str, action: str = "get_job", **over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "tenant_id": "acme",
        "agent_id": "agent-7",
        "turn_id": "turn-1",
        "job_id": job_id,
        **over,
    }
    # every turn action carries its turn's token (the caller's own, for another turn too)
    base.setdefault("turn_token", turn_token_for(str(base["tenant_id"]), str(base["turn_id"])))
    return {"action": action, **base}


def wait_final(stack: Stack, job_id: str, limit: float = 30.0) -> tuple[dict[str, Any], int]:
    """(final answer, how many `running` answers were seen before it)."""
    deadline, running = time.monotonic() + limit, 0
    while time.monotonic() < deadline:
        answer = stack.dispatch(get_job(job_id))
        if answer.get("status") != "running":
            return answer, running
        running += 1
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} still running after {limit} s")


def daily_count(stack: Stack) -> int:
    items = stack.counter_items()[n.TENANT_DAILY_COUNTERS.logical]
    return sum(int(i[n.COUNTER_ATTR_COUNT]["N"]) for i in items)


def test_jobs_submit_answers_at_once_and_job_outlives_the_call_deadline(short_deadline: Stack) -> None:
    stack = short_deadline
    # Given a 2 s per-call deadline and a turn with a live session
    assert stack.dispatch(event(call_id="c0", code="x = 1"))["ok"] is True
    # When a job that sleeps 3 s is submitted
    started = time.monotonic()
    submitted = stack.dispatch(job("c1", "import time\ntime.sleep(3)\nprint('done late')"))
    submit_s = time.monotonic() - started
    # Then the submit answers before the job could end, with the job's ids, and writes no row
    assert submitted["ok"] is True and submitted["status"] == "running"
    assert submitted["job_id"].startswith("job-") and submitted["invocation_id"] and submitted["session_id"]
    assert [r["call_id"] for r in stack.audit_rows("acme")] == ["c0"]
    # When it is polled while running, then it says running with the elapsed time
    early = stack.dispatch(get_job(submitted["job_id"]))
    assert early["status"] == "running" and early["elapsed_ms"] >= 0
    # When it is polled until it ends, then the final answer carries its stdout
    final, running = wait_final(stack, submitted["job_id"])
    assert running >= 1
    assert (final["ok"], final["status"], final["stdout"]) == (True, "completed", "done late\n")
    assert final["invocation_id"] == submitted["invocation_id"] and final["duration_ms"] >= 3000
    assert submit_s * 1000 < final["duration_ms"]
    # And exactly one audit row for the job, under the submit's invocation id; counted once
    rows = [r for r in stack.audit_rows("acme") if r["call_id"] == "c1"]
    assert len(rows) == 1
    assert (rows[0]["invocation_id"], rows[0]["background"], rows[0]["job_status"]) == (
        submitted["invocation_id"],
        True,
        "completed",
    )
    assert daily_count(stack) == 2  # c0 and the job, once each
    # And polling again repeats the same answer without a second row
    assert stack.dispatch(get_job(submitted["job_id"]))["stdout"] == "done late\n"
    assert len(stack.audit_rows("acme")) == 2


def test_jobs_cancel_ends_a_running_job_as_cancelled(stack: Stack) -> None:
    # Given a running job
    submitted = stack.dispatch(job("c1", SLEEPER))
    assert submitted["status"] == "running"
    # When it is cancelled
    cancelled = stack.dispatch(get_job(submitted["job_id"], action="cancel_job"))
    # Then it answers cancelled, get_job agrees, and one audit row says so
    assert cancelled["status"] == "cancelled" and cancelled["ok"] is False
    assert stack.dispatch(get_job(submitted["job_id"]))["status"] == "cancelled"
    rows = [r for r in stack.audit_rows("acme") if r["invocation_id"] == submitted["invocation_id"]]
    assert len(rows) == 1 and rows[0]["job_status"] == "cancelled"


def test_jobs_fourth_running_job_refused_and_not_counted(stack: Stack) -> None:
    # Given three running jobs in one turn
    ids = [stack.dispatch(job(f"c{i}", SLEEPER))["job_id"] for i in range(3)]
    assert len(set(ids)) == 3
    before = daily_count(stack)
    # When a 4th is submitted
    fourth = stack.dispatch(job("c4", SLEEPER))
    # Then it is an invalid request: nothing counted, no row
    assert fourth["ok"] is False and fourth["error"] == "SandboxInvalidRequest"
    assert "3 background jobs" in fourth["error_message"]
    assert daily_count(stack) == before == 3
    assert stack.audit_rows("acme") == []
    # And after one is cancelled a new one may start
    stack.dispatch(get_job(ids[0], action="cancel_job"))
    assert stack.dispatch(job("c5", SLEEPER))["status"] == "running"
    for job_id in stack.dispatch(event("end_turn"))["pending_jobs"]:
        stack.dispatch(get_job(job_id, action="cancel_job"))


def test_jobs_of_another_turn_or_tenant_refused_like_unknown(stack: Stack) -> None:
    # Given a job in acme's turn-1 and a second turn of the same agent
    submitted = stack.dispatch(job("c1", "print('mine')"))
    assert stack.dispatch(event(turn_id="turn-2", call_id="c2", code="x = 1"))["ok"] is True
    unknown = stack.dispatch(get_job("job-doesnotexist"))
    # When another turn, or another tenant with the same turn id, asks for it
    other_turn = stack.dispatch(get_job(submitted["job_id"], turn_id="turn-2"))
    other_tenant = stack.dispatch(get_job(submitted["job_id"], tenant_id="globex"))
    cancel_other = stack.dispatch(get_job(submitted["job_id"], action="cancel_job", turn_id="turn-2"))
    # Then each is refused exactly like an unknown id, and the job is untouched
    assert unknown["error"] == "SandboxInvalidRequest"
    for answer in (other_turn, other_tenant, cancel_other):
        assert (answer["ok"], answer["error"], answer["error_message"]) == (
            False,
            "SandboxInvalidRequest",
            unknown["error_message"],
        )
    final, _ = wait_final(stack, submitted["job_id"])
    assert final["status"] == "completed" and final["stdout"] == "mine\n"


def test_jobs_end_turn_with_running_job_keeps_session_until_job_ends(stack: Stack) -> None:
    # Given a running job that ends in 4 s (end_turn below must find it running, also on a loaded
    # machine)
    submitted = stack.dispatch(job("c1", "import time\ntime.sleep(4)\nprint('late')"))
    session_id = submitted["session_id"]
    # When the turn ends
    ended = stack.dispatch(event("end_turn"))
    # Then end_turn lists the job as pending and the session keeps running
    assert ended == {"ok": True, "stopped": False, "pending_jobs": [submitted["job_id"]]}
    assert session_id in stack.live_sessions()
    # When the job ends (observed by get_job), then its result is there and the session stops
    final, _ = wait_final(stack, submitted["job_id"])
    assert final["status"] == "completed" and final["stdout"] == "late\n"
    assert session_id not in stack.live_sessions()
    # And a new execute_code in the ended turn is refused
    assert stack.dispatch(event(call_id="c2"))["error"] == "SandboxInvalidRequest"


def test_jobs_timeout_s_without_background_refused(stack: Stack) -> None:
    # Given timeout_s without background, when sent, then it is invalid and nothing runs
    answer = stack.dispatch(event(call_id="c1", timeout_s=10))
    assert answer["error"] == "SandboxInvalidRequest" and "timeout_s" in answer["error_message"]
    assert stack.audit_rows("acme") == [] and daily_count(stack) == 0


def test_jobs_submit_refused_by_quota_releases_its_slot_and_is_audited(stack: Stack) -> None:
    from dispatch import parts

    # Given a tenant whose daily cap is used up
    stack.set_cap(dimensions.TENANT_DAILY.name, 0, tenant_id="acme")
    # When a job is submitted
    refused = stack.dispatch(job("c1", SLEEPER))
    # Then it is refused by the cap, the call's one audit row says so, and no job slot stays taken
    assert refused["ok"] is False and refused["error"] == "SandboxCapExceeded"
    rows = stack.audit_rows("acme")
    assert len(rows) == 1 and rows[0]["failure_reason"].startswith("cap_exceeded")
    turn_jobs = parts.built().jobs.store.turn_jobs("acme", "turn-1")
    assert (turn_jobs.running, turn_jobs.open_jobs) == (0, ())


def test_jobs_with_input_files_refused_before_anything_counts(stack: Stack) -> None:
    # Given a background request that also sends files, when submitted
    files = [{"path": "a.csv", "content_base64": "YQ=="}]
    answer = stack.dispatch(job("c1", "print(1)", files=files))
    # Then it is an invalid request: no job, no row, nothing counted
    assert answer["error"] == "SandboxInvalidRequest" and "background" in answer["error_message"]
    assert stack.audit_rows("acme") == [] and daily_count(stack) == 0


def test_jobs_get_and_cancel_without_the_turn_token_are_refused(stack: Stack) -> None:
    from sandbox_common import messages

    # Given a running job of turn-1
    assert stack.dispatch(event(call_id="t0", code="x = 1"))["ok"] is True
    submitted = stack.dispatch(job("t1", "import time\ntime.sleep(2)"))
    assert submitted["ok"] is True
    # When get_job / cancel_job come without the turn's token, or with another turn's
    missing = stack.dispatch(get_job(submitted["job_id"], turn_token=None))
    foreign = stack.dispatch(
        get_job(submitted["job_id"], action="cancel_job", turn_token=turn_token_for("acme", "turn-other"))
    )
    # Then both are refused with the token sentence, and the job still runs to its end
    assert (missing["error"], missing["error_message"]) == (
        "SandboxInvalidRequest",
        messages.TURN_TOKEN_REJECTED,
    )
    assert (foreign["error"], foreign["error_message"]) == (
        "SandboxInvalidRequest",
        messages.TURN_TOKEN_REJECTED,
    )
    final, _ = wait_final(stack, submitted["job_id"])
    assert final["status"] == "completed"


def test_jobs_token_checked_against_the_hash_kept_on_the_job_and_older_items_read_the_turn(
    stack: Stack,
) -> None:
    import hashlib

    from dispatch import parts as dependencies
    from sandbox_common import aws, messages

    # Given a running job of turn-1 (bound to its token)
    submitted = stack.dispatch(job("h1", "import time\ntime.sleep(2)\nprint('hashed')"))
    store = dependencies.built().jobs.store
    token = turn_token_for("acme", "turn-1")
    # Then the job item keeps the turn's token hash, the very one the turn item holds
    turn = dependencies.built().turns.get("acme", "turn-1")
    record = store.get(submitted["job_id"])
    assert record is not None and turn is not None
    assert record.turn_token_hash == turn.token_hash == hashlib.sha256(token.encode()).hexdigest()
    # When the item is one from before the hash was kept (attribute absent)
    aws.client("dynamodb").update_item(
        TableName=store.table,
        Key={"job_key": {"S": f"job#{submitted['job_id']}"}},
        UpdateExpression=f"REMOVE {n.JOB_ATTR_TURN_TOKEN_HASH}",
    )
    assert store.get(submitted["job_id"]).turn_token_hash is None  # type: ignore[union-attr]
    wrong = stack.dispatch(get_job(submitted["job_id"], turn_token=turn_token_for("acme", "turn-x")))
    right = stack.dispatch(get_job(submitted["job_id"]))
    # Then its turn is read instead: a wrong token is still refused, the right one answers
    assert (wrong["error"], wrong["error_message"]) == ("SandboxInvalidRequest", messages.TURN_TOKEN_REJECTED)
    assert right["ok"] is True and right["status"] in ("running", "completed")
    final, _ = wait_final(stack, submitted["job_id"])
    assert (final["status"], final["stdout"]) == ("completed", "hashed\n")


def test_jobs_timeout_fits_the_remaining_life_of_the_turns_session(stack: Stack) -> None:
    from sandbox_common import aws

    # Given a turn whose live session started 500 s ago (session timeout 900 s, call timeout 120 s)
    assert stack.dispatch(event(call_id="s0", code="x = 1"))["ok"] is True
    aws.client("dynamodb").update_item(
        TableName=stack.resources.tables[n.TURNS.logical],
        Key={n.TURNS.pk: {"S": "acme"}, n.TURNS.sort_key: {"S": "turn-1"}},
        UpdateExpression="SET session_started_at = session_started_at - :age",
        ExpressionAttributeValues={":age": {"N": "500"}},
    )
    # When a job asks for 600 s in it
    submitted = stack.dispatch(job("s1", "print('short')", timeout_s=600))
    # Then it runs in that session with what the session has left minus the reserve (900-500-180), and says so
    assert submitted["status"] == "running"
    assert 215 <= submitted["timeout_s"] <= 220
    assert "600 s to" in submitted["notice"]
    final, _ = wait_final(stack, submitted["job_id"])
    assert final["stdout"] == "short\n"


def test_jobs_submit_after_the_session_was_stopped_restarts_it_like_a_foreground_call(stack: Stack) -> None:
    # Given a turn whose session was stopped under it (reaped, or stopped by an operator)
    first = stack.dispatch(event(call_id="c-first", code="x = 1"))
    assert first["ok"] is True
    stack.interpreter.manager.stop(
        stack.interpreter.manager.lookup(first["session_id"]).interpreter_id, first["session_id"]
    )
    before = sum(
        int(i[n.COUNTER_ATTR_COUNT]["N"]) for i in stack.counter_items()[n.TENANT_DAILY_COUNTERS.logical]
    )
    # When a background submit comes next in the turn
    second = stack.dispatch(job("c-after", "print('fresh')"))
    # Then it started in a fresh session (not JobLaunchFailed), ran, and was counted once
    assert (second["ok"], second["status"]) == (True, "running"), second
    assert second["session_id"] != first["session_id"]
    final, _ = wait_final(stack, second["job_id"])
    assert (final["status"], final["stdout"]) == ("completed", "fresh\n")
    after = sum(
        int(i[n.COUNTER_ATTR_COUNT]["N"]) for i in stack.counter_items()[n.TENANT_DAILY_COUNTERS.logical]
    )
    assert after == before + 1
    rows = [r for r in stack.audit_rows("acme") if r["call_id"] == "c-after"]
    assert [(r["invocation_id"], r["job_status"]) for r in rows] == [(second["invocation_id"], "completed")]


def test_jobs_trailing_expression_is_shown_like_a_foreground_call(stack: Stack) -> None:
    # Given a job whose code ends in an expression, when it runs to its end
    submitted = stack.dispatch(job("expr", "6*7"))
    final, _ = wait_final(stack, submitted["job_id"])
    # Then its value is shown as a foreground call shows it, and counted
    foreground = stack.dispatch(event(call_id="expr-fg", code="6*7"))
    assert (final["status"], final["stdout"], final["stdout_bytes"]) == ("completed", "42\n", 3)
    assert foreground["stdout"] == final["stdout"]


def test_jobs_timeout_stops_the_job_only_the_turns_variables_and_files_stay(stack: Stack) -> None:
    # Given a turn with a variable and a file in its session
    setup = stack.dispatch(event(call_id="v0", code="x = 41\nopen('kept.txt', 'w').write('still here')"))
    assert setup["ok"] is True
    # When a job of that turn reaches its own 1 s timeout
    submitted = stack.dispatch(job("v1", "import time\ntime.sleep(60)", timeout_s=1))
    timed_out, _ = wait_final(stack, submitted["job_id"])
    assert (timed_out["status"], timed_out["error"]) == ("timed_out", "SandboxTimeout")
    assert "variables and files" in timed_out["error_message"] and "still there" in timed_out["error_message"]
    # Then the session is the same, with its variable and its file
    after = stack.dispatch(event(call_id="v2", code="print(x + 1, open('kept.txt').read())"))
    assert (after["ok"], after["stdout"], after["session_id"]) == (
        True,
        "42 still here\n",
        setup["session_id"],
    )
    assert setup["session_id"] in stack.live_sessions()


def _row(stack: Stack, invocation_id: str) -> dict[str, Any]:
    (row,) = [r for r in stack.audit_rows("acme") if r["invocation_id"] == invocation_id]
    return row


def test_jobs_outputs_file_comes_back_with_the_jobs_final_answer_and_not_a_later_call(stack: Stack) -> None:
    import hashlib

    # Given a turn whose calls already collected once
    assert stack.dispatch(event(call_id="o0", code="x = 1"))["files"] == []
    # When a job writes a file under outputs/ and ends
    content = b"region,amount\neu,3\n"
    code = (
        "import os\nos.makedirs('outputs', exist_ok=True)\n"
        f"open('outputs/report.csv', 'wb').write({content!r})"
    )
    submitted = stack.dispatch(job("o1", code))
    final, _ = wait_final(stack, submitted["job_id"])
    # Then its final answer carries the file, stored as an artifact of the job's invocation
    assert final["status"] == "completed", final
    assert [(f["filename"], f["bytes"]) for f in final["files"]] == [("report.csv", len(content))]
    got = stack.dispatch({"action": "get_file", "tenant_id": "acme", "file_id": final["files"][0]["file_id"]})
    assert (got["ok"], got["sha256"]) == (True, hashlib.sha256(content).hexdigest())
    assert [a["file_id"] for a in _row(stack, submitted["invocation_id"])["artifacts"]] == [
        final["files"][0]["file_id"]
    ]
    # And a later foreground call, which reads it, does not return it; the job's answer stays the same
    later = stack.dispatch(event(call_id="o2", code="print(open('outputs/report.csv').read())"))
    assert (later["ok"], later["files"]) == (True, [])
    assert stack.dispatch(get_job(submitted["job_id"]))["files"] == final["files"]


def test_jobs_file_a_running_job_wrote_is_not_a_concurrent_calls_and_the_calls_own_file_is_not_the_jobs(
    stack: Stack,
) -> None:
    # Given a running job that wrote outputs/early.txt and then waits for a file named `go`
    code = (
        "import os, time\nos.makedirs('outputs', exist_ok=True)\n"
        "open('outputs/early.txt', 'w').write('job')\nprint('early written', flush=True)\n"
        "while not os.path.exists('go'):\n    time.sleep(0.05)\n"
    )
    submitted = stack.dispatch(job("c1", code))
    deadline = time.monotonic() + 30
    while "early written" not in stack.dispatch(get_job(submitted["job_id"])).get("stdout_tail", ""):
        assert time.monotonic() < deadline, "the job never wrote its file"
        time.sleep(0.2)
    # When a foreground call writes its own file under outputs/ and lets the job end
    mine = stack.dispatch(
        event(call_id="c2", code="open('outputs/mine.txt', 'w').write('call')\nopen('go', 'w')")
    )
    final, _ = wait_final(stack, submitted["job_id"])
    # Then the call returned only its own file, and the job only its own
    assert [f["filename"] for f in mine["files"]] == ["mine.txt"]
    assert (final["status"], [f["filename"] for f in final["files"]]) == ("completed", ["early.txt"])
    # and no later call returns either
    later = stack.dispatch(event(call_id="c3", code="import os\nprint(sorted(os.listdir('outputs')))"))
    assert (later["stdout"], later["files"]) == ("['early.txt', 'mine.txt']\n", [])
