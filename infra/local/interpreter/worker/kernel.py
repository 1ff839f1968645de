"""The session's kernel: one globals dict for the whole session, code run as notebook cells, commands
and background tasks, the file tools; and `main`, the worker's request loop (the package's
docstring has the semantics)."""

from __future__ import annotations

import argparse
import ast
import builtins
import contextlib
import importlib
import linecache
import os
import signal
import sys
import threading
import time
import traceback
import uuid
from typing import Any

from . import files
from .capture import Capture, join_all
from .commands import Task, load_shell, start_script
from .frames import bounded_message, recv_frame, send_frame

_CELL_PREFIX = "<cell-"  # user code cells are compiled as "<cell-N>"
MAX_TASKS = 16  # running at once per session; finished ones are remembered up to MAX_TASKS_KEPT
MAX_TASKS_KEPT = 64


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
                join_all(relays)  # a background child of the script may keep a pipe open
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
            return self._tool_error(bounded_message(f"Task {args.get('taskId')} not found"))
        return task.answer()

    def stop_task(self, args: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
        task = self._task(args)
        if task is None:
            return self._tool_error(bounded_message(f"Task {args.get('taskId')} not found"))
        task.stop()
        return task.answer()

    def _tool_error(self, text: str) -> tuple[dict[str, Any], list[bytes]]:
        result, _ = files.tool_result([], text)
        return result, [b"", text.encode("utf-8")]


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
        "writeFiles": files.write_files,
        "readFiles": files.read_files,
        "listFiles": files.list_files,
        "removeFiles": files.remove_files,
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
