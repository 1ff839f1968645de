"""The caps in force of one kind's dimensions (`sandbox_common.dimensions`), read from SSM with the
caps' rules: a per-tenant override `/…/caps/tenants/{t}/{dim}` wins over `/…/caps/{dim}` for a
dimension keyed by tenant; a stage-wide one has only `/…/caps/{dim}`. Values are non-negative
integers (digits only); 0 is the kill switch. Cached ≤ TTL per tenant; ONE GetParameters call
reads every path of a tenant.

Fail closed: an unreadable store or a missing/malformed global with no last good value raises
`UNAVAILABLE` (the subclass's exception). A malformed value falls back to its path's last good
value. The session caps (`sandbox_common.sessions.caps`) and the kill switch's view of the call
caps (`sandbox_runtime.kill_switch`) read through this one reader.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar

from . import dimensions
from . import naming as n
from .observability import emit_metric, logger

_CAP_VALUE_RE = re.compile(r"[0-9]{1,38}")  # as the call caps: no sign, no space, no non-ASCII digit


class CapsUnavailable(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def parse_cap(raw: Any) -> int | None:
    return int(raw) if isinstance(raw, str) and _CAP_VALUE_RE.fullmatch(raw) else None


class CapValues:
    """`values_for(tenant_id)`: {dimension name: cap} of every dimension of `KIND`."""

    KIND: ClassVar[dimensions.Kind]
    UNAVAILABLE: ClassVar[type[CapsUnavailable]] = CapsUnavailable

    def __init__(
        self, *, stage: str, ssm: Any, ttl_seconds: int = 60, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.stage = stage
        self.ssm = ssm
        self.ttl = ttl_seconds
        self.clock = clock
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, dict[str, int]]] = {}
        self._last_good: dict[str, int | None] = {}  # path -> value (None = known absent override)

    def values_for(self, tenant_id: str) -> dict[str, int]:
        now = self.clock()
        with self._lock:
            cached = self._cache.get(tenant_id)
            if cached and cached[0] > now:
                return dict(cached[1])
        scoped = dimensions.of_kind(self.KIND)
        overrides = {d.name: d.parameter(self.stage, tenant_id) for d in scoped if d.per_tenant}
        globals_ = {d.name: d.parameter(self.stage) for d in scoped}
        try:
            out = self.ssm.get_parameters(Names=[*overrides.values(), *globals_.values()])
            values: dict[str, Any] = {p["Name"]: p.get("Value") for p in out.get("Parameters", [])}
        except Exception as exc:  # noqa: BLE001 — any doubt means no
            raise self.UNAVAILABLE(f"ssm:{type(exc).__name__}") from None
        caps: dict[str, int] = {}
        for d in scoped:
            cap = self._value(overrides[d.name], values, required=False) if d.name in overrides else None
            if cap is None:
                cap = self._value(globals_[d.name], values, required=True)
            if cap is None:  # required values never come back None
                raise self.UNAVAILABLE("cap missing")
            caps[d.name] = cap
        with self._lock:
            self._cache[tenant_id] = (now + self.ttl, caps)
        return dict(caps)

    def forget(self, tenant_id: str) -> None:
        """The tenant's caps are read from SSM at the next `values_for`, whatever their age."""
        with self._lock:
            self._cache.pop(tenant_id, None)

    def _value(self, path: str, values: dict[str, Any], *, required: bool) -> int | None:
        if path not in values:
            if not required:
                self._last_good[path] = None
                return None
            return self._fallback(path, "missing")
        parsed = parse_cap(values[path])
        if parsed is None:
            logger.error(
                f"ignoring {self.KIND} cap parameter: not a non-negative integer", extra={"parameter": path}
            )
            emit_metric(n.METRIC_CAP_PARAMETER_INVALID)
            return self._fallback(path, "malformed") if required or path in self._last_good else None
        self._last_good[path] = parsed
        return parsed

    def _fallback(self, path: str, reason: str) -> int | None:
        known = self._last_good.get(path)
        if known is None:
            raise self.UNAVAILABLE(f"{reason}:{path}")
        logger.error(f"using last good {self.KIND} cap", extra={"parameter": path, "reason": reason})
        return known


class CallCapValues(CapValues):
    """The call caps (tenant_daily, agent_hourly, ...) in force for a tenant. Only the quota Lambda
    counts; this view serves whoever must know whether a cap is 0 (the kill switch)."""

    KIND = dimensions.Kind.CALLS


class ByteCapValues(CapValues):
    """The byte caps (egress_daily_bytes) in force for a tenant: the egress proxy counts them and
    refuses a tenant's new connections at its cap."""

    KIND = dimensions.Kind.BYTES
