"""Pure checks on what a client asks the proxy to reach: host names, ports, resolved addresses and
the size of a request's head. No I/O; every refusal is a `Denied` with a reason from REASONS.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

from sandbox_common.egress_policy import is_ip_literal, normalize_host

# Why a connection or request was refused: the `reason` of its log line, its `conn#` item and the
# header X-Sandbox-Egress-Denied of the answer.
NO_CREDENTIAL = "no_credential"
CREDENTIAL_INVALID = "credential_invalid"
CREDENTIAL_REVOKED = "credential_revoked"
CREDENTIAL_EXPIRED = "credential_expired"
CREDENTIAL_UNBOUND = "credential_unbound"  # used before the session bound it to its address
WRONG_SOURCE = "wrong_source"  # used from another address than the one it is bound to
BIND_CONFLICT = "bind_conflict"  # a bind from another address than the one already bound
BAD_HOST = "bad_host"
BAD_REQUEST = "bad_request"  # an HTTP version or request line the proxy does not speak
USERINFO = "userinfo"
IP_LITERAL = "ip_literal"
NOT_ALLOWED = "not_allowed"
PORT_NOT_ALLOWED = "port_not_allowed"
SNI_MISMATCH = "sni_mismatch"
HOST_MISMATCH = "host_mismatch"
HEADERS_TOO_LARGE = "headers_too_large"
UPGRADE_NOT_ALLOWED = "upgrade_not_allowed"
WEBSOCKET_WITH_CREDENTIAL = "websocket_with_credential"
CREDENTIAL_OVER_HTTP = "credential_over_http"
NON_PUBLIC_ADDRESS = "non_public_address"
UNRESOLVABLE = "unresolvable"
PACKAGE_NOT_LISTED = "package_not_listed"
EGRESS_CLOSED = "egress_closed"  # the environment's stored policy is `none`
TENANT_DISABLED = "tenant_disabled"
CAP_ZERO = "cap_zero"  # a calls cap in force for the tenant is 0 (the kill switch)
CAP_EXCEEDED = "cap_exceeded"  # egress_daily_bytes reached
TOO_MANY_CONNECTIONS = "too_many_connections"
POLICY_UNAVAILABLE = "policy_unavailable"  # the policy or a breaker could not be read: fail closed
SECRET_UNAVAILABLE = "secret_unavailable"
NOT_HTTP = "not_http"  # a tunnel that carried something other than HTTP
RESPONSE_NOT_SCRUBBABLE = "response_not_scrubbable"

MAX_HEAD_BYTES = 32 * 1024  # a request's line and headers, together
HTTP_VERSIONS = frozenset({"HTTP/1.0", "HTTP/1.1", "HTTP/2.0"})
MAX_HOST_CHARS = 253
_HOST_RE = re.compile(r"^(?=.{1,253}$)(?!-)[a-z0-9-]{1,63}(?<!-)(\.(?!-)[a-z0-9-]{1,63}(?<!-))+$")


@dataclass(frozen=True)
class Denied:
    """A refusal: why (one of the reasons above) and the HTTP status that answers it."""

    reason: str
    status: int = 403
    detail: str = ""


class HostRefused(ValueError):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def check_host(raw: str) -> str:
    """The host as the policy sees it (lower case, no trailing dot), or HostRefused: userinfo
    (`allowed.com@evil.com`), an IP literal of any spelling (dotted, IPv6, decimal, octal, hex),
    percent-encoding, non-ASCII, or anything else that is not a DNS name of two labels or more."""
    if not isinstance(raw, str) or not raw:
        raise HostRefused(BAD_HOST, "no host")
    if "@" in raw:
        raise HostRefused(USERINFO, f"{raw!r} carries userinfo")
    if is_ip_literal(raw):
        raise HostRefused(IP_LITERAL, f"{raw!r} is an IP address")
    host = normalize_host(raw)
    if not host.isascii() or not _HOST_RE.match(host):
        raise HostRefused(BAD_HOST, f"{raw!r} is not a host name")
    return host


def is_header_value(value: str) -> bool:
    """A value that can be written as one HTTP header line: no CR, LF, NUL or other control
    character (a tab aside), nor a Unicode line or paragraph separator."""
    return not any((ord(c) < 32 and c != "\t") or ord(c) == 127 or c in "\x85\u2028\u2029" for c in value)


def split_host_header(value: str, default_port: int) -> tuple[str, int]:
    """`host[:port]` of a Host header (or an HTTP/2 :authority), host checked; HostRefused."""
    if "@" in value:
        raise HostRefused(USERINFO, f"{value!r} carries userinfo")
    host, sep, port = value.rpartition(":")
    if not sep or "]" in port:
        host, port = value, ""
    if port and not port.isdigit():
        raise HostRefused(BAD_HOST, f"{value!r}: the port is not a number")
    number = int(port) if port else default_port
    if not 0 < number < 65536:
        raise HostRefused(BAD_HOST, f"{value!r}: no such port")
    return check_host(host), number


def address_refusal(address: str) -> str | None:
    """Why an address a name resolved to must not be connected to (loopback, private, link-local
    (169.254.169.254 included), multicast, reserved, unspecified, shared or documentation space,
    and IPv6 forms that embed one of those), or None for a public unicast address."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return "not an address"
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is None and ip in ipaddress.ip_network("64:ff9b::/96"):
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None:
            return address_refusal(str(embedded))
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_private:
        return "private"
    if ip.is_reserved or not ip.is_global:
        return "reserved"
    return None


def first_public(addresses: Iterable[str]) -> tuple[str | None, str | None]:
    """(the address to connect to, None) when every address a name resolved to is public; else
    (None, why): one non-public answer refuses the name, so a record set mixing a public and a
    private address cannot be used to reach the private one on a later lookup."""
    chosen = None
    for address in addresses:
        why = address_refusal(address)
        if why is not None:
            return None, f"{address} is {why}"
        chosen = chosen or address
    if chosen is None:
        return None, "no address"
    return chosen, None


def head_size(method: str, target: str, headers: Iterable[tuple[bytes, bytes]]) -> int:
    """The bytes of a request's line and headers as HTTP/1 writes them."""
    size = len(method) + 1 + len(target) + len(" HTTP/1.1\r\n") + 2
    for name, value in headers:
        size += len(name) + len(value) + 4
    return size
