"""sandbox-reaper Lambda. Thin: EventBridge schedule → one sweep + refill + hooks.

Events: the scheduled rule's event (anything else below) runs everything; `{"refill":
{"tenant_id", "environment"}}` (an asynchronous invoke, e.g. after a warm claim) refills that
one pool only; a kill-switch event — `{"kill_switch": {...}}`, a caps parameter's change, the
tenants table's stream records (`reaper.kill_switch_run.scope_of`) — stops the admitted work of
the tenants it names that are killed, and nothing else.
"""

from __future__ import annotations

from typing import Any

from sandbox_common import naming as n
from sandbox_common.errors import SandboxInvalidRequest
from sandbox_common.observability import logger

from .service import reaper


@logger.inject_lambda_context(clear_state=True)
def handler(event: Any, context: Any) -> dict[str, Any]:
    only = None
    if isinstance(event, dict) and isinstance(event.get("refill"), dict):
        tenant, environment = event["refill"].get("tenant_id"), event["refill"].get("environment")
        if not (isinstance(tenant, str) and n.REQUEST_ID_RE.match(tenant) and environment in n.ENVIRONMENTS):
            logger.warning("reaper_invalid_refill_event")
            return {"ok": False, "error": SandboxInvalidRequest.__name__}
        only = (tenant, str(environment))
    elif _announces_a_change(event):
        # Loaded here for cold start alone: the scheduled run's modules do not need it.
        from . import kill_switch_run

        scope = kill_switch_run.scope_of(event, reaper().settings.stage)
        if scope is None:
            logger.warning("reaper_invalid_kill_switch_event")
            return {"ok": False, "error": SandboxInvalidRequest.__name__}
        summary = kill_switch_run.run(reaper(), scope)
        logger.info("reaper_kill_switch_run", extra={"event": "reaper_kill_switch_run", **summary})
        return {"ok": True, n.KILL_SWITCH_EVENT_KEY: summary}
    summary = reaper().run(refill_only=only)
    logger.info("reaper_run", extra={"event": "reaper_run", **summary})
    return {"ok": True, **summary}


def _announces_a_change(event: Any) -> bool:
    """A kill-switch event of any of its three shapes (not the schedule's `Scheduled Event`)."""
    return isinstance(event, dict) and (
        n.KILL_SWITCH_EVENT_KEY in event
        or (event.get("source") == "aws.ssm")
        or isinstance(event.get("Records"), list)
    )
