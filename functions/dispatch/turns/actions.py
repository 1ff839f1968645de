"""begin_turn: the caller's turn, claimed and bound to its token; the template's pre-flight; the
tools the turn may call; and a warm session of the turn's pool noted on the turn, so that its
first call claims it with one write. (end_turn is a line of its own: `dispatch.line.END_TURN`.)"""

from __future__ import annotations

from typing import Any

from sandbox_common import messages
from sandbox_common.models import BeginTurnRequest
from sandbox_common.observability import logger
from sandbox_common.outcome import internal_failure
from sandbox_common.tool_spec import begin_turn_tools
from sandbox_runtime.preflight import PreflightUnavailable

from dispatch import parts
from dispatch.turns.flow import claim_for, refuse_if_ended
from dispatch.turns.store import TurnStoreUnavailable


def begin_turn(req: BeginTurnRequest, context: object) -> dict[str, Any]:
    built = parts.built()
    try:
        turn = refuse_if_ended(claim_for(built.turns, req, built.settings.require_turn_token))
        pf = built.preflight.check(req.tenant_id, req.template_id)
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
        built.sessions.offer_warm(turn, pf)  # the first call's warm claim becomes one write
    sandbox: dict[str, Any] = {"status": pf.status}
    if pf.status in ("ready", "provisioning"):
        # every tool of the surface, and the template's tools the caller can answer
        sandbox.update(begin_turn_tools(pf.tools, req.client_tools, built.settings))
        sandbox["environment"] = pf.environment
    elif pf.status == "disabled":
        sandbox.update(
            error="SandboxProvisioning", reason="tenant_disabled", error_message=messages.TENANT_DISABLED
        )
    return {"ok": True, "sandbox": sandbox}
