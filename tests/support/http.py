"""Real HTTP endpoints on 127.0.0.1 for tests: one server, and what tests build on it.

- `http_endpoint(answer)`: a Lambda Invoke API (or any POST API) answering in a fixed or scripted
  way, so each test writes only its answering logic;
- `Proxy(upstream, intercept)`: passes every request on to `upstream` (moto) unless `intercept`
  answers it itself (an error of the service's protocol, or DROP: the connection closed without
  a byte of answer). The reliability suite's fault proxy is one;
- `HoldingProxy`: holds the first request a predicate matches until the test releases it (lands
  late, or never), for the crash tests that kill a worker while its request is in flight.
"""

from __future__ import annotations

import http.client
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

# (path, request body) -> (status, headers, response body)
Answer = Callable[[str, bytes], tuple[int, dict[str, str], bytes]]
Reply = tuple[int, dict[str, str], bytes]
DROP = object()  # an intercept's answer: close the connection without a byte of answer
# (path, request headers, request body) -> a Reply, DROP, or None to pass the request on
Intercept = Callable[[str, dict[str, str], bytes], Any]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # the sender went away (a killed worker, a connection a test dropped)
        super().handle_error(request, client_address)


class HttpServer:
    """A threading HTTP/1.1 server on 127.0.0.1 whose every GET/POST is `respond(path, headers, body)`
    (a Reply, or DROP). Runs until close()."""

    def __init__(self, respond: Callable[[str, dict[str, str], bytes], Any], name: str = "test-http") -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                reply = respond(self.path, dict(self.headers.items()), body)
                if reply is DROP:
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:  # the sender is gone already
                        pass
                    return
                status, headers, payload = reply
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST  # noqa: N815

        self._server = _Server(("127.0.0.1", 0), Handler)
        # shutdown() waits one poll interval (the stdlib default is 0.5 s)
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True, name=name
        ).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def http_endpoint(answer: Answer) -> Iterator[str]:
    """Serve `answer` for every request; yields the endpoint URL; shuts down on exit."""
    server = HttpServer(lambda path, _headers, body: answer(path, body))
    try:
        yield server.endpoint
    finally:
        server.close()


def fixed(status: int, body: bytes, headers: dict[str, str] | None = None) -> Answer:
    return lambda _path, _body: (status, headers or {}, body)


def forward(upstream: Any, path: str, headers: dict[str, str], body: bytes) -> Reply:
    """One request passed through to `upstream` (a urlsplit result): (status, headers to keep, body)."""
    conn = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=30)
    sent = {k: v for k, v in headers.items() if k.lower() not in ("host", "connection")}
    conn.request("POST", path, body=body, headers=sent)
    answer = conn.getresponse()
    payload = answer.read()
    keep = {
        k: v
        for k, v in answer.getheaders()
        if k.lower() not in ("transfer-encoding", "connection", "content-length")
    }
    conn.close()
    return answer.status, keep, payload


class Proxy(HttpServer):
    """Forwards every request to `upstream` unless `intercept(path, headers, body)` answers it
    (a Reply or DROP; None passes the request on)."""

    def __init__(self, upstream: str, intercept: Intercept, name: str = "test-proxy") -> None:
        self.upstream = urlsplit(upstream)

        def respond(path: str, headers: dict[str, str], body: bytes) -> Any:
            reply = intercept(path, headers, body)
            return self.forward(path, headers, body) if reply is None else reply

        super().__init__(respond, name)

    def forward(self, path: str, headers: dict[str, str], body: bytes) -> Reply:
        return forward(self.upstream, path, headers, body)


class HoldingProxy(Proxy):
    """Forwards every request to `upstream`, except the first one `hold_if(target, body)` matches
    (target: its X-Amz-Target): that one is held until `release(deliver=...)`, then forwarded late
    (deliver=True) or dropped; either way its sender gets no answer."""

    def __init__(self, upstream: str, hold_if: Callable[[str, bytes], bool]) -> None:
        self.hold_if = hold_if
        self.held = threading.Event()
        self.delivered = threading.Event()
        self._release = threading.Event()
        self._deliver = False
        self._taken = False
        super().__init__(upstream, self._hold, name="holding-proxy")

    def _hold(self, path: str, headers: dict[str, str], body: bytes) -> Any:
        if self._taken or not self.hold_if(headers.get("X-Amz-Target", ""), body):
            return None
        self._taken = True
        self.held.set()
        self._release.wait(120)
        if self._deliver:  # the dead sender's request lands after all
            self.forward(path, headers, body)
            self.delivered.set()
        return DROP

    def release(self, *, deliver: bool) -> None:
        self._deliver = deliver
        self._release.set()

    def close(self) -> None:
        self._release.set()
        super().close()
