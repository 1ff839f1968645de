"""A VPC session's one way out: a byte relay to the egress proxy, from an address of its own.

A session of a VPC interpreter (an `allowlist` environment) has its own network namespace with
nothing in it but loopback, like a SANDBOX one, and one listening socket: 127.0.0.1:SESSION_PORT
*inside that namespace*, made there by the server before any user code runs (a port below 1024,
which the session's uid cannot bind). Each connection accepted on it is carried, byte for byte,
to the egress proxy's TCP address on the host, from a loopback source address that belongs to
this session alone (`source_address`: 127.77.x.y, derived from the session's uid, which is
unique among live sessions on this machine). The proxy binds a session's credential to that
address at the readiness call, so a credential copied into another session is refused there.

This is plumbing, not a proxy: it reads no byte it carries, decides nothing, and knows no host
name. What a session may reach is the egress proxy's decision (functions/egress_proxy/); the
relay only makes the proxy the one thing a session can connect to. So a VPC session reaches no
host service (the emulated AWS, the interpreter API, the Lambda emulator, the proxy's other
ports), no metadata address, no public IP and no DNS server: there is no route, only this socket.

The proxy's CA certificate (its certificate, never its key) is bound read-only into the session
at SANDBOX_CA_PATH; the readiness call points the session's Python, pip and curl at it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

from infra.cdk.function_env import EgressEndpoints

# Inside a session's own network namespace: a privileged port, so the session cannot bind it itself.
SESSION_PORT = 881
# Where the proxy's CA certificate is inside every VPC session (read-only).
SANDBOX_CA_PATH = "/opt/local-interpreter/egress-ca.pem"
# The loopback block sessions reach the proxy from: 127.77.0.1 .. 127.77.255.250.
SOURCE_NETWORK = "127.77.0.0/16"
_PER_OCTET = 250
SOURCE_ADDRESSES = 256 * _PER_OCTET
MAX_CONNECTIONS = 32  # per session at a time: pip opens a handful, a browser-like client a dozen
CONNECT_TIMEOUT = 10
_CHUNK = 65536
# Linux: take the source port at connect() (per destination), not at bind() (per source address).
_IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)


class EgressUnavailable(RuntimeError):
    """The egress proxy is not configured or its CA certificate is unusable."""


@dataclass(frozen=True)
class EgressProxy:
    """Where the egress proxy listens on this host, and its CA certificate (a PEM file)."""

    host: str
    port: int
    ca_cert: str

    @classmethod
    def parse(cls, address: str, ca_cert: str) -> EgressProxy:
        """`--egress-proxy 127.0.0.1:PORT --egress-ca-cert PATH`; ValueError naming what is wrong."""
        host, sep, port = address.rpartition(":")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"--egress-proxy expects HOST:PORT, got {address!r}")
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise ValueError(f"--egress-proxy must be a loopback address of this host, got {host!r}")
        check_ca_cert(ca_cert)
        return cls(host, int(port), ca_cert)


def check_ca_cert(path: str) -> None:
    """A readable PEM file holding certificates and no private key (it is shown to sessions)."""
    try:
        text = Path(path).read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"--egress-ca-cert {path}: not a readable PEM file ({exc})") from None
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise ValueError(f"--egress-ca-cert {path}: no certificate in it")
    if "PRIVATE KEY" in text:
        raise ValueError(f"--egress-ca-cert {path}: holds a private key; give the certificate only")


def install_ca_cert(proxy: EgressProxy, directory: str) -> str:
    """A copy of the CA certificate that session uids may read (0644, in the server's own
    directory), so that the file bound into sessions never depends on the original's mode."""
    check_ca_cert(proxy.ca_cert)
    target = os.path.join(directory, "egress-ca.pem")
    shutil.copyfile(proxy.ca_cert, target)
    os.chmod(target, 0o644)
    return target


def session_endpoints(index_url: str) -> EgressEndpoints:
    """How a VPC session of this interpreter sees the proxy, its CA and the package index: what
    the local stack gives dispatch and the reaper (their EGRESS_* environment)."""
    return EgressEndpoints(f"http://127.0.0.1:{SESSION_PORT}", SANDBOX_CA_PATH, index_url)


def source_address(offset: int) -> str:
    """The loopback address the relay of the session with this offset (its uid's place in the
    session uid range, unique among live sessions) connects from."""
    if not 0 <= offset < SOURCE_ADDRESSES:
        raise ValueError(f"no source address for offset {offset}")
    network = ipaddress.ip_network(SOURCE_NETWORK)
    return str(network.network_address + (offset // _PER_OCTET) * 256 + 1 + offset % _PER_OCTET)


class EgressRelay:
    """One session's relay: accepts on `listener` (in the session's namespace), carries each
    connection to `proxy` from `source`. At most MAX_CONNECTIONS at a time; one more is closed at
    once. `stop()` closes the listener and every connection."""

    def __init__(self, listener: socket.socket, proxy: EgressProxy, source: str) -> None:
        self.listener = listener
        self.proxy = proxy
        self.source = source
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._stopped = False
        self._thread = threading.Thread(target=self._accept_loop, name="lci-egress", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self.listener.getsockname()[1])

    def _accept_loop(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # the listener was closed: the session ended
            if not self._slots.acquire(blocking=False):
                conn.close()
                continue
            threading.Thread(target=self._carry, args=(conn,), name="lci-egress-conn", daemon=True).start()

    def _upstream(self) -> socket.socket:
        up = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            with contextlib.suppress(OSError):
                up.setsockopt(socket.IPPROTO_IP, _IP_BIND_ADDRESS_NO_PORT, 1)
            up.bind((self.source, 0))
            up.settimeout(CONNECT_TIMEOUT)
            up.connect((self.proxy.host, self.proxy.port))
            up.settimeout(None)
            up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            up.close()
            raise
        return up

    def _carry(self, conn: socket.socket) -> None:
        up: socket.socket | None = None
        try:
            with self._lock:
                if self._stopped:
                    return
                self._open.add(conn)
            up = self._upstream()
            with self._lock:
                if self._stopped:
                    return
                self._open.add(up)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            back = threading.Thread(target=_pump, args=(up, conn), name="lci-egress-back", daemon=True)
            back.start()
            _pump(conn, up)
            back.join()
        except OSError:
            pass  # the proxy is down or the session hung up: the session sees its connection closed
        finally:
            with self._lock:
                self._open.discard(conn)
                if up is not None:
                    self._open.discard(up)
            for sock in (conn, up):
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.close()
            self._slots.release()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            sockets = [self.listener, *self._open]
            self._open.clear()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy until `src` ends, then end `dst`'s sending side (a half-close travels on); after an
    error, end both connections entirely."""
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    how = socket.SHUT_WR
    try:
        while True:
            n = src.recv_into(buffer)
            if n == 0:
                break
            dst.sendall(view[:n])
    except OSError:
        how = socket.SHUT_RDWR  # a reset or a dead peer: end both sides, the other pump too
        with contextlib.suppress(OSError):
            src.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        dst.shutdown(how)


def stop(relay: EgressRelay | None) -> None:
    if relay is not None:
        relay.stop()
