"""Benchmark `egress_overhead`: an HTTPS GET of 1 MiB through the local stack's egress proxy ÷ the
same GET directly to the same server, measured side by side (samples interleaved, each on a new
connection as a session's fresh request makes it). Target: ratio ≤ 1.3.

Through the proxy a GET pays the CONNECT with its credential check (cached), the policy and
breaker lookups (cached), the proxy's TLS with the client (a certificate it makes for the name),
its own verified TLS to the server, and the body relayed through one more process, counted as it
streams. Direct, the GET pays one TLS handshake and the body.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import statistics
import time
from collections.abc import Iterator

import pytest

from tests.benchmarks._report import emit
from tests.support.egress import HttpsTestServer, Proxy, egress_stack

pytestmark = pytest.mark.bench

SIZE = 1 << 20
HOST = "bench.example.com"


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Proxy, HttpsTestServer]]:
    with egress_stack(tmp_path_factory.mktemp("egress-bench"), names=[HOST]) as (env, server):
        proxy = Proxy.of(env)
        proxy.set_policy("acme", {"egress": "allowlist", "allow": [{"host": HOST}]})
        yield proxy, server


def _direct(server: HttpsTestServer) -> bytes:
    context = ssl.create_default_context(cafile=str(server.ca_file))
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    conn = http.client.HTTPConnection(HOST, 443, timeout=60)
    conn.sock = context.wrap_socket(sock, server_hostname=HOST)
    try:
        conn.request("GET", f"/bytes?n={SIZE}")
        return conn.getresponse().read()
    finally:
        conn.close()


def test_egress_overhead(bench: tuple[Proxy, HttpsTestServer], bench_full: bool) -> None:
    proxy, server = bench
    rounds = 15 if bench_full else 2
    session, secret = "bench-session", proxy.issue("bench-session", "acme")
    assert proxy.bind(session, secret).status == 200
    # Given both paths warm (caches filled, certificate for the name made)
    for _ in range(2):
        assert len(_direct(server)) == SIZE
        assert len(proxy.get(session, secret, f"https://{HOST}/bytes?n={SIZE}").body) == SIZE
    # When the same 1 MiB GET runs alternately, directly and through the proxy
    direct: list[float] = []
    proxied: list[float] = []
    for _ in range(rounds):
        start = time.perf_counter()
        body = _direct(server)
        direct.append(time.perf_counter() - start)
        assert len(body) == SIZE
        start = time.perf_counter()
        answer = proxy.get(session, secret, f"https://{HOST}/bytes?n={SIZE}")
        proxied.append(time.perf_counter() - start)
        assert answer.status == 200 and len(answer.body) == SIZE
    # Then the ratio of the medians is reported
    ratio = statistics.median(proxied) / statistics.median(direct)
    emit(
        "egress_overhead",
        target="ratio <= 1.3",
        ratio=ratio,
        rounds=rounds,
        proxied_ms=round(statistics.median(proxied) * 1000, 1),
        direct_ms=round(statistics.median(direct) * 1000, 1),
        bytes=SIZE,
    )
