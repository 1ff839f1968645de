"""The circuit-breaker decision: admit iff every calls dimension's window is below its
cap (`sandbox_common.dimensions.calls()`).

Order matters: caps first (unknown cap -> fail closed), then the kill switch (cap 0 refuses
before any DynamoDB call, so no counter item is ever created), then one atomic transaction.
Every refusal — cap reached, kill switch or fail closed — leaves one pure-JSON log line and
the `SandboxCapExceeded` metric per dimension set of `naming.METRIC_DIMENSIONS`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sandbox_common import dimensions, limits, naming
from sandbox_common.observability import emit_metric, logger
from sandbox_common.quota_contract import (
    QuotaAdmitted,
    QuotaRefused,
    QuotaRequest,
    QuotaTenantRefused,
    QuotaTurnRefused,
)
from sandbox_common.settings import quota_settings
from sandbox_common.windows import Windows, iso_z

from . import caps as caps_module
from . import counters


class Admitted:
    """Admitted, with the counts read back (one per calls dimension, in dimension order; None
    when not read)."""

    def __init__(
        self, *counts: int | None, already_counted: bool = False, retries: int = 0, released: bool = False
    ) -> None:
        self.counts = _by_dimension(counts)
        self.already_counted, self.retries, self.released = already_counted, retries, released

    @classmethod
    def uncounted(cls, **flags: Any) -> Admitted:
        return cls(*(None for _ in dimensions.calls()), **flags)

    def to_response(self) -> dict[str, object]:
        flags = ("already_counted", "retries", "released")
        unset = {k for k in flags if not getattr(self, k)}  # the flags only when set
        return QuotaAdmitted.of(self.counts, **{k: getattr(self, k) for k in flags}).model_dump(exclude=unset)


@dataclass(frozen=True)
class TurnRefusal:
    turn_exists: bool

    def to_response(self) -> dict[str, object]:
        return QuotaTurnRefused(turn_exists=self.turn_exists).model_dump()


@dataclass(frozen=True)
class TenantRefusal:
    def to_response(self) -> dict[str, object]:
        return QuotaTenantRefused().model_dump()


class Refused:
    """Refused on `dimension` (or `unknown`), with the caps in force (in dimension order; None
    when not known)."""

    def __init__(self, dimension: str, resets_at: datetime, *caps: int | None) -> None:
        self.dimension, self.resets_at = dimension, resets_at
        self.caps = _by_dimension(caps)

    def to_response(self) -> dict[str, object]:
        return QuotaRefused.of(self.dimension, iso_z(self.resets_at), self.caps).model_dump()


def _by_dimension(values: tuple[int | None, ...]) -> dict[str, int | None]:
    names = [d.name for d in dimensions.calls()]
    if len(values) != len(names):
        raise ValueError(f"one value per calls dimension ({', '.join(names)})")
    return dict(zip(names, values, strict=True))


QuotaDecision = Admitted | Refused | TurnRefusal | TenantRefusal

# How long a tenant's breaker version is kept (DynamoDB TTL): far beyond any cache's lifetime,
# after which no container can still hold caps older than it.
BREAKER_TTL_SECONDS = 3600
# The highest breaker version this container published per tenant: a refusal on caps read at the
# same time publishes once, not once per refused call.
_published: dict[str, int] = {}
_published_lock = threading.Lock()


def _guard_and_marker(request: QuotaRequest) -> tuple[counters.TurnGuard | None, counters.Marker | None]:
    settings = quota_settings()
    guard = marker = None
    if request.turn is not None:
        if not settings.turns_table:  # a guard this Lambda cannot check: never count unguarded
            raise counters.CounterStoreError("turns_table_not_configured")
        guard = counters.TurnGuard(
            settings.turns_table,
            request.tenant_id,
            request.agent_id,
            request.turn.turn_id,
            request.turn.token_sha256,
        )
    if request.call_id is not None:
        marker = counters.Marker(
            settings.tenant_daily_table,
            counters.marker_key(request.tenant_id, request.call_id),
            int(time.time()) + limits.QUOTA_MARKER_TTL_SECONDS,
        )
    return guard, marker


def release(request: QuotaRequest, windows: Windows) -> QuotaDecision:
    """Undo the count of `request.call_id` (dispatch counted it speculatively, then refused the
    call before it ran). Any doubt answers a fail-closed refusal: dispatch logs it (an over-count
    by one, the safe direction for a circuit breaker)."""
    settings = quota_settings()
    if request.call_id is None:
        return fail_closed(request, windows, reason="release without call_id", caps=None)
    try:
        done = counters.release(
            settings.tenant_daily_table, counters.marker_key(request.tenant_id, request.call_id)
        )
    except counters.CounterStoreError as exc:
        return fail_closed(request, windows, reason=f"release: {exc.code}", caps=None)
    logger.info("quota count released", extra={"tenant_id": request.tenant_id, "released": done})
    return Admitted.uncounted(released=done)


def check_and_increment(request: QuotaRequest, windows: Windows, *, fresh: bool = False) -> QuotaDecision:
    """Admit the call (both counters +1) or refuse it (nothing counted).

    `windows` is built from the one clock read of this call: keys and resets_at agree. `fresh`:
    the caps were just read again because another container refused this tenant on newer ones.
    """
    reader = caps_module.cap_reader()
    try:
        caps = reader.caps_for(request.tenant_id)
    except caps_module.CapsUnavailable as exc:
        return fail_closed(request, windows, reason=exc.reason, caps=None)

    keys = counters.CounterKeys.for_call(request.tenant_id, request.agent_id, windows)
    killed = _kill_switch(caps, keys)
    if killed is not None:
        return _refuse(request, windows, killed[0], caps, counts=killed[1], kill_switch=True)

    try:
        guard, marker = _guard_and_marker(request)
        retries = counters.increment_all(
            keys,
            caps,
            guard=guard,
            marker=marker,
            policy=_policy_check(request),
            breaker=counters.BreakerCheck(
                quota_settings().tenant_daily_table, request.tenant_id, caps.read_at_ms
            ),
        )
    except counters.TurnRefused as exc:  # nothing counted; dispatch decides what the agent hears
        logger.info(
            "quota turn guard refused", extra={"tenant_id": request.tenant_id, "turn_exists": exc.exists}
        )
        return TurnRefusal(turn_exists=exc.exists)
    except counters.AlreadyCounted:  # a retry / duplicate of a counted call_id: proceed, count nothing
        return Admitted.uncounted(already_counted=True)
    except counters.TenantDisabled:
        logger.info("quota refused: tenant disabled by its policy", extra={"tenant_id": request.tenant_id})
        return TenantRefusal()
    except counters.BreakerStale:
        # Another container refused this tenant on caps read after ours: read them again and
        # decide on those (once; caps still older than that refusal cannot be trusted to admit).
        if fresh:
            return fail_closed(request, windows, reason="caps older than the breaker version", caps=caps)
        logger.info("quota caps stale: read again", extra={"tenant_id": request.tenant_id})
        reader.refresh(request.tenant_id)
        return check_and_increment(request, windows, fresh=True)
    except counters.CapReached as exc:
        return _refuse(request, windows, exc.dimension, caps, counts=exc.counts)
    except counters.CounterStoreError as exc:
        return fail_closed(request, windows, reason=f"counter store: {exc.code}", caps=caps)

    if not request.counts:  # the caller does not need them: no read-back
        return Admitted.uncounted(retries=retries)
    counts = counters.read_counts(keys)
    if None in counts.values():
        logger.warning("admitted; counter read-back incomplete", extra={"tenant_id": request.tenant_id})
    return Admitted(*(counts[d.name] for d in dimensions.calls()), retries=retries)


def _policy_check(request: QuotaRequest) -> counters.PolicyCheck | None:
    table = quota_settings().tenants_table
    return counters.PolicyCheck(table, request.tenant_id) if table else None


def _publish(request: QuotaRequest, caps: caps_module.Caps) -> None:
    """A refusal on these caps: raise the tenant's breaker version to when they were read, so a
    container holding older caps reads them again before it admits this tenant. Best effort: a
    failure is logged and the refusal stands."""
    read_at = caps.read_at_ms
    with _published_lock:
        if not read_at or _published.get(request.tenant_id, 0) >= read_at:
            return
    try:
        counters.publish_breaker(
            quota_settings().tenant_daily_table, request.tenant_id, read_at, ttl_seconds=BREAKER_TTL_SECONDS
        )
    except counters.CounterStoreError as exc:
        logger.warning(
            "breaker version not published", extra={"tenant_id": request.tenant_id, "cause": exc.code}
        )
        return
    with _published_lock:
        _published[request.tenant_id] = max(read_at, _published.get(request.tenant_id, 0))


def _kill_switch(
    caps: caps_module.Caps, keys: counters.CounterKeys
) -> tuple[str, dict[str, int | None]] | None:
    """The dimension refused before any write when a cap is 0 (the kill switch: no counter item is
    ever created), with the counts read to decide it; None when no cap is 0. A dimension before the
    first 0 cap that is at its cap already is the answer instead (the first in dimension
    order), so those are read — one read, which creates nothing; if it fails, the 0 cap stands."""
    names = [d.name for d in dimensions.calls()]
    zero = next((i for i, name in enumerate(names) if caps.for_dimension(name) == 0), None)
    if zero is None:
        return None
    if zero == 0:
        return names[0], {}
    counts = counters.read_counts(keys)
    for name in names[:zero]:
        count = counts.get(name)
        if count is not None and count >= caps.for_dimension(name):
            return name, counts
    return names[zero], counts


def _resets_at(windows: Windows, dimension: str) -> datetime:
    found = dimensions.get(dimension)
    assert found is not None and found.kind is dimensions.Kind.CALLS  # only counted dimensions refuse here
    return found.resets_at(windows)


def _refuse(
    request: QuotaRequest,
    windows: Windows,
    dimension: str,
    caps: caps_module.Caps,
    *,
    counts: dict[str, int | None],
    kill_switch: bool = False,
) -> Refused:
    decision = Refused(dimension, _resets_at(windows, dimension), *caps.as_dict().values())
    _record_refusal(request, decision, counts=counts, kill_switch=kill_switch)
    _publish(request, caps)
    return decision


def fail_closed(
    request: QuotaRequest | None,
    windows: Windows,
    *,
    reason: str,
    caps: caps_module.Caps | None,
    exc_info: bool = False,
) -> Refused:
    """Any doubt means no: dimension unknown, retry in 60 s."""
    known = caps.as_dict() if caps else {}
    decision = Refused(
        dimensions.UNKNOWN,
        windows.fail_closed_resets_at(),
        *(known.get(d.name) for d in dimensions.calls()),
    )
    emit_metric(naming.METRIC_QUOTA_FAIL_CLOSED)
    _record_refusal(request, decision, counts={}, reason=reason, exc_info=exc_info)
    return decision


def _record_refusal(
    request: QuotaRequest | None,
    decision: Refused,
    *,
    counts: dict[str, int | None],
    kill_switch: bool = False,
    reason: str | None = None,
    exc_info: bool = False,
) -> None:
    # ONE log line per refusal, pure JSON (the runbook's Logs Insights queries parse it).
    fields: dict[str, object] = {
        "event": "sandbox_cap_exceeded",
        "tenant_id": request.tenant_id if request else None,
        "agent_id": request.agent_id if request else None,
        "dimension": decision.dimension,
        "resets_at": iso_z(decision.resets_at),
        "caps": decision.caps,
        "counts": {d.name: counts.get(d.name) for d in dimensions.calls()},
        naming.FIELD_KILL_SWITCH: kill_switch,
    }
    if reason is not None:
        fields["fail_closed_reason"] = reason
    logger.warning("sandbox cap exceeded", extra=fields, exc_info=exc_info)
    emit_metric(naming.METRIC_CAP_EXCEEDED, dimensions={"dimension": decision.dimension})
    if request is not None:
        emit_metric(naming.METRIC_CAP_EXCEEDED, dimensions={"tenant_id": request.tenant_id})
