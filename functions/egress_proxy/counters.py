"""What the proxy counts per session and writes to the EGRESS table (asyncio, no mitmproxy): the
`counters` item (allowed, denied, bytes, denied hosts, cap refusals), one `conn#...` item per
connection, the tenant's bytes of the day, and the log line and metric of every refusal.

A denial is written before the refusal is answered, so the call whose code was refused sees it in
its audit row; allowed requests and bytes are added in memory (a few integer additions per request
or relayed chunk, no store write) and written in batches every FLUSH_SECONDS.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from sandbox_common import naming as n
from sandbox_common.observability import emit_metric, logger
from sandbox_common.redaction import redact
from sandbox_common.windows import Windows, utc_now

from .caches import AsyncTtlCache
from .checks import Denied
from .config import FLUSH_SECONDS, TENANT_BYTES_CACHE_SECONDS
from .credentials import Credential
from .model import ClientState, ConnRecord
from .store import ITEMS_OUTLIVE_CREDENTIAL_SECONDS, EgressStore, SessionDelta, StoreUnavailable

MAX_CONNECTION_ITEMS = 500  # per session: the connection log of a flood stops growing here
DENIALS_WRITTEN_PER_SECOND = 20


class Counters:
    def __init__(self, store: EgressStore, clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock
        self.tenant_bytes: AsyncTtlCache[int] = AsyncTtlCache(TENANT_BYTES_CACHE_SECONDS)
        self._pending: dict[str, SessionDelta] = {}
        self._unflushed_tenant_bytes: dict[str, int] = {}  # counted here, not yet in the table
        self._conn_items: dict[str, int] = {}  # session id -> connection items written
        self._seq = 0
        self._flush_lock = asyncio.Lock()
        self._denial_writes: dict[str, tuple[int, int]] = {}

    # --- refusals ------------------------------------------------------------------------------
    async def deny(
        self, state: ClientState, credential: Credential, host: str, port: int, denied: Denied
    ) -> Denied:
        """Write the denial to the session's counters (and its connection item), then log it and
        count the metric; the caller answers the refusal after this returns."""
        shown = redact(host)[:253]
        if not self._may_write_denial(credential.session_id):
            # a flood: counted in the next flush (within FLUSH_SECONDS), its hosts not kept
            self._delta(credential).denied += 1
            self.log_denial(credential, shown, port, denied.reason, state.peer, denied.detail)
            return denied
        conn = None
        if self._conn_items.get(credential.session_id, 0) < MAX_CONNECTION_ITEMS:
            self._conn_items[credential.session_id] = self._conn_items.get(credential.session_id, 0) + 1
            record = ConnRecord(
                self._conn_sk(), shown, port, int(self.clock()), decision="denied", reason=denied.reason
            )
            conn = (record.sk, record.item())
        try:
            await asyncio.to_thread(
                self.store.record_denial, credential.session_id, shown, items_expire(credential), conn
            )
        except StoreUnavailable as exc:  # the refusal stands; the count is what could not be written
            logger.error("egress_denial_record_failed", extra={"cause": str(exc)})
        self.log_denial(credential, shown, port, denied.reason, state.peer, denied.detail)
        return denied

    def _may_write_denial(self, session_id: str) -> bool:
        """At most DENIALS_WRITTEN_PER_SECOND denials of a session are written one by one: a flood
        of refusals must not queue store writes ahead of other sessions' reads."""
        second = int(self.clock())
        window, count = self._denial_writes.get(session_id, (second, 0))
        if window != second:
            window, count = second, 0
        if count >= DENIALS_WRITTEN_PER_SECOND:
            return False
        self._denial_writes[session_id] = (window, count + 1)
        return True

    def log_denial(
        self, credential: Credential | None, host: str, port: int, reason: str, peer: str, detail: str = ""
    ) -> None:
        """The refusal's log line and metric (by tenant when the credential is known)."""
        fields: dict[str, Any] = {
            "event": "egress_denied",
            "reason": reason,
            "host": redact(host)[:253],
            "port": port,
            "source": peer,
        }
        if detail:
            fields["detail"] = redact(detail)[:300]
        dims: list[dict[str, str]] = [{}]
        if credential is not None:
            fields.update(
                tenant_id=credential.tenant_id,
                environment=credential.environment,
                session_id=credential.session_id,
            )
            dims.append({"tenant_id": credential.tenant_id})
        logger.warning("egress_denied", extra=fields)
        for dimension_set in dims:
            emit_metric(n.METRIC_EGRESS_DENIED, dimensions=dimension_set)

    async def record_cap_refused(self, credential: Credential, dimension: str) -> None:
        """`cap_refused` on the session's counters: what the call's answer names. Best effort: the
        refusal stands whether or not it is written."""
        try:
            await asyncio.to_thread(
                self.store.record_cap_refused,
                credential.session_id,
                dimension,
                int(self.clock()),
                items_expire(credential),
            )
        except Exception as exc:  # noqa: BLE001 — the refusal stands; the record is best effort
            logger.error("egress_cap_record_failed", extra={"cause": type(exc).__name__})

    # --- what is allowed -------------------------------------------------------------------------
    def allowed(self, state: ClientState, credential: Credential, host: str, port: int) -> ConnRecord:
        """One request forwarded: counted on the session and on its connection's record."""
        conn = self.connection(state, credential, host, port)
        conn.requests += 1
        conn.dirty = True
        self._delta(credential).allowed += 1
        return conn

    def add_bytes(self, state: ClientState, conn: ConnRecord | None, *, out: int = 0, into: int = 0) -> None:
        credential = state.credential
        if credential is None or (out <= 0 and into <= 0):
            return
        delta = self._delta(credential)
        delta.bytes_out += max(out, 0)
        delta.bytes_in += max(into, 0)
        tenant = credential.tenant_id
        self._unflushed_tenant_bytes[tenant] = self._unflushed_tenant_bytes.get(tenant, 0) + out + into
        if conn is not None:
            conn.bytes_out += max(out, 0)
            conn.bytes_in += max(into, 0)
            conn.dirty = True

    async def tenant_bytes_today(self, tenant: str) -> int:
        """The tenant's bytes of the UTC day: the stored counter (cached) plus what this proxy
        counted since its last flush. Raises StoreUnavailable."""
        windows = Windows.at(utc_now())
        used = await self.tenant_bytes.get(
            (tenant, windows.day), lambda: self.store.tenant_bytes(tenant, windows)
        )
        return used + self._unflushed_tenant_bytes.get(tenant, 0)

    def tenant_bytes_cached(self, tenant: str) -> int | None:
        """`tenant_bytes_today` from the cache only (None when it is not fresh): never waits."""
        used = self.tenant_bytes.peek((tenant, Windows.at(utc_now()).day))
        return None if used is None else used + self._unflushed_tenant_bytes.get(tenant, 0)

    # --- the connection log ----------------------------------------------------------------------
    def connection(self, state: ClientState, credential: Credential, host: str, port: int) -> ConnRecord:
        conn = state.conns.get((host, port))
        if conn is None:
            conn = ConnRecord(self._conn_sk(), host, port, int(self.clock()))
            state.conns[(host, port)] = conn
            if self._conn_items.get(credential.session_id, 0) >= MAX_CONNECTION_ITEMS:
                conn.dirty = False
                conn.sk = ""  # not logged: counted in the counters only
            else:
                self._conn_items[credential.session_id] = self._conn_items.get(credential.session_id, 0) + 1
        return conn

    def close_connections(self, state: ClientState) -> None:
        """The client connection closed: each of its connection records gets its closing time."""
        now = int(self.clock())
        for conn in state.conns.values():
            if conn.sk:
                conn.closed_at, conn.dirty = now, True
                if state.credential is not None:
                    self._delta(state.credential).connections[conn.sk] = conn.item()
                    conn.dirty = False

    def _conn_sk(self) -> str:
        self._seq += 1
        return f"{n.EGRESS_CONNECTION_PREFIX}{int(self.clock() * 1000):013d}#{self._seq:06d}"

    def _delta(self, credential: Credential) -> SessionDelta:
        delta = self._pending.get(credential.session_id)
        if delta is None:
            delta = SessionDelta(credential.tenant_id, items_expire(credential))
            self._pending[credential.session_id] = delta
        return delta

    # --- flushing ---------------------------------------------------------------------------------
    def collect(self, states: list[ClientState]) -> dict[str, SessionDelta]:
        """Take what was counted since the last flush (connection items that changed included)."""
        for state in states:
            credential = state.credential
            if credential is None:
                continue
            for conn in state.conns.values():
                if conn.dirty and conn.sk:
                    self._delta(credential).connections[conn.sk] = conn.item()
                    conn.dirty = False
        pending = {k: v for k, v in self._pending.items() if not v.empty}
        self._pending = {}
        return pending

    async def flush(self, states: list[ClientState]) -> None:
        async with self._flush_lock:
            pending = self.collect(states)
            if not pending:
                return
            moved = dict(self._unflushed_tenant_bytes)
            try:
                await asyncio.to_thread(self.store.flush, pending, Windows.at(utc_now()))
            except Exception as exc:  # noqa: BLE001 — kept for the next flush
                logger.error("egress_flush_failed", extra={"cause": type(exc).__name__})
                for session_id, delta in pending.items():
                    self._merge_back(session_id, delta)
                return
            for tenant, count in moved.items():
                left = self._unflushed_tenant_bytes.get(tenant, 0) - count
                if left > 0:
                    self._unflushed_tenant_bytes[tenant] = left
                else:
                    self._unflushed_tenant_bytes.pop(tenant, None)
                self.tenant_bytes.drop_where(functools.partial(_of_tenant, tenant))

    def _merge_back(self, session_id: str, delta: SessionDelta) -> None:
        current = self._pending.get(session_id)
        if current is None:
            self._pending[session_id] = delta
            return
        current.allowed += delta.allowed
        current.denied += delta.denied
        current.bytes_out += delta.bytes_out
        current.bytes_in += delta.bytes_in
        for sk, item in delta.connections.items():
            current.connections.setdefault(sk, item)

    async def flush_forever(self, states: Callable[[], list[ClientState]]) -> None:
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            await self.flush(states())


def items_expire(credential: Credential) -> int:
    """When a session's items expire: after its credential, so the last call's row still reads them."""
    return credential.expires_at + ITEMS_OUTLIVE_CREDENTIAL_SECONDS


def _of_tenant(tenant: str, key: Any) -> bool:
    return isinstance(key, tuple) and key[0] == tenant
