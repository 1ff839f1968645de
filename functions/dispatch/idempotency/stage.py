"""The outermost stage: the call runs at most once per (tenant, call_id), and leaves exactly one
audit row, whatever happens inside.

`once` holds the call's idempotency claim around the rest of the line (`store.IdempotentCalls`):
the line runs inside the claim, and the call's outcome is rendered there once it unwound — its
answer, and its one audit row, handed to the claim's completion so both land in one transaction.
A retry of a finished call_id gets the stored answer (only when its turn token holds); a retry of
one still running answers call_in_progress; the store unreachable refuses the call with nothing
counted. On its way out, `once` writes on its own a row no completion took; it records whether
the attempt ran here (`Call.entered`) or the store refused it (`Call.unclaimed`), which decide
whether a speculative quota count the call never reached is undone (`dispatch.call.start`).

A stage inside answers `None` (the call's outcome is its answer) or an answer of its own: a
paused tool call's or a launched job's, which has no row yet (the call's row comes when it ends).

`alone` is the same row for a call that has no claim around it any more: a paused call's end.
`refuse` is the row of a call refused before its line ran (outside the agent's scope).
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable
from typing import Any

from sandbox_common import messages
from sandbox_common import naming as n
from sandbox_common.attempts import attempt_fields
from sandbox_common.errors import (
    SandboxError,
    SandboxFailure,
    SandboxInvalidRequest,
    SandboxProvisioning,
    StillRunning,
)
from sandbox_common.models import ExecuteCodeRequest
from sandbox_common.outcome import Outcome
from sandbox_common.windows import utc_now

from dispatch.call import ANSWER_MARGIN_SECONDS, Call, Next
from dispatch.idempotency.store import IdempotencyStoreUnavailable, TimeLeft
from dispatch.parts import Parts
from dispatch.turns.store import TurnStoreUnavailable, TurnUnclaimed

RowHandOff = Callable[..., None]  # (row) or (row, extra transaction items): into the completion


def once(call: Call, then: Next) -> dict[str, Any]:
    """The call's answer. Raises SandboxInvalidRequest (nothing counted, no row) or StillRunning."""
    parts, req = call.parts, call.request
    assert call.ahead is not None  # a call with a claim: its requests went out ahead
    calls = parts.calls
    attempt = attempt_fields(req, call.invocation_id, utc_now())
    try:
        try:
            response = calls.run_once(
                req, call.context, functools.partial(attempted, call, then), attempt=attempt
            )
        except IdempotencyStoreUnavailable:
            call.unclaimed = True  # refused with nothing counted: a speculative count is undone
            call.ahead.turn.result()  # a wrong token is refused as such, whatever the store did
            return refuse(
                parts, req, SandboxError(messages.INTERNAL, failure_reason="idempotency_store_unavailable")
            )
        except (StillRunning, SandboxInvalidRequest):
            call.ahead.turn.result()
            raise
        call.ahead.turn.result()  # a replayed answer goes only to the turn's token holder
        return response
    except (TurnStoreUnavailable, TurnUnclaimed) as exc:
        return refuse(
            parts,
            req,
            SandboxProvisioning(
                messages.PREFLIGHT_UNAVAILABLE,
                reason="preflight_unavailable",
                failure_reason=f"preflight_unavailable:{exc}",
            ),
        )
    finally:
        calls.rows.flush(call.invocation_id, parts.audit_writer)  # a row no completion took: on its own


def attempted(call: Call, then: Next, time_left: TimeLeft) -> dict[str, Any]:
    """One attempt inside the claim: the rest of the line, then its outcome rendered — the answer,
    and the row handed to the completion. `time_left` = seconds the Lambda has left (None outside
    Lambda): every wait inside is bounded by it, so the call answers and audits in time."""
    call.entered = True
    if time_left is not None:
        call.deadline = time.monotonic() + time_left() - ANSWER_MARGIN_SECONDS
    outcome = call.outcome
    outcome.started_at = utc_now()
    background = bool(call.request.background)
    event = "job_submit_internal_error" if background else "execute_code_internal_error"
    with outcome.failures_answered(event, passes=(TurnUnclaimed,)):
        answer = then(call)
        if answer is not None:  # a paused tool call, a launched job: their row comes when they end
            return answer
    if not background:  # a failed submit's row says nothing of a session
        if call.session is not None and call.session.source is not None:
            outcome.add(**{n.FIELD_SESSION_SOURCE: call.session.source})
        outcome.response_extra.update(call.retries.response_fields())
        outcome.audit_extra.update(call.retries.audit_fields())
    hand = functools.partial(call.parts.calls.rows.hand, call.invocation_id)
    record(call.parts, outcome.finish(), call.price, hand, call.record_items)
    return outcome.response()


def alone(call: Call, then: Next) -> dict[str, Any]:
    """A paused call's end: its row, written on its own (its claim was completed with the pause),
    and the answer its call_id now replays."""
    then(call)
    outcome = call.outcome
    price = call.parts.accounting.price_per_call() if outcome.ran_code else 0.0
    record(call.parts, outcome.finish(), price)
    response = outcome.response()
    call.parts.calls.replace_answer(outcome.request, response)  # a retry replays the end, not the pause
    return response


def record(
    parts: Parts,
    outcome: Outcome,
    price: float,
    hand: RowHandOff | None = None,
    extra: list[dict[str, Any]] | None = None,
) -> None:
    """The call's one audit row, its log lines and metrics. With `hand` the row is not written
    here: it goes to the idempotency completion, which writes it in the same transaction, with
    `extra` items (an allowlist call's egress reading)."""
    # Every row carries its price: the SSM price when the code ran, else 0; the cost metric
    # reports the same value.
    outcome.estimated_cost_usd = price if outcome.ran_code else 0
    row = outcome.audit_row(parts.settings.audit_retention_days)
    outcome.log(row)
    outcome.emit_metrics(functools.partial(float, outcome.estimated_cost_usd))
    if hand is None:
        parts.audit_writer.write(row)
    elif extra:
        hand(row, extra)
    else:
        hand(row)


def refuse(parts: Parts, req: ExecuteCodeRequest, failure: SandboxFailure) -> dict[str, Any]:
    """Refused before anything may run: nothing counted or run, and still the call's one row."""
    outcome = Outcome(request=req, invocation_id=str(uuid.uuid4()), started_at=utc_now())
    outcome.fail(failure)
    record(parts, outcome.finish(), 0.0)
    return outcome.response()
