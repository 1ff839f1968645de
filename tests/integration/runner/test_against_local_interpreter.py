"""The runner against the project's local AgentCore Code Interpreter (real wire protocol, real
persistent sandboxed Python per session) and moto's STS: nothing of the runner's path is faked."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sandbox_runtime.runner import SessionGone, SessionRunner, credentials

from tests.support.runner import ACME_INTERPRETER, session_runner

INTERPRETER = ACME_INTERPRETER
GITHUB_TOKEN = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"


@pytest.fixture(scope="module")
def interpreter_endpoint(acme_interpreter: Any) -> str:
    return str(acme_interpreter.endpoint)


@pytest.fixture
def runner(
    interpreter_endpoint: str, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[SessionRunner]:
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", interpreter_endpoint)
    credentials.clear_cache()
    yield session_runner(call_timeout_seconds=2)
    credentials.clear_cache()


def test_local_interpreter_turn_keeps_state_and_redacts_bypassed_output(runner):
    # Given a session whose readiness preamble really ran in the sandbox
    session_id = runner.start_session(INTERPRETER, name="turn-1")
    try:
        # When two calls share state, one writes tokens past sys.stdout, one fails
        first = runner.execute(INTERPRETER, session_id, "x = 21")
        second = runner.execute(INTERPRETER, session_id, "print(x * 2)")
        bypass = runner.execute(
            INTERPRETER, session_id, f"import os\nos.write(1, b'{AWS_KEY}\\n')\nprint('{GITHUB_TOKEN}')"
        )
        failing = runner.execute(INTERPRETER, session_id, "raise ValueError('bad')")
    finally:
        stopped = runner.stop_session(INTERPRETER, session_id)
    # Then
    assert (first.exit_status, second.exit_status, second.stdout) == ("ok", "ok", "42\n")
    assert bypass.exit_status == "ok"
    assert AWS_KEY not in bypass.stdout and GITHUB_TOKEN not in bypass.stdout
    assert bypass.stdout.count("<redacted>") == 2
    assert (failing.exit_status, failing.exit_code) == ("error", 1)
    assert failing.stderr.rstrip().endswith("ValueError: bad")
    assert stopped is True


def test_local_interpreter_timeout_keeps_output_and_session(runner):
    # Given a running session holding a variable
    session_id = runner.start_session(INTERPRETER)
    try:
        assert runner.execute(INTERPRETER, session_id, "x = 21").exit_status == "ok"
        # When code prints, leaks a token, then sleeps past the 2 s deadline
        result = runner.execute(
            INTERPRETER,
            session_id,
            f'print("before"); print("{GITHUB_TOKEN}"); import sys; print("err", file=sys.stderr)\n'
            "import time; time.sleep(600)",
        )
        # Then the session stopped it at its inner deadline (1 s) and the output so far is kept,
        # redacted and counted
        assert (result.exit_status, result.error, result.exit_code) == ("timeout", "SandboxTimeout", None)
        assert result.stdout == "before\n<redacted>\n" and result.stderr == "err\n"
        assert result.stdout_bytes == len("before\n<redacted>\n")
        assert result.failure_reason == "deadline_exceeded:2s:stopped_in_session"
        assert "still there" in (result.error_message or "")
        # And the session was kept: a later call reads the variable set before the timeout
        assert result.session_stopped is False
        after = runner.execute(INTERPRETER, session_id, "print(x * 2)")
        assert (after.exit_status, after.stdout) == ("ok", "42\n")
    finally:
        runner.stop_session(INTERPRETER, session_id)


def test_local_interpreter_timeout_the_session_cannot_stop_stops_session_then_session_gone(runner):
    # Given a running session
    session_id = runner.start_session(INTERPRETER)
    # When code blocks the signal of the inner deadline, then outlives the 2 s deadline
    result = runner.execute(
        INTERPRETER,
        session_id,
        "import signal, time\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})\ntime.sleep(30)",
    )
    # Then the runner's own deadline ended it and stopped the session: the next invoke is refused as gone
    assert (result.exit_status, result.session_stopped) == ("timeout", True)
    assert result.failure_reason == "deadline_exceeded:2s"
    assert 2000 <= result.duration_ms < 4000
    with pytest.raises(SessionGone):
        runner.execute(INTERPRETER, session_id, "print(1)")
