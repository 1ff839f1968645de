"""The kill switch on admitted work (docs/circuit-breakers.md): does a tenant's work stop now?

A tenant is killed when a call cap in force for it is 0 (`tenant_daily` or `agent_hourly`, its
override or the stage-wide value: `sandbox_common.cap_values.CallCapValues`) or when it is
disabled (`PreflightReader.tenant_enabled`: unknown, not on the standard tier, or
`sandbox_enabled` false). Both reads are the kill switch's own (`for_stage`), cached at most
`limits.KILL_SWITCH_CACHE_SECONDS` (30 s, or the stage's cache TTL when lower), so a change is seen
well within 60 s by every container that asks.

The quota Lambda refuses new calls; this is what the run time asks of work already admitted: a
`resume` of a paused tool-calling call (dispatch), a running background job (get_job and the
reaper's job sweep) and a tenant's warm pool (the reaper's refill).

A cap or a policy that cannot be read is NOT a kill: admitted work is never ended on a guess (new
calls are still refused by the quota Lambda, which fails closed). The doubt is logged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandbox_common import dimensions, limits, messages
from sandbox_common import naming as n
from sandbox_common.cap_values import CallCapValues, CapsUnavailable
from sandbox_common.errors import SandboxCapExceeded, SandboxFailure, SandboxProvisioning
from sandbox_common.observability import logger
from sandbox_common.windows import Windows, iso_z, utc_now

from .preflight import PreflightReader, PreflightUnavailable

TENANT_DISABLED = "tenant_disabled"


@dataclass(frozen=True)
class Kill:
    """Why a tenant's admitted work stops: `dimension` is the calls cap at 0, or None when the
    tenant is disabled."""

    tenant_id: str
    dimension: str | None = None

    @property
    def why(self) -> str:
        """`tenant_daily`, `agent_hourly`, ... or `tenant_disabled`."""
        return self.dimension or TENANT_DISABLED

    @property
    def failure_reason(self) -> str:
        """The audit row's failure_reason of work it ended: `kill_switch:<why>`."""
        return f"{n.FIELD_KILL_SWITCH}:{self.why}"

    def failure(self) -> SandboxFailure:
        """The refusal the agent reads — the one a new call gets: SandboxCapExceeded naming the
        dimension and its reset, or SandboxProvisioning with reason `tenant_disabled`."""
        if self.dimension is None:
            return SandboxProvisioning(
                messages.TENANT_DISABLED, reason=TENANT_DISABLED, failure_reason=self.failure_reason
            )
        found = dimensions.get(self.dimension)
        assert found is not None and found.kind is dimensions.Kind.CALLS
        resets_at = iso_z(found.resets_at(Windows.at(utc_now())))
        return SandboxCapExceeded(
            messages.cap_exceeded(self.dimension, resets_at),
            dimension=self.dimension,
            resets_at=resets_at,
            failure_reason=self.failure_reason,
        )


class KillSwitch:
    def __init__(self, *, caps: CallCapValues, preflight: PreflightReader) -> None:
        self.caps = caps
        self.preflight = preflight

    @classmethod
    def for_stage(
        cls, *, stage: str, tenants_table: str, cache_ttl_seconds: int, ssm: Any, ddb: Any
    ) -> KillSwitch:
        """A container's kill switch: its own readers, cached ≤ KILL_SWITCH_CACHE_SECONDS."""
        ttl = min(cache_ttl_seconds, limits.KILL_SWITCH_CACHE_SECONDS)
        return cls(
            caps=CallCapValues(stage=stage, ssm=ssm, ttl_seconds=ttl),
            preflight=PreflightReader(
                stage=stage, tenants_table=tenants_table, ttl_seconds=ttl, ssm=ssm, ddb=ddb
            ),
        )

    def check(self, tenant_id: str, *, fresh: bool = False) -> Kill | None:
        """The Kill in force for the tenant, or None (also when it cannot be known: logged).
        `fresh`: read the caps and the policy now, not from the cache (a change was announced)."""
        if fresh:
            self.caps.forget(tenant_id)
            self.preflight.forget(tenant_id)
        try:
            values = self.caps.values_for(tenant_id)
        except CapsUnavailable as exc:
            logger.warning("kill_switch_caps_unknown", extra={"tenant_id": tenant_id, "cause": exc.reason})
        else:
            zero = next((d.name for d in dimensions.calls() if values.get(d.name) == 0), None)
            if zero is not None:
                return Kill(tenant_id, zero)
        try:
            if not self.preflight.tenant_enabled(tenant_id):
                return Kill(tenant_id)
        except PreflightUnavailable as exc:
            logger.warning("kill_switch_policy_unknown", extra={"tenant_id": tenant_id, "cause": str(exc)})
        return None
