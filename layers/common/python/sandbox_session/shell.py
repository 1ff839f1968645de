"""Shell commands INSIDE the session (SPEC §20): a bash script run as a child of the session's
Python process, its output relayed through that process's `sys.stdout` / `sys.stderr`.

STDLIB ONLY and self-contained, like the rest of `sandbox_session`: a session cannot import our
packages, so the session runner ships this file's source with each command
(`sandbox_runtime.runner.commands`) and the job runtime writes it into the session beside its own
(`sandbox_runtime.runner.job_snippets`).

Why through the Python process: the in-session redactor (SPEC §8 layer 1) wraps `sys.stdout` /
`sys.stderr` of the session's interpreter (and of a job's `run` process). A script whose output
went anywhere else — straight to fd 1, or through a command tool beside the kernel — would leave
the session unredacted. So the script's stdout and stderr are pipes read here and written, as
text, into those streams: every byte a command prints passes the same redactor as Python output,
and is counted as it leaves it.

The script runs as `bash /dev/fd/N`, the script on a pipe (never an argument, which Linux limits
to 128 KiB, and never stdin, which is /dev/null), in the caller's working directory and
environment (the session's: same files, PATH with the session's `python`, `python3` and `pip`
first), in its own process group, so that a deadline stops it with everything it started. Output
written before a deadline is kept: the script is stopped, what it wrote is relayed, and the
status is TIMED_OUT.
"""

import base64
import codecs
import os
import selectors
import signal
import subprocess
import sys
import time

TIMED_OUT = 124  # the status of a script stopped at its deadline (as coreutils' `timeout` reports it)
NOT_STARTED = 127  # bash could not be started (as a shell reports a command it cannot run)
# A background child of the script may hold an output pipe open after the script ended: what it
# writes within this grace is kept, then the relays stop writing (the next call's output is its own).
RELAY_GRACE_SECONDS = 0.5
# How often the relay loop looks whether bash ended while a pipe is still open (a background child).
POLL_SECONDS = 0.05


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
    try:
        proc, script_w, out_r, err_r = (start or launch)()
    except OSError as exc:
        err.write(f"{name} could not be started: {exc}\n")
        return NOT_STARTED
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


def main(script_b64, deadline_s=None):
    """A command in the session's kernel: run the script, end like a process with its status."""
    status = run(base64.b64decode(script_b64), deadline_s)
    if status:
        raise SystemExit(status)
