"""One Code Interpreter session: a persistent Python process that runs code and commands on request.

This file is executed *inside* the sandbox (bubblewrap) as a script, so it is stdlib-only and
imports nothing from the project. The server imports it only for the frame helpers
(`send_frame`, `recv_frame`, `Frame`), which both sides must agree on. Commands start bash with
the session runtime's own launch (`sandbox_session.shell.launch`), which the worker loads from
that module's source file (`--shell`, bound read-only into the sandbox beside this one).

Protocol: requests and answers are frames on two dedicated pipe fds, never on stdout/stderr, so
nothing user code prints can corrupt the channel: [u32 big-endian JSON length][u32 raw length]
[ASCII JSON][raw part], the raw part a sequence of blocks, each [u32 length][bytes]. The first
frame the worker sends is `{"ready": true, "pid": ...}`. Each request carries the server's
sequence number `seq` and its answer carries it back, so an answer is only ever taken for the call
that asked: a frame left in the channel (written there by user code) is off by at least one. An
answer's JSON holds scalars and short messages only (at most MAX_JSON); its raw blocks hold what
may be large:
- executeCode, executeCommand and the task tools: two blocks, the kept stdout and stderr bytes
  (at most --stdout-kept / --stderr-kept: the caps plus a redaction margin), the exact counts in
  the JSON;
- readFiles / listFiles: one block per file or entry, each a content block already encoded as
  JSON, which the server sends as its own event without parsing it (a 20 MiB readFiles answer is
  JSON-encoded once, here, and decoded once, by the client).
The worker shares its process with user code, which can write to these fds too: the server reads
every length against its bound before it reads what follows, and a frame outside the bounds ends
the session (sessions.py). The raw part is as trustworthy as every other answer of the session.

Semantics copied from AgentCore (a Jupyter-like kernel):
- one globals dict for the whole session: variables and imports survive between calls;
- a trailing expression is displayed (`sys.displayhook`, through `sys.stdout`), as a notebook cell
  does, and counted like any other output;
- an uncaught exception gives exit code 1 and the traceback (user frames only) on stderr;
  `sys.exit(n)` gives n; the session survives both;
- `MemoryError` reaching the top level is an uncaught exception like any other (exit code 1, its
  traceback on stderr, classified `oom` from it): Python caught it, so the session and its
  variables survive. A process the kernel's OOM killer (or anything else) kills ends the session.

Output is captured at the file-descriptor level (fd 1 / fd 2 point at per-call pipes), so output
of subprocesses and C extensions is captured too, and `sys.stdout` / `sys.stderr` stay the *same
objects* across calls: the readiness preamble (SPEC §6.2) wraps them once and the wrapper must
still be in place for every later call. The byte counts are of what reaches fd 1 / fd 2, i.e. of
what left the in-session redactor (SPEC §22).

Commands (the wire contract a session runner uses for a shell script, SPEC §20):
`InvokeCodeInterpreter(name="executeCommand", arguments={"command": <script, byte-exact>})`. The
script runs to its end with the system's bash (`bash /dev/fd/N`: the script travels on a pipe, so
it is never an argument, limited to 128 KiB, nor stdin, which is /dev/null) as a child of this
process, in its current directory and with its environment: the same working directory, files,
PATH (the session's Python layer first: `python`, `python3`, `pip` are the ones code runs on) and
isolation as code. Its stdout / stderr are relayed through this process's `sys.stdout` /
`sys.stderr`, so through the in-session redactor exactly as Python output is, and counted as they
leave it. The answer is executeCode's: stdout, stderr, exitCode (bash's status, 128 + signal when
killed), isError iff exitCode != 0, the exact byte counts. `startCommandExecution` runs the same
way in the background (its own process group): the answer carries taskId and taskStatus
`working`; `getTask` answers the output so far (redacted by a copy of the session's redactor,
pushed out as it is written, never splitting a token), then `completed` / `failed` with exitCode;
`stopTask` kills the task and everything it started (`canceled`). What an executeCommand's
script leaves running ends with its call, as for a command dispatch sends
(`sandbox_session.shell.end_leftovers`).
"""

from __future__ import annotations

import argparse
import ast
import base64
import builtins
import codecs
import contextlib
import fcntl
import importlib
import io
import json
import linecache
import os
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
import traceback
import types
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

# Frames from the worker are read by the server under these bounds before anything is buffered:
# the JSON part holds scalars and short messages only, output travels as raw blocks of at most
# the kept bytes per stream (the server's limits), a file tool's blocks are streamed on.
MAX_JSON = 64 * 1024
# A request the server sends (trusted): writeFiles carries inline uploads.
MAX_REQUEST = 256 * 1024 * 1024
# readFiles: one file per answer up to this size (base64 + JSON stays one event-stream message
# the SDK's parser accepts); larger artifacts are read in parts (functions/dispatch/artifacts.py
# splits them in the session).
MAX_READ_BYTES = 32 * 1024 * 1024
MAX_BLOCK = MAX_READ_BYTES * 4 // 3 + 64 * 1024  # one readFiles block: base64 + its JSON wrapper
_CELL_PREFIX = "<cell-"  # user code cells are compiled as "<cell-N>"
_HEADER = struct.Struct(">II")  # JSON length, raw length
_BLOCK = struct.Struct(">I")  # each raw block: its length, then its bytes
BLOCK_HEADER = _BLOCK.size
# How long a call's end waits at most for a pipe reader that is never scheduled (see _join_all).
READERS_BOUND_SECONDS = 30.0
_READ_CHUNK = 65536  # one read of a capture or relay pipe


class ProtocolError(ValueError):
    """A frame that breaks the protocol or its bounds: the session behind it is not trusted again."""


# --- framing (shared with the server) ---------------------------------------------------------
def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def send_frame(fd: int, obj: Any, blocks: list[bytes] | tuple[bytes, ...] = ()) -> None:
    """One frame: `obj` as JSON, then each of `blocks` (length-prefixed) as the raw part."""
    # ensure_ascii (the default): ~2x faster to encode and to decode than UTF-8 for non-ASCII text.
    payload = json.dumps(obj).encode("ascii")
    raw_length = sum(_BLOCK.size + len(b) for b in blocks)
    head = _HEADER.pack(len(payload), raw_length) + payload
    if raw_length <= 65536:  # small: one write
        _write_all(fd, b"".join([head, *(_BLOCK.pack(len(b)) + b for b in blocks)]))
        return
    _write_all(fd, head)
    for block in blocks:  # large (file contents): no copy of a block to frame it
        _write_all(fd, _BLOCK.pack(len(block)))
        _write_all(fd, block)


def _read_exact(fd: int, n: int) -> bytes | None:
    buffer = bytearray(n)
    view, done = memoryview(buffer), 0
    while done < n:
        got = os.readv(fd, [view[done:]])
        if not got:
            return None
        done += got
    return bytes(buffer)


def recv_frame(fd: int, max_json: int = MAX_REQUEST) -> Frame | None:
    """The next frame's JSON part (its raw part still unread: `Frame.blocks`), or None at EOF.

    Both lengths are checked before anything is read: a JSON part over `max_json` is a
    ProtocolError, raised with nothing buffered."""
    header = _read_exact(fd, _HEADER.size)
    if header is None:
        return None
    length, raw_length = _HEADER.unpack(header)
    if length > max_json:
        raise ProtocolError(f"a frame's JSON part of {length} bytes exceeds {max_json}")
    payload = _read_exact(fd, length)
    if payload is None:
        return None
    try:
        obj = json.loads(payload.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # nested deeper than the parser goes is no frame either
        raise ProtocolError("a frame's JSON part does not parse") from exc
    if not isinstance(obj, dict):
        raise ProtocolError("a frame's JSON part is not an object")
    return Frame(fd, obj, raw_length)


class Frame:
    """A received frame: its JSON object, and its raw part to read block by block, bounded."""

    def __init__(self, fd: int, obj: dict[str, Any], raw_length: int) -> None:
        self.fd, self.obj, self.raw_length = fd, obj, raw_length
        self.remaining = raw_length

    def next_block(self, max_bytes: int) -> int | None:
        """The next block's length (its bytes are read with `read`), None when the raw part is
        done. A block over `max_bytes`, or past the announced raw length, is a ProtocolError."""
        if self.remaining == 0:
            return None
        if self.remaining < _BLOCK.size:
            raise ProtocolError("a raw part ends inside a block's length")
        head = _read_exact(self.fd, _BLOCK.size)
        if head is None:
            raise ProtocolError("the channel closed inside a frame")
        self.remaining -= _BLOCK.size
        (length,) = _BLOCK.unpack(head)
        if length > max_bytes or length > self.remaining:
            raise ProtocolError(f"a raw block of {length} bytes exceeds its bound ({max_bytes})")
        return length

    def read(self, n: int) -> bytes:
        data = _read_exact(self.fd, n) if n else b""
        if data is None:
            raise ProtocolError("the channel closed inside a frame")
        self.remaining -= n
        return data

    def read_pieces(self, n: int, piece: int = 1 << 20) -> Iterator[bytes]:
        """`n` bytes of the current block, in pieces of at most `piece` bytes (never all at once)."""
        while n:
            chunk = self.read(min(n, piece))
            n -= len(chunk)
            yield chunk

    def discard(self, max_block: int) -> None:
        """Read past whatever is left of the raw part (blocks still within `max_block`)."""
        while self.remaining:
            length = self.next_block(max_block)
            if length is None:
                return
            for _ in self.read_pieces(length):
                pass

    def blocks(self, limits: list[int]) -> list[bytes]:
        """Exactly the raw part's blocks, at most one per entry of `limits`, each within it."""
        found = []
        for limit in limits:
            length = self.next_block(limit)
            if length is None:
                break
            found.append(self.read(length))
        if self.remaining:
            raise ProtocolError("a frame carries more raw blocks than its answer has")
        return found


# --- limits -----------------------------------------------------------------------------------
def apply_limits(memory_mb: int, cpu_seconds: int, file_size_mb: int, max_processes: int = 0) -> None:
    """Soft == hard, set before any user code: inside bubblewrap the worker has no capabilities,
    so user code cannot raise them again. `max_processes` (RLIMIT_NPROC) counts every process and
    thread of the real uid, so it is set only when the session has a uid of its own."""
    import resource

    def _set(kind: int, soft: int, hard: int) -> None:
        _, cur_hard = resource.getrlimit(kind)
        if cur_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, cur_hard), min(hard, cur_hard)
        resource.setrlimit(kind, (soft, hard))

    if memory_mb > 0:
        _set(resource.RLIMIT_AS, memory_mb << 20, memory_mb << 20)
    if cpu_seconds > 0:
        # SIGXCPU at the soft limit, SIGKILL at the hard one.
        _set(resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + 2)
    if file_size_mb > 0:
        _set(resource.RLIMIT_FSIZE, file_size_mb << 20, file_size_mb << 20)
        # A write past the limit then fails with EFBIG in user code instead of killing the session.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    _set(resource.RLIMIT_CORE, 0, 0)
    if max_processes > 0:
        _set(resource.RLIMIT_NPROC, max_processes, max_processes)


# --- output capture ---------------------------------------------------------------------------
class _PipeReader(threading.Thread):
    """Reads one pipe to its EOF in a thread of its own, handing each chunk to `handle` (and EOF
    to `at_eof`) while holding `lock`, so `_join_all` can tell when every byte read is handled.
    After `keep` is cleared it reads on and drops what it reads, so a background child that still
    holds the pipe never blocks on a full pipe."""

    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd = fd
        self.keep = True
        self.lock = threading.Lock()
        self.consumed = 0  # bytes read and handled

    def handle(self, chunk: bytes) -> None:
        raise NotImplementedError

    def at_eof(self) -> None:
        pass

    def run(self) -> None:
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        try:
            while True:
                # Wait outside the lock; the read after it cannot block (this is the only reader).
                poller.poll()
                with self.lock:
                    chunk = os.read(self.fd, _READ_CHUNK)
                    if not chunk:
                        self.at_eof()
                        return
                    if self.keep:
                        self.handle(chunk)
                    self.consumed += len(chunk)
        finally:
            os.close(self.fd)


class _Drain(_PipeReader):
    """Reads one capture pipe: counts every byte, keeps the first `limit` (bounded memory)."""

    def __init__(self, fd: int, limit: int) -> None:
        super().__init__(fd)
        self.limit = limit
        self.buf = bytearray()
        self.total = 0  # every byte written to the pipe while kept

    def handle(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.limit - len(self.buf)
        if room > 0:
            self.buf += chunk[:room]


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # user code may have replaced a stream with anything
            pass


class Capture:
    """fd 1 and fd 2 point at fresh pipes for the duration of one call.

    `stdout_bytes` / `stderr_bytes` are exactly the bytes written to fd 1 / fd 2 during the call
    (by the code, its subprocesses and C extensions, and what `sys.stdout` / `sys.stderr` — the
    in-session redactor, once the readiness preamble installed it — let out), also beyond the
    kept limits. A trailing expression's repr is written through `sys.stdout` like any output.
    """

    def __init__(self, stdout_limit: int, stderr_limit: int) -> None:
        self.limits = (stdout_limit, stderr_limit)
        self.drains: list[_Drain] = []
        self.saved: list[int] = []

    def __enter__(self) -> Capture:
        _flush_std()
        for target, limit in zip((1, 2), self.limits, strict=True):
            self.saved.append(os.dup(target))
            r, w = os.pipe()
            os.dup2(w, target)
            os.close(w)
            drain = _Drain(r, limit)
            drain.start()
            self.drains.append(drain)
        return self

    def __exit__(self, *exc: object) -> None:
        _flush_std()
        for target, saved in zip((1, 2), self.saved, strict=True):
            os.dup2(saved, target)
            os.close(saved)
        # EOF arrives at once unless a background child still holds a pipe; do not wait for it
        # past one short shared deadline: keep (and count) what arrived, then drain to nothing.
        _join_all(self.drains)

    @property
    def blocks(self) -> list[bytes]:
        return [bytes(d.buf) for d in self.drains]

    @property
    def stdout_bytes(self) -> int:
        return self.drains[0].total

    @property
    def stderr_bytes(self) -> int:
        return self.drains[1].total


def _pipe_state(fd: int) -> tuple[int, bool]:
    """(bytes waiting in pipe `fd`, every writer gone); (0, True) once it is closed."""
    try:
        unread = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        hung_up = any(events & select.POLLHUP for _, events in poller.poll(0))
    except OSError:
        return 0, True
    return unread, hung_up


def _join_all(readers: Sequence[_PipeReader]) -> None:
    """Until each pipe reader has handled every byte in its pipe now, then it keeps nothing more.
    Waits on the readers' state, never on a clock window (a reader a loaded machine has not
    scheduled yet still gets its bytes): a reader is done at its EOF; when its pipe is empty but a
    background child still holds it (what the child writes later is not this call's); or once it
    has handled as many bytes as the pipe held when this began (that child writes without pause).
    READERS_BOUND_SECONDS bounds a reader that never runs at all."""
    deadline = time.monotonic() + READERS_BOUND_SECONDS
    for reader in readers:
        target: int | None = None
        while reader.is_alive() and time.monotonic() < deadline:
            with reader.lock:  # the reader is between chunks: every byte it read is handled
                unread, hung_up = _pipe_state(reader.fd)
                if target is None:
                    target = reader.consumed + unread
                if not hung_up and (unread == 0 or reader.consumed >= target):
                    break
            reader.join(0.01)
        reader.keep = False


# --- commands ---------------------------------------------------------------------------------
def load_shell(path: str, name: str = "_sbx_shell") -> Any:
    """A session runtime module from its source file, executed as a session executes it (no
    package of ours is importable here): the shell runtime (`sandbox_session.shell`: bash's launch
    and exit status) or the Node.js runner (`sandbox_session.node`)."""
    module = types.ModuleType(name)
    with open(path, encoding="utf-8") as source:
        exec(compile(source.read(), path, "exec"), module.__dict__)
    return module


class _Relay(_PipeReader):
    """Copies a command's output pipe into a text stream — `sys.stdout` / `sys.stderr` of this
    process, i.e. through the in-session redactor when the readiness preamble installed it — as
    UTF-8 text (invalid bytes replaced, as Python's own output would be), flushed at EOF."""

    def __init__(self, fd: int, stream: Any, raw_fd: int, push: bool = False) -> None:
        super().__init__(fd)
        self.stream, self.raw_fd, self.push = stream, raw_fd, push
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def _write(self, text: str) -> None:
        if not text:
            return
        try:
            self.stream.write(text)
        except Exception:  # a stream user code broke: the fd still takes the bytes
            if self.raw_fd >= 0:
                os.write(self.raw_fd, text.encode("utf-8", errors="replace"))

    def handle(self, chunk: bytes) -> None:
        self._write(self.decoder.decode(chunk))
        if self.push:
            _push(self.stream)

    def at_eof(self) -> None:
        if not self.keep:
            return
        self._write(self.decoder.decode(b"", final=True))
        try:
            self.stream.flush()
        except Exception:
            pass


def _push(stream: Any) -> None:
    """Let a redacting stream's text out as far as it is safe now (its rolling hold-back kept, so
    a token still being written is never split): a background command's output is then visible
    to getTask while it runs, not only once it ends."""
    text, drain = getattr(stream, "_text", None), getattr(stream, "_drain", None)
    if text is not None and callable(drain):
        try:
            text.flush()
            drain(False)
        except Exception:
            pass


def start_script(
    shell: Any, script: str, out: Any, err: Any, out_fd: int, err_fd: int, push: bool = False
) -> tuple[subprocess.Popen[bytes], list[_Relay]]:
    """Run `script` with bash (`shell.launch`), as a child of this process: in its working
    directory, with its environment, stdin /dev/null; the script travels on a pipe (`bash
    /dev/fd/N`), so it is never an argument (Linux caps one at 128 KiB) and never stdin (which the
    script may read). Its stdout / stderr are relayed into `out` / `err`. Its own process group,
    so it can be stopped with everything it started. Raises OSError when bash could not start."""
    proc, script_w, out_r, err_r = shell.launch()
    data = script.encode("utf-8", errors="surrogateescape")

    def feed() -> None:
        try:
            _write_all(script_w, data)
        except OSError:  # the script ended without reading all of itself
            pass
        finally:
            os.close(script_w)

    threading.Thread(target=feed, daemon=True).start()
    relays = [_Relay(out_r, out, out_fd, push), _Relay(err_r, err, err_fd, push)]
    for relay in relays:
        relay.start()
    return proc, relays


class _Sink(io.RawIOBase):
    """Bytes written here are counted; the first `limit` are kept."""

    def __init__(self, limit: int) -> None:
        self.limit, self.buf, self.total = limit, bytearray(), 0
        self.lock = threading.Lock()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        data = bytes(data)
        with self.lock:
            self.total += len(data)
            room = self.limit - len(self.buf)
            if room > 0:
                self.buf += data[:room]
        return len(data)

    def kept(self) -> bytes:
        with self.lock:
            return bytes(self.buf)


class _SinkText:
    """The text stream a background command's output is relayed into: UTF-8 into a _Sink, with
    the sink itself as its (unbuffered) binary buffer, where the redactor writes its bytes."""

    encoding, errors = "utf-8", "replace"

    def __init__(self, sink: _Sink) -> None:
        self.buffer = sink

    def write(self, text: str) -> int:
        self.buffer.write(text.encode("utf-8", errors="replace"))
        return len(text)

    def flush(self) -> None:
        pass


def _redacting_like(stream: Any, sink: _Sink) -> Any:
    """A text stream into `sink` that redacts exactly as `stream` does, when `stream` is the
    in-session redactor (`_sbx_redacting`: built from its own type, catalogue and redactor), else
    a plain UTF-8 text stream."""
    target = _SinkText(sink)
    if getattr(stream, "_sbx_redacting", False):
        try:
            return stream.redirected(target)
        except Exception:
            pass
    return target


class Task:
    """A command started by startCommandExecution, running in the background of the session."""

    def __init__(self, shell: Any, task_id: str, script: str, stdout_limit: int, stderr_limit: int) -> None:
        self.shell, self.task_id = shell, task_id
        self.sinks = (_Sink(stdout_limit), _Sink(stderr_limit))
        self.streams = (
            _redacting_like(sys.stdout, self.sinks[0]),
            _redacting_like(sys.stderr, self.sinks[1]),
        )
        self.started = time.perf_counter()
        self.ended: float | None = None
        self.canceled = False
        self.proc, self.relays = start_script(
            shell, script, self.streams[0], self.streams[1], -1, -1, push=True
        )

    def poll(self) -> int | None:
        code = self.proc.poll()
        if code is not None and self.ended is None:
            _join_all(self.relays)
            for stream in self.streams:
                try:
                    stream.flush()
                except Exception:
                    pass
            self.ended = time.perf_counter()
        return code

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.canceled = True
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait()
        self.poll()

    def answer(self) -> tuple[dict[str, Any], list[bytes]]:
        code = self.poll()
        if code is None:
            status = "working"
        elif self.canceled:
            status = "canceled"
        else:
            status = "completed" if code == 0 else "failed"
        result: dict[str, Any] = {
            "task_id": self.task_id,
            "task_status": status,
            "stdout_bytes": self.sinks[0].total,
            "stderr_bytes": self.sinks[1].total,
            "execution_time": (self.ended or time.perf_counter()) - self.started,
            "fatal": False,
        }
        if code is not None:
            result["exit_code"] = self.shell.status(code)
        result["is_error"] = status == "failed"
        return result, [sink.kept() for sink in self.sinks]


# --- the kernel -------------------------------------------------------------------------------
MAX_TASKS = 16  # running at once per session; finished ones are remembered up to MAX_TASKS_KEPT
MAX_TASKS_KEPT = 64
_MESSAGE_CHARS = 4096  # an error message in a frame's JSON part (which is bounded)


def _message(text: str) -> str:
    return text if len(text) <= _MESSAGE_CHARS else text[: _MESSAGE_CHARS - 3] + "..."


class Kernel:
    def __init__(self, stdout_limit: int, stderr_limit: int, shell: Any, node: Any) -> None:
        self.stdout_limit, self.stderr_limit = stdout_limit, stderr_limit
        self.shell = shell  # sandbox_session.shell (load_shell)
        self.node = node  # sandbox_session.node (load_shell), JavaScript and TypeScript
        self.cell = 0
        self.namespace: dict[str, Any] = {}
        self.reset()
        self.tasks: dict[str, Task] = {}
        # Freed when MemoryError reaches the top level, so the traceback can still be formatted.
        self._reserve: bytearray | None = bytearray(1 << 20)

    def reset(self) -> None:
        self.namespace = {"__name__": "__main__", "__builtins__": builtins}

    def _user_tb(self, tb: Any) -> Any:
        # Drop every frame before the first one of user code (`<cell-N>`): this worker's own frames
        # and the stdlib's (a SyntaxError is raised inside ast.parse, whose frame names a host
        # path such as /usr/lib/python3.11/ast.py). A SyntaxError keeps no frame at all: Python
        # prints its `File "<cell-N>", line L` from the exception itself.
        while tb is not None and not tb.tb_frame.f_code.co_filename.startswith(_CELL_PREFIX):
            tb = tb.tb_next
        return tb

    def _print_exception(self, exc: BaseException) -> None:
        text = "".join(traceback.format_exception(type(exc), exc, self._user_tb(exc.__traceback__)))
        try:
            sys.stderr.write(text)
        except Exception:  # sys.stderr replaced by something broken: still report on the fd
            os.write(2, text.encode("utf-8", errors="replace"))

    def _run_source(self, code: str) -> None:
        self.cell += 1
        filename = f"{_CELL_PREFIX}{self.cell}>"
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        tree = ast.parse(code, filename=filename, mode="exec")
        last: ast.Expression | None = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(body=tree.body.pop().value)  # type: ignore[attr-defined]
        exec(compile(tree, filename, "exec"), self.namespace)
        if last is not None:
            value = eval(compile(last, filename, "eval"), self.namespace)
            sys.displayhook(value)  # a notebook cell's echo: through sys.stdout, counted like print

    def _output(
        self, cap: Capture, exit_code: int, started: float, fatal: bool = False
    ) -> tuple[dict[str, Any], list[bytes]]:
        return {
            "stdout_bytes": cap.stdout_bytes,
            "stderr_bytes": cap.stderr_bytes,
            "exit_code": exit_code,
            "execution_time": time.perf_counter() - started,
            "fatal": fatal,
        }, cap.blocks

    def execute_code(self, args: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
        language = args.get("language") or "python"
        if language in self.node.LANGUAGES:
            return self.execute_program(str(args.get("code", "")), language)
        if args.get("clearContext"):
            self.reset()
        exit_code = 0
        started = time.perf_counter()
        importlib.invalidate_caches()  # a package a command just installed is importable now
        with Capture(self.stdout_limit, self.stderr_limit) as cap:
            try:
                self._run_source(args.get("code", ""))
            except SystemExit as exc:
                if exc.code is None:
                    exit_code = 0
                elif isinstance(exc.code, int):
                    exit_code = exc.code & 0xFF  # what a process exit status would carry
                else:
                    print(exc.code, file=sys.stderr)
                    exit_code = 1
            except MemoryError as exc:
                # Python caught it, so the kernel lives on: an uncaught exception like any other
                # (its traceback names MemoryError: the call is classified oom), variables kept.
                self._reserve = None
                self._print_exception(exc)
                exit_code = 1
                with contextlib.suppress(MemoryError):  # the code may still hold what it took
                    self._reserve = bytearray(1 << 20)
            except BaseException as exc:  # KeyboardInterrupt too: the session carries on
                self._print_exception(exc)
                exit_code = 1
        return self._output(cap, exit_code, started)

    def execute_program(self, code: str, language: str) -> tuple[dict[str, Any], list[bytes]]:
        """executeCode of `javascript` / `typescript`: a fresh Node.js process running `code` to
        its end (`sandbox_session.node.run`: the program on a pipe, its output relayed through
        this process's sys.stdout / sys.stderr, so through the in-session redactor when it is
        installed, and counted as it leaves it). The exit code is Node's (1 for an uncaught error
        or a syntax error); clearContext, Python's, does not apply."""
        started = time.perf_counter()
        with Capture(self.stdout_limit, self.stderr_limit) as cap:
            status = self.node.run(
                self.shell, code.encode("utf-8", errors="surrogateescape"), language, keep_spare=True
            )
        return self._output(cap, status, started)

    def execute_command(self, args: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
        """`arguments.command`: a shell script, run to its end by bash (see start_script), its
        output relayed through this process's sys.stdout / sys.stderr, so through the in-session
        redactor exactly like Python output, and counted as it leaves it."""
        started = time.perf_counter()
        # what the script leaves running ends with the call (sandbox_session.shell.end_leftovers)
        before, reaper = self.shell.processes_below(), self.shell.subreaper(True)
        try:
            with Capture(self.stdout_limit, self.stderr_limit) as cap:
                try:
                    proc, relays = start_script(
                        self.shell, args.get("command", ""), sys.stdout, sys.stderr, 1, 2
                    )
                except OSError as exc:
                    os.write(2, f"bash could not start: {exc}\n".encode())
                    return self._output(cap, 127, started)
                code = self.shell.status(proc.wait())
                _join_all(relays)  # a background child of the script may keep a pipe open
        finally:
            self.shell.end_leftovers(before, pgid=None)
            self.shell.subreaper(reaper)
        return self._output(cap, code, started)

    # Background commands (startCommandExecution / getTask / stopTask).
    def start_command_execution(self, args: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
        running = sum(1 for t in self.tasks.values() if t.poll() is None)
        if running >= MAX_TASKS:
            return self._tool_error(f"at most {MAX_TASKS} commands run in the background of a session")
        finished = [k for k, t in self.tasks.items() if t.poll() is not None]
        for key in finished[: max(0, len(self.tasks) - MAX_TASKS_KEPT + 1)]:
            del self.tasks[key]
        task = Task(
            self.shell, str(uuid.uuid4()), args.get("command", ""), self.stdout_limit, self.stderr_limit
        )
        self.tasks[task.task_id] = task
        return task.answer()

    def _task(self, args: dict[str, Any]) -> Task | None:
        return self.tasks.get(str(args.get("taskId", "")))

    def get_task(self, args: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
        task = self._task(args)
        if task is None:
            return self._tool_error(_message(f"Task {args.get('taskId')} not found"))
        return task.answer()

    def stop_task(self, args: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
        task = self._task(args)
        if task is None:
            return self._tool_error(_message(f"Task {args.get('taskId')} not found"))
        task.stop()
        return task.answer()

    def _tool_error(self, text: str) -> tuple[dict[str, Any], list[bytes]]:
        result, _ = self._file_result([], text)
        return result, [b"", text.encode("utf-8")]

    # File tools work relative to the session's working directory and refuse to leave it, so
    # they behave the same with or without a sandbox around the process.
    def _resolve(self, path: str) -> str:
        base = os.getcwd()
        full = os.path.realpath(os.path.join(base, path))
        if full != base and not full.startswith(base + os.sep):
            raise PermissionError(f"path outside the session directory: {path}")
        return full

    @staticmethod
    def _uri(full: str) -> str:
        """A resource URI relative to the session's working directory (`file://data/a.csv`), as
        the bedrock-agentcore SDK expects: its download_files keys the answer by the URI minus
        `file://`, i.e. by the path the caller asked for. Never the host's temp directory."""
        return "file://" + os.path.relpath(full, os.getcwd())

    def _file_result(
        self, content: list[dict[str, Any]], error: str | None = None
    ) -> tuple[dict[str, Any], list[bytes]]:
        if error is not None:
            content = [{"type": "text", "text": _message(error)}]
        return {
            "content": content,
            "is_error": error is not None,
            "exit_code": 1 if error else 0,
            "execution_time": 0.0,
            "fatal": False,
        }, []

    def _error(self, exc: Exception) -> tuple[dict[str, Any], list[bytes]]:
        return self._file_result([], f"{type(exc).__name__}: {exc}")

    def write_files(self, args: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
        try:
            items = args.get("content") or []
            for item in items:
                full = self._resolve(item["path"])
                os.makedirs(os.path.dirname(full), exist_ok=True)
                data = (
                    base64.b64decode(item["blob"])
                    if item.get("blob") is not None
                    else item.get("text", "").encode()
                )
                with open(full, "wb") as fh:
                    fh.write(data)
            return self._file_result([{"type": "text", "text": f"Successfully wrote all {len(items)} files"}])
        except (OSError, KeyError, ValueError) as exc:
            return self._error(exc)

    def read_files(self, args: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
        """Each file is one content block, JSON-encoded here (once) and sent as a raw block, which
        the server streams into its own event without parsing it."""
        try:
            blocks: list[bytes] = []
            for path in args.get("paths") or []:
                full = self._resolve(path)
                with open(full, "rb") as fh:
                    data = fh.read(MAX_READ_BYTES + 1)
                if len(data) > MAX_READ_BYTES:
                    raise ValueError(f"{path} is over the {MAX_READ_BYTES}-byte read limit")
                uri = self._uri(full)
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError:
                    # Base64 needs no JSON escaping: the block is assembled around it, not dumped.
                    head = json.dumps(
                        {
                            "type": "resource",
                            "resource": {
                                "type": "blob",
                                "uri": uri,
                                "mimeType": "application/octet-stream",
                                "blob": "",
                            },
                        }
                    )
                    cut = head.rindex('""') + 1  # inside the empty blob string
                    blocks.append(
                        head[:cut].encode("ascii") + base64.b64encode(data) + head[cut:].encode("ascii")
                    )
                    continue
                resource = {"type": "text", "uri": uri, "mimeType": "text/plain", "text": text}
                blocks.append(json.dumps({"type": "resource", "resource": resource}).encode("ascii"))
            result, _ = self._file_result([])
            return {**result, "content": None}, blocks
        except (OSError, ValueError) as exc:
            return self._error(exc)

    def list_files(self, args: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
        try:
            full = self._resolve(args.get("directoryPath") or ".")
            blocks = []
            for entry in sorted(os.scandir(full), key=lambda e: e.name):
                is_dir = entry.is_dir(follow_symlinks=False)
                block = {
                    "type": "resource_link",
                    "uri": self._uri(entry.path),
                    "name": entry.name,
                    "description": "directory" if is_dir else "file",
                    "size": 0 if is_dir else entry.stat(follow_symlinks=False).st_size,
                }
                blocks.append(json.dumps(block).encode("ascii"))
            result, _ = self._file_result([])
            return {**result, "content": None}, blocks
        except (OSError, ValueError) as exc:
            return self._error(exc)

    def remove_files(self, args: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
        try:
            paths = args.get("paths") or []
            for path in paths:
                os.remove(self._resolve(path))
            return self._file_result([{"type": "text", "text": f"Successfully removed {len(paths)} files"}])
        except (OSError, ValueError) as exc:
            return self._error(exc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--session", required=True)  # only so operators can find it in `ps`
    parser.add_argument("--req-fd", type=int, required=True)
    parser.add_argument("--resp-fd", type=int, required=True)
    parser.add_argument("--memory-mb", type=int, default=1024)
    parser.add_argument("--cpu-seconds", type=int, default=600)
    parser.add_argument("--file-size-mb", type=int, default=512)
    parser.add_argument("--stdout-kept", type=int, default=1 << 18)
    parser.add_argument("--stderr-kept", type=int, default=1 << 15)
    parser.add_argument("--max-processes", type=int, default=0)
    parser.add_argument("--shell", required=True)  # sandbox_session/shell.py, as the sandbox sees it
    parser.add_argument("--node", required=True)  # sandbox_session/node.py, as the sandbox sees it
    opts = parser.parse_args(argv)

    # Protocol fds must not leak into subprocesses that user code starts.
    for fd in (opts.req_fd, opts.resp_fd):
        os.set_inheritable(fd, False)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.close(devnull)

    apply_limits(opts.memory_mb, opts.cpu_seconds, opts.file_size_mb, opts.max_processes)
    threading.stack_size(512 * 1024)  # capture threads must fit comfortably under RLIMIT_AS
    kernel = Kernel(
        opts.stdout_kept, opts.stderr_kept, load_shell(opts.shell), load_shell(opts.node, "_sbx_node")
    )
    ops = {
        "executeCode": kernel.execute_code,
        "executeCommand": kernel.execute_command,
        "startCommandExecution": kernel.start_command_execution,
        "getTask": kernel.get_task,
        "stopTask": kernel.stop_task,
        "writeFiles": kernel.write_files,
        "readFiles": kernel.read_files,
        "listFiles": kernel.list_files,
        "removeFiles": kernel.remove_files,
    }
    send_frame(opts.resp_fd, {"ready": True, "pid": os.getpid()})
    while True:
        request = recv_frame(opts.req_fd)
        if request is None:  # the server closed the channel: the session is over
            return 0
        result, blocks = ops[request.obj["op"]](request.obj.get("arguments") or {})
        send_frame(opts.resp_fd, {**result, "seq": request.obj.get("seq")}, blocks)
        if result.get("fatal"):
            return 137


if __name__ == "__main__":
    sys.exit(main())
