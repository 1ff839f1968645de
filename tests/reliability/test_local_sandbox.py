"""Local stack safety (SPEC §18) through the real local stack: a session's code against the stack's
own services, and a machine that cannot isolate, seen through dispatch.

Every test records one row of the report's "Local sandbox isolation" section (attack, modes,
what was observed): the figures come from this run.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from sandbox_common import naming as n

from infra.local.interpreter import Limits, LocalInterpreterServer, network
from infra.local.interpreter.isolation import WORKER_PATH
from tests.integration.interpreter._helpers import PUBLIC_CI, SANDBOX_CI, invoke, make_client
from tests.support.stack import Stack, close_stack, event, open_stack, stack  # noqa: F401 - fixture

_ATTACK = """
import json, socket, urllib.request
out = {}
for name, host, port in TARGETS:
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect((host, port)); out[name] = "CONNECTED"
    except OSError as e:
        out[name] = type(e).__name__
    finally:
        s.close()
# the security pass's attack: list another tenant's sessions through the interpreter API
try:
    urllib.request.urlopen(urllib.request.Request(API + "/code-interpreters/" + OTHER + "/sessions/list",
                                                  data=b"{}", method="POST"), timeout=3)
    out["list_other_tenant_sessions"] = "ANSWERED"
except OSError as e:
    out["list_other_tenant_sessions"] = type(e).__name__
print(json.dumps(out))
"""


def _start(client: Any, interpreter: str) -> str:
    return str(client.start_code_interpreter_session(codeInterpreterIdentifier=interpreter)["sessionId"])


def _port(url: str) -> int:
    return int(urlsplit(url).port or 0)


def _interpreter_id(local: Stack, tenant: str, mode: str) -> str:
    return next(
        i["id"]
        for i in local.resources.interpreters
        if i["tenant_id"] == tenant and i["network_mode"] == mode
    )


@pytest.mark.parametrize("mode", ["PUBLIC", "SANDBOX"])
def test_local_sandbox_session_cannot_reach_the_stacks_own_services(
    stack: Stack,  # noqa: F811
    mode: str,
    record: Any,
) -> None:
    # Given the stack's endpoints: emulated AWS (moto), the interpreter API, the Lambda emulator,
    # each on the host's loopback, through slirp's host alias and through every host address
    services = {
        "moto": _port(stack.moto),
        "interpreter": stack.interpreter.port,
        "lambda": _port(stack.emulator.endpoint),
    }
    hosts = {"loopback": "127.0.0.1", "slirp-host-alias": "10.0.2.2"}
    hosts.update({f"host-address {a}": a for a in network.host_ipv4_addresses()})
    targets = [
        (f"{service} via {label}", host, port)
        for service, port in services.items()
        for label, host in hosts.items()
    ]
    interpreter = _interpreter_id(stack, "acme", mode)
    other = next(i["id"] for i in stack.resources.interpreters if i["tenant_id"] == "globex")
    client = make_client(stack.interpreter.endpoint)
    session_id = client.start_code_interpreter_session(codeInterpreterIdentifier=interpreter)["sessionId"]
    try:
        # When acme's session tries each of them, and the interpreter API for globex's sessions
        code = f"TARGETS, API, OTHER = {targets!r}, {stack.interpreter.endpoint!r}, {other!r}\n" + _ATTACK
        seen = json.loads(invoke(client, interpreter, session_id, code)[0]["stdout"])
    finally:
        client.stop_code_interpreter_session(codeInterpreterIdentifier=interpreter, sessionId=session_id)

    reached = sorted(k for k, v in seen.items() if v in ("CONNECTED", "ANSWERED"))
    record(
        "local_isolation",
        attack=(
            "reach the stack's services (moto, interpreter API, Lambda emulator) and "
            "list another tenant's sessions"
        ),
        mode=mode,
        observed=f"{len(seen)} attempts, {len(reached)} reached: "
        + (", ".join(reached) or "none")
        + f"; errors {sorted(set(seen.values()))}",
    )
    # Then nothing answered
    assert len(seen) == len(targets) + 1 and len(hosts) >= 3
    assert reached == [], seen


@pytest.fixture
def refusing_stack(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    """The local stack on a machine without bubblewrap (bwrap not on PATH), no escape hatch."""
    with monkeypatch.context() as env:
        env.setenv("PATH", "/nonexistent")
        env.delenv(n.ENV_LOCAL_UNISOLATED, raising=False)
        refusing = LocalInterpreterServer().start()
    opened = open_stack(moto_endpoint, refusing, monkeypatch.setenv)
    yield opened
    close_stack(opened)
    refusing.stop()


def test_local_sandbox_without_bwrap_dispatch_refuses_as_provisioning_and_audits(
    refusing_stack: Stack, record: Any
) -> None:
    # Given a machine whose local interpreter cannot isolate sessions
    # When an agent runs code
    result = refusing_stack.dispatch(event(code="print('never runs')"))
    rows = refusing_stack.audit_rows()
    record(
        "local_isolation",
        attack="run code on a machine without bubblewrap (no escape hatch)",
        mode="PUBLIC",
        observed=(
            f"{result.get('error')} reason={result.get('reason')} exit_status={result.get('exit_status')};"
            f" audit rows {[r['exit_status'] for r in rows]}; live sessions"
            f" {len(refusing_stack.live_sessions())}"
        ),
    )
    # Then SandboxProvisioning / isolation_unavailable, a sentence for the agent, one audit row
    assert result["error"] == "SandboxProvisioning" and result["reason"] == n.REASON_ISOLATION_UNAVAILABLE, (
        result
    )
    assert result["exit_status"] == "provisioning"
    assert "isolate" in result["error_message"]
    assert [r["exit_status"] for r in rows] == ["provisioning"]
    assert n.REASON_ISOLATION_UNAVAILABLE in (rows[0].get("failure_reason") or "")
    assert refusing_stack.live_sessions() == []


def _counts(items: dict[str, list[dict[str, Any]]]) -> dict[str, int]:
    return {table: sum(int(i[n.COUNTER_ATTR_COUNT]["N"]) for i in rows) for table, rows in items.items()}


def test_local_sandbox_without_bwrap_refusal_is_counted_once(refusing_stack: Stack, record: Any) -> None:
    # Given a machine whose local interpreter cannot isolate sessions
    before = _counts(refusing_stack.counter_items())
    # When an agent runs code
    result = refusing_stack.dispatch(event(code="print('never runs')"))
    after = _counts(refusing_stack.counter_items())
    record(
        "local_isolation",
        attack="refused call counted against the caps?",
        mode="PUBLIC",
        observed=f"{result.get('reason')}; counts before {before}, after {after}",
    )
    # Then the refused start is counted like any start refusal (SPEC §5.1, §23): one unit in each
    # window, as for any call admitted by the quota whose session then could not start
    assert result["reason"] == n.REASON_ISOLATION_UNAVAILABLE
    assert {table: after[table] - before.get(table, 0) for table in after} == {
        n.TENANT_DAILY_COUNTERS.logical: 1,
        n.AGENT_HOURLY_COUNTERS.logical: 1,
    }


# --- attacks from inside a session (SPEC §18), from PUBLIC and SANDBOX --------------------------
REPO = Path(__file__).resolve().parents[2]

_PROBE = """
import json, os
def attempt(fn):
    try:
        fn(); return "done"
    except OSError as e:
        return type(e).__name__
def read(path):
    return lambda: open(path, "rb").read(1)
def write(path):
    return lambda: open(path, "ab").write(b"#")
host_pids = [p for p in os.listdir("/proc") if p.isdigit()]
print(json.dumps({
    "uid": os.getuid(), "euid": os.geteuid(), "groups": os.getgroups(),
    "shadow": attempt(read("/etc/shadow")),
    "repo": attempt(read(REPO + "/pyproject.toml")),
    "home": attempt(read(HOME_MARKER)),
    "state": attempt(lambda: os.listdir(REPO + "/.local")),
    "other_workspace": attempt(lambda: os.listdir(OTHER)),
    "server_environ": attempt(read("/proc/%d/environ" % SERVER_PID)),
    "worker_in_sandbox": attempt(write("/opt/local-interpreter/worker.py")),
    "worker_on_host": attempt(write(WORKER)),
    "usr": attempt(write("/usr/pwned")),
    "own_workspace": attempt(write("/workspace/mine")),
    "tmp": attempt(write("/tmp/mine")),
    "pids": len(host_pids),
    "workspace_mode": oct(os.stat("/workspace").st_mode & 0o777),
    "caps": [l.split()[1] for l in open("/proc/self/status") if l.startswith(("CapEff", "CapBnd"))],
}))
"""


def _probe(other_root: str, home_marker: Path) -> str:
    return (
        f"REPO, HOME_MARKER, OTHER, SERVER_PID, WORKER = {str(REPO)!r}, {str(home_marker)!r}, "
        f"{other_root!r}, {os.getpid()}, {str(WORKER_PATH)!r}\n" + _PROBE
    )


@pytest.fixture
def home_marker() -> Iterator[Path]:
    """A file in the host user's home directory (removed afterwards)."""
    marker = Path.home() / f".lci-test-{secrets.token_hex(4)}"
    marker.write_text("host home")
    marker.chmod(0o644)  # readable by anyone who can reach it: only the sandbox may stop a session
    yield marker
    marker.unlink()


@pytest.mark.parametrize("mode", ["PUBLIC", "SANDBOX"])
def test_local_sandbox_session_cannot_read_host_secrets_other_sessions_or_write_the_worker(
    mode: str, home_marker: Path, record: Any
) -> None:
    interpreter = PUBLIC_CI if mode == "PUBLIC" else SANDBOX_CI
    with LocalInterpreterServer(interpreters={interpreter: mode}) as srv:
        client = make_client(srv.endpoint)
        # Given a victim session holding a file in its workspace, and an attacker session
        victim = _start(client, interpreter)
        invoke(client, interpreter, victim, "open('/workspace/secret', 'w').write('victim')")
        victim_session = srv.session(victim)
        assert victim_session is not None
        attacker = _start(client, interpreter)
        attacker_uid = srv.session(attacker).uid  # type: ignore[union-attr]

        # When the attacker tries every path of the security pass
        seen = json.loads(
            invoke(client, interpreter, attacker, _probe(victim_session.root + "/workspace", home_marker))[0][
                "stdout"
            ]
        )
        # and reads the victim's workspace on the host as the attacker's uid would
        host_view = subprocess.run(
            [
                "setpriv",
                f"--reuid={attacker_uid}",
                f"--regid={attacker_uid}",
                "--clear-groups",
                "cat",
                victim_session.root + "/workspace/secret",
            ],
            capture_output=True,
        )

    record(
        "local_isolation",
        attack=(
            "read /etc/shadow, the repository, the host home, the stack state dir, another session's"
            " workspace, /proc/<server>/environ; write worker.py (in the sandbox and its host path) and /usr;"
            " list host processes; read the victim's files with the attacker's uid on the host"
        ),
        mode=mode,
        observed=f"uid {seen['uid']} (victim {victim_session.uid}), caps {seen['caps'][0]}; "
        + ", ".join(
            f"{k} {seen[k]}"
            for k in (
                "shadow",
                "repo",
                "home",
                "state",
                "other_workspace",
                "server_environ",
                "worker_in_sandbox",
                "worker_on_host",
                "usr",
            )
        )
        + f"; {seen['pids']} pids visible; host read as attacker uid exit {host_view.returncode}",
    )
    # Then it is an unprivileged uid of its own, with no capability, and every attempt fails
    assert seen["uid"] == seen["euid"] == attacker_uid != victim_session.uid
    assert attacker_uid >= 1000
    assert seen["groups"] in ([], [attacker_uid])
    assert seen["caps"] == ["0000000000000000", "0000000000000000"]
    for key in ("shadow", "repo", "home", "state", "other_workspace", "server_environ"):
        assert seen[key] in ("FileNotFoundError", "PermissionError"), (key, seen[key])
    for key in ("worker_in_sandbox", "worker_on_host", "usr"):
        assert seen[key] in ("OSError", "PermissionError", "FileNotFoundError"), (key, seen[key])
    assert seen["pids"] <= 4, seen  # bwrap's init, the worker (and its children): no host process
    # And its own workspace and /tmp are writable, the workspace private (0700)
    assert (seen["own_workspace"], seen["tmp"], seen["workspace_mode"]) == ("done", "done", "0o700")
    assert host_view.returncode != 0 and b"victim" not in host_view.stdout


def test_local_sandbox_memory_is_bounded_over_all_children_of_a_session(record: Any) -> None:
    # Given a session limited to 256 MiB (each process alone may use that much)
    with LocalInterpreterServer(interpreters={PUBLIC_CI: "PUBLIC"}, limits=Limits(memory_mb=256)) as srv:
        if srv.manager.plan.cgroups is None:
            pytest.skip(
                "no writable cgroup v1 memory+pids here: whole-session memory is not enforced"
                " (docs/local-stack.md)"
            )
        client = make_client(srv.endpoint)
        session_id = _start(client, PUBLIC_CI)
        # When four children each hold 100 MiB at the same time (400 MiB in total)
        code = (
            "import subprocess, sys\n"
            "hold = 'import time; x = b\"x\" * (100 << 20); time.sleep(3)'\n"
            "kids = [subprocess.Popen([sys.executable, '-c', hold]) for _ in range(4)]\n"
            "print([k.wait() for k in kids])\n"
        )
        result = invoke(client, PUBLIC_CI, session_id, code)[0]
        cgroup = srv.session(session_id).cgroup  # type: ignore[union-attr]
        peak, kills = cgroup.memory_peak_bytes(), cgroup.oom_kills()

    record(
        "local_isolation",
        attack="4 children x 100 MiB in a session limited to 256 MiB",
        mode="PUBLIC",
        observed=f"child exit codes {result['stdout'].strip()}; OOM kills {kills}; peak {peak >> 20} MiB",
    )
    # Then the kernel killed children (SIGKILL) so that the session never held more than 256 MiB
    codes = json.loads(result["stdout"])
    assert len(codes) == 4
    assert codes.count(-9) >= 2, codes
    assert kills >= 2
    assert peak <= 256 << 20


def test_local_sandbox_process_count_is_bounded_per_session(record: Any) -> None:
    # Given a session limited to 32 tasks
    with LocalInterpreterServer(interpreters={SANDBOX_CI: "SANDBOX"}, limits=Limits(max_processes=32)) as srv:
        client = make_client(srv.endpoint)
        session_id = _start(client, SANDBOX_CI)
        # When it tries to start 100 processes
        code = (
            "import subprocess\nkids, errors = [], []\n"
            "for _ in range(100):\n"
            "    try:\n        kids.append(subprocess.Popen(['sleep', '30']))\n"
            "    except OSError as e:\n        errors.append(e.errno)\n"
            "print(len(kids), len(errors), sorted(set(errors)))\n"
            "for k in kids:\n    k.kill()\n"
        )
        started, failed, errnos = invoke(client, SANDBOX_CI, session_id, code)[0]["stdout"].split(" ", 2)

    record(
        "local_isolation",
        attack="start 100 processes in a session limited to 32 tasks",
        mode="SANDBOX",
        observed=f"{started} started, {failed} refused (errno {errnos.strip()})",
    )
    # Then fewer than 32 started, the rest failed with EAGAIN
    assert int(started) < 32 and int(started) + int(failed) == 100
    assert errnos.strip() == "[11]"
