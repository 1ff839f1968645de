"""How a session's worker process is isolated on this host (docs/local-stack.md): isolated, or
refused.

`probe()` decides once per server what is in force; `IsolationPlan.check()` refuses a session
that cannot be isolated (`IsolationUnavailable`, answered as `isolation_unavailable`), and
`worker_command.build_command()` gives the argv of one worker under the plan.

Strategy `bwrap` (bubblewrap, run by root):
- new mount, pid, ipc, uts, cgroup and network namespaces. The file system is an empty root with
  read-only binds of the system directories, a short list of /etc files (never /etc/shadow), the
  session's Python installation, the worker package and the shell runtime and Node.js runner it
  loads (`sandbox_session/shell.py`, `node.py`), Node.js and the pinned TypeScript package (node.py
  beside this file) only: not the repository, not the host's home, not the local
  stack's state directory, not another session's workspace. /workspace (mode
  0700, owned by its uid), /tmp and /opt/session-python (its Python layer) are parts of the
  session's own disk (disk.py: one file system bounded in bytes and files, mounted in a mount
  namespace of the session's own before bubblewrap starts). /proc shows the session's own pid
  namespace only. The environment is cleared and set (session_env).
- the worker runs as an unprivileged uid of its own (uids.py: unique per live session on this
  machine), with no capabilities (empty bounding set) and no_new_privs, so it cannot write the
  read-only binds (the worker package and shell.py included), raise its limits, or gain privileges
  through setuid files.
- in a user namespace of its own that maps only that uid (to itself), created last, as that uid,
  by a second bwrap with --disable-userns: code in the session cannot create a user namespace
  (nor the unprivileged mounts and namespace capabilities one would bring), and the kernel
  keyrings a process reaches by name (user, user-session; the session keyring falls back to the
  latter) belong to that namespace: they die with the session and a later session given the
  same uid starts with empty ones.
- network: its own namespace; nothing but loopback for SANDBOX; user-mode egress for PUBLIC
  (network.py: slirp4netns with the host's loopback and the host's own addresses fenced off);
  for VPC (an allowlist egress) loopback plus one relayed port to the egress proxy, and the
  proxy's CA certificate bound read-only (egress.py).
- limits: memory summed over all the session's processes and a task count by cgroup v1 when this
  host allows it (cgroups.py); always RLIMIT_AS (per process), RLIMIT_NPROC (per uid, so per
  session), RLIMIT_CPU, RLIMIT_FSIZE, no core dumps (set by the worker on itself, worker/kernel.py).

Without a working bubblewrap (or not running as root, which the per-session uid, the cgroups and
the network fence need), sessions are refused, unless the operator sets
`SANDBOX_LOCAL_UNISOLATED=1`: then strategy `unisolated` runs the worker as a plain child process
of the server (no file-system, network, uid or whole-session limits; the rlimits still apply) and
every session start logs a warning; VPC sessions are refused there (nothing would hold their
egress to the proxy). A PUBLIC session also needs slirp4netns, nsenter and ip; without them PUBLIC
sessions are refused (never given the host's network) while SANDBOX ones still run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Any

from sandbox_common import naming

from infra.local.interpreter import cgroups, disk, network

SETPRIV = "/usr/bin/setpriv"  # under /usr, so the same path inside the sandbox
# The end of a bwrap command that becomes another uid: bwrap (as root, no user namespace yet) keeps
# only these two capabilities, which setpriv (its arguments follow) uses once to change uid; from
# then on the process has none. The start probe runs the same sequence the session's command does.
BECOME_UID = ("--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--", SETPRIV)
# What the start probes' sandboxes see: the host read-only, their own /proc and /dev.
_PROBE_ROOT = ("--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev")

STRATEGIES = ("auto", "bwrap", "unisolated")

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


class IsolationUnavailable(RuntimeError):
    """This session cannot be isolated here; the message says why and what would fix it."""


@dataclass(frozen=True)
class Limits:
    memory_mb: int = 1024  # the whole session (cgroup) and each process (RLIMIT_AS)
    cpu_seconds: int = 600  # per process
    file_size_mb: int = 512  # per file
    max_processes: int = 128  # tasks (processes and threads) of the whole session
    # The session's disk (disk.py): its workspace, /tmp and its own Python packages, together.
    disk_mb: int = 1024
    disk_files: int = 32_768  # files and directories (inodes)
    # Output kept per call (the rest is only counted): the agent-visible caps (docs/architecture.md)
    # plus a margin, so that the host-side redactor still sees a token cut by the cap whole.
    stdout_bytes: int = 262_144
    stderr_bytes: int = 32_768
    redaction_margin_bytes: int = 16_384

    @property
    def stdout_kept(self) -> int:
        return self.stdout_bytes + self.redaction_margin_bytes

    @property
    def stderr_kept(self) -> int:
        return self.stderr_bytes + self.redaction_margin_bytes


@dataclass(frozen=True)
class IsolationPlan:
    """What this server enforces; `unavailable` says why sessions are refused (None: isolated)."""

    strategy: str  # "bwrap" | "unisolated" | "unavailable"
    unavailable: str | None = None
    public_unavailable: str | None = None  # why PUBLIC sessions are refused (bwrap only)
    cgroups: cgroups.CgroupSupport | None = None
    disk: str | None = None  # the session disk's kind (disk.py), bwrap only
    bwrap: str = "bwrap"  # its absolute path (the same inside the sandbox: under a system directory)

    def check(self, network_mode: str) -> None:
        """Raise IsolationUnavailable unless a session in `network_mode` can start as promised."""
        if self.strategy == "unavailable":
            raise IsolationUnavailable(f"{naming.REASON_ISOLATION_UNAVAILABLE}: {self.unavailable}")
        if self.strategy == "unisolated" and network_mode == "VPC":
            # An allowlist egress is enforced or the session does not start: unisolated code has
            # the host's network, so nothing would hold it to the egress proxy.
            raise IsolationUnavailable(
                f"{naming.REASON_ISOLATION_UNAVAILABLE}: VPC sessions (allowlist egress) need bubblewrap;"
                f" {naming.ENV_LOCAL_UNISOLATED}=1 runs sessions with the host's network, which no"
                " allowlist can hold"
            )
        if self.strategy == "bwrap" and network_mode == "PUBLIC" and self.public_unavailable:
            raise IsolationUnavailable(f"{naming.REASON_ISOLATION_UNAVAILABLE}: {self.public_unavailable}")

    @property
    def limits_mechanism(self) -> str:
        return f"cgroup-{self.cgroups.version}" if self.cgroups else "rlimit"

    def describe(self, limits: Limits) -> dict[str, Any]:
        """What `sandboxctl local status` shows."""
        if self.strategy == "bwrap":
            public = (
                f"refused ({self.public_unavailable})"
                if self.public_unavailable
                else "own namespace + slirp4netns egress, host loopback and host addresses unreachable"
            )
            session_memory = (
                f"{limits.memory_mb} MiB per session" if self.cgroups else "not enforced (no cgroup)"
            )
            return {
                "strategy": "bwrap",
                "isolated": True,
                "network": {
                    "SANDBOX": "own namespace, loopback only",
                    "PUBLIC": public,
                    "VPC": (
                        "own namespace, loopback only, plus a relay to the egress proxy from its own"
                        " loopback address"
                    ),
                },
                "uid": "one unprivileged uid per session (no capabilities)",
                "limits": {
                    "mechanism": self.limits_mechanism,
                    "session_memory": session_memory,
                    "process_memory_mb": limits.memory_mb,
                    "session_tasks": limits.max_processes,
                    "cpu_seconds_per_process": limits.cpu_seconds,
                    "file_size_mb": limits.file_size_mb,
                },
                "disk": {
                    "kind": self.disk,
                    "mb": limits.disk_mb,
                    "files": limits.disk_files,
                    "holds": "workspace, /tmp and the session's own Python packages",
                    "charged_to": (
                        "the host's disk (a sparse image), page cache in the session's memory cgroup"
                        if self.disk == "ext4"
                        else "RAM, counted in the session's memory cgroup"
                    ),
                },
                "user_namespace": "its own, mapping only its uid; no further user namespace can be created",
            }
        if self.strategy == "unisolated":
            return {
                "strategy": "unisolated",
                "isolated": False,
                "warning": (
                    f"{naming.ENV_LOCAL_UNISOLATED}=1: sessions run UNISOLATED as the server's user, "
                    "with the host's file system and network"
                ),
                "limits": {
                    "mechanism": "rlimit",
                    "process_memory_mb": limits.memory_mb,
                    "cpu_seconds_per_process": limits.cpu_seconds,
                },
            }
        return {"strategy": "unavailable", "isolated": False, "refusing": self.unavailable}


def default_python() -> str:
    # The base interpreter, not the venv's: the worker is stdlib-only, and the sandbox then needs
    # to see only the Python installation, not the project's virtual environment.
    return getattr(sys, "_base_executable", None) or sys.executable


_probe_lock = threading.Lock()
_probe_cache: dict[tuple[str, ...], bool] = {}


def _runs(argv: list[str]) -> bool:
    key = tuple(argv)
    with _probe_lock:
        if key not in _probe_cache:
            try:
                ok = (
                    subprocess.run(
                        argv,
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        timeout=10,
                    ).returncode
                    == 0
                )
            except (OSError, subprocess.TimeoutExpired):
                ok = False
            _probe_cache[key] = ok
        return _probe_cache[key]


def _bwrap_problem() -> str | None:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return (
            "bubblewrap (bwrap) is not installed; install it with `make os-deps` "
            "(or: apt-get install -y bubblewrap slirp4netns)"
        )
    if os.geteuid() != 0:
        return (
            "the local interpreter must run as root to give each session its own uid, cgroup and network"
            " fence"
        )
    if not os.access(SETPRIV, os.X_OK):
        return f"{SETPRIV} (util-linux) is not installed"
    if not any(os.path.realpath(bwrap).startswith(d + "/") for d in SYSTEM_DIRS):
        return f"bwrap must be installed under a system directory ({', '.join(SYSTEM_DIRS)}), not {bwrap}"
    if not _runs(
        [
            bwrap,
            "--unshare-all",
            *_PROBE_ROOT,
            "/bin/sh",
            "-c",
            "exit 0",
        ]
    ):
        return "bwrap is installed but cannot create namespaces here"
    # The session's own user namespace (created as the session's uid, nesting disabled): bwrap >= 0.8
    # and unprivileged user namespaces. 65534 stands for a session uid.
    nested = [
        bwrap,
        "--unshare-pid",
        *_PROBE_ROOT,
        *BECOME_UID,
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--no-new-privs",
        "--",
        *[bwrap if arg == "bwrap" else arg for arg in own_user_namespace(65534)],
        "/bin/sh",
        "-c",
        "exit 0",
    ]
    if not _runs(nested):
        return (
            "bwrap cannot give a session a user namespace of its own with nesting disabled (needs bubblewrap"
            " >= 0.8 for --disable-userns, and unprivileged user namespaces enabled)"
        )
    return None


def probe(
    strategy: str = "auto", *, allow_unisolated: bool = False, disk_kind: str = "auto"
) -> IsolationPlan:
    """The plan for `strategy`: `auto` isolates with bwrap, else refuses every session, unless
    `allow_unisolated` (the operator's SANDBOX_LOCAL_UNISOLATED=1); `bwrap` raises at once when it
    cannot work; `unisolated` is the explicit escape hatch. `disk_kind`: the session disk's kind
    (disk.py), `auto` is the best this host supports."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown isolation {strategy!r}; known: {', '.join(STRATEGIES)}")
    if disk_kind not in ("auto", *disk.KINDS):
        raise ValueError(f"unknown disk kind {disk_kind!r}; known: auto, {', '.join(disk.KINDS)}")
    if strategy == "unisolated":
        return IsolationPlan("unisolated")
    problem = _bwrap_problem()
    if problem is None:
        missing = network.missing_tools()
        public = (
            f"PUBLIC sessions need {', '.join(missing)} (apt-get install -y slirp4netns)" if missing else None
        )
        return IsolationPlan(
            "bwrap",
            public_unavailable=public,
            cgroups=cgroups.detect(),
            disk=disk.probe() if disk_kind == "auto" else disk_kind,
            bwrap=os.path.realpath(shutil.which("bwrap") or "bwrap"),
        )
    if strategy == "bwrap":
        raise IsolationUnavailable(f"{naming.REASON_ISOLATION_UNAVAILABLE}: {problem}")
    if allow_unisolated:
        return IsolationPlan("unisolated", unavailable=problem)
    return IsolationPlan(
        "unavailable",
        unavailable=f"{problem}; or set {naming.ENV_LOCAL_UNISOLATED}=1 to run sessions without isolation",
    )


def own_user_namespace(uid: int) -> list[str]:
    """Run the rest in a user namespace of the session's own, mapping only its uid (to itself), in
    which no further user namespace can be created (bwrap --disable-userns). Run as the session's
    uid, after every mount is in place (`--dev-bind / /` keeps them, read-only ones stay read-only).
    Its kernel keyrings (user, user-session, persistent) belong to this namespace, so a key a
    session adds dies with it and is never found by a later session given the same uid."""
    return [
        "bwrap",
        "--unshare-user",
        "--disable-userns",
        "--uid",
        str(uid),
        "--gid",
        str(uid),
        # --dev-bind: the outer sandbox's /dev (null, zero, random, ...) keeps working devices
        "--dev-bind",
        "/",
        "/",
        "--die-with-parent",
        "--",
    ]
