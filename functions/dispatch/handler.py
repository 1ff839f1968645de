"""dispatch Lambda: the agents' entry point (docs/dispatch.md). Thin: the route table answers the
event (`routes.answer`: validated once, then routed); domain exceptions mapped to responses, never
a stack trace."""

from __future__ import annotations

import time
import uuid
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from sandbox_common import messages
from sandbox_common import naming as n
from sandbox_common.errors import SandboxError, SandboxInvalidRequest, StillRunning
from sandbox_common.observability import emit_metric, logger
from sandbox_common.outcome import internal_failure

from dispatch import routes


@logger.inject_lambda_context(clear_state=True)
def handler(event: Any, context: LambdaContext | None) -> dict[str, Any]:
    started = time.monotonic()
    try:
        return routes.answer(event, context)
    except SandboxInvalidRequest as exc:
        emit_metric(n.METRIC_INVALID_REQUEST)
        logger.warning("invalid_request", extra={"reason": exc.message})
        return exc.to_response()
    except StillRunning as exc:
        # Not audited here: the original attempt (or whoever finishes it) writes the call's one row.
        failure = SandboxError(
            messages.STILL_RUNNING, reason=n.REASON_CALL_IN_PROGRESS, retry_after_s=exc.retry_after_s
        )
        return _failure(failure, started)
    except Exception:  # noqa: BLE001 — the agent gets a named error, never a stack trace
        logger.exception("dispatch_unhandled")
        internal_failure("internal_error:unhandled")
        return _failure(SandboxError(messages.INTERNAL), started)


def _failure(failure: SandboxError, started: float) -> dict[str, Any]:
    """A failure answered by the handler itself, with the fields every failure carries (docs/tool-surface.md).
    Its invocation_id has no audit row of its own (the call's row is written, or the request
    never became a call)."""
    return failure.to_response() | {
        "exit_status": failure.exit_status,
        "exit_code": None,
        "invocation_id": str(uuid.uuid4()),
        "duration_ms": int((time.monotonic() - started) * 1000),
    }
