"""Fault injection at the HTTP boundary — never by replacing product functions.

Two mechanisms, one fault vocabulary (FAULTS):
- `HookFaults`: botocore `before-send` hooks on the clients dispatch itself builds (in-process).
  A fault answers with a real error response of the service's wire protocol, or redirects the
  request to a socket that drops the connection / never answers.
- `FaultProxy`: an HTTP proxy in front of moto for code that runs in another process (the quota
  Lambda in the emulator's worker): its AWS_ENDPOINT_URL points at the proxy.

What each fault means on the wire:
- throttling    the service refuses (400/429 Throttling*); the request is not applied
- 5xx           the request IS applied, then the answer is a 500 (a lost success: the worst case
                for retries and double counting)
- timeout       the connection is dropped without an answer (real socket); for the code invoke a
                socket that never answers, so the runner's own deadline fires
- access_denied 400/403 AccessDenied*; not applied
- malformed     the request IS applied, then the answer is a 200 with an unparseable body
- nested        the request IS applied, then the answer is a 200 nested deeper than any parser goes
                (60,000 brackets; for an event stream, as one result event's payload)
"""

from __future__ import annotations

import json
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from tests.support.http import DROP, Proxy

FAULTS = ("throttling", "5xx", "timeout", "access_denied", "malformed")
# Faults of some cells only (test_fault_matrix.EXTRA_CELLS): where a crash path of its own exists.
NESTED = "nested"
FORWARDED = frozenset({"5xx", "malformed", NESTED})  # the server acted before the answer went wrong

# (status, error code) per protocol family and fault.
_ERRORS: dict[str, dict[str, tuple[int, str]]] = {
    "json": {
        "throttling": (400, "ThrottlingException"),
        "5xx": (500, "InternalServerError"),
        "access_denied": (400, "AccessDeniedException"),
    },
    "query": {
        "throttling": (400, "Throttling"),
        "5xx": (500, "InternalFailure"),
        "access_denied": (403, "AccessDenied"),
    },
    "rest-json": {
        "throttling": (429, "ThrottlingException"),
        "5xx": (500, "InternalServerException"),
        "access_denied": (403, "AccessDeniedException"),
    },
    "lambda": {
        "throttling": (429, "TooManyRequestsException"),
        "5xx": (500, "ServiceException"),
        "access_denied": (403, "AccessDeniedException"),
    },
}
PROTOCOL = {
    "dynamodb": "json",
    "ssm": "json",
    "sqs": "json",
    "sts": "query",
    "lambda": "lambda",
    "bedrock-agentcore": "rest-json",
}


def error_body(protocol: str, fault: str) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of the service's own error shape for `fault`."""
    request_id = str(uuid.uuid4())
    if fault == NESTED:
        deep = b"[" * 60_000 + b"]" * 60_000
        if protocol == "rest-json":
            from infra.local.eventstream import event_payload_frame

            return (
                200,
                {"Content-Type": "application/vnd.amazon.eventstream"},
                event_payload_frame("result", deep),
            )
        return 200, {"Content-Type": "application/x-amz-json-1.0"}, deep
    if fault == "malformed":
        if protocol == "query":
            return 200, {"Content-Type": "text/xml"}, b"<AssumeRoleResponse><AssumeRoleResult><Cred"
        if protocol == "rest-json":
            return 200, {"Content-Type": "application/vnd.amazon.eventstream"}, b"\x00\x00\x00\x10garbage!"
        return 200, {"Content-Type": "application/x-amz-json-1.0"}, b'{"Item": {"truncated'
    status, code = _ERRORS[protocol][fault]
    message = f"injected {fault}"
    if protocol == "json":
        body = json.dumps({"__type": f"com.amazonaws.injected#{code}", "message": message}).encode()
        return status, {"Content-Type": "application/x-amz-json-1.0", "x-amzn-RequestId": request_id}, body
    if protocol == "query":
        body = (
            f"<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code><Message>{message}</Message>"
            f"</Error><RequestId>{request_id}</RequestId></ErrorResponse>"
        ).encode()
        return status, {"Content-Type": "text/xml"}, body
    headers = {"Content-Type": "application/json", "x-amzn-ErrorType": code, "x-amzn-RequestId": request_id}
    return status, headers, json.dumps({"message": message, "Message": message}).encode()


class _Raw:
    """The `raw` of an AWSResponse: what botocore reads bodies and event streams from."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Any:
        yield self._data

    def read(self, *_: Any, **__: Any) -> bytes:
        data, self._data = self._data, b""
        return data

    def close(self) -> None:
        pass


def aws_response(url: str, status: int, headers: dict[str, str], body: bytes) -> Any:
    from botocore.awsrequest import AWSResponse
    from botocore.compat import HTTPHeaders

    http_headers = HTTPHeaders()
    for key, value in headers.items():
        http_headers[key] = value
    return AWSResponse(url, status, http_headers, _Raw(body))


# --- sockets that misbehave for real ----------------------------------------------------------
class _SocketServer:
    def __init__(self, *, hold: bool) -> None:
        self.hold = hold
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._open: list[socket.socket] = []
        self._stop = threading.Event()
        self.connections = 0
        threading.Thread(target=self._loop, daemon=True, name="fault-socket").start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            if self.hold:  # never answer: the client's own deadline must fire
                self._open.append(conn)
                continue
            try:  # read the request, then drop the connection without a byte of answer
                conn.settimeout(2)
                conn.recv(65536)
            except OSError:
                pass
            conn.close()

    def close(self) -> None:
        self._stop.set()
        for conn in self._open:
            conn.close()
        self._sock.close()


def black_hole() -> _SocketServer:
    """Accepts, reads the request, closes: botocore sees a dropped connection."""
    return _SocketServer(hold=False)


def hanging_socket() -> _SocketServer:
    """Accepts and never answers."""
    return _SocketServer(hold=True)


# --- in-process: before-send hooks -----------------------------------------------------------
def tables_in(body: bytes | None) -> set[str]:
    """Every DynamoDB table a JSON request body names."""
    try:
        doc = json.loads(body or b"{}")
    except ValueError:
        return set()
    found: set[str] = set()
    if isinstance(doc.get("TableName"), str):
        found.add(doc["TableName"])
    found.update(doc.get("RequestItems", {}).keys())
    for item in doc.get("TransactItems", []):
        for op in item.values():
            if isinstance(op, dict) and "TableName" in op:
                found.add(op["TableName"])
    return found


@dataclass
class HookFaults:
    """Arms faults on in-process boto3 clients; counts what it injected."""

    drop: _SocketServer
    hang: _SocketServer
    injected: int = 0
    seen: list[tuple[str, str]] = field(default_factory=list)
    _armed: list[tuple[Any, str, Any, list[bool]]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def arm(
        self,
        emitter: Any,
        service: str,
        fault: str,
        *,
        operations: set[str] | None = None,
        match: Callable[[Any], bool] | None = None,
        hang: bool = False,
    ) -> None:
        """Fault every request of `service` (optionally only `operations`, and only requests for
        which `match(request)` holds) sent through clients built from `emitter`."""
        from botocore.httpsession import URLLib3Session

        protocol = PROTOCOL[service]

        armed = [True]  # clients copy their session's hooks at creation: disarm must reach the copies

        def hook(request: Any, event_name: str = "", **_: Any) -> Any:
            if not armed[0]:
                return None
            operation = event_name.rsplit(".", 1)[-1]
            if operations is not None and operation not in operations:
                return None
            if match is not None and not match(request):
                return None
            with self._lock:
                self.injected += 1
                self.seen.append((service, operation))
            if fault == "timeout":
                target = self.hang if hang else self.drop
                parts = urlsplit(request.url)
                request.url = urlunsplit(parts._replace(netloc=urlsplit(target.endpoint).netloc))
                return None  # botocore sends it there, for real
            if fault in FORWARDED:
                real = URLLib3Session().send(request)
                _ = real.content  # the server has acted (and, for a stream, finished)
            status, headers, body = error_body(protocol, fault)
            return aws_response(request.url, status, headers, body)

        event = f"before-send.{service}"
        emitter.register(event, hook)
        self._armed.append((emitter, event, hook, armed))

    def disarm(self) -> None:
        for emitter, event, hook, armed in self._armed:
            armed[0] = False
            emitter.unregister(event, hook)
        self._armed.clear()


# --- out of process: a proxy in front of moto ------------------------------------------------
class FaultProxy(Proxy):
    """Forwards to `upstream` (moto); requests whose X-Amz-Target names an operation in
    `operations` get `fault` instead. Unlike the hooks, a 5xx is NOT forwarded first: DynamoDB
    deduplicates a retried TransactWriteItems by its ClientRequestToken (botocore fills it in
    once per call), moto does not, so "applied, then 500, then retried" would count twice here
    but not in AWS. `malformed` is forwarded (a 200 only ever follows a commit)."""

    def __init__(self, upstream: str) -> None:
        self.fault: str | None = None
        self.operations: set[str] = set()
        self.injected = 0
        self.faulted_bodies: list[bytes] = []
        super().__init__(upstream, self._inject, name="fault-proxy")

    def _inject(self, path: str, headers: dict[str, str], body: bytes) -> Any:
        operation = headers.get("X-Amz-Target", "").rsplit(".", 1)[-1]
        if not self.fault or operation not in self.operations:
            return None
        self.injected += 1
        self.faulted_bodies.append(body)
        if self.fault == "timeout":
            return DROP
        if self.fault == "malformed":
            self.forward(path, headers, body)
        return error_body("json", self.fault)

    def set(self, fault: str | None, operations: set[str] | None = None) -> None:
        self.fault = fault
        self.operations = operations or set()
        self.injected = 0
        self.faulted_bodies = []
