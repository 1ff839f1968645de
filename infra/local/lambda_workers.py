"""The local Lambda emulator's worker processes: a function's spec, the environment a worker runs
with (the function definition's plus what the Lambda runtime sets), the fork servers that import a
handler once and fork a worker per request, and one worker as the emulator calls it.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKER_SCRIPT = Path(__file__).with_name("lambda_worker.py")
TASK_ROOT = REPO_ROOT / "functions"
LAYER_ROOT = REPO_ROOT / "layers" / "common" / "python"
START_SECONDS = 60  # a worker's (or fork server's) import before it must say it is ready


@dataclass(frozen=True)
class FunctionSpec:
    name: str  # physical function name
    handler: str  # "package.module.function", as in the CDK definition
    environment: dict[str, str]
    timeout_seconds: int = 30
    memory_mb: int = 512
    max_concurrency: int = 4
    task_root: str = str(TASK_ROOT)
    layer_root: str = str(LAYER_ROOT)
    aliases: tuple[str, ...] = ()  # each points to $LATEST

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FunctionSpec:
        return cls(**{**data, "aliases": tuple(data.get("aliases", ()))})


class WorkerGone(Exception):
    """The worker died or timed out; it has been killed and must not be reused."""


def _runtime_environment(spec: FunctionSpec, region: str) -> dict[str, str]:
    """Exactly what a worker of `spec` runs with, but for its log stream (each worker's own)."""
    return {
        # What the Lambda runtime sets itself (not part of the function definition).
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "en_US.UTF-8",
        "TZ": ":UTC",
        "PYTHONDONTWRITEBYTECODE": "1",
        "LAMBDA_TASK_ROOT": spec.task_root,
        "AWS_LAMBDA_FUNCTION_NAME": spec.name,
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory_mb),
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{spec.name}",
        "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        **spec.environment,
    }


class _ForkServer:
    """A `lambda_worker.py --fork-server` process: it imports one handler in one environment once,
    then forks a worker per request, each from the state right after that import. Started on the
    first request; started again if it has died."""

    def __init__(self, spec: FunctionSpec, env: dict[str, str]) -> None:
        self._argv = [sys.executable, str(WORKER_SCRIPT), "--fork-server", spec.task_root, spec.layer_root]
        self._argv.append(spec.handler)
        self._env, self._cwd = env, spec.task_root
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None

    def _start(self) -> socket.socket:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self._proc = subprocess.Popen(
                self._argv, env=self._env, cwd=self._cwd, stdin=theirs.fileno(), stdout=subprocess.DEVNULL
            )
        self._sock = ours
        ours.settimeout(START_SECONDS)
        try:
            ready = ours.recv(4096)
        except OSError:
            ready = b""
        if not ready:
            proc = self._end()
            if proc is not None:
                proc.kill()
                proc.wait()
            raise WorkerGone(f"fork server for {self._argv[-1]} did not start")
        return ours

    def fork(self, stream: str) -> tuple[int, int, int, int]:
        """(pid, pidfd, the worker's stdin to write, its protocol out to read) of a new worker."""
        with self._lock:
            for _ in range(2):  # a server that died (killed from outside) is started once more
                if self._proc is None or self._proc.poll() is not None:
                    self._end()  # its socket too: a restart must not leave the old one open
                    sock = self._start()
                else:
                    assert self._sock is not None
                    sock = self._sock
                stdin_r, stdin_w = os.pipe()
                out_r, out_w = os.pipe()
                try:
                    socket.send_fds(sock, [json.dumps({"stream": stream}).encode()], [stdin_r, out_w, 2])
                    answer, fds, _, _ = socket.recv_fds(sock, 4096, 1)
                except OSError:
                    answer, fds = b"", []
                finally:
                    os.close(stdin_r)
                    os.close(out_w)
                if answer and "pid" in (reply := json.loads(answer)) and len(fds) == 1:
                    return int(reply["pid"]), fds[0], stdin_w, out_r
                for fd in (stdin_w, out_r, *fds):
                    os.close(fd)
                if answer:
                    raise _ForkRefused(reply.get("error", "no pid"))
                if (gone := self._end()) is not None:  # dead, or hung past the socket's timeout
                    gone.kill()
                    gone.wait()
            raise WorkerGone(f"fork server for {self._argv[-1]} exited")

    def close(self) -> subprocess.Popen[bytes] | None:
        """End the server: it forks no more, and exits once its workers have. Its process, for the
        caller to wait for."""
        with self._lock:
            return self._end()

    def _end(self) -> subprocess.Popen[bytes] | None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        proc, self._proc = self._proc, None
        return proc


class _ForkRefused(WorkerGone):
    """The fork server will not fork (its import left threads running): spawn a worker instead."""


# The fork servers of this process, shared by its emulators (a test suite starts an emulator per
# test with the same functions), least recently used first.
_MAX_FORK_SERVERS = 16
_fork_servers: OrderedDict[tuple[str, ...], _ForkServer] = OrderedDict()
_fork_servers_lock = threading.Lock()


@atexit.register
def _close_fork_servers() -> None:
    """At exit: end every fork server, and wait a few seconds at most for them to exit."""
    with _fork_servers_lock:
        servers = list(_fork_servers.values())
        _fork_servers.clear()
    procs = []
    for server in servers:
        procs.append(server.close())
    for proc in procs:
        if proc is not None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass  # a worker still busy keeps its server: both end with its call


def _fork_server(spec: FunctionSpec, env: dict[str, str]) -> _ForkServer:
    key = (spec.task_root, spec.layer_root, spec.handler, *sorted(f"{k}={v}" for k, v in env.items()))
    with _fork_servers_lock:
        server = _fork_servers.pop(key, None) or _ForkServer(spec, env)
        _fork_servers[key] = server
        evicted = _fork_servers.popitem(last=False)[1] if len(_fork_servers) > _MAX_FORK_SERVERS else None
    if evicted is not None:
        if (proc := evicted.close()) is not None:
            threading.Thread(target=proc.wait, daemon=True).start()
    return server


class Worker:
    """One warm worker process of a function: started from its fork server (or spawned), called
    one request at a time over its pipes, killed when it is no longer to be reused."""

    def __init__(self, spec: FunctionSpec, region: str, account: str) -> None:
        self.stream = f"{time.strftime('%Y/%m/%d')}/[$LATEST]{uuid.uuid4().hex}"
        env = _runtime_environment(spec, region)
        self._proc: subprocess.Popen[str] | None = None
        self._pidfd: int | None = None
        try:
            self.pid, self._pidfd, stdin_fd, out_fd = _fork_server(spec, env).fork(self.stream)
            self._stdin: IO[str] = open(stdin_fd, "w", encoding="utf-8")  # noqa: SIM115 - closed in kill()
            self._stdout: IO[str] = open(out_fd, encoding="utf-8")  # noqa: SIM115 - closed by the reader
        except _ForkRefused as refusal:
            sys.stderr.write(f"lambda-emulator: {refusal}; spawning a worker of its own\n")
            self._proc = subprocess.Popen(
                [sys.executable, str(WORKER_SCRIPT), spec.task_root, spec.layer_root, spec.handler],
                env={**env, "AWS_LAMBDA_LOG_STREAM_NAME": self.stream},
                cwd=spec.task_root,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=None,  # the emulator's own log
                text=True,
                encoding="utf-8",
            )
            self.pid = self._proc.pid
            assert self._proc.stdin is not None and self._proc.stdout is not None
            self._stdin, self._stdout = self._proc.stdin, self._proc.stdout
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        ready = self._next_line(timeout=START_SECONDS)
        if ready is None:
            self.kill()
            raise WorkerGone(f"worker for {spec.name} did not start")

    def _read(self) -> None:
        with self._stdout:
            for line in self._stdout:
                self._lines.put(line)
        self._lines.put(None)

    def _next_line(self, timeout: float) -> str | None:
        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            return None

    def call(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        try:
            self._stdin.write(json.dumps(request) + "\n")
            self._stdin.flush()
        except (BrokenPipeError, OSError, ValueError) as exc:
            self.kill()
            raise WorkerGone(f"worker exited: {exc}") from None
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:  # still running at the deadline: the function timed out
            self.kill()
            raise WorkerGone("timeout") from None
        if line is None:  # EOF before an answer: the worker died (killed, crashed), at once reported
            self.kill()
            raise WorkerGone("exited")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def alive(self) -> bool:
        if self._proc is not None:
            return self._proc.poll() is None
        if self._pidfd is None:
            return False
        return not select.select([self._pidfd], [], [], 0)[0]  # a pidfd turns readable at exit

    def kill(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass
        elif self._pidfd is not None:
            pidfd, self._pidfd = self._pidfd, None
            try:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass  # exited already
            select.select([pidfd], [], [], 5)
            os.close(pidfd)
        try:
            self._stdin.close()
        except OSError:
            pass  # the worker is gone: nothing left to flush to
