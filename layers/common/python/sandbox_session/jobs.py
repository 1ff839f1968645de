"""Background jobs INSIDE the sandbox (docs/jobs.md): a supervisor process per job.

STDLIB ONLY and self-contained, like `sandbox_session/redactor.py`: `job_snippets` ships this
file's source (with the redaction catalogue and the stdio redactor) into the session, which
cannot import our packages. It is importable on the host too, so tests run the very same code.

Why a supervisor inside the session: a job may run for up to an hour, longer than any Lambda
invocation, so nothing on the host can hold it. The session's kernel starts

    python <root>/runtime.py supervise <job dir>      (its own session/process group)

which starts the job itself as

    python <root>/runtime.py run <job dir>            (its own process group)

with the job's stdout/stderr going to files in the job dir. The `run` process installs the
in-sandbox stdio redactor (redaction's layer 1; the job is a new process, the kernel's redactor does
not reach it), with the turn's registered values and the session's own egress proxy credential
from its environment, and refuses to run the code when it cannot, then runs the code byte-exact from
`code.py`. The supervisor enforces `timeout_s` with its own clock — no Lambda needs to be alive.
A shell script or Node.js program is stopped at that deadline by the `run` process itself (told it
in SANDBOX_JOB_DEADLINE), which relays and flushes what the program wrote before, so a job that
times out keeps its output so far; then, or at the deadline for Python code, on cancel (SIGTERM
to the supervisor) or at the job's end, the supervisor kills the job's whole process
tree (process group, then every remaining descendant: the supervisor is a child subreaper, so
orphans of the job are re-parented to it). It then writes `state.json` atomically (write + rename).

State file: {"job_id", "state": running|completed|failed|timed_out|cancelled, "pid",
"supervisor_pid", "started_at", "started_ns", "ended_at", "duration_ms", "exit_code", "timeout_s",
"outputs"}; times are epoch seconds (float; `started_ns` integer nanoseconds) of the session's
clock.

The job's files (`outputs` in its final state: relative path -> [size, mtime_ns]) are the regular
files under the session's `outputs/` that changed while it ran: the supervisor lists `outputs/`
before it starts the job and again once the job's processes are gone, and keeps what differs,
less what a foreground call of the session already returned at that same size and time (the
foreground collector's state file, whose path the spec names) and what another job that ended
first claimed. A Python job's matplotlib figures still open at its end are saved there first, as
`figure-N.png`. The host reads them with the job's final answer; the foreground collector leaves
them to the job (functions/sandbox_runtime/artifacts.py).

Everything here runs with the session's own privileges: code in the session could tamper with
its own job's files or kill its own supervisor. That falsifies nothing but its own result, which
the host still redacts, truncates and bounds: dispatch ends a job whose deadline (+ a grace) has
passed without a final state by stopping the session (see functions/dispatch/jobs.py).
"""

import ast
import builtins
import ctypes
import json
import linecache
import os
import signal
import stat
import subprocess
import sys
import time
import traceback
import urllib.parse

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
BASH = "bash"  # the `language` of a shell script
NODE_LANGUAGES = ("javascript", "typescript")  # a Node.js program's; anything else is Python

RUNNING = "running"
COMPLETED = "completed"
FAILED = "failed"
TIMED_OUT = "timed_out"
CANCELLED = "cancelled"
TERMINAL_STATES = (COMPLETED, FAILED, TIMED_OUT, CANCELLED)

# A shell script's or Node.js program's job is stopped at its deadline by its own `run` process,
# which then relays and flushes what the program wrote (the redactor holds back the tail of a
# stream until it knows no token continues there): the supervisor's hard stop waits this long more.
# The `run` process learns the deadline (CLOCK_MONOTONIC, shared by the session's processes) here.
RELAYED_STOP_GRACE_SECONDS = 2.0
ENV_JOB_DEADLINE = "SANDBOX_JOB_DEADLINE"
RELAY_TIMED_OUT = 124  # shell.TIMED_OUT / node.TIMED_OUT: the status of a program stopped at its deadline
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


# --- the job's files ---------------------------------------------------------------------------
def snapshot(directory):
    """Relative path -> [size, mtime_ns] of every regular file under `directory` (symlinks are
    not followed nor listed); {} when it does not exist."""
    found = {}
    for root, dirs, files in os.walk(directory, followlinks=False):
        dirs.sort()
        for name in files:
            full = os.path.join(root, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                found[os.path.relpath(full, directory)] = [st.st_size, st.st_mtime_ns]
    return found


def _claimed_by_others(job_dir):
    """Files other jobs of the session, already ended, returned: path -> [size, mtime_ns]."""
    claimed = {}
    root = os.path.dirname(job_dir)
    try:
        names = os.listdir(root)
    except OSError:
        return claimed
    for name in names:
        other = os.path.join(root, name)
        if other == job_dir or not os.path.isdir(other):
            continue
        state = read_json(os.path.join(other, STATE_FILE)) or {}
        if state.get("state") in TERMINAL_STATES and isinstance(state.get("outputs"), dict):
            claimed.update(state["outputs"])
    return claimed


def job_outputs(spec, job_dir, before):
    """The job's files: changed under outputs/ since `before`, not returned by a foreground call,
    not claimed by another job."""
    cwd = spec.get("cwd") or os.getcwd()
    outputs = spec.get("outputs_dir")
    if not outputs:
        return {}
    changed = {rel: st for rel, st in snapshot(os.path.join(cwd, outputs)).items() if before.get(rel) != st}
    if not changed:
        return {}
    returned = (
        read_json(os.path.join(cwd, spec.get("calls_state") or "")) if spec.get("calls_state") else None
    )
    returned = returned if isinstance(returned, dict) else {}
    claimed = _claimed_by_others(job_dir)
    return {
        rel: st
        for rel, st in changed.items()
        if list(returned.get(rel) or [])[:2] != st and claimed.get(rel) != st
    }


def _save_figures(outputs_dir, figure_name):
    """Open matplotlib figures of the job's process, saved under outputs/ as a call's are."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None or not outputs_dir or not figure_name:
        return
    try:
        numbers = plt.get_fignums()
        if not numbers:
            return
        os.makedirs(outputs_dir, exist_ok=True)
        for num in numbers:
            k = num
            while os.path.exists(os.path.join(outputs_dir, figure_name.format(n=k))):
                k += 1
            plt.figure(num).savefig(os.path.join(outputs_dir, figure_name.format(n=k)), format="png")
        plt.close("all")
    except Exception:  # a figure that cannot be saved is not the job's failure
        traceback.print_exc()


# --- supervise --------------------------------------------------------------------------------
def supervise(job_dir):
    spec = read_json(os.path.join(job_dir, SPEC_FILE)) or {}
    timeout_s = float(spec.get("timeout_s") or 900)
    state_path = os.path.join(job_dir, STATE_FILE)
    _become_subreaper()
    cancelled = []
    signal.signal(signal.SIGTERM, lambda *_: cancelled.append(True))
    runtime = os.path.join(os.path.dirname(job_dir), RUNTIME_FILE)
    outputs_dir = spec.get("outputs_dir")
    before = snapshot(os.path.join(spec.get("cwd") or os.getcwd(), outputs_dir)) if outputs_dir else {}
    started_ns = time.time_ns()
    started = started_ns / 1e9
    deadline = time.monotonic() + timeout_s
    relayed = spec.get("language") in (BASH, *NODE_LANGUAGES)
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
            env={**os.environ, ENV_JOB_DEADLINE: repr(deadline)},
        )
    state = {
        "job_id": spec.get("job_id"),
        "state": RUNNING,
        "pid": child.pid,
        "supervisor_pid": os.getpid(),
        "started_at": started,
        "started_ns": started_ns,
        "timeout_s": timeout_s,
    }
    write_json_atomic(state_path, state)
    hard_stop = deadline + (RELAYED_STOP_GRACE_SECONDS if relayed else 0.0)
    final = None
    while final is None:
        code = child.poll()
        if code is not None:
            stopped_itself = relayed and code == RELAY_TIMED_OUT and time.monotonic() >= deadline
            final = TIMED_OUT if stopped_itself else COMPLETED if code == 0 else FAILED
        elif cancelled:
            final = CANCELLED
        elif time.monotonic() >= hard_stop:
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
    try:
        outputs = job_outputs(spec, job_dir, before)
    except Exception:  # noqa: BLE001 - the job's end is recorded whatever its files are
        outputs = {}
    state.update(
        state=final,
        exit_code=code,
        ended_at=ended,
        duration_ms=int(round((ended - started) * 1000)),
        outputs=outputs,
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


def _body(code, namespace):
    """Run the job's code as a notebook cell: a trailing expression is shown (its repr on
    sys.stdout, through the redactor, counted like any output), as a foreground call shows it."""
    tree = ast.parse(code, filename=_CELL, mode="exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(body=tree.body.pop().value)
    exec(compile(tree, _CELL, "exec", dont_inherit=True), namespace)
    if last is not None:
        sys.displayhook(eval(compile(last, _CELL, "eval", dont_inherit=True), namespace))


def _until_deadline():
    """Seconds left to the job's deadline (its supervisor's), or None when it gave none: the
    program is then stopped there by this process, which relays what it wrote first."""
    try:
        # taken out of the environment: the program runs in this process's environment
        return max(0.0, float(os.environ.pop(ENV_JOB_DEADLINE)) - time.monotonic())
    except (KeyError, ValueError):
        return None


def _proxy_secrets():
    """The secret of the session's own egress proxy credential, as the environment this process
    inherits carries it (an allowlist session's HTTPS_PROXY, `http://SESSION_ID:SECRET@HOST:PORT`):
    the readiness call registered it with the kernel's redactor only, and no submit knows it."""
    found = []
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        try:
            secret = urllib.parse.urlsplit(os.environ.get(name, "")).password
        except ValueError:
            continue
        if secret:
            found += [secret, urllib.parse.unquote(secret)]
    return tuple(dict.fromkeys(found))


def run(job_dir):
    spec = read_json(os.path.join(job_dir, SPEC_FILE)) or {}
    values = (*(spec.get("values") or ()), *_proxy_secrets())
    if not _install_redactor(os.path.dirname(job_dir), values):
        os.write(2, b"The job was not run: the output redactor could not be installed.\n")
        return REDACTOR_UNAVAILABLE_EXIT_CODE
    if spec.get("language") == BASH:  # a shell script: bash's output through the redactor just installed
        shell = _load("_sbx_shell", os.path.join(os.path.dirname(job_dir), SHELL_RUNTIME_FILE))
        with open(os.path.join(job_dir, CODE_FILE), "rb") as fh:
            return shell.run(fh.read(), _until_deadline())
    if spec.get("language") in NODE_LANGUAGES:  # a Node.js program: its output through that redactor too
        root = os.path.dirname(job_dir)
        shell = _load("_sbx_shell", os.path.join(root, SHELL_RUNTIME_FILE))
        node = _load("_sbx_node", os.path.join(root, NODE_RUNTIME_FILE))
        with open(os.path.join(job_dir, CODE_FILE), "rb") as fh:
            return node.run(shell, fh.read(), spec["language"], _until_deadline())
    with open(os.path.join(job_dir, CODE_FILE), encoding="utf-8") as fh:
        code = fh.read()
    linecache.cache[_CELL] = (len(code), None, code.splitlines(True), _CELL)
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    reserve = bytearray(1 << 20)  # freed on MemoryError so the traceback can still be printed
    exit_code = 0
    try:
        _body(code, namespace)
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
    outputs_dir = spec.get("outputs_dir")
    _save_figures(outputs_dir and os.path.join(os.getcwd(), outputs_dir), spec.get("figure_name"))
    return exit_code


def main(argv):
    if len(argv) != 3 or argv[1] not in ("supervise", "run"):
        sys.stderr.write("usage: runtime.py supervise|run JOB_DIR\n")
        return 2
    return supervise(argv[2]) if argv[1] == "supervise" else run(argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
