"""The local stack's three HTTP servers answer with TCP_NODELAY on every connection.

Each response is several small writes (headers, then the body or one chunk per event). With
Nagle's algorithm a write after the first waits for the client's delayed ACK: a local
`executeCode` of `pass` took 44-48 ms, 4-9 ms without it (measured by the benchmarks, never
here). What is tested: the option on the server's own accepted socket,
read with `getsockopt` while a real request is served.
"""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from infra.local.interpreter import LocalInterpreterServer
from infra.local.lambda_emulator import LambdaEmulator
from infra.local.moto_serial import SerialMotoServer


def _interpreter() -> tuple[Any, Any, str, Callable[[], None]]:
    server = LocalInterpreterServer().start()
    return server, server._httpd, f"{server.endpoint}/ping", server.stop


def _emulator() -> tuple[Any, Any, str, Callable[[], None]]:
    emulator = LambdaEmulator([]).start()
    return (
        emulator,
        emulator._server,
        f"{emulator.endpoint}/2015-03-31/functions/none/invocations",
        emulator.stop,
    )


def _moto() -> tuple[Any, Any, str, Callable[[], None]]:
    server = SerialMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    return server, server._server, f"{server.endpoint}/moto-api/data.json", server.stop


@pytest.mark.parametrize(
    "start", [_interpreter, _emulator, _moto], ids=["interpreter", "lambda_emulator", "moto"]
)
def test_server_sockets_have_tcp_nodelay(
    start: Callable[[], tuple[Any, Any, str, Callable[[], None]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a running server whose handler records its connection's TCP_NODELAY after set-up
    _, httpd, url, stop = start()
    seen: list[int] = []
    handler = httpd.RequestHandlerClass
    original = handler.setup

    def setup(self: Any) -> None:
        original(self)
        seen.append(self.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

    monkeypatch.setattr(handler, "setup", setup)
    try:
        # When a real request is served
        try:
            urllib.request.urlopen(
                urllib.request.Request(url, method="POST" if "invocations" in url else "GET"), timeout=10
            ).read()
        except urllib.error.HTTPError:
            pass  # an error answer is still an answer on that connection
    finally:
        stop()
    # Then its socket had Nagle's algorithm off
    assert seen and all(seen), seen
