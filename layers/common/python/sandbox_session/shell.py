"""Shell commands INSIDE the session: a bash script run as a child of the session's
Python process, its output relayed through that process's `sys.stdout` / `sys.stderr`.

STDLIB ONLY and self-contained, like the rest of `sandbox_session`: a session cannot import our
packages, so the session runner ships this file's source with each command
(`sandbox_runtime.runner.commands`) and the job runtime writes it into the session beside its own
(`sandbox_runtime.runner.job_snippets`).

Why through the Python process: the in-session redactor (redaction's layer 1, `redactor.py`) wraps
`sys.stdout` / `sys.stderr` of the session's interpreter (and of a job's `run` process). A script
whose output went anywhere else — straight to fd 1, or through a command tool beside the kernel —
would leave the session unredacted. So the script's stdout and stderr are pipes read here and
written, as text, into those streams: every byte a command prints passes the same redactor as
Python output, and is counted as it leaves it.

The script runs as `bash /dev/fd/N`, the script on a pipe (never an argument, which Linux limits
to 128 KiB, and never stdin, which is /dev/null), in the caller's working directory and
environment (the session's: same files, PATH with the session's `python`, `python3` and `pip`
first), in its own process group, so that a deadline stops it with everything it started. Output
written before a deadline is kept: the script is stopped, what it wrote is relayed, and the
status is TIMED_OUT.

A command's processes end with its call, at its deadline or at its end: whatever it started and
left running (a `&` child, a daemon that left its process group with `setsid`, the copies of a
fork bomb) is killed before the call answers, so the next call of the turn finds the session as
the call found it. While the script runs, the calling process is a child subreaper: orphans of the
script stay in its process tree instead of moving to the session's init, so they can be found —
every process below the caller that was not there when the script started, and is not below a
process that was (an earlier call's own subprocess lives on). Work meant to outlive a call is a
background job.
"""

import base64
import codecs
import ctypes
import os
import selectors
import signal
import subprocess
import sys
import time
import types

TIMED_OUT = 124  # the status of a script stopped at its deadline (as coreutils' `timeout` reports it)
NOT_STARTED = 127  # bash could not be started (as a shell reports a command it cannot run)
# A background child of the script may hold an output pipe open after the script ended: what it
# writes within this grace is kept, then the relays stop writing (the next call's output is its own).
RELAY_GRACE_SECONDS = 0.5
# How often the relay loop looks whether bash ended while a pipe is still open (a background child).
POLL_SECONDS = 0.05
# How long the end of a call keeps killing what its script left (a fork bomb forks while it dies).
LEFTOVERS_BOUND_SECONDS = 5.0
_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37
CALL_START_MODULE = "_sbx_call"  # sandbox_common.naming.CALL_START_MODULE (this file imports nothing of ours)


def _find_bash():
    for candidate in ("/usr/bin/bash", "/bin/bash"):
        if os.access(candidate, os.X_OK):
            return candidate
    return "bash"


BASH = _find_bash()  # the system's (read-only) bash, never one a session put on its PATH


def _push(stream):
    """Let out what a stream holds as far as it is safe now: a redacting stream keeps its rolling
    hold-back (a token still being written is never split), then its target is flushed; any
    other stream is flushed. A background job's output is then in its file while it runs."""
    text, drain, target = getattr(stream, "_text", None), getattr(stream, "_drain", None), None
    try:
        if text is not None and callable(drain):
            text.flush()
            drain(False)
            target = getattr(stream, "_out", None)
        else:
            target = stream
        if target is not None:
            target.flush()
    except Exception:  # a stream the caller's code broke: what it holds comes out at the end, or never
        pass


class _Relay:
    """One output pipe copied into a text stream as UTF-8 text (invalid bytes replaced, as Python's
    own output would be), pushed on after each read (`_push`)."""

    def __init__(self, fd, stream):
        self.fd, self.stream = fd, stream
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def _write(self, text):
        if text:
            try:
                self.stream.write(text)
            except Exception:  # a stream the caller's code broke: the output is dropped, not raised
                pass

    def read(self):
        """Copy what the pipe holds now; False at its end."""
        chunk = os.read(self.fd, 65536)
        self._write(self.decoder.decode(chunk, final=not chunk))
        _push(self.stream)
        return bool(chunk)


def run(script, deadline_s=None, out=None, err=None, start=None, name="bash"):
    """Run `script` (bytes) to its end or its deadline; its output into `out` / `err` (default:
    this process's sys.stdout / sys.stderr). Returns its status as a shell reports it (128 +
    signal when killed), TIMED_OUT when stopped at the deadline, NOT_STARTED when bash could not
    start.

    `start` (default `launch`, bash) starts the program and answers what `launch` answers: another
    interpreter reading its program from the pipe (`sandbox_session.node` starts Node.js so), run
    and relayed the same way; `name` is what the not-started message calls it.

    One thread does everything (feeding the script, relaying both streams) with one selector: no
    thread hand-offs, whose GIL switches would cost more than starting bash."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    before, reaper = processes_below(), subreaper(True)
    try:
        return _run(script, deadline_s, out, err, start, name, before)
    finally:
        end_leftovers(before)
        subreaper(reaper)


def _run(script, deadline_s, out, err, start, name, before):
    try:
        proc, script_w, out_r, err_r = (start or launch)()
    except OSError as exc:
        err.write(f"{name} could not be started: {exc}\n")
        return NOT_STARTED
    # The program's process may have been started ahead of the call (a waiting Node.js): it and
    # what it starts are the call's all the same, not spared as what was there before.
    started = _stat(proc.pid)
    if started is not None:
        before.discard((proc.pid, started[1]))
    os.set_blocking(script_w, False)
    pending = memoryview(script)
    selector = selectors.DefaultSelector()
    relays = {out_r: _Relay(out_r, out), err_r: _Relay(err_r, err)}
    for fd in relays:
        selector.register(fd, selectors.EVENT_READ)
    if pending:
        selector.register(script_w, selectors.EVENT_WRITE)
    else:
        os.close(script_w)
        script_w = -1
    started = time.monotonic()
    deadline = None if deadline_s is None else started + deadline_s
    timed_out, grace_ends = False, None
    try:
        while selector.get_map():
            now = time.monotonic()
            if deadline is not None and now >= deadline and not timed_out:
                timed_out = True
                _kill(proc)
                grace_ends = now + RELAY_GRACE_SECONDS
            if grace_ends is None and proc.poll() is not None:
                # bash ended; a background child of it may hold a pipe open: keep what it writes
                # within the grace, then stop (the next call's output is its own)
                grace_ends = now + RELAY_GRACE_SECONDS
            if grace_ends is not None and now >= grace_ends:
                break
            wait = POLL_SECONDS
            if deadline is not None and not timed_out:
                wait = min(wait, max(0.0, deadline - now))
            if grace_ends is not None:
                wait = min(wait, max(0.0, grace_ends - now))
            for key, _ in selector.select(wait):
                fd = key.fd
                if fd == script_w:
                    try:
                        pending = pending[os.write(fd, pending) :]
                    except OSError:  # the script ended without reading all of itself
                        pending = pending[:0]
                    if not pending:
                        selector.unregister(fd)
                        os.close(fd)
                        script_w = -1
                elif not relays[fd].read():
                    selector.unregister(fd)
    finally:
        selector.close()
        for fd in (script_w, *relays):  # each once
            if fd >= 0:
                os.close(fd)
    try:  # both pipes ended; bash may still run (it closed them): its deadline still holds
        code = proc.wait(None if deadline is None or timed_out else max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill(proc)
        timed_out, code = True, proc.wait()
    for stream in (out, err):
        try:
            stream.flush()
        except Exception:
            pass
    if timed_out:
        return TIMED_OUT
    return status(code)


def launch():
    """Start bash on a script it reads from a pipe (`bash /dev/fd/N`): stdin /dev/null, this
    process's working directory and environment, a process group of its own. Returns (proc,
    script_w, out_r, err_r): the caller writes the script into script_w and closes it, and reads
    the script's stdout / stderr from out_r / err_r. Raises OSError, every pipe closed, when bash
    could not be started."""
    script_r, script_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        proc = subprocess.Popen(
            [BASH, f"/dev/fd/{script_r}"],
            stdin=subprocess.DEVNULL,
            stdout=out_w,
            stderr=err_w,
            pass_fds=(script_r,),
            start_new_session=True,
        )
    except OSError:
        for fd in (script_r, script_w, out_r, out_w, err_r, err_w):
            os.close(fd)
        raise
    for fd in (script_r, out_w, err_w):
        os.close(fd)
    return proc, script_w, out_r, err_r


def status(returncode):
    """A process's exit status as a shell reports it (128 + signal when killed)."""
    return returncode if returncode >= 0 else 128 - returncode


def _kill(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# --- a call's processes end with it ------------------------------------------------------------
def _stat(pid):
    """(parent pid, start time in clock ticks, zombie) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ')'.
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[1]), int(fields[19]), fields[0] == b"Z"
    except (IndexError, ValueError):
        return None


def _table():
    """pid -> (parent pid, start time, zombie) of every process this one can see."""
    table = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if name.isdigit():
            found = _stat(int(name))
            if found is not None:
                table[int(name)] = found
    return table


def processes_below(root=None, table=None, spare=frozenset()):
    """{(pid, start time)} of the processes below `root` (default: this one), zombies included,
    leaving out every process of `spare` and what is below it."""
    root = os.getpid() if root is None else root
    table = _table() if table is None else table
    children = {}
    for pid, (parent, started, _) in table.items():
        children.setdefault(parent, []).append((pid, started))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in spare:
                found.add(child)
                todo.append(child[0])
    return found


def end_leftovers(before, pgid=None):
    """Kill every process below this one that was not there at `before` (a processes_below()),
    nor is below one that was, until none is left or LEFTOVERS_BOUND_SECONDS passed; reap those
    that became our children. `pgid`: a process group to kill first (a script's)."""
    me, deadline = os.getpid(), time.monotonic() + LEFTOVERS_BOUND_SECONDS
    while True:
        if pgid is not None:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pgid = None  # the group is gone: nothing can join it any more
        table = _table()
        left = processes_below(me, table, spare=before)
        alive = [pid for pid, _ in left if not table[pid][2]]
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for pid, _ in left:
            if table[pid][0] == me:  # an orphan re-parented to us (a subreaper), or our own child
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
        if not left or time.monotonic() >= deadline:
            return
        time.sleep(0.01)


def subreaper(on):
    """Make this process a child subreaper (True) or set it back (what this returned before);
    returns what it was. Without prctl (not Linux) the process group kill alone applies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        was = ctypes.c_int(0)
        libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(was), 0, 0, 0)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, int(bool(on)), 0, 0, 0)
        return bool(was.value)
    except (OSError, AttributeError):
        return False


def _mark_call_start():
    """Record when this call started, on the session's clock: the artifact collector returns the
    files changed under outputs/ since then with this call, not with a background job."""
    module = sys.modules.get(CALL_START_MODULE)
    if module is None:
        module = types.ModuleType(CALL_START_MODULE)
        sys.modules[CALL_START_MODULE] = module
    module.started_ns = time.time_ns()


def main(script_b64, deadline_s=None):
    """A command in the session's kernel: run the script, end like a process with its status."""
    _mark_call_start()
    status = run(base64.b64decode(script_b64), deadline_s)
    if status:
        raise SystemExit(status)
