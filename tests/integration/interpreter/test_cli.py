"""`python -m infra.local.interpreter`: the process the local stack starts in the background."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infra.local.interpreter import LocalInterpreterServer, wait_ready
from tests.conftest import free_port
from tests.integration.interpreter._helpers import (
    PUBLIC_CI,
    SANDBOX_CI,
    invoke,
    make_client,
    session_pids,
    wait_until,
)

REPO = Path(__file__).resolve().parents[3]


def test_cli_serves_registry_interpreters_and_cleans_up_on_sigterm(tmp_path: Path) -> None:
    # Given a registry file and a port
    registry = tmp_path / "interpreters.json"
    registry.write_text(json.dumps({PUBLIC_CI: "PUBLIC"}))
    port = free_port()

    # When the server runs as its own process
    proc = subprocess.Popen(
        [sys.executable, "-m", "infra.local.interpreter", "--port", str(port), "--registry", str(registry)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
        wait_ready(ready["endpoint"], timeout=5)
        client = make_client(ready["endpoint"])
        session_id = client.start_code_interpreter_session(codeInterpreterIdentifier=PUBLIC_CI)["sessionId"]
        result = invoke(client, PUBLIC_CI, session_id, "print(2 + 2)")[0]

        # And an interpreter is added to the registry while it runs
        time.sleep(0.01)
        registry.write_text(json.dumps({PUBLIC_CI: "PUBLIC", SANDBOX_CI: "SANDBOX"}))
        os.utime(registry, (time.time() + 1, time.time() + 1))  # mtime granularity
        added = client.start_code_interpreter_session(codeInterpreterIdentifier=SANDBOX_CI)["sessionId"]
        assert session_pids(session_id) and session_pids(added)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=20)

    # Then it announced its endpoint as one JSON line, served both, and exited cleanly with no orphans
    assert ready["endpoint"] == f"http://127.0.0.1:{port}"
    assert result["stdout"] == "4\n"
    assert code == 0, proc.stderr.read()  # type: ignore[union-attr]
    assert wait_until(lambda: not session_pids(session_id) and not session_pids(added))


def test_cli_bad_interpreter_argument_is_usage_error() -> None:
    # Given / When an --interpreter without a mode
    proc = subprocess.run(
        [sys.executable, "-m", "infra.local.interpreter", "--interpreter", "abc"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )

    # Then argparse's usage error (exit 2)
    assert proc.returncode == 2
    assert "ID=MODE" in proc.stderr


@pytest.mark.parametrize("mode", ["PRIVATE", ""])
def test_cli_unknown_network_mode_fails_with_reason(mode: str) -> None:
    # Given / When an interpreter with a network mode AgentCore does not have
    proc = subprocess.run(
        [sys.executable, "-m", "infra.local.interpreter", "--interpreter", f"ci={mode}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )

    # Then exit 1 with a one-line reason
    assert proc.returncode == 1
    assert "network_mode" in proc.stderr


def test_registry_bad_change_keeps_last_good_registry(tmp_path: Path) -> None:
    # Given a server reading a registry file
    registry = tmp_path / "interpreters.json"
    registry.write_text(json.dumps({PUBLIC_CI: "PUBLIC"}))
    with LocalInterpreterServer(registry_file=str(registry)) as srv:
        client = make_client(srv.endpoint)

        # When the file is replaced by something half-written
        registry.write_text('{"sbx_half": ')
        os.utime(registry, (time.time() + 1, time.time() + 1))
        session_id = client.start_code_interpreter_session(codeInterpreterIdentifier=PUBLIC_CI)["sessionId"]

        # Then the previous interpreters still serve
        assert invoke(client, PUBLIC_CI, session_id, "print('ok')")[0]["stdout"] == "ok\n"


def test_registry_bad_file_fails_at_start(tmp_path: Path) -> None:
    # Given a registry with a network mode AgentCore does not have
    registry = tmp_path / "interpreters.json"
    registry.write_text(json.dumps({PUBLIC_CI: "OPEN"}))

    # When / Then the server refuses to start with it
    with pytest.raises(ValueError, match="network mode"):
        LocalInterpreterServer(registry_file=str(registry))
