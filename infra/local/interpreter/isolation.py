"""How a session's worker process is isolated on this host.

Strategies, strongest first (`auto` picks the first that works here, probed once per process):

- `bwrap` (bubblewrap): new pid/ipc/uts/user namespaces, `--unshare-net` for `SANDBOX` network
  mode (the sandbox then has only its own loopback; `PUBLIC` shares the host network, as a local
  stand-in for AgentCore's public egress), read-only binds of the system directories and the
  Python installation only (not the project checkout, not the home directory), a private tmpfs
  `/tmp`, a private writable `/workspace`, a cleared environment, `--die-with-parent` and
  `--new-session`. Running as root, bwrap also drops every capability, so the worker cannot
  raise the rlimits it set on itself.
- `unshare` (util-linux): only new net (for `SANDBOX`) and pid namespaces — no filesystem
  isolation. The fallback when bwrap is absent, so `SANDBOX` still has no network.
- `none`: a plain subprocess. Refused for `SANDBOX` interpreters: a "no network" promise that
  cannot be kept is not made (fail closed).

Memory (RLIMIT_AS), CPU (RLIMIT_CPU) and file-size limits are set by the worker on itself before
it runs any code (see worker.apply_limits), identically under every strategy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from sandbox_common.naming import ENV_SESSION_PYTHON

WORKER_PATH = Path(__file__).with_name("worker.py")
SANDBOX_WORKER_PATH = "/opt/local-interpreter/worker.py"
SANDBOX_WORKDIR = "/workspace"
SANDBOX_UID = 1000

STRATEGIES = ("auto", "bwrap", "unshare", "none")

_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Only what a Python process and DNS/TLS need from /etc; never all of /etc (shadow, keys, ...).
_ETC_FILES = (
    "/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/host.conf", "/etc/gai.conf",
    "/etc/ssl", "/etc/ca-certificates", "/etc/pki", "/etc/localtime", "/etc/ld.so.cache",
    "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/mime.types",
    "/etc/fonts",  # matplotlib (session runtime) asks fontconfig; without it: an error line on stderr
)


class IsolationUnavailable(RuntimeError):
    """The requested network mode cannot be enforced on this host."""


@dataclass(frozen=True)
class Limits:
    memory_mb: int = 1024
    cpu_seconds: int = 600
    file_size_mb: int = 512
    max_output_bytes: int = 1 << 20  # per stream; keeps one event-stream frame far below 24 MiB


@dataclass(frozen=True)
class WorkerCommand:
    argv: list[str]
    cwd: str
    env: dict[str, str]


def _clean_env(home: str) -> dict[str, str]:
    # Never the server's environment: it may hold AWS credentials.
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "LANG": "C.UTF-8",
            "PYTHONIOENCODING": "utf-8", "PYTHONDONTWRITEBYTECODE": "1"}


SESSION_PYTHON_ENV = ENV_SESSION_PYTHON


def default_python() -> str:
    # The session runtime (SPEC §14.5) when the local stack names it: a pinned venv with numpy,
    # pandas, matplotlib... (`make session-runtime`). Otherwise the base interpreter, not the
    # project venv's: the worker is stdlib-only, and the sandbox then needs to see only the
    # Python installation, not the project's virtual environment.
    configured = os.environ.get(SESSION_PYTHON_ENV)
    if configured:
        if not os.access(configured, os.X_OK):
            raise IsolationUnavailable(f"{SESSION_PYTHON_ENV}={configured} is not an executable Python")
        return configured
    return getattr(sys, "_base_executable", None) or sys.executable


def _venv_root(python: str) -> str | None:
    """The virtual environment `python` belongs to (its pyvenv.cfg), else None."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(python)))
    return root if os.path.isfile(os.path.join(root, "pyvenv.cfg")) else None


_probe_lock = threading.Lock()
_probe_cache: dict[str, list[str] | None] = {}


def _runs(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _bwrap_user_args() -> list[str] | None:
    """bwrap's extra args that work here ([] or the user-namespace ones), or None if it does not run."""
    with _probe_lock:
        if "bwrap" not in _probe_cache:
            found: list[str] | None = None
            if shutil.which("bwrap"):
                base = ["bwrap", "--unshare-pid", "--unshare-net", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
                user = ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
                for extra in (user, []):
                    if _runs([*base, *extra, "true"]):
                        found = extra
                        break
            _probe_cache["bwrap"] = found
        return _probe_cache["bwrap"]


def _unshare_prefix() -> list[str] | None:
    """`unshare` (as root) or `unshare -r` (unprivileged user namespace), or None."""
    with _probe_lock:
        if "unshare" not in _probe_cache:
            found: list[str] | None = None
            if shutil.which("unshare"):
                for prefix in (["unshare"], ["unshare", "-r"]):
                    if _runs([*prefix, "--net", "--pid", "--fork", "--kill-child", "true"]):
                        found = prefix
                        break
            _probe_cache["unshare"] = found
        return _probe_cache["unshare"]


def resolve(strategy: str) -> str:
    """The concrete strategy for `auto`; a named one must actually work here."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown isolation {strategy!r}; known: {', '.join(STRATEGIES)}")
    if strategy == "auto":
        if _bwrap_user_args() is not None:
            return "bwrap"
        if _unshare_prefix() is not None:
            return "unshare"
        return "none"
    if strategy == "bwrap" and _bwrap_user_args() is None:
        raise IsolationUnavailable("bwrap is not installed or cannot create namespaces here")
    if strategy == "unshare" and _unshare_prefix() is None:
        raise IsolationUnavailable("unshare is not installed or cannot create namespaces here")
    return strategy


def _worker_args(session_id: str, req_fd: int, resp_fd: int, limits: Limits) -> list[str]:
    return [
        "--session", session_id, "--req-fd", str(req_fd), "--resp-fd", str(resp_fd),
        "--memory-mb", str(limits.memory_mb), "--cpu-seconds", str(limits.cpu_seconds),
        "--file-size-mb", str(limits.file_size_mb), "--max-output", str(limits.max_output_bytes),
    ]


def _system_binds(python: str) -> list[str]:
    args: list[str] = []
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in _ETC_FILES:
        args += ["--ro-bind-try", path, path]
    prefix = os.path.realpath(os.path.join(os.path.dirname(os.path.realpath(python)), ".."))
    if not any(prefix == d or prefix.startswith(d + "/") for d in _SYSTEM_DIRS):
        args += ["--ro-bind", prefix, prefix]
    venv = _venv_root(python)
    if venv is not None:  # the session runtime's site-packages, read-only; nothing else of the checkout
        args += ["--ro-bind", venv, venv]
    return args


def build_command(
    *,
    strategy: str,
    network_mode: str,
    session_id: str,
    workdir: str,
    req_fd: int,
    resp_fd: int,
    limits: Limits,
    python: str,
) -> WorkerCommand:
    """argv (and cwd) that start one worker under `strategy` (already resolved)."""
    worker = _worker_args(session_id, req_fd, resp_fd, limits)
    if strategy == "bwrap":
        argv = [
            "bwrap", "--die-with-parent", "--new-session",
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            *(_bwrap_user_args() or []),
            *(["--unshare-net"] if network_mode == "SANDBOX" else []),
            "--hostname", "sandbox",
            *_system_binds(python),
            "--ro-bind", str(WORKER_PATH), SANDBOX_WORKER_PATH,
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
            "--bind", workdir, SANDBOX_WORKDIR, "--chdir", SANDBOX_WORKDIR,
            "--clearenv",
            "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin",
            "--setenv", "HOME", SANDBOX_WORKDIR,
            "--setenv", "TMPDIR", "/tmp",
            "--setenv", "LANG", "C.UTF-8",
            "--setenv", "PYTHONIOENCODING", "utf-8",
            "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
            "--", python, "-I", SANDBOX_WORKER_PATH, *worker,
        ]
        return WorkerCommand(argv, workdir, _clean_env(SANDBOX_WORKDIR))
    if network_mode == "SANDBOX" and strategy != "unshare":
        raise IsolationUnavailable("SANDBOX network mode needs bwrap or unshare on this host")
    argv = [python, "-I", str(WORKER_PATH), *worker]
    if strategy == "unshare":
        prefix = _unshare_prefix() or ["unshare"]
        namespaces = ["--net"] if network_mode == "SANDBOX" else []
        argv = [*prefix, *namespaces, "--pid", "--fork", "--kill-child", "--", *argv]
    return WorkerCommand(argv, workdir, _clean_env(workdir))
