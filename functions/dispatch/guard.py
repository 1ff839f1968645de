"""Who may act on a turn, checked before anything is counted or touched: its token, and its owner.

`check(...)` answers the hash the turn must be bound to (first action) or is bound to, or raises
SandboxInvalidRequest (`reason: turn_token_mismatch`) after one pure-JSON log line and the
`SandboxTurnTokenRejected` metric. The token itself is never logged or stored: only its SHA-256
(turn_token.token_hash). `check_turn` is an existing turn's token and owner (end_turn, resume);
get_job checks the token against the hash kept on the job (`check`). Every turn action makes the
check here, whichever capability answers it.
"""

from __future__ import annotations

from sandbox_common import messages
from sandbox_common import naming as n
from sandbox_common.errors import SandboxInvalidRequest
from sandbox_common.observability import emit_metric, logger
from sandbox_common.turn_token import TurnTokenRejected, verify

from dispatch.turns.store import Turn


def check(
    *,
    token: str | None,
    stored_hash: str | None,
    required: bool,
    tenant_id: str,
    agent_id: str | None,
    turn_id: str,
) -> str:
    try:
        return verify(token, stored_hash, required=required)
    except TurnTokenRejected as exc:
        logger.warning(
            "turn token rejected",
            extra={
                "event": "turn_token_rejected",
                "reason": exc.reason,
                "tenant_id": tenant_id,
                "agent_id": agent_id,
                "turn_id": turn_id,
            },
        )
        emit_metric(n.METRIC_TURN_TOKEN_REJECTED)
        raise SandboxInvalidRequest(
            messages.TURN_TOKEN_REJECTED, reason=n.REASON_TURN_TOKEN_MISMATCH
        ) from None


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
    """The hash the turn is (or, for an unknown turn, must be) bound to; SandboxInvalidRequest and
    the metric when the token is missing, malformed or wrong."""
    return check(
        token=token,
        stored_hash=None if turn is None else turn.token_hash,
        required=required,
        tenant_id=tenant_id,
        agent_id=agent_id,
        turn_id=turn_id,
    )


def check_turn(
    turn: Turn, token: str | None, *, required: bool, tenant_id: str, agent_id: str | None, turn_id: str
) -> None:
    """An existing turn's token and owner, before anything is touched (end_turn, resume)."""
    check_token(turn, token, required=required, tenant_id=tenant_id, agent_id=agent_id, turn_id=turn_id)
    check_owner(turn, tenant_id, agent_id)
