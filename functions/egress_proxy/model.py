"""The engine's plain values (no mitmproxy): a client connection's state, the record of each of its
connections (its `conn#...` item), a request as the addon describes it, and the engine's answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .checks import Denied
from .credentials import Credential, Presented
from .scrub import Scrubber


@dataclass
class ConnRecord:
    """One connection of a session to one host:port (a CONNECT tunnel, or plain HTTP requests to
    that host on one client connection): its `conn#...` item."""

    sk: str
    host: str
    port: int
    opened_at: int
    decision: str = "allowed"
    reason: str = ""
    requests: int = 0
    bytes_out: int = 0
    bytes_in: int = 0
    closed_at: int | None = None
    dirty: bool = True

    def item(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "opened_at": self.opened_at,
            "decision": self.decision,
            "requests": self.requests,
            "bytes_out": self.bytes_out,
            "bytes_in": self.bytes_in,
        }
        if self.reason:
            out["reason"] = self.reason
        if self.closed_at is not None:
            out["closed_at"] = self.closed_at
        return out


@dataclass
class ClientState:
    """One client connection to the proxy."""

    peer: str
    opened: float
    heads: int = 0  # request heads seen (CONNECT included): the slow-client deadline counts them
    credential: Credential | None = None
    presented: Presented | None = None
    tunnel: tuple[str, int] | None = None  # the CONNECT target, once admitted
    pseudo: bool = False  # a CONNECT to the proxy's own name
    refused: Denied | None = None  # every request on this connection is refused (e.g. SNI ≠ host)
    counted_for: str | None = None  # the session whose connection count this client holds
    conns: dict[tuple[str, int], ConnRecord] = field(default_factory=dict)


@dataclass
class RequestView:
    """What the addon tells the engine about a request (no mitmproxy types)."""

    method: str
    scheme: str  # http | https
    host: str  # where mitmproxy would send it (from the URL, else the Host header)
    port: int
    path: str
    host_header: str | None
    authority: str
    proxy_authorization: str | None
    upgrade: str | None
    head_bytes: int
    sni: str | None = None
    http_version: str = "HTTP/1.1"


@dataclass
class Answer:
    """The engine's answer to a request: refuse it, answer it itself, or forward it with these
    header changes (and, for a credential host, scrub its response with `scrubber`)."""

    denied: Denied | None = None
    respond: tuple[int, bytes, dict[str, str]] | None = None
    set_headers: dict[str, str] = field(default_factory=dict)
    drop_headers: tuple[str, ...] = ()  # request headers removed before it is forwarded
    scrubber: Scrubber | None = None
    pinned_version: str | None = None  # a pinned package's project page: filtered to this version
    conn: ConnRecord | None = None
