"""Fixtures for the local Code Interpreter: a real server on 127.0.0.1 and the raw boto3 client.

Tests talk to the server only through the unmodified `bedrock-agentcore` client (endpoint_url
changed), so they pin the wire protocol, not the server's internals.
"""

from __future__ import annotations

import secrets
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from infra.local.interpreter import LocalInterpreterServer
from tests.integration.interpreter._helpers import OTHER_CI, PUBLIC_CI, SANDBOX_CI, make_client


@pytest.fixture(scope="module")
def server() -> Iterator[LocalInterpreterServer]:
    srv = LocalInterpreterServer(
        interpreters={PUBLIC_CI: "PUBLIC", SANDBOX_CI: "SANDBOX", OTHER_CI: "PUBLIC"}
    )
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def client(server: LocalInterpreterServer) -> Any:
    return make_client(server.endpoint)


@pytest.fixture
def session(client: Any) -> Iterator[str]:
    """A READY session on the PUBLIC interpreter, stopped afterwards if still running."""
    session_id = client.start_code_interpreter_session(
        codeInterpreterIdentifier=PUBLIC_CI, sessionTimeoutSeconds=120
    )["sessionId"]
    yield session_id
    try:
        client.stop_code_interpreter_session(codeInterpreterIdentifier=PUBLIC_CI, sessionId=session_id)
    except client.exceptions.ResourceNotFoundException:
        pass


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP port listening on every address of the host (0.0.0.0), accepting connections."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("0.0.0.0", 0))
    sock.listen(16)
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield sock.getsockname()[1]
    stop.set()
    thread.join()
    sock.close()


@pytest.fixture
def outside() -> Iterator[tuple[str, int, str]]:
    """A stand-in for 'another machine': a network namespace we create on this host, reached
    through a veth pair (never an outside address), with a TCP listener in it; it also holds a
    link-local address (where clouds serve instance metadata). Yields (ip, port, link-local ip).

    The namespace is held by its listener process (`unshare --net`) and entered through
    /proc/PID/ns/net, not named under /run/netns: a named namespace is a bind mount that other
    mount activity on a busy host can hide, after which `ip -n` fails with EINVAL."""
    tag = secrets.token_hex(3)
    host_if, ns_if = f"lcio{tag}", f"lcin{tag}"
    subnet = f"10.213.{secrets.randbelow(250) + 1}"
    host_ip, ns_ip = f"{subnet}.1", f"{subnet}.2"
    link_local = f"169.254.{secrets.randbelow(250) + 1}.2"

    def ip(*args: str, netns: str | None = None) -> None:
        # A failure names the command and its stderr.
        enter = ["nsenter", f"--net={netns}"] if netns else []
        done = subprocess.run([*enter, "ip", *args], capture_output=True, text=True)
        if done.returncode != 0:
            raise AssertionError(
                f"{' '.join([*enter, 'ip', *args])}: exit {done.returncode}: {done.stderr.strip()}"
            )

    code = (
        "import socket,sys\ns=socket.socket(); s.bind(('0.0.0.0',0)); s.listen(16)\n"
        "print(s.getsockname()[1], flush=True)\nwhile True:\n    s.accept()[0].close()\n"
    )
    # unshare execs the listener in a new network namespace: the process's pid holds it.
    server = subprocess.Popen(
        ["unshare", "--net", sys.executable, "-c", code], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        netns = f"/proc/{server.pid}/ns/net"
        ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        ip("link", "set", ns_if, "netns", str(server.pid))
        ip("addr", "add", f"{host_ip}/30", "dev", host_if)
        ip("link", "set", host_if, "up")
        ip("addr", "add", f"{ns_ip}/30", "dev", ns_if, netns=netns)
        ip("link", "set", ns_if, "up", netns=netns)
        ip("link", "set", "lo", "up", netns=netns)
        ip("addr", "add", f"{link_local}/32", "dev", ns_if, netns=netns)
        ip("route", "add", f"{link_local}/32", "via", ns_ip)
        socket.create_connection((link_local, port), timeout=3).close()  # the host itself reaches both
        socket.create_connection((ns_ip, port), timeout=3).close()
        yield ns_ip, port, link_local
    finally:
        server.kill()  # the namespace ends with its last process, and the veth pair with it
        server.wait()
        subprocess.run(["ip", "route", "del", f"{link_local}/32"], capture_output=True)
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)
