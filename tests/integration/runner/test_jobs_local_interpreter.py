"""Background jobs through the runner against the local AgentCore Code Interpreter:
real wire protocol, real sandboxed session process, real supervisor and job processes inside it.
Short timeouts: the per-call deadline is 2 s, so a 3 s job outlives any single call."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from sandbox_runtime.runner import SessionGone, SessionRunner, credentials
from sandbox_runtime.runner.jobs import JobRunner, JobState

from tests.integration.interpreter._helpers import wait_until
from tests.support.runner import ACME_INTERPRETER, session_runner

INTERPRETER = ACME_INTERPRETER
GITHUB_TOKEN = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


@pytest.fixture(scope="module")
def server(acme_interpreter: object) -> object:
    return acme_interpreter


@pytest.fixture
def runner(server, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[SessionRunner]:
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", server.endpoint)
    credentials.clear_cache()
    yield session_runner(call_timeout_seconds=2, stdout_cap_bytes=1024, stderr_cap_bytes=512)
    credentials.clear_cache()


@pytest.fixture
def session(runner: SessionRunner) -> Iterator[str]:
    session_id = runner.start_session(INTERPRETER, name="jobs")
    yield session_id
    runner.stop_session(INTERPRETER, session_id)


def wait_final(jobs: JobRunner, session_id: str, job_id: str, limit: float = 20.0) -> tuple[JobState, int]:
    """Poll until the job is final; returns the final state and how many polls saw it running."""
    running_polls = 0
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        state = jobs.job_status(INTERPRETER, session_id, job_id)
        if state.final:
            return state, running_polls
        running_polls += 1
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not end within {limit} s")


def wait_printed(jobs: JobRunner, session_id: str, job_id: str, text: str, limit: float = 30.0) -> None:
    """Until the running job's stdout so far is `text`."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        state = jobs.job_status(INTERPRETER, session_id, job_id)
        if state.progress is not None and state.progress.stdout_tail == text:
            return
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not print {text!r}")


def session_pids(server, session_id: str) -> set[int]:
    """Host pids of every process in the session's process tree (worker, supervisor, job)."""
    from sandbox_session.jobs import descendants

    proc = server.session(session_id).proc
    return {proc.pid, *descendants(proc.pid)}


def test_job_outlives_the_call_deadline_and_returns_its_stdout(runner, session):
    # Given a job that sleeps past the 2 s per-call deadline
    jobs = JobRunner(runner)
    submitted = jobs.submit_job(
        INTERPRETER,
        session,
        job_id="job-long",
        timeout_s=30,
        code="import time\nprint('start', flush=True)\ntime.sleep(3)\nprint('done')",
    )
    # When it is polled until it ends
    first = jobs.job_status(INTERPRETER, session, "job-long")
    final, running_polls = wait_final(jobs, session, "job-long")
    # Then it answered at once, ran past the deadline and completed with its whole stdout
    assert submitted.duration_ms < 2000
    assert first.state == "running"
    assert running_polls >= 1
    assert final.state == "completed"
    assert final.result is not None
    assert (final.result.exit_status, final.result.exit_code) == ("ok", 0)
    assert final.result.stdout == "start\ndone\n"
    assert final.result.stdout_bytes == len("start\ndone\n")
    assert final.elapsed_ms >= 3000


def test_job_status_while_running_reports_elapsed_time(runner, session):
    # Given a running job
    jobs = JobRunner(runner)
    jobs.submit_job(
        INTERPRETER, session, job_id="job-elapsed", code="import time\ntime.sleep(60)", timeout_s=120
    )
    # When it is polled twice
    first = jobs.job_status(INTERPRETER, session, "job-elapsed")
    time.sleep(0.4)
    second = jobs.job_status(INTERPRETER, session, "job-elapsed")
    # Then both say running, with an elapsed time that grows
    assert (first.state, second.state) == ("running", "running")
    assert first.result is None
    assert 0 <= first.elapsed_ms < second.elapsed_ms
    jobs.cancel_job(INTERPRETER, session, "job-elapsed")


def test_job_timeout_enforced_inside_the_session(runner, session, server):
    # Given a job with a 1 s timeout that would run for a minute, and nobody polling it
    jobs = JobRunner(runner)
    before = session_pids(server, session)
    jobs.submit_job(
        INTERPRETER, session, job_id="job-timeout", code="import time\ntime.sleep(60)", timeout_s=1
    )
    deadline = time.monotonic() + 30
    while len(during := session_pids(server, session)) < len(before) + 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    # When it is observed after its end
    final, _ = wait_final(jobs, session, "job-timeout")
    # Then the in-session supervisor ended it as timed_out after its second, long before its minute,
    # and only the worker is left
    assert final.state == "timed_out"
    assert final.result is not None
    assert (final.result.exit_status, final.result.error) == ("timeout", "SandboxTimeout")
    assert 1000 <= final.elapsed_ms < 60_000
    assert len(during) >= len(before) + 2  # supervisor and job were running
    wait_until(lambda: session_pids(server, session) == before, timeout=30)
    assert session_pids(server, session) == before  # and nothing of the job is left


def test_job_cancel_ends_it_and_its_processes_are_gone(runner, session, server):
    # Given a running job (it has printed) that started a grandchild process and runs for a minute
    jobs = JobRunner(runner)
    code = (
        "import subprocess, time\nsubprocess.Popen(['sleep', '120'])\nprint('spawned',"
        " flush=True)\ntime.sleep(60)"
    )
    jobs.submit_job(INTERPRETER, session, job_id="job-cancel", code=code, timeout_s=600)
    wait_printed(jobs, session, "job-cancel", "spawned\n")
    during = session_pids(server, session)
    # When it is cancelled
    final = jobs.cancel_job(INTERPRETER, session, "job-cancel")
    # Then it ended cancelled (long before its minute), its stdout kept, its whole process tree gone
    assert final.state == "cancelled"
    assert final.result is not None
    assert (final.result.error, final.result.failure_reason) == ("SandboxError", "job_cancelled")
    assert final.result.stdout == "spawned\n"
    after = session_pids(server, session)
    assert len(during) >= len(after) + 3  # supervisor, job, sleep were alive, now gone
    assert all(not os.path.exists(f"/proc/{pid}") or pid in after for pid in during)


def test_job_output_is_redacted_truncated_and_counted_exactly(runner, session):
    # Given a job that prints a token and far more than the 1 KiB stdout cap, and fails
    jobs = JobRunner(runner)
    code = f"print('{GITHUB_TOKEN}')\nprint('x' * 5000)\nraise ValueError('bad')"
    jobs.submit_job(INTERPRETER, session, job_id="job-big", code=code, timeout_s=30)
    # When it ends
    final, _ = wait_final(jobs, session, "job-big")
    # Then the job failed like a foreground call would, output redacted, cut, counted exactly
    result = final.result
    assert final.state == "failed"
    assert result is not None
    assert (result.exit_status, result.exit_code, result.error) == ("error", 1, "SandboxError")
    assert GITHUB_TOKEN not in result.stdout
    assert result.stdout.startswith("<redacted>\n")
    assert result.stdout_truncated is True
    assert result.stdout_bytes == len("<redacted>\n") + 5001
    assert len(result.stdout.encode()) == 1024
    assert result.stderr.rstrip().endswith("ValueError: bad")


def test_job_memory_error_is_oom(runner, session):
    # Given a job that dies of MemoryError
    jobs = JobRunner(runner)
    jobs.submit_job(INTERPRETER, session, job_id="job-oom", code="raise MemoryError()", timeout_s=30)
    # When it ends
    final, _ = wait_final(jobs, session, "job-oom")
    # Then it is classified as oom
    assert final.state == "failed"
    assert final.result is not None
    assert (final.result.exit_status, final.result.error, final.result.exit_code) == (
        "oom",
        "SandboxOOM",
        137,
    )


def test_job_resubmitted_with_same_id_is_not_started_twice(runner, session):
    # Given a submitted job that appends to a file
    jobs = JobRunner(runner)
    code = "with open('runs.txt', 'a') as fh:\n    fh.write('run\\n')"
    first = jobs.submit_job(INTERPRETER, session, job_id="job-once", code=code, timeout_s=30)
    # When the same submit is retried
    second = jobs.submit_job(INTERPRETER, session, job_id="job-once", code=code, timeout_s=30)
    wait_final(jobs, session, "job-once")
    runs = runner.execute(INTERPRETER, session, "print(open('runs.txt').read().count('run'))")
    # Then the second submit found the job and the code ran once
    assert (first.already_existed, second.already_existed) == (False, True)
    assert runs.stdout == "1\n"


def test_job_status_after_session_stopped_is_session_gone(runner, session):
    # Given a running job whose session is stopped
    jobs = JobRunner(runner)
    jobs.submit_job(INTERPRETER, session, job_id="job-gone", code="import time\ntime.sleep(30)", timeout_s=60)
    runner.stop_session(INTERPRETER, session)
    # When it is polled, then the runner says the session is gone (the job's state died with it)
    with pytest.raises(SessionGone):
        jobs.job_status(INTERPRETER, session, "job-gone")


def test_job_kernel_stays_usable_while_a_job_runs(runner, session):
    # Given a running job
    jobs = JobRunner(runner)
    jobs.submit_job(INTERPRETER, session, job_id="job-bg", code="import time\ntime.sleep(4)", timeout_s=30)
    # When foreground code runs meanwhile
    started = time.monotonic()
    result = runner.execute(INTERPRETER, session, "print(6 * 7)")
    # Then it is answered at once
    assert (result.exit_status, result.stdout) == ("ok", "42\n")
    assert time.monotonic() - started < 1.5
    jobs.cancel_job(INTERPRETER, session, "job-bg")


def test_job_runs_inside_the_sessions_isolation(runner, session):
    # Given a probe of the process's view of the host (uid, hostname, visible root directories)
    probe = "import os, socket\nprint(os.getuid(), socket.gethostname(), sorted(os.listdir('/')))"
    foreground = runner.execute(INTERPRETER, session, probe)
    # When the same probe runs as a background job
    jobs = JobRunner(runner)
    jobs.submit_job(INTERPRETER, session, job_id="job-probe", code=probe, timeout_s=30)
    final, _ = wait_final(jobs, session, "job-probe")
    # Then the job sees exactly what the session's kernel sees: same user, namespaces, filesystem
    assert foreground.exit_status == "ok"
    assert final.result is not None
    assert final.result.stdout == foreground.stdout


def test_job_cancelled_right_after_submit_ends_it_and_leaves_nothing(runner, session, server):
    # Given a job cancelled immediately after its submit returned (its supervisor still starting)
    jobs = JobRunner(runner)
    before = session_pids(server, session)
    jobs.submit_job(
        INTERPRETER, session, job_id="job-early", code="import time\ntime.sleep(60)", timeout_s=600
    )
    final = jobs.cancel_job(INTERPRETER, session, "job-early")
    # Then it ended cancelled (long before its minute) and nothing of it is left
    assert final.state == "cancelled"
    wait_until(lambda: session_pids(server, session) == before, timeout=30)
    assert session_pids(server, session) == before
