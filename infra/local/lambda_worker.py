"""One warm "execution environment" of the local Lambda emulator: a process that has imported the
function's handler once and then serves invocations, one at a time, like a Lambda container.

Protocol: one JSON line per request on stdin, one JSON line per response on a private copy of the
original stdout; fd 1 itself is pointed at stderr so that whatever the handler prints (Powertools
logs, print) goes to the log stream, not into the protocol. Stdlib only, so nothing but the
function's own imports is loaded.

Two ways to start one, both with exactly the function's environment:
- `python lambda_worker.py TASK_ROOT LAYER_ROOT HANDLER`: a worker of its own;
- `python lambda_worker.py --fork-server TASK_ROOT LAYER_ROOT HANDLER`, with a Unix
  SOCK_SEQPACKET socket as stdin: a fork server. It imports the handler once, and then forks one
  worker per request on that socket, each starting from the state a fresh worker has right after
  the import (nothing has been invoked in the server). A request is a JSON message
  `{"stream": LOG_STREAM}` with three file descriptors (the worker's stdin, protocol out and
  stderr); the answer is `{"pid": PID}` with a pidfd of the worker, or `{"error": MESSAGE}`. The
  server refuses to fork when the import left a thread running (a fork would lose it). At EOF
  on the socket it waits for its workers to exit, then exits.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, NoReturn


class LambdaContext:
    """The attributes and method of the Python runtime's context object that handlers use."""

    def __init__(self, request: dict[str, Any]) -> None:
        self.function_name: str = request["function_name"]
        self.function_version = "$LATEST"
        self.invoked_function_arn: str = request["invoked_function_arn"]
        self.memory_limit_in_mb: int = int(request["memory_limit_in_mb"])
        self.aws_request_id: str = request["request_id"]
        self.log_group_name: str = request["log_group_name"]
        self.log_stream_name: str = request["log_stream_name"]
        self.identity = None
        self.client_context = None
        self._deadline_ms: int = int(request["deadline_ms"])

    def get_remaining_time_in_millis(self) -> int:
        return max(0, self._deadline_ms - int(time.time() * 1000))


def _error_body(exc: BaseException, request_id: str) -> dict[str, Any]:
    # The same shape the Lambda Python runtime returns for an unhandled exception.
    return {
        "errorMessage": str(exc),
        "errorType": type(exc).__name__,
        "requestId": request_id,
        "stackTrace": [
            line.rstrip("\n")
            for line in traceback.format_tb(exc.__traceback__.tb_next if exc.__traceback__ else None)
        ],
    }


Handler = Callable[[Any, LambdaContext], Any]


def load(handler_path: str) -> tuple[Handler | None, dict[str, Any] | None]:
    """The handler, or the init error Lambda reports on every invoke when its import fails."""
    module_name, _, func_name = handler_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), func_name), None
    except Exception as exc:  # noqa: BLE001 - Lambda reports init failures on every invoke
        traceback.print_exc()
        return None, {
            "errorMessage": f"Unable to import module '{module_name}': {exc}",
            "errorType": "Runtime.ImportModuleError",
            "stackTrace": [],
        }


def serve(handler: Handler | None, init_error: dict[str, Any] | None, proto_in: Any, proto_out: Any) -> None:
    proto_out.write(json.dumps({"ready": True}) + "\n")
    proto_out.flush()
    while True:
        line = proto_in.readline()
        if not line:
            return
        request = json.loads(line)
        if init_error is not None:
            response: dict[str, Any] = {
                "ok": False,
                "error": {**init_error, "requestId": request["request_id"]},
            }
        else:
            try:
                event = json.loads(request["payload"]) if request["payload"] else {}
                assert handler is not None
                result = handler(event, LambdaContext(request))
                response = {"ok": True, "payload": json.dumps(result)}
            except Exception as exc:  # noqa: BLE001 - becomes X-Amz-Function-Error: Unhandled
                traceback.print_exc()
                response = {"ok": False, "error": _error_body(exc, request["request_id"])}
        sys.stdout.flush()
        sys.stderr.flush()
        proto_out.write(json.dumps(response) + "\n")
        proto_out.flush()


def reap_children(_signum: int = 0, _frame: Any = None) -> None:
    """Reap every child that has exited (a fork server's SIGCHLD handler)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _become_worker(
    handler: Handler | None,
    init_error: dict[str, Any] | None,
    control: socket.socket,
    fds: list[int],
    stream: str,
) -> None:
    """In a forked child: take the request's descriptors as stdin, protocol out and stderr, and
    serve. Never returns into the server's loop."""
    code = 0
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        control.close()
        stdin_fd, proto_fd, stderr_fd = fds
        os.dup2(stdin_fd, 0)
        os.dup2(stderr_fd, 2)
        os.dup2(2, 1)
        for fd in (stdin_fd, stderr_fd):
            os.close(fd)
        os.environ["AWS_LAMBDA_LOG_STREAM_NAME"] = stream
        proto_in = os.fdopen(0, "r", encoding="utf-8", closefd=False)
        proto_out = os.fdopen(proto_fd, "w", encoding="utf-8")
        sys.stdin = proto_in
        serve(handler, init_error, proto_in, proto_out)
    except BaseException:  # noqa: BLE001 - a forked child must never return into the server
        traceback.print_exc()
        code = 1
    finally:
        exit_forked_child(code)


def exit_forked_child(code: int) -> NoReturn:
    """End a forked child at once, its standard streams flushed: never back into its server."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001, S110 - exiting anyway
            pass
    os._exit(code)


def fork_server(handler_path: str, control: socket.socket) -> None:
    handler, init_error = load(handler_path)
    refusal = None
    if threading.active_count() > 1:
        names = sorted(t.name for t in threading.enumerate() if t is not threading.current_thread())
        refusal = f"importing {handler_path} started threads {names}; a forked worker would not have them"
    signal.signal(signal.SIGCHLD, reap_children)
    control.send(json.dumps({"ready": True}).encode())
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 4096, 3)
        except ConnectionResetError:
            message, fds = b"", []
        if not message:
            break
        if refusal or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            control.send(json.dumps({"error": refusal or "a fork request carries 3 descriptors"}).encode())
            continue
        stream = json.loads(message)["stream"]
        sys.stdout.flush()
        sys.stderr.flush()
        # SIGCHLD stays blocked until the pidfd is open: the reaper must not free the pid first.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        pid = os.fork()
        if pid == 0:
            _become_worker(handler, init_error, control, fds, stream)
        for fd in fds:
            os.close(fd)
        try:
            pidfd = os.pidfd_open(pid)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        try:
            socket.send_fds(control, [json.dumps({"pid": pid}).encode()], [pidfd])
        finally:
            os.close(pidfd)
    # EOF: no more forks; the workers exit when their emulator closes their stdin or kills them.
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return


def main(argv: list[str]) -> int:
    forking = argv[:1] == ["--fork-server"]
    task_root, layer_root, handler_path = argv[1:] if forking else argv
    # Lambda's import path: the function code (/var/task) and the layer (/opt/python) first; the
    # directory of this script must not leak in as an import root.
    sys.path[0:1] = [task_root, layer_root]
    if forking:
        fork_server(handler_path, socket.socket(fileno=0))
        return 0
    proto_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    serve(*load(handler_path), sys.stdin, proto_out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
