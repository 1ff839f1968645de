"""Who may use a turn (§4.5, §16.5): the turn of (tenant, agent), created on first use and bound
to its token's hash; its owner and token checked on every action; an ended turn refused."""

from __future__ import annotations

from sandbox_common import messages
from sandbox_common.errors import SandboxInvalidRequest

from dispatch.turns import guard as turn_guard
from dispatch.turns.store import Turn, TurnStore, TurnStoreUnavailable

_LEASE_POLL_SECONDS = 0.1


def check_owner(turn: Turn, tenant_id: str, agent_id: str | None) -> None:
    """Turns are keyed by tenant, so only another agent of the same tenant can hit this; the
    words name no owner and no detail of the turn."""
    if turn.tenant_id != tenant_id or (agent_id is not None and turn.agent_id != agent_id):
        raise SandboxInvalidRequest(messages.TURN_NOT_YOURS)


def check_token(
    turn: Turn | None,
    token: str | None,
    *,
    required: bool,
    tenant_id: str,
    agent_id: str | None,
    turn_id: str,
) -> str:
    """§16.5, before anything is counted, run or touched: the hash the turn is (or, for an unknown
    turn, must be) bound to; SandboxInvalidRequest + metric when the token is missing/malformed/wrong."""
    return turn_guard.check(
        token=token,
        stored_hash=None if turn is None else turn.token_hash,
        required=required,
        tenant_id=tenant_id,
        agent_id=agent_id,
        turn_id=turn_id,
    )


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
