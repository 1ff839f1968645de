"""The mitmproxy addon: each hook turns mitmproxy's objects into the engine's plain values, awaits
its decision and applies it. Nothing is decided here.

    client_connected / client_disconnected   per-source limits, the first-head deadline
    http_connect                             a CONNECT: credential, breakers, policy (407 / 403)
    tls_clienthello                          the tunnel's SNI against its CONNECT host
    requestheaders                           every request: credential, Host, breakers, policy,
                                             the credential header, the index token
    responseheaders / response               bytes in; a credential host's response buffered and
                                             scrubbed, a pinned package's page filtered
    websocket_message                        bytes both ways; a closed scope ends the websocket
    tcp_start                                anything but HTTP in a tunnel is refused
    server_connect                           the name resolved and checked here, and the checked
                                             address is the one connected to
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from typing import Any

from mitmproxy import connection, http, tcp, tls
from mitmproxy.proxy import commands, events
from mitmproxy.proxy.layers import http as http_layers
from mitmproxy.proxy.layers.http import _http1
from mitmproxy.proxy.layers.http._base import ReceiveHttp
from mitmproxy.proxy.layers.http._events import ResponseProtocolError
from mitmproxy.proxy.server_hooks import ServerConnectionHookData
from sandbox_common.observability import logger

from . import checks, packages
from .checks import Denied
from .engine import Engine
from .model import Answer, ClientState, RequestView

ANSWER = "egress_answer"  # flow.metadata key: the engine's Answer of a forwarded request
PROXY_AUTHENTICATE = 'Basic realm="sandbox egress"'
DENIED_HEADER = "X-Sandbox-Egress-Denied"
_log = logging.getLogger(__name__)
_INFORMATIONAL = re.compile(rb"HTTP/1\.[01] 1(?!01)\d\d[ \r]")  # a 1xx status line but 101's
_QUOTED_BYTES = re.compile(r"""b['"]""")  # where mitmproxy quotes a peer's bytes in an error (repr)


def bound_request_heads(limit: int = checks.MAX_HEAD_BYTES) -> None:
    """mitmproxy buffers an HTTP/1 request head until its blank line, with no bound (its own
    "FIXME: protect against header size DoS"): a head still incomplete past `limit` bytes is
    answered 431 and its connection closed."""
    server = _http1.Http1Server
    if getattr(server, "_egress_bounded", False):
        return
    original = server.read_headers

    def read_headers(self: Any, event: events.ConnectionEvent) -> Any:
        yield from original(self, event)
        if self.state == self.read_headers and len(self.buf) > limit:
            yield commands.SendData(
                self.conn, _http1.make_error_response(431, "request header fields too large")
            )
            yield commands.CloseConnection(self.conn)
            self.state = self.done

    server.read_headers = read_headers  # type: ignore[method-assign,unused-ignore]
    server._egress_bounded = True  # type: ignore[attr-defined,unused-ignore]


def bound_buffered_responses() -> None:
    """A response the addon buffers whole (a credential host's, to scrub it; a pinned package's
    page, to filter it) stops at mitmproxy's `body_size_limit` however it is framed: a chunked one
    announces no size, and read without a bound it would hold the proxy's memory for every tenant.
    No other body is limited (a streamed response, any request body): they are never held."""
    stream = http_layers.HttpStream
    if getattr(stream, "_egress_bounded", False):
        return
    original = stream.check_body_size

    def check_body_size(self: Any, request: bool) -> Any:
        answer: Answer | None = self.flow.metadata.get(ANSWER)
        if request or answer is None or (answer.scrubber is None and answer.pinned_version is None):
            return False
        return (yield from original(self, request))

    stream.check_body_size = check_body_size  # type: ignore[method-assign,unused-ignore]
    stream._egress_bounded = True  # type: ignore[attr-defined,unused-ignore]


def answer_trailers() -> None:
    """mitmproxy's HTTP/1 reader raises NotImplementedError on a body with trailers, which ends
    the connection's handler and leaves its client waiting for an answer that never comes: read
    as the protocol error it is here (the client gets a 502, the connection is closed)."""
    connection_class = _http1.Http1Connection
    if getattr(connection_class, "_egress_trailers", False):
        return
    original = connection_class.read_body

    def read_body(self: Any, event: events.Event) -> Any:
        try:
            yield from original(self, event)
        except NotImplementedError as exc:
            yield commands.CloseConnection(self.conn)
            yield ReceiveHttp(
                self.ReceiveProtocolError(
                    self.stream_id, f"HTTP/1 protocol error: {exc}", code=self.ReceiveProtocolError.code
                )
            )

    connection_class.read_body = read_body  # type: ignore[method-assign,unused-ignore]
    connection_class._egress_trailers = True  # type: ignore[attr-defined,unused-ignore]


def skip_informational_responses() -> None:
    """An HTTP/1 server's informational answer (`103 Early Hints`, `102 Processing`; not `101`)
    is taken by mitmproxy's reader for the final one: an HTTP/2 client then waits for an answer
    that never comes, an HTTP/1 client gets the 103 and then nothing. Dropped before it is read,
    as mitmproxy's HTTP/2 reader drops one from an HTTP/2 server; the final answer follows."""
    client_class = _http1.Http1Client
    if getattr(client_class, "_egress_informational", False):
        return
    original = client_class.read_headers

    def read_headers(self: Any, event: events.ConnectionEvent) -> Any:
        if isinstance(event, events.DataReceived) and self.request:
            while _INFORMATIONAL.match(data := bytes(self.buf)) and (end := data.find(b"\r\n\r\n")) != -1:
                self.buf.maybe_extract_at_most(end + 4)  # h11's buffer: this also resets its search
        return (yield from original(self, event))

    client_class.read_headers = read_headers  # type: ignore[method-assign,unused-ignore]
    client_class._egress_informational = True  # type: ignore[attr-defined,unused-ignore]


def withhold_upstream_bytes_in_errors() -> None:
    """mitmproxy's answer to a response it cannot read quotes the offending bytes (a status or
    header line, a chunk size, what the server sent before it closed), and so does the error the
    addon logs: from a credential host those bytes may hold the secret the proxy added, where no
    scrubbing reaches them. Such an error keeps mitmproxy's words up to the quoted bytes, scrubbed."""
    stream = http_layers.HttpStream
    if getattr(stream, "_egress_withheld", False):
        return
    original = stream.handle_protocol_error

    def handle_protocol_error(self: Any, event: Any) -> Any:
        answer: Answer | None = self.flow.metadata.get(ANSWER)
        if isinstance(event, ResponseProtocolError) and answer is not None and answer.scrubber is not None:
            quoted = _QUOTED_BYTES.search(event.message)
            if quoted is not None:
                kept = event.message[: quoted.start()].rstrip(": ")
                event.message = f"{kept} (what the server sent is not shown: it may hold the credential)"
            event.message = answer.scrubber.text(event.message)[0]
        return (yield from original(self, event))

    stream.handle_protocol_error = handle_protocol_error  # type: ignore[method-assign,unused-ignore]
    stream._egress_withheld = True  # type: ignore[attr-defined,unused-ignore]


def ascii_host(host: str) -> str:
    """The name as the wire and the policy spell it: mitmproxy decodes an internationalized name
    (`xn--bcher-kva.example`) to Unicode; the policy lists it, and the name check reads it, in its
    ASCII form. A name that has none is returned as it is (the name check refuses it)."""
    if host.isascii():
        return host
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return host


def refusal(denied: Denied, host: str = "") -> http.Response:
    body = json.dumps({"egress": "denied", "reason": denied.reason, "host": host}).encode()
    headers = {"Content-Type": "application/json", DENIED_HEADER: denied.reason, "Connection": "close"}
    if denied.status == 407:
        headers["Proxy-Authenticate"] = PROXY_AUTHENTICATE
    return http.Response.make(denied.status, body, headers)


class EgressAddon:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.states: dict[str, ClientState] = {}
        self._flusher: asyncio.Task[None] | None = None
        self._names: dict[str, tuple[str, int]] = {}  # server connection id -> the name it was asked as

    # --- lifecycle ---------------------------------------------------------------------------
    def running(self) -> None:
        if self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(
                self.engine.counters.flush_forever(lambda: list(self.states.values()))
            )

    async def done(self) -> None:
        await self.engine.counters.flush(list(self.states.values()))

    # --- client connections ------------------------------------------------------------------
    def client_connected(self, client: connection.Client) -> None:
        peer = str(client.peername[0]) if client.peername else ""
        denied = self.engine.client_connected(peer)
        if denied is not None:
            client.error = f"egress denied: {denied.reason}"
            return
        self.states[client.id] = ClientState(peer=peer, opened=time.time())
        self._expect_head(client, 0)

    def client_disconnected(self, client: connection.Client) -> None:
        state = self.states.pop(client.id, None)
        if state is not None:
            self.engine.client_closed(state)

    def _expect_head(self, client: connection.Client, heads: int) -> None:
        """Close the client unless it sends a request head within the handshake timeout (a slow
        client must not hold a connection slot without asking for anything)."""

        def check() -> None:
            state = self.states.get(client.id)
            if state is not None and state.heads <= heads:
                logger.warning("egress_slow_client_closed", extra={"source": state.peer})
                _close_client(client)

        asyncio.get_running_loop().call_later(self.engine.config.handshake_timeout, check)

    # --- CONNECT ------------------------------------------------------------------------------
    async def http_connect(self, flow: http.HTTPFlow) -> None:
        state = self.states.get(flow.client_conn.id)
        if state is None:
            flow.response = refusal(Denied(checks.TOO_MANY_CONNECTIONS, 429))
            return
        request = flow.request
        denied = await self.engine.open_tunnel(
            state,
            ascii_host(request.host),
            request.port,
            request.headers.get("Proxy-Authorization"),
            checks.head_size(request.method, request.authority, request.headers.fields),
            request.http_version,
        )
        if denied is not None:
            flow.response = refusal(denied, flow.request.host)
        else:
            self._expect_head(flow.client_conn, state.heads)

    async def tls_clienthello(self, data: tls.ClientHelloData) -> None:
        state = self.states.get(data.context.client.id)
        if state is None or state.tunnel is None or state.pseudo:
            return
        denied = self.engine.tls_client_hello(state, data.client_hello.sni)
        if denied is not None and state.credential is not None:
            await self.engine.counters.deny(
                state, state.credential, data.client_hello.sni or "", state.tunnel[1], denied
            )

    # --- requests -----------------------------------------------------------------------------
    async def requestheaders(self, flow: http.HTTPFlow) -> None:
        request = flow.request
        if request.method == "CONNECT" or flow.response is not None:
            return
        state = self.states.get(flow.client_conn.id)
        if state is None:
            flow.response = refusal(Denied(checks.TOO_MANY_CONNECTIONS, 429))
            return
        view = RequestView(
            method=request.method,
            scheme=request.scheme,
            host=ascii_host(request.host),
            port=request.port,
            path=request.path,
            host_header=request.host_header,
            authority=request.authority,
            proxy_authorization=request.headers.get("Proxy-Authorization"),
            upgrade=request.headers.get("Upgrade"),
            head_bytes=checks.head_size(request.method, request.path, request.headers.fields),
            sni=flow.client_conn.sni,
            http_version=request.http_version,
        )
        answer = await self.engine.admit_request(state, view)
        if answer.denied is not None:
            flow.response = refusal(answer.denied, request.host)
            return
        if answer.respond is not None:
            status, body, headers = answer.respond
            flow.response = http.Response.make(status, body, headers)
            return
        request.headers.pop("Proxy-Authorization", None)  # the session's credential stays here
        request.headers.pop("Proxy-Connection", None)
        for name in answer.drop_headers:
            request.headers.pop(name, None)
        for name, value in answer.set_headers.items():
            request.headers[name] = value
        flow.metadata[ANSWER] = answer
        conn = answer.conn
        self.engine.counters.add_bytes(state, conn, out=view.head_bytes)
        request.stream = _counter(self.engine, state, answer, outbound=True)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        answer: Answer | None = flow.metadata.get(ANSWER)
        response = flow.response
        if answer is None or response is None:
            return
        state = self.states.get(flow.client_conn.id)
        if state is not None:
            self.engine.counters.add_bytes(state, answer.conn, into=_head_bytes(response))
        if answer.scrubber is not None or answer.pinned_version is not None:
            # buffered whole: a secret split across two chunks must not slip through
            length = response.headers.get("Content-Length", "")
            if length.isdigit() and int(length) > self.engine.config.max_scrubbed_body:
                logger.warning("egress_response_too_large_to_scrub", extra={"host": flow.request.host})
                flow.kill()
            response.stream = False
            return
        if state is not None:
            response.stream = _counter(self.engine, state, answer, outbound=False)

    async def response(self, flow: http.HTTPFlow) -> None:
        answer: Answer | None = flow.metadata.get(ANSWER)
        response = flow.response
        if answer is None or response is None or response.stream:
            return
        state = self.states.get(flow.client_conn.id)
        if state is not None:
            self.engine.counters.add_bytes(state, answer.conn, into=len(response.raw_content or b""))
        try:
            if answer.pinned_version is not None and response.status_code == 200:
                response.text = packages.pinned_page(
                    response.get_text(strict=True) or "", answer.pinned_version
                )
            if answer.scrubber is not None:
                _scrub(response, answer)
        except ValueError:  # an encoding the proxy cannot read: it cannot be scrubbed either
            denied = Denied(checks.RESPONSE_NOT_SCRUBBABLE, 502)
            if state is not None and state.credential is not None:
                await self.engine.counters.deny(
                    state, state.credential, flow.request.host, flow.request.port, denied
                )
            flow.response = refusal(denied, flow.request.host)

    # --- websockets, raw TCP -------------------------------------------------------------------
    def websocket_message(self, flow: http.HTTPFlow) -> None:
        state = self.states.get(flow.client_conn.id)
        if flow.websocket is None or state is None or state.credential is None:
            return
        message = flow.websocket.messages[-1]
        answer: Answer | None = flow.metadata.get(ANSWER)
        conn = answer.conn if answer else None
        if message.from_client:
            self.engine.counters.add_bytes(state, conn, out=len(message.content))
        else:
            self.engine.counters.add_bytes(state, conn, into=len(message.content))
        closed = self.engine.gate_cached(state.credential, flow.request.host, flow.request.port)
        if closed is not None:  # a breaker closed the scope: the websocket ends here
            message.drop()
            logger.warning("egress_websocket_closed", extra={"reason": closed.reason})
            _close_client(flow.client_conn)

    async def tcp_start(self, flow: tcp.TCPFlow) -> None:
        state = self.states.get(flow.client_conn.id)
        if state is not None and state.credential is not None and state.tunnel is not None:
            await self.engine.counters.deny(
                state, state.credential, state.tunnel[0], state.tunnel[1], Denied(checks.NOT_HTTP)
            )
        flow.kill()

    # --- errors: logged (the client already has mitmproxy's error answer or a closed connection) --
    def error(self, flow: http.HTTPFlow) -> None:
        if flow.error is not None and flow.request is not None:
            state = self.states.get(flow.client_conn.id)
            logger.warning(
                "egress_request_failed",
                extra={
                    "host": flow.request.host,
                    "session_id": state.credential.session_id if state and state.credential else None,
                    "cause": str(flow.error.msg)[:300],
                },
            )

    def tls_failed_client(self, data: tls.TlsData) -> None:
        # typically a client that does not trust the proxy's CA (a session without its bundle)
        logger.warning("egress_client_tls_failed", extra={"sni": data.context.client.sni})

    def tls_failed_server(self, data: tls.TlsData) -> None:
        # the upstream's certificate did not verify (or its TLS failed): nothing was sent to it
        error = data.conn.error if data.conn is not None else None
        logger.warning("egress_upstream_tls_failed", extra={"sni": data.conn.sni, "cause": str(error)[:300]})

    # --- upstream connections -----------------------------------------------------------------
    async def server_connect(self, data: ServerConnectionHookData) -> None:
        server = data.server
        if server.address is None:
            return
        named, port = str(server.address[0]), int(server.address[1])
        host = ascii_host(named)
        state = self.states.get(data.client.id)
        resolved = await self.engine.resolve(state, host, port)
        if isinstance(resolved, Denied):
            server.error = f"egress denied: {resolved.reason}"
            return
        if server.sni is None:
            server.sni = host
        self._names[server.id] = (named, port)
        server.address = resolved

    def server_connected(self, data: ServerConnectionHookData) -> None:
        """Connected to the checked address: the connection takes its name back. mitmproxy finds an
        open upstream connection for a client's next request by (address, TLS, via), the address
        being the request's host; left at the checked address, no request would ever match it, each
        would open a connection of its own, and the sixth would wait forever on mitmproxy's limit of
        five per address. mitmproxy refuses a new address on an open connection (no addon may think
        it redirects one); this only names it, and `peername` keeps the address connected to."""
        name = self._names.pop(data.server.id, None)
        if name is not None:
            object.__setattr__(data.server, "address", name)

    def server_connect_error(self, data: ServerConnectionHookData) -> None:
        self._names.pop(data.server.id, None)


def _head_bytes(response: http.Response) -> int:
    return len(response.reason or "") + 15 + sum(len(k) + len(v) + 4 for k, v in response.headers.fields)


def _counter(engine: Engine, state: ClientState, answer: Answer, *, outbound: bool) -> Any:
    """A stream function that passes chunks through and counts them: one call of in-memory
    additions per chunk, nothing written (the counters are flushed in batches)."""
    add, conn = engine.counters.add_bytes, answer.conn

    def count_out(chunk: bytes) -> bytes:
        add(state, conn, out=len(chunk))
        return chunk

    def count_in(chunk: bytes) -> bytes:
        add(state, conn, into=len(chunk))
        return chunk

    return count_out if outbound else count_in


def _scrub(response: http.Response, answer: Answer) -> None:
    scrubber = answer.scrubber
    assert scrubber is not None
    total = 0
    if response.reason:
        reason, total = scrubber.text(response.reason)
        response.reason = reason
    for part in (response.headers, response.trailers):
        if part is None:
            continue
        fields = []
        for name, value in part.fields:
            cleaned, count = scrubber.bytes(value)
            total += count
            fields.append((name, cleaned))
        part.fields = tuple(fields)
    body = response.get_content(strict=True)
    if body:
        cleaned_body, count = scrubber.bytes(body)
        if count:
            response.set_content(cleaned_body)
            total += count
    if total:
        logger.info("egress_response_scrubbed", extra={"replaced": total})


def _close_client(client: connection.Client) -> None:
    """Close a client connection from outside its own flow (mitmproxy's idle-timeout path)."""
    from mitmproxy import ctx

    proxyserver: Any = ctx.master.addons.get("proxyserver")
    handler = proxyserver.connections.get(client.id) if proxyserver is not None else None
    if handler is not None:
        asyncio.get_running_loop().create_task(handler.on_timeout())
