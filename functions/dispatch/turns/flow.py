"""Who may use a turn: the turn of (tenant, agent), created on first use and bound to its token's
hash; its owner and token checked on every action; an ended turn refused."""

from __future__ import annotations

from sandbox_common import messages
from sandbox_common.errors import SandboxInvalidRequest
from sandbox_common.models import BeginTurnRequest, ExecuteCodeRequest

from dispatch.guard import check_owner, check_token
from dispatch.turns.store import Turn, TurnStore, TurnStoreUnavailable


def claim(
    store: TurnStore, tenant_id: str, agent_id: str, turn_id: str, *, token: str | None, required: bool
) -> Turn:
    """The turn of (tenant, agent), created on first use and bound to the token's hash in the same
    conditional write. Wrong token or anyone else's turn -> invalid request. Does not refuse an
    ended turn (see `refuse_if_ended`): a retry of a finished call is still answered."""
    turn = store.get(tenant_id, turn_id)
    if turn is None:
        bound = check_token(
            None, token, required=required, tenant_id=tenant_id, agent_id=agent_id, turn_id=turn_id
        )
        created = store.create(tenant_id, agent_id, turn_id, bound)
        if created is not None:
            return created
        turn = store.get(tenant_id, turn_id)  # lost the race: someone created it a moment ago
        if turn is None:
            raise TurnStoreUnavailable("turn vanished after a conditional failure")
    check_token(turn, token, required=required, tenant_id=tenant_id, agent_id=agent_id, turn_id=turn_id)
    check_owner(turn, tenant_id, agent_id)
    return turn


def refuse_if_ended(turn: Turn) -> Turn:
    if turn.ended:
        raise SandboxInvalidRequest(messages.TURN_ENDED)
    return turn


def claim_for(store: TurnStore, req: BeginTurnRequest | ExecuteCodeRequest, required: bool) -> Turn:
    """The caller's turn for a request (sent ahead of an execute_code, beside its idempotency
    claim; begin_turn's own first step)."""
    return claim(store, req.tenant_id, req.agent_id, req.turn_id, token=req.turn_token, required=required)
