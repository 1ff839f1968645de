"""How a session's worker process is isolated on this host (SPEC §18): isolated, or refused.

`probe()` decides once per server what is in force; `IsolationPlan.check()` refuses a session
that cannot be isolated (`IsolationUnavailable`, answered as `isolation_unavailable`), and
`build_command()` gives the argv of one worker.

Strategy `bwrap` (bubblewrap, run by root):
- new mount, pid, ipc, uts, cgroup and network namespaces. The file system is an empty root with
  read-only binds of the system directories, a short list of /etc files (never /etc/shadow), the
  session's Python installation, the worker script and the shell runtime and Node.js runner it
  loads (`sandbox_session/shell.py`, `node.py`), Node.js and the pinned TypeScript package (node.py
  beside this file) only: not the repository, not the host's home, not the local
  stack's state directory, not another session's workspace. /workspace (mode
  0700, owned by its uid), /tmp and /opt/session-python (its Python layer) are parts of the
  session's own disk (disk.py: one file system bounded in bytes and files, mounted in a mount
  namespace of the session's own before bubblewrap starts). /proc shows the session's own pid
  namespace only. The environment is cleared and set (session_env).
- the worker runs as an unprivileged uid of its own (uids.py: unique per live session on this
  machine), with no capabilities (empty bounding set) and no_new_privs, so it cannot write the
  read-only binds (worker.py and shell.py included), raise its limits, or gain privileges
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
  session), RLIMIT_CPU, RLIMIT_FSIZE, no core dumps (set by the worker on itself, worker.py).

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
from pathlib import Path
from typing import Any

from sandbox_common import naming
from sandbox_session import node as node_runner
from sandbox_session import shell as shell_runtime

from infra.local.interpreter import cgroups, disk, egress, network
from infra.local.interpreter import node as node_install

WORKER_PATH = Path(__file__).with_name("worker.py")
SANDBOX_WORKER_PATH = "/opt/local-interpreter/worker.py"
# The session runtime's shell (bash's launch), which the worker loads from its source (--shell).
SHELL_PATH = Path(shell_runtime.__file__)
SANDBOX_SHELL_PATH = "/opt/local-interpreter/shell.py"
# The session runtime's Node.js runner (JavaScript and TypeScript), which the worker loads too (--node).
NODE_RUNNER_PATH = Path(node_runner.__file__)
SANDBOX_NODE_RUNNER_PATH = "/opt/local-interpreter/node.py"
SANDBOX_WORKDIR = "/workspace"
SETPRIV = "/usr/bin/setpriv"  # under /usr, so the same path inside the sandbox

STRATEGIES = ("auto", "bwrap", "unisolated")

_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Only what a Python process and DNS/TLS need from /etc; never all of /etc (shadow, keys, ...).
_ETC_FILES = (
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/localtime",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/mime.types",
    "/etc/fonts",  # matplotlib (session runtime, §14.5) asks fontconfig; without it: an error on stderr
)


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
    # Output kept per call (the rest is only counted): the agent-visible caps (SPEC §6.5, §12)
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


# --- probing ------------------------------------------------------------------------------------
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
    if not any(os.path.realpath(bwrap).startswith(d + "/") for d in _SYSTEM_DIRS):
        return f"bwrap must be installed under a system directory ({', '.join(_SYSTEM_DIRS)}), not {bwrap}"
    if not _runs(
        [
            bwrap,
            "--unshare-all",
            "--ro-bind",
            "/",
            "/",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
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
        "--ro-bind",
        "/",
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--cap-add",
        "CAP_SETUID",
        "--cap-add",
        "CAP_SETGID",
        "--",
        SETPRIV,
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--no-new-privs",
        "--",
        *[bwrap if arg == "bwrap" else arg for arg in _own_user_namespace(65534)],
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


# --- the worker's command -----------------------------------------------------------------------
@dataclass(frozen=True)
class WorkerCommand:
    argv: list[str]
    cwd: str
    env: dict[str, str]


def session_env(*, home: str, tmp: str, python_dir: str, runtime_bin: str | None) -> dict[str, str]:
    """The session's whole environment (never the server's: it may hold AWS credentials). Its
    Python layer (disk.py) first on PATH, then the runtime's other scripts, then the system."""
    path = [
        f"{python_dir}/bin",
        *([runtime_bin] if runtime_bin else []),
        "/usr/local/bin",
        "/usr/bin",
        "/bin",
    ]
    return {
        "PATH": ":".join(path),
        "HOME": home,
        "TMPDIR": tmp,
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "VIRTUAL_ENV": python_dir,
        # pip: no cache in the workspace, no version check against the index on every run, never
        # a prompt (nobody can answer one).
        "XDG_CACHE_HOME": f"{tmp}/.cache",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_INPUT": "1",
    }


def runtime_bin(python: str) -> str | None:
    """The session runtime's bin/ when it is a virtual environment (its console scripts)."""
    venv = os.path.dirname(os.path.dirname(os.path.abspath(python)))
    return os.path.join(venv, "bin") if os.path.isfile(os.path.join(venv, "pyvenv.cfg")) else None


def _worker_args(
    session_id: str, req_fd: int, resp_fd: int, limits: Limits, *, nproc: bool, shell: str, node: str
) -> list[str]:
    return [
        "--session",
        session_id,
        "--shell",
        shell,
        "--node",
        node,
        "--req-fd",
        str(req_fd),
        "--resp-fd",
        str(resp_fd),
        "--memory-mb",
        str(limits.memory_mb),
        "--cpu-seconds",
        str(limits.cpu_seconds),
        "--file-size-mb",
        str(limits.file_size_mb),
        "--stdout-kept",
        str(limits.stdout_kept),
        "--stderr-kept",
        str(limits.stderr_kept),
        # RLIMIT_NPROC counts every process of the uid: only meaningful with a uid of its own.
        "--max-processes",
        str(limits.max_processes if nproc else 0),
    ]


def _python_prefixes(python: str) -> list[str]:
    """Directories the session Python needs, read-only: a venv and its base installation."""
    prefixes: list[str] = []
    venv = os.path.dirname(os.path.dirname(os.path.abspath(python)))
    cfg = os.path.join(venv, "pyvenv.cfg")
    if os.path.isfile(cfg):
        prefixes.append(venv)
        with open(cfg, encoding="utf-8") as fh:
            for line in fh:
                key, _, value = line.partition("=")
                if key.strip() == "home" and value.strip():
                    prefixes.append(os.path.realpath(os.path.join(value.strip(), "..")))
    prefixes.append(os.path.realpath(os.path.join(os.path.dirname(os.path.realpath(python)), "..")))
    unique = []
    for prefix in prefixes:
        if prefix not in unique and not any(prefix == d or prefix.startswith(d + "/") for d in _SYSTEM_DIRS):
            unique.append(prefix)
    return unique


def _system_binds(python: str) -> list[str]:
    args: list[str] = []
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in _ETC_FILES:
        args += ["--ro-bind-try", path, path]
    for prefix in _python_prefixes(python):
        args += ["--ro-bind", prefix, prefix]
    return args


_OWN_MOUNTS = ("/tmp", "/proc", "/dev", SANDBOX_WORKDIR, disk.SANDBOX_PYTHON_DIR)


def _parent_dirs(argv: list[str]) -> list[str]:
    """`--perms 0755 --dir D` for every directory above a bind target: bwrap run by root would
    create them 0700 (root-only), and the session's uid could not reach what is bound below."""
    targets = [argv[i + 2] for i, arg in enumerate(argv) if arg in ("--ro-bind", "--ro-bind-try", "--bind")]
    parents: list[str] = []
    for target in targets:
        parts = Path(target).parts[1:-1]
        for depth in range(1, len(parts) + 1):
            parent = "/" + "/".join(parts[:depth])
            if parent not in parents and parent not in targets and parent not in _OWN_MOUNTS:
                parents.append(parent)
    return [arg for parent in parents for arg in ("--perms", "0755", "--dir", parent)]


def _enter_cgroups(procs_files: list[str], argv: list[str]) -> list[str]:
    """`sh` writes its own pid into each cgroup, then becomes the next step: the session's very
    first process is already inside, so everything it forks is too."""
    if not procs_files:
        return argv
    script = 'echo $$ > "$1" || exit 125; shift; ' * len(procs_files) + 'exec "$@"'
    return ["/bin/sh", "-c", script, "lci-enter-cgroup", *procs_files, *argv]


def _own_user_namespace(uid: int) -> list[str]:
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


def build_command(
    *,
    plan: IsolationPlan,
    network_mode: str,
    session_id: str,
    root: str,
    template: str,
    req_fd: int,
    resp_fd: int,
    limits: Limits,
    python: str,
    uid: int | None = None,
    info_fd: int | None = None,
    resolv_conf: str | None = None,
    cgroup_procs: list[str] | None = None,
    extra_env: dict[str, str] | None = None,
    egress_ca: str | None = None,
) -> WorkerCommand:
    """argv (and cwd) that start one worker under `plan` (check() it first). `root` is the
    session's directory on the host, `template` the directory holding the Python layer;
    `extra_env` is added to the session's environment (its data endpoint, s3relay.py);
    `egress_ca` is the egress proxy's CA certificate a VPC session sees at egress.SANDBOX_CA_PATH."""
    plan.check(network_mode)
    if plan.strategy != "bwrap":
        # Unisolated: the session's directories on the host (sessions.py lays them out).
        layer = os.path.join(root, "python")
        worker = _worker_args(
            session_id,
            req_fd,
            resp_fd,
            limits,
            nproc=False,
            shell=str(SHELL_PATH),
            node=str(NODE_RUNNER_PATH),
        )
        env = (
            session_env(
                home=os.path.join(root, "workspace"),
                tmp=os.path.join(root, "tmp"),
                python_dir=layer,
                runtime_bin=runtime_bin(python),
            )
            | node_install.find().env(sandboxed=False)
            | (extra_env or {})
        )
        return WorkerCommand(
            [f"{layer}/bin/python", "-I", str(WORKER_PATH), *worker], os.path.join(root, "workspace"), env
        )
    if uid is None or info_fd is None or plan.disk is None:
        raise ValueError("bwrap needs the session's uid, an info fd and a disk kind")
    worker = _worker_args(
        session_id,
        req_fd,
        resp_fd,
        limits,
        nproc=True,
        shell=SANDBOX_SHELL_PATH,
        node=SANDBOX_NODE_RUNNER_PATH,
    )
    dns = ["--ro-bind", resolv_conf, "/etc/resolv.conf"] if resolv_conf else []
    ca = ["--ro-bind", egress_ca, egress.SANDBOX_CA_PATH] if egress_ca else []
    node = node_install.find()
    binds = [
        *_system_binds(python),
        *dns,
        *ca,
        *("--ro-bind", str(WORKER_PATH), SANDBOX_WORKER_PATH),
        *("--ro-bind", str(SHELL_PATH), SANDBOX_SHELL_PATH),
        *("--ro-bind", str(NODE_RUNNER_PATH), SANDBOX_NODE_RUNNER_PATH),
        *node.binds(_SYSTEM_DIRS),
    ]
    env = (
        session_env(
            home=SANDBOX_WORKDIR,
            tmp="/tmp",
            python_dir=disk.SANDBOX_PYTHON_DIR,
            runtime_bin=runtime_bin(python),
        )
        | node.env(sandboxed=True)
        | (extra_env or {})
    )
    own = [
        *("--bind", disk.mounted(root, "tmp"), "/tmp"),
        *("--bind", disk.mounted(root, "workspace"), SANDBOX_WORKDIR),
        *("--bind", disk.mounted(root, "python"), disk.SANDBOX_PYTHON_DIR),
    ]
    bwrap = [
        plan.bwrap,
        "--die-with-parent",
        "--new-session",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--unshare-net",
        "--info-fd",
        str(info_fd),
        "--hostname",
        "sandbox",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        # the session's disk first, so that a session Python kept under /tmp stays visible
        *_parent_dirs(own),
        *own,
        *_parent_dirs(binds),
        *binds,
        "--chdir",
        SANDBOX_WORKDIR,
        "--clearenv",
        *[arg for key, value in env.items() for arg in ("--setenv", key, value)],
        # bwrap (as root, no user namespace yet) keeps only these two capabilities, which setpriv
        # uses once to become the session's uid; from then on the process has none at all.
        "--cap-add",
        "CAP_SETUID",
        "--cap-add",
        "CAP_SETGID",
        "--",
        SETPRIV,
        "--reuid",
        str(uid),
        "--regid",
        str(uid),
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
        *[plan.bwrap if arg == "bwrap" else arg for arg in _own_user_namespace(uid)],
        f"{disk.SANDBOX_PYTHON_DIR}/bin/python",
        "-I",
        SANDBOX_WORKER_PATH,
        *worker,
    ]
    argv = disk.mount_command(
        kind=plan.disk,
        root=root,
        uid=uid,
        size_mb=limits.disk_mb,
        files=limits.disk_files,
        template=template,
        then=bwrap,
    )
    return WorkerCommand(
        _enter_cgroups(cgroup_procs or [], argv), root, {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    )
