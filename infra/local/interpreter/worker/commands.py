"""Commands: a bash script run to its end (`start_script`, executeCommand) or in the background of
the session (`Task`, startCommandExecution / getTask / stopTask), its output relayed through this
process's `sys.stdout` / `sys.stderr`, so through the in-session redactor as Python output is."""

from __future__ import annotations

import codecs
import io
import os
import signal
import subprocess
import sys
import threading
import time
import types
from typing import Any

from .capture import PipeReader, join_all
from .frames import write_all


def load_shell(path: str, name: str = "_sbx_shell") -> Any:
    """A session runtime module from its source file, executed as a session executes it (no
    package of ours is importable here): the shell runtime (`sandbox_session.shell`: bash's launch
    and exit status) or the Node.js runner (`sandbox_session.node`)."""
    module = types.ModuleType(name)
    with open(path, encoding="utf-8") as source:
        exec(compile(source.read(), path, "exec"), module.__dict__)
    return module


class _Relay(PipeReader):
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
            write_all(script_w, data)
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
            join_all(self.relays)
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
