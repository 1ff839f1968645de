"""Job flow (functions/dispatch/job_flow.py): observe, end exactly once, reap — against moto's
DynamoDB and the local AgentCore interpreter (real sessions, real job processes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sandbox_common import audit, aws
from sandbox_common import naming as n
from sandbox_runtime import job_end as job_flow
from sandbox_runtime.job_store import JobRecord, JobStore
from sandbox_runtime.runner import SessionRunner, credentials
from sandbox_runtime.runner.jobs import JobRunner

from tests.support.runner import ACME_INTERPRETER, ACME_RUNNER_ROLE, session_runner
from tests.support.runner import acme_interpreter as acme_interpreter  # fixtures of this module
from tests.support.tables import ddb as ddb
from tests.support.tables import tables as tables

INTERPRETER = ACME_INTERPRETER
RUNNER_ROLE = ACME_RUNNER_ROLE
# The runner's per-call deadline, generous: no test here is about it, and on a loaded machine a new
# session's readiness check alone can take more than 2 s.
CALL_TIMEOUT_SECONDS = 15
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture
def env(
    acme_interpreter: Any, tables: dict[str, str], ddb: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, Any]]:
    server = acme_interpreter
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", server.endpoint)
    credentials.clear_cache()
    runner = session_runner(
        call_timeout_seconds=CALL_TIMEOUT_SECONDS, stdout_cap_bytes=4096, stderr_cap_bytes=1024
    )
    store = JobStore(table_name=tables[n.JOBS.logical], ddb=ddb)
    closed: set[tuple[str, str]] = set()
    deps = job_flow.JobDeps(
        store=store,
        runner_for=lambda tenant: runner,
        audit_writer=audit.AuditWriter(
            table_name=tables[n.INVOCATIONS.logical], dlq_url="unused", ddb=ddb, sqs=aws.client("sqs")
        ),
        retention_days=30,
        turn_closed=lambda tenant, turn: (tenant, turn) in closed,
    )
    session_id = runner.start_session(INTERPRETER, name="flow")
    yield {
        "runner": runner,
        "store": store,
        "deps": deps,
        "session": session_id,
        "closed": closed,
        "tables": tables,
        "ddb": ddb,
        "server": server,
    }
    runner.stop_session(INTERPRETER, session_id)
    credentials.clear_cache()


def submit(
    env: dict[str, Any], code: str, *, timeout_s: int = 30, turn: str = "turn-1", submitted_ago_s: float = 0.0
) -> JobRecord:
    record = JobRecord(
        job_id=f"job-{uuid.uuid4().hex[:12]}",
        tenant_id="acme",
        agent_id="agent-1",
        turn_id=turn,
        session_id=env["session"],
        interpreter_id=INTERPRETER,
        invocation_id=str(uuid.uuid4()),
        call_id=f"call-{uuid.uuid4().hex[:8]}",
        timeout_s=timeout_s,
        submitted_ms=int((time.time() - submitted_ago_s) * 1000),
        audit_base={
            "user_id": None,
            "template_id": "analyst",
            "invocation_source": "chat",
            "environment": "default-public",
            "executed_code_hash": audit.code_hash(code),
        },
    )
    env["store"].create(record)
    JobRunner(env["runner"]).submit_job(
        INTERPRETER, env["session"], job_id=record.job_id, code=code, timeout_s=timeout_s
    )
    return record


def audit_rows(env: dict[str, Any], invocation_id: str) -> list[dict[str, Any]]:
    out = env["ddb"].scan(
        TableName=env["tables"][n.INVOCATIONS.logical],
        FilterExpression="invocation_id = :i",
        ExpressionAttributeValues={":i": {"S": invocation_id}},
    )
    return [audit.from_item(item) for item in out["Items"]]


def poll_until_final(env: dict[str, Any], record: JobRecord, limit: float = 20.0) -> job_flow.JobView:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        view = job_flow.poll_job(env["store"].get(record.job_id), env["deps"])
        if view.status != "running":
            return view
        time.sleep(0.2)
    raise AssertionError("job did not end")


def wait_until_done_in_session(runner: SessionRunner, session: str, record: JobRecord) -> None:
    """Until the session itself reports the job final (nothing is ended or recorded here)."""
    deadline = time.monotonic() + 20.0
    while not JobRunner(runner).job_status(INTERPRETER, session, record.job_id).final:
        assert time.monotonic() < deadline, "job did not finish in its session"
        time.sleep(0.1)


def test_job_flow_completed_job_answers_final_result_and_one_audit_row(env):
    # Given a job that outlives the 2 s call deadline
    record = submit(env, "import time\ntime.sleep(2.5)\nprint('result', 42)")
    # When it is polled while running and after it ended, twice
    running = job_flow.poll_job(env["store"].get(record.job_id), env["deps"])
    final = poll_until_final(env, record)
    again = job_flow.poll_job(env["store"].get(record.job_id), env["deps"])
    # Then: running with elapsed time and its output so far (none yet), then the execute_code
    # result with status completed
    assert running.to_response() == {
        "ok": True,
        "status": "running",
        "job_id": record.job_id,
        "elapsed_ms": running.elapsed_ms,
        "stdout_tail": "",
        "stderr_tail": "",
        "stdout_bytes": 0,
        "stderr_bytes": 0,
    }
    body = final.to_response()
    assert (body["ok"], body["status"], body["stdout"], body["exit_status"]) == (
        True,
        "completed",
        "result 42\n",
        "ok",
    )
    assert (body["job_id"], body["invocation_id"], body["session_id"]) == (
        record.job_id,
        record.invocation_id,
        env["session"],
    )
    assert body["duration_ms"] >= 2500
    assert again.to_response() == body
    rows = audit_rows(env, record.invocation_id)
    assert len(rows) == 1
    row = rows[0]
    assert (row["background"], row["job_status"], row["exit_status"], row["stdout_bytes"]) == (
        True,
        "completed",
        "ok",
        10,
    )
    assert row["duration_ms"] >= 2500
    assert row["executed_code_hash"] == audit.code_hash("import time\ntime.sleep(2.5)\nprint('result', 42)")
    assert env["store"].get(record.job_id).state == "completed"
    assert env["store"].turn_jobs("acme", "turn-1").running == 0


def test_job_flow_duration_is_the_run_time_in_the_session_not_the_time_until_polled(env):
    # Given a short job, first observed long after its submit (submitted 20 s before it ran here)
    record = submit(env, "import time\ntime.sleep(0.5)", submitted_ago_s=20)
    wait_until_done_in_session(env["runner"], env["session"], record)
    # When it is polled
    final = poll_until_final(env, record).to_response()
    # Then its answer and its row carry its run time in the session (about 0.5 s), not 20 s+
    (row,) = audit_rows(env, record.invocation_id)
    assert 500 <= final["duration_ms"] < 10_000
    assert row["duration_ms"] == final["duration_ms"]


def test_job_flow_timed_out_job_stops_the_job_only_and_keeps_the_session(env):
    # Given a job with a 1 s timeout that would run for a minute
    record = submit(env, "import time\ntime.sleep(60)", timeout_s=1)
    # When it is observed after its deadline
    view = poll_until_final(env, record)
    # Then it is timed_out, audited as timeout, and its session is still there
    body = view.to_response()
    assert (view.status, body["ok"], body["error"], body["exit_status"]) == (
        "timed_out",
        False,
        "SandboxTimeout",
        "timeout",
    )
    assert env["server"].session(env["session"]).status == "READY"
    assert audit_rows(env, record.invocation_id)[0]["exit_status"] == "timeout"


def test_job_flow_cancel_ends_job_once(env):
    # Given a running job
    record = submit(env, "import time\nprint('partial', flush=True)\ntime.sleep(60)", timeout_s=600)
    time.sleep(1.0)
    # When it is cancelled, then polled
    started = time.monotonic()
    cancelled = job_flow.cancel_job(env["store"].get(record.job_id), env["deps"])
    took = time.monotonic() - started
    later = job_flow.poll_job(env["store"].get(record.job_id), env["deps"])
    # Then it is cancelled within seconds, with its output so far, audited once
    body = cancelled.to_response()
    assert (cancelled.status, body["error"], body["stdout"]) == ("cancelled", "SandboxError", "partial\n")
    assert took < 5.0
    assert later.to_response() == body
    rows = audit_rows(env, record.invocation_id)
    assert len(rows) == 1
    assert rows[0]["job_status"] == "cancelled"


def test_job_flow_session_outlives_end_turn_until_last_job_ends(env):
    # Given a turn with a running job whose turn has ended
    record = submit(env, "import time\ntime.sleep(1.5)\nprint('late')")
    env["closed"].add(("acme", "turn-1"))
    # When the job is observed while running, then after its end
    job_flow.poll_job(env["store"].get(record.job_id), env["deps"])
    alive_while_running = env["server"].session(env["session"]).status
    final = poll_until_final(env, record)
    # Then the session lived until the job ended, and was stopped then
    assert alive_while_running == "READY"
    assert final.to_response()["stdout"] == "late\n"
    assert env["server"].session(env["session"]).status == "TERMINATED"


def test_job_flow_crash_between_claim_and_audit_is_finished_by_the_reaper_once(env):
    # Given a job whose end was claimed by an observer that died before writing the audit row
    record = submit(env, "print('quick')")
    wait_until_done_in_session(env["runner"], env["session"], record)
    state = JobRunner(env["runner"]).job_status(INTERPRETER, env["session"], record.job_id)
    assert state.final and state.result is not None
    env["store"].claim_end(
        record,
        final_state=state.state,
        outcome={
            "response": {"ok": True, "status": "completed", "stdout": "quick\n", "job_id": record.job_id},
            "audit": job_flow._audit_fields(state.result),
        },
    )
    # When the reaper runs twice concurrently and a poll comes in
    results: list[Any] = []
    threads = [
        threading.Thread(target=lambda: results.append(job_flow.finish_due_jobs(env["deps"])))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    view = job_flow.poll_job(env["store"].get(record.job_id), env["deps"])
    # Then exactly one audit row, from the stored outcome, and the job is final
    assert len(results) == 2
    assert len(audit_rows(env, record.invocation_id)) == 1
    assert view.to_response()["stdout"] == "quick\n"
    assert env["store"].get(record.job_id).state == "completed"
    assert env["store"].open_jobs() == []


_SUBMITTER = textwrap.dedent("""
    import json, sys, time
    from sandbox_runtime.job_store import JobRecord, JobStore
    from sandbox_runtime.runner.jobs import JobRunner
    from tests.support.runner import session_runner
    from sandbox_common import aws
    args = json.loads(sys.argv[1])
    runner = session_runner(allowed_interpreter_ids=[args["interpreter"]], runner_role_arn=args["role"],
                            call_timeout_seconds=args["call_timeout_seconds"], stdout_cap_bytes=4096,
                            stderr_cap_bytes=1024)
    record = JobRecord(**args["record"])
    JobStore(table_name=args["table"], ddb=aws.client("dynamodb")).create(record)
    JobRunner(runner).submit_job(args["interpreter"], record.session_id, job_id=record.job_id,
                                 code=args["code"], timeout_s=record.timeout_s)
    print("submitted", flush=True)
    time.sleep(600)  # the 'Lambda' holds on until it is killed
""")


def test_job_flow_dispatch_killed_while_job_runs_job_still_ends_and_is_audited_once(env):
    # Given a dispatch process that submitted a job and is then killed while the job runs
    code = "import time\ntime.sleep(2)\nprint('survived')"
    record = {
        "job_id": "job-orphan",
        "tenant_id": "acme",
        "agent_id": "agent-1",
        "turn_id": "turn-1",
        "session_id": env["session"],
        "interpreter_id": INTERPRETER,
        "invocation_id": str(uuid.uuid4()),
        "call_id": "call-orphan",
        "timeout_s": 30,
        "submitted_ms": int(time.time() * 1000),
        "audit_base": {"executed_code_hash": audit.code_hash(code), "template_id": "analyst"},
    }
    args = {
        "interpreter": INTERPRETER,
        "role": RUNNER_ROLE,
        "call_timeout_seconds": CALL_TIMEOUT_SECONDS,
        "record": record,
        "code": code,
        "table": env["tables"][n.JOBS.logical],
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", _SUBMITTER, json.dumps(args)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        env=dict(os.environ),
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"submitted"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    # When the job has ended in its session (observed read-only: nothing ends it or writes a row)
    observer = JobRunner(env["deps"].runner_for("acme"))
    deadline = time.monotonic() + 60
    while not observer.job_status(INTERPRETER, env["session"], "job-orphan").final:
        assert time.monotonic() < deadline, "the job did not end within 60 s"
        time.sleep(0.25)
    # and the reaper and a poll observe it concurrently
    ended: list[Any] = []
    reapers = [
        threading.Thread(target=lambda: ended.append(job_flow.finish_due_jobs(env["deps"]))) for _ in range(2)
    ]
    for t in reapers:
        t.start()
    view = job_flow.poll_job(env["store"].get("job-orphan"), env["deps"])
    for t in reapers:
        t.join()
    # Then the job completed with its stdout and has exactly one audit row
    assert proc.returncode == -signal.SIGKILL
    assert (view.status, view.to_response()["stdout"]) == ("completed", "survived\n")
    assert len(ended) == 2
    rows = audit_rows(env, record["invocation_id"])
    assert len(rows) == 1
    assert rows[0]["background"] is True


def test_job_flow_job_missing_from_its_session_ends_failed(env):
    # Given a job record whose job never reached the session (its files are not there)
    record = JobRecord(
        job_id="job-ghost",
        tenant_id="acme",
        agent_id="agent-1",
        turn_id="turn-1",
        session_id=env["session"],
        interpreter_id=INTERPRETER,
        invocation_id=str(uuid.uuid4()),
        call_id="call-ghost",
        timeout_s=30,
        submitted_ms=int(time.time() * 1000),
    )
    env["store"].create(record)
    # When it is polled
    view = job_flow.poll_job(env["store"].get(record.job_id), env["deps"])
    # Then it ends failed (its result is lost), audited once, and its slot is free
    body = view.to_response()
    assert (view.status, body["ok"], body["error"]) == ("failed", False, "SandboxError")
    assert audit_rows(env, record.invocation_id)[0]["failure_reason"] == "job_session_ended"
    assert env["store"].turn_jobs("acme", "turn-1").running == 0


# --- dispatch call sites (job_actions) ------------------------------------------------------------
def _req(**kw: Any) -> Any:
    from types import SimpleNamespace

    base = {
        "tenant_id": "acme",
        "agent_id": "agent-1",
        "turn_id": "turn-1",
        "template_id": "analyst",
        "call_id": f"call-{uuid.uuid4().hex[:8]}",
        "user_id": None,
        "invocation_source": None,
        "code": "print('x')",
        "timeout_s": None,
        "job_id": None,
    }
    return SimpleNamespace(**{**base, **kw})


def test_job_actions_fourth_job_refused_as_invalid_request_nothing_written(env):
    from dispatch.jobs import actions as job_actions
    from sandbox_common.errors import SandboxInvalidRequest

    # Given three reserved jobs in the turn
    for _ in range(3):
        job_actions.reserve(
            _req(), env["deps"], invocation_id=str(uuid.uuid4()), environment="default-public"
        )
    # When a fourth is reserved
    with pytest.raises(SandboxInvalidRequest) as refused:
        job_actions.reserve(_req(), env["deps"], invocation_id="inv-4th", environment="default-public")
    # Then it is an invalid request and nothing of it was written
    assert "3 background jobs" in refused.value.message
    assert env["store"].turn_jobs("acme", "turn-1").running == 3
    assert all(r.invocation_id != "inv-4th" for r in env["store"].list_jobs(tenant_id="acme"))


def test_job_actions_launch_answers_running_then_get_job_final(env):
    from dispatch.jobs import actions as job_actions

    # Given a reserved job launched in the session
    req = _req(code="print('bg')", timeout_s=60)
    record = job_actions.reserve(req, env["deps"], invocation_id="inv-launch", environment="default-public")
    started = time.monotonic()
    answer = job_actions.launch(
        record, env["deps"], code=req.code, session_id=env["session"], interpreter_id=INTERPRETER
    )
    took = time.monotonic() - started
    # When the agent asks for it until it ended
    deadline = time.monotonic() + 20
    final = job_actions.get_job(_req(job_id=record.job_id), env["deps"])
    while final["status"] == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
        final = job_actions.get_job(_req(job_id=record.job_id), env["deps"])
    # Then submit answered at once with a job's shape, and the final answer is the result
    assert answer == {
        "ok": True,
        "status": "running",
        "job_id": record.job_id,
        "invocation_id": "inv-launch",
        "session_id": env["session"],
        "timeout_s": 60,
    }
    assert took < 2.0
    assert (final["status"], final["stdout"], final["invocation_id"]) == ("completed", "bg\n", "inv-launch")
    assert len(audit_rows(env, "inv-launch")) == 1


def test_job_actions_foreign_job_refused_like_unknown(env):
    from dispatch.jobs import actions as job_actions
    from sandbox_common.errors import SandboxInvalidRequest

    # Given acme's reserved job
    record = job_actions.reserve(_req(), env["deps"], invocation_id="inv-own", environment="default-public")
    # When another tenant, another turn and an unknown id ask
    answers = []
    for req in (
        _req(tenant_id="globex", job_id=record.job_id),
        _req(turn_id="turn-2", job_id=record.job_id),
        _req(job_id="job-unknown"),
    ):
        with pytest.raises(SandboxInvalidRequest) as refused:
            job_actions.get_job(req, env["deps"])
        answers.append(refused.value.to_response())
    # Then all three answers are identical
    assert len(answers) == 3
    assert answers[0] == answers[1] == answers[2]


def test_job_actions_pending_jobs_lists_running_ones(env):
    from dispatch.jobs import actions as job_actions

    # Given one running and one quickly finished job
    slow, quick = _req(code="import time\ntime.sleep(20)"), _req(code="print(1)")
    records = []
    for req in (slow, quick):
        record = job_actions.reserve(req, env["deps"], invocation_id=str(uuid.uuid4()), environment=None)
        job_actions.launch(
            record, env["deps"], code=req.code, session_id=env["session"], interpreter_id=INTERPRETER
        )
        records.append(record)
    wait_until_done_in_session(env["runner"], env["session"], records[1])
    # When end_turn asks for pending jobs
    from sandbox_runtime.job_end import pending_jobs

    pending = pending_jobs("acme", "turn-1", env["deps"])
    # Then only the running one is pending; the finished one was ended (and audited) on the way
    assert pending == [records[0].job_id]
    assert env["store"].get(records[1].job_id).state == "completed"
    job_actions.cancel(_req(job_id=records[0].job_id), env["deps"])


def test_job_actions_timeout_shortened_to_fit_the_session(env):
    from dispatch.jobs import actions as job_actions

    # Given a session with 100 s of life left and a job asking for 900 s
    req = _req(code="print(1)", timeout_s=900)
    record = job_actions.reserve(req, env["deps"], invocation_id="inv-short", environment=None)
    # When it is launched with a 30 s reserve
    answer = job_actions.launch(
        record,
        env["deps"],
        code=req.code,
        session_id=env["session"],
        interpreter_id=INTERPRETER,
        session_left_s=100,
        reserve_s=30,
    )
    # Then it runs with 70 s, says so, and its stored deadline moved accordingly
    stored = env["store"].get(record.job_id)
    assert answer["timeout_s"] == 70
    assert "900 s to 70 s" in answer["notice"]
    assert (stored.timeout_s, stored.deadline_ms) == (70, record.submitted_ms + 70_000)


def test_job_flow_reaper_goes_on_past_a_tenant_whose_runner_cannot_be_built(env):
    store: JobStore = env["store"]
    # Given an open job of a tenant whose runner cannot be built (no substrate), and a finished job
    ghost = JobRecord(
        job_id=f"job-{uuid.uuid4().hex[:12]}",
        tenant_id="ghost",
        agent_id="agent-1",
        turn_id="t-g",
        session_id="sess-ghost",
        interpreter_id="sbx_ghost",
        invocation_id=str(uuid.uuid4()),
        call_id="call-g",
        timeout_s=30,
        submitted_ms=int(time.time() * 1000) - 1000,
    )
    store.create(ghost)
    ok = submit(env, "print('y')")
    runner = env["runner"]
    wait_until_done_in_session(runner, env["session"], ok)

    def runner_for(tenant: str) -> SessionRunner:
        if tenant == "ghost":
            raise LookupError("no substrate published for this tenant")
        return runner

    deps = job_flow.JobDeps(
        store=store,
        runner_for=runner_for,
        audit_writer=env["deps"].audit_writer,
        retention_days=30,
        turn_closed=lambda t, u: False,
    )
    # When the reaper's sweep runs (the ghost's job comes first: earlier deadline)
    ended = job_flow.finish_due_jobs(deps)
    # Then the ghost's job is left open for a later run and the other one still ends, once
    assert [job.job_id for job in store.open_jobs()][:1] == [ghost.job_id]
    assert (ok.job_id, "completed") in ended
    assert ghost.job_id not in [job_id for job_id, _ in ended]
    assert len(audit_rows(env, ok.invocation_id)) == 1


def test_job_flow_reaper_takes_no_job_after_its_time_budget(env):
    # Given a finished job nobody observed
    done = submit(env, "print('later')")
    wait_until_done_in_session(env["runner"], env["session"], done)
    # When the sweep runs with its budget already spent, then it leaves the job for the next run
    assert job_flow.finish_due_jobs(env["deps"], until=time.time() - 1) == []
    assert audit_rows(env, done.invocation_id) == []
    # And a run with time left ends it
    assert job_flow.finish_due_jobs(env["deps"], until=time.time() + 60) == [(done.job_id, "completed")]
