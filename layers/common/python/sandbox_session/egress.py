"""An allowlist session's way out, set up by its readiness call before any user code runs.

A session of an `allowlist` environment has no route anywhere but the stage's egress proxy. This
module, shipped as its source and run in the session by the readiness call, points every client
the session offers at that proxy with the session's own proxy credential, makes them trust the
proxy's CA (it intercepts TLS to add credentials and check hosts), and proves the path works:

- the environment of the session's Python process, which its later code and every command it
  starts inherit: `HTTPS_PROXY` / `HTTP_PROXY` (and lower case: curl reads only `http_proxy` in
  lower case) = `http://SESSION_ID:SECRET@HOST:PORT`; `NO_PROXY` for loopback, the link-local
  credential endpoints and the hosts the runner names as direct (on AWS, S3, which the sessions
  VPC reaches through its gateway endpoint); the CA bundle
  for Python's ssl (`SSL_CERT_FILE`), requests (`REQUESTS_CA_BUNDLE`), pip (`PIP_CERT`), curl
  (`CURL_CA_BUNDLE`) and Node (`NODE_EXTRA_CA_CERTS`); pip's index (`PIP_INDEX_URL`, the stage's);
- pip.conf and .curlrc in the session's home, so a command that starts with a clean environment
  still goes through the proxy;
- one request through the proxy to its own pseudo-host (`egress.sandbox.internal`, path /bind),
  which the proxy answers itself, recording the address the session reaches it from: from then
  on the credential works from that address only.

It prints one line, MARKER + JSON `{"bound": bool, "status": int|null, "error": str|null}`; the
session runner fails the readiness check (and stops the session) unless `bound` is true. Nothing
it prints names the credential; the readiness call also registers the secret with the stdio
redactor, so code printing its environment shows `<redacted>` in its place.

Standard library only, and no import of any other module of ours: it runs standalone.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.request
from typing import Any

MARKER = "__sandbox_egress__ "
BIND_HOST = "egress.sandbox.internal"
BIND_PATH = "/bind"
BIND_TIMEOUT_SECONDS = 20
NO_PROXY = "localhost,127.0.0.1,::1"
# The credential endpoints a session's host may offer its SDKs (instance and container metadata):
# link-local, never routed out, and refused by the proxy anyway.
LINK_LOCAL = "169.254.169.254,169.254.170.2"


def no_proxy(direct_hosts: list[str] | tuple[str, ...] = ()) -> str:
    """Loopback, the link-local credential endpoints, and the hosts the session reaches without
    the proxy (S3 through the VPC's gateway endpoint; each name covers its subdomains)."""
    return ",".join([NO_PROXY, LINK_LOCAL, *direct_hosts])


def environment(
    proxy_url: str, ca_bundle: str, index_url: str, direct_hosts: list[str] | tuple[str, ...] = ()
) -> dict[str, str]:
    """The variables the session's processes read (`proxy_url` carries the credential)."""
    bypass = no_proxy(direct_hosts)
    env = {
        "HTTPS_PROXY": proxy_url,
        "https_proxy": proxy_url,
        "HTTP_PROXY": proxy_url,
        "http_proxy": proxy_url,
        "NO_PROXY": bypass,
        "no_proxy": bypass,
        "SSL_CERT_FILE": ca_bundle,
        "REQUESTS_CA_BUNDLE": ca_bundle,
        "CURL_CA_BUNDLE": ca_bundle,
        "PIP_CERT": ca_bundle,
        "NODE_EXTRA_CA_CERTS": ca_bundle,
    }
    if index_url:
        env["PIP_INDEX_URL"] = index_url
    return env


def pip_conf(proxy_url: str, ca_bundle: str, index_url: str) -> str:
    lines = ["[global]", f"proxy = {proxy_url}", f"cert = {ca_bundle}"]
    if index_url:
        lines.append(f"index-url = {index_url}")
    return "\n".join(lines) + "\n"


def curlrc(proxy_url: str, ca_bundle: str, direct_hosts: list[str] | tuple[str, ...] = ()) -> str:
    return f'proxy = "{proxy_url}"\ncacert = "{ca_bundle}"\nnoproxy = "{no_proxy(direct_hosts)}"\n'


def _write_private(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def write_files(
    home: str, proxy_url: str, ca_bundle: str, index_url: str, direct_hosts: list[str] | tuple[str, ...] = ()
) -> None:
    config_home = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    _write_private(os.path.join(config_home, "pip", "pip.conf"), pip_conf(proxy_url, ca_bundle, index_url))
    _write_private(os.path.join(home, ".curlrc"), curlrc(proxy_url, ca_bundle, direct_hosts))


def bind(proxy_url: str, ca_bundle: str, scheme: str = "https") -> tuple[bool, int | None, str | None]:
    """(bound, HTTP status, error class): one request to the proxy's own pseudo-host, through it."""
    try:
        handlers: list[urllib.request.BaseHandler] = [
            urllib.request.ProxyHandler({"http": proxy_url, "https": proxy_url})
        ]
        if scheme == "https":  # through the proxy's TLS interception: proves the session trusts its CA
            handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=ca_bundle)))
        opener = urllib.request.build_opener(*handlers)
        with opener.open(f"{scheme}://{BIND_HOST}{BIND_PATH}", timeout=BIND_TIMEOUT_SECONDS) as answer:
            answer.read(4096)
            return answer.status == 200, answer.status, None
    except urllib.error.HTTPError as exc:
        return False, exc.code, "HTTPError"
    except Exception as exc:  # noqa: BLE001 - reported as its class only: a message may name the proxy URL
        return False, None, type(exc).__name__


def setup(config: dict[str, Any]) -> dict[str, object]:
    """Everything above, in order; returns (and prints) the marker's payload."""
    proxy_url, ca_bundle = config["proxy_url"], config["ca_bundle"]
    index_url = config.get("index_url", "")
    direct_hosts = [str(h) for h in config.get("direct_hosts", [])]
    os.environ.update(environment(proxy_url, ca_bundle, index_url, direct_hosts))
    result: dict[str, object] = {"bound": False, "status": None, "error": None}
    try:
        write_files(os.path.expanduser("~"), proxy_url, ca_bundle, index_url, direct_hosts)
        result["bound"], result["status"], result["error"] = bind(
            proxy_url, ca_bundle, config.get("bind_scheme", "https")
        )
    except Exception as exc:  # noqa: BLE001 - the marker says what failed, never with the credential
        result["error"] = type(exc).__name__
    print(MARKER + json.dumps(result, sort_keys=True), flush=True)
    return result
