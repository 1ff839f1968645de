"""`sandboxctl` commands for the test suite without a Python start-up and a boto3 import each.

A server process (`python -m tests.support.ctl_server`, one per test process, started on the first
command) imports the CLI, boto3 and pydantic once and builds one client of every service the CLI
calls, so botocore's data loader holds their models; then it forks one child per command. The
child takes the command's environment (exactly, as a new process would get it), working
directory, argv and standard streams, runs `infra.sandboxctl.main.main`, and exits with its exit
status. So every command still runs in a process of its own, from the state right after those
imports, with no state of an earlier command; only the start-up is shared. The README-commands
test (`tests/docs`), the MCP tests and the test of what an everyday command loads run the installed
`sandboxctl` as a new process.

Protocol: the test process and the server share a SOCK_SEQPACKET socket pair. A command is one
JSON message `{"argv", "env", "cwd"}` with three descriptors: the child's stdout and stderr, and
one end of a socket pair of the command's own, on which the child reports `{"pid"}` when it
starts and `{"returncode"}` when it ends (its EOF without one: the child was killed).
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from infra.local.lambda_worker import exit_forked_child, reap_children

REPO_ROOT = Path(__file__).resolve().parents[2]
_MAX_MESSAGE = 1 << 20
# Every service sandboxctl builds a client of (their models are loaded once, in the server).
_SERVICES = ("bedrock-agentcore", "cloudformation", "dynamodb", "lambda", "s3", "sqs", "ssm", "sts")


# --- the server ----------------------------------------------------------------------------------
def _run_command(control: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: become the command's process and run it. Never returns."""
    code = 1
    report = None
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        control.close()
        stdout_fd, stderr_fd, report_fd = fds
        report = socket.socket(fileno=report_fd)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(stdout_fd, 1)
        os.dup2(stderr_fd, 2)
        for fd in (devnull, stdout_fd, stderr_fd):
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.argv = list(request["argv"])
        report.send(json.dumps({"pid": os.getpid()}).encode())
        from infra.sandboxctl.main import main

        try:
            code = main(sys.argv[1:])
        except SystemExit as exc:  # argparse's usage errors, as the console script would exit
            if isinstance(exc.code, str):
                print(exc.code, file=sys.stderr)
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - a forked child must never return into the server
        traceback.print_exc()
        code = 1
    finally:
        if report is not None:
            try:
                report.send(json.dumps({"returncode": code}).encode())
            except OSError:
                pass  # the test gave up on this command
        exit_forked_child(code)


def _preload() -> None:
    import boto3  # noqa: F401 - loaded once, before any fork
    import pydantic  # noqa: F401
    from sandbox_common import aws

    import infra.sandboxctl.commands  # noqa: F401
    import infra.sandboxctl.main  # noqa: F401

    session = aws.session(region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    for service in _SERVICES:
        session.client(service, endpoint_url="http://127.0.0.1:9")  # never called: models loaded


def serve(control: socket.socket) -> None:
    _preload()
    signal.signal(signal.SIGCHLD, reap_children)
    control.send(b'{"ready": true}')
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, _MAX_MESSAGE, 3)
        except ConnectionResetError:
            message, fds = b"", []
        if not message:
            break
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            _run_command(control, json.loads(message), fds)
        for fd in fds:
            os.close(fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    while True:  # EOF: no more commands; wait for the running ones
        try:
            os.wait()
        except ChildProcessError:
            return


# --- the test process's side ---------------------------------------------------------------------
class _Server:
    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SANDBOX_"))}
        with theirs:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.ctl_server"],
                cwd=REPO_ROOT,
                env=env,
                stdin=theirs.fileno(),
                stdout=subprocess.DEVNULL,
            )
        self.sock = ours
        ours.settimeout(120)
        if ours.recv(64) != b'{"ready": true}':
            raise RuntimeError("the sandboxctl fork server did not start")
        ours.settimeout(None)
        self.lock = threading.Lock()


_server: _Server | None = None
_server_lock = threading.Lock()


@atexit.register
def _close_server() -> None:
    """At exit: end the server (it waits for the commands still running), a few seconds at most."""
    if _server is not None:
        _server.sock.close()
        try:
            _server.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass  # a command still running keeps it: both end with that command


def _current_server() -> _Server:
    global _server
    with _server_lock:
        if _server is None or _server.proc.poll() is not None:
            if _server is not None:
                _server.sock.close()  # the dead server's: a restart must not leave it open
            _server = _Server()
        return _server


def _drain(fd: int, into: list[bytes]) -> None:
    with open(fd, "rb") as pipe:
        into.append(pipe.read())


def run(argv: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """`argv` (argv[0] the sandboxctl executable) as a forked child of the server, in `env`: what
    `subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)` returns."""
    server = _current_server()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    request = json.dumps({"argv": argv, "env": env, "cwd": os.getcwd()}).encode()
    try:
        with server.lock:
            socket.send_fds(server.sock, [request], [out_w, err_w, theirs.fileno()])
    finally:
        for fd in (out_w, err_w):
            os.close(fd)
        theirs.close()
    out: list[bytes] = []
    err: list[bytes] = []
    readers = [threading.Thread(target=_drain, args=a, daemon=True) for a in ((out_r, out), (err_r, err))]
    for reader in readers:
        reader.start()
    with ours:
        ours.settimeout(timeout)
        returncode: int | None = None
        pid = None
        try:
            while returncode is None and (message := ours.recv(4096)):
                reply = json.loads(message)
                pid = reply.get("pid", pid)
                returncode = reply.get("returncode")
        except TimeoutError:
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
            raise subprocess.TimeoutExpired(argv, timeout) from None
    for reader in readers:
        reader.join()
    stdout, stderr = (b"".join(chunks).decode() for chunks in (out, err))
    # No report: the child died before it could send one (killed), as a signal's exit status.
    code = -signal.SIGKILL if returncode is None else returncode
    return subprocess.CompletedProcess(argv, code, stdout, stderr)


if __name__ == "__main__":
    serve(socket.socket(fileno=0))
