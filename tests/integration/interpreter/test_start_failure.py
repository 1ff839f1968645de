"""A session whose process fails to start is reported with what it left: its log's tail and exit
status, read before the session's directory (which holds the log) is deleted. A start that failed
the way a busy kernel fails a network namespace's set-up is made again; any other is final."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from infra.local.interpreter import LocalInterpreterServer, worker_command, worker_process
from infra.local.interpreter.session import Session
from infra.local.interpreter.worker_command import WorkerCommand
from infra.local.interpreter.worker_process import WorkerFailure


def _failed_session(root: Path) -> Session:
    root.mkdir()
    with open(root / "worker.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; print('bwrap: loop device busy'); sys.exit(3)"],
            stdout=log,
            stderr=log,
        )
    proc.wait()
    return Session(
        session_id=str(uuid.uuid4()),
        interpreter_id="sbx_local_acme_pub",
        network_mode="PUBLIC",
        name=None,
        timeout_seconds=60,
        created_at=datetime.now(UTC),
        expires_at=0.0,
        root=str(root),
        proc=proc,
    )


def test_start_failure_names_the_log_and_exit_status_before_the_session_is_cleaned_up(
    tmp_path: Path,
) -> None:
    # Given a session whose process wrote a line and exited before its hello
    session = _failed_session(tmp_path / "session")
    # When the start failure is read and the session is then killed and cleaned up
    detail = worker_process.start_failure(session)
    worker_process.kill(session)
    # Then the report carries the process's last words and its status, though the log is gone now
    assert detail == "bwrap: loop device busy (exit status 3)"
    assert not Path(session.root).exists()
    assert worker_process.worker_log(session) == "no output"


def _failing_first(real: Callable[..., WorkerCommand], failures: list[str]) -> Callable[..., WorkerCommand]:
    """build_command whose first len(failures) sessions exit at once, printing the next failure."""

    def build(**kwargs: object) -> WorkerCommand:
        command = real(**kwargs)
        if not failures:
            return command
        line = failures.pop(0)
        return replace(command, argv=["/bin/sh", "-c", f"echo '{line}' >&2; exit 1"])

    return build


def test_start_of_a_session_is_made_again_after_a_transient_namespace_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a sandbox whose network namespace set-up fails twice the way a busy kernel makes it
    transient = "bwrap: loopback: Failed RTM_NEWADDR: No child processes"
    failures = [transient, transient]
    monkeypatch.setattr(
        worker_command, "build_command", _failing_first(worker_command.build_command, failures)
    )
    server = LocalInterpreterServer(interpreters={"sbx_retry_pub": "PUBLIC"}).start()
    try:
        # When a session is started
        session = server.manager.start("sbx_retry_pub", name=None, timeout_seconds=60, client_token=None)
        # Then the third try started it, and only it is live
        assert failures == []
        assert [s.session_id for s in server.manager.list("sbx_retry_pub", status="READY")] == [
            session.session_id
        ]
    finally:
        server.stop()


def test_start_of_a_session_fails_at_once_on_any_other_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a sandbox that fails to start for another reason, then would start
    failures = ["bwrap: Creating new namespace failed: Operation not permitted", "unused"]
    monkeypatch.setattr(
        worker_command, "build_command", _failing_first(worker_command.build_command, failures)
    )
    server = LocalInterpreterServer(interpreters={"sbx_retry_pub": "PUBLIC"}).start()
    try:
        # When a session is started / Then the start fails with that reason, without a second try
        with pytest.raises(WorkerFailure, match="Operation not permitted"):
            server.manager.start("sbx_retry_pub", name=None, timeout_seconds=60, client_token=None)
        assert failures == ["unused"]
        assert server.manager.list("sbx_retry_pub", status="READY") == []
    finally:
        server.stop()
