"""sandbox-reaper Lambda (SPEC §16.3). Thin: EventBridge schedule → one sweep + refill + hooks.

Events: the scheduled rule's event (anything without `refill`) runs everything; `{"refill":
{"tenant_id", "environment"}}` (an asynchronous invoke, e.g. after a warm claim) refills that
one pool only.
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
    summary = reaper().run(refill_only=only)
    logger.info("reaper_run", extra={"event": "reaper_run", **summary})
    return {"ok": True, **summary}
