"""A real HTTP endpoint on 127.0.0.1 for tests that need one (a Lambda Invoke API answering in a
fixed or scripted way). One helper so each test writes only its answering logic."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread
from typing import Any

# (path, request body) -> (status, headers, response body)
Answer = Callable[[str, bytes], tuple[int, dict[str, str], bytes]]


@contextmanager
def http_endpoint(answer: Answer) -> Iterator[str]:
    """Serve `answer` for every POST; yields the endpoint URL; shuts down on exit."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 — stdlib naming
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            status, headers, payload = answer(self.path, body)
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    # shutdown() waits one poll interval (the stdlib default is 0.5 s)
    Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def fixed(status: int, body: bytes, headers: dict[str, str] | None = None) -> Answer:
    return lambda _path, _body: (status, headers or {}, body)
