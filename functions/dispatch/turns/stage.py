"""The turn's stages. `stage`: the caller's turn, claimed with its token beside the idempotency
claim (`dispatch.call.start`), joined here; an ended turn refused. A turn that could not be claimed
(its table gave no answer) leaves the line as `TurnUnclaimed`: the idempotency stage refuses the
call with a row of its own, and a retry runs it again (the claim's record is not completed)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sandbox_runtime.job_end import pending_jobs

from dispatch.call import Answer, Call, Next, TurnEnd, unavailable
from dispatch.guard import check_turn
from dispatch.turns.flow import refuse_if_ended
from dispatch.turns.store import TurnStoreUnavailable, TurnUnclaimed


def stage(call: Call, then: Next) -> Answer:
    assert call.ahead is not None  # an execute_code: its turn claim went out ahead
    try:
        turn = call.ahead.turn.result()  # a wrong token or another agent's turn: SandboxInvalidRequest
    except TurnStoreUnavailable as exc:
        raise TurnUnclaimed(exc) from None
    call.turn = refuse_if_ended(turn)
    return then(call)


def ending(end: TurnEnd, then: Callable[[TurnEnd], dict[str, Any]]) -> dict[str, Any]:
    """end_turn's first stage: the caller's turn (its token and owner), closed before anything else
    (a session racing this end_turn can no longer activate), and its jobs still running."""
    parts, req = end.parts, end.request
    try:
        turn = parts.turns.get(req.tenant_id, req.turn_id)
    except TurnStoreUnavailable as exc:
        return unavailable(f"turn_store_unavailable:{exc}")
    if turn is None:
        return {"ok": True, "stopped": False}
    check_turn(
        turn,
        req.turn_token,
        required=parts.settings.require_turn_token,
        tenant_id=req.tenant_id,
        agent_id=None,
        turn_id=req.turn_id,
    )
    try:
        parts.turns.end(req.tenant_id, req.turn_id)
    except TurnStoreUnavailable as exc:
        return unavailable(f"turn_store_unavailable:{exc}")
    end.turn = turn
    end.pending = pending_jobs(req.tenant_id, req.turn_id, parts.jobs)
    return then(end)
