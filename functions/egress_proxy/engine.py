"""The proxy's decisions for one connection or request, and its breakers — asyncio, no mitmproxy.
The addon turns mitmproxy's hooks into calls of this module and applies the answers; what is
counted and written per session is `counters.py`'s.

Every blocking read (DynamoDB, SSM, Secrets Manager, CodeArtifact) runs in a worker thread behind a
TTL cache, so the event loop that carries every session's bytes never waits on I/O:

    credential item   CREDENTIAL_CACHE_SECONDS (a revocation is seen within seconds)
    policy, breakers  cache_seconds (≤ 30: a policy, cap or tenant change applies within 60 s)
    tenant's secrets  SECRET_CACHE_SECONDS
    tenant's bytes    TENANT_BYTES_CACHE_SECONDS (plus what this proxy counted since)
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import socket
import time
from collections.abc import Callable
from typing import Any

from sandbox_common import dimensions
from sandbox_common import naming as n
from sandbox_common.egress_policy import ALLOWLIST, AllowRule, EgressPolicy, normalize_host
from sandbox_common.observability import logger

from . import checks, packages
from .caches import AsyncTtlCache
from .checks import Denied
from .config import CREDENTIAL_CACHE_SECONDS, SECRET_CACHE_SECONDS, ProxyConfig
from .counters import Counters
from .credentials import Credential, Presented, parse_proxy_authorization, verify
from .model import Answer, ClientState, RequestView
from .scrub import Scrubber, scrubber_for
from .store import EgressStore, StoreUnavailable

RESOLVE_TIMEOUT = 5.0
RANGE_HEADERS = ("Range", "If-Range")


class Engine:
    def __init__(
        self,
        config: ProxyConfig,
        store: EgressStore,
        *,
        clock: Callable[[], float] = time.time,
        resolver: Callable[[str, int], Any] | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.clock = clock
        self._resolver = resolver
        ttl = config.cache_seconds
        self.credentials: AsyncTtlCache[dict[str, Any] | None] = AsyncTtlCache(CREDENTIAL_CACHE_SECONDS)
        self.policies: AsyncTtlCache[EgressPolicy] = AsyncTtlCache(ttl)
        self.enabled: AsyncTtlCache[bool] = AsyncTtlCache(ttl)
        self.zero_caps: AsyncTtlCache[str | None] = AsyncTtlCache(ttl)
        self.byte_caps: AsyncTtlCache[int] = AsyncTtlCache(ttl)
        self.secrets: AsyncTtlCache[str | None] = AsyncTtlCache(SECRET_CACHE_SECONDS)
        self.index_token: AsyncTtlCache[tuple[str, float]] = AsyncTtlCache(600)
        self.counters = Counters(store, lambda: self.clock())
        self._live: dict[str, int] = {}  # session id -> live client connections
        self._sources: dict[str, int] = {}  # peer address -> live client connections

    # --- client connections ------------------------------------------------------------------
    def client_connected(self, peer: str) -> Denied | None:
        if self._sources.get(peer, 0) >= self.config.max_connections_per_source:
            self.counters.log_denial(None, "", 0, checks.TOO_MANY_CONNECTIONS, peer)
            return Denied(checks.TOO_MANY_CONNECTIONS, 429)
        self._sources[peer] = self._sources.get(peer, 0) + 1
        return None

    def client_closed(self, state: ClientState) -> None:
        left = self._sources.get(state.peer, 1) - 1
        if left > 0:
            self._sources[state.peer] = left
        else:
            self._sources.pop(state.peer, None)
        if state.counted_for is not None:
            live = self._live.get(state.counted_for, 1) - 1
            if live > 0:
                self._live[state.counted_for] = live
            else:
                self._live.pop(state.counted_for, None)
        self.counters.close_connections(state)

    # --- the credential ----------------------------------------------------------------------
    async def authenticate(
        self, header: str | None, peer: str, *, binding: bool = False
    ) -> tuple[Credential | None, Presented | None, Denied | None]:
        presented = parse_proxy_authorization(header)
        if presented is None:
            return None, None, self._auth_denied(None, checks.NO_CREDENTIAL, peer)
        credential, denied = await self._check_credential(presented, peer, binding=binding)
        return credential, presented, denied

    async def _check_credential(
        self, presented: Presented, peer: str, *, binding: bool = False
    ) -> tuple[Credential | None, Denied | None]:
        try:
            item = await self.credentials.get(
                presented.session_id, lambda: self.store.credential_item(presented.session_id)
            )
        except StoreUnavailable as exc:
            logger.error("egress_store_unavailable", extra={"cause": str(exc)})
            return None, Denied(checks.POLICY_UNAVAILABLE, 503)
        credential = Credential.from_item(presented.session_id, item) if item is not None else None
        reason = verify(credential, presented, peer=peer, now=self.clock(), binding=binding)
        if reason is not None:
            return credential, self._auth_denied(credential, reason, peer)
        return credential, None

    def _auth_denied(self, credential: Credential | None, reason: str, peer: str) -> Denied:
        """A credential that admits nothing: 407, logged and counted in the metric (by tenant when
        the credential is known), never on the session's counters (the caller is not it)."""
        self.counters.log_denial(credential, "", 0, reason, peer)
        # a bind from another address than the bound one conflicts; anything else asks for a credential
        return Denied(reason, 409 if reason == checks.BIND_CONFLICT else 407)

    async def recheck(self, state: ClientState) -> Denied | None:
        """An open tunnel's credential, again (cached seconds): revoked or expired ends it."""
        if state.presented is None:
            return Denied(checks.NO_CREDENTIAL, 407)
        credential, denied = await self._check_credential(state.presented, state.peer)
        if denied is not None:
            return Denied(denied.reason, 403)
        state.credential = credential
        return None

    async def bind(self, state: ClientState, header: str | None) -> tuple[int, bytes]:
        """The pseudo-host's `/bind`: record the caller's address on its credential, once."""
        presented = parse_proxy_authorization(header) if header else state.presented
        if presented is None:
            return 407, b'{"bound": false, "reason": "no_credential"}'
        credential, denied = await self._check_credential(presented, state.peer, binding=True)
        if denied is not None or credential is None:
            reason = denied.reason if denied else checks.CREDENTIAL_INVALID
            return (409 if reason == checks.BIND_CONFLICT else 407), (
                f'{{"bound": false, "reason": "{reason}"}}'.encode()
            )
        if credential.source is None:
            try:
                bound = await asyncio.to_thread(
                    self.store.bind_source, credential.session_id, credential.secret_sha256, state.peer
                )
            except StoreUnavailable:
                return 503, b'{"bound": false, "reason": "policy_unavailable"}'
            self.credentials.drop(credential.session_id)
            if not bound:  # someone bound it in between: admitted only if that was this address
                credential, denied = await self._check_credential(presented, state.peer, binding=True)
                if denied is not None:
                    return 409, f'{{"bound": false, "reason": "{denied.reason}"}}'.encode()
        logger.info("egress_bound", extra={"session_id": presented.session_id, "source": state.peer})
        return 200, f'{{"bound": true, "source": "{state.peer}"}}'.encode()

    # --- breakers and policy -----------------------------------------------------------------
    async def gate(self, credential: Credential) -> tuple[EgressPolicy | None, Denied | None]:
        """The tenant × environment's policy, unless a breaker closes the scope: the tenant
        disabled, a calls cap in force at 0, the stored policy `none`. Fails closed."""
        tenant, env = credential.tenant_id, credential.environment
        if n.EGRESS_MODE.get(env) != ALLOWLIST:
            return None, Denied(checks.EGRESS_CLOSED)
        try:
            policy = await self.policies.get((tenant, env), lambda: self.store.policy(tenant, env))
            enabled = await self.enabled.get(tenant, lambda: self.store.tenant_enabled(tenant))
            zero = await self.zero_caps.get(tenant, lambda: self.store.calls_cap_at_zero(tenant))
        except StoreUnavailable as exc:
            logger.error("egress_policy_unavailable", extra={"tenant_id": tenant, "cause": str(exc)})
            return None, Denied(checks.POLICY_UNAVAILABLE, 503)
        if not enabled:
            return None, Denied(checks.TENANT_DISABLED)
        if zero is not None:
            return None, Denied(checks.CAP_ZERO, 403, zero)
        if policy.closed:
            return None, Denied(checks.EGRESS_CLOSED)
        return policy, None

    def gate_cached(self, credential: Credential, host: str, port: int) -> Denied | None:
        """The breakers, the policy and the byte cap from the caches only (a websocket message must
        not wait): a closed scope, a policy that no longer allows `host`, or a tenant at its
        egress_daily_bytes refuses once it is cached; an expired entry is refreshed in the
        background."""
        tenant, env = credential.tenant_id, credential.environment
        policy = self.policies.peek((tenant, env))
        if self.enabled.peek(tenant) is False:
            return Denied(checks.TENANT_DISABLED)
        if self.zero_caps.peek(tenant):
            return Denied(checks.CAP_ZERO)
        if policy is not None and policy.closed:
            return Denied(checks.EGRESS_CLOSED)
        if policy is not None and self._target_refusal(policy, host, port) is not None:
            return Denied(checks.NOT_ALLOWED)
        cap, used = self.byte_caps.peek(tenant), self.counters.tenant_bytes_cached(tenant)
        if cap is not None and used is not None and used >= cap:
            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop().create_task(
                    self.counters.record_cap_refused(credential, dimensions.EGRESS_DAILY_BYTES.name)
                )
            return Denied(checks.CAP_EXCEEDED, 403, dimensions.EGRESS_DAILY_BYTES.name)
        if not (
            self.policies.fresh((tenant, env))
            and self.enabled.fresh(tenant)
            and self.zero_caps.fresh(tenant)
            and cap is not None
            and used is not None
        ):
            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop().create_task(self._refresh_gate(credential))
        return None

    async def _refresh_gate(self, credential: Credential) -> None:
        """Read what gate_cached peeks at (a background refresh: failures wait for the next one)."""
        await self.gate(credential)
        with contextlib.suppress(StoreUnavailable):
            await self.byte_caps.get(credential.tenant_id, lambda: self.store.byte_cap(credential.tenant_id))
            await self.counters.tenant_bytes_today(credential.tenant_id)

    async def _new_connection(self, state: ClientState, credential: Credential) -> Denied | None:
        """A new connection of the session: its connection count and the tenant's daily bytes."""
        if state.counted_for is None:
            if self._live.get(credential.session_id, 0) >= self.config.max_connections_per_credential:
                return Denied(checks.TOO_MANY_CONNECTIONS, 429)
            self._live[credential.session_id] = self._live.get(credential.session_id, 0) + 1
            state.counted_for = credential.session_id
        return await self._within_byte_cap(credential)

    async def _within_byte_cap(self, credential: Credential) -> Denied | None:
        """The tenant's egress_daily_bytes, checked for every new connection and every request
        forwarded (a kept-alive connection carries nothing more once the tenant is at its cap)."""
        tenant = credential.tenant_id
        try:
            cap = await self.byte_caps.get(tenant, lambda: self.store.byte_cap(tenant))
            used = await self.counters.tenant_bytes_today(tenant)
        except StoreUnavailable as exc:
            logger.error("egress_caps_unavailable", extra={"tenant_id": tenant, "cause": str(exc)})
            return Denied(checks.POLICY_UNAVAILABLE, 503)
        if used >= cap:
            dim = dimensions.EGRESS_DAILY_BYTES
            await self.counters.record_cap_refused(credential, dim.name)
            return Denied(checks.CAP_EXCEEDED, 403, dim.name)
        return None

    # --- CONNECT -----------------------------------------------------------------------------
    async def open_tunnel(
        self,
        state: ClientState,
        raw_host: str,
        port: int,
        header: str | None,
        head_bytes: int = 0,
        http_version: str = "HTTP/1.1",
    ) -> Denied | None:
        state.heads += 1
        if http_version not in ("HTTP/1.0", "HTTP/1.1"):
            self.counters.log_denial(None, raw_host, port, checks.BAD_REQUEST, state.peer, http_version)
            return Denied(checks.BAD_REQUEST, 400)
        if head_bytes > checks.MAX_HEAD_BYTES:
            self.counters.log_denial(None, raw_host, port, checks.HEADERS_TOO_LARGE, state.peer)
            return Denied(checks.HEADERS_TOO_LARGE, 431)
        try:
            host = checks.check_host(raw_host)
        except checks.HostRefused as exc:
            credential, _, auth = await self.authenticate(header, state.peer, binding=True)
            if auth is not None:
                return auth
            assert credential is not None
            return await self.counters.deny(state, credential, raw_host, port, Denied(exc.reason))
        binding = host == n.EGRESS_PSEUDO_HOST
        credential, presented, denied = await self.authenticate(header, state.peer, binding=binding)
        if denied is not None:
            return denied
        assert credential is not None
        state.credential, state.presented = credential, presented
        if binding:
            state.pseudo, state.tunnel = True, (host, port)
            return None
        policy, closed = await self.gate(credential)
        if closed is not None:
            return await self.counters.deny(state, credential, host, port, closed)
        assert policy is not None
        refused = self._target_refusal(policy, host, port)
        if refused is not None:
            return await self.counters.deny(state, credential, host, port, refused)
        full = await self._new_connection(state, credential)
        if full is not None:
            return await self.counters.deny(state, credential, host, port, full)
        state.tunnel = (host, port)
        self.counters.connection(state, credential, host, port)
        return None

    def tls_client_hello(self, state: ClientState, sni: str | None) -> Denied | None:
        """The tunnel's TLS SNI must be its CONNECT host: otherwise every request on it is
        refused (nothing was forwarded: upstream connections are made per allowed request)."""
        if state.tunnel is None:
            return None
        if sni is None or normalize_host(sni) != state.tunnel[0]:
            state.refused = Denied(checks.SNI_MISMATCH, 403, f"SNI {sni!r} is not {state.tunnel[0]}")
        return state.refused

    def _target_refusal(self, policy: EgressPolicy, host: str, port: int) -> Denied | None:
        index = self.config.index
        if index is not None and host == index.host:
            return None if policy.packages and port == 443 else Denied(checks.PACKAGE_NOT_LISTED)
        if policy.rule_for(host, port) is not None:
            return None
        if any(r.matches(host, r.ports[0]) for r in policy.allow):
            return Denied(checks.PORT_NOT_ALLOWED)
        return Denied(checks.NOT_ALLOWED)

    # --- requests ----------------------------------------------------------------------------
    async def admit_request(self, state: ClientState, req: RequestView) -> Answer:
        state.heads += 1
        if req.http_version not in checks.HTTP_VERSIONS:
            return await self._refuse_request(state, req, Denied(checks.BAD_REQUEST, 400))
        if req.head_bytes > checks.MAX_HEAD_BYTES:
            return await self._refuse_request(state, req, Denied(checks.HEADERS_TOO_LARGE, 431))
        if state.tunnel is None:  # plain HTTP through the proxy: this request carries the credential
            host = req.host
            binding = _host_or_none(host) == n.EGRESS_PSEUDO_HOST
            credential, presented, denied = await self.authenticate(
                req.proxy_authorization, state.peer, binding=binding
            )
            if denied is not None:
                return Answer(denied=denied)
            state.credential, state.presented = credential, presented
        else:
            if state.refused is not None:  # counted once, when it was found
                return Answer(denied=state.refused)
            if not state.pseudo:
                stale = await self.recheck(state)
                if stale is not None:
                    return await self._refuse_request(state, req, stale)
        credential = state.credential
        assert credential is not None
        try:
            host = checks.check_host(req.host)
            if "@" in req.authority:
                raise checks.HostRefused(checks.USERINFO, f"{req.authority!r} carries userinfo")
            if req.host_header is not None:
                named, named_port = checks.split_host_header(req.host_header, req.port)
                if (named, named_port) != (host, req.port):
                    raise checks.HostRefused(checks.HOST_MISMATCH, f"Host {req.host_header!r} is not {host}")
        except checks.HostRefused as exc:
            return await self._refuse_request(state, req, Denied(exc.reason))
        if state.tunnel is not None:
            if (host, req.port) != state.tunnel:
                return await self._refuse_request(state, req, Denied(checks.HOST_MISMATCH))
            if req.scheme == "https" and (req.sni is None or normalize_host(req.sni) != host):
                return await self._refuse_request(state, req, Denied(checks.SNI_MISMATCH))
        if host == n.EGRESS_PSEUDO_HOST:
            if req.path.split("?", 1)[0] == n.EGRESS_BIND_PATH and req.method in ("GET", "POST"):
                status, body = await self.bind(state, req.proxy_authorization)
                return Answer(respond=(status, body, {"Content-Type": "application/json"}))
            return Answer(respond=(404, b'{"error": "not found"}', {"Content-Type": "application/json"}))
        upgrade = (req.upgrade or "").strip().lower()
        if upgrade and upgrade != "websocket":
            return await self._refuse_request(state, req, Denied(checks.UPGRADE_NOT_ALLOWED))
        policy, closed = await self.gate(credential)
        if closed is not None:
            return await self._refuse_request(state, req, closed)
        assert policy is not None
        refused = self._target_refusal(policy, host, req.port)
        if refused is not None:
            return await self._refuse_request(state, req, refused)
        if state.tunnel is None and (host, req.port) not in state.conns:
            full = await self._new_connection(state, credential)
        else:
            full = await self._within_byte_cap(credential)
        if full is not None:
            return await self._refuse_request(state, req, full)
        answer = Answer()
        index = self.config.index
        if index is not None and host == index.host:
            refused = await self._index_request(policy, req, answer)
        else:
            rule = policy.rule_for(host, req.port)
            assert rule is not None
            refused = await self._credential(credential, rule, req, answer, upgrade)
        if refused is not None:
            return await self._refuse_request(state, req, refused)
        answer.conn = self.counters.allowed(state, credential, host, req.port)
        return answer

    async def _index_request(self, policy: EgressPolicy, req: RequestView, answer: Answer) -> Denied | None:
        index = self.config.index
        assert index is not None
        if req.method not in ("GET", "HEAD") or req.scheme != "https":
            return Denied(checks.PACKAGE_NOT_LISTED)
        wanted = packages.parse_index_path(req.path, index.base_path)
        if wanted is None or not packages.allows(policy, wanted):
            # pip reads a 404 on a project page as "no such project" and says so in its own words
            return Denied(checks.PACKAGE_NOT_LISTED, 404)
        listed = policy.package(wanted.project)
        if wanted.version is None and listed is not None and listed.version is not None:
            answer.pinned_version = listed.version
            answer.set_headers["Accept"] = packages.PROJECT_PAGE_ACCEPT
        if index.codeartifact is not None:
            try:
                token, _ = await self.index_token.get("token", self.store.index_token)
            except StoreUnavailable as exc:
                logger.error("egress_index_token_unavailable", extra={"cause": str(exc)})
                return Denied(checks.POLICY_UNAVAILABLE, 503)
            basic = base64.b64encode(f"aws:{token}".encode()).decode("ascii")
            answer.set_headers["Authorization"] = f"Basic {basic}"
            if wanted.filename is None:
                # a project page is written by the index as it answers, so it is scrubbed (and
                # buffered for that); a package file is streamed: it is the stored package, made
                # before the token was, and buffering it would refuse every wheel over the bound
                answer.scrubber = Scrubber([token, basic])
        return None

    async def _credential(
        self, credential: Credential, rule: AllowRule, req: RequestView, answer: Answer, upgrade: str
    ) -> Denied | None:
        if rule.credential is None:
            return None
        if req.scheme != "https":
            return Denied(checks.CREDENTIAL_OVER_HTTP)
        if upgrade:
            return Denied(checks.WEBSOCKET_WITH_CREDENTIAL)
        tenant = credential.tenant_id
        values: dict[str, str] = {}
        try:
            for name in rule.credential.secrets:
                value = await self.secrets.get(
                    (tenant, name), functools.partial(self.store.secret, tenant, name)
                )
                if value is None:
                    return Denied(checks.SECRET_UNAVAILABLE, 502, name)
                values[name] = value
        except StoreUnavailable as exc:
            logger.error("egress_secret_unavailable", extra={"tenant_id": tenant, "cause": str(exc)})
            return Denied(checks.SECRET_UNAVAILABLE, 502)
        rendered = rule.credential.render(values)
        if not checks.is_header_value(rendered):
            # a secret of several lines (or control characters) would split the request it is
            # written into, and only its whole value is scrubbed: it is not sent at all
            logger.error("egress_secret_not_a_header_value", extra={"tenant_id": tenant})
            return Denied(checks.SECRET_UNAVAILABLE, 502, "not a header value")
        answer.set_headers[rule.credential.header] = rendered
        # a credential host's answers are scrubbed whole: a byte range of one could hand the
        # secret out a piece at a time, each piece too short to be recognised
        answer.drop_headers = RANGE_HEADERS
        answer.scrubber = scrubber_for((*values.values(), rendered))
        return None

    async def _refuse_request(self, state: ClientState, req: RequestView, denied: Denied) -> Answer:
        credential = state.credential
        if credential is None:
            self.counters.log_denial(None, req.host, req.port, denied.reason, state.peer)
            return Answer(denied=denied)
        return Answer(denied=await self.counters.deny(state, credential, req.host, req.port, denied))

    # --- resolution: the address that was checked is the one connected to --------------------
    async def resolve(self, state: ClientState | None, host: str, port: int) -> tuple[str, int] | Denied:
        route = self.config.routes_by_host.get(host)
        if route is not None:
            return route.address, route.port
        try:
            name = checks.check_host(host)
        except checks.HostRefused as exc:
            return await self._resolve_denied(state, host, port, Denied(exc.reason))
        try:
            addresses = await asyncio.wait_for(self._resolve(name, port), RESOLVE_TIMEOUT)
        except (OSError, TimeoutError, UnicodeError):
            return await self._resolve_denied(state, host, port, Denied(checks.UNRESOLVABLE, 502))
        index = self.config.index
        if index is not None and name == index.host and addresses:
            return addresses[0], port  # the stage's own index: reached as the stage's network says
        chosen, why = checks.first_public(addresses)
        if chosen is None:
            return await self._resolve_denied(
                state, host, port, Denied(checks.NON_PUBLIC_ADDRESS, 403, why or "")
            )
        return chosen, port

    async def _resolve(self, host: str, port: int) -> list[str]:
        fixed = self.config.resolve.get(host)
        if fixed is not None:
            return [fixed]
        if self._resolver is not None:
            return list(await self._resolver(host, port))
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return [str(info[4][0]) for info in infos]

    async def _resolve_denied(
        self, state: ClientState | None, host: str, port: int, denied: Denied
    ) -> Denied:
        if state is None or state.credential is None:
            self.counters.log_denial(None, host, port, denied.reason, state.peer if state else "")
            return denied
        return await self.counters.deny(state, state.credential, host, port, denied)


def _host_or_none(raw: str) -> str | None:
    try:
        return checks.check_host(raw)
    except checks.HostRefused:
        return None
