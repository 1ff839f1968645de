"""The egress proxy as tests meet it: a local stack started with test routes to an HTTPS server of
the test's own (its certificate signed by a test CA), credentials written as the session runner
writes them, and clients that go through the proxy as a session's would (CONNECT with
Proxy-Authorization, the proxy's CA trusted), from a chosen loopback source address.

    with egress_stack(tmp, names=["api.example.com"]) as (env, server):
        proxy = Proxy.of(env)
        secret = proxy.issue("sess-1", "acme")
        proxy.bind("sess-1", secret)
        status, headers, body = proxy.get("sess-1", secret, "https://api.example.com/echo")
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import secrets as random
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from sandbox_common import naming as n

from infra.local import certs
from infra.local.state import LocalState, read_state
from tests.support.local_stack import running_stack

ALLOWLIST_ENV = "default-allowlist"
STAGE = "local"


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    sni: str | None
    peer: tuple[str, int] = ("", 0)  # the connection's client address: one per upstream connection


@dataclass
class HttpsTestServer:
    """An HTTPS/1.1 server on 127.0.0.1 for the names in its certificate. Paths:
    `/echo` (its request headers as JSON), `/leak` (the Authorization header it got, back in a
    header, the body in clear, base64 and JSON-escaped), `/leak-gzip` (the same body gzipped),
    `/bytes?n=N` (N bytes), `/stream?n=N` (N bytes announced, the first half sent, the rest once
    `release` is set). Every request is recorded in `seen`."""

    ca: certs.KeyPair
    names: list[str]
    directory: Path
    seen: list[Seen] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    port: int = 0
    _server: ThreadingHTTPServer | None = None

    @property
    def ca_file(self) -> Path:
        return self.directory / "test-ca.pem"

    def start(self) -> HttpsTestServer:
        leaf = certs.make_leaf(self.ca, self.names)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.ca_file.write_bytes(self.ca.cert_pem)
        (self.directory / "leaf.pem").write_bytes(leaf.cert_pem)
        (self.directory / "leaf.key").write_bytes(leaf.key_pem)
        seen = self.seen
        release = self.release

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # It writes a response's head and body separately: with Nagle's algorithm the body
            # waits for the head's ACK, which a client reading from an event loop (the proxy, or
            # any asyncio client) delays ~40 ms. Servers meant for clients (nginx, Go's net/http)
            # send without delay; so does this one.
            disable_nagle_algorithm = True

            def log_message(self, *_: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - stdlib name
                sni = getattr(self.connection, "sni", None)
                seen.append(Seen(self.path, dict(self.headers.items()), sni, tuple(self.client_address)))
                if self.path.startswith("/stream"):
                    self._stream(int(self.path.split("n=", 1)[1]))
                    return
                auth = self.headers.get("Authorization", "")
                extra: dict[str, str] = {}
                if self.path.startswith("/echo"):
                    body = json.dumps(dict(self.headers.items())).encode()
                elif self.path.startswith("/leak"):
                    token = auth.split(" ", 1)[-1]
                    body = json.dumps(
                        {
                            "authorization": auth,
                            "token": token,
                            "b64": base64.b64encode(token.encode()).decode(),
                            "note": f"you sent {token}!",
                        }
                    ).encode()
                    extra["X-Leak"] = auth
                    if self.path.startswith("/leak-gzip"):
                        import gzip

                        body = gzip.compress(body)
                        extra["Content-Encoding"] = "gzip"
                elif self.path.startswith("/bytes"):
                    size = int(self.path.split("n=", 1)[1]) if "n=" in self.path else 1024
                    body = b"x" * size
                else:
                    body = b"not found"
                self.send_response(200 if body != b"not found" else 404)
                self.send_header("Content-Length", str(len(body)))
                for key, value in extra.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

            def _stream(self, size: int) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(size))
                self.end_headers()
                self.wfile.write(b"x" * (size // 2))
                self.wfile.flush()
                release.wait(60)  # a bound on waiting for the test, never a window it relies on
                self.wfile.write(b"y" * (size - size // 2))

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.directory / "leaf.pem", self.directory / "leaf.key")

        def remember_sni(sock: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
            sock.sni = name  # type: ignore[attr-defined]

        context.sni_callback = remember_sni  # type: ignore[assignment]
        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
        self._server = server
        self.port = server.server_address[1]
        threading.Thread(target=server.serve_forever, daemon=True, name="egress-test-server").start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def routes(self) -> str:
        return ",".join(f"{name}=127.0.0.1:{self.port}" for name in self.names)


@contextmanager
def egress_stack(
    directory: Path,
    *,
    names: list[str],
    resolve: str = "",
    uncertified: tuple[str, ...] = (),
    routes_extra: str = "",
    ca: certs.KeyPair | None = None,
    **env_extra: str,
) -> Iterator[tuple[dict[str, str], HttpsTestServer]]:
    """A local stack whose proxy routes `names` to a test HTTPS server (started first). The
    `uncertified` names are routed to the same server, whose certificate does not name them;
    `routes_extra` adds routes of the test's own (`name=127.0.0.1:PORT,...`), to servers whose
    certificates `ca` (given, else made here) signed."""
    server = HttpsTestServer(ca or certs.make_ca("egress test CA"), names, directory / "server").start()
    routes = ",".join(
        filter(
            None,
            [server.routes(), *(f"{name}=127.0.0.1:{server.port}" for name in uncertified), routes_extra],
        )
    )
    extra = {
        n.ENV_EGRESS_TEST_ROUTES: routes,
        n.ENV_EGRESS_TEST_CA: str(server.ca_file),
        **({n.ENV_EGRESS_TEST_RESOLVE: resolve} if resolve else {}),
        **env_extra,
    }
    try:
        with running_stack(directory / "stack", **extra) as env:
            yield env, server
    finally:
        server.stop()


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def reason(self) -> str | None:
        return self.headers.get("x-sandbox-egress-denied")


class Proxy:
    """The running stack's proxy, and the moto tables and parameters behind it."""

    def __init__(self, state: LocalState) -> None:
        self.state = state
        egress = state.data["egress"]
        host, _, port = egress["proxy"].partition(":")
        self.host, self.port = host, int(port)
        self.ca_cert = egress["ca_cert"]
        self.table = state.resources.tables[n.EGRESS.logical]

    @classmethod
    def of(cls, env: dict[str, str]) -> Proxy:
        state = read_state(Path(env["SANDBOX_LOCAL_DIR"]))
        assert state is not None
        return cls(state)

    # --- the session runner's side -------------------------------------------------------------
    def issue(self, session_id: str, tenant: str, environment: str = ALLOWLIST_ENV, ttl: int = 3600) -> str:
        secret = random.token_urlsafe(32)
        now = int(time.time())
        self.state.client("dynamodb").put_item(
            TableName=self.table,
            Item={
                **n.EGRESS.key(session_id, n.EGRESS_CREDENTIAL_ITEM),
                n.EGRESS_ATTR_TENANT: {"S": tenant},
                n.EGRESS_ATTR_ENVIRONMENT: {"S": environment},
                n.EGRESS_ATTR_SECRET_SHA256: {"S": hashlib.sha256(secret.encode()).hexdigest()},
                n.EGRESS_ATTR_ISSUED_AT: {"N": str(now)},
                n.TTL_ATTRIBUTE: {"N": str(now + ttl)},
            },
        )
        return secret

    def revoke(self, session_id: str) -> None:
        self.state.client("dynamodb").update_item(
            TableName=self.table,
            Key=n.EGRESS.key(session_id, n.EGRESS_CREDENTIAL_ITEM),
            UpdateExpression="SET #r = :now",
            ExpressionAttributeNames={"#r": n.EGRESS_ATTR_REVOKED_AT},
            ExpressionAttributeValues={":now": {"N": str(int(time.time()))}},
        )

    def item(self, session_id: str, sk: str) -> dict[str, Any]:
        from boto3.dynamodb.types import TypeDeserializer

        got = self.state.client("dynamodb").get_item(
            TableName=self.table, Key=n.EGRESS.key(session_id, sk), ConsistentRead=True
        )
        deser = TypeDeserializer()
        return {k: deser.deserialize(v) for k, v in (got.get("Item") or {}).items()}

    def counters(self, session_id: str) -> dict[str, Any]:
        return self.item(session_id, n.EGRESS_COUNTERS_ITEM)

    def set_policy(self, tenant: str, document: dict[str, Any], environment: str = ALLOWLIST_ENV) -> None:
        self.state.client("ssm").put_parameter(
            Name=n.egress_policy_parameter(STAGE, tenant, environment),
            Value=json.dumps(document),
            Type="String",
            Overwrite=True,
        )

    def put_secret(self, tenant: str, name: str, value: str) -> None:
        client = self.state.client("secretsmanager")
        secret_id = n.tenant_secret_name(STAGE, tenant, name)
        try:
            client.create_secret(Name=secret_id, SecretString=value)
        except client.exceptions.ResourceExistsException:
            client.put_secret_value(SecretId=secret_id, SecretString=value)

    # --- a session's side ----------------------------------------------------------------------
    def authorization(self, session_id: str, secret: str) -> str:
        return "Basic " + base64.b64encode(f"{session_id}:{secret}".encode()).decode()

    def bind(self, session_id: str, secret: str, source: str = "127.0.0.1") -> Answer:
        return self.plain(
            session_id, secret, f"http://{n.EGRESS_PSEUDO_HOST}{n.EGRESS_BIND_PATH}", source=source
        )

    def plain(
        self,
        session_id: str | None,
        secret: str | None,
        url: str,
        *,
        source: str = "127.0.0.1",
        headers: dict[str, str] | None = None,
    ) -> Answer:
        """A plain-HTTP request through the proxy (absolute form, the credential on the request)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30, source_address=(source, 0))
        try:
            sent = dict(headers or {})
            if session_id is not None and secret is not None:
                sent["Proxy-Authorization"] = self.authorization(session_id, secret)
            conn.request("GET", url, headers=sent)
            response = conn.getresponse()
            return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
        finally:
            conn.close()

    def get(
        self,
        session_id: str | None,
        secret: str | None,
        url: str,
        *,
        source: str = "127.0.0.1",
        headers: dict[str, str] | None = None,
        sni: str | None = None,
        timeout: float = 30,
    ) -> Answer:
        """An HTTPS GET through the proxy: CONNECT host:port (with the credential), TLS trusting the
        proxy's CA (SNI `sni`, default the host), then the request. A refused CONNECT is the
        answer's status (403, 407, ...)."""
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port or 443
        sock = socket.create_connection((self.host, self.port), timeout=timeout, source_address=(source, 0))
        try:
            connect = f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            if session_id is not None and secret is not None:
                connect += f"Proxy-Authorization: {self.authorization(session_id, secret)}\r\n"
            sock.sendall((connect + "\r\n").encode())
            head = _read_head(sock)
            status = int(head.split(b" ", 2)[1])
            if status != 200:
                headers_in = _headers(head)
                length = int(headers_in.get("content-length", "0"))
                return Answer(status, headers_in, _read_exact(sock, length))
            context = ssl.create_default_context(cafile=self.ca_cert)
            context.check_hostname = sni is None or sni == host
            tls = context.wrap_socket(sock, server_hostname=sni or host)
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
            conn.sock = tls
            path = parts.path + (f"?{parts.query}" if parts.query else "")
            conn.request("GET", path or "/", headers=headers or {})
            response = conn.getresponse()
            return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
        finally:
            sock.close()

    def raw(self, data: bytes, *, source: str = "127.0.0.1", timeout: float = 15) -> bytes:
        """Bytes sent as they are; whatever comes back until the proxy closes (or `timeout`)."""
        with socket.create_connection(
            (self.host, self.port), timeout=timeout, source_address=(source, 0)
        ) as sock:
            try:
                sock.sendall(data)
            except OSError:
                pass
            out = b""
            try:
                while chunk := sock.recv(65536):
                    out += chunk
            except (TimeoutError, OSError):
                pass
            return out

    def answers(self) -> bool:
        """The proxy still answers: a request without a credential gets its 407."""
        return self.plain(None, None, "http://api.example.com/").status == 407


def _read_head(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(1)
        if not chunk:
            break
        data += chunk
    return data


def _headers(head: bytes) -> dict[str, str]:
    out = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, sep, value = line.partition(":")
        if sep:
            out[name.strip().lower()] = value.strip()
    return out


def _read_exact(sock: socket.socket, length: int) -> bytes:
    data = b""
    while len(data) < length:
        chunk = sock.recv(length - len(data))
        if not chunk:
            break
        data += chunk
    return data


def wait_for(predicate: Any, *, timeout: float, interval: float = 0.5, what: str = "state") -> Any:
    """Poll `predicate` until it returns a truthy value; its value, or AssertionError after
    `timeout` seconds (a bound on waiting for state, never a window the test relies on)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what} not reached within {timeout}s (last: {last!r})")


class Tunnel:
    """One CONNECT tunnel kept open, its requests sent one after another on the same connection
    (what an open session's keep-alive connection does): `get(path)` -> Answer."""

    def __init__(
        self, proxy: Proxy, session_id: str, secret: str, host: str, *, source: str = "127.0.0.1"
    ) -> None:
        self.host = host
        self.sock = socket.create_connection((proxy.host, proxy.port), timeout=30, source_address=(source, 0))
        self.sock.sendall(
            f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n"
            f"Proxy-Authorization: {proxy.authorization(session_id, secret)}\r\n\r\n".encode()
        )
        head = _read_head(self.sock)
        assert head.startswith(b"HTTP/1.1 200"), head
        context = ssl.create_default_context(cafile=proxy.ca_cert)
        self.conn = http.client.HTTPConnection(host, 443, timeout=30)
        self.conn.sock = context.wrap_socket(self.sock, server_hostname=host)

    def get(self, path: str) -> Answer:
        self.conn.request("GET", path)
        response = self.conn.getresponse()
        return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())

    def close(self) -> None:
        self.conn.close()
        self.sock.close()
