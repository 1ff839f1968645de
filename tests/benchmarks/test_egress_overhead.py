"""Benchmark `egress_overhead`: an HTTPS GET of 1 MiB through the local stack's egress proxy ÷ the
same GET directly to the same server. Target: ratio ≤ 1.3.

Both sides are measured the same way, side by side in one run (direct and proxied samples
alternating round after round, the median of each reported):

- `ratio` (the target's figure): a GET on a connection the client keeps open, as `requests.Session`,
  pip and curl do. Through the proxy it pays the decision for the request (credential, breakers and
  policy, all cached), the body decrypted from the server and encrypted again for the client, and
  one more process and loopback hop; direct it pays the body once.
- `first_request_ratio`, beside it: the first GET of a new connection. Through the proxy it pays a
  CONNECT (the credential checked), the proxy's TLS with the client (a certificate it made for the
  name), its own verified TLS to the server, and the request; direct, one TLS handshake.
- `proxy_cpu_ms`: the proxy process's CPU time per kept-alive GET (from /proc), what the proxy
  itself spends relaying one: the floor of what it adds when nothing else runs beside it.

The server is the tests' HTTPS server (`tests.support.egress`), one for both sides.
"""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import statistics
import time
from collections.abc import Callable, Iterator

import pytest

from tests.benchmarks._report import emit
from tests.support.egress import HttpsTestServer, Proxy, Tunnel, egress_stack

pytestmark = pytest.mark.bench

SIZE = 1 << 20
HOST = "bench.example.com"
PATH = f"/bytes?n={SIZE}"
SESSION = "bench-session"


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Proxy, HttpsTestServer]]:
    with egress_stack(tmp_path_factory.mktemp("egress-bench"), names=[HOST]) as (env, server):
        proxy = Proxy.of(env)
        proxy.set_policy("acme", {"egress": "allowlist", "allow": [{"host": HOST}]})
        yield proxy, server


class Direct:
    """A client of the server itself, on one connection kept open (`get`) or a new one (`first`)."""

    def __init__(self, server: HttpsTestServer) -> None:
        self.server = server
        self.context = ssl.create_default_context(cafile=str(server.ca_file))
        self.conn = self._connect()

    def _connect(self) -> http.client.HTTPConnection:
        sock = socket.create_connection(("127.0.0.1", self.server.port), timeout=60)
        conn = http.client.HTTPConnection(HOST, 443, timeout=60)
        conn.sock = self.context.wrap_socket(sock, server_hostname=HOST)
        return conn

    def get(self) -> bytes:
        self.conn.request("GET", PATH)
        return self.conn.getresponse().read()

    def first(self) -> bytes:
        conn = self._connect()
        try:
            conn.request("GET", PATH)
            return conn.getresponse().read()
        finally:
            conn.close()


def _cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _timed(fn: Callable[[], bytes], samples: list[float]) -> None:
    start = time.perf_counter()
    body = fn()
    samples.append(time.perf_counter() - start)
    assert len(body) == SIZE


def _ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 2)


def test_egress_overhead(bench: tuple[Proxy, HttpsTestServer], bench_full: bool) -> None:
    proxy, server = bench
    rounds = 100 if bench_full else 3
    secret = proxy.issue(SESSION, "acme")
    assert proxy.bind(SESSION, secret).status == 200
    pid = int(proxy.state.data["processes"]["egress"]["pid"])
    direct, tunnel = Direct(server), Tunnel(proxy, SESSION, secret, HOST)

    def proxied_first() -> bytes:
        answer = proxy.get(SESSION, secret, f"https://{HOST}{PATH}")
        assert answer.status == 200
        return answer.body

    def proxied() -> bytes:
        answer = tunnel.get(PATH)
        assert answer.status == 200
        return answer.body

    # Given both paths warm (caches filled, the proxy's certificate for the name made)
    for fn in (direct.get, proxied, direct.first, proxied_first) * 2:
        assert len(fn()) == SIZE
    # When the same GET runs round after round, directly and through the proxy in turn: on kept-alive
    # connections first, then each on a new connection (whose closing would otherwise overlap the
    # next kept-alive sample)
    kept: tuple[list[float], list[float]] = ([], [])
    first: tuple[list[float], list[float]] = ([], [])
    proxy_cpu = 0.0
    try:
        for _ in range(rounds):
            _timed(direct.get, kept[0])
            cpu = _cpu_seconds(pid)
            _timed(proxied, kept[1])
            proxy_cpu += _cpu_seconds(pid) - cpu
    finally:
        tunnel.close()
        direct.conn.close()
    for _ in range(rounds):
        _timed(direct.first, first[0])
        _timed(proxied_first, first[1])
    # Then the ratios of the medians are reported, kept-alive (the target) and first request beside
    emit(
        "egress_overhead",
        target="ratio <= 1.3",
        ratio=statistics.median(kept[1]) / statistics.median(kept[0]),
        proxied_ms=_ms(kept[1]),
        direct_ms=_ms(kept[0]),
        first_request_ratio=round(statistics.median(first[1]) / statistics.median(first[0]), 4),
        first_proxied_ms=_ms(first[1]),
        first_direct_ms=_ms(first[0]),
        proxy_cpu_ms=round(proxy_cpu * 1000 / rounds, 2),
        rounds=rounds,
        bytes=SIZE,
    )
