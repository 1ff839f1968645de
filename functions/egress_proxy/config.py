"""The proxy's settings, from its command line (the local stack and the stage's container pass
them; nothing is read from the environment but boto3's own endpoint and credential variables)."""

from __future__ import annotations

import argparse
import ipaddress
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field

from sandbox_common import naming as n

from . import checks

# How long a read may be reused. The policy and the breakers (a calls cap at 0, a disabled tenant,
# a policy of `none`) are re-read at most this often, so a change applies within 2 × this (a
# container's cache plus the cap reader's own); tenants' secrets within 60 s.
DEFAULT_CACHE_SECONDS = 20
CREDENTIAL_CACHE_SECONDS = 2.0  # a revoked credential is refused within seconds
SECRET_CACHE_SECONDS = 30
TENANT_BYTES_CACHE_SECONDS = 5.0
FLUSH_SECONDS = 1.0


@dataclass(frozen=True)
class Route:
    """A name the proxy sends to a fixed loopback address instead of resolving it (local stack:
    test servers and the local package index)."""

    host: str
    address: str
    port: int


@dataclass(frozen=True)
class IndexSettings:
    """The stage's package index: its host, the base path of its simple API, and (on AWS) the
    CodeArtifact domain whose token the proxy adds."""

    host: str
    base_path: str
    codeartifact: tuple[str, str] | None = None  # (domain, owner account)


@dataclass(frozen=True)
class ProxyConfig:
    stage: str
    listen_host: str = "127.0.0.1"
    listen_port: int = 0
    confdir: str = ""  # mitmproxy's CA directory (mitmproxy-ca.pem: key + certificate)
    egress_table: str = ""
    counters_table: str = ""
    tenants_table: str = ""
    routes: tuple[Route, ...] = ()
    route_ca: str | None = None  # PEM: what verifies routed servers (with the default trust)
    index: IndexSettings | None = None
    cache_seconds: int = DEFAULT_CACHE_SECONDS
    max_connections_per_credential: int = 64
    max_connections_per_source: int = 256
    handshake_timeout: float = 10.0  # to send the first request head after connecting
    idle_timeout: int = 60
    max_scrubbed_body: int = 32 * 1024 * 1024  # a credential host's response, buffered to be scrubbed
    ca_from_secrets: bool = False  # write the stage's CA from Secrets Manager into confdir first
    # Fixed answers for names (tests of the local stack): checked like any DNS answer, so a name
    # whose answer is loopback, private or link-local is refused as it would be from DNS.
    resolve: dict[str, str] = field(default_factory=dict)
    routes_by_host: dict[str, Route] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        self.routes_by_host.update({r.host: r for r in self.routes})


def parse_routes(text: str) -> tuple[Route, ...]:
    """`name=127.0.0.1:PORT[,name=127.0.0.1:PORT...]`; ValueError naming the bad entry. A route
    leads to a loopback address only (it exists for servers on this machine)."""
    routes: list[Route] = []
    for entry in filter(None, (e.strip() for e in text.split(","))):
        name, sep, target = entry.partition("=")
        address, colon, port = target.rpartition(":")
        if not sep or not colon or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"route {entry!r}: expected name=127.0.0.1:PORT")
        try:
            host = checks.check_host(name)
        except checks.HostRefused as exc:
            raise ValueError(f"route {entry!r}: {exc}") from None
        try:
            loopback = ipaddress.ip_address(address).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise ValueError(f"route {entry!r}: a route leads to a loopback address")
        routes.append(Route(host, address, int(port)))
    return tuple(routes)


def parse_resolve(text: str) -> dict[str, str]:
    """`name=ADDRESS[,...]`; ValueError naming the bad entry."""
    answers: dict[str, str] = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        name, sep, address = entry.partition("=")
        try:
            host = checks.check_host(name)
            ipaddress.ip_address(address)
        except (checks.HostRefused, ValueError):
            raise ValueError(f"resolve {entry!r}: expected name=ADDRESS") from None
        if not sep:
            raise ValueError(f"resolve {entry!r}: expected name=ADDRESS")
        answers[host] = address
    return answers


def parse_index_url(url: str, codeartifact: str | None) -> IndexSettings:
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme != "https" or not parsed.hostname or parsed.username or parsed.query:
        raise ValueError(f"--index-url {url!r}: expected https://HOST/PATH/simple/ without credentials")
    base = parsed.path if parsed.path.endswith("/") else parsed.path + "/"
    domain = None
    if codeartifact:
        name, sep, owner = codeartifact.partition(":")
        if not sep or not name or not owner.isdigit():
            raise ValueError(f"--codeartifact {codeartifact!r}: expected DOMAIN:ACCOUNT")
        domain = (name, owner)
    return IndexSettings(checks.check_host(parsed.hostname), base, domain)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m egress_proxy", description="The sandbox's egress proxy.")
    parser.add_argument("--stage", required=True)
    parser.add_argument("--listen-host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="TCP port (0: any free port)")
    parser.add_argument("--confdir", required=True, help="the CA directory (mitmproxy-ca.pem)")
    parser.add_argument("--egress-table", required=True)
    parser.add_argument("--counters-table", required=True, help="the tenant-daily counters table")
    parser.add_argument("--tenants-table", required=True)
    parser.add_argument("--routes", default="", help="name=127.0.0.1:PORT[,...] (local stack only)")
    parser.add_argument("--route-ca", help="PEM verifying routed servers (added to the default trust)")
    parser.add_argument(
        "--resolve", default="", help="name=ADDRESS[,...]: fixed answers, checked like DNS answers (tests)"
    )
    parser.add_argument("--index-url", help="the stage's package index, https://HOST/PATH/simple/")
    parser.add_argument("--codeartifact", help="DOMAIN:ACCOUNT whose token the proxy adds to index requests")
    parser.add_argument("--cache-seconds", type=int, default=DEFAULT_CACHE_SECONDS)
    parser.add_argument("--max-connections-per-credential", type=int, default=64)
    parser.add_argument("--max-connections-per-source", type=int, default=256)
    parser.add_argument("--handshake-timeout", type=float, default=10.0)
    parser.add_argument("--idle-timeout", type=int, default=60)
    parser.add_argument(
        "--ca-from-secrets",
        action="store_true",
        help="write the stage's CA (Secrets Manager) into --confdir before starting (the stage's container)",
    )
    return parser


def from_args(argv: Sequence[str] | None = None) -> ProxyConfig:
    parser = build_parser()
    opts = parser.parse_args(argv)
    try:
        routes = parse_routes(opts.routes)
        resolve = parse_resolve(opts.resolve)
        index = parse_index_url(opts.index_url, opts.codeartifact) if opts.index_url else None
    except ValueError as exc:
        parser.error(str(exc))
    if not 1 <= opts.cache_seconds <= 30:
        parser.error("--cache-seconds must be 1 to 30 (a policy change applies within 60 s)")
    return ProxyConfig(
        stage=opts.stage,
        listen_host=opts.listen_host,
        listen_port=opts.port,
        confdir=opts.confdir,
        egress_table=opts.egress_table,
        counters_table=opts.counters_table,
        tenants_table=opts.tenants_table,
        routes=routes,
        route_ca=opts.route_ca,
        index=index,
        cache_seconds=opts.cache_seconds,
        max_connections_per_credential=opts.max_connections_per_credential,
        max_connections_per_source=opts.max_connections_per_source,
        handshake_timeout=opts.handshake_timeout,
        idle_timeout=opts.idle_timeout,
        ca_from_secrets=opts.ca_from_secrets,
        resolve=resolve,
    )


PSEUDO_HOST = n.EGRESS_PSEUDO_HOST
