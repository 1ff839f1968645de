"""A call's output, captured at the file-descriptor level: fd 1 and fd 2 point at fresh pipes for
the call, read to their end by threads (`PipeReader`), every byte counted, the first ones kept."""

from __future__ import annotations

import fcntl
import os
import select
import struct
import sys
import termios
import threading
import time
from collections.abc import Sequence

# How long a call's end waits at most for a pipe reader that is never scheduled (see join_all).
READERS_BOUND_SECONDS = 30.0
_READ_CHUNK = 65536  # one read of a capture or relay pipe


class PipeReader(threading.Thread):
    """Reads one pipe to its EOF in a thread of its own, handing each chunk to `handle` (and EOF
    to `at_eof`) while holding `lock`, so `join_all` can tell when every byte read is handled.
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


class _Drain(PipeReader):
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


def flush_std() -> None:
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
        flush_std()
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
        flush_std()
        for target, saved in zip((1, 2), self.saved, strict=True):
            os.dup2(saved, target)
            os.close(saved)
        # EOF arrives at once unless a background child still holds a pipe; do not wait for it
        # past one short shared deadline: keep (and count) what arrived, then drain to nothing.
        join_all(self.drains)

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


def join_all(readers: Sequence[PipeReader]) -> None:
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
