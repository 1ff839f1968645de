"""Sandboxing, limits and the session lifecycle of the local Code Interpreter, seen from boto3 and /proc."""

from __future__ import annotations

import shutil
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from infra.local.interpreter import Limits, LocalInterpreterServer
from tests.integration.interpreter._helpers import (
    PUBLIC_CI,
    SANDBOX_CI,
    invoke,
    make_client,
    session_pids,
    wait_until,
)

STRATEGIES = [s for s in ("bwrap", "unshare") if shutil.which(s)]


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP port on the host's 127.0.0.1 that accepts connections."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield sock.getsockname()[1]
    stop.set()
    thread.join()
    sock.close()


def _connect_code(port: int) -> str:
    return (
        "import socket\n"
        "s = socket.socket(); s.settimeout(3)\n"
        "try:\n"
        f"    s.connect(('127.0.0.1', {port})); print('connected')\n"
        "except OSError as e:\n"
        "    print('blocked', type(e).__name__)\n"
    )


def _start(client: Any, interpreter: str, **kwargs: Any) -> str:
    return client.start_code_interpreter_session(codeInterpreterIdentifier=interpreter, **kwargs)["sessionId"]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_sandbox_mode_has_no_network_public_mode_has(strategy: str, listener: int) -> None:
    # Given a server isolating with `strategy` (bwrap, and the unshare fallback used without it)
    with LocalInterpreterServer(interpreters={PUBLIC_CI: "PUBLIC", SANDBOX_CI: "SANDBOX"}, isolation=strategy) as srv:
        client = make_client(srv.endpoint)
        sandboxed, public = _start(client, SANDBOX_CI), _start(client, PUBLIC_CI)

        # When both connect to a port listening on the host's loopback
        blocked = invoke(client, SANDBOX_CI, sandboxed, _connect_code(listener))[0]
        allowed = invoke(client, PUBLIC_CI, public, _connect_code(listener))[0]

    # Then only the PUBLIC session gets through
    assert blocked["stdout"].startswith("blocked"), blocked
    assert allowed["stdout"] == "connected\n", allowed


def test_none_isolation_refuses_sandbox_network_mode() -> None:
    # Given a server without any namespace isolation
    with LocalInterpreterServer(interpreters={SANDBOX_CI: "SANDBOX", PUBLIC_CI: "PUBLIC"}, isolation="none") as srv:
        client = make_client(srv.endpoint)

        # When a SANDBOX session is requested
        with pytest.raises(ClientError) as exc:
            _start(client, SANDBOX_CI)
        public_ok = invoke(client, PUBLIC_CI, _start(client, PUBLIC_CI), "print('ok')")[0]["stdout"]

    # Then it fails closed instead of running with a network it promised not to have
    assert exc.value.response["Error"]["Code"] == "InternalServerException"
    assert public_ok == "ok\n"


@pytest.mark.skipif(not shutil.which("bwrap"), reason="filesystem isolation needs bwrap")
def test_bwrap_session_sees_private_tmp_readonly_system_and_no_host_secrets(tmp_path: Any) -> None:
    # Given a file in the host's /tmp and two sessions
    marker = tmp_path / "host-marker"
    marker.write_text("host")
    with LocalInterpreterServer(interpreters={PUBLIC_CI: "PUBLIC"}, isolation="bwrap") as srv:
        client = make_client(srv.endpoint)
        one, two = _start(client, PUBLIC_CI), _start(client, PUBLIC_CI)

        # When the sessions look around
        probe = (
            "import os\n"
            f"print(os.path.exists({str(marker)!r}), os.path.exists('/work/main'), os.path.exists('/root/.aws'))\n"
            "open('/tmp/mine', 'w').write('1')\n"
            "try:\n    open('/usr/pwned', 'w')\nexcept OSError as e:\n    print('ro', e.errno)\n"
            "print(sorted(k for k in os.environ if k.startswith('AWS')), os.getuid() != 0)\n"
        )
        seen = invoke(client, PUBLIC_CI, one, probe)[0]
        other = invoke(client, PUBLIC_CI, two, "import os; print(os.path.exists('/tmp/mine'))")[0]

    # Then nothing of the host leaks in, /tmp is per session, the system is read-only, not root
    lines = seen["stdout"].splitlines()
    assert lines[0] == "False False False", seen
    assert lines[1] in ("ro 30", "ro 13"), seen  # EROFS, or EACCES
    assert lines[2] == "[] True", seen
    assert other["stdout"] == "False\n"


def test_worker_environment_never_carries_server_credentials() -> None:
    # Given a server process that has AWS credentials in its environment (conftest sets them)
    with LocalInterpreterServer(interpreters={PUBLIC_CI: "PUBLIC"}) as srv:
        client = make_client(srv.endpoint)

        # When code lists its environment
        result = invoke(client, PUBLIC_CI, _start(client, PUBLIC_CI), "import os; print(sorted(os.environ))")[0]

    # Then no AWS variable is there
    assert "AWS_" not in result["stdout"], result["stdout"]


def test_memory_bomb_exits_137_and_server_keeps_serving() -> None:
    # Given a server with a small memory limit and two sessions
    with LocalInterpreterServer(interpreters={PUBLIC_CI: "PUBLIC"}, limits=Limits(memory_mb=256)) as srv:
        client = make_client(srv.endpoint)
        bomb, other = _start(client, PUBLIC_CI), _start(client, PUBLIC_CI)
        invoke(client, PUBLIC_CI, other, "kept = 1")

        # When one session allocates without bound
        result, events, _ = invoke(client, PUBLIC_CI, bomb, "hog = []\nwhile True:\n    hog.append(bytearray(8 << 20))")

        # Then the call ends as an OOM (137), the session is gone, and the other one is untouched
        assert result["exitCode"] == 137
        assert "MemoryError" in result["stderr"]
        assert events[-1]["isError"] is True
        assert client.get_code_interpreter_session(codeInterpreterIdentifier=PUBLIC_CI, sessionId=bomb)["status"] == "TERMINATED"
        assert wait_until(lambda: not session_pids(bomb))
        assert invoke(client, PUBLIC_CI, other, "print(kept)")[0]["stdout"] == "1\n"
        assert invoke(client, PUBLIC_CI, _start(client, PUBLIC_CI), "print('fresh')")[0]["stdout"] == "fresh\n"


def test_worker_killed_by_signal_reports_128_plus_signal_and_terminates() -> None:
    # Given a session
    with LocalInterpreterServer(interpreters={PUBLIC_CI: "PUBLIC"}) as srv:
        client = make_client(srv.endpoint)
        session_id = _start(client, PUBLIC_CI)

        # When its process is SIGKILLed mid-call (what the kernel OOM killer does)
        result, _, _ = invoke(client, PUBLIC_CI, session_id, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")

        # Then exit 137 and the session is over
        assert result["exitCode"] == 137
        with pytest.raises(client.exceptions.ResourceNotFoundException):
            invoke(client, PUBLIC_CI, session_id, "print(1)")


def test_cpu_limit_kills_a_spinning_session() -> None:
    # Given a server with a 1 CPU-second limit
    with LocalInterpreterServer(interpreters={PUBLIC_CI: "PUBLIC"}, limits=Limits(cpu_seconds=1)) as srv:
        client = make_client(srv.endpoint)
        session_id = _start(client, PUBLIC_CI)

        # When code spins forever
        result, _, _ = invoke(client, PUBLIC_CI, session_id, "while True:\n    pass")

    # Then RLIMIT_CPU ends it: SIGXCPU (128 + 24)
    assert result["exitCode"] == 152


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_stop_kills_the_worker_process(strategy: str) -> None:
    # Given a running session, with a background child, whose processes are visible on the host
    with LocalInterpreterServer(interpreters={PUBLIC_CI: "PUBLIC"}, isolation=strategy) as srv:
        client = make_client(srv.endpoint)
        session_id = _start(client, PUBLIC_CI)
        invoke(client, PUBLIC_CI, session_id, "import subprocess; child = subprocess.Popen(['sleep', '300'])")
        assert session_pids(session_id)

        # When it is stopped
        client.stop_code_interpreter_session(codeInterpreterIdentifier=PUBLIC_CI, sessionId=session_id)

        # Then no process of it is left
        assert wait_until(lambda: not session_pids(session_id)), session_pids(session_id)


def test_session_past_its_timeout_is_reaped() -> None:
    # Given a session with a 1-second time-to-live
    with LocalInterpreterServer(interpreters={PUBLIC_CI: "PUBLIC"}, reap_interval=0.05) as srv:
        client = make_client(srv.endpoint)
        session_id = _start(client, PUBLIC_CI, sessionTimeoutSeconds=1)
        assert invoke(client, PUBLIC_CI, session_id, "print('before')")[0]["stdout"] == "before\n"

        # When the time passes
        def terminated() -> bool:
            got = client.get_code_interpreter_session(codeInterpreterIdentifier=PUBLIC_CI, sessionId=session_id)
            return bool(got["status"] == "TERMINATED")

        # Then Get says TERMINATED, Invoke says not found, and its processes are gone
        assert wait_until(terminated, timeout=5)
        with pytest.raises(client.exceptions.ResourceNotFoundException):
            invoke(client, PUBLIC_CI, session_id, "print('after')")
        assert wait_until(lambda: not session_pids(session_id))


def test_timeout_ends_a_running_call() -> None:
    # Given a session with a 1-second time-to-live
    with LocalInterpreterServer(interpreters={PUBLIC_CI: "PUBLIC"}, reap_interval=0.05) as srv:
        client = make_client(srv.endpoint)
        session_id = _start(client, PUBLIC_CI, sessionTimeoutSeconds=1)

        # When a call is still running at expiry
        with pytest.raises(client.exceptions.ResourceNotFoundException):
            invoke(client, PUBLIC_CI, session_id, "import time; time.sleep(30)")

        # Then the call ends with the session (not after 30 s) and nothing is left running
        assert wait_until(lambda: not session_pids(session_id))


def test_server_stop_leaves_no_worker_behind() -> None:
    # Given a server with several live sessions
    srv = LocalInterpreterServer(interpreters={PUBLIC_CI: "PUBLIC"}).start()
    client = make_client(srv.endpoint)
    sessions = [_start(client, PUBLIC_CI) for _ in range(3)]
    assert all(session_pids(s) for s in sessions)

    # When the server stops
    srv.stop()

    # Then every session's processes are gone
    assert wait_until(lambda: not any(session_pids(s) for s in sessions))


def test_max_sessions_is_a_service_quota() -> None:
    # Given a server allowing one active session
    with LocalInterpreterServer(interpreters={PUBLIC_CI: "PUBLIC"}, max_sessions=1) as srv:
        client = make_client(srv.endpoint)
        first = _start(client, PUBLIC_CI)

        # When a second is requested, then again after the first is stopped
        with pytest.raises(ClientError) as exc:
            _start(client, PUBLIC_CI)
        client.stop_code_interpreter_session(codeInterpreterIdentifier=PUBLIC_CI, sessionId=first)
        second = _start(client, PUBLIC_CI)

    # Then the first refusal is ServiceQuotaExceededException (402), and the slot frees on Stop
    assert (exc.value.response["Error"]["Code"], exc.value.response["ResponseMetadata"]["HTTPStatusCode"]) == (
        "ServiceQuotaExceededException", 402)
    assert second != first
