"""The circuit-breaker decision (SPEC §5.1): admit iff both windows are below their caps.

Order matters: caps first (unknown cap -> fail closed), then the kill switch (cap 0 refuses
before any DynamoDB call, so no counter item is ever created), then one atomic transaction.
Every refusal — cap reached, kill switch or fail closed — leaves one pure-JSON log line and
the `SandboxCapExceeded` metric per dimension set of `naming.METRIC_DIMENSIONS`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from sandbox_common import naming
from sandbox_common.models import QuotaAdmitted, QuotaRefused, QuotaRequest, QuotaTurnRefused
from sandbox_common.observability import emit_metric, logger
from sandbox_common.settings import quota_settings
from sandbox_common.windows import Windows, iso_z

from . import caps as caps_module
from . import counters


@dataclass(frozen=True)
class Admitted:
    tenant_daily_count: int | None
    agent_hourly_count: int | None
    already_counted: bool = False
    retries: int = 0
    released: bool = False

    def to_response(self) -> dict[str, object]:
        return QuotaAdmitted(
            tenant_daily_count=self.tenant_daily_count,
            agent_hourly_count=self.agent_hourly_count,
            already_counted=self.already_counted,
            retries=self.retries,
            released=self.released,
        ).model_dump(
            exclude={k for k in ("already_counted", "retries", "released") if not getattr(self, k)}
        )  # only when set


@dataclass(frozen=True)
class TurnRefusal:
    turn_exists: bool

    def to_response(self) -> dict[str, object]:
        return QuotaTurnRefused(turn_exists=self.turn_exists).model_dump()


@dataclass(frozen=True)
class Refused:
    dimension: str
    resets_at: datetime
    tenant_daily_cap: int | None
    agent_hourly_cap: int | None

    def to_response(self) -> dict[str, object]:
        return QuotaRefused(
            dimension=self.dimension,  # type: ignore[arg-type]
            resets_at=iso_z(self.resets_at),
            tenant_daily_cap=self.tenant_daily_cap,
            agent_hourly_cap=self.agent_hourly_cap,
        ).model_dump()


QuotaDecision = Admitted | Refused | TurnRefusal


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
            int(time.time()) + naming.QUOTA_MARKER_TTL_SECONDS,
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
            settings.tenant_daily_table,
            counters.marker_key(request.tenant_id, request.call_id),
            tenant_daily_table=settings.tenant_daily_table,
            agent_hourly_table=settings.agent_hourly_table,
        )
    except counters.CounterStoreError as exc:
        return fail_closed(request, windows, reason=f"release: {exc.code}", caps=None)
    logger.info("quota count released", extra={"tenant_id": request.tenant_id, "released": done})
    return Admitted(tenant_daily_count=None, agent_hourly_count=None, released=done)


def check_and_increment(request: QuotaRequest, windows: Windows) -> QuotaDecision:
    """Admit the call (both counters +1) or refuse it (nothing counted).

    `windows` is built from the one clock read of this call: keys and resets_at agree.
    """
    try:
        caps = caps_module.cap_reader().caps_for(request.tenant_id)
    except caps_module.CapsUnavailable as exc:
        return fail_closed(request, windows, reason=exc.reason, caps=None)

    keys = counters.CounterKeys.for_call(request.tenant_id, request.agent_id, windows)
    if caps.tenant_daily == 0:  # kill switch: refused before any DynamoDB call, nothing created
        return _refuse(request, windows, naming.DIM_TENANT_DAILY, caps, counts={}, kill_switch=True)
    if caps.agent_hourly == 0:
        # Also at the daily cap? Then both are at cap and tenant_daily is the answer (§5.1), with
        # the later resets_at. One read, which creates nothing; if it fails, the hourly answer stands.
        counts = counters.read_counts(keys)
        daily = counts.get(naming.DIM_TENANT_DAILY)
        dimension = (
            naming.DIM_TENANT_DAILY
            if daily is not None and daily >= caps.tenant_daily
            else (naming.DIM_AGENT_HOURLY)
        )
        return _refuse(request, windows, dimension, caps, counts=counts, kill_switch=True)

    try:
        guard, marker = _guard_and_marker(request)
        retries = counters.increment_both(keys, caps, guard=guard, marker=marker)
    except counters.TurnRefused as exc:  # nothing counted; dispatch decides what the agent hears
        logger.info(
            "quota turn guard refused", extra={"tenant_id": request.tenant_id, "turn_exists": exc.exists}
        )
        return TurnRefusal(turn_exists=exc.exists)
    except counters.AlreadyCounted:  # a retry / duplicate of a counted call_id: proceed, count nothing
        return Admitted(tenant_daily_count=None, agent_hourly_count=None, already_counted=True)
    except counters.CapReached as exc:
        return _refuse(request, windows, exc.dimension, caps, counts=exc.counts)
    except counters.CounterStoreError as exc:
        return fail_closed(request, windows, reason=f"counter store: {exc.code}", caps=caps)

    if not request.counts:  # the caller does not need them: no read-back (issue 9)
        return Admitted(tenant_daily_count=None, agent_hourly_count=None, retries=retries)
    counts = counters.read_counts(keys)
    if None in counts.values():
        logger.warning("admitted; counter read-back incomplete", extra={"tenant_id": request.tenant_id})
    return Admitted(
        tenant_daily_count=counts[naming.DIM_TENANT_DAILY],
        agent_hourly_count=counts[naming.DIM_AGENT_HOURLY],
        retries=retries,
    )


def _resets_at(windows: Windows, dimension: str) -> datetime:
    return windows.day_resets_at if dimension == naming.DIM_TENANT_DAILY else windows.hour_resets_at


def _refuse(
    request: QuotaRequest,
    windows: Windows,
    dimension: str,
    caps: caps_module.Caps,
    *,
    counts: dict[str, int | None],
    kill_switch: bool = False,
) -> Refused:
    decision = Refused(dimension, _resets_at(windows, dimension), caps.tenant_daily, caps.agent_hourly)
    _record_refusal(request, decision, counts=counts, kill_switch=kill_switch)
    return decision


def fail_closed(
    request: QuotaRequest | None,
    windows: Windows,
    *,
    reason: str,
    caps: caps_module.Caps | None,
    exc_info: bool = False,
) -> Refused:
    """Any doubt means no: dimension unknown, retry in 60 s (§5.1)."""
    decision = Refused(
        naming.DIM_UNKNOWN,
        windows.fail_closed_resets_at(),
        caps.tenant_daily if caps else None,
        caps.agent_hourly if caps else None,
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
        "caps": {
            naming.DIM_TENANT_DAILY: decision.tenant_daily_cap,
            naming.DIM_AGENT_HOURLY: decision.agent_hourly_cap,
        },
        "counts": {dim: counts.get(dim) for dim in naming.CAP_DIMENSIONS},
        "kill_switch": kill_switch,
    }
    if reason is not None:
        fields["fail_closed_reason"] = reason
    logger.warning("sandbox cap exceeded", extra=fields, exc_info=exc_info)
    emit_metric(naming.METRIC_CAP_EXCEEDED, dimensions={"dimension": decision.dimension})
    if request is not None:
        emit_metric(naming.METRIC_CAP_EXCEEDED, dimensions={"tenant_id": request.tenant_id})
