"""One Code Interpreter session: a persistent Python process that runs code on request.

This file is executed *inside* the sandbox (bubblewrap) as a script, so it is stdlib-only and
imports nothing from the project. The server imports it only for the frame helpers
(`send_frame`, `recv_frame`), which both sides must agree on.

Protocol: requests and responses are length-prefixed frames ([u32 big-endian JSON length][u32
raw length][ASCII JSON][raw bytes]) on two dedicated pipe fds, never on stdout/stderr, so nothing
user code prints can corrupt the channel. The first frame the worker sends is
`{"ready": true, "pid": ...}`. The raw part carries a file tool's content blocks, each already
encoded as JSON (`RAW_KEY`, a list of bytes; their sizes travel in the JSON as `RAW_SIZES_KEY`):
the server sends each as its own event without parsing it, so a 20 MiB readFiles answer is
JSON-encoded once, here, and decoded once, by the client (measured: parsing and re-encoding it in
the server cost ~0.2 s per 8 MiB). The worker shares its process with user code, so the raw part
is exactly as trustworthy as every other answer of this session: the server never parses it and
frames it itself.

Semantics copied from AgentCore (a Jupyter-like kernel):
- one globals dict for the whole session: variables and imports survive between calls;
- a trailing expression is displayed (`sys.displayhook`), as a notebook cell does;
- an uncaught exception gives exit code 1 and the traceback (user frames only) on stderr;
  `sys.exit(n)` gives n; the session survives both;
- `MemoryError` reaching the top level gives exit code 137 (what an OOM kill reports) and the
  session is marked fatal: the server kills it, as AgentCore's OOM-killed kernel would be gone.

Output is captured at the file-descriptor level (fd 1 / fd 2 point at per-call pipes), so output
of subprocesses and C extensions is captured too, and `sys.stdout` / `sys.stderr` stay the *same
objects* across calls: the readiness preamble (SPEC §6.2) wraps them once and the wrapper must
still be in place for every later call.
"""

from __future__ import annotations

import argparse
import ast
import base64
import builtins
import itertools
import json
import linecache
import os
import signal
import struct
import subprocess
import sys
import threading
import time
import traceback
from typing import Any

MAX_FRAME = 64 * 1024 * 1024
# readFiles: one file per answer up to this size (base64 + JSON stays under MAX_FRAME); larger
# artifacts are read in parts (functions/dispatch/artifacts.py splits them in the session).
MAX_READ_BYTES = 32 * 1024 * 1024
_CELL_PREFIX = "<cell-"  # user code cells are compiled as "<cell-N>"
_HEADER = struct.Struct(">II")
RAW_KEY = "content_blocks"  # a result member sent as the frame's raw part: list of JSON-encoded blocks
RAW_SIZES_KEY = "raw_sizes"


# --- framing (shared with the server) ---------------------------------------------------------
def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def send_frame(fd: int, obj: Any) -> None:
    """One frame; `obj[RAW_KEY]` (a list of bytes), if present, travels as the raw part."""
    raw = b""
    if isinstance(obj, dict) and RAW_KEY in obj:
        obj = dict(obj)
        blobs = obj.pop(RAW_KEY)
        obj[RAW_SIZES_KEY] = [len(b) for b in blobs]
        raw = b"".join(blobs)
    # ensure_ascii (the default): ~2x faster to encode and to decode than UTF-8 for non-ASCII text.
    payload = json.dumps(obj).encode("ascii")
    _write_all(fd, _HEADER.pack(len(payload), len(raw)) + payload)
    if raw:
        _write_all(fd, raw)


def _read_exact(fd: int, n: int) -> bytes | None:
    buffer = bytearray(n)
    view, done = memoryview(buffer), 0
    while done < n:
        got = os.readv(fd, [view[done:]])
        if not got:
            return None
        done += got
    return bytes(buffer)


def recv_frame(fd: int) -> Any:
    """The next frame, or None at EOF. A frame over MAX_FRAME is a protocol violation."""
    header = _read_exact(fd, _HEADER.size)
    if header is None:
        return None
    length, raw_length = _HEADER.unpack(header)
    if length + raw_length > MAX_FRAME:
        raise ValueError(f"frame of {length + raw_length} bytes exceeds {MAX_FRAME}")
    payload = _read_exact(fd, length)
    if payload is None:
        return None
    obj = json.loads(payload.decode("utf-8"))
    if raw_length:
        raw = _read_exact(fd, raw_length)
        if raw is None:
            return None
        sizes = obj.pop(RAW_SIZES_KEY, None) if isinstance(obj, dict) else None
        if (
            not isinstance(sizes, list)
            or not all(isinstance(x, int) and x >= 0 for x in sizes)
            or sum(sizes) != raw_length
        ):
            raise ValueError("a raw part needs its sizes")
        view, offsets = memoryview(raw), [0]
        for size in sizes:
            offsets.append(offsets[-1] + size)
        obj[RAW_KEY] = [bytes(view[a:b]) for a, b in itertools.pairwise(offsets)]
    return obj


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
class _Drain(threading.Thread):
    """Reads one capture pipe: counts every byte, keeps the first `limit` (bounded memory)."""

    def __init__(self, fd: int, limit: int) -> None:
        super().__init__(daemon=True)
        self.fd, self.limit = fd, limit
        self.buf = bytearray()
        self.total = 0  # every byte written to the pipe, kept or not
        self.keep = True

    def run(self) -> None:
        try:
            while True:
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    break
                if self.keep:
                    self.total += len(chunk)
                    room = self.limit - len(self.buf)
                    if room > 0:
                        self.buf += chunk[:room]
        finally:
            os.close(self.fd)


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
    (by the code, its subprocesses and C extensions), also beyond the kept `limit`. The notebook
    echo of a trailing expression (`display()`) is ours, not the code's: it goes through its own
    pipe, is kept after the code's output, and is not counted.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.drains: list[_Drain] = []
        self.saved: list[int] = []
        self.echo: _Drain | None = None

    def __enter__(self) -> Capture:
        _flush_std()
        for target in (1, 2):
            self.saved.append(os.dup(target))
            r, w = os.pipe()
            os.dup2(w, target)
            os.close(w)
            drain = _Drain(r, self.limit)
            drain.start()
            self.drains.append(drain)
        return self

    def display(self, value: Any) -> None:
        """`sys.displayhook(value)` with fd 1 on the uncounted echo pipe."""
        _flush_std()
        r, w = os.pipe()
        self.echo = _Drain(r, self.limit)
        self.echo.start()
        code_fd = os.dup(1)
        os.dup2(w, 1)
        os.close(w)
        try:
            sys.displayhook(value)
        finally:
            _flush_std()
            os.dup2(code_fd, 1)  # closes the echo pipe's last write end: its drain sees EOF
            os.close(code_fd)

    def __exit__(self, *exc: object) -> None:
        _flush_std()
        for target, saved in zip((1, 2), self.saved, strict=True):
            os.dup2(saved, target)
            os.close(saved)
        # EOF arrives at once unless a background child still holds a pipe; do not wait for it
        # past one short shared deadline: keep (and count) what arrived, then drain to nothing.
        deadline = time.monotonic() + 0.5
        for drain in [*self.drains, *([self.echo] if self.echo else [])]:
            drain.join(timeout=max(0.0, deadline - time.monotonic()))
            drain.keep = False

    @property
    def stdout(self) -> str:
        kept = bytes(self.drains[0].buf)
        if self.echo is not None:
            kept += bytes(self.echo.buf[: max(0, self.limit - len(kept))])
        return kept.decode("utf-8", errors="replace")

    @property
    def stderr(self) -> str:
        return bytes(self.drains[1].buf).decode("utf-8", errors="replace")

    @property
    def stdout_bytes(self) -> int:
        return self.drains[0].total

    @property
    def stderr_bytes(self) -> int:
        return self.drains[1].total


# --- the kernel -------------------------------------------------------------------------------
class Kernel:
    def __init__(self, max_output: int) -> None:
        self.max_output = max_output
        self.cell = 0
        self.namespace: dict[str, Any] = {}
        self.reset()
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

    def _run_source(self, code: str, cap: Capture) -> None:
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
            cap.display(value)

    def execute_code(self, args: dict[str, Any]) -> dict[str, Any]:
        if args.get("clearContext"):
            self.reset()
        exit_code, fatal = 0, False
        started = time.perf_counter()
        with Capture(self.max_output) as cap:
            try:
                self._run_source(args.get("code", ""), cap)
            except SystemExit as exc:
                if exc.code is None:
                    exit_code = 0
                elif isinstance(exc.code, int):
                    exit_code = exc.code & 0xFF  # what a process exit status would carry
                else:
                    print(exc.code, file=sys.stderr)
                    exit_code = 1
            except MemoryError as exc:
                self._reserve = None
                self._print_exception(exc)
                exit_code, fatal = 137, True
            except BaseException as exc:  # KeyboardInterrupt too: the session carries on
                self._print_exception(exc)
                exit_code = 1
        return {
            "stdout": cap.stdout,
            "stderr": cap.stderr,
            "stdout_bytes": cap.stdout_bytes,
            "stderr_bytes": cap.stderr_bytes,
            "exit_code": exit_code,
            "execution_time": time.perf_counter() - started,
            "fatal": fatal,
        }

    def execute_command(self, args: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        proc = subprocess.run(
            ["/bin/sh", "-c", args.get("command", "")], capture_output=True, stdin=subprocess.DEVNULL
        )
        return {
            "stdout": proc.stdout[: self.max_output].decode("utf-8", errors="replace"),
            "stderr": proc.stderr[: self.max_output].decode("utf-8", errors="replace"),
            "stdout_bytes": len(proc.stdout),
            "stderr_bytes": len(proc.stderr),
            "exit_code": proc.returncode if proc.returncode >= 0 else 128 - proc.returncode,
            "execution_time": time.perf_counter() - started,
            "fatal": False,
        }

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

    def _file_result(self, content: list[dict[str, Any]], error: str | None = None) -> dict[str, Any]:
        if error is not None:
            content = [{"type": "text", "text": error}]
        return {
            "content": content,
            "is_error": error is not None,
            "exit_code": 1 if error else 0,
            "stdout": "",
            "stderr": error or "",
            "execution_time": 0.0,
            "fatal": False,
        }

    def write_files(self, args: dict[str, Any]) -> dict[str, Any]:
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
            return self._file_result([], f"{type(exc).__name__}: {exc}")

    def read_files(self, args: dict[str, Any]) -> dict[str, Any]:
        try:
            blocks: list[bytes] = []  # each block encoded once, here (see RAW_KEY)
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
            return {**self._file_result([]), "content": None, RAW_KEY: blocks}
        except (OSError, ValueError) as exc:
            return self._file_result([], f"{type(exc).__name__}: {exc}")

    def list_files(self, args: dict[str, Any]) -> dict[str, Any]:
        try:
            full = self._resolve(args.get("directoryPath") or ".")
            blocks = []
            for entry in sorted(os.scandir(full), key=lambda e: e.name):
                is_dir = entry.is_dir(follow_symlinks=False)
                blocks.append(
                    {
                        "type": "resource_link",
                        "uri": self._uri(entry.path),
                        "name": entry.name,
                        "description": "directory" if is_dir else "file",
                        "size": 0 if is_dir else entry.stat(follow_symlinks=False).st_size,
                    }
                )
            return self._file_result(blocks)
        except (OSError, ValueError) as exc:
            return self._file_result([], f"{type(exc).__name__}: {exc}")

    def remove_files(self, args: dict[str, Any]) -> dict[str, Any]:
        try:
            paths = args.get("paths") or []
            for path in paths:
                os.remove(self._resolve(path))
            return self._file_result([{"type": "text", "text": f"Successfully removed {len(paths)} files"}])
        except (OSError, ValueError) as exc:
            return self._file_result([], f"{type(exc).__name__}: {exc}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--session", required=True)  # only so operators can find it in `ps`
    parser.add_argument("--req-fd", type=int, required=True)
    parser.add_argument("--resp-fd", type=int, required=True)
    parser.add_argument("--memory-mb", type=int, default=1024)
    parser.add_argument("--cpu-seconds", type=int, default=600)
    parser.add_argument("--file-size-mb", type=int, default=512)
    parser.add_argument("--max-output", type=int, default=1 << 20)
    parser.add_argument("--max-processes", type=int, default=0)
    opts = parser.parse_args(argv)

    # Protocol fds must not leak into subprocesses that user code starts.
    for fd in (opts.req_fd, opts.resp_fd):
        os.set_inheritable(fd, False)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.close(devnull)

    apply_limits(opts.memory_mb, opts.cpu_seconds, opts.file_size_mb, opts.max_processes)
    threading.stack_size(512 * 1024)  # capture threads must fit comfortably under RLIMIT_AS
    kernel = Kernel(opts.max_output)
    ops = {
        "executeCode": kernel.execute_code,
        "executeCommand": kernel.execute_command,
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
        result = ops[request["op"]](request.get("arguments") or {})
        send_frame(opts.resp_fd, result)
        if result.get("fatal"):
            return 137


if __name__ == "__main__":
    sys.exit(main())
