"""The quota stage: the call's count, decided where every refusal that counts nothing has passed
(the turn, the pre-flight, the inputs, the session's capacity). From here on the count stands
(`flow`): whatever the call does next, it was counted once."""

from __future__ import annotations

from sandbox_common import dimensions, messages
from sandbox_common.errors import SandboxCapExceeded, SandboxProvisioning

from dispatch.call import Answer, Call, Next
from dispatch.quota.flow import decide


def stage(call: Call, then: Next) -> Answer:
    parts, req = call.parts, call.request
    assert call.ahead is not None
    call.decided = True  # the call reached its quota stage: the count stands
    decision = decide(parts, req, call.ahead.quota, call.retries)
    if decision.tenant_disabled:
        # the count's transaction read the tenant's policy: this container's pre-flight cache is
        # older than it, and is read again by the next call
        parts.preflight.forget(req.tenant_id)
        raise SandboxProvisioning(
            messages.TENANT_DISABLED, reason="tenant_disabled", failure_reason="tenant_disabled"
        )
    if not decision.allowed:
        raise SandboxCapExceeded(
            messages.cap_exceeded(str(decision.dimension), str(decision.resets_at)),
            dimension=decision.dimension,
            resets_at=decision.resets_at,
            failure_reason=f"cap_exceeded:{decision.dimension}",
        )
    # the budget is reported on the tenant's calls today, never refused; the row carries the price
    call.price = parts.accounting.price_per_call()
    parts.accounting.admitted(req.tenant_id, decision.counts.get(dimensions.TENANT_DAILY.name))
    return then(call)
