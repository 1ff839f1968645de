"""The local stack as the red team meets it: started by `sandboxctl local up` with test routes to a
hostile HTTPS API of the test's own (`tests/support/hostile_upstream.py`), driven through dispatch
as an agent drives it (turns, calls, jobs, any function name or qualifier), through `sandboxctl` as
an operator does, and through the proxy directly as a stolen credential would be.

    with red_stack(tmp, names=["api.partner.test"]) as red:
        turn = red.turn("acme", "allowlisted")
        answer = turn.run("print(1)")
"""

from __future__ import annotations

import base64
import json
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sandbox_common import naming as n

from infra.local import certs
from infra.local.state import LocalState
from tests.support.egress import Proxy
from tests.support.hostile_upstream import HostileUpstream
from tests.support.local_stack import ctl, running_stack, state_of

ALLOWLIST_ENV = "default-allowlist"


class RedStack:
    def __init__(self, env: dict[str, str], upstream: HostileUpstream) -> None:
        self.env = env
        self.upstream = upstream
        self.state: LocalState = state_of(env)
        self.lambda_client = self.state.client("lambda")
        self.ddb = self.state.client("dynamodb")
        self.function = self.state.resources.functions[n.DISPATCH]
        self.proxy = Proxy(self.state)

    # --- as an agent ------------------------------------------------------------------------------
    def dispatch(
        self, event: dict[str, Any], *, qualifier: str = "", name: str | None = None
    ) -> dict[str, Any]:
        """Invoke dispatch (`name` as given, else the function, `:qualifier` appended) and return
        its answer; a refusal of the invoke itself (404 for an unknown qualifier) is
        {"invoke_error": code}."""
        function = name or (self.function + (f":{qualifier}" if qualifier else ""))
        try:
            out = self.lambda_client.invoke(FunctionName=function, Payload=json.dumps(event).encode())
        except self.lambda_client.exceptions.ClientError as exc:
            return {"invoke_error": exc.response["Error"]["Code"]}
        return dict(json.loads(out["Payload"].read()))

    def turn(self, tenant_id: str, template_id: str, **kwargs: Any) -> Turn:
        return Turn(self, tenant_id, template_id, **kwargs)

    # --- as an operator ---------------------------------------------------------------------------
    def ctl(self, *args: str, stdin: str | None = None) -> Any:
        if stdin is None:
            return ctl(self.env, *args)
        import subprocess

        from tests.support.local_stack import SANDBOXCTL

        return subprocess.run(
            [SANDBOXCTL, *args], input=stdin, env=self.env, capture_output=True, text=True, timeout=120
        )

    def policy(self, tenant_id: str, environment: str = ALLOWLIST_ENV) -> Any:
        out = self.ctl("egress", "get", "--tenant", tenant_id, "--environment", environment, "--json")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def row(self, invocation_id: str) -> dict[str, Any]:
        from sandbox_common.audit import from_item

        item = self.ddb.get_item(
            TableName=self.state.resources.tables[n.INVOCATIONS.logical],
            Key={"invocation_id": {"S": invocation_id}},
            ConsistentRead=True,
        ).get("Item")
        assert item is not None, invocation_id
        return from_item(item)

    def rows_of_turn(self, turn_id: str) -> list[dict[str, Any]]:
        from sandbox_common.audit import from_item

        table = self.state.resources.tables[n.INVOCATIONS.logical]
        found: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "TableName": table,
            "FilterExpression": "turn_id = :t",
            "ExpressionAttributeValues": {":t": {"S": turn_id}},
            "ConsistentRead": True,
        }
        while True:
            page = self.ddb.scan(**kwargs)
            found += [from_item(i) for i in page.get("Items", [])]
            if "LastEvaluatedKey" not in page:
                return found
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


class Turn:
    """One agent turn: `run` sends execute_code, `job` a background one polled to its end."""

    def __init__(
        self, red: RedStack, tenant_id: str, template_id: str, *, qualifier: str = "", agent_id: str = "red"
    ) -> None:
        self.red = red
        self.tenant_id = tenant_id
        self.template_id = template_id
        self.qualifier = qualifier
        self.agent_id = agent_id
        self.turn_id = "turn-" + secrets.token_hex(6)
        self.token = secrets.token_urlsafe(32)
        self.calls = 0
        self.begun = self.dispatch("begin_turn")

    def event(self, action: str, **fields: Any) -> dict[str, Any]:
        base: dict[str, Any] = {"action": action, "tenant_id": self.tenant_id, "turn_id": self.turn_id}
        base["turn_token"] = self.token
        if action in ("begin_turn", "execute_code", "get_job", "cancel_job", "resume"):
            base["agent_id"] = self.agent_id
        if action in ("begin_turn", "execute_code"):
            base["template_id"] = self.template_id
        return {**base, **fields}

    def dispatch(self, action: str, **fields: Any) -> dict[str, Any]:
        return self.red.dispatch(self.event(action, **fields), qualifier=self.qualifier)

    def run(self, code: str, language: str = "python", **fields: Any) -> dict[str, Any]:
        self.calls += 1
        return self.dispatch(
            "execute_code", call_id=f"{self.turn_id}-{self.calls}", code=code, language=language, **fields
        )

    def json(self, code: str, language: str = "python") -> Any:
        """Run `code`, which prints one JSON line last; that line, parsed."""
        answer = self.run(code, language)
        assert answer.get("ok") is True, answer
        return json.loads(answer["stdout"].strip().splitlines()[-1])

    def job(self, code: str, *, timeout: float = 90, **fields: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """Submit `code` as a background job and poll it to its end: (submitted, final)."""
        submitted = self.run(code, background=True, **fields)
        assert submitted.get("status") == "running", submitted
        final = wait_for(
            lambda: (
                (a := self.dispatch("get_job", job_id=submitted["job_id"])).get("status") != "running" and a
            ),
            timeout=timeout,
            what="the job's end",
        )
        return submitted, final

    def end(self) -> dict[str, Any]:
        return self.red.dispatch(
            {
                "action": "end_turn",
                "tenant_id": self.tenant_id,
                "turn_id": self.turn_id,
                "turn_token": self.token,
            },
            qualifier=self.qualifier,
        )


def wait_for(
    predicate: Callable[[], Any], *, timeout: float, interval: float = 0.5, what: str = "state"
) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what} not reached within {timeout}s (last: {last!r})")


def reversed_b64(expression: str) -> str:
    """Session code: `expression`'s bytes printed reversed and base64-encoded, so that no output
    redactor (which knows a value's clear and encoded forms, not its reversal) hides what the
    session really received; `unreversed` reads it back."""
    return f"print(__import__('base64').b64encode(bytes({expression})[::-1]).decode())"


def unreversed(text: str) -> bytes:
    lines = text.strip().splitlines()
    return base64.b64decode(lines[-1])[::-1] if lines else b""


# Session code: a raw request through the session's own proxy credential (HTTPS_PROXY), over a
# CONNECT tunnel and TLS trusting the proxy's CA, or plain to the proxy; returns every byte back.
SESSION_RAW = r'''
import base64 as _b64, os as _os, socket as _socket, ssl as _ssl, urllib.parse as _up

def _proxy():
    p = _up.urlsplit(_os.environ["HTTPS_PROXY"])
    return p.hostname, p.port, _b64.b64encode(f"{p.username}:{p.password}".encode()).decode()

def _read_all(sock):
    out = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            out += chunk
    except (OSError, _ssl.SSLError) as exc:
        out += ("<<" + type(exc).__name__ + ">>").encode()
    return out

def connect_head(target, auth=True):
    """CONNECT target; the proxy's answer head (and the socket when it is 200)."""
    host, port, cred = _proxy()
    sock = _socket.create_connection((host, port), timeout=20)
    line = f"CONNECT {target} HTTP/1.1\r\n"
    line += (f"Proxy-Authorization: Basic {cred}\r\n" if auth else "") + "\r\n"
    sock.sendall(line.encode("utf-8", "surrogateescape"))
    head = b""
    try:
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(1)
            if not chunk:
                break
            head += chunk
    except OSError as exc:
        head += ("<<" + type(exc).__name__ + ">>").encode()
    return head, sock

def tunnel(host, request, port=443):
    """`request` (bytes) sent inside a TLS tunnel to host:port; every byte back."""
    head, sock = connect_head(f"{host}:{port}")
    if not head.startswith(b"HTTP/1.1 200"):
        sock.close()
        return head
    context = _ssl.create_default_context(cafile=_os.environ["SSL_CERT_FILE"])
    tls = context.wrap_socket(sock, server_hostname=host)
    tls.sendall(request)
    try:
        return _read_all(tls)
    finally:
        tls.close()

def plain(request):
    """`request` (bytes) sent to the proxy as it is; every byte back."""
    host, port, _ = _proxy()
    sock = _socket.create_connection((host, port), timeout=20)
    sock.sendall(request)
    try:
        return _read_all(sock)
    finally:
        sock.close()

def proxy_auth():
    return "Proxy-Authorization: Basic " + _proxy()[2] + "\r\n"

def status_of(answer):
    line = answer.split(b"\r\n", 1)[0].decode("latin-1")
    lines = answer.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
    reason = [l for l in lines if l.lower().startswith(b"x-sandbox-egress-denied")]
    return line, (reason[0].split(b":", 1)[1].strip().decode() if reason else None)
'''


@contextmanager
def red_stack(directory: Path, *, names: list[str], **env_extra: str) -> Iterator[RedStack]:
    """A local stack whose proxy routes `names` to a hostile upstream (its CA trusted by the proxy
    through SANDBOX_EGRESS_TEST_CA), started and stopped as a user does."""
    ca = certs.make_ca("red team upstream CA")
    upstream = HostileUpstream(ca, names, directory / "upstream").start()
    ca_file = directory / "upstream-ca.pem"
    ca_file.write_bytes(ca.cert_pem)
    try:
        with running_stack(
            directory / "stack",
            **{n.ENV_EGRESS_TEST_ROUTES: upstream.routes(), n.ENV_EGRESS_TEST_CA: str(ca_file)},
            **env_extra,
        ) as env:
            red = RedStack(env, upstream)
            assert red.state.data.get("egress"), (
                "the stack runs without its egress proxy (make egress-runtime)"
            )
            yield red
    finally:
        upstream.stop()
