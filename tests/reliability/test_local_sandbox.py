"""Local stack safety through the real local stack: a session's code against the stack's
own services, and a machine that cannot isolate, seen through dispatch.

Every test records one row of the report's "Local sandbox isolation" section (attack, modes,
what was observed): the figures come from this run.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from botocore.exceptions import ClientError
from sandbox_common import naming as n

from infra.local.interpreter import Limits, LocalInterpreterServer, network
from infra.local.interpreter.uids import (
    UID_BASE,
    UID_COUNT,
    NoFreeUid,
    UidAllocator,
    uids_with_keys,
    uids_with_processes,
)
from infra.local.interpreter.worker_command import WORKER_PATH
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
    # Then the refused start is counted like any start refusal: one unit in each
    # window, as for any call admitted by the quota whose session then could not start
    assert result["reason"] == n.REASON_ISOLATION_UNAVAILABLE
    assert {table: after[table] - before.get(table, 0) for table in after} == {
        n.TENANT_DAILY_COUNTERS.logical: 1,
        n.AGENT_HOURLY_COUNTERS.logical: 1,
    }


# --- attacks from inside a session, from PUBLIC and SANDBOX --------------------------
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
    "worker_in_sandbox": attempt(write("/opt/local-interpreter/worker/kernel.py")),
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
        f"{other_root!r}, {os.getpid()}, {str(WORKER_PATH / 'kernel.py')!r}\n" + _PROBE
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
            " workspace, /proc/<server>/environ; write the worker (in the sandbox, on the host) and /usr;"
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


# --- the session against the interpreter server and the kernel (its bounds: docs/local-stack.md) -
def _vm_kib(pid: int, field: str) -> int:
    """A memory figure of a process from /proc/<pid>/status (VmRSS, VmHWM), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


@pytest.fixture(scope="module")
def server_process() -> Iterator[tuple[subprocess.Popen[str], str]]:
    """The local interpreter as its own process (as the local stack runs it), so its memory is its own."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "infra.local.interpreter",
            "--port",
            "0",
            f"--interpreter={SANDBOX_CI}=SANDBOX",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    endpoint = json.loads(proc.stdout.readline())["endpoint"]
    yield proc, endpoint
    proc.terminate()
    proc.wait(timeout=30)


# User code writes a forged frame header (and starts on its body) to the worker's answer channel:
# the server reads that header where it expects the worker's answer to this very call.
_FORGE = """
import os, struct, sys
fd = int(sys.argv[sys.argv.index("--resp-fd") + 1])
size = 60 << 20
if KIND == "json":  # a JSON part of 60 MiB
    head = struct.pack(">II", size, 0)
else:  # a small JSON part, then a raw stdout block of 60 MiB
    head = struct.pack(">II", 2, size + 4) + b"{}" + struct.pack(">I", size)
os.write(fd, head)
chunk = b"{" * (1 << 20)
for _ in range(60):
    os.write(fd, chunk)
print("never answered")
"""


@pytest.mark.parametrize("kind", ["json", "raw"])
def test_local_sandbox_forged_frame_is_refused_unbuffered_and_ends_the_session(
    server_process: tuple[subprocess.Popen[str], str], kind: str, record: Any
) -> None:
    proc, endpoint = server_process
    client = make_client(endpoint)
    session_id = _start(client, SANDBOX_CI)
    invoke(client, SANDBOX_CI, session_id, "print('warm')")  # the server's buffers as in normal use
    before_rss, before_peak = _vm_kib(proc.pid, "VmRSS"), _vm_kib(proc.pid, "VmHWM")
    # When the code forges a 60 MiB frame (a JSON part, or a raw output block) on its answer channel
    result, _, _ = invoke(client, SANDBOX_CI, session_id, f"KIND = {kind!r}\n" + _FORGE)
    after_rss, after_peak = _vm_kib(proc.pid, "VmRSS"), _vm_kib(proc.pid, "VmHWM")
    status = client.get_code_interpreter_session(codeInterpreterIdentifier=SANDBOX_CI, sessionId=session_id)
    record(
        "local_isolation",
        attack=f"write a forged 60 MiB frame ({kind} part) to the worker's answer channel",
        mode="SANDBOX",
        observed=(
            f"exit {result['exitCode']}, session {status['status']}; server RSS {before_rss >> 10} ->"
            f" {after_rss >> 10} MiB, peak {before_peak >> 10} -> {after_peak >> 10} MiB"
        ),
    )
    # Then the call fails naming the protocol, the session is ended, and the server never held it
    assert result["exitCode"] == 1 and "protocol" in result["stderr"], result
    assert "never answered" not in result["stdout"]
    assert status["status"] == "TERMINATED"
    assert after_peak - before_peak < 8 << 10, (before_peak, after_peak)  # KiB: far below 60 MiB
    assert after_rss - before_rss < 8 << 10


# User code writes a whole frame to the worker's answer channel before the worker answers: one the
# server's JSON parser cannot take (nested deeper than it goes), or a well-formed answer of its own.
_UNPARSEABLE = """
import json, os, struct, sys
fd = int(sys.argv[sys.argv.index("--resp-fd") + 1])
if KIND == "nested":
    payload = b"[" * 60000
else:  # a plausible answer with no sequence number: the next call would read the real one
    payload = json.dumps({"exit_code": 0, "stdout_bytes": 6, "stderr_bytes": 0, "execution_time": 0.1,
                          "fatal": False}).encode()
os.write(fd, struct.pack(">II", len(payload), 0) + payload)
print("stored")
"""


@pytest.mark.parametrize("kind", ["nested", "well_formed"])
def test_local_sandbox_frame_the_server_cannot_take_ends_the_session_and_no_call_gets_a_stale_answer(
    server_process: tuple[subprocess.Popen[str], str], kind: str, record: Any
) -> None:
    _, endpoint = server_process
    client = make_client(endpoint)
    session_id = _start(client, SANDBOX_CI)
    invoke(client, SANDBOX_CI, session_id, "print('first')")
    # When the code writes a frame of its own to its answer channel
    result, _, _ = invoke(client, SANDBOX_CI, session_id, f"KIND = {kind!r}\n" + _UNPARSEABLE)
    status = client.get_code_interpreter_session(codeInterpreterIdentifier=SANDBOX_CI, sessionId=session_id)
    # and the turn goes on calling that session
    later: list[str] = []
    for n_call in range(2):
        try:
            later.append(invoke(client, SANDBOX_CI, session_id, f"print('later {n_call}')")[0]["stdout"])
        except client.exceptions.ResourceNotFoundException:
            later.append("ResourceNotFoundException")
    record(
        "local_isolation",
        attack=f"write a {kind.replace('_', '-')} frame of its own to the worker's answer channel",
        mode="SANDBOX",
        observed=f"exit {result['exitCode']}, session {status['status']}; later calls: {', '.join(later)}",
    )
    # Then the call fails naming the protocol, the session is ended, and no later call answers with
    # an earlier call's output (they find the session gone)
    assert result["exitCode"] == 1 and "protocol" in result["stderr"], result
    assert status["status"] == "TERMINATED"
    assert later == ["ResourceNotFoundException"] * 2


# Raw syscalls (no keyutils in the session): add_key / keyctl numbers per architecture.
_KEYS = """
import ctypes, json, os, platform
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
ADD_KEY, KEYCTL = {"x86_64": (248, 250), "aarch64": (217, 219)}[platform.machine()]
RINGS = {"user": -4, "user-session": -5, "session": -3}  # KEY_SPEC_*: what a process can name
SETPERM, SEARCH, READ = 5, 10, 11

def call(*args):
    value = libc.syscall(*args)
    return value if value >= 0 else -ctypes.get_errno()

def read(serial):
    buf = ctypes.create_string_buffer(64)
    got = call(KEYCTL, READ, serial, buf, 64)
    return buf.raw[:got].decode() if got > 0 else got
"""
_ADD_KEYS = (
    _KEYS
    + """
keys = {}
for name, ring in RINGS.items():
    serial = call(ADD_KEY, b"user", ("lci-" + name).encode(), b"victim-secret", 13, ring)
    call(KEYCTL, SETPERM, serial, 0x3F3F3F3F)  # anyone who finds it may read it
    keys[name] = serial
print(json.dumps({"uid": os.getuid(), "keys": keys, "read": {k: read(v) for k, v in keys.items()}}))
"""
)
_FIND_KEYS = (
    _KEYS
    + """
found = {}
for name in RINGS:
    for ring_name, ring in RINGS.items():
        serial = call(KEYCTL, SEARCH, ring, b"user", ("lci-" + name).encode(), 0)
        if serial > 0:
            found[name + " in " + ring_name] = read(serial)
by_serial = {k: read(v) for k, v in SERIALS.items()}
listed = [line for line in open("/proc/keys") if "lci-" in line]
print(json.dumps({"uid": os.getuid(), "found": found, "by_serial": by_serial, "listed": listed}))
"""
)


def _spare_uid() -> int:
    """A uid past the shared range with no process, no kernel key and no lease: this test's own."""
    taken = uids_with_processes() | uids_with_keys()
    start = UID_BASE + UID_COUNT + secrets.randbelow(4096)  # tests beside this one pick elsewhere
    for uid in range(start, start + 4096):
        if uid not in taken:
            probe = UidAllocator(base=uid, count=1)
            try:
                probe.lease().release()
            except NoFreeUid:  # leased by a test running beside this one
                continue
            return uid
    raise AssertionError("no spare uid")


def _start_when_a_uid_is_free(client: Any, interpreter: str, timeout: float = 60.0) -> str:
    """Start, waiting while every session uid is held (402) — e.g. until the kernel has
    collected the keys of the session that had it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return _start(client, interpreter)
        except client.exceptions.ServiceQuotaExceededException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_local_sandbox_kernel_keyring_dies_with_its_session(record: Any) -> None:
    # Given an interpreter with a single session uid: consecutive sessions get the same uid
    uids = UidAllocator(base=_spare_uid(), count=1)
    with LocalInterpreterServer(interpreters={SANDBOX_CI: "SANDBOX"}, uids=uids) as srv:
        client = make_client(srv.endpoint)
        victim = _start(client, SANDBOX_CI)
        # When the first session adds a key to every keyring it can reach, readable by anyone
        added = json.loads(invoke(client, SANDBOX_CI, victim, _ADD_KEYS)[0]["stdout"])
        client.stop_code_interpreter_session(codeInterpreterIdentifier=SANDBOX_CI, sessionId=victim)
        # and the next session, of another tenant, with the same uid, looks for them
        attacker = _start_when_a_uid_is_free(client, SANDBOX_CI)
        code = f"SERIALS = {added['keys']!r}\n" + _FIND_KEYS
        seen = json.loads(invoke(client, SANDBOX_CI, attacker, code)[0]["stdout"])
    record(
        "local_isolation",
        attack="add keys to the user, user-session and session keyrings; read them from the next"
        " session with the same uid (by search, by serial, in /proc/keys)",
        mode="SANDBOX",
        observed=f"uid {added['uid']} then {seen['uid']}; added {sorted(added['read'])}; later found"
        f" {seen['found'] or 'nothing'}, by serial {sorted(set(seen['by_serial'].values()))}",
    )
    # Then the keys existed in the first session (the check below is not vacuous) ...
    assert added["read"] == {
        "user": "victim-secret",
        "user-session": "victim-secret",
        "session": "victim-secret",
    }
    # ... and the second one, same uid, finds none of them, whichever way it looks
    assert seen["uid"] == added["uid"]
    assert seen["found"] == {} and seen["listed"] == []
    assert all(isinstance(v, int) and v < 0 for v in seen["by_serial"].values()), seen["by_serial"]


_PIN_KEY = (  # a key of the session's own, that anyone may link elsewhere
    _KEYS
    + """
serial = call(ADD_KEY, b"user", b"lci-pinned", b"victim-secret", 13, RINGS["user"])
call(KEYCTL, SETPERM, serial, 0x3F3F3F3F)  # anyone may link it elsewhere
print(json.dumps({"uid": os.getuid(), "serial": serial, "read": read(serial)}))
"""
)


def test_local_sandbox_a_key_kept_alive_outside_its_session_holds_its_uid_back(record: Any) -> None:
    # Given a keyring held by a process outside every session (here: this test)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    add_key, keyctl = {"x86_64": (248, 250), "aarch64": (217, 219)}[platform.machine()]
    holder = libc.syscall(add_key, b"keyring", b"lci-holder", None, 0, -2)  # in this process's keyring
    assert holder > 0
    uid = _spare_uid()
    try:
        with LocalInterpreterServer(
            interpreters={SANDBOX_CI: "SANDBOX"}, uids=UidAllocator(base=uid, count=1)
        ) as srv:
            client = make_client(srv.endpoint)
            # When a session's key is linked into it (the session allowed anyone to), and the session ends
            first = _start(client, SANDBOX_CI)
            pinned = json.loads(invoke(client, SANDBOX_CI, first, _PIN_KEY)[0]["stdout"])
            linked = libc.syscall(keyctl, 8, pinned["serial"], holder)  # KEYCTL_LINK
            client.stop_code_interpreter_session(codeInterpreterIdentifier=SANDBOX_CI, sessionId=first)
            # Then its uid serves no session while the key lives (the only uid: Start is refused) ...
            with pytest.raises(ClientError) as held:
                _start(client, SANDBOX_CI)
            keys_left = uid in uids_with_keys()
            # ... and serves again once the key is gone
            libc.syscall(keyctl, 21, holder)  # KEYCTL_INVALIDATE: the holder and its links go
            later = _start_when_a_uid_is_free(client, SANDBOX_CI)
            later_uid = srv.session(later).uid  # type: ignore[union-attr]
            seen = json.loads(
                invoke(
                    client, SANDBOX_CI, later, f"SERIALS = {{'pinned': {pinned['serial']}}}\n" + _FIND_KEYS
                )[0]["stdout"]
            )
    finally:
        libc.syscall(keyctl, 21, holder)  # never leave the holder behind
    record(
        "local_isolation",
        attack="keep a key alive after the session (linked into a keyring held outside it); read it from"
        " the next session with that uid",
        mode="SANDBOX",
        observed=f"key of uid {pinned['uid']} pinned: next Start {held.value.response['Error']['Code']} while"
        f" it lived; after it went, uid {later_uid} read by serial -> {seen['by_serial']['pinned']}",
    )
    assert pinned["read"] == "victim-secret" and pinned["uid"] == uid and linked == 0 and keys_left
    assert held.value.response["Error"]["Code"] == "ServiceQuotaExceededException"
    assert later_uid == uid and seen["by_serial"]["pinned"] < 0 and seen["listed"] == []


_USERNS = """
import json, subprocess, sys
# unshare(CLONE_NEWUSER) from a single-threaded process (the worker has threads: EINVAL there)
raw = subprocess.run([sys.executable, "-c", "import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
                      "print(libc.unshare(0x10000000), ctypes.get_errno())"], capture_output=True, text=True)
rc, errno_ = (int(x) for x in raw.stdout.split())
shell = subprocess.run(["unshare", "-Ur", "id"], capture_output=True, text=True)
print(json.dumps({"unshare": rc, "errno": errno_,
                  "unshare_Ur": shell.returncode, "err": shell.stderr.strip()}))
"""


def test_local_sandbox_session_cannot_create_a_user_namespace(record: Any) -> None:
    with LocalInterpreterServer(interpreters={SANDBOX_CI: "SANDBOX"}) as srv:
        client = make_client(srv.endpoint)
        # When session code asks for a new user namespace (the door to unprivileged mounts, to
        # capabilities in a namespace of its own, to re-arranging its file system)
        seen = json.loads(invoke(client, SANDBOX_CI, _start(client, SANDBOX_CI), _USERNS)[0]["stdout"])
    record(
        "local_isolation",
        attack="create a user namespace (unshare(CLONE_NEWUSER), `unshare -Ur`)",
        mode="SANDBOX",
        observed=f"unshare() -> {seen['unshare']} (errno {seen['errno']});"
        f" `unshare -Ur` exit {seen['unshare_Ur']}:"
        f" {seen['err']}",
    )
    # Then both fail (ENOSPC: the session's namespace allows no nested one)
    assert seen["unshare"] == -1 and seen["errno"] > 0
    assert seen["unshare_Ur"] != 0


_FILL = """
import errno, json, os
def fill_bytes(directory, limit_mb):
    written, chunk = 0, b"x" * (1 << 20)
    try:
        with open(os.path.join(directory, "big"), "wb") as fh:
            while written < limit_mb << 20:
                fh.write(chunk)
                fh.flush()
                written += len(chunk)
            os.fsync(fh.fileno())
        return written, "no error"
    except OSError as e:
        return written, errno.errorcode.get(e.errno, str(e.errno))
tmp_written, tmp_error = fill_bytes("/tmp", 40)
ws_written, ws_error = fill_bytes("/workspace", 200)
for path in ("/tmp/big", "/workspace/big"):
    os.remove(path)
os.mkdir("/workspace/many")
files, files_error = 0, "no error"
try:
    while files < 100_000:
        open(f"/workspace/many/{files}", "w").close()
        files += 1
except OSError as e:
    files_error = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps({"tmp": tmp_written, "tmp_error": tmp_error, "workspace": ws_written, "ws_error": ws_error,
                  "files": files, "files_error": files_error}))
"""


@pytest.mark.parametrize("kind", ["ext4", "tmpfs"])
def test_local_sandbox_disk_is_bounded_in_bytes_and_files(kind: str, record: Any) -> None:
    # Given sessions with a 64 MiB disk for at most 2048 files (workspace, /tmp and packages together)
    limits = Limits(disk_mb=64, disk_files=2048)
    with LocalInterpreterServer(interpreters={SANDBOX_CI: "SANDBOX"}, limits=limits, disk_kind=kind) as srv:
        client = make_client(srv.endpoint)
        session_id = _start(client, SANDBOX_CI)
        root = srv.session(session_id).root  # type: ignore[union-attr]
        host_free = shutil.disk_usage(root).free
        # When the code writes 40 MiB to /tmp, then up to 200 MiB to its workspace, then 100,000 files
        seen = json.loads(invoke(client, SANDBOX_CI, session_id, _FILL)[0]["stdout"])
        host_used = host_free - shutil.disk_usage(root).free
        client.stop_code_interpreter_session(codeInterpreterIdentifier=SANDBOX_CI, sessionId=session_id)
    record(
        "local_isolation",
        attack="fill the disk: 40 MiB in /tmp, then 200 MiB in the workspace, then 100,000 files (64 MiB /"
        " 2048 files allowed)",
        mode=f"SANDBOX ({kind})",
        observed=f"/tmp {seen['tmp'] >> 20} MiB,"
        f" workspace {seen['workspace'] >> 20} MiB ({seen['ws_error']}),"
        f" {seen['files']} files ({seen['files_error']}); host disk used {max(0, host_used) >> 20} MiB",
    )
    # Then /tmp and the workspace share one bound: the write past it fails with ENOSPC
    assert seen["tmp"] == 40 << 20 and seen["tmp_error"] == "no error"
    assert seen["ws_error"] == "ENOSPC" and seen["tmp"] + seen["workspace"] <= 64 << 20
    # And the number of files is bounded as well
    assert seen["files_error"] == "ENOSPC" and seen["files"] < 2048
    # And the host gave it at most its disk, which is gone with the session
    assert host_used <= 72 << 20
    assert not os.path.exists(root)


_WRITE_400 = """
import os
with open('/workspace/f', 'wb') as f:
    for _ in range(400):
        f.write(b'x' * (1 << 20))
print(os.path.getsize('/workspace/f') >> 20)
"""


@pytest.mark.parametrize(("kind", "survives"), [("ext4", True), ("tmpfs", False)])
def test_local_sandbox_disk_pages_count_against_the_session_memory(
    kind: str, survives: bool, record: Any
) -> None:
    # Given sessions limited to 256 MiB of memory with a 512 MiB disk
    limits = Limits(memory_mb=256, disk_mb=512)
    with LocalInterpreterServer(interpreters={SANDBOX_CI: "SANDBOX"}, limits=limits, disk_kind=kind) as srv:
        if srv.manager.plan.cgroups is None:
            pytest.skip("no writable cgroup v1 memory+pids here: whole-session memory is not enforced")
        client = make_client(srv.endpoint)
        # When the code writes 400 MiB to its disk
        result = invoke(client, SANDBOX_CI, _start(client, SANDBOX_CI), _WRITE_400)[0]
    record(
        "local_isolation",
        attack="write 400 MiB to the disk of a session limited to 256 MiB of memory",
        mode=f"SANDBOX ({kind})",
        observed=f"exit {result['exitCode']}; {result['stdout'].strip() or 'nothing'} MiB written",
    )
    # Then ext4's page cache is reclaimed (the write completes); tmpfs pages are the session's
    # memory (charged to its cgroup), so the memory limit stops it first
    assert (result["exitCode"] == 0 and result["stdout"].strip() == "400") is survives, result
    assert survives or result["exitCode"] == 137
