"""The turn-token check of every turn action (SPEC §16.5), before anything is counted or touched.

`check(...)` answers the hash the turn must be bound to (first action) or is bound to, or raises
SandboxInvalidRequest (`reason: turn_token_mismatch`) after one pure-JSON log line and the
`SandboxTurnTokenRejected` metric.
The token itself is never logged or stored: only its SHA-256 (turn_token.token_hash).
"""

from __future__ import annotations

from sandbox_common import messages
from sandbox_common import naming as n
from sandbox_common.errors import SandboxInvalidRequest
from sandbox_common.observability import emit_metric, logger
from sandbox_common.turn_token import TurnTokenRejected, verify


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
