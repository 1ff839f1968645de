"""The pre-flight stage: the template may run now (ready, not disabled, requested), its inputs are
the tenant's to read; refused here, a call counts nothing and runs nothing (its row says why)."""

from __future__ import annotations

from sandbox_common import messages
from sandbox_common.errors import SandboxProvisioning
from sandbox_common.files import check_s3_inputs
from sandbox_runtime.preflight import Preflight, PreflightUnavailable

from dispatch.call import Answer, Call, Next
from dispatch.preflight.ahead import Ready, read_ahead


def stage(call: Call, then: Next) -> Answer:
    ready = joined(call)
    pf = ready.preflight
    call.outcome.environment = pf.environment
    refuse_unless_ready(pf)
    check_s3_inputs(call.request.files, pf.data_read)  # a bad s3_uri: invalid, before anything counts
    if not call.request.background:  # a failed call's answer lists no files (a submit's has none)
        call.outcome.response_extra["files"] = []
    call.preflight, call.runner, call.uses_tools = pf, ready.runner, ready.uses_tools
    return then(call)


def joined(call: Call) -> Ready:
    """The read sent ahead; when it failed, read again (from the cache it may have warmed, or the
    tables): its own failure is not the call's until the second read fails too."""
    assert call.ahead is not None
    try:
        return call.ahead.ready.result()
    except Exception:  # noqa: BLE001 — the second read answers for the call
        try:
            return read_ahead(call.parts, call.request)
        except PreflightUnavailable as exc:
            raise SandboxProvisioning(
                messages.PREFLIGHT_UNAVAILABLE,
                reason="preflight_unavailable",
                failure_reason=f"preflight_unavailable:{exc}",
            ) from None


def refuse_unless_ready(pf: Preflight) -> None:
    """Refuse a template that may not run now (disabled, not requested, not ready)."""
    if pf.status == "ready":
        return
    if pf.status == "disabled":
        raise SandboxProvisioning(
            messages.TENANT_DISABLED, reason="tenant_disabled", failure_reason="tenant_disabled"
        )
    if pf.status == "not_requested":
        raise SandboxProvisioning(
            messages.NOT_REQUESTED, reason="sandbox_not_requested", failure_reason="sandbox_not_requested"
        )
    raise SandboxProvisioning(
        messages.NOT_READY, reason="interpreter_not_ready", failure_reason="interpreter_not_ready"
    )
