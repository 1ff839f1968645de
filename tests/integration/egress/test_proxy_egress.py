"""What the egress proxy does for an allowed session, on the local stack's proxy: the credential
header added at the egress and its value scrubbed from what comes back, installs of listed
packages only, the counters and connection log every audit row and `sandboxctl egress show` read,
and the tenant's daily byte cap.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from sandbox_common import dimensions

from infra.local.state import REPO_ROOT
from tests.support.egress import HttpsTestServer, Proxy, Tunnel, egress_stack, wait_for
from tests.support.local_stack import ctl, ctl_json

SECRET = "tok-ABCDEF-1234567890-zyx"
ROUTED = ["api.example.com", "open.example.com"]
ACME_POLICY = {
    "egress": "allowlist",
    "allow": [
        {
            "host": "api.example.com",
            "ports": [443, 8080],
            "credential": {"header": "Authorization", "template": "Bearer {secret:crm-token}"},
        },
        {"host": "open.example.com"},
        {"host": "plain.example.com", "ports": [80, 443]},
        {"host": "gone.example.com", "credential": {"header": "X-Key", "template": "{secret:deleted-token}"}},
    ],
    "packages": ["sandbox-hello==1.0.0", "sandbox-colors"],
}
BYTES_CAP = 4000


class Setup:
    def __init__(self, env: dict[str, str], server: HttpsTestServer) -> None:
        self.env = env
        self.server = server
        self.proxy = Proxy.of(env)
        self.proxy.put_secret("acme", "crm-token", SECRET)
        self.proxy.set_policy("acme", ACME_POLICY)
        self.proxy.set_policy("globex", {"egress": "allowlist", "allow": [{"host": "open.example.com"}]})
        self.session = "flow-acme-1"
        self.secret = self.proxy.issue(self.session, "acme")
        assert self.proxy.bind(self.session, self.secret).status == 200

    def get(self, url: str, **kwargs: object):  # noqa: ANN201 - tests.support.egress.Answer
        return self.proxy.get(self.session, self.secret, url, **kwargs)  # type: ignore[arg-type]


class PlainServer:
    """A plain-HTTP server recording the headers of every request it gets."""

    def __init__(self) -> None:
        seen: list[dict[str, str]] = []
        self.seen = seen

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - stdlib name
                seen.append(dict(self.headers.items()))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])


@pytest.fixture(scope="module")
def plain_server() -> Iterator[PlainServer]:
    server = PlainServer()
    yield server
    server.server.shutdown()


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, plain_server: PlainServer) -> Iterator[Setup]:
    routes = f"plain.example.com=127.0.0.1:{plain_server.port}"
    with egress_stack(tmp_path_factory.mktemp("egress-flows"), names=ROUTED, routes_extra=routes) as (
        env,
        server,
    ):
        # globex's byte cap is set before its first connection (the proxy caches caps ≤ 30 s)
        assert (
            ctl(env, "caps", "set", "egress_daily_bytes", str(BYTES_CAP), "--tenant", "globex").returncode
            == 0
        )
        yield Setup(env, server)


# --- credentials at the egress ----------------------------------------------------------------------
def test_egress_credential_header_is_added_for_an_allowed_https_host(setup: Setup) -> None:
    # When the session calls the credential host without any credential of its own
    answer = setup.get("https://api.example.com/echo?inject")
    # Then the server saw the header rendered from the tenant's secret ...
    assert answer.status == 200
    seen = next(s for s in setup.server.seen if s.path == "/echo?inject")
    assert seen.headers["Authorization"] == f"Bearer {SECRET}"
    assert seen.sni == "api.example.com"  # upstream TLS named the host (and was verified)
    # ... and what came back to the session (the server echoes its headers) does not hold it
    assert SECRET.encode() not in answer.body
    assert b"<redacted>" in answer.body


@pytest.mark.parametrize("path", ["/leak", "/leak-gzip"])
def test_egress_secret_echoed_by_the_server_is_scrubbed_from_the_response(setup: Setup, path: str) -> None:
    # When the server sends the secret back: in a header, in the body in clear, base64 and in
    # a sentence (and gzipped)
    answer = setup.get(f"https://api.example.com{path}")
    assert answer.status == 200
    # Then none of its forms reaches the session (the gzipped body is gzipped still, and scrubbed)
    body = answer.body
    if path == "/leak-gzip":
        assert answer.headers["content-encoding"] == "gzip"
        body = gzip.decompress(body)
    for form in (SECRET, base64.b64encode(SECRET.encode()).decode()):
        assert form.encode() not in body
        assert all(form not in value for value in answer.headers.values())
    assert answer.headers["x-leak"] == "<redacted>"  # the rendered header value, whole
    leaked = json.loads(body)
    assert leaked["note"] == "you sent <redacted>!" and leaked["b64"] == "<redacted>"


def test_egress_credential_never_goes_over_plain_http(setup: Setup) -> None:
    # Given the credential host also on port 8080; when asked over plain HTTP there
    answer = setup.proxy.plain(setup.session, setup.secret, "http://api.example.com:8080/echo?plain")
    # Then refused: the header is only ever added after TLS
    assert answer.status == 403 and answer.reason == "credential_over_http"
    assert not any(s.path == "/echo?plain" for s in setup.server.seen)


def test_egress_plain_http_request_never_carries_the_proxy_credential_upstream(
    setup: Setup, plain_server: PlainServer
) -> None:
    # Given an allowed plain-HTTP host (port 80 in its rule); when the session asks through the proxy
    answer = setup.proxy.plain(setup.session, setup.secret, "http://plain.example.com/x")
    # Then it is forwarded, without the session's Proxy-Authorization (its credential stays here)
    assert answer.status == 200 and answer.body == b"ok"
    assert plain_server.seen and all("Proxy-Authorization" not in h for h in plain_server.seen)
    assert all(setup.secret not in value for h in plain_server.seen for value in h.values())


def test_egress_credential_whose_secret_is_missing_refuses_the_request(setup: Setup) -> None:
    answer = setup.get("https://gone.example.com/echo")
    assert answer.status == 502 and answer.reason == "secret_unavailable"


def test_egress_request_token_the_code_sends_itself_is_not_removed(setup: Setup) -> None:
    # A token the code sends is the code's own data: forwarded as sent (open host, no rule)
    answer = setup.get("https://open.example.com/echo?own", headers={"X-Api-Key": "code-owned-token"})
    assert answer.status == 200
    seen = next(s for s in setup.server.seen if s.path == "/echo?own")
    assert seen.headers["X-Api-Key"] == "code-owned-token"


# --- packages -------------------------------------------------------------------------------------
def _pip(setup: Setup, tmp_path: Path, *requirement: str) -> subprocess.CompletedProcess[str]:
    proxy = setup.proxy
    python = REPO_ROOT / ".venv-session" / "bin" / "python"
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "REQUESTS_", "CURL_", "SSL_CERT"))
    }
    url = f"http://{setup.session}:{setup.secret}@{proxy.host}:{proxy.port}"
    env.update(HTTPS_PROXY=url, HTTP_PROXY=url, PIP_CERT=proxy.ca_cert, REQUESTS_CA_BUNDLE=proxy.ca_cert)
    return subprocess.run(
        [
            str(python if python.exists() else sys.executable),
            "-m",
            "pip",
            "install",
            "--isolated",
            "--no-cache-dir",
            "--disable-pip-version-check",
            "--retries",
            "0",
            "--index-url",
            setup.proxy.state.data["egress"]["index_url"],
            "--target",
            str(tmp_path),
            *requirement,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_egress_pip_installs_a_listed_package(setup: Setup, tmp_path: Path) -> None:
    done = _pip(setup, tmp_path, "sandbox-colors")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "sandbox_colors" / "__init__.py").exists()


def test_egress_pip_gets_the_pinned_version_of_a_listed_package(setup: Setup, tmp_path: Path) -> None:
    # Given sandbox-hello==1.0.0 listed while the index also has 1.1.0
    done = _pip(setup, tmp_path, "sandbox-hello")
    assert done.returncode == 0, done.stdout + done.stderr
    assert 'VERSION = "1.0.0"' in (tmp_path / "sandbox_hello" / "__init__.py").read_text()
    # And asking for the version not listed fails with pip's own error
    refused = _pip(setup, tmp_path / "other", "sandbox-hello==1.1.0")
    assert refused.returncode != 0
    assert "No matching distribution found for sandbox-hello==1.1.0" in refused.stderr


def test_egress_pip_refuses_an_unlisted_package_with_its_own_error(setup: Setup, tmp_path: Path) -> None:
    done = _pip(setup, tmp_path, "sandbox-unlisted")
    assert done.returncode != 0
    assert "No matching distribution found for sandbox-unlisted" in done.stderr
    assert not (tmp_path / "sandbox_unlisted").exists()


def test_egress_index_paths_other_than_listed_projects_are_refused(setup: Setup) -> None:
    for path in (
        "/simple/",
        "/simple/sandbox-unlisted/",
        "/simple/sandbox-unlisted/1.0.0/sandbox_unlisted-1.0.0-py3-none-any.whl",
        "/admin",
    ):
        answer = setup.get(f"https://packages.sandbox.internal{path}")
        assert answer.status in (403, 404) and answer.reason == "package_not_listed", (path, answer.status)


# --- connections kept alive, bodies streamed ---------------------------------------------------------
def test_egress_kept_alive_tunnel_answers_every_request_over_one_upstream_connection(setup: Setup) -> None:
    # Given one tunnel the client keeps open (as requests.Session, pip and curl do)
    tunnel = Tunnel(setup.proxy, setup.session, setup.secret, "open.example.com")
    try:
        # When it sends more requests than mitmproxy opens connections to one address at once (5)
        answers = [tunnel.get(f"/bytes?keepalive={i}&n=1000") for i in range(8)]
    finally:
        tunnel.close()
    # Then every one is answered on that connection, which the proxy keeps open ...
    assert [(a.status, len(a.body)) for a in answers] == [(200, 1000)] * 8
    assert all(a.headers.get("connection", "").lower() != "close" for a in answers)
    # ... and the server saw them all on one upstream connection: no new handshake per request
    peers = {s.peer for s in setup.server.seen if "keepalive=" in s.path}
    assert len(peers) == 1, peers


def test_egress_response_of_a_host_without_credential_streams_as_it_arrives(setup: Setup) -> None:
    # Given a server that sends half of a body and holds the rest until the test releases it
    server = setup.server
    server.release.clear()
    tunnel = Tunnel(setup.proxy, setup.session, setup.secret, "open.example.com")
    try:
        # When the session asks a host without a credential rule for it
        tunnel.conn.request("GET", "/stream?n=200000")
        response = tunnel.conn.getresponse()
        # Then the first half reaches the session while the server still holds the rest
        assert response.status == 200
        assert response.read(100000) == b"x" * 100000
        server.release.set()
        assert response.read() == b"y" * 100000
    finally:
        server.release.set()
        tunnel.close()


# --- counters and the connection log ---------------------------------------------------------------
def test_egress_counters_and_connections_are_recorded_for_the_session(setup: Setup) -> None:
    # Given a fresh session that makes one allowed request and has one refused
    session = "flow-acme-count"
    secret = setup.proxy.issue(session, "acme")
    assert setup.proxy.bind(session, secret).status == 200
    assert setup.proxy.get(session, secret, "https://open.example.com/bytes?n=5000").status == 200
    assert setup.proxy.get(session, secret, "https://not-allowed.example.net/x").status == 403
    # Then the denial is on its counters at once (written before the refusal was answered) ...
    assert setup.proxy.counters(session)["denied"] == 1
    # ... and the allowed request and its bytes within the flush (bounded wait on state)
    counters = wait_for(
        lambda: (
            (c := setup.proxy.counters(session)).get("allowed") == 1 and c.get("bytes_in", 0) >= 5000 and c
        ),
        timeout=30,
        what="allowed count and bytes flushed",
    )
    assert counters["bytes_out"] > 0
    assert [e["host"] for e in counters["denied_hosts"].values()] == ["not-allowed.example.net"]
    # And `sandboxctl egress show` lists both connections with their decisions
    shown = ctl_json(setup.env, "egress", "show", "--session", session)
    decisions = {(c["host"], c["decision"]) for c in shown["connections"]}
    assert decisions == {("open.example.com", "allowed"), ("not-allowed.example.net", "denied")}
    assert shown["source"] == "127.0.0.1" and shown["live"] is True
    assert shown["counters"]["denied"] == 1
    human = ctl(setup.env, "egress", "show", "--session", session)
    assert human.returncode == 0 and "not-allowed.example.net" in human.stdout


# --- the daily byte cap ---------------------------------------------------------------------------------
def test_egress_daily_bytes_cap_refuses_new_connections_at_the_cap(setup: Setup) -> None:
    # Given globex's egress_daily_bytes cap of BYTES_CAP (set before its first connection)
    proxy = setup.proxy
    session = "flow-globex-cap"
    secret = proxy.issue(session, "globex")
    assert proxy.bind(session, secret, source="127.0.0.4").status == 200
    # When its session downloads more than the cap
    assert (
        proxy.get(session, secret, f"https://open.example.com/bytes?n={BYTES_CAP}", source="127.0.0.4").status
        == 200
    )
    # Then its next new connection is refused, naming the dimension on the session's counters
    refused = wait_for(
        lambda: (
            (
                a := proxy.get(session, secret, "https://open.example.com/echo?capped", source="127.0.0.4")
            ).status
            == 403
            and a
        ),
        timeout=30,
        what="the byte cap refusing",
    )
    assert refused.reason == "cap_exceeded"
    cap = proxy.counters(session)["cap_refused"]
    assert cap["dimension"] == dimensions.EGRESS_DAILY_BYTES.name and cap["count"] >= 1
    # And the tenant's counter (flushed within a second) shows in `sandboxctl counters show`
    # beside the call caps
    counters = wait_for(
        lambda: (
            (c := ctl_json(setup.env, "counters", "show", "--tenant", "globex"))["egress_daily_bytes"][
                "count"
            ]
            >= BYTES_CAP
            and c
        ),
        timeout=30,
        what="the tenant's bytes flushed",
    )
    assert counters["egress_daily_bytes"]["cap"] == BYTES_CAP
    # And acme, another tenant, is not affected
    assert setup.get("https://open.example.com/echo?acme-after-cap").status == 200
