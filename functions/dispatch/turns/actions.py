"""The turn actions: begin_turn (§4.1, §15, §16.1) and end_turn (§4.5, §15, §17)."""

from __future__ import annotations

from typing import Any

from sandbox_common import messages
from sandbox_common.errors import SandboxError
from sandbox_common.models import BeginTurnRequest, EndTurnRequest
from sandbox_common.observability import logger
from sandbox_common.outcome import internal_failure, public
from sandbox_common.tool_spec import begin_turn_tools
from sandbox_runtime.preflight import PreflightUnavailable

from dispatch.steps import Steps
from dispatch.turns import flow
from dispatch.turns.store import TurnStoreUnavailable


def begin_turn(steps: Steps, req: BeginTurnRequest, context: Any) -> dict[str, Any]:
    try:
        turn = flow.refuse_if_ended(steps.claim(req))
        pf = steps.parts.preflight.check(req.tenant_id, req.template_id)
    except (TurnStoreUnavailable, PreflightUnavailable) as exc:
        logger.error("begin_turn_unavailable", extra={"cause": str(exc)})
        internal_failure(f"preflight_unavailable:{exc}")
        return {
            "ok": False,
            "error": "SandboxProvisioning",
            "error_message": messages.PREFLIGHT_UNAVAILABLE,
            "reason": "preflight_unavailable",
        }
    if pf.status == "ready":
        steps.offer_warm(turn, pf)  # §16.1: the first call's warm claim becomes one write
    sandbox: dict[str, Any] = {"status": pf.status}
    if pf.status in ("ready", "provisioning"):
        # §21: every tool of the surface; §15: the template's tools the caller can answer
        sandbox.update(begin_turn_tools(pf.tools, req.client_tools, steps.settings))
        sandbox["environment"] = pf.environment
    elif pf.status == "disabled":
        sandbox.update(
            error="SandboxProvisioning", reason="tenant_disabled", error_message=messages.TENANT_DISABLED
        )
    return {"ok": True, "sandbox": sandbox}


def end_turn(steps: Steps, req: EndTurnRequest, context: Any) -> dict[str, Any]:
    try:
        turn = steps.turns.get(req.tenant_id, req.turn_id)
    except TurnStoreUnavailable as exc:
        return _internal(f"turn_store_unavailable:{exc}")
    if turn is None:
        return {"ok": True, "stopped": False}
    steps.check_turn(turn, req.turn_token, tenant_id=req.tenant_id, agent_id=None, turn_id=req.turn_id)
    try:
        steps.turns.end(
            req.tenant_id, req.turn_id
        )  # first: a session racing this end_turn can no longer activate
    except TurnStoreUnavailable as exc:
        return _internal(f"turn_store_unavailable:{exc}")
    pending = steps.pending_jobs(req.tenant_id, req.turn_id)
    # §15: paused tool calls end as timeouts, each with its audit row
    steps.expire_paused(req.tenant_id, req.turn_id, keep_session=bool(pending))
    if pending:  # §17: the session outlives end_turn until its last job ends (job_end stops it)
        return {"ok": True, "stopped": False, "pending_jobs": pending}
    if not turn.live_session:
        return {"ok": True, "stopped": False}
    try:
        return {"ok": True, "stopped": steps.stop_turn_session(turn)}
    except PreflightUnavailable as exc:
        return _internal(f"preflight_unavailable:{exc}")


def _internal(reason: str) -> dict[str, Any]:
    """end_turn's answer when a dependency failed (counted; the reason stays in logs)."""
    internal_failure(reason)
    return public(SandboxError(messages.INTERNAL, failure_reason=reason))
