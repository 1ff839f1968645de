"""Background jobs INSIDE the sandbox (SPEC §17): a supervisor process per job.

STDLIB ONLY and self-contained, like `sandbox_session/redactor.py`: `job_snippets` ships this
file's source (with the redaction catalogue and the stdio redactor) into the session, which
cannot import our packages. It is importable on the host too, so tests run the very same code.

Why a supervisor inside the session: a job may run for up to an hour, longer than any Lambda
invocation, so nothing on the host can hold it. The session's kernel starts

    python <root>/runtime.py supervise <job dir>      (its own session/process group)

which starts the job itself as

    python <root>/runtime.py run <job dir>            (its own process group)

with the job's stdout/stderr going to files in the job dir. The `run` process installs the
in-sandbox stdio redactor (SPEC §8 layer 1; the job is a new process, the kernel's redactor does
not reach it) and refuses to run the code when it cannot, then runs the code byte-exact from
`code.py`. The supervisor enforces `timeout_s` with its own clock — no Lambda needs to be alive —
and on timeout, cancel (SIGTERM to the supervisor) or the job's end kills the job's whole process
tree (process group, then every remaining descendant: the supervisor is a child subreaper, so
orphans of the job are re-parented to it). It then writes `state.json` atomically (write + rename).

State file: {"job_id", "state": running|completed|failed|timed_out|cancelled, "pid",
"supervisor_pid", "started_at", "ended_at", "duration_ms", "exit_code", "timeout_s"}; times are
epoch seconds (float) of the session's clock.

Everything here runs with the session's own privileges: code in the session could tamper with
its own job's files or kill its own supervisor. That falsifies nothing but its own result, which
the host still redacts, truncates and bounds: dispatch ends a job whose deadline (+ a grace) has
passed without a final state by stopping the session (see functions/dispatch/jobs.py).
"""

import builtins
import ctypes
import json
import linecache
import os
import signal
import subprocess
import sys
import time
import traceback

STATE_FILE = "state.json"
SPEC_FILE = "job.json"
CODE_FILE = "code.py"
STDOUT_FILE = "stdout"
STDERR_FILE = "stderr"
CATALOGUE_FILE = "catalogue.py"
STDIO_RUNTIME_FILE = "stdio_runtime.py"
SHELL_RUNTIME_FILE = "shell.py"
NODE_RUNTIME_FILE = "node.py"
RUNTIME_FILE = "runtime.py"
BASH = "bash"  # the spec's `language` of a shell script (SPEC §20)
NODE_LANGUAGES = ("javascript", "typescript")  # a Node.js program's; anything else is Python

RUNNING = "running"
COMPLETED = "completed"
FAILED = "failed"
TIMED_OUT = "timed_out"
CANCELLED = "cancelled"
TERMINAL_STATES = (COMPLETED, FAILED, TIMED_OUT, CANCELLED)

OOM_EXIT_CODE = 137
REDACTOR_UNAVAILABLE_EXIT_CODE = 70  # EX_SOFTWARE: the code did not run
POLL_SECONDS = 0.05
KILL_SETTLE_SECONDS = 2.0
_PR_SET_CHILD_SUBREAPER = 36
_CELL = "<job>"


# --- files ------------------------------------------------------------------------------------
def write_json_atomic(path, data):
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_json(path):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


# --- process trees ----------------------------------------------------------------------------
def _parent_of(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may contain spaces and parentheses, so split after the last ')'.
    rest = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(rest[1]) if rest[0] != b"Z" else None  # a zombie is already gone
    except (IndexError, ValueError):
        return None


def descendants(root_pid):
    """Live (non-zombie) descendants of root_pid, from /proc."""
    children = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if name.isdigit():
            parent = _parent_of(int(name))
            if parent is not None:
                children.setdefault(parent, []).append(int(name))
    found, todo = [], [root_pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def kill_tree(child, root_pid):
    """SIGKILL the job's process group (`child` leads it) and every descendant of `root_pid`
    (the supervisor, a subreaper) until none is left or KILL_SETTLE_SECONDS passed."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        child.wait(timeout=KILL_SETTLE_SECONDS)  # collect its status before reaping the rest
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + KILL_SETTLE_SECONDS
    while True:
        alive = descendants(root_pid)
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _reap_all()
        if not alive or time.monotonic() >= deadline:
            return
        time.sleep(0.02)


def _reap_all():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _become_subreaper():
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the process group kill still applies
        pass


# --- supervise --------------------------------------------------------------------------------
def supervise(job_dir):
    spec = read_json(os.path.join(job_dir, SPEC_FILE)) or {}
    timeout_s = float(spec.get("timeout_s") or 900)
    state_path = os.path.join(job_dir, STATE_FILE)
    _become_subreaper()
    cancelled = []
    signal.signal(signal.SIGTERM, lambda *_: cancelled.append(True))
    runtime = os.path.join(os.path.dirname(job_dir), RUNTIME_FILE)
    started = time.time()
    with (
        open(os.path.join(job_dir, STDOUT_FILE), "wb") as out,
        open(os.path.join(job_dir, STDERR_FILE), "wb") as err,
    ):
        child = subprocess.Popen(
            [sys.executable, runtime, "run", job_dir],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            cwd=spec.get("cwd") or None,
            start_new_session=True,
        )
    state = {
        "job_id": spec.get("job_id"),
        "state": RUNNING,
        "pid": child.pid,
        "supervisor_pid": os.getpid(),
        "started_at": started,
        "timeout_s": timeout_s,
    }
    write_json_atomic(state_path, state)
    deadline = time.monotonic() + timeout_s
    final = None
    while final is None:
        code = child.poll()
        if code is not None:
            final = COMPLETED if code == 0 else FAILED
        elif cancelled:
            final = CANCELLED
        elif time.monotonic() >= deadline:
            final = TIMED_OUT
        else:
            time.sleep(POLL_SECONDS)
    # Whatever the outcome, nothing the job started outlives it.
    code = child.poll()
    kill_tree(child, os.getpid())
    if final in (TIMED_OUT, CANCELLED):
        code = None  # we killed it: its exit status says nothing about the code
    elif code is not None and code < 0:
        code = 128 - code  # killed by a signal (OOM killer, its own kill): SIGKILL -> 137
    ended = time.time()
    state.update(
        state=final, exit_code=code, ended_at=ended, duration_ms=int(round((ended - started) * 1000))
    )
    write_json_atomic(state_path, state)
    return 0


# --- run --------------------------------------------------------------------------------------
def _load(name, path):
    import types

    module = types.ModuleType(name)
    sys.modules[name] = module  # dataclasses look their module up here
    with open(path, encoding="utf-8") as fh:
        exec(compile(fh.read(), "<" + name + ">", "exec"), module.__dict__)
    return module


def _install_redactor(root, values):
    try:
        catalogue = _load("_sbx_redaction_catalogue", os.path.join(root, CATALOGUE_FILE))
        runtime = _load("_sbx_stdio_runtime", os.path.join(root, STDIO_RUNTIME_FILE))
        runtime.install(catalogue, values)
        return bool(runtime.installed())
    except Exception:
        return False


def _user_tb(tb):
    while tb is not None and tb.tb_frame.f_code.co_filename != _CELL:
        tb = tb.tb_next
    return tb


def run(job_dir):
    spec = read_json(os.path.join(job_dir, SPEC_FILE)) or {}
    if not _install_redactor(os.path.dirname(job_dir), tuple(spec.get("values") or ())):
        os.write(2, b"The job was not run: the output redactor could not be installed.\n")
        return REDACTOR_UNAVAILABLE_EXIT_CODE
    if spec.get("language") == BASH:  # a shell script: bash's output through the redactor just installed
        shell = _load("_sbx_shell", os.path.join(os.path.dirname(job_dir), SHELL_RUNTIME_FILE))
        with open(os.path.join(job_dir, CODE_FILE), "rb") as fh:
            return shell.run(fh.read())
    if spec.get("language") in NODE_LANGUAGES:  # a Node.js program: its output through that redactor too
        root = os.path.dirname(job_dir)
        shell = _load("_sbx_shell", os.path.join(root, SHELL_RUNTIME_FILE))
        node = _load("_sbx_node", os.path.join(root, NODE_RUNTIME_FILE))
        with open(os.path.join(job_dir, CODE_FILE), "rb") as fh:
            return node.run(shell, fh.read(), spec["language"])
    with open(os.path.join(job_dir, CODE_FILE), encoding="utf-8") as fh:
        code = fh.read()
    linecache.cache[_CELL] = (len(code), None, code.splitlines(True), _CELL)
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    reserve = bytearray(1 << 20)  # freed on MemoryError so the traceback can still be printed
    exit_code = 0
    try:
        exec(compile(code, _CELL, "exec"), namespace)
    except SystemExit as exc:
        if exc.code is None:
            exit_code = 0
        elif isinstance(exc.code, int):
            exit_code = exc.code & 0xFF
        else:
            print(exc.code, file=sys.stderr)
            exit_code = 1
    except MemoryError as exc:
        del reserve
        traceback.print_exception(type(exc), exc, _user_tb(exc.__traceback__))
        exit_code = OOM_EXIT_CODE
    except BaseException as exc:
        traceback.print_exception(type(exc), exc, _user_tb(exc.__traceback__))
        exit_code = 1
    return exit_code


def main(argv):
    if len(argv) != 3 or argv[1] not in ("supervise", "run"):
        sys.stderr.write("usage: runtime.py supervise|run JOB_DIR\n")
        return 2
    return supervise(argv[2]) if argv[1] == "supervise" else run(argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
