"""Lambda entry point of sandbox-quota-check. Thin: parse, decide, map.

Never raises to the caller: an invalid event gets a SandboxInvalidRequest body (nothing
counted), and any unexpected exception becomes a fail-closed refusal.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from sandbox_common import naming
from sandbox_common import windows as clock
from sandbox_common.errors import SandboxInvalidRequest
from sandbox_common.observability import emit_metric, logger
from sandbox_common.quota_contract import parse_quota_event
from sandbox_common.windows import Windows

from . import logic


@logger.inject_lambda_context(clear_state=True)
def handler(event: Any, context: LambdaContext) -> dict[str, Any]:
    windows = Windows.at(clock.utc_now())  # the ONE clock read: keys and resets_at agree
    request = None
    try:
        request = parse_quota_event(event)
        if request.release:
            return logic.release(request, windows).to_response()
        return logic.check_and_increment(request, windows).to_response()
    except SandboxInvalidRequest as exc:
        emit_metric(naming.METRIC_INVALID_REQUEST)
        logger.info("invalid quota request", extra={"error_message": exc.message})
        return exc.to_response()
    except Exception as exc:  # noqa: BLE001 - the breaker fails closed, whatever broke
        return logic.fail_closed(
            request, windows, reason=f"unexpected {type(exc).__name__}", caps=None, exc_info=True
        ).to_response()
