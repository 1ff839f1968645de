"""The command that starts one session's worker under an isolation plan (isolation.py): its argv,
working directory and environment.

Under bubblewrap (`bwrap`): the session's disk mounted first (disk.py), then new namespaces over an
empty root with read-only binds of the system directories, a short list of /etc files, the
session's Python installation, the worker package and the session runtime modules it loads, and
Node.js; the environment cleared and set (`session_env`); root's two remaining capabilities used
once by setpriv to become the session's uid, then a user namespace of the session's own
(`isolation.own_user_namespace`); every process of the session in its cgroups from the first one.
Unisolated: the worker as a plain child process, in the session's directories on the host.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sandbox_session import node as node_runner
from sandbox_session import shell as shell_runtime

from infra.local.interpreter import disk, egress
from infra.local.interpreter import node as node_install
from infra.local.interpreter.isolation import (
    BECOME_UID,
    SYSTEM_DIRS,
    IsolationPlan,
    Limits,
    own_user_namespace,
)

# The worker package (worker/), run as `python -I <directory>`, bound read-only into the sandbox.
WORKER_PATH = Path(__file__).with_name("worker")
SANDBOX_WORKER_PATH = "/opt/local-interpreter/worker"
# The session runtime's shell (bash's launch), which the worker loads from its source (--shell).
SHELL_PATH = Path(shell_runtime.__file__)
SANDBOX_SHELL_PATH = "/opt/local-interpreter/shell.py"
# The session runtime's Node.js runner (JavaScript and TypeScript), which the worker loads too (--node).
NODE_RUNNER_PATH = Path(node_runner.__file__)
SANDBOX_NODE_RUNNER_PATH = "/opt/local-interpreter/node.py"
SANDBOX_WORKDIR = "/workspace"
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
    "/etc/fonts",  # matplotlib (session runtime) asks fontconfig; without it: an error on stderr
)


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
        if prefix not in unique and not any(prefix == d or prefix.startswith(d + "/") for d in SYSTEM_DIRS):
            unique.append(prefix)
    return unique


def _system_binds(python: str) -> list[str]:
    args: list[str] = []
    for path in SYSTEM_DIRS:
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
        return _unisolated(session_id, root, req_fd, resp_fd, limits, python, extra_env or {})
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
    node = node_install.find()
    binds = [
        *_system_binds(python),
        *(["--ro-bind", resolv_conf, "/etc/resolv.conf"] if resolv_conf else []),
        *(["--ro-bind", egress_ca, egress.SANDBOX_CA_PATH] if egress_ca else []),
        *("--ro-bind", str(WORKER_PATH), SANDBOX_WORKER_PATH),
        *("--ro-bind", str(SHELL_PATH), SANDBOX_SHELL_PATH),
        *("--ro-bind", str(NODE_RUNNER_PATH), SANDBOX_NODE_RUNNER_PATH),
        *node.binds(SYSTEM_DIRS),
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
    bwrap = [
        *_namespaces(plan, info_fd, root, binds, env),
        *_as_session_uid(plan, uid),
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


def _unisolated(
    session_id: str,
    root: str,
    req_fd: int,
    resp_fd: int,
    limits: Limits,
    python: str,
    extra_env: dict[str, str],
) -> WorkerCommand:
    """The worker as a plain child process, in the session's directories on the host (sessions.py
    lays them out)."""
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
        | extra_env
    )
    return WorkerCommand(
        [f"{layer}/bin/python", "-I", str(WORKER_PATH), *worker], os.path.join(root, "workspace"), env
    )


def _namespaces(
    plan: IsolationPlan, info_fd: int, root: str, binds: list[str], env: dict[str, str]
) -> list[str]:
    """bwrap (as root): new namespaces, the session's disk and the read-only binds over an empty
    root, the environment cleared and set."""
    own = [
        *("--bind", disk.mounted(root, "tmp"), "/tmp"),
        *("--bind", disk.mounted(root, "workspace"), SANDBOX_WORKDIR),
        *("--bind", disk.mounted(root, "python"), disk.SANDBOX_PYTHON_DIR),
    ]
    return [
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
    ]


def _as_session_uid(plan: IsolationPlan, uid: int) -> list[str]:
    """The rest of the bwrap command: become the session's uid with no capability left, then enter
    the session's own user namespace."""
    return [
        *BECOME_UID,  # setpriv becomes the session's uid once; then the process has no capability
        "--reuid",
        str(uid),
        "--regid",
        str(uid),
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
        *[plan.bwrap if arg == "bwrap" else arg for arg in own_user_namespace(uid)],
    ]
