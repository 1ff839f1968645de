"""A session whose process fails to start is reported with what it left: its log's tail and exit
status, read before the session's directory (which holds the log) is deleted."""

from __future__ import annotations

import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

from infra.local.interpreter.sessions import Session, SessionManager


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
    manager = object.__new__(SessionManager)  # only the failure report and the clean-up are used
    session = _failed_session(tmp_path / "session")
    # When the start failure is read and the session is then killed and cleaned up
    detail = manager._start_failure(session)
    manager._kill(session)
    # Then the report carries the process's last words and its status, though the log is gone now
    assert detail == "bwrap: loop device busy (exit status 3)"
    assert not Path(session.root).exists()
    assert manager._worker_log(session) == "no output"
