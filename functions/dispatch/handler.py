"""dispatch Lambda: the agents' entry point (§4). Thin: parse, route, map errors."""

from __future__ import annotations

import time
import uuid
from typing import Any

from sandbox_common import naming as n
from sandbox_common.errors import SandboxError, SandboxInvalidRequest
from sandbox_common.models import BeginTurnRequest, EndTurnRequest, ExecuteCodeRequest, parse_dispatch_event
from sandbox_common.observability import emit_metric, logger

from . import idempotency, messages
from .dependencies import dispatcher
from .service import internal_failure

_IN_PROGRESS_POLL_SECONDS = 0.25
_ANSWER_MARGIN_SECONDS = 5


@logger.inject_lambda_context(clear_state=True)
def handler(event: Any, context: Any) -> dict[str, Any]:
    started = time.monotonic()
    try:
        request = parse_dispatch_event(event)
        logger.append_keys(action=request.action, tenant_id=request.tenant_id, turn_id=request.turn_id)
        if isinstance(request, BeginTurnRequest):
            return dispatcher().begin_turn(request)
        if isinstance(request, EndTurnRequest):
            return dispatcher().end_turn(request)
        return _execute_code(request, context, started)
    except SandboxInvalidRequest as exc:
        emit_metric(n.METRIC_INVALID_REQUEST)
        logger.warning("invalid_request", extra={"reason": exc.message})
        return exc.to_response()
    except Exception:  # noqa: BLE001 — the agent gets a named error, never a stack trace
        logger.exception("dispatch_unhandled")
        internal_failure("internal_error:unhandled")
        return _failure(SandboxError(messages.INTERNAL), started)


def _failure(failure: SandboxError, started: float) -> dict[str, Any]:
    """A failure answered by the handler itself, with the fields every failure carries (§4.2).
    Its invocation_id has no audit row of its own (the call's row is written, or the request
    never became a call)."""
    return failure.to_response() | {
        "exit_status": failure.exit_status, "exit_code": None, "invocation_id": str(uuid.uuid4()),
        "duration_ms": int((time.monotonic() - started) * 1000),
    }  # fmt: skip


def _execute_code(request: ExecuteCodeRequest, context: Any, started: float) -> dict[str, Any]:
    from aws_lambda_powertools.utilities.idempotency.exceptions import (
        IdempotencyAlreadyInProgressError,
        IdempotencyPersistenceLayerError,
        IdempotencyValidationError,
    )

    config, execute = idempotency.executor()
    config.register_lambda_context(context)
    idempotency.begin(context)
    payload = request.model_dump()
    # Wait for a racing original at most as long as it can run, and never past our own Lambda
    # deadline (answering beats being killed by the runtime with no answer at all).
    wait = dispatcher().settings.call_timeout_seconds + 90
    remaining_ms = getattr(context, "get_remaining_time_in_millis", lambda: None)()
    if remaining_ms is not None:
        wait = min(wait, max(0.0, remaining_ms / 1000 - _ANSWER_MARGIN_SECONDS))
    deadline = time.monotonic() + wait
    while True:
        try:
            stored = execute(request=payload)
            # The code ran here: the full result. A replay: the stored (possibly trimmed) copy.
            return idempotency.result_of_this_invocation() or idempotency.unpack(stored)
        except IdempotencyValidationError:
            raise SandboxInvalidRequest(
                "Invalid request: call_id was already used for a different request (other code, agent, "
                "turn, template or user); use a new call_id."
            ) from None
        except IdempotencyAlreadyInProgressError:
            # A retry racing its original: wait for the original's result rather than run twice.
            if time.monotonic() > deadline:
                # Not audited here: the original attempt writes this call's one audit row.
                return _failure(SandboxError("This call is still running from an earlier attempt; "
                                             "please retry shortly with the same call_id."), started)  # fmt: skip
            time.sleep(_IN_PROGRESS_POLL_SECONDS)
        except IdempotencyPersistenceLayerError as exc:
            ran = idempotency.result_of_this_invocation()
            if ran is not None:
                # Saving the result failed after the code ran and was audited: answer with it.
                # A retry may find the record in progress until it expires (alarmed below).
                logger.error("idempotency_save_failed", extra={"cause": str(exc)[:200]})
                internal_failure("idempotency_store_unavailable:save")
                return ran
            # Without the idempotency store a retry could run twice: fail closed, but audited.
            logger.error("idempotency_store_unavailable", extra={"cause": str(exc)[:200]})
            return dispatcher().refuse_unavailable(request, "idempotency_store_unavailable")
