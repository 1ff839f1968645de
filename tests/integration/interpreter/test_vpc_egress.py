"""VPC sessions (an `allowlist` egress) of the local interpreter: no network but a relay to the
egress proxy, from a loopback address of the session's own.

The proxy here is a stand-in TCP server on the host's loopback that tells each connection the
address it came from and then echoes: what is under test is the relay (plumbing that reads
nothing it carries), not the proxy, which has its own tests (functions/egress_proxy).
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from sandbox_common import naming

from infra.local.interpreter import LocalInterpreterServer, network
from infra.local.interpreter import egress as egress_relay
from infra.local.interpreter.egress import EgressProxy
from tests.integration.interpreter._helpers import SANDBOX_CI, invoke, make_client, wait_until

VPC_CI = "sbx_test_acme_alw"
CA_PEM = "-----BEGIN CERTIFICATE-----\nMIIBstandin\n-----END CERTIFICATE-----\n"


class StandInProxy:
    """Accepts on 127.0.0.1: writes `peer=<address>\\n` to each connection, then echoes it until the
    client half-closes; records every peer and notices when a connection ends."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.peers: list[str] = []
        self.open = 0
        self.ended = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def _accept(self) -> None:
        while True:
            try:
                conn, (host, _) = self.sock.accept()
            except OSError:
                return
            with self._lock:
                self.peers.append(host)
                self.open += 1
            threading.Thread(target=self._serve, args=(conn, host), daemon=True).start()

    def _serve(self, conn: socket.socket, host: str) -> None:
        with conn:
            with contextlib.suppress(OSError):
                conn.sendall(f"peer={host}\n".encode())
                while data := conn.recv(65536):
                    conn.sendall(data)
                conn.shutdown(socket.SHUT_WR)
        with self._lock:
            self.open -= 1
            self.ended += 1

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def proxy() -> Iterator[StandInProxy]:
    stand_in = StandInProxy()
    yield stand_in
    stand_in.close()


@pytest.fixture(scope="module")
def ca_cert(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("egress-ca") / "ca.pem"
    path.write_text(CA_PEM)
    path.chmod(0o600)  # the server's own copy is what sessions read
    return str(path)


@pytest.fixture(scope="module")
def vpc_server(proxy: StandInProxy, ca_cert: str) -> Iterator[LocalInterpreterServer]:
    srv = LocalInterpreterServer(
        interpreters={VPC_CI: "VPC", SANDBOX_CI: "SANDBOX"},
        egress_proxy=EgressProxy.parse(f"127.0.0.1:{proxy.port}", ca_cert),
    )
    with srv:
        yield srv


def _start(client: Any, interpreter: str = VPC_CI) -> str:
    return client.start_code_interpreter_session(codeInterpreterIdentifier=interpreter)["sessionId"]


# Code run in the session: one JSON line per probe.
_RELAY_PEER = (
    "import socket, json\n"
    f"s = socket.create_connection(('127.0.0.1', {egress_relay.SESSION_PORT}), timeout=10)\n"
    "line = s.makefile('rb').readline().decode().strip()\n"
    "s.close()\n"
    "print(json.dumps({'relay': line}))\n"
)


def _probe_code(targets: list[tuple[str, int]]) -> str:
    return (
        "import socket, json\n"
        f"for host, port in {targets!r}:\n"
        "    s = socket.socket(); s.settimeout(3)\n"
        "    try:\n"
        "        s.connect((host, port)); print(json.dumps([host, port, 'connected']))\n"
        "    except OSError as e:\n"
        "        print(json.dumps([host, port, 'blocked ' + type(e).__name__]))\n"
        "    finally:\n"
        "        s.close()\n"
        "for name in ('example.com', 'egress.sandbox.internal'):\n"
        "    try:\n"
        "        socket.getaddrinfo(name, 443); print(json.dumps([name, 53, 'resolved']))\n"
        "    except OSError as e:\n"
        "        print(json.dumps([name, 53, 'blocked ' + type(e).__name__]))\n"
    )


def test_vpc_session_reaches_only_the_egress_proxy_from_an_address_of_its_own(
    vpc_server: LocalInterpreterServer,
    proxy: StandInProxy,
    listener: int,
    outside: tuple[str, int, str],
) -> None:
    # Given two VPC sessions, a listener on every host address, the interpreter's own API, the
    # proxy's port itself, another "machine" and a link-local (metadata) address
    client = make_client(vpc_server.endpoint)
    first, second = _start(client), _start(client)
    other_ip, other_port, link_local = outside
    targets = [
        ("127.0.0.1", listener),
        ("127.0.0.1", vpc_server.port),  # the interpreter API
        ("127.0.0.1", proxy.port),  # the proxy's port, directly: only the relay reaches it
        ("169.254.169.254", 80),
        (link_local, other_port),
        (other_ip, other_port),
        ("1.1.1.1", 443),
        *[(a, listener) for a in network.host_ipv4_addresses()],
    ]

    # When each reaches the relay, and one tries everything else (and DNS)
    peers = [
        json.loads(invoke(client, VPC_CI, s, _RELAY_PEER)[0]["stdout"])["relay"] for s in (first, second)
    ]
    probed = invoke(client, VPC_CI, first, _probe_code(targets))[0]
    lines = [json.loads(line) for line in probed["stdout"].splitlines()]
    described = vpc_server.manager.plan.describe(vpc_server.manager.limits)

    # Then the proxy saw each session from its own 127.77.x.y, and the session reached nothing else
    addresses = [p.removeprefix("peer=") for p in peers]
    assert all(
        ipaddress.ip_address(a) in ipaddress.ip_network(egress_relay.SOURCE_NETWORK) for a in addresses
    )
    assert addresses[0] != addresses[1], addresses
    assert len(lines) == len(targets) + 2, probed
    assert [line[2].split()[0] for line in lines] == ["blocked"] * len(lines), lines
    # And `local status` says what a VPC session gets
    assert "egress proxy" in described["network"]["VPC"]


def test_vpc_relay_carries_bytes_exactly_and_passes_a_half_close_on(
    vpc_server: LocalInterpreterServer,
) -> None:
    # Given a VPC session
    client = make_client(vpc_server.endpoint)
    session_id = _start(client)
    # When it sends 4 MiB of random bytes through the relay, half-closes and reads the echo back
    code = (
        "import socket, os, hashlib\n"
        "data = os.urandom(4 << 20)\n"
        f"s = socket.create_connection(('127.0.0.1', {egress_relay.SESSION_PORT}), timeout=30)\n"
        "f = s.makefile('rb'); f.readline()\n"
        "import threading\n"
        "def send():\n"
        "    s.sendall(data); s.shutdown(socket.SHUT_WR)\n"
        "t = threading.Thread(target=send); t.start()\n"
        "back = f.read(); t.join()\n"
        "print(hashlib.sha256(data).hexdigest(), hashlib.sha256(back).hexdigest(), len(back))\n"
    )
    sent, received, length = invoke(client, VPC_CI, session_id, code)[0]["stdout"].split()
    # Then every byte came back, in order, and the echo ended when the session half-closed
    assert sent == received and int(length) == 4 << 20
    assert hashlib.sha256(b"").hexdigest() != received


def test_vpc_session_sees_the_proxy_ca_certificate_read_only(
    vpc_server: LocalInterpreterServer, ca_cert: str
) -> None:
    # Given a VPC session and a SANDBOX session of the same server
    client = make_client(vpc_server.endpoint)
    vpc, sandboxed = _start(client), _start(client, SANDBOX_CI)
    code = (
        "import os, json\n"
        f"path = {egress_relay.SANDBOX_CA_PATH!r}\n"
        "seen = {'exists': os.path.exists(path)}\n"
        "if seen['exists']:\n"
        "    seen['text'] = open(path).read()\n"
        "    try:\n"
        "        open(path, 'a').write('x'); seen['write'] = 'written'\n"
        "    except OSError as e:\n"
        "        seen['write'] = type(e).__name__\n"
        "print(json.dumps(seen))\n"
    )
    # When each looks for the CA certificate and tries to change it
    in_vpc = json.loads(invoke(client, VPC_CI, vpc, code)[0]["stdout"])
    in_sandbox = json.loads(invoke(client, SANDBOX_CI, sandboxed, code)[0]["stdout"])
    # Then the VPC session reads exactly the certificate and cannot write it; the other has none
    assert in_vpc["exists"] is True and in_vpc["text"] == Path(ca_cert).read_text()
    assert in_vpc["write"] in ("PermissionError", "OSError"), in_vpc  # not its file; a read-only mount
    assert in_sandbox == {"exists": False}


def test_vpc_stop_closes_the_relayed_connections_and_bounds_them(
    vpc_server: LocalInterpreterServer, proxy: StandInProxy
) -> None:
    # Given a VPC session holding as many relayed connections as a session may
    client = make_client(vpc_server.endpoint)
    session_id = _start(client)
    before = proxy.ended
    code = (
        "import socket\n"
        "held = []\n"
        f"for _ in range({egress_relay.MAX_CONNECTIONS}):\n"
        f"    s = socket.create_connection(('127.0.0.1', {egress_relay.SESSION_PORT}), timeout=10)\n"
        "    s.makefile('rb').readline(); held.append(s)\n"
        f"extra = socket.create_connection(('127.0.0.1', {egress_relay.SESSION_PORT}), timeout=10)\n"
        "extra.settimeout(10)\n"
        "try:\n"
        "    print('extra', extra.recv(100))\n"
        "except OSError as e:\n"
        "    print('extra', type(e).__name__)\n"
    )
    # When one more connection is opened, and then the session is stopped
    extra = invoke(client, VPC_CI, session_id, code)[0]["stdout"].strip()
    assert wait_until(lambda: proxy.open >= egress_relay.MAX_CONNECTIONS, timeout=30)
    client.stop_code_interpreter_session(codeInterpreterIdentifier=VPC_CI, sessionId=session_id)
    # Then the one beyond the bound was closed at once (never reached the proxy), and the stop
    # ended every connection the session held at the proxy
    assert extra in ("extra b''", "extra ConnectionResetError"), extra
    assert wait_until(lambda: proxy.ended - before >= egress_relay.MAX_CONNECTIONS, timeout=30)


def test_vpc_sessions_refused_without_the_egress_proxy_and_start_once_it_is_attached(
    proxy: StandInProxy, ca_cert: str
) -> None:
    # Given a server with a VPC interpreter but no egress proxy
    with LocalInterpreterServer(interpreters={VPC_CI: "VPC"}) as srv:
        client = make_client(srv.endpoint)
        # When a session is requested
        with pytest.raises(ClientError) as exc:
            _start(client)
        listed = client.list_code_interpreter_sessions(codeInterpreterIdentifier=VPC_CI)["items"]
        # and again once the proxy is attached
        srv.attach_egress(EgressProxy.parse(f"127.0.0.1:{proxy.port}", ca_cert))
        reached = json.loads(invoke(client, VPC_CI, _start(client), _RELAY_PEER)[0]["stdout"])["relay"]
    # Then the first is refused as isolation_unavailable, naming what is missing, and nothing
    # started; the second reaches the proxy
    error = exc.value.response["Error"]
    assert error["Code"] == "AccessDeniedException"
    assert error["Message"].startswith(
        f"{naming.REASON_ISOLATION_UNAVAILABLE}: VPC sessions need the egress proxy"
    )
    assert listed == []
    assert reached.startswith("peer=127.77.")


def test_vpc_sessions_refused_when_sessions_run_unisolated(
    monkeypatch: pytest.MonkeyPatch, proxy: StandInProxy, ca_cert: str
) -> None:
    # Given the operator's escape hatch (sessions with the host's network) and an egress proxy
    monkeypatch.setenv(naming.ENV_LOCAL_UNISOLATED, "1")
    with LocalInterpreterServer(
        interpreters={VPC_CI: "VPC"},
        isolation="unisolated",
        egress_proxy=EgressProxy.parse(f"127.0.0.1:{proxy.port}", ca_cert),
    ) as srv:
        client = make_client(srv.endpoint)
        # When a VPC session is requested
        with pytest.raises(ClientError) as exc:
            _start(client)
    # Then it is refused: no allowlist holds code that has the host's network
    assert exc.value.response["Error"]["Message"].startswith(
        f"{naming.REASON_ISOLATION_UNAVAILABLE}: VPC sessions (allowlist egress) need bubblewrap"
    )


@pytest.mark.parametrize(
    ("address", "pem", "problem"),
    [
        ("10.0.0.5:3128", CA_PEM, "must be a loopback address"),
        ("127.0.0.1", CA_PEM, "expects HOST:PORT"),
        ("127.0.0.1:99999", CA_PEM, "expects HOST:PORT"),
        (
            "127.0.0.1:3128",
            CA_PEM + "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n",
            "private key",
        ),
        ("127.0.0.1:3128", "not a certificate\n", "no certificate"),
    ],
)
def test_egress_proxy_options_are_checked(tmp_path: Path, address: str, pem: str, problem: str) -> None:
    # Given the interpreter's egress options as an operator might get them wrong
    path = tmp_path / "ca.pem"
    path.write_text(pem)
    # When they are parsed / Then the one problem is named
    with pytest.raises(ValueError, match=problem):
        EgressProxy.parse(address, str(path))
