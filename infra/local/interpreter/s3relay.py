"""A session's way to the tenant's data in the emulated S3, scoped like the tenant's role.

On AgentCore, code in a session reads S3 with the interpreter's execution role: boto3's default
credentials there are the role's, and the role's policy (infra/cdk/constructs/definitions.py,
`tenant_data_statements`) allows exactly the tenant's `data.read` prefixes. Locally the emulated
S3 (moto) enforces no IAM, and a session has no route to it (network.py). So each session of an
interpreter that has a data grant gets one relay of its own:

- it listens on 127.0.0.1:SESSION_PORT *inside the session's network namespace* (the socket is
  made there by the server, before any user code runs; the session's uid cannot bind a port
  below 1024 there). That one port is the only way out of a SANDBOX session, and a PUBLIC
  session's slirp route to the host stays refused as before;
- the session's environment points boto3 at it (`AWS_ENDPOINT_URL_S3`) with placeholder
  credentials: the authority is which relay the session reaches, not a key it holds;
- every request is checked against the interpreter's grant — the same IAM statements the
  execution role gets on AWS — and only GetObject / HeadObject (`s3:GetObject`) and
  ListObjectsV2 (`s3:ListBucket`, `s3:prefix` condition) are relayed. Anything else, a key that is
  not plain (sandbox_common.files.check_s3_key) or a query this relay does not know is refused as
  S3 would refuse an unauthorised call: 403 `AccessDenied`. An allowed request is re-encoded from
  its decoded bucket and key (no byte of the session's path reaches moto as sent) and forwarded
  with a few read headers (Range, conditional GETs); the answer streams back.
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import json
import os
import re
import shutil
import socket
import threading
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from xml.sax.saxutils import escape

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from sandbox_common.files import check_s3_key

# Inside a session's own network namespace: a privileged port, so the session cannot bind it itself.
SESSION_PORT = 880
# What boto3 in the session is given (never the server's own credentials), and what the relay
# signs its own requests to moto with (moto checks no signature; it needs one to see a caller).
PLACEHOLDER_KEY = "local-session"
FORWARDED_HEADERS = ("range", "if-match", "if-none-match", "if-modified-since", "if-unmodified-since")
HOP_BY_HOP = ("connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade", "te")
LIST_QUERY = {
    "list-type",
    "prefix",
    "delimiter",
    "continuation-token",
    "start-after",
    "max-keys",
    "encoding-type",
    "fetch-owner",
}
CLONE_NEWNET = 0x40000000
MAX_CONNECTIONS = 16  # per session: above s3transfer's 10 concurrent ranged GETs of one download
IDLE_SECONDS = 30
UPSTREAM_TIMEOUT = 60


@dataclass(frozen=True)
class DataGrant:
    """Where the emulated S3 is, and the IAM statements a session of one interpreter may use."""

    endpoint: str
    statements: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)
    region: str = "us-east-1"


def grants_to_json(grants: Mapping[str, DataGrant]) -> str:
    return json.dumps(
        {
            i: {"endpoint": g.endpoint, "region": g.region, "statements": list(g.statements)}
            for i, g in sorted(grants.items())
        }
    )


def grants_from_json(text: str) -> dict[str, DataGrant]:
    """`{"<interpreter id>": {"endpoint", "region", "statements": [...]}}` (`--data-grants FILE`)."""
    data = json.loads(text or "{}")
    if not isinstance(data, dict):
        raise ValueError("data grants: expected a JSON object of interpreter id -> grant")
    grants = {}
    for interpreter_id, grant in data.items():
        if not isinstance(grant, dict) or not isinstance(grant.get("endpoint"), str):
            raise ValueError(f"data grants: {interpreter_id!r} needs an endpoint")
        statements = grant.get("statements") or []
        if not isinstance(statements, list) or not all(isinstance(x, dict) for x in statements):
            raise ValueError(f"data grants: {interpreter_id!r} statements must be a list of objects")
        grants[str(interpreter_id)] = DataGrant(
            grant["endpoint"], tuple(statements), str(grant.get("region") or "us-east-1")
        )
    return grants


# --- the grant: IAM statements, evaluated as IAM does for the few shapes the role has ----------------
def _as_list(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else [str(v) for v in value or ()]


def _wildcard(pattern: str, value: str) -> bool:
    """IAM's wildcards: `*` any run of characters, `?` one character; nothing else is special."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, flags=re.DOTALL) is not None


def _conditions_hold(condition: Mapping[str, Any] | None, context: Mapping[str, str]) -> bool:
    """Only StringLike is understood; any other operator makes the statement not apply."""
    for operator, tests in (condition or {}).items():
        if operator != "StringLike" or not isinstance(tests, Mapping):
            return False
        for key, patterns in tests.items():
            value = context.get(key)
            if value is None or not any(_wildcard(p, value) for p in _as_list(patterns)):
                return False
    return True


def permits(
    statements: Iterable[Mapping[str, Any]], action: str, resource: str, context: Mapping[str, str]
) -> bool:
    """An explicit Allow and no explicit Deny (IAM's evaluation for one identity policy)."""
    allowed = False
    for statement in statements:
        if "Action" not in statement or "Resource" not in statement:
            continue  # NotAction / NotResource: never in the role's statements, never trusted here
        if not any(_wildcard(a.lower(), action.lower()) for a in _as_list(statement["Action"])):
            continue
        if not any(_wildcard(r, resource) for r in _as_list(statement["Resource"])):
            continue
        if not _conditions_hold(statement.get("Condition"), context):
            continue
        if statement.get("Effect") == "Deny":
            return False
        allowed = allowed or statement.get("Effect") == "Allow"
    return allowed


class Refused(Exception):
    pass


@dataclass(frozen=True)
class Target:
    action: str
    resource: str
    context: dict[str, str]
    upstream_path: str


def target(method: str, raw_path: str) -> Target:
    """What a path-style S3 request asks for; Refused for anything the relay does not carry."""
    try:
        return _target(method, raw_path)
    except ValueError as exc:  # a bad escape or query (UnicodeDecodeError is a ValueError too)
        raise Refused(f"unreadable request: {exc}") from None


def _target(method: str, raw_path: str) -> Target:
    if method not in ("GET", "HEAD"):
        raise Refused(f"{method} is not relayed")
    parts = urllib.parse.urlsplit(raw_path)
    if parts.scheme or parts.netloc or parts.fragment or not parts.path.startswith("/"):
        raise Refused("not a path-style request")
    bucket_raw, _, key_raw = parts.path[1:].partition("/")
    bucket = urllib.parse.unquote(bucket_raw, errors="strict")
    key = urllib.parse.unquote(key_raw, errors="strict")
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket):
        raise Refused("not a bucket name")
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    quoted_bucket = urllib.parse.quote(bucket, safe="")
    if key:
        if query:
            raise Refused("object requests with a query are not relayed")
        try:
            check_s3_key(key)
        except ValueError as exc:
            raise Refused(str(exc)) from None
        path = f"/{quoted_bucket}/{urllib.parse.quote(key, safe='/')}"
        return Target("s3:GetObject", f"arn:aws:s3:::{bucket}/{key}", {}, path)
    names = [name for name, _ in query]
    if dict(query).get("list-type") != "2" or len(set(names)) != len(names) or not set(names) <= LIST_QUERY:
        raise Refused("only ListObjectsV2 is relayed on a bucket")
    prefix = dict(query).get("prefix", "")
    encoded = urllib.parse.urlencode(sorted(query), quote_via=urllib.parse.quote)
    return Target(
        "s3:ListBucket", f"arn:aws:s3:::{bucket}", {"s3:prefix": prefix}, f"/{quoted_bucket}?{encoded}"
    )


# --- the relay ------------------------------------------------------------------------------------
def _error_body(code: str, message: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{escape(code)}</Code><Message>{escape(message)}</Message></Error>"
    ).encode()


class _Handler(BaseHTTPRequestHandler):
    server: S3Relay
    protocol_version = "HTTP/1.1"
    timeout = IDLE_SECONDS  # the session's socket: an idle or stalled connection is closed

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        pass

    def do_GET(self) -> None:
        self._relay()

    def do_HEAD(self) -> None:
        self._relay()

    # Every other method is refused as IAM refuses it (AccessDenied), not as an unknown one (501).
    do_PUT = do_POST = do_DELETE = do_PATCH = do_OPTIONS = do_GET

    def _refuse(self, message: str) -> None:
        body = _error_body("AccessDenied", message)
        self.send_response(403)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _drain(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(min(length, 1 << 20))
        if length > 1 << 20 or self.headers.get("Transfer-Encoding"):
            self.close_connection = True

    def _relay(self) -> None:
        self._drain()
        try:
            wanted = target(self.command, self.path)
        except Refused as exc:
            return self._refuse(f"Access Denied ({exc})")
        if not permits(self.server.grant.statements, wanted.action, wanted.resource, wanted.context):
            return self._refuse(
                f"Access Denied: this session's role may not {wanted.action} {wanted.resource}"
            )
        upstream = urllib.parse.urlsplit(self.server.grant.endpoint)
        conn = http.client.HTTPConnection(
            upstream.hostname or "127.0.0.1", upstream.port, timeout=UPSTREAM_TIMEOUT
        )
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() in FORWARDED_HEADERS}
            conn.request(
                self.command, wanted.upstream_path, headers=self.server.signed(self.command, wanted, headers)
            )
            answer = conn.getresponse()
            self.send_response(answer.status)
            length = answer.getheader("Content-Length")
            for name, value in answer.getheaders():
                if name.lower() not in HOP_BY_HOP and name.lower() not in ("server", "date"):
                    self.send_header(name, value)
            if length is None and self.command != "HEAD":
                self.close_connection = True
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                shutil.copyfileobj(answer, self.wfile, 1 << 20)
        except OSError:
            self.close_connection = True
        finally:
            conn.close()


class S3Relay(ThreadingHTTPServer):
    """One session's relay on an already bound, listening socket. It serves at most
    MAX_CONNECTIONS connections at a time (one thread each, in the server shared by every session):
    a connection beyond them is closed at once, and one idle for IDLE_SECONDS is closed."""

    daemon_threads = True

    def __init__(self, sock: socket.socket, grant: DataGrant) -> None:
        super().__init__(sock.getsockname()[:2], _Handler, bind_and_activate=False)
        self.socket.close()
        self.socket = sock
        self.server_address = sock.getsockname()[:2]
        self.grant = grant
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._thread = threading.Thread(target=self.serve_forever, name="lci-s3relay", daemon=True)
        self._thread.start()

    def signed(self, method: str, wanted: Target, headers: dict[str, str]) -> dict[str, str]:
        """The relay's own SigV4 signature (moto answers an unsigned GET as an anonymous one: 403)."""
        request = AWSRequest(
            method=method, url=self.grant.endpoint.rstrip("/") + wanted.upstream_path, headers=headers
        )
        S3SigV4Auth(Credentials(PLACEHOLDER_KEY, PLACEHOLDER_KEY), "s3", self.grant.region).add_auth(request)
        return dict(request.headers.items())

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A session dropping its connection is its own business: no traceback on the server's stderr."""

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=5)


def listen_here(port: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
        sock.listen(64)
    except OSError:
        sock.close()
        raise
    return sock


def listen_in_netns(pid: int, port: int = SESSION_PORT) -> socket.socket:
    """A listening socket on 127.0.0.1:`port` of the network namespace of `pid`.

    setns(2) moves only the calling thread, so a thread of its own enters the namespace, makes the
    socket (a socket stays in the namespace it was made in) and is gone; the server's other threads
    never leave the host's namespace."""
    made: dict[str, Any] = {}

    def work() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        target_fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
        try:
            if libc.setns(target_fd, CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns into the session's network: {os.strerror(err)}")
            made["socket"] = listen_here(port)
        except BaseException as exc:
            made["error"] = exc
        finally:
            os.close(target_fd)

    thread = threading.Thread(target=work, name="lci-netns")
    thread.start()
    thread.join()
    if "error" in made:
        raise made["error"]
    made_socket: socket.socket = made["socket"]
    return made_socket


def session_env(port: int, region: str) -> dict[str, str]:
    """What boto3 in the session reads: the relay as its S3 endpoint, placeholder credentials."""
    return {
        "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": PLACEHOLDER_KEY,
        "AWS_SECRET_ACCESS_KEY": PLACEHOLDER_KEY,
        "AWS_DEFAULT_REGION": region,
        "AWS_REGION": region,
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def stop(relay: S3Relay | None) -> None:
    """Stop a relay without waiting for its loop's next poll (the session's end does not wait)."""
    if relay is not None:

        def close() -> None:
            with contextlib.suppress(OSError):
                relay.stop()

        threading.Thread(target=close, name="lci-s3relay-stop", daemon=True).start()
