"""Sandboxing, limits and the session lifecycle of the local Code Interpreter, seen from boto3 and /proc."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from sandbox_common import naming

from infra.local.interpreter import Limits, LocalInterpreterServer, network
from infra.local.interpreter.uids import UID_BASE, UID_COUNT, NoFreeUid, UidAllocator, uids_with_processes
from tests.integration.interpreter._helpers import (
    PUBLIC_CI,
    SANDBOX_CI,
    invoke,
    make_client,
    session_pids,
    wait_until,
)

STRATEGIES = ["bwrap"]  # the only isolating strategy; without it sessions are refused (test below)


def _connect_code(targets: list[tuple[str, int]]) -> str:
    """Code printing one line per target: `connected` or `blocked <error>`."""
    return (
        "import socket\n"
        f"for host, port in {targets!r}:\n"
        "    s = socket.socket(); s.settimeout(3)\n"
        "    try:\n"
        "        s.connect((host, port)); print('connected')\n"
        "    except OSError as e:\n"
        "        print('blocked', type(e).__name__)\n"
        "    finally:\n"
        "        s.close()\n"
    )


def _start(client: Any, interpreter: str, **kwargs: Any) -> str:
    return client.start_code_interpreter_session(codeInterpreterIdentifier=interpreter, **kwargs)["sessionId"]


def test_sandbox_has_no_network_public_reaches_only_other_machines(
    listener: int, outside: tuple[str, int, str]
) -> None:
    # Given a listener on every host address, another "machine" (a namespace of ours) with a
    # link-local address, and the host's own non-loopback addresses
    other_ip, other_port, link_local = outside
    host_targets = [("127.0.0.1", listener), ("10.0.2.2", listener), (link_local, other_port)]
    host_targets += [(a, listener) for a in network.host_ipv4_addresses()]
    with LocalInterpreterServer(interpreters={PUBLIC_CI: "PUBLIC", SANDBOX_CI: "SANDBOX"}) as srv:
        client = make_client(srv.endpoint)
        sandboxed, public = _start(client, SANDBOX_CI), _start(client, PUBLIC_CI)

        # When both sessions connect to each of them
        targets = [*host_targets, (other_ip, other_port)]
        sandbox_seen = invoke(client, SANDBOX_CI, sandboxed, _connect_code(targets))[0]
        public_seen = invoke(client, PUBLIC_CI, public, _connect_code(targets))[0]

    # Then the SANDBOX session reaches nothing, and the PUBLIC one only the other machine
    sandbox_lines, public_lines = sandbox_seen["stdout"].splitlines(), public_seen["stdout"].splitlines()
    assert len(host_targets) >= 4  # loopback, slirp's host alias, link-local, at least one host address
    assert len(sandbox_lines) == len(public_lines) == len(host_targets) + 1, (sandbox_seen, public_seen)
    assert all(line.startswith("blocked") for line in sandbox_lines), sandbox_lines
    assert all(line.startswith("blocked") for line in public_lines[:-1]), list(
        zip(host_targets, public_lines, strict=False)
    )
    assert public_lines[-1] == "connected", public_seen


def test_without_bwrap_every_session_is_refused_and_nothing_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given no bwrap on PATH and no escape hatch
    monkeypatch.delenv(naming.ENV_LOCAL_UNISOLATED, raising=False)
    with monkeypatch.context() as env:
        env.setenv("PATH", "/nonexistent")
        srv = LocalInterpreterServer(interpreters={PUBLIC_CI: "PUBLIC", SANDBOX_CI: "SANDBOX"})
    with srv:
        client = make_client(srv.endpoint)
        refusals = []
        # When a session of each network mode is requested
        for interpreter in (PUBLIC_CI, SANDBOX_CI):
            with pytest.raises(ClientError) as exc:
                _start(client, interpreter)
            refusals.append(exc.value.response)
        listed = client.list_code_interpreter_sessions(codeInterpreterIdentifier=PUBLIC_CI)["items"]
        described = srv.manager.plan.describe(srv.manager.limits)

    # Then both are refused as isolation_unavailable (a 403 no client retries) and no session exists
    assert [(r["Error"]["Code"], r["ResponseMetadata"]["HTTPStatusCode"]) for r in refusals] == [
        ("AccessDeniedException", 403)
    ] * 2
    assert all(r["Error"]["Message"].startswith("isolation_unavailable: bubblewrap") for r in refusals), (
        refusals
    )
    assert naming.ENV_LOCAL_UNISOLATED in refusals[0]["Error"]["Message"]  # it says how to opt out
    assert listed == []
    assert described["strategy"] == "unavailable" and described["isolated"] is False


def test_escape_hatch_runs_unisolated_and_warns_on_every_start(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Given no bwrap on PATH, and the operator's explicit SANDBOX_LOCAL_UNISOLATED=1
    with monkeypatch.context() as env:
        env.setenv("PATH", "/nonexistent")
        env.setenv(naming.ENV_LOCAL_UNISOLATED, "1")
        srv = LocalInterpreterServer(interpreters={PUBLIC_CI: "PUBLIC"})
    with srv:
        client = make_client(srv.endpoint)
        # When two sessions start and run code
        with caplog.at_level(logging.WARNING, logger="local-interpreter"):
            outputs = [
                invoke(client, PUBLIC_CI, _start(client, PUBLIC_CI), "print('ran')")[0]["stdout"]
                for _ in range(2)
            ]
        described = srv.manager.plan.describe(srv.manager.limits)

    # Then both ran, each start logged its own warning, and status says it is not isolated
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "UNISOLATED" in r.getMessage()]
    assert outputs == ["ran\n", "ran\n"]
    assert len(warnings) == 2, [r.getMessage() for r in caplog.records]
    assert described["strategy"] == "unisolated" and described["isolated"] is False


def test_public_sessions_refused_without_user_mode_networking(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given bwrap but no slirp4netns on PATH (a directory holding only bwrap and ip)
    tools = Path(tempfile.mkdtemp(prefix="lci-tools-"))
    for tool in ("bwrap", "ip", "nsenter"):
        (tools / tool).symlink_to(str(shutil.which(tool)))
    with monkeypatch.context() as env:
        env.setenv("PATH", str(tools))
        srv = LocalInterpreterServer(interpreters={PUBLIC_CI: "PUBLIC", SANDBOX_CI: "SANDBOX"})
    with srv:
        client = make_client(srv.endpoint)
        # When a PUBLIC and a SANDBOX session are requested
        with pytest.raises(ClientError) as exc:
            _start(client, PUBLIC_CI)
        sandbox_out = invoke(client, SANDBOX_CI, _start(client, SANDBOX_CI), "print('isolated')")[0]["stdout"]
    shutil.rmtree(tools)

    # Then PUBLIC is refused (never given the host's network instead), SANDBOX still runs
    assert exc.value.response["Error"]["Message"].startswith(
        "isolation_unavailable: PUBLIC sessions need slirp4netns"
    )
    assert sandbox_out == "isolated\n"


def test_worker_environment_never_carries_server_credentials() -> None:
    # Given a server process that has AWS credentials in its environment (conftest sets them)
    with LocalInterpreterServer(interpreters={PUBLIC_CI: "PUBLIC"}) as srv:
        client = make_client(srv.endpoint)

        # When code lists its environment
        result = invoke(client, PUBLIC_CI, _start(client, PUBLIC_CI), "import os; print(sorted(os.environ))")[
            0
        ]

    # Then no AWS variable is there
    assert "AWS_" not in result["stdout"], result["stdout"]


def test_memory_bomb_memory_error_keeps_the_session_and_its_variables() -> None:
    # Given a server with a small memory limit and two sessions, one holding a variable
    with LocalInterpreterServer(interpreters={PUBLIC_CI: "PUBLIC"}, limits=Limits(memory_mb=256)) as srv:
        client = make_client(srv.endpoint)
        bomb, other = _start(client, PUBLIC_CI), _start(client, PUBLIC_CI)
        invoke(client, PUBLIC_CI, other, "kept = 1")
        invoke(client, PUBLIC_CI, bomb, "mine = 'still here'")

        # When one session allocates without bound (Python raises MemoryError: nothing killed it)
        result, events, _ = invoke(
            client, PUBLIC_CI, bomb, "hog = []\nwhile True:\n    hog.append(bytearray(8 << 20))"
        )

        # Then the call ends as an uncaught MemoryError (exit 1, its traceback), the session and its
        # variables survive, and the other session is untouched
        assert result["exitCode"] == 1
        assert "MemoryError" in result["stderr"]
        assert events[-1]["isError"] is True
        assert (
            client.get_code_interpreter_session(codeInterpreterIdentifier=PUBLIC_CI, sessionId=bomb)["status"]
            == "READY"
        )
        assert invoke(client, PUBLIC_CI, bomb, "del hog\nprint(mine)")[0]["stdout"] == "still here\n"
        assert invoke(client, PUBLIC_CI, other, "print(kept)")[0]["stdout"] == "1\n"


def test_worker_killed_by_signal_reports_128_plus_signal_and_terminates() -> None:
    # Given a session
    with LocalInterpreterServer(interpreters={PUBLIC_CI: "PUBLIC"}) as srv:
        client = make_client(srv.endpoint)
        session_id = _start(client, PUBLIC_CI)

        # When its process is SIGKILLed mid-call (what the kernel OOM killer does)
        result, _, _ = invoke(
            client, PUBLIC_CI, session_id, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
        )

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
            got = client.get_code_interpreter_session(
                codeInterpreterIdentifier=PUBLIC_CI, sessionId=session_id
            )
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
    assert (
        exc.value.response["Error"]["Code"],
        exc.value.response["ResponseMetadata"]["HTTPStatusCode"],
    ) == ("ServiceQuotaExceededException", 402)
    assert second != first


# --- exact byte counts ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("code", "stdout_bytes", "stderr_bytes"),
    [
        # a trailing expression's echo (here write's return value, "200000\n") is output too
        ("import sys\nsys.stdout.write('é' * 200000)", 400_007, 0),
        ("print('x' * 3_000_000)", 3_000_001, 0),  # beyond the 1 MiB capture
        ("import os\nos.write(2, b'e' * 2_000_000)\nNone", 0, 2_000_000),  # fd level, stderr
        ("import subprocess\nsubprocess.run(['head', '-c', '1500000', '/dev/zero'])\nNone", 1_500_000, 0),
    ],
)
def test_byte_counts_are_exact_beyond_the_capture(code: str, stdout_bytes: int, stderr_bytes: int) -> None:
    with LocalInterpreterServer(interpreters={SANDBOX_CI: "SANDBOX"}) as srv:
        client = make_client(srv.endpoint)
        # When the code writes more than the local capture keeps
        structured, _, headers = invoke(client, SANDBOX_CI, _start(client, SANDBOX_CI), code)
    # Then the headers carry exactly what it wrote, while at most the capture is kept
    assert int(headers[naming.LOCAL_STDOUT_BYTES_HEADER]) == stdout_bytes
    assert int(headers[naming.LOCAL_STDERR_BYTES_HEADER]) == stderr_bytes
    assert len(structured["stdout"].encode("utf-8", "surrogatepass")) <= Limits().stdout_kept + 2  # U+FFFD
    assert len(structured["stderr"].encode()) <= Limits().stderr_kept


# --- the session's Python -----------------------------------------------------------------------
def test_session_python_is_configurable_and_read_only(tmp_path: Path) -> None:
    # Given a virtual environment (outside the system directories) as the session's Python
    venv = tmp_path / "venv-session"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    marker = venv / "lib" / "marker.txt"
    marker.write_text("from the venv")
    marker.chmod(0o666)  # writable by anyone on the host: only the read-only bind can refuse the write
    with LocalInterpreterServer(
        interpreters={SANDBOX_CI: "SANDBOX"}, python=str(venv / "bin" / "python")
    ) as srv:
        client = make_client(srv.endpoint)
        # When a session looks at its interpreter and tries to change it
        code = (
            "import sys, os\n"
            f"print(any(p.startswith({str(venv)!r} + '/lib/') for p in sys.path),"
            f" open({str(marker)!r}).read())\n"
            f"try:\n    open({str(marker)!r}, 'a').write('x')\nexcept OSError as e:\n    print(e.errno)\n"
            f"print(os.path.exists({str(tmp_path / 'other')!r}))\n"
        )
        (tmp_path / "other").write_text("not bound")
        lines = invoke(client, SANDBOX_CI, _start(client, SANDBOX_CI), code)[0]["stdout"].splitlines()

    # Then it runs on the venv (its site-packages on sys.path), which is read-only, and nothing
    # beside the venv is visible
    assert lines == ["True from the venv", "30", "False"], lines  # 30: EROFS


# --- per-session resources are freed ------------------------------------------------------------
def test_uid_leases_are_exclusive_and_freed_when_the_holder_dies() -> None:
    # Given a range of two uids, one leased here and one by another process (another server)
    allocator = UidAllocator(base=UID_BASE + UID_COUNT - 2, count=2)
    mine = allocator.lease()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time; from infra.local.interpreter.uids import UidAllocator; lease ="
                f" UidAllocator(base={UID_BASE + UID_COUNT - 2}, count=2).lease(); print(lease.uid,"
                " flush=True); time.sleep(60)"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=str(Path(__file__).resolve().parents[3]),
    )
    assert holder.stdout is not None
    theirs = int(holder.stdout.readline())
    # When a third lease is asked for, then again after the other process died (SIGKILL)
    with pytest.raises(NoFreeUid):
        allocator.lease()
    holder.kill()
    holder.wait()
    again = allocator.lease()
    mine.release()
    again.release()
    # Then the two live leases never shared a uid, and a dead holder's uid was free at once
    assert theirs != mine.uid
    assert again.uid == theirs


def test_stop_frees_the_sessions_cgroups_uid_and_network_helper() -> None:
    with LocalInterpreterServer(interpreters={PUBLIC_CI: "PUBLIC"}) as srv:
        client = make_client(srv.endpoint)
        # Given a running PUBLIC session with its cgroups, uid and slirp4netns
        session_id = _start(client, PUBLIC_CI)
        session = srv.session(session_id)
        assert session is not None and session.slirp is not None and session.uid is not None
        cgroup_dirs = list(session.cgroup.dirs.values()) if session.cgroup else []
        slirp = session.slirp.proc
        # When it is stopped
        client.stop_code_interpreter_session(codeInterpreterIdentifier=PUBLIC_CI, sessionId=session_id)
    # Then its cgroups are gone, slirp4netns exited, no process of its uid is left, its files are gone
    assert cgroup_dirs and not any(d.exists() for d in cgroup_dirs)
    assert slirp.poll() is not None
    assert session.uid not in uids_with_processes()
    assert not os.path.exists(session.root)
