"""The readiness call's egress set-up as shipped (runner/egress.py `setup_source`, running
sandbox_session/egress.py): in an interpreter that has the standard library only, with its own
home, against a stand-in HTTP proxy that answers the /bind request itself when the credential is
right. The real proxy's /bind is the end-to-end tests' (test_allowlisted_turn.py)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sandbox_runtime.runner.egress import EgressEndpoints, bind_problem, setup_source

SESSION_ID = "01JSESSIONSTANDIN000000001"
SECRET = "s3cr3t-" + "x" * 40


class _StandIn(BaseHTTPRequestHandler):
    """`GET http://egress.sandbox.internal/bind` with the right Proxy-Authorization: 200, else 407."""

    seen: list[dict[str, Any]] = []

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:
        expected = "Basic " + base64.b64encode(f"{SESSION_ID}:{SECRET}".encode()).decode()
        self.seen.append({"path": self.path, "auth": self.headers.get("Proxy-Authorization")})
        ok = (
            self.path == "http://egress.sandbox.internal/bind"
            and self.headers.get("Proxy-Authorization") == expected
        )
        body = b'{"bound": true}' if ok else b"proxy authentication required"
        self.send_response(200 if ok else 407)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def stand_in() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def _run(source: str, home: Path) -> tuple[str, dict[str, str]]:
    """Run `source` then print the environment, as the session's process would have it."""
    code = source + "\nimport os, json\nprint('ENV ' + json.dumps(dict(os.environ)))\n"
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "")}
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    seen_env = json.loads(next(line for line in lines if line.startswith("ENV "))[4:])
    return "\n".join(line for line in lines if not line.startswith("ENV ")), seen_env


def test_setup_points_every_client_at_the_proxy_and_binds_the_credential(
    stand_in: int, tmp_path: Path
) -> None:
    # Given a session's endpoints and its credential
    endpoints = EgressEndpoints(f"http://127.0.0.1:{stand_in}", "/opt/ca.pem", "https://index.test/simple")
    # When the shipped set-up runs in a bare interpreter
    stdout, env = _run(setup_source(endpoints, SESSION_ID, SECRET, bind_scheme="http"), tmp_path)
    # Then the proxy saw one /bind with the session's credential, and the marker says bound
    assert _StandIn.seen[-1]["path"] == "http://egress.sandbox.internal/bind"
    assert bind_problem(stdout) is None, stdout
    assert SECRET not in stdout
    # And the process's environment (which its code and commands inherit) names the proxy and CA
    proxy = f"http://{SESSION_ID}:{SECRET}@127.0.0.1:{stand_in}"
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        assert env[name] == proxy
    for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT", "NODE_EXTRA_CA_CERTS"):
        assert env[name] == "/opt/ca.pem"
    assert env["PIP_INDEX_URL"] == "https://index.test/simple"
    # (loopback, the link-local credential endpoints, and S3 of the runner's region, which an AWS
    # allowlist session reaches through its VPC's gateway endpoint rather than the proxy)
    assert set(env["NO_PROXY"].split(",")) == {
        "localhost",
        "127.0.0.1",
        "::1",
        "169.254.169.254",
        "169.254.170.2",
        "s3.amazonaws.com",
        "s3.us-east-1.amazonaws.com",
    }
    assert env["no_proxy"] == env["NO_PROXY"]
    # And pip.conf and .curlrc (for commands with a clean environment) say the same, private to it
    pip_conf = tmp_path / ".config" / "pip" / "pip.conf"
    curlrc = tmp_path / ".curlrc"
    assert f"proxy = {proxy}" in pip_conf.read_text() and "cert = /opt/ca.pem" in pip_conf.read_text()
    assert "index-url = https://index.test/simple" in pip_conf.read_text()
    assert f'proxy = "{proxy}"' in curlrc.read_text() and 'cacert = "/opt/ca.pem"' in curlrc.read_text()
    assert f'noproxy = "{env["NO_PROXY"]}"' in curlrc.read_text()
    assert {oct(p.stat().st_mode & 0o777) for p in (pip_conf, curlrc)} == {"0o600"}


def test_setup_reports_a_refused_bind_without_the_credential(stand_in: int, tmp_path: Path) -> None:
    # Given a credential the proxy does not accept
    endpoints = EgressEndpoints(f"http://127.0.0.1:{stand_in}", "/opt/ca.pem")
    # When the set-up runs
    stdout, env = _run(setup_source(endpoints, SESSION_ID, "wrong-" + SECRET, bind_scheme="http"), tmp_path)
    # Then the marker says the bind failed with the proxy's status, and never names the secret
    assert bind_problem(stdout) == "egress_bind_failed:status_407"
    assert SECRET not in stdout
    assert "PIP_INDEX_URL" not in env  # no index named: pip keeps its default (through the proxy)


def test_setup_reports_an_unreachable_proxy(tmp_path: Path) -> None:
    # Given no proxy where the session looks for it
    endpoints = EgressEndpoints("http://127.0.0.1:9", "/opt/ca.pem")
    # When the set-up runs
    stdout, _ = _run(setup_source(endpoints, SESSION_ID, SECRET, bind_scheme="http"), tmp_path)
    # Then the bind failed, named by its error class only
    assert bind_problem(stdout) == "egress_bind_failed:URLError"
