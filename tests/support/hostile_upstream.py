"""A careless (or hostile) HTTPS API on loopback, for red-team tests of the egress proxy: it answers
with whatever raw HTTP/1.1 bytes a path asks for, so a test can make it reflect the credential the
proxy added in every place and shape a real server might (a reason phrase, an interim 103, a
redirect's Location, a trailer, a chunk boundary, a compressed or encoded body, a byte range).

Paths (each records what the server saw in `seen`):

    /reflect/<mode>      the request's Authorization value reflected as <mode> says (MODES)
    /redirect?to=URL     302 to URL
    /echo                the request's head and body back, as JSON
    /bytes?n=N           N bytes
    /stream?n=N          N chunks of 1 KiB, one every 300 ms
    /big?mib=N           N MiB, chunked (no Content-Length)
    /ws                  a websocket that echoes each message

It speaks HTTP/1.1 with keep-alive, reading requests one after another on a connection (so a
pipelined or smuggled second request, if the proxy forwarded one, would be seen and recorded).
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import socket
import ssl
import threading
import time
import urllib.parse
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.local import certs


@dataclass
class Seen:
    method: str
    target: str
    headers: dict[str, str]  # by lower-case name, the last one of a name
    body: bytes
    lines: tuple[str, ...] = ()  # every header line as it came


def _reflections(token: str) -> dict[str, bytes]:
    """The credential reflected in encodings a real API might use."""
    raw = token.encode()
    return {
        "hex-upper": binascii.hexlify(raw).upper(),  # a hex dump
        "b64-offset1": base64.b64encode(b"x" + raw),  # inside a larger base64 blob
        "b64-offset2": base64.b64encode(b"xy" + raw),
        "utf16": ("token=" + token).encode("utf-16-le"),  # a UTF-16 API
    }


def decoded(mode: str, body: bytes) -> bytes:
    """What a program reading a `mode` reflection recovers from its body (the body itself when it
    no longer decodes: a scrubbed reflection)."""
    try:
        if mode == "hex-upper":
            return binascii.unhexlify(body.strip())
        if mode.startswith("b64-"):
            return base64.b64decode(body.strip() + b"=" * (-len(body.strip()) % 4))
    except (ValueError, binascii.Error):
        return body
    if mode == "utf16":
        return body.decode("utf-16-le", "replace").encode()
    return body


ENCODED_MODES = tuple(_reflections("x"))
MODES = (
    "body",
    *ENCODED_MODES,
    "reason",
    "early-hints",
    "location",
    "chunked-split",
    "trailer",
    "gzip",
    "deflate",
    "gzip-twice",
    "range",
    "cookie",
    "bad-status-line",
    "bad-header-line",
    "bad-chunk-size",
    "garbage-then-close",
)


@dataclass
class HostileUpstream:
    """The server; `start()` makes its certificate (for `names`, signed by `ca`) and listens."""

    ca: certs.KeyPair
    names: list[str]
    directory: Path
    seen: list[Seen] = field(default_factory=list)
    port: int = 0
    _sock: socket.socket | None = None
    _stopped: bool = False

    def start(self) -> HostileUpstream:
        leaf = certs.make_leaf(self.ca, self.names)
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "hostile.pem").write_bytes(leaf.cert_pem + leaf.key_pem)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(self.directory / "hostile.pem"))
        sock = socket.create_server(("127.0.0.1", 0))
        self._sock = sock
        self.port = sock.getsockname()[1]
        self._context = context
        threading.Thread(target=self._accept, daemon=True, name="hostile-upstream").start()
        return self

    def routes(self) -> str:
        return ",".join(f"{name}=127.0.0.1:{self.port}" for name in self.names)

    def stop(self) -> None:
        self._stopped = True
        if self._sock is not None:
            self._sock.close()

    def saw(self, needle: str) -> list[Seen]:
        return [s for s in self.seen if needle in s.target]

    # --- serving ---------------------------------------------------------------------------------
    def _accept(self) -> None:
        assert self._sock is not None
        while not self._stopped:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        try:
            conn = self._context.wrap_socket(raw, server_side=True)
            conn.settimeout(30)
            buffer = b""
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target = lines[0].split(" ")[:2]
                headers: dict[str, str] = {}
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0") or 0)
                if headers.get("transfer-encoding", "").lower() == "chunked":
                    body, buffer = _read_chunked(conn, buffer)
                else:
                    while len(buffer) < length:
                        chunk = conn.recv(65536)
                        if not chunk:
                            return
                        buffer += chunk
                    body, buffer = buffer[:length], buffer[length:]
                self.seen.append(Seen(method, target, headers, body, tuple(lines[1:])))
                if target.startswith("/ws") and headers.get("upgrade", "").lower() == "websocket":
                    _websocket_echo(conn, headers, buffer)
                    return
                for part in self._answer(method, target, headers, body):
                    if part == _CLOSE:
                        return
                    conn.sendall(part)
                    if part is _PAUSE:
                        time.sleep(0.3)
        except (OSError, ValueError, ssl.SSLError):
            pass
        finally:
            try:
                raw.close()
            except OSError:
                pass

    def _answer(self, method: str, target: str, headers: dict[str, str], body: bytes) -> list[bytes]:
        path, _, query = target.partition("?")
        params = urllib.parse.parse_qs(query)
        auth = headers.get("authorization", "")
        token = auth.split(" ", 1)[-1]
        if path.startswith("/reflect/"):
            return _reflect(path.removeprefix("/reflect/"), auth, token, headers)
        if path == "/redirect":
            return [_response(302, b"", {"Location": params.get("to", ["/"])[0]})]
        if path == "/echo":
            echoed = json.dumps(
                {"method": method, "target": target, "headers": headers, "body": body.decode("latin-1")}
            ).encode()
            return [_response(200, echoed, {"Content-Type": "application/json"})]
        if path == "/bytes":
            return [_response(200, b"x" * int(params.get("n", ["1024"])[0]), {})]
        if path == "/big":
            # N MiB in 64 KiB chunks, no Content-Length: the size is only known at its end
            mib = int(params.get("mib", ["1"])[0])
            piece = b"10000\r\n" + b"b" * 65536 + b"\r\n"
            return [
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                *([piece] * (16 * mib)),
                b"0\r\n\r\n",
            ]
        if path == "/stream":
            chunks = int(params.get("n", ["10"])[0])
            out = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"]
            for _ in range(chunks):
                out += [b"400\r\n" + b"s" * 1024 + b"\r\n", _PAUSE]
            return [*out, b"0\r\n\r\n"]
        return [_response(404, b"not found", {})]


_PAUSE = b""  # a marker between parts: the server waits a moment (a chunk boundary in time too)
_CLOSE = b"<close>"  # a marker: the server closes the connection here


def _response(status: int, body: bytes, headers: dict[str, str], reason: str = "OK") -> bytes:
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Length: {len(body)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return head.encode("latin-1") + b"\r\n" + body


def _reflect(mode: str, auth: str, token: str, headers: dict[str, str]) -> list[bytes]:
    document = b'{"authorization": "' + auth.encode() + b'"}'
    encoded = _reflections(token)
    if mode == "body":
        return [_response(200, document, {"Content-Type": "application/json"})]
    if mode in encoded:
        return [_response(200, encoded[mode], {"Content-Type": "text/plain"})]
    if mode == "reason":
        return [_response(401, b"{}", {}, reason=f"Invalid token {token}")]
    if mode == "early-hints":
        hint = f"HTTP/1.1 103 Early Hints\r\nLink: </t?{token}>; rel=preload\r\n\r\n".encode()
        return [hint, _response(200, b"{}", {})]
    if mode == "location":
        return [_response(302, b"", {"Location": f"https://elsewhere.invalid/?t={token}"})]
    if mode == "cookie":
        return [_response(200, b"{}", {"Set-Cookie": f"t={token}; Path=/"})]
    if mode == "chunked-split":
        half = len(document) // 2 + 3  # inside the token
        first, second = document[:half], document[half:]
        return [
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            f"{len(first):x}\r\n".encode() + first + b"\r\n",
            _PAUSE,
            f"{len(second):x}\r\n".encode() + second + b"\r\n0\r\n\r\n",
        ]
    if mode == "trailer":
        return [
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Token\r\n\r\n"
            b"2\r\n{}\r\n0\r\nX-Token: " + token.encode() + b"\r\n\r\n"
        ]
    if mode == "gzip":
        return [_response(200, gzip.compress(document), {"Content-Encoding": "gzip"})]
    if mode == "deflate":
        return [_response(200, zlib.compress(document), {"Content-Encoding": "deflate"})]
    if mode == "gzip-twice":
        return [_response(200, gzip.compress(gzip.compress(document)), {"Content-Encoding": "gzip, gzip"})]
    # malformed answers, the token in the part a parser quotes back in its error message
    if mode == "bad-status-line":
        return [f"HTTP/1.1 2x0 {token}\r\nContent-Length: 0\r\n\r\n".encode()]
    if mode == "bad-header-line":
        return [f"HTTP/1.1 200 OK\r\n{token}\r\nContent-Length: 0\r\n\r\n".encode()]
    if mode == "bad-chunk-size":
        return [f"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz{token}\r\n".encode(), _CLOSE]
    if mode == "garbage-then-close":
        return [f"XTTP {token}".encode(), _CLOSE]
    if mode == "range":
        # a server that honours Range on any answer (as static and caching servers do)
        wanted = headers.get("range", "")
        if wanted.startswith("bytes="):
            start_s, _, end_s = wanted[6:].partition("-")
            start = int(start_s)
            end = min(int(end_s) if end_s else len(document) - 1, len(document) - 1)
            part = document[start : end + 1]
            return [
                _response(
                    206,
                    part,
                    {"Content-Range": f"bytes {start}-{end}/{len(document)}"},
                    reason="Partial Content",
                )
            ]
        return [_response(200, document, {"Accept-Ranges": "bytes"})]
    return [_response(404, b"no such mode", {})]


def _read_chunked(conn: Any, buffer: bytes) -> tuple[bytes, bytes]:
    body = b""
    while True:
        while b"\r\n" not in buffer:
            chunk = conn.recv(65536)
            if not chunk:
                raise ValueError("connection closed in a chunked body")
            buffer += chunk
        size_line, _, buffer = buffer.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        while len(buffer) < size + 2:
            chunk = conn.recv(65536)
            if not chunk:
                raise ValueError("connection closed in a chunk")
            buffer += chunk
        if size == 0:
            # trailers, up to the blank line
            while not buffer.startswith(b"\r\n") and b"\r\n\r\n" not in buffer:
                buffer += conn.recv(65536)
            end = 2 if buffer.startswith(b"\r\n") else buffer.index(b"\r\n\r\n") + 4
            return body, buffer[end:]
        body += buffer[:size]
        buffer = buffer[size + 2 :]


_WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def _websocket_echo(conn: Any, headers: dict[str, str], buffer: bytes) -> None:
    """Accept the upgrade, then echo every message (client frames are masked; ours are not) until
    the client closes."""
    import hashlib

    accept = base64.b64encode(hashlib.sha1((headers["sec-websocket-key"] + _WS_GUID).encode()).digest())
    conn.sendall(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
    )

    def need(count: int) -> bytes:
        nonlocal buffer
        while len(buffer) < count:
            chunk = conn.recv(65536)
            if not chunk:
                raise ValueError("closed")
            buffer += chunk
        out, buffer = buffer[:count], buffer[count:]
        return out

    while True:
        first, second = need(2)
        opcode, length = first & 0x0F, second & 0x7F
        if length == 126:
            length = int.from_bytes(need(2), "big")
        elif length == 127:
            length = int.from_bytes(need(8), "big")
        mask = need(4) if second & 0x80 else b"\0\0\0\0"
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(need(length)))
        if opcode == 0x8:
            conn.sendall(b"\x88\x00")
            return
        conn.sendall(websocket_frame(payload, opcode=opcode, masked=False))


def websocket_frame(payload: bytes, *, opcode: int = 0x2, masked: bool = True) -> bytes:
    """One final frame (a client's frames are masked)."""
    head = bytes([0x80 | opcode])
    bit = 0x80 if masked else 0
    if len(payload) < 126:
        head += bytes([bit | len(payload)])
    elif len(payload) < 65536:
        head += bytes([bit | 126]) + len(payload).to_bytes(2, "big")
    else:
        head += bytes([bit | 127]) + len(payload).to_bytes(8, "big")
    if not masked:
        return head + payload
    mask = b"\x01\x02\x03\x04"
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
